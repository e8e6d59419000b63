// UNILINK_TEST_LINK_SHARED
/* Gaps an audit of issue 16 found after the first fixes (docs/reliability.md): a stream
 * destroyed before its blocked communicator, a single-copy failure after a peer death
 * that must name the dead rank, and device lists of ul_comm_init_all. Each test failed
 * before its fix. */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include "reliability_util.h"

/* Two thread ranks of one host communicator (ul_comm_init_all). */
static void two_thread_ranks(int timeout_ms, ul_comm_t comms[2]) {
  ul_config_t cfg = cfg_ms(timeout_ms);
  cfg.backend = "host";
  cr_assert_eq(ul_comm_init_all(comms, &cfg, 2, NULL), UL_OK, "init_all: %s", ul_last_error());
}

/* Rank 0 queues `n` allreduces its peer never joins; the first one blocks. */
static ul_stream_t queue_blocked_work(ul_comm_t c, int n) {
  static float x[8][256], y[8][256];
  ul_stream_t st = NULL;
  cr_assert_eq(ul_stream_create(c, &st), UL_OK, "%s", ul_last_error());
  for (int i = 0; i < n; i++)
    cr_assert_eq(ul_allreduce(x[i], y[i], 256, UL_FP32, UL_SUM, c, st), UL_OK, "%s",
                 ul_comm_last_error(c));
  sleep_ms(100); /* the first one is now waiting for rank 1 */
  return st;
}

