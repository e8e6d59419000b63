/* The vector collectives (ul_alltoallv, ul_allgatherv) through the core: backend ABI
 * gating (tables of ABI 1.1 lack the ops), both generic algorithms exact on thread
 * ranks, the count arrays copied at issue (streams, groups), what ul_comm_last_call
 * reports, validation sentences, and the sim backend's modeled cost. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ul_core.h"

/* ------------------------------------------------------------------ ABI gate */

static ul_result_t t_ok_init(char *reason, size_t len) {
  (void)reason, (void)len;
  return UL_OK;
}
static ul_result_t t_caps(ul_backend_caps_t *caps) {
  caps->features = UL_FEATURE_NATIVE_COLL;
  return UL_OK;
}
static ul_result_t t_a2av(ul_backend_comm_t *c, const void *sb, const size_t *sc,
                          const size_t *sd, void *rb, const size_t *rc, const size_t *rd,
                          ul_dtype_t dt, ul_backend_stream_t *s) {
  (void)c, (void)sb, (void)sc, (void)sd, (void)rb, (void)rc, (void)rd, (void)dt, (void)s;
  return UL_OK;
}
static ul_result_t t_agv(ul_backend_comm_t *c, const void *sb, size_t n, void *rb,
                         const size_t *rc, const size_t *rd, ul_dtype_t dt,
                         ul_backend_stream_t *s) {
  (void)c, (void)sb, (void)n, (void)rb, (void)rc, (void)rd, (void)dt, (void)s;
  return UL_OK;
}
static ul_result_t t_barrier(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  (void)c, (void)s;
  return UL_OK;
}

static void setup(void) { ul__registry_reset(); }
static void teardown(void) { ul__registry_reset(); }
TestSuite(vcoll, .init = setup, .fini = teardown);

static uint32_t collectives_of(const char *name) {
  ul_backend_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  cr_assert_eq(ul_backend_query(name, &info), UL_OK, "%s", ul_last_error());
  return info.collectives;
}

Test(vcoll, abi_1_1_coll_table_lacks_the_vector_ops, .timeout = 20) {
  /* Built against ABI 1.1: the table ends at barrier. Whatever lies beyond it (here the
   * new ops, in a real old plugin other data) must never be called. */
  static ul_backend_coll_ops_t old_coll = {.barrier = t_barrier,
                                           .alltoallv = t_a2av,
                                           .allgatherv = t_agv};
  old_coll.struct_size = offsetof(ul_backend_coll_ops_t, alltoallv);
  static ul_backend_coll_ops_t new_coll = {.struct_size = sizeof(ul_backend_coll_ops_t),
                                           .barrier = t_barrier,
                                           .alltoallv = t_a2av,
                                           .allgatherv = t_agv};
  ul_backend_ops_t o = {.abi_version = (UL_BACKEND_ABI_MAJOR << 16) | 1,
                        .struct_size = sizeof(ul_backend_ops_t),
                        .name = "oldabi",
                        .description = "ABI 1.1 coll table",
                        .init = t_ok_init,
                        .query_caps = t_caps,
                        .coll = &old_coll};
  cr_assert_eq(ul__registry_add(&o, NULL, NULL), UL_OK, "%s", ul_last_error());
  ul_backend_ops_t o2 = o;
  o2.abi_version = UL_BACKEND_ABI_VERSION;
  o2.name = "newabi";
  o2.coll = &new_coll;
  cr_assert_eq(ul__registry_add(&o2, NULL, NULL), UL_OK, "%s", ul_last_error());
  ul__backend_t *b;
  cr_assert_eq(ul__registry_find("oldabi", &b), UL_OK);
  cr_assert_null(b->coll.alltoallv);
  cr_assert_null(b->coll.allgatherv);
  cr_assert(b->coll.barrier == t_barrier);
  uint32_t v = (1u << UL_COLL_ALLTOALLV) | (1u << UL_COLL_ALLGATHERV);
  cr_assert_eq(collectives_of("oldabi") & v, 0);
  cr_assert_eq(ul__registry_find("newabi", &b), UL_OK);
  cr_assert(b->coll.alltoallv == t_a2av);
  cr_assert(b->coll.allgatherv == t_agv);
  cr_assert_eq(collectives_of("newabi") & v, v);
  /* generic-layer backends offer both */
  cr_assert_eq(collectives_of("host") & v, v);
}

