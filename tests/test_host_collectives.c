// UNILINK_TEST_LINK_SHARED
/* Host backend end to end through the public API: every collective, send/recv and
 * one-sided ops, for 1, 2, 3, 4 and 8 thread ranks and 2 and 4 process ranks,
 * in place and out of place, odd counts and count 0, checked exactly. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unilink/unilink.h>

#include "line_run_ahead.h"
#include "yield_count.h"

typedef int (*rank_fn)(ul_comm_t comm, int rank, int n);

typedef struct job {
  ul_unique_id_t id;
  int n, rank;
  rank_fn fn;
} job_t;

static void *thread_main(void *p) {
  job_t *j = p;
  ul_comm_t c;
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = 20000;
  ul_result_t rc = ul_comm_init_rank(&c, &cfg, j->n, j->id, j->rank);
  if (rc != UL_OK) {
    fprintf(stderr, "init rank %d: %s\n", j->rank, ul_last_error());
    return (void *)1;
  }
  int bad = j->fn(c, j->rank, j->n);
  ul_comm_destroy(c);
  return (void *)(intptr_t)bad;
}

/* Runs fn on n thread ranks (process=0) or n forked process ranks; 0 = all passed. */
static int run_ranks(int n, int process, rank_fn fn) {
  job_t jobs[8];
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("host", &id), UL_OK, "%s", ul_last_error());
  int bad = 0;
  if (!process) {
    pthread_t th[8];
    for (int r = 0; r < n; r++) {
      jobs[r] = (job_t){id, n, r, fn};
      pthread_create(&th[r], NULL, thread_main, &jobs[r]);
    }
    for (int r = 0; r < n; r++) {
      void *ret;
      pthread_join(th[r], &ret);
      bad |= ret != NULL;
    }
  } else {
    pid_t pids[8];
    for (int r = 0; r < n; r++) {
      pids[r] = fork();
      if (pids[r] == 0) {
        jobs[r] = (job_t){id, n, r, fn};
        _exit(thread_main(&jobs[r]) ? 1 : 0);
      }
    }
    for (int r = 0; r < n; r++) {
      int st;
      waitpid(pids[r], &st, 0);
      bad |= !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
  }
  return bad;
}

/* Exactly representable inputs: small integers. */
static int32_t val(int rank, size_t i) { return (int32_t)((rank + 1) * 3 + (int)(i % 5)); }

static const size_t counts[] = {0, 1, 7, 1023, 65537, 300001};
#define NCOUNTS (sizeof counts / sizeof counts[0])


