// UNILINK_TEST_LINK_SHARED
/* Flight recorder (issue 16): a timeout's sentence names the last operations the rank ran,
 * and UNILINK_DUMP_ON_TIMEOUT writes them with the error as JSON, one file per rank. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unilink/unilink.h>

#include "reliability_util.h"

typedef struct fl_rank {
  ul_unique_id_t id;
  int rank;
  ul_result_t rc1, rc2;
  char msg[512];
  volatile int *done;
} fl_rank_t;

/* Ranks 0 and 1 run allreduce #1 with rank 2, then #2 without it. */
static void *fl_thread(void *p) {
  fl_rank_t *t = p;
  ul_comm_t c = NULL;
  ul_config_t cfg = cfg_ms(400);
  if (ul_comm_init_rank(&c, &cfg, 3, t->id, t->rank) != UL_OK) return NULL;
  int32_t v[2] = {1, 2}, out[2] = {0, 0};
  t->rc1 = ul_allreduce(v, out, 1, UL_INT32, UL_SUM, c, NULL);
  if (t->rank == 2) {
    while (!__atomic_load_n(t->done, __ATOMIC_ACQUIRE)) sleep_ms(5);
  } else {
    t->rc2 = ul_allreduce(v, out, 2, UL_INT32, UL_SUM, c, NULL);
    snprintf(t->msg, sizeof t->msg, "%s", ul_comm_last_error(c));
    if (t->rc2 == UL_ERR_INVALID_ARG) fprintf(stderr, "%s\n", t->msg);
    __atomic_add_fetch(t->done, 1, __ATOMIC_RELEASE);
  }
  ul_comm_destroy(c);
  return NULL;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[16384];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

Test(flight, timeout_names_recent_operations_and_dumps_them, .timeout = 30) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "/tmp/ul-flight-%d-", (int)getpid());
  setenv("UNILINK_DUMP_ON_TIMEOUT", prefix, 1);
  ul_unique_id_t id = host_id();
  volatile int done = 0;
  fl_rank_t t[3];
  pthread_t th[3];
  for (int r = 0; r < 3; r++) {
    memset(&t[r], 0, sizeof t[r]);
    t[r].id = id;
    t[r].rank = r;
    t[r].done = &done;
    pthread_create(&th[r], NULL, fl_thread, &t[r]);
  }
  /* rank 2 leaves once one caller is done; the other caller times out on its own */
  for (int r = 0; r < 3; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(t[r].rc1, UL_OK);
    cr_assert_eq(t[r].rc2, UL_ERR_TIMEOUT, "rank %d: %s", r, ul_result_name(t[r].rc2));
    cr_expect(strstr(t[r].msg, "recent here: allreduce #1 4 B ok") != NULL, "%s", t[r].msg);
    cr_expect(strstr(t[r].msg, "allreduce #2 8 B UL_ERR_TIMEOUT") != NULL, "%s", t[r].msg);
    cr_expect(strstr(t[r].msg, "[UL_ERR_TIMEOUT]") != NULL, "%s", t[r].msg);
    char path[96];
    snprintf(path, sizeof path, "%s%d", prefix, r);
    char *j = slurp(path);
    cr_assert_not_null(j, "no dump at %s", path);
    cr_expect(strstr(j, "\"rank\": ") != NULL);
    cr_expect(strstr(j, "\"seq\": 1, \"coll\": \"allreduce\", \"bytes\": 4") != NULL, "%s", j);
    cr_expect(strstr(j, "\"seq\": 2, \"coll\": \"allreduce\", \"bytes\": 8") != NULL, "%s", j);
    cr_expect(strstr(j, "\"state\": \"UL_ERR_TIMEOUT\"") != NULL, "%s", j);
    cr_expect(strstr(j, "timed out") != NULL, "the error sentence is in the dump: %s", j);
    unlink(path);
  }
  char path[96];
  snprintf(path, sizeof path, "%s2", prefix);
  cr_expect(access(path, F_OK) != 0, "rank 2 did not time out and wrote no dump");
}

Test(flight, no_dump_without_the_variable, .timeout = 30) {
  unsetenv("UNILINK_DUMP_ON_TIMEOUT");
  ul_unique_id_t id = host_id();
  ul_comm_t c = NULL;
  ul_config_t cfg = cfg_ms(200);
  cr_assert_eq(ul_comm_init_rank(&c, &cfg, 1, id, 0), UL_OK);
  int32_t v = 3, out = 0;
  for (int i = 0; i < 40; i++) cr_assert_eq(ul_allreduce(&v, &out, 1, UL_INT32, UL_SUM, c, NULL), UL_OK);
  cr_expect_eq(out, 3);
  ul_comm_destroy(c);
}