/* ------------------------------------------------------------- thread ranks */

#define N 3
typedef int (*rank_fn)(ul_comm_t c, int rank);
typedef struct job {
  ul_unique_id_t id;
  int rank;
  rank_fn fn;
} job_t;

static void *rank_main(void *p) {
  job_t *j = p;
  ul_comm_t c;
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = 20000;
  if (ul_comm_init_rank(&c, &cfg, N, j->id, j->rank) != UL_OK) return (void *)1;
  int bad = j->fn(c, j->rank);
  ul_comm_destroy(c);
  return (void *)(intptr_t)bad;
}

static void run(const char *backend, rank_fn fn) {
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id(backend, &id), UL_OK, "%s", ul_last_error());
  pthread_t th[N];
  job_t jobs[N];
  for (int r = 0; r < N; r++) {
    jobs[r] = (job_t){id, r, fn};
    pthread_create(&th[r], NULL, rank_main, &jobs[r]);
  }
  int bad = 0;
  for (int r = 0; r < N; r++) {
    void *ret;
    pthread_join(th[r], &ret);
    bad |= ret != NULL;
  }
  cr_assert_eq(bad, 0, "a rank failed (see stderr)");
}

/* Rank s sends rank d (2*s + d) % 4 elements (zeros included) valued 1000*s + 10*d + i.
 * Send blocks are packed in order after a one-element gap; receive blocks are in
 * reverse rank order with two-element gaps, which must keep their -1. */
static size_t blk(int s, int d) { return (size_t)((2 * s + d) % 4); }
#define CAP 64
static size_t max3(size_t a, size_t b, size_t c) {
  size_t m = a > b ? a : b;
  return m > c ? m : c;
}

static void layout(int me, size_t *sc, size_t *sd, size_t *rc, size_t *rd) {
  size_t off = 1;
  for (int d = 0; d < N; d++) sc[d] = blk(me, d), sd[d] = off, off += sc[d];
  off = 0;
  for (int s = N - 1; s >= 0; s--) off += 2, rc[s] = blk(s, me), rd[s] = off, off += rc[s];
}

static int check_a2av(int me, const int32_t *rb, const size_t *rc, const size_t *rd) {
  for (size_t i = 0; i < CAP; i++) {
    int32_t want = -1;
    for (int s = 0; s < N; s++)
      if (i >= rd[s] && i < rd[s] + rc[s]) want = 1000 * s + 10 * me + (int32_t)(i - rd[s]);
    if (rb[i] != want) {
      fprintf(stderr, "rank %d: recvbuf[%zu] = %d, expected %d\n", me, i, rb[i], want);
      return 1;
    }
  }
  return 0;
}

static void fill_send(int me, int32_t *sb, const size_t *sc, const size_t *sd) {
  for (size_t i = 0; i < CAP; i++) sb[i] = -7;
  for (int d = 0; d < N; d++)
    for (size_t i = 0; i < sc[d]; i++) sb[sd[d] + i] = 1000 * me + 10 * d + (int32_t)i;
}

static int a2av_rank(ul_comm_t c, int me) {
  size_t sc[N], sd[N], rc[N], rd[N];
  int32_t sb[CAP], rb[CAP];
  layout(me, sc, sd, rc, rd);
  fill_send(me, sb, sc, sd);
  for (size_t i = 0; i < CAP; i++) rb[i] = -1;
  if (ul_alltoallv(sb, sc, sd, rb, rc, rd, UL_INT32, c, NULL) != UL_OK) {
    fprintf(stderr, "rank %d: %s\n", me, ul_comm_last_error(c));
    return 1;
  }
  ul_call_info_t info = {.struct_size = sizeof info};
  ul_comm_last_call(c, &info);
  size_t maxb = 0;
  for (int j = 0; j < N; j++) maxb = max3(maxb, sc[j], rc[j]);
  const char *want = getenv("VC_WANT_ALGO");
  if (info.coll != UL_COLL_ALLTOALLV || info.bytes != maxb * 4 ||
      (want && strcmp(info.algorithm, want) != 0)) {
    fprintf(stderr, "rank %d: last call coll %d bytes %zu algorithm %s\n", me, (int)info.coll,
            info.bytes, info.algorithm);
    return 1;
  }
  return check_a2av(me, rb, rc, rd);
}

