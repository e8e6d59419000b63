// UNILINK_TEST_LINK_SHARED
/* Reliability through the public API (issue 8): no hang without a name, no lost peer
 * unnoticed, no bad collective arguments accepted in check mode, no stranger joining a
 * host communicator. Every scenario runs on the host backend, with thread ranks and,
 * where the failure is about processes, with fork()ed process ranks. Children report
 * through their exit status: 0 = every check passed, otherwise the number of the first
 * check that failed (its sentence is printed on stderr). See docs/reliability.md. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <unilink/unilink.h>

#include "reliability_util.h"

/* ===================================================================== timeouts */

/* A rank that never calls the collective: the callers return UL_ERR_TIMEOUT within
 * timeout + 20 %, the sentence names the absent rank, and the communicator then
 * reports UL_ERR_TIMEOUT from every later call until destroyed. */
typedef struct to_rank {
  ul_unique_id_t id;
  int rank, n, absent;
  size_t count;
  /* results */
  int init_ok;
  ul_result_t rc, rc_again, rc_barrier, rc_bcast, rc_sticky, rc_finalize, rc_send;
  double elapsed, elapsed_again;
  char msg[512], msg_again[512];
  volatile int *done; /* absent rank waits for the callers before destroying */
} to_rank_t;

static void timeout_scenario(to_rank_t *t, ul_comm_t c) {
  size_t cnt = t->count;
  float *buf = calloc(cnt ? cnt : 1, sizeof *buf);
  double t0 = now_ms();
  t->rc = ul_allreduce(buf, buf, cnt, UL_FP32, UL_SUM, c, NULL);
  t->elapsed = now_ms() - t0;
  snprintf(t->msg, sizeof t->msg, "%s", ul_comm_last_error(c));
  t0 = now_ms();
  t->rc_again = ul_allreduce(buf, buf, cnt, UL_FP32, UL_SUM, c, NULL);
  t->elapsed_again = now_ms() - t0;
  snprintf(t->msg_again, sizeof t->msg_again, "%s", ul_comm_last_error(c));
  t->rc_barrier = ul_barrier(c, NULL);
  t->rc_bcast = ul_broadcast(buf, buf, cnt, UL_FP32, 0, c, NULL);
  t->rc_send = ul_send(buf, 1, UL_FP32, (t->rank + 1) % t->n, c, NULL);
  t->rc_sticky = ul_comm_get_error(c);
  t->rc_finalize = ul_comm_finalize(c);
  free(buf);
}

static void *to_thread(void *p) {
  to_rank_t *t = p;
  ul_comm_t c = NULL;
  ul_config_t cfg = cfg_ms(SHORT_MS);
  if (ul_comm_init_rank(&c, &cfg, t->n, t->id, t->rank) != UL_OK) {
    snprintf(t->msg, sizeof t->msg, "init: %s", ul_last_error());
    return NULL;
  }
  t->init_ok = 1;
  if (t->rank == t->absent) {
    while (!__atomic_load_n(t->done, __ATOMIC_ACQUIRE)) sleep_ms(5);
  } else {
    timeout_scenario(t, c);
  }
  ul_comm_destroy(c);
  return NULL;
}

static void check_timeout_result(const to_rank_t *t) {
  char want[32];
  snprintf(want, sizeof want, "rank %d", t->absent);
  cr_expect_eq(t->rc, UL_ERR_TIMEOUT, "rank %d: allreduce returned %s: %s", t->rank,
               ul_result_name(t->rc), t->msg);
  cr_expect_geq(t->elapsed, SHORT_MS * 0.95, "rank %d: timed out after %.0f ms, before %d ms",
                t->rank, t->elapsed, SHORT_MS);
  cr_expect_leq(t->elapsed, SHORT_MS + LATE_MS, "rank %d: timed out after %.0f ms (> %d + 20%%)",
                t->rank, t->elapsed, SHORT_MS);
  cr_expect(names_rank(t->msg, t->absent), "rank %d: the sentence does not name %s: %s", t->rank,
            want, t->msg);
  cr_expect(strstr(t->msg, "timed out") != NULL, "rank %d: sentence: %s", t->rank, t->msg);
  /* Sticky: every later call reports the timeout at once. */
  cr_expect_eq(t->rc_again, UL_ERR_TIMEOUT, "rank %d: second allreduce: %s", t->rank,
               ul_result_name(t->rc_again));
  cr_expect_lt(t->elapsed_again, 50.0, "rank %d: refused call took %.0f ms", t->rank,
               t->elapsed_again);
  cr_expect(strstr(t->msg_again, "error state") != NULL, "rank %d: %s", t->rank, t->msg_again);
  cr_expect_eq(t->rc_barrier, UL_ERR_TIMEOUT, "rank %d: barrier: %s", t->rank,
               ul_result_name(t->rc_barrier));
  cr_expect_eq(t->rc_bcast, UL_ERR_TIMEOUT, "rank %d: broadcast: %s", t->rank,
               ul_result_name(t->rc_bcast));
  cr_expect_eq(t->rc_send, UL_ERR_TIMEOUT, "rank %d: send: %s", t->rank,
               ul_result_name(t->rc_send));
  cr_expect_eq(t->rc_sticky, UL_ERR_TIMEOUT, "rank %d: ul_comm_get_error: %s", t->rank,
               ul_result_name(t->rc_sticky));
  cr_expect_eq(t->rc_finalize, UL_ERR_TIMEOUT, "rank %d: finalize: %s", t->rank,
               ul_result_name(t->rc_finalize));
}

