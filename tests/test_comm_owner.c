/* The owner fast path (api/src/comm_owner.c, decision 0017): the first thread to take a
 * communicator's turn owns it and runs its blocking calls with plain stores; a second
 * thread, a stream or an abort revokes that for good, after the owner's call in
 * progress has ended. Host backend, 1 rank or 2 thread ranks, exact integer sums. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "reliability_util.h"
#include "ul_core.h"

/* Rank `rank` of an n-rank host communicator (called on the thread that will own it). */
static ul_result_t host_init(ul_comm_t *c, int n, ul_unique_id_t id, int rank) {
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "host";
  cfg.timeout_ms = LONG_MS;
  return ul_comm_init_rank(c, &cfg, n, id, rank);
}

static ul_comm_t solo(void) {
  ul_comm_t c = NULL;
  cr_assert_eq(host_init(&c, 1, host_id(), 0), UL_OK, "%s", ul_last_error());
  return c;
}

static void sum_ok(ul_comm_t c, int32_t v) {
  int32_t out = -1;
  cr_assert_eq(ul_allreduce(&v, &out, 1, UL_INT32, UL_SUM, c, NULL), UL_OK, "%s", ul_last_error());
  cr_assert_eq(out, v);
}

static uint64_t last_seq(ul_comm_t c) {
  ul_call_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  cr_assert_eq(ul_comm_last_call(c, &info), UL_OK, "%s", ul_last_error());
  return info.sequence;
}

Test(owner, first_caller_owns_and_keeps_order, .timeout = 30) {
  ul_comm_t c = solo();
  uint64_t issued = __atomic_load_n(&c->issue_ticket, __ATOMIC_ACQUIRE);
  for (int i = 0; i < 1000; i++) sum_ok(c, i);
  /* the fast path was taken (membarrier is there on every Linux this project supports:
   * a machine without it would make every communicator shared, and this fails) */
  cr_assert_eq(__atomic_load_n(&c->owner, __ATOMIC_ACQUIRE), (uintptr_t)pthread_self());
  cr_assert_eq(__atomic_load_n(&c->owner_busy, __ATOMIC_ACQUIRE), 0);
  cr_assert_eq(__atomic_load_n(&c->owner_crit, __ATOMIC_ACQUIRE), 0);
  cr_assert_eq(c->issue_ticket, issued + 1000);
  cr_assert_eq(c->exec_ticket, c->issue_ticket);
  cr_assert_eq(last_seq(c), c->seq);
  cr_assert_eq(ul_comm_destroy(c), UL_OK);
}

typedef struct hammer {
  ul_comm_t c;
  int n, base;
  int bad;
  ul_result_t rc;
} hammer_t;

static void *hammer_main(void *p) {
  hammer_t *h = p;
  for (int i = 0; i < h->n && h->rc == UL_OK; i++) {
    int32_t v = h->base + i, out = -1;
    h->rc = ul_allreduce(&v, &out, 1, UL_INT32, UL_SUM, h->c, NULL);
    if (out != v) h->bad++;
  }
  return NULL;
}

/* Two threads on one communicator after the owner has run: every ticket is taken
 * once and run once. Without the revocation (or without its wait for the owner's call)
 * a plain ticket store and a locked add race and a ticket is lost or run twice: a
 * count below or a hang. */
Test(owner, second_thread_revokes_then_both_run_in_order, .timeout = 60) {
  ul_comm_t c = solo();
  for (int i = 0; i < 10; i++) sum_ok(c, i);
  cr_assert_eq(c->owner, (uintptr_t)pthread_self());
  uint64_t seq0 = c->seq;
  hammer_t h[2] = {{c, 20000, 0, 0, UL_OK}, {c, 20000, 1000000, 0, UL_OK}};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, hammer_main, &h[1]), 0);
  hammer_main(&h[0]); /* the owner keeps calling while the other thread revokes it */
  pthread_join(th, NULL);
  for (int k = 0; k < 2; k++) {
    cr_assert_eq(h[k].rc, UL_OK, "thread %d: %s", k, ul_result_name(h[k].rc));
    cr_assert_eq(h[k].bad, 0, "thread %d: %d wrong sums", k, h[k].bad);
  }
  cr_assert_eq(c->owner, UL__OWNER_SHARED);
  cr_assert_eq(c->seq, seq0 + 40000);
  cr_assert_eq(c->exec_ticket, c->issue_ticket);
  cr_assert_eq(last_seq(c), c->seq);
  /* shared for good: the owner's calls keep the locked turn */
  sum_ok(c, 7);
  cr_assert_eq(c->owner, UL__OWNER_SHARED);
  cr_assert_eq(ul_comm_destroy(c), UL_OK);
}

