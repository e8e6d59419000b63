// UNILINK_TEST_LINK_SHARED
/* The sim backend through the public API: thread ranks, real data, modeled time in
 * ul_comm_last_call, modeled links in ul_comm_topology, timeouts and aborts. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unilink/unilink.h>

#define N 4

typedef struct {
  ul_comm_t comm;
  int rank;
  size_t count;
  ul_result_t rc;
  int bad;
  ul_call_info_t info;
} rank_t;

static void *run_allreduce(void *arg) {
  rank_t *r = arg;
  int32_t *buf = malloc(r->count * sizeof *buf);
  for (size_t i = 0; i < r->count; i++) buf[i] = (int32_t)((r->rank + 1) * (int)(i % 5 + 1));
  r->rc = ul_allreduce(buf, buf, r->count, UL_INT32, UL_SUM, r->comm, NULL);
  for (size_t i = 0; r->rc == UL_OK && i < r->count; i++)
    if (buf[i] != (int32_t)(10 * (int)(i % 5 + 1))) r->bad++;
  r->info.struct_size = sizeof r->info;
  ul_comm_last_call(r->comm, &r->info);
  free(buf);
  return NULL;
}

static void init_all(ul_comm_t *comms, const char *backend) {
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = backend;
  cfg.timeout_ms = 20000;
  ul_result_t rc = ul_comm_init_all(comms, &cfg, N, NULL);
  cr_assert_eq(rc, UL_OK, "%s", ul_last_error());
}

Test(sim_backend, allreduce_is_real_and_time_is_modeled, .timeout = 60) {
  ul_comm_t comms[N];
  init_all(comms, "sim:dgx-h100");
  for (size_t count = 1; count <= 4096; count *= 64) {
    rank_t r[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
      r[i] = (rank_t){.comm = comms[i], .rank = i, .count = count};
      pthread_create(&th[i], NULL, run_allreduce, &r[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
      cr_assert_eq(r[i].rc, UL_OK, "rank %d: %s", i, ul_comm_last_error(comms[i]));
      cr_expect_eq(r[i].bad, 0, "rank %d: %d wrong elements for count %zu", i, r[i].bad, count);
      cr_assert_str_eq(r[i].info.backend, "sim");
      cr_assert_gt(r[i].info.modeled_us, 5.0);
      cr_assert(strstr(r[i].info.reason, "modeled on dgx-h100"), "%s", r[i].info.reason);
    }
    /* one float on 4 NVSwitch GPUs: NCCL's tuner picks ring/LL (launch 5 + LL base 6.6 +
     * 6 hops of 0.6 us); 4 bytes launch 1 of 24 channels and 96 of 512 threads
     * (enqueue.cc: 8 B per thread x nranks), so busbw = 369/2 x (1/24 x 96/512) and
     * algbw = busbw x 4/6 GB/s */
    if (count == 1) {
      cr_assert_str_eq(r[0].info.algorithm, "ring");
      cr_assert_float_eq(r[0].info.modeled_us, 15.2 + 4.0 / (369.0 / 2 * (1.0 / 24 * 96 / 512) * 4 / 6 * 1e3), 1e-9);
    }
  }
  for (int i = 0; i < N; i++) ul_comm_destroy(comms[i]);
}

Test(sim_backend, topology_is_modeled, .timeout = 30) {
  ul_comm_t comms[N];
  init_all(comms, "sim:mi300x-8gpu");
  ul_link_info_t links[N];
  cr_assert_eq(ul_comm_topology(comms[1], links, N), UL_OK);
  cr_assert_eq(links[1].kind, UL_LINK_SELF);
  cr_assert_eq(links[0].kind, UL_LINK_MODELED);
  cr_assert_eq(links[0].source, UL_SOURCE_MODELED);
  cr_assert_float_eq(links[0].bandwidth_gbps, 64.0, 1e-9);
  cr_assert(strstr(links[0].description, "xgmi-mi300x x1"), "%s", links[0].description);
  cr_assert(strstr(links[0].description, "confidence high"), "%s", links[0].description);
  for (int i = 0; i < N; i++) ul_comm_destroy(comms[i]);
}

/* A link that rests on one unverified vendor claim says so in the API's link query. */
Test(sim_backend, topology_names_low_confidence, .timeout = 30) {
  ul_comm_t comms[N];
  init_all(comms, "sim:ascend910b-8");
  ul_link_info_t links[N];
  cr_assert_eq(ul_comm_topology(comms[0], links, N), UL_OK);
  cr_assert(strstr(links[1].description, "hccs-910b"), "%s", links[1].description);
  cr_assert(strstr(links[1].description, "confidence low"), "%s", links[1].description);
  for (int i = 0; i < N; i++) ul_comm_destroy(comms[i]);
}