static void run_thread_timeout(int n, int absent, size_t count) {
  ul_unique_id_t id = host_id();
  to_rank_t r[8];
  pthread_t th[8];
  volatile int done = 0;
  for (int i = 0; i < n; i++) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].id = id, r[i].rank = i, r[i].n = n, r[i].absent = absent, r[i].count = count;
    r[i].done = &done;
    pthread_create(&th[i], NULL, to_thread, &r[i]);
  }
  for (int i = 0; i < n; i++)
    if (i != absent) pthread_join(th[i], NULL);
  __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
  pthread_join(th[absent], NULL);
  for (int i = 0; i < n; i++) cr_assert(r[i].init_ok, "rank %d: %s", i, r[i].msg);
  for (int i = 0; i < n; i++)
    if (i != absent) check_timeout_result(&r[i]);
}

Test(timeout, threads_small_message_names_absent_rank, .timeout = 20) {
  run_thread_timeout(3, 2, 7); /* direct algorithm: the publish barrier waits */
}

Test(timeout, threads_large_message_names_absent_rank, .timeout = 20) {
  run_thread_timeout(3, 1, 1 << 20); /* 4 MiB */
}

Test(timeout, threads_four_ranks_absent_rank_0, .timeout = 20) { run_thread_timeout(4, 0, 1000); }

/* Process ranks: the same contract; the absent rank stays alive (otherwise it is a
 * lost peer, not a timeout) until the callers are done. */
static void run_process_timeout(int n, int absent, size_t count) {
  ul_unique_id_t id = host_id();
  /* Nobody leaves before every caller has timed out: an early exit would turn the
   * others' timeout into a (correctly reported) lost peer. */
  int gate[2], done[2];
  cr_assert_eq(pipe(gate), 0);
  cr_assert_eq(pipe(done), 0);
  pid_t pids[8];
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    cr_assert_neq(pids[i], -1);
    if (pids[i] != 0) continue;
    close(gate[1]);
    close(done[0]);
    ul_comm_t c = NULL;
    ul_config_t cfg = cfg_ms(SHORT_MS);
    ul_result_t rc = ul_comm_init_rank(&c, &cfg, n, id, i);
    CHILD_CHECK(1, rc == UL_OK, "rank %d init: %s", i, ul_last_error());
    if (i == absent) {
      char b;
      while (read(gate[0], &b, 1) < 0 && errno == EINTR) {
      } /* EOF once the parent closes it */
      ul_comm_destroy(c);
      _exit(0);
    }
    to_rank_t t;
    memset(&t, 0, sizeof t);
    t.rank = i, t.n = n, t.absent = absent, t.count = count;
    timeout_scenario(&t, c);
    char b = 'd', g;
    CHILD_CHECK(7, write(done[1], &b, 1) == 1, "rank %d: pipe", i);
    while (read(gate[0], &g, 1) < 0 && errno == EINTR) {
    }
    char want[32];
    snprintf(want, sizeof want, "rank %d", absent);
    CHILD_CHECK(2, t.rc == UL_ERR_TIMEOUT, "rank %d: %s: %s", i, ul_result_name(t.rc), t.msg);
    CHILD_CHECK(3, t.elapsed >= SHORT_MS * 0.95 && t.elapsed <= SHORT_MS + LATE_MS,
                "rank %d: timed out after %.0f ms (timeout %d ms)", i, t.elapsed, SHORT_MS);
    CHILD_CHECK(4, names_rank(t.msg, absent), "rank %d: does not name %s: %s", i, want, t.msg);
    CHILD_CHECK(5, t.rc_again == UL_ERR_TIMEOUT && t.rc_barrier == UL_ERR_TIMEOUT &&
                       t.rc_bcast == UL_ERR_TIMEOUT && t.rc_send == UL_ERR_TIMEOUT &&
                       t.rc_sticky == UL_ERR_TIMEOUT && t.rc_finalize == UL_ERR_TIMEOUT,
                "rank %d: not sticky: again %s barrier %s bcast %s send %s get_error %s "
                "finalize %s",
                i, ul_result_name(t.rc_again), ul_result_name(t.rc_barrier),
                ul_result_name(t.rc_bcast), ul_result_name(t.rc_send),
                ul_result_name(t.rc_sticky), ul_result_name(t.rc_finalize));
    CHILD_CHECK(6, t.elapsed_again < 50.0, "rank %d: refused call took %.0f ms", i,
                t.elapsed_again);
    ul_comm_destroy(c);
    _exit(0);
  }
  close(gate[0]);
  close(done[1]);
  for (int i = 0; i < n - 1; i++) {
    char b;
    if (read(done[0], &b, 1) != 1) break; /* a child died: its status says why */
  }
  close(done[0]);
  close(gate[1]);
  int st[8];
  for (int i = 0; i < n; i++) st[i] = wait_child(pids[i]);
  for (int i = 0; i < n; i++) cr_expect_eq(st[i], 0, "process rank %d failed at step %d", i, st[i]);
}