/* Two thread ranks. Rank 0's owner is inside an allreduce that rank 1 joins only after
 * 300 ms. Another thread asks rank 0 for its last call meanwhile: it gets the call before
 * at once (it never waits for the owner's call), and after the call the call itself, which
 * the owner, revoked, published under the lock. */
typedef struct pair {
  ul_unique_id_t id;
  int rank;
  ul_comm_t c;
  volatile int *ready; /* counts ranks past their first call (abort test: past init) */
  volatile int inside; /* abort test: rank 0 is about to wait */
  double done_ms;
  uint64_t first_seq;
  int32_t out;
  ul_result_t rc;
} pair_t;

static void *pair_main(void *p) {
  pair_t *t = p;
  t->rc = host_init(&t->c, 2, t->id, t->rank);
  if (t->rc != UL_OK) return NULL;
  int32_t v = t->rank + 1;
  t->rc = ul_allreduce(&v, &t->out, 1, UL_INT32, UL_SUM, t->c, NULL); /* the owner's first */
  if (t->rc != UL_OK) return NULL;
  t->first_seq = t->c->seq;
  __atomic_add_fetch(t->ready, 1, __ATOMIC_ACQ_REL);
  if (t->rank == 1) sleep_ms(300);
  v = 10 * (t->rank + 1);
  t->rc = ul_allreduce(&v, &t->out, 1, UL_INT32, UL_SUM, t->c, NULL);
  t->done_ms = now_ms();
  return NULL;
}

static void pair_fill(pair_t t[2], volatile int *ready) {
  ul_unique_id_t id = host_id();
  memset(t, 0, 2 * sizeof *t);
  for (int r = 0; r < 2; r++) t[r].id = id, t[r].rank = r, t[r].ready = ready;
}

/* Both ranks on threads; returns once rank 0's owner waits inside its second allreduce
 * (rank 1 joins it 300 ms after its first). */
static void pair_start(pair_t t[2], pthread_t th[2], volatile int *ready) {
  pair_fill(t, ready);
  for (int r = 0; r < 2; r++) cr_assert_eq(pthread_create(&th[r], NULL, pair_main, &t[r]), 0);
  while (__atomic_load_n(ready, __ATOMIC_ACQUIRE) < 2) sleep_ms(1);
  sleep_ms(100);
}

Test(owner, reader_never_waits_for_the_owners_call, .timeout = 60) {
  volatile int ready = 0;
  pair_t t[2];
  pthread_t th[2];
  pair_start(t, th, &ready);
  ul_call_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ul_result_t rc = ul_comm_last_call(t[0].c, &info);
  double asked_ms = now_ms();
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  cr_assert_eq(rc, UL_OK, "%s", ul_last_error());
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(t[r].rc, UL_OK, "rank %d: %s", r, ul_result_name(t[r].rc));
    cr_assert_eq(t[r].out, 30);
  }
  cr_assert_lt(asked_ms, t[0].done_ms, "the reader waited for the owner's call");
  cr_assert_eq(info.sequence, t[0].first_seq, "during the call: record %llu, expected %llu",
               (unsigned long long)info.sequence, (unsigned long long)t[0].first_seq);
  cr_assert_eq(t[0].c->owner, UL__OWNER_SHARED);
  cr_assert_eq(t[1].c->owner, (uintptr_t)th[1]);
  cr_assert_eq(last_seq(t[0].c), t[0].c->seq); /* the call's own record, after it */
  cr_assert_gt(t[0].c->seq, t[0].first_seq);
  cr_assert_eq(t[0].c->exec_ticket, t[0].c->issue_ticket);
  for (int r = 0; r < 2; r++) cr_assert_eq(ul_comm_destroy(t[r].c), UL_OK);
}

/* A thread that enqueues on a stream while the owner waits inside a call returns at
 * once (a stream call never waits for the call before it), and its call runs after the
 * owner's: the owner, revoked, ends its turn the locked way and wakes the worker. */