static int all_collectives(ul_comm_t c, int me, int n) {
  for (size_t ci = 0; ci < NCOUNTS; ci++) {
    size_t cnt = counts[ci];
    for (int inplace = 0; inplace < 2; inplace++) {
      size_t big = cnt * (size_t)n + 1;
      int32_t *s = malloc(big * 4), *r = malloc(big * 4);
      ul_result_t rc;
      /* allreduce sum + max */
      for (size_t i = 0; i < cnt; i++) s[i] = val(me, i), r[i] = -7;
      rc = ul_allreduce(s, inplace ? s : r, cnt, UL_INT32, UL_SUM, c, NULL);
      CHECK(rc == UL_OK, "allreduce: %s", ul_comm_last_error(c));
      int32_t *out = inplace ? s : r;
      for (size_t i = 0; i < cnt; i++) {
        int32_t e = 0;
        for (int k = 0; k < n; k++) e += val(k, i);
        CHECK(out[i] == e, "allreduce n=%d cnt=%zu i=%zu got %d want %d", n, cnt, i, out[i], e);
      }
      for (size_t i = 0; i < cnt; i++) s[i] = val(me, i);
      rc = ul_allreduce(s, inplace ? s : r, cnt, UL_INT32, UL_MAX, c, NULL);
      CHECK(rc == UL_OK, "allreduce max: %s", ul_comm_last_error(c));
      for (size_t i = 0; i < cnt; i++) CHECK(out[i] == val(n - 1, i), "allreduce max i=%zu", i);
      /* broadcast from the last rank */
      int root = n - 1;
      for (size_t i = 0; i < cnt; i++) s[i] = me == root ? val(me, i) : -1, r[i] = -1;
      rc = ul_broadcast(s, inplace ? s : r, cnt, UL_INT32, root, c, NULL);
      CHECK(rc == UL_OK, "broadcast: %s", ul_comm_last_error(c));
      for (size_t i = 0; i < cnt; i++) CHECK(out[i] == val(root, i), "broadcast i=%zu", i);
      /* reduce to the middle rank */
      root = n / 2;
      for (size_t i = 0; i < cnt; i++) s[i] = val(me, i), r[i] = -1;
      rc = ul_reduce(s, inplace ? s : r, cnt, UL_INT32, UL_SUM, root, c, NULL);
      CHECK(rc == UL_OK, "reduce: %s", ul_comm_last_error(c));
      if (me == root)
        for (size_t i = 0; i < cnt; i++) {
          int32_t e = 0;
          for (int k = 0; k < n; k++) e += val(k, i);
          CHECK(out[i] == e, "reduce i=%zu got %d want %d", i, out[i], e);
        }
      /* allgather */
      for (size_t i = 0; i < cnt * (size_t)n; i++) r[i] = -1;
      int32_t *agsend = inplace ? r + (size_t)me * cnt : s;
      for (size_t i = 0; i < cnt; i++) agsend[i] = val(me, i);
      rc = ul_allgather(agsend, r, cnt, UL_INT32, c, NULL);
      CHECK(rc == UL_OK, "allgather: %s", ul_comm_last_error(c));
      for (int k = 0; k < n; k++)
        for (size_t i = 0; i < cnt; i++)
          CHECK(r[(size_t)k * cnt + i] == val(k, i), "allgather block %d i=%zu", k, i);
      /* reduce_scatter */
      for (size_t i = 0; i < cnt * (size_t)n; i++) s[i] = val(me, i);
      int32_t *rsrecv = inplace ? s + (size_t)me * cnt : r;
      rc = ul_reduce_scatter(s, rsrecv, cnt, UL_INT32, UL_SUM, c, NULL);
      CHECK(rc == UL_OK, "reduce_scatter: %s", ul_comm_last_error(c));
      for (size_t i = 0; i < cnt; i++) {
        int32_t e = 0;
        for (int k = 0; k < n; k++) e += val(k, (size_t)me * cnt + i);
        CHECK(rsrecv[i] == e, "reduce_scatter i=%zu got %d want %d", i, rsrecv[i], e);
      }
      if (!inplace) {
        /* alltoall: block j of rank k holds k*1000 + j*10 + i%10 */
        for (int j = 0; j < n; j++)
          for (size_t i = 0; i < cnt; i++) s[(size_t)j * cnt + i] = me * 1000 + j * 10 + (int)(i % 10);
        rc = ul_alltoall(s, r, cnt, UL_INT32, c, NULL);
        CHECK(rc == UL_OK, "alltoall: %s", ul_comm_last_error(c));
        for (int k = 0; k < n; k++)
          for (size_t i = 0; i < cnt; i++)
            CHECK(r[(size_t)k * cnt + i] == k * 1000 + me * 10 + (int)(i % 10), "alltoall k=%d i=%zu", k, i);
      }
      /* gather to 0 */
      root = 0;
      for (size_t i = 0; i < cnt * (size_t)n; i++) r[i] = -1;
      int32_t *gsend = (inplace && me == root) ? r + (size_t)root * cnt : s;
      for (size_t i = 0; i < cnt; i++) gsend[i] = val(me, i);
      rc = ul_gather(gsend, r, cnt, UL_INT32, root, c, NULL);
      CHECK(rc == UL_OK, "gather: %s", ul_comm_last_error(c));
      if (me == root)
        for (int k = 0; k < n; k++)
          for (size_t i = 0; i < cnt; i++) CHECK(r[(size_t)k * cnt + i] == val(k, i), "gather k=%d i=%zu", k, i);
      /* scatter from the last rank */
      root = n - 1;
      for (size_t i = 0; i < cnt * (size_t)n; i++) s[i] = me == root ? val((int)(i / (cnt ? cnt : 1)), i % (cnt ? cnt : 1)) : -1;
      int32_t *srecv = (inplace && me == root) ? s + (size_t)root * cnt : r;
      rc = ul_scatter(s, srecv, cnt, UL_INT32, root, c, NULL);
      CHECK(rc == UL_OK, "scatter: %s", ul_comm_last_error(c));
      for (size_t i = 0; i < cnt; i++) CHECK(srecv[i] == val(me, i), "scatter i=%zu", i);
      CHECK(ul_barrier(c, NULL) == UL_OK, "barrier: %s", ul_comm_last_error(c));
      free(s);
      free(r);
    }
  }
  return 0;
}

static int float_avg(ul_comm_t c, int me, int n) {
  size_t cnt = 4099;
  float *s = malloc(cnt * 4), *r = malloc(cnt * 4);
  for (size_t i = 0; i < cnt; i++) s[i] = (float)(n * (me + 1) * (int)(i % 3 + 1));
  CHECK(ul_allreduce(s, r, cnt, UL_FP32, UL_AVG, c, NULL) == UL_OK, "avg: %s", ul_comm_last_error(c));
  for (size_t i = 0; i < cnt; i++) {
    float e = (float)((n + 1) * n / 2 * (int)(i % 3 + 1));
    CHECK(r[i] == e, "avg i=%zu got %g want %g", i, r[i], e);
  }
  free(s);
  free(r);
  return 0;
}

