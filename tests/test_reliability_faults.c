// UNILINK_TEST_LINK_SHARED
/* Reliability defects of issue 16 (../shared/reviews/reliability.md), through the public
 * API: mismatched send/recv counts, racing aborts, finalize and destroy with queued
 * stream work, the sim backend's peer abort, topology files and foreign frees, and bad
 * configurations. Each test failed before its fix. See docs/reliability.md. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <unilink/unilink.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static ul_config_t cfg_ms(int timeout_ms) {
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms;
  return cfg;
}

/* n thread ranks of one communicator, each running fn(comm, rank, arg). */
typedef struct trank {
  ul_unique_id_t id;
  int n, rank, timeout_ms;
  void (*fn)(ul_comm_t, int, void *);
  void *arg;
  ul_comm_t comm;
  ul_result_t init_rc;
} trank_t;

static void *trank_main(void *p) {
  trank_t *t = p;
  ul_config_t cfg = cfg_ms(t->timeout_ms);
  t->init_rc = ul_comm_init_rank(&t->comm, &cfg, t->n, t->id, t->rank);
  if (t->init_rc == UL_OK && t->fn) t->fn(t->comm, t->rank, t->arg);
  return NULL;
}

static void run_ranks(const char *backend, int n, int timeout_ms,
                      void (*fn)(ul_comm_t, int, void *), void *arg, ul_comm_t *comms) {
  trank_t t[8];
  pthread_t th[8];
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id(backend, &id), UL_OK, "ul_get_unique_id: %s", ul_last_error());
  for (int r = 0; r < n; r++) {
    t[r] = (trank_t){.id = id, .n = n, .rank = r, .timeout_ms = timeout_ms, .fn = fn, .arg = arg};
    pthread_create(&th[r], NULL, trank_main, &t[r]);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < n; r++) {
    cr_assert_eq(t[r].init_rc, UL_OK, "rank %d init: %s", r, ul_result_name(t[r].init_rc));
    if (comms) comms[r] = t[r].comm;
    else {
      ul_comm_finalize(t[r].comm);
      ul_comm_destroy(t[r].comm);
    }
  }
}

/* ------------------------------------------- send/recv with mismatched counts */

#define POISON 0x7e7e7e7e
typedef struct mm_case {
  size_t scount, rcount; /* int32 elements sent by rank 0, received by rank 1 */
  ul_result_t rc[2];     /* per rank */
  int bad_data;          /* rank 1: first wrong element + 1 */
  ul_result_t after_rc[2];
  int after_bad;
  char sentence[512];
} mm_case_t;

static void mm_ranks(ul_comm_t c, int rank, void *arg) {
  mm_case_t *m = arg;
  size_t cap = (m->scount > m->rcount ? m->scount : m->rcount) + 64;
  int32_t *buf = malloc(cap * sizeof *buf);
  for (size_t i = 0; i < cap; i++) buf[i] = rank == 0 ? (int32_t)(i + 1) : POISON;
  if (rank == 0) {
    m->rc[0] = ul_send(buf, m->scount, UL_INT32, 1, c, NULL);
  } else {
    m->rc[1] = ul_recv(buf, m->rcount, UL_INT32, 0, c, NULL);
    snprintf(m->sentence, sizeof m->sentence, "%s", ul_comm_last_error(c));
    size_t got = m->scount < m->rcount ? m->scount : m->rcount;
    for (size_t i = 0; i < cap && !m->bad_data; i++) {
      int32_t want = i < got ? (int32_t)(i + 1) : POISON;
      if (buf[i] != want) m->bad_data = (int)i + 1;
    }
  }
  /* not sticky, and the two ranks are still in step: a matched pair and a collective */
  for (size_t i = 0; i < 5; i++) buf[i] = rank == 0 ? (int32_t)(100 + i) : 0;
  m->after_rc[rank] = rank == 0 ? ul_send(buf, 5, UL_INT32, 1, c, NULL)
                                : ul_recv(buf, 5, UL_INT32, 0, c, NULL);
  if (rank == 1)
    for (int i = 0; i < 5; i++)
      if (buf[i] != 100 + i && !m->after_bad) m->after_bad = i + 1;
  int32_t one = rank + 1, sum = 0;
  if (ul_allreduce(&one, &sum, 1, UL_INT32, UL_SUM, c, NULL) != UL_OK || sum != 3)
    m->after_bad = -1;
  free(buf);
}

