/* Plain C driver of the reliability paths for ThreadSanitizer (Criterion does not start
 * under TSan here: "Could not initialize inheritable arena"). Thread ranks of the host
 * backend, public API only:
 *   1. data paths: allreduce (direct and ring sizes), broadcast, allgather, barrier,
 *      send/recv around a ring, checked exactly, several rounds;
 *   2. a rank that never calls: the others get UL_ERR_TIMEOUT, then sticky errors;
 *   3. ul_comm_abort from a second thread releases a blocked allreduce;
 *   4. check mode: a count mismatch gives UL_ERR_MISMATCH on every rank;
 *   5. two threads abort one communicator at once while its rank is blocked in a call
 *      and a third thread waits in ul_stream_synchronize on queued work (issue 16);
 *   6. a rank aborts, a survivor revokes, the survivors shrink and compute exactly;
 *   7. nonblocking mode: creation and queued allreduces polled with
 *      ul_comm_get_async_error while a watchdog thread polls it too.
 * Exit 0 when every check passed; TSan exits 66 by itself on a data race report.
 * Usage: reliability_tsan_driver [ranks (default 4)] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unilink/unilink.h>

static int failures;
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

#define EXPECT(cond, ...)                                                                        \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      pthread_mutex_lock(&fail_lock);                                                            \
      failures++;                                                                                \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                       \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fprintf(stderr, "\n");                                                                     \
      pthread_mutex_unlock(&fail_lock);                                                          \
    }                                                                                            \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

typedef struct rank_arg {
  ul_unique_id_t id;
  int rank, n, timeout_ms, check, scenario;
  ul_comm_t comm; /* scenario 3: left for the main thread */
  int done;       /* scenario 2: the absent rank leaves after the others */
} rank_arg_t;

static void data_paths(ul_comm_t c, int me, int n) {
  const size_t counts[] = {1, 1000, 100000}; /* 100000 int32 > 64 KiB: ring/channels */
  for (int round = 0; round < 3; round++)
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
      size_t cnt = counts[k];
      int32_t *s = malloc(cnt * sizeof *s), *r = malloc(cnt * (size_t)n * sizeof *r);
      for (size_t i = 0; i < cnt; i++) s[i] = me + 1 + (int32_t)(i % 7);
      ul_result_t rc = ul_allreduce(s, r, cnt, UL_INT32, UL_SUM, c, NULL);
      EXPECT(rc == UL_OK, "allreduce: %s", ul_comm_last_error(c));
      for (size_t i = 0; rc == UL_OK && i < cnt; i++) {
        int32_t want = n * (n + 1) / 2 + n * (int32_t)(i % 7);
        if (r[i] != want) {
          EXPECT(0, "allreduce cnt %zu [%zu] = %d, want %d", cnt, i, r[i], want);
          break;
        }
      }
      rc = ul_broadcast(s, r, cnt, UL_INT32, n - 1, c, NULL);
      EXPECT(rc == UL_OK && r[cnt - 1] == n + (int32_t)((cnt - 1) % 7), "broadcast: %s",
             ul_comm_last_error(c));
      rc = ul_allgather(s, r, cnt, UL_INT32, c, NULL);
      EXPECT(rc == UL_OK && r[(size_t)(n - 1) * cnt] == n, "allgather: %s", ul_comm_last_error(c));
      EXPECT(ul_barrier(c, NULL) == UL_OK, "barrier: %s", ul_comm_last_error(c));
      ul_group_start();
      ul_send(s, cnt, UL_INT32, (me + 1) % n, c, NULL);
      ul_recv(r, cnt, UL_INT32, (me + n - 1) % n, c, NULL);
      rc = ul_group_end();
      EXPECT(rc == UL_OK && r[0] == (me + n - 1) % n + 1, "sendrecv: %s", ul_comm_last_error(c));
      free(s);
      free(r);
    }
}

/* Scenario 6: the last rank aborts; a survivor revokes while the others wait; all shrink
 * and compute exactly on the survivors. */
static void recover_scenario(ul_comm_t c, int me, int n) {
  int32_t x = 1, sum = 0;
  if (me == n - 1) {
    ul_comm_abort(c);
    return;
  }
  ul_result_t rc = ul_allreduce(&x, &sum, 1, UL_INT32, UL_SUM, c, NULL);
  EXPECT(rc == UL_ERR_PEER_LOST || rc == UL_ERR_REVOKED, "rank %d: %s", me, ul_result_name(rc));
  if (me == 0) ul_comm_revoke(c);
  ul_comm_t s = NULL;
  rc = ul_comm_shrink(c, &s, NULL);
  EXPECT(rc == UL_OK, "rank %d shrink: %s", me, ul_comm_last_error(c));
  if (rc == UL_OK) {
    rc = ul_allreduce(&x, &sum, 1, UL_INT32, UL_SUM, s, NULL);
    EXPECT(rc == UL_OK && sum == n - 1, "rank %d on the survivors: %s sum %d", me,
           ul_result_name(rc), (int)sum);
    ul_comm_destroy(s);
  }
  ul_comm_destroy(c);
}