Test(timeout, processes_small_message_names_absent_rank, .timeout = 20) {
  run_process_timeout(3, 1, 7);
}

/* Large message between process ranks (direct over cross-memory attach or zero-copy):
 * every caller names the absent rank. */
Test(timeout, processes_large_message_names_absent_rank, .timeout = 20) {
  run_process_timeout(3, 2, 1 << 20);
}

/* The ring (no cross-memory attach): rank 1 waits for rank 0, which itself waits for the
 * absent rank 2. Each rank records in its mailbox which collectives it entered, so rank
 * 1's sentence names rank 2, not the rank it happened to wait for. */
Test(timeout, processes_ring_names_absent_rank_not_the_stuck_one, .timeout = 20) {
  setenv("UNILINK_CMA", "0", 1);
  run_process_timeout(3, 2, 1 << 20);
}

/* What the ring case gets right today: a 2-rank ring has one peer to name. */
Test(timeout, processes_large_message_two_ranks, .timeout = 20) {
  run_process_timeout(2, 1, 1 << 20);
}

/* The rendezvous itself: a rank that never calls ul_comm_init_rank. */
Test(timeout, init_names_missing_rank, .timeout = 20) {
  ul_unique_id_t id = host_id();
  ul_comm_t c = (ul_comm_t)0x1;
  ul_config_t cfg = cfg_ms(SHORT_MS);
  double t0 = now_ms();
  ul_result_t rc = ul_comm_init_rank(&c, &cfg, 3, id, 0);
  double el = now_ms() - t0;
  cr_assert_eq(rc, UL_ERR_TIMEOUT, "init: %s: %s", ul_result_name(rc), ul_last_error());
  cr_expect_null(c);
  cr_expect_leq(el, SHORT_MS + LATE_MS, "init timed out after %.0f ms", el);
  cr_expect(strstr(ul_last_error(), "ranks 1, 2") != NULL, "sentence: %s", ul_last_error());
  char prefix[64];
  job_prefix(&id, prefix);
  char list[512];
  cr_expect_eq(job_segments(prefix, list, sizeof list), 0, "left behind: %s", list);
}

/* ================================================================== lost peers */

/* SIGKILL of one of 4 process ranks during 64 MiB allreduces: the three others return
 * UL_ERR_PEER_LOST naming it, and no /dev/shm segment of this job is left afterwards. */
#define KILL_COUNT ((size_t)16 << 20) /* 16 Mi floats = 64 MiB */
#define KILL_RANK 2