static void run_mismatch(size_t scount, size_t rcount) {
  mm_case_t m = {.scount = scount, .rcount = rcount};
  run_ranks("host", 2, 10000, mm_ranks, &m, NULL);
  cr_expect_eq(m.rc[0], UL_OK, "sender: %s", ul_result_name(m.rc[0]));
  cr_expect_eq(m.rc[1], UL_ERR_MISMATCH, "receiver of %zu for %zu: %s", rcount, scount,
               ul_result_name(m.rc[1]));
  cr_expect(strstr(m.sentence, "counts must be equal") != NULL, "sentence: %s", m.sentence);
  cr_expect_eq(m.bad_data, 0, "receive buffer wrong at element %d (written past it?)",
               m.bad_data - 1);
  cr_expect_eq(m.after_rc[0], UL_OK, "sender afterwards: %s", ul_result_name(m.after_rc[0]));
  cr_expect_eq(m.after_rc[1], UL_OK, "receiver afterwards (sticky?): %s",
               ul_result_name(m.after_rc[1]));
  cr_expect_eq(m.after_bad, 0, "ranks out of step after the mismatch (%d)", m.after_bad);
}

Test(p2p_mismatch, longer_send_truncated_at_receiver, .timeout = 30) { run_mismatch(10, 6); }
Test(p2p_mismatch, shorter_send_reported_at_receiver, .timeout = 30) { run_mismatch(4, 6); }
Test(p2p_mismatch, zero_send_into_nonzero_recv, .timeout = 30) { run_mismatch(0, 3); }
Test(p2p_mismatch, nonzero_send_into_zero_recv, .timeout = 30) { run_mismatch(3, 0); }
/* many chunks against few: the receiver drains the whole message */
Test(p2p_mismatch, multi_chunk_send_into_short_recv, .timeout = 30) {
  run_mismatch(300000, 70000);
}
Test(p2p_mismatch, short_send_into_multi_chunk_recv, .timeout = 30) {
  run_mismatch(70001, 300000);
}

/* ------------------------------------------------------------ racing aborts */

typedef struct race {
  ul_comm_t comm;
  ul_stream_t stream;
  pthread_barrier_t *go;
  ul_result_t rc;
} race_t;

static void *race_abort(void *p) {
  race_t *r = p;
  pthread_barrier_wait(r->go);
  r->rc = ul_comm_abort(r->comm);
  return NULL;
}

static void *race_blocked(void *p) {
  race_t *r = p;
  float x[1000] = {0}, y[1000];
  r->rc = ul_allreduce(x, y, 1000, UL_FP32, UL_SUM, r->comm, NULL);
  return NULL;
}

static void *race_sync(void *p) {
  race_t *r = p;
  r->rc = ul_stream_synchronize(r->stream);
  return NULL;
}

/* rank 0 blocked in an allreduce rank 1 never calls, work queued on a stream (waiting
 * too), a thread in ul_stream_synchronize, and two threads aborting rank 0 at once */