/* Scenario 7: nonblocking mode; a watchdog thread polls the async error while the rank's
 * thread queues work, then the rank waits for it. */
typedef struct watch_arg {
  ul_comm_t comm;
  volatile int stop;
  int polls;
} watch_arg_t;

static void *watch_main(void *p) {
  watch_arg_t *w = p;
  while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
    ul_result_t st;
    ul_comm_get_async_error(w->comm, &st);
    w->polls++;
    sleep_ms(1);
  }
  return NULL;
}

static void nonblocking_scenario(rank_arg_t *a) {
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = a->timeout_ms;
  cfg.blocking = 0;
  ul_comm_t c = NULL;
  ul_result_t rc = ul_comm_init_rank(&c, &cfg, a->n, a->id, a->rank);
  EXPECT(rc == UL_IN_PROGRESS, "nonblocking init rank %d: %s", a->rank, ul_result_name(rc));
  if (rc != UL_IN_PROGRESS) return;
  watch_arg_t w = {c, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, watch_main, &w);
  ul_result_t st = UL_IN_PROGRESS;
  while (st == UL_IN_PROGRESS) {
    ul_comm_get_async_error(c, &st);
    sleep_ms(1);
  }
  EXPECT(st == UL_OK, "rank %d creation: %s", a->rank, ul_result_name(st));
  static int32_t buf[16][8];
  int32_t *b = buf[a->rank];
  for (int k = 0; k < 8; k++) b[k] = a->rank + 1;
  for (int i = 0; i < 4 && st == UL_OK; i++) {
    rc = ul_allreduce(b, b, 8, UL_INT32, UL_SUM, c, NULL);
    EXPECT(rc == UL_IN_PROGRESS, "rank %d allreduce: %s", a->rank, ul_result_name(rc));
  }
  do {
    ul_comm_get_async_error(c, &st);
    sleep_ms(1);
  } while (st == UL_IN_PROGRESS);
  int64_t want = a->n * (a->n + 1) / 2;
  for (int i = 1; i < 4; i++) want *= a->n; /* each round sums n copies of the last */
  EXPECT(st == UL_OK && b[0] == (int32_t)want, "rank %d: %s, %d (want %lld)", a->rank,
         ul_result_name(st), (int)b[0], (long long)want);
  __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
  pthread_join(th, NULL);
  ul_comm_destroy(c);
}

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  if (a->scenario == 7) {
    nonblocking_scenario(a);
    return NULL;
  }
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = a->timeout_ms;
  cfg.check = a->check;
  ul_comm_t c = NULL;
  ul_result_t rc = ul_comm_init_rank(&c, &cfg, a->n, a->id, a->rank);
  EXPECT(rc == UL_OK, "init rank %d: %s", a->rank, ul_last_error());
  if (rc != UL_OK) return NULL;
  if (a->scenario == 6) {
    recover_scenario(c, a->rank, a->n);
    return NULL;
  }
  int32_t x[8] = {0};
  switch (a->scenario) {
  case 1: data_paths(c, a->rank, a->n); break;
  case 2:
    if (a->rank == a->n - 1) {
      while (!__atomic_load_n(&a->done, __ATOMIC_ACQUIRE)) sleep_ms(5);
    } else {
      double t0 = now_ms();
      rc = ul_allreduce(x, x, 8, UL_INT32, UL_SUM, c, NULL);
      double el = now_ms() - t0;
      EXPECT(rc == UL_ERR_TIMEOUT, "rank %d: %s", a->rank, ul_result_name(rc));
      EXPECT(el < a->timeout_ms * 1.2 + 200, "rank %d: timed out after %.0f ms", a->rank, el);
      EXPECT(ul_barrier(c, NULL) == UL_ERR_TIMEOUT, "rank %d: not sticky", a->rank);
    }
    break;
  case 3:
  case 5:
    __atomic_store_n(&a->comm, c, __ATOMIC_RELEASE); /* rank 0: aborted by main while blocked */
    if (a->rank == 0) {
      rc = ul_allreduce(x, x, 8, UL_INT32, UL_SUM, c, NULL);
      EXPECT(rc == UL_ERR_ABORTED, "blocked allreduce returned %s", ul_result_name(rc));
      return NULL; /* freed by the abort */
    }
    return NULL; /* the peer stays idle; main destroys it */
  case 4: {
    size_t cnt = a->rank == 1 ? 5 : 4;
    rc = ul_allreduce(x, x, cnt, UL_INT32, UL_SUM, c, NULL);
    EXPECT(rc == UL_ERR_MISMATCH, "rank %d: %s", a->rank, ul_result_name(rc));
    EXPECT(strstr(ul_comm_last_error(c), "differs on rank 1") != NULL, "rank %d: %s", a->rank,
           ul_comm_last_error(c));
    break;
  }
  }
  ul_comm_destroy(c);
  return NULL;
}

