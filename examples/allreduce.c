/* allreduce: the portable "hello world" of unilink.
 *
 *   allreduce [--backend NAME] [--threads N | --processes N] [--count C]
 *
 * Ranks are threads of this process (--threads, default 4), or forked processes
 * (--processes), or the processes of an mpirun job (detected). The backend is chosen
 * at run time (--backend, else UNILINK_BACKEND, else auto); no vendor header here.
 * Every rank contributes (rank + 1) * (i % 7 + 1) and checks the exact sum. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unilink/unilink.h>

static ul_unique_id_t g_id;
static int g_nranks = 4;
static size_t g_count = 1 << 20;

static int run_rank(int rank) {
  ul_comm_t comm;
  ul_result_t rc = ul_comm_init_rank(&comm, NULL, g_nranks, g_id, rank);
  if (rc != UL_OK) {
    fprintf(stderr, "rank %d: ul_comm_init_rank: %s: %s\n", rank, ul_result_name(rc), ul_last_error());
    return 1;
  }
  float *buf = malloc(g_count * sizeof *buf);
  for (size_t i = 0; i < g_count; i++) buf[i] = (float)((rank + 1) * (int)(i % 7 + 1));
  rc = ul_allreduce(buf, buf, g_count, UL_FP32, UL_SUM, comm, NULL);
  int bad = 0;
  if (rc != UL_OK) {
    fprintf(stderr, "rank %d: ul_allreduce: %s: %s\n", rank, ul_result_name(rc), ul_comm_last_error(comm));
    bad = 1;
  } else {
    float ranksum = (float)(g_nranks * (g_nranks + 1) / 2);
    for (size_t i = 0; i < g_count && !bad; i++)
      if (buf[i] != ranksum * (float)(i % 7 + 1)) {
        fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", rank, i, buf[i], ranksum * (float)(i % 7 + 1));
        bad = 1;
      }
  }
  if (rank == 0 && !bad) {
    ul_call_info_t info = {.struct_size = sizeof info};
    ul_comm_last_call(comm, &info);
    const char *be;
    ul_comm_backend(comm, &be);
    printf("allreduce of %zu floats on %d ranks (backend %s, algorithm %s, path %s): verified\n",
           g_count, g_nranks, be, info.algorithm, info.path);
    fflush(stdout); /* forked ranks leave with _exit */
  }
  free(buf);
  ul_comm_destroy(comm);
  return bad;
}

static void *thread_main(void *arg) { return (void *)(intptr_t)run_rank((int)(intptr_t)arg); }

int main(int argc, char **argv) {
  const char *backend = NULL;
  int processes = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) g_nranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--processes") && i + 1 < argc) g_nranks = atoi(argv[++i]), processes = 1;
    else if (!strcmp(argv[i], "--count") && i + 1 < argc) g_count = strtoull(argv[++i], NULL, 0);
    else {
      fprintf(stderr, "usage: %s [--backend NAME] [--threads N | --processes N] [--count C]\n", argv[0]);
      return 2;
    }
  }
  if (g_nranks < 1) return 2;
  ul_result_t rc;
  if (ul_launched_by_mpi()) {
    int rank;
    rc = ul_bootstrap_mpi(backend, &g_id, &rank, &g_nranks);
    if (rc != UL_OK) {
      fprintf(stderr, "ul_bootstrap_mpi: %s: %s\n", ul_result_name(rc), ul_last_error());
      return 1;
    }
    return run_rank(rank);
  }
  rc = ul_get_unique_id(backend, &g_id);
  if (rc != UL_OK) {
    fprintf(stderr, "ul_get_unique_id: %s: %s\n", ul_result_name(rc), ul_last_error());
    return 1;
  }
  int failed = 0;
  if (processes) {
    for (int r = 0; r < g_nranks; r++)
      if (fork() == 0) _exit(run_rank(r));
    for (int r = 0; r < g_nranks; r++) {
      int st = 0;
      wait(&st);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
    }
  } else {
    pthread_t th[256];
    if (g_nranks > 256) return 2;
    for (int r = 0; r < g_nranks; r++) pthread_create(&th[r], NULL, thread_main, (void *)(intptr_t)r);
    for (int r = 0; r < g_nranks; r++) {
      void *ret;
      pthread_join(th[r], &ret);
      if (ret) failed = 1;
    }
  }
  return failed;
}