Test(abort_race, two_aborts_with_blocked_call_and_stream_sync, .timeout = 60) {
  for (int rep = 0; rep < 10; rep++) {
    ul_comm_t comms[2];
    run_ranks("host", 2, 20000, NULL, NULL, comms);
    ul_stream_t st = NULL;
    cr_assert_eq(ul_stream_create(comms[0], &st), UL_OK);
    static float sx[4][256], sy[4][256];
    for (int i = 0; i < 4; i++)
      cr_assert_eq(ul_allreduce(sx[i], sy[i], 256, UL_FP32, UL_SUM, comms[0], st), UL_OK);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2); /* the two aborts start together */
    race_t r[4];
    for (int i = 0; i < 4; i++) r[i] = (race_t){.comm = comms[0], .stream = st, .go = &go};
    pthread_t th[4];
    pthread_create(&th[0], NULL, race_blocked, &r[0]);
    pthread_create(&th[1], NULL, race_sync, &r[1]);
    usleep(100000); /* let both wait (a loaded machine may be slow to start them) */
    pthread_create(&th[2], NULL, race_abort, &r[2]);
    pthread_create(&th[3], NULL, race_abort, &r[3]);
    double t0 = now_ms();
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    double el = now_ms() - t0;
    pthread_barrier_destroy(&go);
    cr_expect(el < 5000, "aborts took %.0f ms", el);
    cr_expect(r[0].rc == UL_ERR_ABORTED, "blocked allreduce: %s", ul_result_name(r[0].rc));
    cr_expect(r[1].rc != UL_OK, "stream synchronize of aborted work: %s", ul_result_name(r[1].rc));
    cr_expect(r[2].rc == UL_OK || r[3].rc == UL_OK, "neither abort returned UL_OK");
    for (int i = 2; i < 4; i++)
      cr_expect(r[i].rc == UL_OK || r[i].rc == UL_ERR_INVALID_ARG, "abort: %s",
                ul_result_name(r[i].rc));
    /* the stream outlived its communicator: refuses work, destroy frees it at once */
    cr_expect_neq(ul_stream_synchronize(st), UL_OK);
    cr_expect_eq(ul_stream_destroy(st), UL_OK);
    cr_expect_eq(ul_comm_abort(comms[1]), UL_OK);
    /* a later abort of the freed handle is refused, not a crash */
    cr_expect_eq(ul_comm_abort(comms[0]), UL_ERR_INVALID_ARG);
  }
}

/* ---------------------------------------- finalize/destroy with queued stream work */

typedef struct queued {
  int destroy_only;
  ul_result_t fin_rc[2];
  int bad[2];
} queued_t;

static void queued_ranks(ul_comm_t c, int rank, void *arg) {
  queued_t *q = arg;
  ul_stream_t st = NULL;
  if (ul_stream_create(c, &st) != UL_OK) {
    q->bad[rank] = -1;
    return;
  }
  enum { N = 16, COUNT = 4096 };
  int32_t *in = malloc(N * COUNT * sizeof *in), *out = calloc(N * COUNT, sizeof *out);
  for (int i = 0; i < N * COUNT; i++) in[i] = i + rank;
  for (int k = 0; k < N; k++)
    ul_allreduce(in + k * COUNT, out + k * COUNT, COUNT, UL_INT32, UL_SUM, c, st);
  if (q->destroy_only) {
    /* destroy with the work still queued: waits for it (bounded), no crash */
    q->fin_rc[rank] = ul_comm_destroy(c);
  } else {
    /* finalize must complete the queued work before it returns */
    q->fin_rc[rank] = ul_comm_finalize(c);
    for (int i = 0; i < N * COUNT && !q->bad[rank]; i++)
      if (out[i] != 2 * i + 1) q->bad[rank] = i + 1;
  }
  if (!q->destroy_only) ul_stream_destroy(st);
  else ul_stream_destroy(st); /* orphaned by destroy: frees the handle */
  free(in);
  free(out);
}

Test(stream_lifetime, finalize_completes_queued_work, .timeout = 60) {
  queued_t q = {0};
  ul_comm_t comms[2];
  run_ranks("host", 2, 20000, queued_ranks, &q, comms);
  for (int r = 0; r < 2; r++) {
    cr_expect_eq(q.fin_rc[r], UL_OK, "rank %d finalize: %s", r, ul_result_name(q.fin_rc[r]));
    cr_expect_eq(q.bad[r], 0, "rank %d: result %d not complete when finalize returned", r,
                 q.bad[r] - 1);
    ul_comm_destroy(comms[r]);
  }
}

Test(stream_lifetime, destroy_with_queued_work_is_safe, .timeout = 60) {
  queued_t q = {.destroy_only = 1};
  ul_comm_t comms[2];
  run_ranks("host", 2, 20000, queued_ranks, &q, comms);
  for (int r = 0; r < 2; r++) cr_expect_eq(q.fin_rc[r], UL_OK, "rank %d destroy", r);
}