static int sendrecv_patterns(ul_comm_t c, int me, int n) {
  size_t cnt = 70001;
  int32_t *out = malloc(cnt * 4 * (size_t)n), *in = malloc(cnt * 4 * (size_t)n);
  /* all pairs, including self, in one group */
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < cnt; i++) out[(size_t)p * cnt + i] = me * 100000 + p * 1000 + (int)(i % 1000);
  ul_group_start();
  for (int p = 0; p < n; p++) {
    ul_send(out + (size_t)p * cnt, cnt, UL_INT32, p, c, NULL);
    ul_recv(in + (size_t)p * cnt, cnt, UL_INT32, p, c, NULL);
  }
  /* zero-byte send to the right neighbour */
  ul_send(NULL, 0, UL_INT32, (me + 1) % n, c, NULL);
  ul_recv(NULL, 0, UL_INT32, (me + n - 1) % n, c, NULL);
  ul_result_t rc = ul_group_end();
  CHECK(rc == UL_OK, "group: %s", ul_comm_last_error(c));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < cnt; i++)
      CHECK(in[(size_t)p * cnt + i] == p * 100000 + me * 1000 + (int)(i % 1000), "p2p from %d i=%zu", p, i);
  free(out);
  free(in);
  return 0;
}

static int one_sided(ul_comm_t c, int me, int n) {
  size_t bytes = 1 << 16;
  unsigned char *mem;
  CHECK(ul_mem_alloc(c, bytes, (void **)&mem) == UL_OK, "mem_alloc: %s", ul_comm_last_error(c));
  memset(mem, 0, bytes);
  ul_window_t w;
  CHECK(ul_window_register(c, mem, bytes, &w) == UL_OK, "window: %s", ul_comm_last_error(c));
  int right = (me + 1) % n;
  unsigned char msg[1000];
  for (int i = 0; i < 1000; i++) msg[i] = (unsigned char)(me * 7 + i);
  CHECK(ul_put(msg, sizeof msg, right, w, 128, NULL) == UL_OK, "put: %s", ul_comm_last_error(c));
  CHECK(ul_signal(right, w, 3, NULL) == UL_OK, "signal: %s", ul_comm_last_error(c));
  CHECK(ul_wait_signal(w, 3, 1, NULL) == UL_OK, "wait: %s", ul_comm_last_error(c));
  int left = (me + n - 1) % n;
  for (int i = 0; i < 1000; i++) CHECK(mem[128 + i] == (unsigned char)(left * 7 + i), "put data i=%d", i);
  CHECK(ul_barrier(c, NULL) == UL_OK, "barrier before get"); /* left's data has landed */
  unsigned char back[1000];
  CHECK(ul_get(back, sizeof back, left, w, 128, NULL) == UL_OK, "get: %s", ul_comm_last_error(c));
  int leftleft = (left + n - 1) % n;
  for (int i = 0; i < 1000; i++) CHECK(back[i] == (unsigned char)(leftleft * 7 + i), "get data i=%d", i);
  /* out of range put is refused and changes nothing */
  CHECK(ul_put(msg, sizeof msg, right, w, bytes - 10, NULL) == UL_ERR_INVALID_ARG, "range check");
  CHECK(ul_signal(right, w, UL_WINDOW_SIGNALS, NULL) == UL_ERR_INVALID_ARG, "signal index check");
  CHECK(ul_barrier(c, NULL) == UL_OK, "barrier");
  CHECK(ul_window_deregister(w) == UL_OK, "deregister");
  CHECK(ul_mem_free(c, mem) == UL_OK, "mem_free");
  return 0;
}

static int streams_inflight(ul_comm_t c, int me, int n) {
  ul_stream_t a, b;
  CHECK(ul_stream_create(c, &a) == UL_OK && ul_stream_create(c, &b) == UL_OK, "streams: %s", ul_comm_last_error(c));
  enum { K = 6, CNT = 5003 };
  int32_t *buf[K];
  for (int k = 0; k < K; k++) {
    buf[k] = malloc(CNT * 4);
    for (int i = 0; i < CNT; i++) buf[k][i] = (me + 1) * (k + 1);
    CHECK(ul_allreduce(buf[k], buf[k], CNT, UL_INT32, UL_SUM, c, k % 2 ? a : b) == UL_OK, "enqueue");
  }
  CHECK(ul_stream_synchronize(a) == UL_OK && ul_stream_synchronize(b) == UL_OK, "sync: %s", ul_comm_last_error(c));
  CHECK(ul_stream_query(a) == UL_OK, "query");
  for (int k = 0; k < K; k++) {
    for (int i = 0; i < CNT; i++) CHECK(buf[k][i] == n * (n + 1) / 2 * (k + 1), "stream op %d", k);
    free(buf[k]);
  }
  ul_stream_destroy(a);
  ul_stream_destroy(b);
  return 0;
}