/* allgatherv: rank j gives (j + 2) % 3 elements (rank 1: none) valued 100*j + i, in
 * place on odd ranks. */
static int agv_rank(ul_comm_t c, int me) {
  size_t rc[N], rd[N], off = 0;
  for (int j = N - 1; j >= 0; j--) off += 1, rc[j] = (size_t)((j + 2) % 3), rd[j] = off, off += rc[j];
  int32_t sb[8], rb[CAP];
  for (size_t i = 0; i < CAP; i++) rb[i] = -1;
  for (size_t i = 0; i < rc[me]; i++) sb[i] = 100 * me + (int32_t)i;
  const void *send = sb;
  if (me % 2) {
    memcpy(rb + rd[me], sb, rc[me] * sizeof *sb);
    send = rb + rd[me];
  }
  if (ul_allgatherv(send, rc[me], rb, rc, rd, UL_INT32, c, NULL) != UL_OK) {
    fprintf(stderr, "rank %d: %s\n", me, ul_comm_last_error(c));
    return 1;
  }
  for (size_t i = 0; i < CAP; i++) {
    int32_t want = -1;
    for (int j = 0; j < N; j++)
      if (i >= rd[j] && i < rd[j] + rc[j]) want = 100 * j + (int32_t)(i - rd[j]);
    if (rb[i] != want) {
      fprintf(stderr, "rank %d: allgatherv recvbuf[%zu] = %d, expected %d\n", me, i, rb[i], want);
      return 1;
    }
  }
  return 0;
}

static int both_rank(ul_comm_t c, int me) { return a2av_rank(c, me) | agv_rank(c, me); }

Test(vcoll, direct_on_threads, .timeout = 60) {
  setenv("VC_WANT_ALGO", "direct", 1);
  run("host", both_rank);
  unsetenv("VC_WANT_ALGO");
}

Test(vcoll, pairwise_forced, .timeout = 60) {
  setenv("UNILINK_ALGO", "alltoallv:pairwise,allgatherv:pairwise", 1);
  setenv("VC_WANT_ALGO", "pairwise", 1);
  run("host", both_rank);
  unsetenv("UNILINK_ALGO");
  unsetenv("VC_WANT_ALGO");
}

/* The arrays are the caller's only until the call returns: a stream runs the call later,
 * so the core must have copied them. */
static int stream_rank(ul_comm_t c, int me) {
  ul_stream_t s;
  if (ul_stream_create(c, &s) != UL_OK) return 1;
  size_t sc[N], sd[N], rc[N], rd[N], keep_rc[N], keep_rd[N];
  int32_t sb[CAP], rb[CAP];
  layout(me, sc, sd, rc, rd);
  memcpy(keep_rc, rc, sizeof rc), memcpy(keep_rd, rd, sizeof rd);
  fill_send(me, sb, sc, sd);
  for (size_t i = 0; i < CAP; i++) rb[i] = -1;
  /* hold the stream's worker on a barrier first so the alltoallv surely runs later */
  int bad = ul_barrier(c, s) != UL_OK;
  bad |= ul_alltoallv(sb, sc, sd, rb, rc, rd, UL_INT32, c, s) != UL_OK;
  for (int j = 0; j < N; j++) sc[j] = rc[j] = 999, sd[j] = rd[j] = SIZE_MAX / 8;
  bad |= ul_stream_synchronize(s) != UL_OK;
  ul_stream_destroy(s);
  if (bad) fprintf(stderr, "rank %d: %s\n", me, ul_comm_last_error(c));
  return bad || check_a2av(me, rb, keep_rc, keep_rd);
}

Test(vcoll, counts_copied_for_streams, .timeout = 60) { run("host", stream_rank); }