/* ------------------------------------------------------------------------ sim */

typedef struct simab {
  ul_result_t rc;
  double ms;
  char msg[512];
} simab_t;

static void sim_abort_ranks(ul_comm_t c, int rank, void *arg) {
  simab_t *s = arg;
  if (rank == 1) {
    usleep(200000);
    ul_comm_abort(c);
    return;
  }
  float x[64] = {0}, y[64];
  double t0 = now_ms();
  s->rc = ul_allreduce(x, y, 64, UL_FP32, UL_SUM, c, NULL);
  s->ms = now_ms() - t0;
  snprintf(s->msg, sizeof s->msg, "%s", ul_comm_last_error(c));
}

Test(sim, peer_abort_releases_waiting_rank, .timeout = 30) {
  simab_t s = {0};
  ul_comm_t comms[2];
  run_ranks("sim", 2, 10000, sim_abort_ranks, &s, comms);
  cr_expect_eq(s.rc, UL_ERR_PEER_LOST, "%s: %s", ul_result_name(s.rc), s.msg);
  cr_expect(strstr(s.msg, "peer rank 1") != NULL, "sentence names the aborting rank: %s", s.msg);
  cr_expect_lt(s.ms, 2000.0, "released after %.0f ms (timeout 10000)", s.ms);
  ul_comm_destroy(comms[0]);
}

Test(sim, topology_fifo_refused_at_once, .timeout = 30) {
  char path[] = "/tmp/ul-sim-fifo-XXXXXX";
  cr_assert(mkdtemp(path) != NULL);
  char fifo[64];
  snprintf(fifo, sizeof fifo, "%s/t", path);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  char spec[80];
  snprintf(spec, sizeof spec, "sim:%s", fifo);
  ul_unique_id_t id;
  ul_result_t rc = ul_get_unique_id(spec, &id);
  double t0 = now_ms();
  if (rc == UL_OK) {
    ul_comm_t c = NULL;
    ul_config_t cfg = cfg_ms(1000);
    rc = ul_comm_init_rank(&c, &cfg, 1, id, 0);
    if (c) ul_comm_destroy(c);
  }
  cr_expect_eq(rc, UL_ERR_INVALID_ARG, "FIFO topology: %s", ul_result_name(rc));
  cr_expect(strstr(ul_last_error(), "regular file") != NULL, "sentence: %s", ul_last_error());
  cr_expect_lt(now_ms() - t0, 500.0);
  unlink(fifo);
  rmdir(path);
}

static void sim_free_ranks(ul_comm_t c, int rank, void *arg) {
  ul_result_t *rc = arg;
  if (rank != 0) return;
  int on_stack = 0;
  void *heap = malloc(64), *mine = NULL;
  rc[0] = ul_mem_free(c, &on_stack);
  rc[1] = ul_mem_free(c, heap);
  if (ul_mem_alloc(c, 256, &mine) == UL_OK) {
    rc[2] = ul_mem_free(c, (char *)mine + 8); /* interior pointer */
    rc[3] = ul_mem_free(c, mine);
    rc[4] = ul_mem_free(c, mine); /* double free */
  }
  free(heap);
}

Test(sim, mem_free_of_foreign_pointer_refused, .timeout = 30) {
  ul_result_t rc[5] = {-1, -1, -1, -1, -1};
  run_ranks("sim", 1, 10000, sim_free_ranks, rc, NULL);
  cr_expect_eq(rc[0], UL_ERR_INVALID_ARG, "stack pointer: %s", ul_result_name(rc[0]));
  cr_expect_eq(rc[1], UL_ERR_INVALID_ARG, "malloc pointer: %s", ul_result_name(rc[1]));
  cr_expect_eq(rc[2], UL_ERR_INVALID_ARG, "interior pointer: %s", ul_result_name(rc[2]));
  cr_expect_eq(rc[3], UL_OK, "own allocation: %s", ul_result_name(rc[3]));
  cr_expect_eq(rc[4], UL_ERR_INVALID_ARG, "double free: %s", ul_result_name(rc[4]));
}