Test(peer_loss, sigkill_during_64mib_allreduce, .timeout = 60) {
  const int n = 4;
  ul_unique_id_t id = host_id();
  char prefix[64];
  job_prefix(&id, prefix);
  /* ready: every rank is about to loop; done + gate: survivors leave only after all of
   * them have checked their error (an early exit would be a second lost peer). */
  int ready[2], done[2], gate[2];
  cr_assert_eq(pipe(ready), 0);
  cr_assert_eq(pipe(done), 0);
  cr_assert_eq(pipe(gate), 0);
  pid_t pids[4];
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    cr_assert_neq(pids[i], -1);
    if (pids[i] != 0) continue;
    close(ready[0]);
    close(done[0]);
    close(gate[1]);
    ul_comm_t c = NULL;
    ul_config_t cfg = cfg_ms(LONG_MS);
    ul_result_t rc = ul_comm_init_rank(&c, &cfg, n, id, i);
    CHILD_CHECK(1, rc == UL_OK, "rank %d init: %s", i, ul_last_error());
    float *buf = malloc(KILL_COUNT * sizeof *buf);
    CHILD_CHECK(2, buf != NULL, "rank %d: no memory", i);
    for (size_t k = 0; k < KILL_COUNT; k++) buf[k] = 1.0f;
    char b = 'r';
    CHILD_CHECK(3, write(ready[1], &b, 1) == 1, "rank %d: pipe", i);
    /* Allreduce until the kill interrupts one (the parent kills within 20 calls). */
    int iter = 0;
    for (; iter < 200; iter++) {
      rc = ul_allreduce(buf, buf, KILL_COUNT, UL_FP32, UL_MAX, c, NULL);
      if (rc != UL_OK) break;
    }
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ul_comm_last_error(c));
    ul_result_t sticky = ul_comm_get_error(c), again = ul_barrier(c, NULL);
    b = 'd';
    CHILD_CHECK(8, write(done[1], &b, 1) == 1, "rank %d: pipe", i);
    while (read(gate[0], &b, 1) < 0 && errno == EINTR) {
    }
    CHILD_CHECK(4, rc == UL_ERR_PEER_LOST, "rank %d: iteration %d returned %s: %s", i, iter,
                ul_result_name(rc), msg);
    CHILD_CHECK(5, names_rank(msg, KILL_RANK), "rank %d: sentence does not name rank %d: %s", i,
                KILL_RANK, msg);
    CHILD_CHECK(6, sticky == UL_ERR_PEER_LOST, "rank %d: not sticky", i);
    CHILD_CHECK(7, again == UL_ERR_PEER_LOST, "rank %d: barrier after loss", i);
    ul_comm_destroy(c);
    free(buf);
    _exit(0);
  }
  close(ready[1]);
  for (int i = 0; i < n; i++) {
    char b;
    cr_assert_eq(read(ready[0], &b, 1), 1, "a rank did not get ready");
  }
  close(ready[0]);
  close(done[1]);
  close(gate[0]);
  sleep_ms(150); /* inside the allreduce loop; each call moves 64 MiB per rank */
  cr_assert_eq(kill(pids[KILL_RANK], SIGKILL), 0);
  for (int i = 0; i < n - 1; i++) {
    char b;
    if (read(done[0], &b, 1) != 1) break; /* a survivor died: its status says why */
  }
  close(done[0]);
  /* Reap the killed rank before the survivors destroy their communicators, as a
   * launcher would: a rank still tearing down its 64 MiB mappings answers kill(pid, 0),
   * and the destroy-time sweep would rightly leave its segments (see "known gaps"). */
  int st[4];
  st[KILL_RANK] = wait_child(pids[KILL_RANK]);
  close(gate[1]);
  for (int i = 0; i < n; i++)
    if (i != KILL_RANK) st[i] = wait_child(pids[i]);
  cr_expect_eq(st[KILL_RANK], 1000 + SIGKILL, "rank %d was not killed (status %d)", KILL_RANK,
               st[KILL_RANK]);
  for (int i = 0; i < n; i++)
    if (i != KILL_RANK) cr_expect_eq(st[i], 0, "rank %d failed at step %d", i, st[i]);
  char list[1024];
  cr_expect_eq(job_segments(prefix, list, sizeof list), 0, "segments of the job left: %s", list);
}

/* A peer that aborts its communicator: the others stop waiting at once. */
Test(peer_loss, peer_abort_releases_others, .timeout = 20) {
  ul_unique_id_t id = host_id();
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    ul_comm_t c = NULL;
    ul_config_t cfg = cfg_ms(LONG_MS);
    CHILD_CHECK(1, ul_comm_init_rank(&c, &cfg, 2, id, 1) == UL_OK, "%s", ul_last_error());
    sleep_ms(300);
    ul_comm_abort(c);
    _exit(0);
  }
  ul_comm_t c = NULL;
  ul_config_t cfg = cfg_ms(LONG_MS);
  cr_assert_eq(ul_comm_init_rank(&c, &cfg, 2, id, 0), UL_OK, "%s", ul_last_error());
  int x = 1;
  double t0 = now_ms();
  ul_result_t rc = ul_allreduce(&x, &x, 1, UL_INT32, UL_SUM, c, NULL);
  double el = now_ms() - t0;
  cr_expect_eq(rc, UL_ERR_PEER_LOST, "%s: %s", ul_result_name(rc), ul_comm_last_error(c));
  cr_expect(strstr(ul_comm_last_error(c), "peer rank 1") != NULL &&
                strstr(ul_comm_last_error(c), "aborted") != NULL,
            "sentence: %s", ul_comm_last_error(c));
  cr_expect_lt(el, 3000.0, "released after %.0f ms", el);
  ul_comm_destroy(c);
  cr_expect_eq(wait_child(pid), 0);
}

/* ======================================================================= abort */

typedef struct blocked {
  ul_comm_t c;
  ul_result_t rc;
  double returned_at;
  char msg[512];
  volatile int entered;
} blocked_t;

static void *blocked_allreduce(void *p) {
  blocked_t *b = p;
  static int32_t buf[4096];
  __atomic_store_n(&b->entered, 1, __ATOMIC_RELEASE);
  b->rc = ul_allreduce(buf, buf, 4096, UL_INT32, UL_SUM, b->c, NULL);
  b->returned_at = now_ms();
  /* The communicator is freed by the abort: read the thread's copy of the sentence. */
  snprintf(b->msg, sizeof b->msg, "%s", ul_last_error());
  return NULL;
}

typedef struct init_job {
  ul_unique_id_t id;
  int n, rank, timeout_ms;
  ul_comm_t c;
  ul_result_t rc;
} init_job_t;

static void *init_thread(void *p) {
  init_job_t *j = p;
  ul_config_t cfg = cfg_ms(j->timeout_ms);
  j->rc = ul_comm_init_rank(&j->c, &cfg, j->n, j->id, j->rank);
  return NULL;
}