static int split_even_odd(ul_comm_t c, int me, int n) {
  ul_comm_t sub;
  CHECK(ul_comm_split(c, me % 2, n - me, &sub, NULL) == UL_OK, "split: %s", ul_comm_last_error(c));
  int sr, sn;
  ul_comm_rank(sub, &sr);
  ul_comm_size(sub, &sn);
  CHECK(sn == (n + 1 - me % 2) / 2, "split size %d", sn);
  /* reversed keys: highest parent rank first */
  int32_t v = me, all[8];
  CHECK(ul_allgather(&v, all, 1, UL_INT32, sub, NULL) == UL_OK, "allgather on split");
  for (int i = 1; i < sn; i++) CHECK(all[i - 1] > all[i], "keys order");
  ul_comm_destroy(sub);
  ul_comm_t none = (ul_comm_t)1;
  CHECK(ul_comm_split(c, me == 0 ? 0 : UL_SPLIT_NOCOLOR, 0, &none, NULL) == UL_OK, "split nocolor");
  CHECK((me == 0) == (none != NULL), "nocolor gives NULL");
  ul_comm_destroy(none);
  return 0;
}

/* Small staged operations let a rank run ahead of slow readers (a broadcast root by up
 * to 16 operations): the root's staging slots are rewritten while readers lag, with
 * tiny (one slot) and larger (half the staging) messages mixed, and allgathers in
 * between. Readers that lag make every slot reuse race with a pending read, so a
 * slot rewritten too early shows up as a wrong value. */
static int staged_run_ahead(ul_comm_t c, int me, int n) {
  static const size_t cnts[] = {1, 3, 1000, 5, 8000, 2, 700};
  int32_t buf[8000], ag[8 * 8];
  for (int it = 0; it < 400; it++) {
    int root = it % n;
    size_t cnt = cnts[it % (sizeof cnts / sizeof cnts[0])];
    if (me != root && it % 7 == 0) usleep(200); /* readers lag; the root goes on */
    for (size_t i = 0; i < cnt; i++) buf[i] = me == root ? (int32_t)(it * 31 + (int)i) : -1;
    CHECK(ul_broadcast(buf, buf, cnt, UL_INT32, root, c, NULL) == UL_OK, "bcast %d: %s", it,
          ul_comm_last_error(c));
    for (size_t i = 0; i < cnt; i++)
      CHECK(buf[i] == (int32_t)(it * 31 + (int)i), "rank %d bcast %d [%zu] = %d, expected %d", me,
            it, i, buf[i], it * 31 + (int)i);
    if (it % 5 == 4) {
      int32_t mine[8];
      for (int i = 0; i < 8; i++) mine[i] = me * 1000 + it + i;
      CHECK(ul_allgather(mine, ag, 8, UL_INT32, c, NULL) == UL_OK, "allgather %d", it);
      for (int r = 0; r < n; r++)
        for (int i = 0; i < 8; i++)
          CHECK(ag[r * 8 + i] == r * 1000 + it + i, "rank %d allgather %d from %d [%d] = %d", me,
                it, r, i, ag[r * 8 + i]);
    }
  }
  return 0;
}

/* Small reduce, gather and scatter run staged, or in flagged lines up to 1064 bytes a
 * block (scatter, the broadcast's) or 2128 bytes a rank (reduce and gather, their mirror): one
 * synchronisation with the root instead of the direct algorithm's two barriers (np2
 * synchronized 8-byte reduce: 7.1 -> 1.1 us).
 * The ranks other than a reduce or gather root stage, signal the root and leave, so they
 * run ahead of a lagging root; a scatter root runs ahead of lagging readers. A staging
 * slot rewritten too early shows as a wrong value. Buffers a rank does not use are NULL
 * there, as NCCL and MPI allow. */