typedef struct race_arg {
  ul_comm_t comm;
  ul_stream_t stream;
  int abort; /* 1: ul_comm_abort, 0: ul_stream_synchronize */
  ul_result_t rc;
} race_arg_t;

static void *race_main(void *p) {
  race_arg_t *r = p;
  r->rc = r->abort ? ul_comm_abort(r->comm) : ul_stream_synchronize(r->stream);
  return NULL;
}

static void run(int n, int scenario, int timeout_ms, int check) {
  ul_unique_id_t id;
  if (ul_get_unique_id("host", &id) != UL_OK) {
    EXPECT(0, "unique id: %s", ul_last_error());
    return;
  }
  rank_arg_t *a = calloc((size_t)n, sizeof *a);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  for (int i = 0; i < n; i++) {
    a[i].id = id, a[i].rank = i, a[i].n = n, a[i].timeout_ms = timeout_ms;
    a[i].check = check, a[i].scenario = scenario;
    pthread_create(&th[i], NULL, rank_main, &a[i]);
  }
  if (scenario == 2) {
    for (int i = 0; i < n - 1; i++) pthread_join(th[i], NULL);
    __atomic_store_n(&a[n - 1].done, 1, __ATOMIC_RELEASE);
    pthread_join(th[n - 1], NULL);
  } else if (scenario == 3) {
    for (int i = 1; i < n; i++) pthread_join(th[i], NULL);
    while (!__atomic_load_n(&a[0].comm, __ATOMIC_ACQUIRE)) sleep_ms(1);
    sleep_ms(200);
    double t0 = now_ms();
    EXPECT(ul_comm_abort(a[0].comm) == UL_OK, "abort");
    pthread_join(th[0], NULL);
    EXPECT(now_ms() - t0 < 500, "abort released the call after %.0f ms", now_ms() - t0);
    for (int i = 1; i < n; i++) ul_comm_destroy(a[i].comm);
  } else if (scenario == 5) {
    for (int i = 1; i < n; i++) pthread_join(th[i], NULL);
    while (!__atomic_load_n(&a[0].comm, __ATOMIC_ACQUIRE)) sleep_ms(1);
    ul_stream_t st = NULL;
    EXPECT(ul_stream_create(a[0].comm, &st) == UL_OK, "stream: %s", ul_last_error());
    static int32_t q[4][64];
    for (int k = 0; k < 4 && st; k++) ul_allreduce(q[k], q[k], 64, UL_INT32, UL_SUM, a[0].comm, st);
    sleep_ms(100);
    pthread_t w[3];
    race_arg_t ra[3] = {{a[0].comm, st, 0, 0}, {a[0].comm, st, 1, 0}, {a[0].comm, st, 1, 0}};
    for (int i = 0; i < 3; i++) pthread_create(&w[i], NULL, race_main, &ra[i]);
    for (int i = 0; i < 3; i++) pthread_join(w[i], NULL);
    pthread_join(th[0], NULL);
    EXPECT(ra[0].rc != UL_OK, "stream synchronize of aborted work returned UL_OK");
    EXPECT(ra[1].rc == UL_OK || ra[2].rc == UL_OK, "neither abort returned UL_OK");
    if (st) EXPECT(ul_stream_destroy(st) == UL_OK, "stream destroy after abort");
    for (int i = 1; i < n; i++) ul_comm_destroy(a[i].comm);
  } else {
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  }
  free(a);
  free(th);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  if (n < 2 || n > 16) {
    fprintf(stderr, "usage: %s [ranks 2..16]\n", argv[0]);
    return 2;
  }
  run(n, 1, 60000, 0);
  printf("data paths: %s\n", failures ? "FAILED" : "ok");
  run(n, 2, 1000, 0);
  printf("timeout: %s\n", failures ? "FAILED" : "ok");
  run(2, 3, 60000, 0);
  printf("abort: %s\n", failures ? "FAILED" : "ok");
  run(n, 4, 60000, 1);
  printf("check mode: %s\n", failures ? "FAILED" : "ok");
  for (int rep = 0; rep < 5; rep++) run(2, 5, 60000, 0);
  printf("racing aborts: %s\n", failures ? "FAILED" : "ok");
  run(n, 6, 60000, 0);
  printf("revoke and shrink: %s\n", failures ? "FAILED" : "ok");
  run(n, 7, 60000, 0);
  printf("nonblocking mode: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