static void init_threads(int n, int timeout_ms, ul_comm_t *comms) {
  ul_unique_id_t id = host_id();
  init_job_t j[8];
  pthread_t th[8];
  for (int i = 0; i < n; i++) {
    j[i] = (init_job_t){id, n, i, timeout_ms, NULL, UL_OK};
    pthread_create(&th[i], NULL, init_thread, &j[i]);
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < n; i++) {
    cr_assert_eq(j[i].rc, UL_OK, "init rank %d: %s", i, ul_result_name(j[i].rc));
    comms[i] = j[i].c;
  }
}

/* A collective blocked on a peer that never comes, released by ul_comm_abort from
 * another thread in under 100 ms, with UL_ERR_ABORTED; the abort does not wait for the
 * peer (which is idle and never calls anything). */
Test(abort, releases_blocked_collective_within_100ms, .timeout = 20) {
  ul_comm_t c[2];
  init_threads(2, LONG_MS, c);
  blocked_t b = {c[0], UL_OK, 0, "", 0};
  pthread_t th;
  pthread_create(&th, NULL, blocked_allreduce, &b);
  while (!__atomic_load_n(&b.entered, __ATOMIC_ACQUIRE)) sleep_ms(1);
  sleep_ms(300); /* well inside the futex sleep of the wait */
  double t0 = now_ms();
  cr_assert_eq(ul_comm_abort(c[0]), UL_OK);
  double abort_took = now_ms() - t0;
  pthread_join(th, NULL);
  double released = b.returned_at - t0;
  cr_expect_eq(b.rc, UL_ERR_ABORTED, "blocked call returned %s: %s", ul_result_name(b.rc), b.msg);
  cr_expect(strstr(b.msg, "abort") != NULL, "sentence: %s", b.msg);
  cr_expect_lt(released, 100.0, "blocked call returned %.1f ms after the abort", released);
  cr_expect_lt(abort_took, 100.0, "ul_comm_abort took %.1f ms", abort_took);
  /* The peer learns that rank 0 aborted on its next call, instead of waiting. */
  int x = 0;
  t0 = now_ms();
  ul_result_t rc = ul_allreduce(&x, &x, 1, UL_INT32, UL_SUM, c[1], NULL);
  cr_expect_eq(rc, UL_ERR_PEER_LOST, "peer: %s: %s", ul_result_name(rc),
               ul_comm_last_error(c[1]));
  cr_expect_lt(now_ms() - t0, 1000.0, "peer took %.0f ms to notice", now_ms() - t0);
  ul_comm_destroy(c[1]);
}

/* A small broadcast's readers poll its line (the root sends no signal for broadcasts
 * that share a line): a root that never comes still times the reader out at the
 * communicator's timeout, naming the root and what was awaited, and an abort releases a
 * polling reader as promptly as one asleep in the backend's wait. */
typedef struct bcast_wait {
  ul_comm_t c;
  ul_result_t rc;
  double started, returned_at;
  char msg[512];
  volatile int entered;
} bcast_wait_t;

static void *blocked_small_broadcast(void *p) {
  bcast_wait_t *b = p;
  int32_t buf[2] = {0, 0}; /* 8 bytes: packed in a line */
  b->started = now_ms();
  __atomic_store_n(&b->entered, 1, __ATOMIC_RELEASE);
  b->rc = ul_broadcast(buf, buf, 2, UL_INT32, 0, b->c, NULL);
  b->returned_at = now_ms();
  snprintf(b->msg, sizeof b->msg, "%s", ul_last_error());
  return NULL;
}

Test(timeout, small_broadcast_reader_names_the_root, .timeout = 20) {
  ul_comm_t c[2];
  init_threads(2, SHORT_MS, c);
  bcast_wait_t b = {.c = c[1]};
  blocked_small_broadcast(&b); /* rank 0, the root, never calls */
  double el = b.returned_at - b.started;
  cr_expect_eq(b.rc, UL_ERR_TIMEOUT, "reader returned %s: %s", ul_result_name(b.rc), b.msg);
  cr_expect_geq(el, SHORT_MS * 0.95, "timed out after %.0f ms, before %d ms", el, SHORT_MS);
  cr_expect_leq(el, SHORT_MS + LATE_MS, "timed out after %.0f ms (> %d + 20%%)", el, SHORT_MS);
  cr_expect(names_rank(b.msg, 0), "the sentence does not name rank 0: %s", b.msg);
  cr_expect(strstr(b.msg, "timed out") && strstr(b.msg, "line to reach 1"),
            "sentence: %s", b.msg);
  ul_comm_destroy(c[1]);
  ul_comm_destroy(c[0]);
}