static int rooted_small_run_ahead(ul_comm_t c, int me, int n) {
  /* Lines up to 1064 bytes a rank, staged beyond, in runs of 20 calls of one collective
   * and root. */
  static const size_t cnts[] = {1, 3, 2000, 5, 1500, 2, 700};
  int32_t *s = malloc(2000 * 8 * sizeof *s), *r = malloc(2000 * 8 * sizeof *r);
  CHECK(s && r, "malloc");
  for (int it = 0; it < 360; it++) {
    int kind = (it / 20) % 3, root = (it / 60) % n; /* kind 0 reduce, 1 gather, 2 scatter */
    size_t cnt = cnts[it % (sizeof cnts / sizeof cnts[0])];
    if (kind == 2) cnt = (cnt + (size_t)n - 1) / (size_t)n; /* the root stages n blocks */
    if (it % 5 == 0 && (kind == 2) != (me == root)) usleep(200); /* the side that waits lags */
    ul_result_t rc;
    if (kind == 0) {
      for (size_t i = 0; i < cnt; i++) s[i] = val(me, i) + it, r[i] = -1;
      rc = ul_reduce(s, me == root ? r : NULL, cnt, UL_INT32, UL_SUM, root, c, NULL);
      CHECK(rc == UL_OK, "reduce %d: %s", it, ul_comm_last_error(c));
      for (size_t i = 0; me == root && i < cnt; i++) {
        int32_t e = 0;
        for (int k = 0; k < n; k++) e += val(k, i) + it;
        CHECK(r[i] == e, "rank %d reduce %d [%zu] = %d, want %d", me, it, i, r[i], e);
      }
    } else if (kind == 1) {
      for (size_t i = 0; i < cnt; i++) s[i] = me * 100000 + it * 100 + (int32_t)(i % 97);
      for (size_t i = 0; i < cnt * (size_t)n; i++) r[i] = -1;
      rc = ul_gather(s, me == root ? r : NULL, cnt, UL_INT32, root, c, NULL);
      CHECK(rc == UL_OK, "gather %d: %s", it, ul_comm_last_error(c));
      for (int k = 0; me == root && k < n; k++)
        for (size_t i = 0; i < cnt; i++)
          CHECK(r[(size_t)k * cnt + i] == k * 100000 + it * 100 + (int32_t)(i % 97),
                "rank %d gather %d from %d [%zu] = %d", me, it, k, i, r[(size_t)k * cnt + i]);
    } else {
      for (int k = 0; k < n; k++)
        for (size_t i = 0; i < cnt; i++)
          s[(size_t)k * cnt + i] = me == root ? k * 100000 + it * 100 + (int32_t)(i % 97) : -1;
      for (size_t i = 0; i < cnt; i++) r[i] = -1;
      rc = ul_scatter(me == root ? s : NULL, r, cnt, UL_INT32, root, c, NULL);
      CHECK(rc == UL_OK, "scatter %d: %s", it, ul_comm_last_error(c));
      for (size_t i = 0; i < cnt; i++)
        CHECK(r[i] == me * 100000 + it * 100 + (int32_t)(i % 97), "rank %d scatter %d [%zu] = %d",
              me, it, i, r[i]);
    }
    ul_call_info_t info = {.struct_size = sizeof info};
    CHECK(ul_comm_last_call(c, &info) == UL_OK, "last_call");
    size_t lines_max = kind == 2 ? 1064 : 2128; /* a rank's bytes in lines */
    const char *want = cnt * sizeof *r <= lines_max ? "line" : "staged";
    CHECK(n == 1 || !strcmp(info.algorithm, want), "%s %d of %zu ran '%s' (%s), want %s",
          kind == 0 ? "reduce" : kind == 1 ? "gather" : "scatter", it, cnt, info.algorithm,
          info.reason, want);
  }
  free(s);
  free(r);
  return 0;
}

/* UNILINK_ALGO is read on every call through a per-thread cache of where it sits in the
 * environment: every way of changing the environment must still be seen on the next call
 * (overwrite, unset, another variable appended or removed before it, putenv). */
static int algo_forced(ul_comm_t c, const char *want) {
  float x = 1, y = 0;
  ul_call_info_t info = {.struct_size = sizeof info};
  CHECK(ul_allreduce(&x, &y, 1, UL_FP32, UL_SUM, c, NULL) == UL_OK, "allreduce: %s",
        ul_comm_last_error(c));
  CHECK(y == 1.0f, "allreduce of one rank gave %g", y);
  CHECK(ul_comm_last_call(c, &info) == UL_OK, "last_call");
  int forced = strstr(info.reason, "UNILINK_ALGO") != NULL;
  if (!want) CHECK(!forced, "ran '%s' (%s), UNILINK_ALGO is unset", info.algorithm, info.reason);
  else CHECK(forced && !strcmp(info.algorithm, want), "ran '%s' (%s), want '%s'", info.algorithm,
             info.reason, want);
  return 0;
}

static int algo_env_changes(ul_comm_t c, int me, int n) {
  (void)me, (void)n;
  static char put[] = "UNILINK_ALGO=allreduce:oneshot";
  unsetenv("UNILINK_ALGO");
  int bad = algo_forced(c, NULL);
  setenv("UNILINK_ALGO", "allreduce:ring", 1); /* appended */
  bad = bad || algo_forced(c, "ring");
  setenv("UNILINK_ALGO", "allreduce:oneshot", 1); /* overwritten */
  bad = bad || algo_forced(c, "oneshot");
  setenv("UNILINK_TEST_AFTER", "1", 1); /* another variable appended after it */
  bad = bad || algo_forced(c, "oneshot");
  unsetenv("UNILINK_ALGO");
  bad = bad || algo_forced(c, NULL);
  setenv("UNILINK_ALGO", "allreduce:ring", 1);
  bad = bad || algo_forced(c, "ring");
  unsetenv("UNILINK_TEST_AFTER"); /* an entry before it removed: it moves down */
  bad = bad || algo_forced(c, "ring");
  unsetenv("UNILINK_ALGO");
  setenv("UNILINK_TEST_AFTER", "1", 1);
  unsetenv("UNILINK_TEST_AFTER"); /* the same length as before, no variable */
  bad = bad || algo_forced(c, NULL);
  putenv(put);
  bad = bad || algo_forced(c, "oneshot");
  unsetenv("UNILINK_ALGO");
  bad = bad || algo_forced(c, NULL);
  return bad;
}

