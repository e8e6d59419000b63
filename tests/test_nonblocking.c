// UNILINK_TEST_LINK_SHARED
/* Nonblocking mode (issue 16), as NCCL's config.blocking = 0: init and stream-less calls
 * return UL_IN_PROGRESS, ul_comm_get_async_error reports progress and errors without
 * blocking, and a watchdog can abort from any state. Host backend, thread ranks. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unilink/unilink.h>

#include "reliability_util.h"

#define NR 3

static ul_config_t nb_cfg(int timeout_ms) {
  ul_config_t cfg = cfg_ms(timeout_ms);
  cfg.blocking = 0;
  return cfg;
}

/* Poll until the async error is not UL_IN_PROGRESS (or limit_ms passes). */
static ul_result_t poll_async(ul_comm_t c, int limit_ms) {
  ul_result_t st = UL_IN_PROGRESS;
  double t0 = now_ms();
  while (now_ms() - t0 < limit_ms) {
    cr_assert_eq(ul_comm_get_async_error(c, &st), UL_OK);
    if (st != UL_IN_PROGRESS) break;
    sleep_ms(1);
  }
  return st;
}

typedef struct nb_rank {
  ul_unique_id_t id;
  int rank;
  volatile int *go;
  ul_result_t rc_init, rc_early, st_init, rc_coll, st_coll, rc_p2p, st_p2p;
  int32_t out[4];
  int32_t got;
} nb_rank_t;

static void *nb_thread(void *p) {
  nb_rank_t *t = p;
  if (t->rank != 0)
    while (!__atomic_load_n(t->go, __ATOMIC_ACQUIRE)) sleep_ms(1);
  ul_comm_t c = NULL;
  ul_config_t cfg = nb_cfg(10000);
  t->rc_init = ul_comm_init_rank(&c, &cfg, NR, t->id, t->rank);
  if (t->rank == 0) {
    /* the others have not started: the communicator cannot be ready yet */
    int32_t x = 0;
    t->rc_early = ul_allreduce(&x, &x, 1, UL_INT32, UL_SUM, c, NULL);
    __atomic_store_n(t->go, 1, __ATOMIC_RELEASE);
  }
  t->st_init = poll_async(c, 8000);
  int32_t v[4];
  for (int i = 0; i < 4; i++) v[i] = (t->rank + 1) * (i + 1);
  t->rc_coll = ul_allreduce(v, t->out, 4, UL_INT32, UL_SUM, c, NULL);
  t->st_coll = poll_async(c, 8000);
  /* a ring of send/recv as one group */
  int32_t mine = 100 + t->rank;
  ul_group_start();
  ul_send(&mine, 1, UL_INT32, (t->rank + 1) % NR, c, NULL);
  ul_recv(&t->got, 1, UL_INT32, (t->rank + NR - 1) % NR, c, NULL);
  t->rc_p2p = ul_group_end();
  t->st_p2p = poll_async(c, 8000);
  ul_comm_destroy(c);
  return NULL;
}

Test(nonblocking, init_collective_and_group_return_in_progress, .timeout = 60) {
  ul_unique_id_t id = host_id();
  volatile int go = 0;
  nb_rank_t t[NR];
  pthread_t th[NR];
  for (int r = 0; r < NR; r++) {
    memset(&t[r], 0, sizeof t[r]);
    t[r].id = id;
    t[r].rank = r;
    t[r].go = &go;
    pthread_create(&th[r], NULL, nb_thread, &t[r]);
  }
  for (int r = 0; r < NR; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < NR; r++) {
    cr_expect_eq(t[r].rc_init, UL_IN_PROGRESS, "rank %d init: %s", r, ul_result_name(t[r].rc_init));
    cr_expect_eq(t[r].st_init, UL_OK, "rank %d init ended %s", r, ul_result_name(t[r].st_init));
    cr_expect_eq(t[r].rc_coll, UL_IN_PROGRESS, "rank %d allreduce: %s", r, ul_result_name(t[r].rc_coll));
    cr_expect_eq(t[r].st_coll, UL_OK);
    for (int i = 0; i < 4; i++) cr_expect_eq(t[r].out[i], (1 + 2 + 3) * (i + 1));
    cr_expect_eq(t[r].rc_p2p, UL_IN_PROGRESS, "rank %d group: %s", r, ul_result_name(t[r].rc_p2p));
    cr_expect_eq(t[r].st_p2p, UL_OK);
    cr_expect_eq(t[r].got, 100 + (r + NR - 1) % NR);
  }
  cr_expect_eq(t[0].rc_early, UL_ERR_INVALID_USAGE, "a call before the init ended: %s",
               ul_result_name(t[0].rc_early));
}