Test(abort, releases_polling_broadcast_reader_within_100ms, .timeout = 20) {
  ul_comm_t c[2];
  init_threads(2, LONG_MS, c);
  bcast_wait_t b = {.c = c[1]};
  pthread_t th;
  pthread_create(&th, NULL, blocked_small_broadcast, &b);
  while (!__atomic_load_n(&b.entered, __ATOMIC_ACQUIRE)) sleep_ms(1);
  sleep_ms(300); /* past the yields, in the reader's sleeps */
  double t0 = now_ms();
  cr_assert_eq(ul_comm_abort(c[1]), UL_OK);
  pthread_join(th, NULL);
  double released = b.returned_at - t0;
  cr_expect_eq(b.rc, UL_ERR_ABORTED, "reader returned %s: %s", ul_result_name(b.rc), b.msg);
  cr_expect(strstr(b.msg, "abort") != NULL, "sentence: %s", b.msg);
  cr_expect_lt(released, 100.0, "reader returned %.1f ms after the abort", released);
  ul_comm_destroy(c[0]);
}

/* Abort works from any state: fresh, after successful calls, in error state, on a
 * communicator whose peers are gone, and returns promptly each time. */
Test(abort, from_any_state_never_waits_for_peers, .timeout = 20) {
  ul_comm_t c[3];
  init_threads(3, SHORT_MS, c);
  /* fresh: rank 2 aborts before anything ran; nobody else is calling */
  double t0 = now_ms();
  cr_expect_eq(ul_comm_abort(c[2]), UL_OK);
  cr_expect_lt(now_ms() - t0, 100.0, "abort of a fresh communicator took %.0f ms", now_ms() - t0);
  /* error state: rank 0 calls, rank 2 is gone (aborted) -> PEER_LOST, sticky */
  int x = 1;
  ul_result_t rc = ul_allreduce(&x, &x, 1, UL_INT32, UL_SUM, c[0], NULL);
  cr_expect_eq(rc, UL_ERR_PEER_LOST, "%s: %s", ul_result_name(rc), ul_comm_last_error(c[0]));
  cr_expect_eq(ul_comm_get_error(c[0]), UL_ERR_PEER_LOST);
  t0 = now_ms();
  cr_expect_eq(ul_comm_abort(c[0]), UL_OK);
  cr_expect_lt(now_ms() - t0, 100.0, "abort in error state took %.0f ms", now_ms() - t0);
  /* the last one, alone with two aborted peers */
  t0 = now_ms();
  cr_expect_eq(ul_comm_abort(c[1]), UL_OK);
  cr_expect_lt(now_ms() - t0, 100.0, "abort with peers gone took %.0f ms", now_ms() - t0);
  /* NULL and garbage handles are refused, not dereferenced */
  cr_expect_eq(ul_comm_abort(NULL), UL_ERR_INVALID_ARG);
}

Test(abort, after_successful_calls_and_from_process_rank, .timeout = 20) {
  ul_unique_id_t id = host_id();
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    ul_comm_t c = NULL;
    ul_config_t cfg = cfg_ms(LONG_MS);
    CHILD_CHECK(1, ul_comm_init_rank(&c, &cfg, 2, id, 1) == UL_OK, "%s", ul_last_error());
    int x = 2;
    CHILD_CHECK(2, ul_allreduce(&x, &x, 1, UL_INT32, UL_SUM, c, NULL) == UL_OK, "%s",
                ul_comm_last_error(c));
    CHILD_CHECK(3, x == 3, "sum %d", x);
    /* then never calls again, and exits only after the parent is done */
    sleep_ms(1500);
    ul_comm_destroy(c);
    _exit(0);
  }
  ul_comm_t c = NULL;
  ul_config_t cfg = cfg_ms(LONG_MS);
  cr_assert_eq(ul_comm_init_rank(&c, &cfg, 2, id, 0), UL_OK, "%s", ul_last_error());
  int x = 1;
  cr_assert_eq(ul_allreduce(&x, &x, 1, UL_INT32, UL_SUM, c, NULL), UL_OK);
  blocked_t b = {c, UL_OK, 0, "", 0};
  pthread_t th;
  pthread_create(&th, NULL, blocked_allreduce, &b);
  while (!__atomic_load_n(&b.entered, __ATOMIC_ACQUIRE)) sleep_ms(1);
  sleep_ms(200);
  double t0 = now_ms();
  cr_expect_eq(ul_comm_abort(c), UL_OK);
  pthread_join(th, NULL);
  cr_expect_eq(b.rc, UL_ERR_ABORTED, "%s: %s", ul_result_name(b.rc), b.msg);
  cr_expect_lt(b.returned_at - t0, 100.0, "released %.1f ms after abort", b.returned_at - t0);
  cr_expect_eq(wait_child(pid), 0);
}

/* ================================================================== check mode */

typedef struct ck_rank {
  ul_unique_id_t id;
  int rank, n, env;
  size_t count;
  ul_dtype_t dtype;
  ul_result_t rc, rc_after;
  char msg[512];
} ck_rank_t;