Test(host_threads, algo_env_changes_seen_on_the_next_call, .timeout = 60) {
  cr_assert_eq(run_ranks(1, 0, algo_env_changes), 0);
}

/* ul_comm_last_call describes the last call that ran: a call fills a spare record and
 * publishes it only when it succeeds, and the selection, kept per size, follows the size
 * back and forth. An allreduce of 2 ints (flagged lines), of 16384 (not), of 2 again, one
 * that fails inside its turn (UNILINK_ALGO names no algorithm), then one more. */
static int allreduce_checked(ul_comm_t c, int me, int n, int count, ul_call_info_t *info) {
  static int32_t in[16384], out[16384];
  for (int i = 0; i < count; i++) in[i] = val(me, (size_t)i);
  ul_result_t rc = ul_allreduce(in, out, (size_t)count, UL_INT32, UL_SUM, c, NULL);
  if (rc != UL_OK) return (int)rc;
  for (int i = 0; i < count; i++) {
    int32_t want = 0;
    for (int r = 0; r < n; r++) want += val(r, (size_t)i);
    CHECK(out[i] == want, "rank %d count %d [%d] = %d, want %d", me, count, i, out[i], want);
  }
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  CHECK(ul_comm_last_call(c, info) == UL_OK, "last_call");
  CHECK(info->bytes == (size_t)count * sizeof(int32_t), "rank %d: last call %zu bytes, ran %d ints",
        me, info->bytes, count);
  return 0;
}

static int last_call_follows(ul_comm_t c, int me, int n) {
  ul_call_info_t a, b, again, after;
  CHECK(allreduce_checked(c, me, n, 2, &a) == 0, "8 B allreduce");
  CHECK(!strcmp(a.algorithm, "line") && strstr(a.reason, "flagged cache lines"),
        "8 B ran '%s' (%s)", a.algorithm, a.reason);
  CHECK(allreduce_checked(c, me, n, 16384, &b) == 0, "64 KiB allreduce");
  CHECK(strcmp(b.algorithm, "line") && strcmp(b.reason, a.reason) && b.sequence == a.sequence + 1,
        "64 KiB ran '%s' (%s) as call %llu", b.algorithm, b.reason, (unsigned long long)b.sequence);
  CHECK(allreduce_checked(c, me, n, 2, &again) == 0, "8 B allreduce again");
  CHECK(!strcmp(again.algorithm, "line") && !strcmp(again.reason, a.reason) &&
            again.sequence == b.sequence + 1,
        "8 B again ran '%s' (%s) as call %llu", again.algorithm, again.reason,
        (unsigned long long)again.sequence);
  setenv("UNILINK_ALGO", "allreduce:nosuch", 1);
  int rc = allreduce_checked(c, me, n, 2, &after);
  unsetenv("UNILINK_ALGO");
  CHECK(rc == UL_ERR_INVALID_ARG, "a forced unknown algorithm gave %d", rc);
  memset(&after, 0, sizeof after); /* allreduce_checked left it as it was */
  after.struct_size = sizeof after;
  CHECK(ul_comm_last_call(c, &after) == UL_OK, "last_call");
  CHECK(after.sequence == again.sequence && !strcmp(after.algorithm, again.algorithm) &&
            !strcmp(after.reason, again.reason) && !strcmp(after.path, again.path) &&
            after.bytes == again.bytes && after.fallback == again.fallback,
        "after a failed call the last call is #%llu '%s' (%s, %s, %zu B), not #%llu '%s'",
        (unsigned long long)after.sequence, after.algorithm, after.reason, after.path,
        after.bytes, (unsigned long long)again.sequence, again.algorithm);
  CHECK(allreduce_checked(c, me, n, 2, &after) == 0, "8 B allreduce after the failure");
  CHECK(!strcmp(after.algorithm, "line") && after.sequence == again.sequence + 2,
        "then ran '%s' as call %llu", after.algorithm, (unsigned long long)after.sequence);
  /* A forced one-shot too large for its staging: the error names the collective and the
   * size it counted (it said "allreduce" for every collective). */
  static int32_t big[16384];
  setenv("UNILINK_ALGO", "broadcast:staged", 1);
  rc = ul_broadcast(big, big, 16384, UL_INT32, 0, c, NULL);
  unsetenv("UNILINK_ALGO");
  CHECK(rc == UL_ERR_UNSUPPORTED && strstr(ul_comm_last_error(c), "'staged' broadcast of 65536 "
                                                                  "bytes; it handles at most"),
        "forced staged broadcast of 64 KiB gave %d: %s", rc, ul_comm_last_error(c));
  return 0;
}