static int group_rank(ul_comm_t c, int me) {
  size_t sc[N], sd[N], rc[N], rd[N];
  int32_t sb[CAP], rb[CAP];
  layout(me, sc, sd, rc, rd);
  fill_send(me, sb, sc, sd);
  for (size_t i = 0; i < CAP; i++) rb[i] = -1;
  ul_group_start();
  ul_result_t r = ul_alltoallv(sb, sc, sd, rb, rc, rd, UL_INT32, c, NULL);
  ul_result_t r2 = ul_group_end();
  if (r != UL_OK || r2 != UL_OK) return 1;
  return check_a2av(me, rb, rc, rd);
}

Test(vcoll, inside_a_group, .timeout = 60) { run("host", group_rank); }

/* Modeled as alltoall/allgather sized by the largest per-peer block. */
static int sim_rank(ul_comm_t c, int me) {
  size_t sc[N], sd[N], rc[N], rd[N];
  int32_t sb[CAP], rb[CAP], ab[4 * N], ar[4 * N];
  layout(me, sc, sd, rc, rd);
  fill_send(me, sb, sc, sd);
  for (size_t i = 0; i < CAP; i++) rb[i] = -1;
  size_t maxb = 0;
  for (int j = 0; j < N; j++) maxb = max3(maxb, sc[j], rc[j]);
  ul_call_info_t v = {.struct_size = sizeof v}, a = {.struct_size = sizeof a};
  if (ul_alltoallv(sb, sc, sd, rb, rc, rd, UL_INT32, c, NULL) != UL_OK) return 1;
  ul_comm_last_call(c, &v);
  if (ul_alltoall(ab, ar, maxb, UL_INT32, c, NULL) != UL_OK) return 1;
  ul_comm_last_call(c, &a);
  if (!(v.modeled_us > 0) || v.modeled_us != a.modeled_us || check_a2av(me, rb, rc, rd)) {
    fprintf(stderr, "rank %d: alltoallv modeled %g us, alltoall of %zu: %g us\n", me,
            v.modeled_us, maxb, a.modeled_us);
    return 1;
  }
  return 0;
}

Test(vcoll, sim_models_the_largest_block, .timeout = 60) { run("sim", sim_rank); }

/* Rejections leave a sentence and touch nothing. */
static int invalid_rank(ul_comm_t c, int me) {
  size_t sc[N], sd[N], rc[N], rd[N];
  int32_t sb[CAP], rb[CAP];
  for (int j = 0; j < N; j++) sc[j] = rc[j] = 2, sd[j] = rd[j] = 2 * (size_t)j;
  for (size_t i = 0; i < CAP; i++) sb[i] = rb[i] = -3;
  int bad = 0;
  rd[2] = 3; /* overlaps rank 1's block [2, 4) */
  bad |= ul_alltoallv(sb, sc, sd, rb, rc, rd, UL_INT32, c, NULL) != UL_ERR_INVALID_ARG;
  bad |= strstr(ul_comm_last_error(c), "overlap") == NULL;
  bad |= ul_allgatherv(sb, 2, rb, rc, rd, UL_INT32, c, NULL) != UL_ERR_INVALID_ARG;
  rd[2] = 4;
  bad |= ul_allgatherv(sb, 1, rb, rc, rd, UL_INT32, c, NULL) != UL_ERR_INVALID_ARG;
  bad |= strstr(ul_comm_last_error(c), "sendcount") == NULL;
  bad |= ul_alltoallv(sb, sc, sd, rb, NULL, rd, UL_INT32, c, NULL) != UL_ERR_INVALID_ARG;
  bad |= strstr(ul_comm_last_error(c), "recvcounts is NULL") == NULL;
  rd[0] = SIZE_MAX / 2;
  bad |= ul_alltoallv(sb, sc, sd, rb, rc, rd, UL_INT32, c, NULL) != UL_ERR_INVALID_ARG;
  bad |= strstr(ul_comm_last_error(c), "overflow") == NULL;
  for (size_t i = 0; i < CAP; i++) bad |= sb[i] != -3 || rb[i] != -3;
  if (bad) fprintf(stderr, "rank %d: last error: %s\n", me, ul_comm_last_error(c));
  return bad;
}

Test(vcoll, invalid_arguments, .timeout = 60) { run("host", invalid_rank); }