static void *ck_thread(void *p) {
  ck_rank_t *k = p;
  ul_comm_t c = NULL;
  ul_config_t cfg = cfg_ms(LONG_MS);
  if (!k->env) cfg.check = 1;
  k->rc = ul_comm_init_rank(&c, &cfg, k->n, k->id, k->rank);
  if (k->rc != UL_OK) {
    snprintf(k->msg, sizeof k->msg, "init: %s", ul_last_error());
    return NULL;
  }
  double buf[64] = {0};
  k->rc = ul_allreduce(buf, buf, k->count, k->dtype, UL_SUM, c, NULL);
  snprintf(k->msg, sizeof k->msg, "%s", ul_comm_last_error(c));
  /* A mismatch is caught before any data moved: the communicator stays usable. */
  int32_t v = k->rank;
  k->rc_after = ul_allreduce(&v, &v, 1, UL_INT32, UL_SUM, c, NULL);
  if (k->rc_after == UL_OK && v != k->n * (k->n - 1) / 2) k->rc_after = UL_ERR_INTERNAL;
  ul_comm_destroy(c);
  return NULL;
}

static void run_check(int env, int odd, size_t odd_count, ul_dtype_t odd_dtype, const char *what) {
  if (env) setenv("UNILINK_CHECK", "1", 1);
  const int n = 3;
  ul_unique_id_t id = host_id();
  ck_rank_t k[3];
  pthread_t th[3];
  for (int i = 0; i < n; i++) {
    k[i] = (ck_rank_t){id, i, n, env, 8, UL_FP32, UL_OK, UL_OK, ""};
    if (i == odd) k[i].count = odd_count, k[i].dtype = odd_dtype;
    pthread_create(&th[i], NULL, ck_thread, &k[i]);
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  char want[32];
  snprintf(want, sizeof want, "differs on rank %d", odd);
  for (int i = 0; i < n; i++) {
    cr_expect_eq(k[i].rc, UL_ERR_MISMATCH, "rank %d: %s: %s", i, ul_result_name(k[i].rc),
                 k[i].msg);
    cr_expect(strstr(k[i].msg, what) != NULL, "rank %d: does not say '%s': %s", i, what, k[i].msg);
    cr_expect(strstr(k[i].msg, want) != NULL, "rank %d: does not name rank %d: %s", i, odd,
              k[i].msg);
    cr_expect_eq(k[i].rc_after, UL_OK, "rank %d: communicator unusable after the mismatch", i);
  }
}

Test(check_mode, count_mismatch_config, .timeout = 20) { run_check(0, 1, 9, UL_FP32, "count"); }
Test(check_mode, count_mismatch_env, .timeout = 20) { run_check(1, 0, 7, UL_FP32, "count"); }
Test(check_mode, dtype_mismatch_config, .timeout = 20) {
  run_check(0, 2, 8, UL_FP64, "datatype");
}
Test(check_mode, dtype_mismatch_env, .timeout = 20) { run_check(1, 1, 8, UL_INT32, "datatype"); }

/* Without check mode the mismatch is not detected up front (documented): the test
 * pins the default so a silent change of default shows up. */
Test(check_mode, off_by_default, .timeout = 20) {
  unsetenv("UNILINK_CHECK");
  ul_comm_t c[1];
  init_threads(1, LONG_MS, c);
  int32_t v = 5;
  cr_expect_eq(ul_allreduce(&v, &v, 1, UL_INT32, UL_SUM, c[0], NULL), UL_OK);
  ul_call_info_t info = {.struct_size = sizeof info};
  cr_expect_eq(ul_comm_last_call(c[0], &info), UL_OK);
  cr_expect_eq(info.sequence, 1u, "check mode ran an extra collective (sequence %llu)",
               (unsigned long long)info.sequence);
  ul_comm_destroy(c[0]);
}

/* ==================================================================== security */

/* A process holding an id with the right segment name but the wrong token cannot join;
 * the real rank still can, and the segments are 0600 and ours. */
Test(security, forged_token_cannot_join, .timeout = 30) {
  ul_unique_id_t id = host_id();
  char prefix[64];
  job_prefix(&id, prefix);
  init_job_t r0 = {id, 2, 0, LONG_MS, NULL, UL_OK};
  pthread_t th;
  pthread_create(&th, NULL, init_thread, &r0);
  /* Wait until rank 0 created the rendezvous segment, then check its mode. */
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", prefix);
  struct stat st;
  int seen = 0;
  for (int i = 0; i < 2000 && !seen; i++) {
    if (stat(path, &st) == 0) seen = 1;
    else sleep_ms(1);
  }
  cr_assert(seen, "rendezvous segment %s never appeared", path);
  cr_expect_eq(st.st_mode & 0777, 0600, "rendezvous segment mode %03o", st.st_mode & 0777);
  cr_expect_eq(st.st_uid, geteuid(), "rendezvous segment owned by uid %u", st.st_uid);
  /* Forged id: same tag (so the same segment name), another token. */
  ul_unique_id_t forged = id;
  for (int i = 0; i < 16; i++) forged.internal[ID_TOKEN_OFF + i] ^= (char)(0x5a + i);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    ul_comm_t c = NULL;
    ul_config_t cfg = cfg_ms(2000);
    ul_result_t rc = ul_comm_init_rank(&c, &cfg, 2, forged, 1);
    CHILD_CHECK(1, rc == UL_ERR_INVALID_ARG, "forged join returned %s: %s", ul_result_name(rc),
                ul_last_error());
    CHILD_CHECK(2, c == NULL, "forged join gave a communicator");
    CHILD_CHECK(3, strstr(ul_last_error(), "token") != NULL, "sentence: %s", ul_last_error());
    _exit(0);
  }
  cr_expect_eq(wait_child(pid), 0, "forged joiner was not refused");
  /* The rightful rank 1 (another process) joins: the forged attempt took no slot. */
  pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    ul_comm_t c = NULL;
    ul_config_t cfg = cfg_ms(LONG_MS);
    CHILD_CHECK(1, ul_comm_init_rank(&c, &cfg, 2, id, 1) == UL_OK, "%s", ul_last_error());
    void *mem = NULL;
    CHILD_CHECK(2, ul_mem_alloc(c, 1 << 20, &mem) == UL_OK, "%s", ul_comm_last_error(c));
    int32_t v = 2;
    CHILD_CHECK(3, ul_allreduce(&v, &v, 1, UL_INT32, UL_SUM, c, NULL) == UL_OK, "%s",
                ul_comm_last_error(c));
    CHILD_CHECK(4, v == 3, "sum %d", v);
    /* Process mode: ul_mem_alloc memory is a named segment; it must be 0600 and ours. */
    DIR *d = opendir("/dev/shm");
    int checked = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
      if (strncmp(de->d_name, prefix, strlen(prefix)) != 0) continue;
      char p[300];
      snprintf(p, sizeof p, "/dev/shm/%s", de->d_name);
      struct stat s2;
      CHILD_CHECK(5, stat(p, &s2) == 0, "stat %s", p);
      CHILD_CHECK(6, (s2.st_mode & 0777) == 0600 && s2.st_uid == geteuid(),
                  "%s has mode %03o uid %u", p, s2.st_mode & 0777, s2.st_uid);
      checked++;
    }
    if (d) closedir(d);
    CHILD_CHECK(7, checked >= 1, "no named segment of the job to check");
    v = 0;
    CHILD_CHECK(8, ul_allreduce(&v, &v, 1, UL_INT32, UL_SUM, c, NULL) == UL_OK, "%s",
                ul_comm_last_error(c));
    ul_mem_free(c, mem);
    ul_comm_destroy(c);
    _exit(0);
  }
  pthread_join(th, NULL);
  cr_assert_eq(r0.rc, UL_OK, "rank 0 init: %s", ul_result_name(r0.rc));
  int32_t v = 1;
  cr_expect_eq(ul_allreduce(&v, &v, 1, UL_INT32, UL_SUM, r0.c, NULL), UL_OK);
  v = 0;
  cr_expect_eq(ul_allreduce(&v, &v, 1, UL_INT32, UL_SUM, r0.c, NULL), UL_OK);
  cr_expect_eq(wait_child(pid), 0, "rightful rank 1 failed");
  ul_comm_destroy(r0.c);
  char list[512];
  cr_expect_eq(job_segments(prefix, list, sizeof list), 0, "left behind: %s", list);
}