Test(owner, enqueue_while_the_owner_waits, .timeout = 60) {
  volatile int ready = 0;
  pair_t t[2];
  pthread_t th[2];
  pair_start(t, th, &ready);
  ul_stream_t s[2] = {NULL, NULL};
  static int32_t q[2];
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(ul_stream_create(t[r].c, &s[r]), UL_OK, "%s", ul_last_error());
    q[r] = 100 * (r + 1);
  }
  double t0 = now_ms();
  cr_assert_eq(ul_allreduce(&q[0], &q[0], 1, UL_INT32, UL_SUM, t[0].c, s[0]), UL_OK);
  double enq_ms = now_ms() - t0;
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  cr_assert_lt(enq_ms, 150.0, "the enqueue waited %.0f ms for the owner's call", enq_ms);
  cr_assert_eq(ul_allreduce(&q[1], &q[1], 1, UL_INT32, UL_SUM, t[1].c, s[1]), UL_OK);
  for (int r = 0; r < 2; r++) {
    double w0 = now_ms();
    cr_assert_eq(ul_stream_synchronize(s[r]), UL_OK, "%s", ul_last_error());
    cr_assert_lt(now_ms() - w0, 1000.0, "rank %d's queued call took %.0f ms", r, now_ms() - w0);
    cr_assert_eq(t[r].out, 30);
    cr_assert_eq(q[r], 300);
  }
  for (int r = 0; r < 2; r++) cr_assert_eq(ul_stream_destroy(s[r]), UL_OK);
  for (int r = 0; r < 2; r++) cr_assert_eq(ul_comm_destroy(t[r].c), UL_OK);
}

/* A call on a stream runs on the stream's worker thread: the owner hands the turn over
 * and keeps the locked protocol from then on. */
Test(owner, stream_call_makes_the_communicator_shared, .timeout = 30) {
  ul_comm_t c = solo();
  sum_ok(c, 1);
  cr_assert_eq(c->owner, (uintptr_t)pthread_self());
  ul_stream_t s = NULL;
  cr_assert_eq(ul_stream_create(c, &s), UL_OK, "%s", ul_last_error());
  int32_t v = 5, out = -1;
  cr_assert_eq(ul_allreduce(&v, &out, 1, UL_INT32, UL_SUM, c, s), UL_OK, "%s", ul_last_error());
  cr_assert_eq(c->owner, UL__OWNER_SHARED);
  for (int i = 0; i < 100; i++) sum_ok(c, i); /* after the queued call, in issue order */
  cr_assert_eq(ul_stream_synchronize(s), UL_OK);
  cr_assert_eq(out, 5);
  cr_assert_eq(c->exec_ticket, c->issue_ticket);
  cr_assert_eq(ul_stream_destroy(s), UL_OK);
  cr_assert_eq(ul_comm_destroy(c), UL_OK);
}

/* An abort from another thread while rank 0's owner waits in an allreduce that rank 1
 * never joins: the owner leaves with UL_ERR_ABORTED at once, and the abort frees the
 * communicator only after it has left (owner_busy; ASan sees a use after free
 * otherwise). */
static void *stuck_main(void *p) {
  pair_t *t = p;
  t->rc = host_init(&t->c, 2, t->id, t->rank);
  __atomic_add_fetch(t->ready, 1, __ATOMIC_ACQ_REL);
  if (t->rc != UL_OK || t->rank == 1) return NULL;
  int32_t v = 1, out = 0;
  t->rc = ul_allreduce(&v, &out, 1, UL_INT32, UL_SUM, t->c, NULL); /* rank 1 joins this one */
  if (t->rc != UL_OK) return NULL;
  __atomic_store_n(&t->inside, 1, __ATOMIC_RELEASE);
  t->rc = ul_allreduce(&v, &out, 1, UL_INT32, UL_SUM, t->c, NULL);
  t->done_ms = now_ms();
  return NULL;
}

Test(owner, abort_from_another_thread_waits_for_the_owner, .timeout = 30) {
  volatile int inited = 0;
  pair_t t[2];
  pair_fill(t, &inited);
  pthread_t th0;
  cr_assert_eq(pthread_create(&th0, NULL, stuck_main, &t[0]), 0);
  stuck_main(&t[1]);
  cr_assert_eq(t[1].rc, UL_OK, "%s", ul_last_error());
  int32_t v = 2, out = 0;
  cr_assert_eq(ul_allreduce(&v, &out, 1, UL_INT32, UL_SUM, t[1].c, NULL), UL_OK);
  cr_assert_eq(out, 3);
  while (!__atomic_load_n(&t[0].inside, __ATOMIC_ACQUIRE)) sleep_ms(1);
  sleep_ms(100); /* rank 0's owner now waits inside its second allreduce */
  cr_assert_eq(t[0].c->owner, (uintptr_t)th0);
  double t0 = now_ms();
  cr_assert_eq(ul_comm_abort(t[0].c), UL_OK);
  double abort_ms = now_ms();
  pthread_join(th0, NULL);
  cr_assert_eq(t[0].rc, UL_ERR_ABORTED, "got %s", ul_result_name(t[0].rc));
  cr_assert_lt(t[0].done_ms - t0, 5000.0, "the owner left %.0f ms after the abort",
               t[0].done_ms - t0);
  cr_assert_leq(t[0].done_ms, abort_ms, "the abort returned before the owner left its call");
  ul_comm_abort(t[1].c);
}
