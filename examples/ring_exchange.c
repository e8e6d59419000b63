/* ring_exchange: every rank sends a block to its right neighbour and receives one from
 * its left, inside one group (both must progress together, as in NCCL).
 *
 *   ring_exchange [--backend NAME] [--threads N] [--count C]  */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unilink/unilink.h>

static ul_unique_id_t g_id;
static int g_nranks = 4;
static size_t g_count = 100003; /* a prime: chunks do not divide it */

static void *rank_main(void *arg) {
  int rank = (int)(intptr_t)arg;
  ul_comm_t comm;
  if (ul_comm_init_rank(&comm, NULL, g_nranks, g_id, rank) != UL_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, ul_last_error());
    return (void *)1;
  }
  int right = (rank + 1) % g_nranks, left = (rank + g_nranks - 1) % g_nranks;
  int32_t *out = malloc(g_count * sizeof *out), *in = malloc(g_count * sizeof *in);
  for (size_t i = 0; i < g_count; i++) out[i] = (int32_t)(rank * 1000003 + (int)i), in[i] = -1;
  ul_group_start();
  ul_send(out, g_count, UL_INT32, right, comm, NULL);
  ul_recv(in, g_count, UL_INT32, left, comm, NULL);
  ul_result_t rc = ul_group_end();
  intptr_t bad = rc != UL_OK;
  if (bad) fprintf(stderr, "rank %d: group: %s: %s\n", rank, ul_result_name(rc), ul_comm_last_error(comm));
  for (size_t i = 0; i < g_count && !bad; i++)
    if (in[i] != (int32_t)(left * 1000003 + (int)i)) {
      fprintf(stderr, "rank %d: element %zu is %d, expected %d\n", rank, i, in[i], left * 1000003 + (int)i);
      bad = 1;
    }
  if (rank == 0 && !bad) printf("ring exchange of %zu int32 on %d ranks: verified\n", g_count, g_nranks);
  free(out);
  free(in);
  ul_comm_destroy(comm);
  return (void *)bad;
}

int main(int argc, char **argv) {
  const char *backend = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) g_nranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--count") && i + 1 < argc) g_count = strtoull(argv[++i], NULL, 0);
    else {
      fprintf(stderr, "usage: %s [--backend NAME] [--threads N] [--count C]\n", argv[0]);
      return 2;
    }
  }
  if (g_nranks < 1 || g_nranks > 256) return 2;
  if (ul_get_unique_id(backend, &g_id) != UL_OK) {
    fprintf(stderr, "ul_get_unique_id: %s\n", ul_last_error());
    return 1;
  }
  pthread_t th[256];
  for (int r = 0; r < g_nranks; r++) pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
  int failed = 0;
  for (int r = 0; r < g_nranks; r++) {
    void *ret;
    pthread_join(th[r], &ret);
    if (ret) failed = 1;
  }
  return failed;
}