/* A watchdog: rank 1 never joins the allreduce; rank 0's call returns at once, the
 * async error stays UL_IN_PROGRESS (the poller is never stuck), and an abort from the
 * polling thread ends it long before the 20 s timeout. */
typedef struct wd_rank {
  ul_unique_id_t id;
  int rank;
  volatile int *done;
  ul_result_t rc_coll, st_mid, rc_abort;
  double call_ms, abort_ms;
} wd_rank_t;

static void *wd_thread(void *p) {
  wd_rank_t *t = p;
  ul_comm_t c = NULL;
  ul_config_t cfg = nb_cfg(20000);
  if (ul_comm_init_rank(&c, &cfg, 2, t->id, t->rank) != UL_IN_PROGRESS) return NULL;
  if (poll_async(c, 8000) != UL_OK) return NULL;
  if (t->rank == 1) {
    while (!__atomic_load_n(t->done, __ATOMIC_ACQUIRE)) sleep_ms(5);
    ul_comm_destroy(c);
    return NULL;
  }
  int32_t x = 1;
  double t0 = now_ms();
  t->rc_coll = ul_allreduce(&x, &x, 1, UL_INT32, UL_SUM, c, NULL);
  t->call_ms = now_ms() - t0;
  sleep_ms(200);
  ul_comm_get_async_error(c, &t->st_mid);
  t0 = now_ms();
  t->rc_abort = ul_comm_abort(c);
  t->abort_ms = now_ms() - t0;
  __atomic_store_n(t->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

Test(nonblocking, watchdog_polls_then_aborts, .timeout = 60) {
  ul_unique_id_t id = host_id();
  volatile int done = 0;
  wd_rank_t t[2];
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    memset(&t[r], 0, sizeof t[r]);
    t[r].id = id;
    t[r].rank = r;
    t[r].done = &done;
    pthread_create(&th[r], NULL, wd_thread, &t[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  cr_expect_eq(t[0].rc_coll, UL_IN_PROGRESS);
  cr_expect_lt(t[0].call_ms, 1000.0, "the call returned after %.0f ms", t[0].call_ms);
  cr_expect_eq(t[0].st_mid, UL_IN_PROGRESS, "async error while pending: %s",
               ul_result_name(t[0].st_mid));
  cr_expect_eq(t[0].rc_abort, UL_OK);
  cr_expect_lt(t[0].abort_ms, 3000.0, "abort took %.0f ms", t[0].abort_ms);
}

/* The creation fails (a rank never arrives): the async error turns into UL_ERR_TIMEOUT,
 * calls say so, destroy frees the handle. An abort during a creation returns at once. */
Test(nonblocking, failed_and_aborted_creation, .timeout = 60) {
  ul_unique_id_t id = host_id();
  ul_comm_t c = NULL;
  ul_config_t cfg = nb_cfg(300);
  cr_assert_eq(ul_comm_init_rank(&c, &cfg, 2, id, 0), UL_IN_PROGRESS);
  cr_assert_not_null(c);
  cr_expect_eq(ul_comm_get_error(c), UL_IN_PROGRESS);
  ul_result_t st = poll_async(c, 5000);
  cr_expect_eq(st, UL_ERR_TIMEOUT, "%s", ul_result_name(st));
  int32_t x = 0;
  cr_expect_eq(ul_allreduce(&x, &x, 1, UL_INT32, UL_SUM, c, NULL), UL_ERR_TIMEOUT);
  cr_expect(strstr(ul_last_error(), "creation failed") != NULL, "%s", ul_last_error());
  cr_expect_eq(ul_comm_destroy(c), UL_OK);

  id = host_id();
  ul_config_t slow = nb_cfg(30000);
  cr_assert_eq(ul_comm_init_rank(&c, &slow, 2, id, 0), UL_IN_PROGRESS);
  sleep_ms(50);
  double t0 = now_ms();
  cr_expect_eq(ul_comm_abort(c), UL_OK);
  cr_expect_lt(now_ms() - t0, 2000.0, "abort of a creation took %.0f ms", now_ms() - t0);

  ul_result_t e;
  cr_expect_eq(ul_comm_get_async_error(NULL, &e), UL_ERR_INVALID_ARG);
}