/* ------------------------------------------------------- bad configurations */

static ul_result_t init_one(const char *backend, ul_config_t *cfg) {
  ul_unique_id_t id;
  ul_result_t rc = ul_get_unique_id(backend, &id);
  if (rc != UL_OK) return rc;
  ul_comm_t c = NULL;
  rc = ul_comm_init_rank(&c, cfg, 1, id, 0);
  if (c) ul_comm_destroy(c);
  return rc;
}

Test(config, negative_device_refused, .timeout = 20) {
  ul_config_t cfg = cfg_ms(5000);
  cfg.device = -7;
  cr_expect_eq(init_one("host", &cfg), UL_ERR_INVALID_ARG);
  cr_expect(strstr(ul_last_error(), "config.device is -7") != NULL, "%s", ul_last_error());
}

Test(config, blocking_out_of_range_refused, .timeout = 20) {
  ul_config_t cfg = cfg_ms(5000);
  cfg.blocking = 77;
  cr_expect_eq(init_one("host", &cfg), UL_ERR_INVALID_ARG);
  cr_expect(strstr(ul_last_error(), "config.blocking is 77") != NULL, "%s", ul_last_error());
  cfg.blocking = 1;
  cr_expect_eq(init_one("host", &cfg), UL_OK, "%s", ul_last_error());
}

Test(config, unknown_host_option_refused, .timeout = 20) {
  ul_config_t cfg = cfg_ms(5000);
  cr_expect_eq(init_one("host:bogus=1", &cfg), UL_ERR_INVALID_ARG);
  cr_expect(strstr(ul_last_error(), "bogus=1") != NULL, "%s", ul_last_error());
}

/* ------------------------------------------------------------------ security */

/* Another user who reads /dev/shm could pre-create a job's next segment names; with a
 * per-process counter every ul_mem_alloc then failed (EEXIST). Squat the names a counter
 * would use: the allocations must still succeed. Host id layout as in test_reliability.c. */
#define ID_TAG_OFF (64 + 24)
static void squat(const char *tag, int create) {
  char name[96];
  for (int k = 0; k < 64; k++)
    for (int kind = 0; kind < 2; kind++) {
      snprintf(name, sizeof name, "/unilink-%s-%d-%c%d", tag, (int)getpid(), "mw"[kind], k);
      if (!create) {
        shm_unlink(name);
        continue;
      }
      int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0) close(fd);
    }
}

/* rank r of 2 process ranks: squat own names, init, 20 x alloc+free; how many worked */
static int squatted_rank(ul_unique_id_t id, const char *tag, int r, char *err, size_t errlen) {
  squat(tag, 1);
  ul_comm_t c = NULL;
  ul_config_t cfg = cfg_ms(10000);
  ul_result_t rc = ul_comm_init_rank(&c, &cfg, 2, id, r);
  int ok = rc == UL_OK ? 0 : -1;
  if (rc == UL_OK) {
    for (int i = 0; i < 20; i++) {
      void *p = NULL;
      if (ul_mem_alloc(c, 4096, &p) == UL_OK) {
        ok++;
        ul_mem_free(c, p);
      } else if (err) {
        snprintf(err, errlen, "%s", ul_comm_last_error(c));
      }
    }
    ul_comm_finalize(c);
    ul_comm_destroy(c);
  } else if (err) {
    snprintf(err, errlen, "%s", ul_last_error());
  }
  squat(tag, 0);
  return ok;
}

Test(security, squatted_counter_names_do_not_block_alloc, .timeout = 30) {
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("host", &id), UL_OK);
  cr_assert_eq(memcmp(id.internal + 64, "ulh1", 4), 0, "host id layout changed");
  char tag[17];
  for (int i = 0; i < 8; i++) sprintf(tag + 2 * i, "%02x", (unsigned char)id.internal[ID_TAG_OFF + i]);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) _exit(squatted_rank(id, tag, 1, NULL, 0) == 20 ? 0 : 1);
  char err[512] = "";
  int ok = squatted_rank(id, tag, 0, err, sizeof err);
  int st = 0;
  waitpid(pid, &st, 0);
  cr_expect_eq(ok, 20, "rank 0: %d of 20 allocations succeeded: %s", ok, err);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank 1 failed some allocations");
}