/* processes: UNILINK_ALGO is set in one rank's own environment, not under a sibling thread */
Test(host_process, last_call_is_the_last_that_ran, .timeout = 60) {
  cr_assert_eq(run_ranks(2, 1, last_call_follows), 0);
}

/* UNILINK_TUNING_FILE (tests below): broadcast staged up to 1 MiB, allgather never. */
static int tuned_selection_on(ul_comm_t c, int me, int n, int32_t *buf);
static int tuned_selection(ul_comm_t c, int me, int n) {
  int32_t *buf = malloc(sizeof(int32_t) * 16384 * 4); /* per rank: thread ranks share statics */
  CHECK(buf != NULL, "out of memory");
  int bad = tuned_selection_on(c, me, n, buf);
  free(buf);
  return bad;
}

static int tuned_selection_on(ul_comm_t c, int me, int n, int32_t *buf) {
  ul_call_info_t info = {.struct_size = sizeof info};
  for (int i = 0; i < 16384; i++) buf[i] = me == 0 ? i : -1;
  CHECK(ul_broadcast(buf, buf, 16384, UL_INT32, 0, c, NULL) == UL_OK, "bcast");
  CHECK(ul_comm_last_call(c, &info) == UL_OK && strcmp(info.algorithm, "staged") == 0,
        "64 KiB broadcast ran '%s', the file says staged", info.algorithm);
  CHECK(strstr(info.reason, "UNILINK_TUNING_FILE") != NULL, "reason: %s", info.reason);
  for (int i = 0; i < 16384; i++) CHECK(buf[i] == i, "bcast [%d] = %d", i, buf[i]);
  /* 8 KiB a rank: above the flagged-line limit, inside the built-in staged one */
  int32_t mine[2048];
  for (int i = 0; i < 2048; i++) mine[i] = me * 10000 + i;
  CHECK(ul_allgather(mine, buf, 2048, UL_INT32, c, NULL) == UL_OK, "allgather");
  CHECK(ul_comm_last_call(c, &info) == UL_OK && strcmp(info.algorithm, "direct") == 0,
        "8 KiB-a-rank allgather ran '%s', the file says direct", info.algorithm);
  for (int r = 0; r < n; r++)
    for (int i = 0; i < 2048; i++) CHECK(buf[r * 2048 + i] == r * 10000 + i, "allgather");
  return 0;
}