/* A segment squatted under the job's name with a looser mode is refused, not trusted. */
Test(security, squatted_segment_refused, .timeout = 20) {
  ul_unique_id_t id = host_id();
  char prefix[64], name[80];
  job_prefix(&id, prefix);
  snprintf(name, sizeof name, "/%s", prefix);
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0644);
  cr_assert_geq(fd, 0, "shm_open: %s", strerror(errno));
  cr_assert_eq(fchmod(fd, 0644), 0);
  cr_assert_eq(ftruncate(fd, 65536), 0);
  close(fd);
  ul_comm_t c = NULL;
  ul_config_t cfg = cfg_ms(SHORT_MS);
  ul_result_t rc = ul_comm_init_rank(&c, &cfg, 2, id, 1);
  shm_unlink(name);
  cr_expect_neq(rc, UL_OK, "joined a 0644 segment");
  cr_expect_null(c);
  cr_expect(strstr(ul_last_error(), "0600") != NULL, "sentence: %s", ul_last_error());
}

/* A unique id from another source (random bytes) is refused with a sentence. */
Test(security, corrupted_id_refused, .timeout = 10) {
  ul_unique_id_t id = host_id();
  id.internal[0] ^= 0x7f;
  ul_comm_t c = (ul_comm_t)0x1;
  ul_result_t rc = ul_comm_init_rank(&c, NULL, 2, id, 0);
  cr_expect_eq(rc, UL_ERR_INVALID_ARG);
  cr_expect_null(c);
  cr_expect(strstr(ul_last_error(), "unique id") != NULL, "sentence: %s", ul_last_error());
}