/* The stale-segment sweep needs proof the creator is gone: a held lock file
 * unilink-L<pid>-* keeps its segments even when kill(pid, 0) says the pid is dead (as
 * it does from another PID namespace). Emulated with a reaped child's pid. */
Test(security, sweep_spares_segments_of_a_locked_creator, .timeout = 30) {
  pid_t dead = fork();
  cr_assert_neq(dead, -1);
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  char seg[96], lock[96];
  snprintf(seg, sizeof seg, "/unilink-00000000deadbeef-%d-m7", (int)dead);
  snprintf(lock, sizeof lock, "/dev/shm/unilink-L%d-00000000cafef00d", (int)dead);
  int sfd = shm_open(seg, O_CREAT | O_EXCL | O_RDWR, 0600);
  cr_assert_geq(sfd, 0, "shm_open: %s", strerror(errno));
  close(sfd);
  int lfd = open(lock, O_CREAT | O_EXCL | O_RDWR, 0600);
  cr_assert_geq(lfd, 0);
  cr_assert_eq(flock(lfd, LOCK_EX), 0);
  char path[128];
  snprintf(path, sizeof path, "/dev/shm%s", seg);
  ul_unique_id_t id;
  /* a child sweeps: our flock is held by another process for it */
  pid_t sw = fork();
  if (sw == 0) _exit(ul_get_unique_id("host", &id) == UL_OK ? 0 : 1);
  waitpid(sw, NULL, 0);
  int kept = access(path, F_OK) == 0;
  close(lfd); /* the "creator" is gone now */
  sw = fork();
  if (sw == 0) _exit(ul_get_unique_id("host", &id) == UL_OK ? 0 : 1);
  waitpid(sw, NULL, 0);
  int removed = access(path, F_OK) != 0, lock_removed = access(lock, F_OK) != 0;
  shm_unlink(seg);
  unlink(lock);
  cr_expect(kept, "the sweep removed a segment whose creator holds its lock");
  cr_expect(removed, "the sweep left a segment whose creator is gone");
  cr_expect(lock_removed, "the sweep left the stale lock file");
}

/* --------------------------------------------- introspection on thread ranks */

static void barrier_ranks(ul_comm_t c, int rank, void *arg) {
  char (*reason)[256] = arg;
  ul_call_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (ul_barrier(c, NULL) == UL_OK && ul_comm_last_call(c, &info) == UL_OK)
    snprintf(reason[rank], sizeof reason[rank], "%s", info.reason);
}

Test(introspection, thread_barrier_reason_is_true, .timeout = 20) {
  char reason[2][256] = {"", ""};
  run_ranks("host", 2, 10000, barrier_ranks, reason, NULL);
  for (int r = 0; r < 2; r++) {
    cr_expect(strstr(reason[r], "not load/store reachable") == NULL,
              "rank %d: thread ranks are load/store reachable: %s", r, reason[r]);
    cr_expect(strstr(reason[r], "barrier") != NULL, "rank %d: reason: %s", r, reason[r]);
  }
}

Test(introspection, host_device_after_init_all_is_minus_one, .timeout = 20) {
  ul_comm_t comms[2] = {NULL, NULL};
  ul_config_t cfg = cfg_ms(10000);
  cfg.backend = "host";
  int devs[2] = {3, 5};
  cr_assert_eq(ul_comm_init_all(comms, &cfg, 2, devs), UL_OK, "%s", ul_last_error());
  for (int r = 0; r < 2; r++) {
    int d = 99;
    cr_expect_eq(ul_comm_device(comms[r], &d), UL_OK);
    cr_expect_eq(d, -1, "rank %d: ul_comm_device %d, header: -1 for host", r, d);
  }
  for (int r = 0; r < 2; r++) ul_comm_destroy(comms[r]);
}