static int thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  if (!d) return -1;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (de->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* ================================================================ stream lifetime */

/* Stream first: ul_stream_destroy on a stream whose task waits for a peer returns at once
 * (it used to wait for the whole timeout: UL_ERR_TIMEOUT after 5 s here), and the
 * abort after it is prompt too. */
Test(stream_lifetime, stream_first_then_abort_is_prompt, .timeout = 30) {
  ul_comm_t comms[2];
  two_thread_ranks(5000, comms);
  ul_stream_t st = queue_blocked_work(comms[0], 8);
  double t0 = now_ms();
  ul_result_t rc = ul_stream_destroy(st);
  double destroy_ms = now_ms() - t0;
  cr_expect_eq(rc, UL_OK, "stream destroy: %s: %s", ul_result_name(rc), ul_last_error());
  cr_expect_lt(destroy_ms, 500.0, "stream destroy took %.0f ms (timeout 5000)", destroy_ms);
  t0 = now_ms();
  cr_expect_eq(ul_comm_abort(comms[0]), UL_OK);
  double abort_ms = now_ms() - t0;
  cr_expect_lt(abort_ms, 500.0, "abort after the stream's destroy took %.0f ms", abort_ms);
  cr_expect_eq(ul_comm_abort(comms[1]), UL_OK);
}

/* Comm first: abort the blocked communicator, then destroy its stream: both prompt, and
 * the stream handle is freed (ASan/valgrind see no leak or use after free). */
Test(stream_lifetime, comm_first_then_stream_is_prompt, .timeout = 30) {
  ul_comm_t comms[2];
  two_thread_ranks(5000, comms);
  ul_stream_t st = queue_blocked_work(comms[0], 8);
  double t0 = now_ms();
  cr_expect_eq(ul_comm_abort(comms[0]), UL_OK);
  double abort_ms = now_ms() - t0;
  t0 = now_ms();
  cr_expect_neq(ul_stream_synchronize(st), UL_OK, "the orphaned stream refuses work");
  cr_expect_eq(ul_stream_destroy(st), UL_OK);
  double destroy_ms = now_ms() - t0;
  cr_expect_lt(abort_ms, 500.0, "abort took %.0f ms", abort_ms);
  cr_expect_lt(destroy_ms, 100.0, "stream destroy after the abort took %.0f ms", destroy_ms);
  cr_expect_eq(ul_comm_abort(comms[1]), UL_OK);
}

/* The queued calls of a destroyed stream are not lost silently: they complete with their
 * error recorded on the communicator (async error, last error, finalize), and the
 * communicator's destroy afterwards is prompt. */
Test(stream_lifetime, destroyed_stream_errors_are_recorded, .timeout = 30) {
  ul_comm_t comms[2];
  two_thread_ranks(SHORT_MS, comms);
  ul_stream_t st = queue_blocked_work(comms[0], 4);
  double t0 = now_ms();
  cr_expect_eq(ul_stream_destroy(st), UL_OK);
  cr_expect_lt(now_ms() - t0, 200.0, "stream destroy took %.0f ms", now_ms() - t0);
  ul_result_t async = UL_OK;
  while (now_ms() - t0 < 4 * SHORT_MS) {
    cr_assert_eq(ul_comm_get_async_error(comms[0], &async), UL_OK);
    if (async != UL_OK) break;
    sleep_ms(10);
  }
  cr_expect_eq(async, UL_ERR_TIMEOUT, "async error: %s", ul_result_name(async));
  /* the last queued call's sentence: refused because of the first one's timeout */
  cr_expect(strstr(ul_comm_last_error(comms[0]), "UL_ERR_TIMEOUT") != NULL, "sentence: %s",
            ul_comm_last_error(comms[0]));
  cr_expect_eq(ul_comm_finalize(comms[0]), UL_ERR_TIMEOUT);
  t0 = now_ms();
  cr_expect_eq(ul_comm_destroy(comms[0]), UL_OK);
  cr_expect_lt(now_ms() - t0, 500.0, "destroy took %.0f ms", now_ms() - t0);
  cr_expect_eq(ul_comm_destroy(comms[1]), UL_OK);
}

typedef struct healthy {
  ul_comm_t comm;
  int rank, bad;
  ul_result_t fin;
} healthy_t;

/* Each rank: queue work on a stream, destroy the stream at once, then finalize: the work
 * still runs, in order (CUDA's rule for a stream destroyed with work pending). Twenty
 * streams created and destroyed this way leave no worker thread behind. */
static void *healthy_rank(void *p) {
  healthy_t *h = p;
  enum { N = 8, COUNT = 1024 };
  int32_t *in = malloc(N * COUNT * sizeof *in), *out = calloc(N * COUNT, sizeof *out);
  for (int i = 0; i < N * COUNT; i++) in[i] = i + h->rank;
  for (int round = 0; round < 20 && !h->bad; round++) {
    ul_stream_t st = NULL;
    if (ul_stream_create(h->comm, &st) != UL_OK) h->bad = -1;
    for (int k = 0; k < N && !h->bad; k++)
      if (ul_allreduce(in + k * COUNT, out + k * COUNT, COUNT, UL_INT32, UL_SUM, h->comm, st) !=
          UL_OK)
        h->bad = -2;
    if (!h->bad && ul_stream_destroy(st) != UL_OK) h->bad = -3;
  }
  h->fin = ul_comm_finalize(h->comm);
  for (int i = 0; i < N * COUNT && !h->bad; i++)
    if (out[i] != 2 * i + 1) h->bad = i + 1;
  free(in);
  free(out);
  return NULL;
}

Test(stream_lifetime, destroyed_stream_work_completes_and_is_freed, .timeout = 60) {
  int threads_before = thread_count();
  ul_comm_t comms[2];
  two_thread_ranks(LONG_MS, comms);
  healthy_t h[2];
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    h[r] = (healthy_t){.comm = comms[r], .rank = r};
    pthread_create(&th[r], NULL, healthy_rank, &h[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++) {
    cr_expect_eq(h[r].fin, UL_OK, "rank %d finalize: %s", r, ul_result_name(h[r].fin));
    cr_expect_eq(h[r].bad, 0, "rank %d: step %d (element %d wrong when finalize returned)", r,
                 h[r].bad, h[r].bad - 1);
    cr_expect_eq(ul_comm_destroy(comms[r]), UL_OK);
  }
  cr_expect_eq(thread_count(), threads_before, "stream workers left running");
}

/* ============================================== single copy after a peer death (D10) */

/* Three process ranks, broadcast from rank 1 over single-copy reads (direct algorithm,
 * process_vm_readv). Rank 1's buffer is unreadable (a PROT_NONE mapping: what a rank
 * that left and freed its buffer looks like to a reader), rank 2 is SIGKILLed while it
 * waits inside the call (an unreaped child: a zombie, which kill(pid, 0) still sees as
 * alive), and only then does rank 0 enter. Rank 0's read fails with EFAULT against the
 * live rank 1; the sentence must be UL_ERR_PEER_LOST naming the dead rank 2 (before:
 * UL_ERR_SYSTEM "process_vm_readv ... Bad address" naming rank 1). */
Test(peer_loss, single_copy_fault_names_the_dead_rank, .timeout = 60) {
  setenv("UNILINK_ALGO", "broadcast:direct", 1);
  setenv("UNILINK_CMA", "1", 1);
  enum { COUNT = 4096 };
  ul_unique_id_t id = host_id();
  int entered[2], go[2], gate[2];
  cr_assert_eq(pipe(entered), 0);
  cr_assert_eq(pipe(go), 0);
  cr_assert_eq(pipe(gate), 0);
  pid_t pids[3];
  for (int i = 0; i < 3; i++) {
    pids[i] = fork();
    cr_assert_neq(pids[i], -1);
    if (pids[i] != 0) continue;
    close(entered[0]);
    close(go[1]);
    close(gate[1]);
    ul_comm_t c = NULL;
    ul_config_t cfg = cfg_ms(LONG_MS);
    CHILD_CHECK(1, ul_comm_init_rank(&c, &cfg, 3, id, i) == UL_OK, "rank %d init: %s", i,
                ul_last_error());
    CHILD_CHECK(2, ul_barrier(c, NULL) == UL_OK, "rank %d barrier: %s", i, ul_comm_last_error(c));
    char b = 'e';
    if (i == 0) {
      while (read(go[0], &b, 1) < 0 && errno == EINTR) {
      }
      float *buf = calloc(COUNT, sizeof *buf);
      ul_result_t rc = ul_broadcast(buf, buf, COUNT, UL_FP32, 1, c, NULL);
      const char *msg = ul_comm_last_error(c);
      CHILD_CHECK(3, rc == UL_ERR_PEER_LOST, "rank 0: %s: %s", ul_result_name(rc), msg);
      CHILD_CHECK(4, names_rank(msg, 2), "rank 0 does not name rank 2: %s", msg);
      ul_comm_abort(c);
      _exit(0);
    }
    void *buf = i == 1 ? mmap(NULL, COUNT * sizeof(float), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0)
                       : calloc(COUNT, sizeof(float));
    CHILD_CHECK(5, buf != MAP_FAILED && buf != NULL, "rank %d: no buffer", i);
    CHILD_CHECK(6, write(entered[1], &b, 1) == 1, "rank %d: pipe", i);
    /* rank 1 (in place: it never touches its own buffer) waits here for the others */
    ul_broadcast(buf, buf, COUNT, UL_FP32, 1, c, NULL);
    while (read(gate[0], &b, 1) < 0 && errno == EINTR) {
    } /* stay alive (EOF when the parent is done) */
    ul_comm_abort(c);
    _exit(0);
  }
  close(entered[1]);
  close(go[0]);
  close(gate[0]);
  char b;
  for (int k = 0; k < 2; k++) cr_assert_eq(read(entered[0], &b, 1), 1, "a rank died early");
  sleep_ms(500); /* ranks 1 and 2 have announced their arrival in the broadcast */
  kill(pids[2], SIGKILL);
  siginfo_t si;
  cr_assert_eq(waitid(P_PID, (id_t)pids[2], &si, WEXITED | WNOWAIT), 0); /* dead, not reaped */
  cr_assert_eq(write(go[1], "g", 1), 1);
  int st0 = wait_child(pids[0]);
  close(gate[1]);
  int st1 = wait_child(pids[1]);
  wait_child(pids[2]);
  close(go[1]);
  close(entered[0]);
  unsetenv("UNILINK_ALGO");
  unsetenv("UNILINK_CMA");
  cr_expect_eq(st0, 0, "rank 0 failed at step %d (its sentence is above)", st0);
  cr_expect_eq(st1, 0, "rank 1 failed at step %d", st1);
}

/* ========================================================= ul_comm_init_all devices */

/* A device index is >= 0 or UL_CONFIG_UNDEF ("let the library decide", INT32_MIN); any
 * other negative entry is refused with a sentence naming it, and comms is not touched. */
Test(config, init_all_negative_device_refused, .timeout = 20) {
  ul_config_t cfg = cfg_ms(5000);
  cfg.backend = "host";
  int bad[][2] = {{-9, INT_MIN}, {0, -1}, {INT_MIN + 1, 0}};
  const char *want[] = {"devlist[0] is -9", "devlist[1] is -1", "devlist[0] is -2147483647"};
  for (int k = 0; k < 3; k++) {
    ul_comm_t comms[2] = {(ul_comm_t)0x1, (ul_comm_t)0x2};
    ul_result_t rc = ul_comm_init_all(comms, &cfg, 2, bad[k]);
    cr_expect_eq(rc, UL_ERR_INVALID_ARG, "{%d, %d}: %s", bad[k][0], bad[k][1], ul_result_name(rc));
    cr_expect(strstr(ul_last_error(), want[k]) != NULL, "sentence: %s", ul_last_error());
    cr_expect(comms[0] == (ul_comm_t)0x1 && comms[1] == (ul_comm_t)0x2, "comms was written");
  }
  /* config.device + i must not overflow either */
  ul_comm_t comms[2] = {(ul_comm_t)0x1, (ul_comm_t)0x2};
  cfg.device = INT_MAX;
  cr_expect_eq(ul_comm_init_all(comms, &cfg, 2, NULL), UL_ERR_INVALID_ARG, "%s", ul_last_error());
  cr_expect(comms[0] == (ul_comm_t)0x1, "comms was written");
  /* what stays valid */
  cfg.device = UL_CONFIG_UNDEF;
  int ok[][2] = {{0, 1}, {INT_MIN, INT_MIN}};
  for (int k = 0; k < 2; k++) {
    cr_expect_eq(ul_comm_init_all(comms, &cfg, 2, ok[k]), UL_OK, "{%d, %d}: %s", ok[k][0],
                 ok[k][1], ul_last_error());
    ul_comm_destroy(comms[0]);
    ul_comm_destroy(comms[1]);
  }
}