static char *write_tuning(const char *text) {
  static char path[] = "/tmp/ul_tuning_XXXXXX";
  strcpy(path, "/tmp/ul_tuning_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

Test(host_tuning, file_moves_the_limits, .timeout = 60) {
  char *path = write_tuning("# measured here\nbroadcast 2 thread 1048576\nallgather 2 thread 0\n"
                            "broadcast 3 thread 0   # another rank count: ignored\n");
  setenv("UNILINK_TUNING_FILE", path, 1);
  int bad = run_ranks(2, 0, tuned_selection);
  unsetenv("UNILINK_TUNING_FILE");
  unlink(path);
  cr_assert_eq(bad, 0);
}

Test(host_tuning, bad_file_is_refused, .timeout = 60) {
  char *path = write_tuning("allreduce 2 thread 4096\nallreduce two thread 4096\n");
  setenv("UNILINK_TUNING_FILE", path, 1);
  ul_comm_t comms[2];
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "host";
  ul_result_t rc = ul_comm_init_all(comms, &cfg, 2, NULL);
  const char *err = ul_last_error();
  cr_expect_eq(rc, UL_ERR_INVALID_ARG, "%s", ul_result_name(rc));
  cr_expect(strstr(err, "UNILINK_TUNING_FILE") && strstr(err, "line 2"), "%s", err);
  if (rc == UL_OK)
    for (int i = 0; i < 2; i++) ul_comm_destroy(comms[i]);
  unlink(path);
  /* bounce_from is for process ranks only */
  path = write_tuning("alltoall 2 thread bounce_from 4096\n");
  setenv("UNILINK_TUNING_FILE", path, 1);
  rc = ul_comm_init_all(comms, &cfg, 2, NULL);
  err = ul_last_error();
  cr_expect_eq(rc, UL_ERR_INVALID_ARG, "%s", ul_result_name(rc));
  cr_expect(strstr(err, "line 1") && strstr(err, "bounce_from is for process ranks"), "%s", err);
  if (rc == UL_OK)
    for (int i = 0; i < 2; i++) ul_comm_destroy(comms[i]);
  setenv("UNILINK_TUNING_FILE", "/nonexistent/tuning", 1);
  rc = ul_comm_init_all(comms, &cfg, 2, NULL);
  cr_expect_eq(rc, UL_ERR_INVALID_ARG, "%s", ul_result_name(rc));
  cr_expect(strstr(ul_last_error(), "/nonexistent/tuning") != NULL, "%s", ul_last_error());
  unsetenv("UNILINK_TUNING_FILE");
  unlink(path);
}

/* Rank 0 of 2 process ranks receives what rank 1 sends 5 ms late; the ranks pinned to a
 * CPU each (cpu[rank]) or not (cpu NULL). Exit 0: the receive got the value, and it
 * yielded while it waited exactly where it should. */
static int p2p_late_send(const ul_unique_id_t *id, int rank, const int *cpu) {
  if (cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu[rank], &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) return 1;
  }
  ul_comm_t c;
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = 20000;
  if (ul_comm_init_rank(&c, &cfg, 2, *id, rank) != UL_OK) return 2;
  int32_t v = rank == 1 ? 7 : 0;
  int bad = 0;
  if (rank == 1) {
    usleep(5000);
    bad = ul_send(&v, 1, UL_INT32, 0, c, NULL) != UL_OK ? 3 : 0;
  } else {
    long before = atomic_load(&yields_seen);
    bad = ul_recv(&v, 1, UL_INT32, 1, c, NULL) != UL_OK ? 4 : v != 7 ? 5 : 0;
    long yields = atomic_load(&yields_seen) - before;
    if (!bad && cpu && yields != 0) bad = 6;
    if (!bad && !cpu && yields == 0) bad = 7;
  }
  ul_comm_destroy(c);
  return bad;
}

/* Decision 0021 for ul_send/ul_recv: ranks pinned each to a CPU of its own poll while
 * they wait and never yield (a yield could only hand the CPU to an unrelated task, for
 * its time slice: 2 ms a call next to a busy process); unpinned ranks yield. */
Test(host_process, p2p_waits_yield_only_where_a_peer_may_share_the_cpu, .timeout = 60) {
  cpu_set_t mine;
  cr_assert_eq(sched_getaffinity(0, sizeof mine, &mine), 0);
  if (CPU_COUNT(&mine) < 2) cr_skip_test("this test may run on one CPU only");
  int cpu[2], k = 0;
  for (int i = 0; i < CPU_SETSIZE && k < 2; i++)
    if (CPU_ISSET(i, &mine)) cpu[k++] = i;
  for (int pinned = 0; pinned < 2; pinned++) {
    ul_unique_id_t id;
    cr_assert_eq(ul_get_unique_id("host", &id), UL_OK, "%s", ul_last_error());
    pid_t pids[2];
    for (int r = 0; r < 2; r++)
      if ((pids[r] = fork()) == 0) _exit(p2p_late_send(&id, r, pinned ? cpu : NULL));
    for (int r = 0; r < 2; r++) {
      int st = 0;
      waitpid(pids[r], &st, 0);
      cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s, rank %d failed at step %d",
                pinned ? "pinned apart" : "not pinned", r, WEXITSTATUS(st));
    }
  }
}

#define RANK_TESTS(fn)                                                                           \
  Test(host_threads, fn##_1, .timeout = 120) { cr_assert_eq(run_ranks(1, 0, fn), 0); }           \
  Test(host_threads, fn##_2, .timeout = 120) { cr_assert_eq(run_ranks(2, 0, fn), 0); }           \
  Test(host_threads, fn##_3, .timeout = 120) { cr_assert_eq(run_ranks(3, 0, fn), 0); }           \
  Test(host_threads, fn##_4, .timeout = 120) { cr_assert_eq(run_ranks(4, 0, fn), 0); }           \
  Test(host_threads, fn##_8, .timeout = 200) { cr_assert_eq(run_ranks(8, 0, fn), 0); }           \
  Test(host_process, fn##_2, .timeout = 120) { cr_assert_eq(run_ranks(2, 1, fn), 0); }           \
  Test(host_process, fn##_4, .timeout = 200) { cr_assert_eq(run_ranks(4, 1, fn), 0); }

RANK_TESTS(all_collectives)
RANK_TESTS(float_avg)
RANK_TESTS(sendrecv_patterns)
RANK_TESTS(one_sided)
RANK_TESTS(streams_inflight)
RANK_TESTS(split_even_odd)
RANK_TESTS(staged_run_ahead)
RANK_TESTS(rooted_small_run_ahead)
RANK_TESTS(line_run_ahead)
RANK_TESTS(line_broadcast_run_ahead)
RANK_TESTS(line_gather_run_ahead)
RANK_TESTS(line_reduce_run_ahead)