Test(sim_backend, unknown_topology_is_a_clear_error, .timeout = 30) {
  ul_comm_t comms[N];
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "sim:nosuch";
  cr_assert_eq(ul_comm_init_all(comms, &cfg, N, NULL), UL_ERR_INVALID_ARG);
  cr_assert(strstr(ul_last_error(), "nosuch") && strstr(ul_last_error(), "dgx-h100"), "%s",
            ul_last_error());
}

typedef struct {
  ul_unique_id_t id;
  int rank;
  ul_result_t rc;
  ul_comm_t comm;
} join_t;

static void *join(void *arg) {
  join_t *j = arg;
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = 300;
  j->rc = ul_comm_init_rank(&j->comm, &cfg, 3, j->id, j->rank);
  return NULL;
}

Test(sim_backend, init_times_out_when_a_rank_is_missing, .timeout = 30) {
  join_t j[2];
  pthread_t th[2];
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("sim", &id), UL_OK, "%s", ul_last_error());
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < 2; i++) {
    j[i] = (join_t){.id = id, .rank = i};
    pthread_create(&th[i], NULL, join, &j[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
  for (int i = 0; i < 2; i++) cr_assert_eq(j[i].rc, UL_ERR_TIMEOUT);
  cr_assert_lt(ms, 5000.0);
}

typedef struct {
  ul_comm_t comm;
  ul_window_t win;
  ul_result_t rc;
} waiter_t;

static void *wait_forever(void *arg) {
  waiter_t *w = arg;
  w->rc = ul_wait_signal(w->win, 3, 1, NULL);
  return NULL;
}

typedef struct {
  ul_comm_t comm;
  void *base;
  ul_window_t win;
  ul_result_t rc;
} reg_t;

static void *reg(void *arg) {
  reg_t *r = arg;
  r->rc = ul_window_register(r->comm, r->base, 64, &r->win);
  return NULL;
}

Test(sim_backend, one_sided_put_signal_and_abort, .timeout = 30) {
  ul_comm_t comms[2];
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "sim";
  cfg.timeout_ms = 20000;
  cr_assert_eq(ul_comm_init_all(comms, &cfg, 2, NULL), UL_OK, "%s", ul_last_error());
  char bufs[2][64];
  memset(bufs, 0, sizeof bufs);
  reg_t r[2];
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    r[i] = (reg_t){.comm = comms[i], .base = bufs[i]};
    pthread_create(&th[i], NULL, reg, &r[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) cr_assert_eq(r[i].rc, UL_OK, "%s", ul_comm_last_error(comms[i]));
  const char msg[] = "modeled";
  cr_assert_eq(ul_put(msg, sizeof msg, 1, r[0].win, 8, NULL), UL_OK);
  cr_assert_eq(ul_signal(1, r[0].win, 2, NULL), UL_OK);
  cr_assert_eq(ul_wait_signal(r[1].win, 2, 1, NULL), UL_OK);
  cr_assert_str_eq(bufs[1] + 8, "modeled");
  /* a wait nobody satisfies ends with UL_ERR_ABORTED once the comm is aborted */
  waiter_t w = {.comm = comms[1], .win = r[1].win};
  pthread_t wt;
  pthread_create(&wt, NULL, wait_forever, &w);
  struct timespec ts = {0, 50 * 1000000L};
  nanosleep(&ts, NULL);
  cr_assert_eq(ul_comm_abort(comms[1]), UL_OK);
  pthread_join(wt, NULL);
  cr_assert_eq(w.rc, UL_ERR_ABORTED, "%s", ul_result_name(w.rc));
  ul_comm_destroy(comms[0]); /* comms[1] was freed by ul_comm_abort */
}

/* A split communicator keeps its parent's modeled topology (the backend options). */
typedef struct split_job {
  ul_comm_t parent, child;
  ul_result_t rc;
} split_job_t;

static void *split_one(void *arg) {
  split_job_t *j = arg;
  j->rc = ul_comm_split(j->parent, 0, 0, &j->child, NULL);
  return NULL;
}

Test(sim_backend, split_keeps_the_topology, .timeout = 30) {
  ul_comm_t comms[N];
  init_all(comms, "sim:mi300x-8gpu");
  split_job_t jobs[N];
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    jobs[i] = (split_job_t){comms[i], NULL, UL_OK};
    pthread_create(&th[i], NULL, split_one, &jobs[i]);
  }
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++) cr_assert_eq(jobs[i].rc, UL_OK, "%s", ul_comm_last_error(comms[i]));
  ul_link_info_t links[N];
  cr_assert_eq(ul_comm_topology(jobs[1].child, links, N), UL_OK);
  cr_assert(strstr(links[0].description, "xgmi-mi300x x1"), "%s", links[0].description);
  for (int i = 0; i < N; i++) ul_comm_destroy(jobs[i].child), ul_comm_destroy(comms[i]);
}
