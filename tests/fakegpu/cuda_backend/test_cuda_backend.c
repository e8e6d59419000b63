/* The cuda backend (libunilink-cuda.so through the public API) under the fake CUDA
 * runtime: device memory the CPU cannot touch, streams as worker threads with the legacy
 * default stream's rules, a current device per thread, kernels that fail on another
 * device's stream, leak counters (fakecuda.h). Each test names the review finding it
 * proves fixed (shared/reviews/gpu-backends.md). Thread ranks run in threads of the test
 * process, process ranks in forked children. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <unilink/unilink.h>

#include "fakecuda.h"

#define TIMEOUT_MS 20000
#define MAXR 4

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int g_timeout_ms = TIMEOUT_MS; /* a test expecting a hang before its fix lowers it */

static ul_config_t cfg_on(int device) {
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "cuda";
  cfg.timeout_ms = g_timeout_ms;
  cfg.device = device;
  return cfg;
}

/* ------------------------------------------------------------ thread ranks */

typedef struct rank_ctx rank_ctx_t;
typedef void (*rank_body_t)(rank_ctx_t *);
struct rank_ctx {
  int rank, nranks, device; /* device UL_CONFIG_UNDEF: backend decides */
  ul_unique_id_t id;
  ul_comm_t comm;
  ul_result_t init_rc;
  rank_body_t body;
  int bad;           /* body's failure count */
  char why[512];     /* first failure */
  void *arg;
};

static void rank_fail(rank_ctx_t *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rank_fail(rank_ctx_t *x, const char *fmt, ...) {
  if (x->bad++) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->why, sizeof x->why, fmt, ap);
  va_end(ap);
}

#define RFAIL(x, ...)                                                                          \
  do {                                                                                         \
    rank_fail((x), __VA_ARGS__);                                                               \
    return;                                                                                    \
  } while (0)

#define RCHECK(x, rc, what)                                                                    \
  do {                                                                                         \
    ul_result_t r_ = (rc);                                                                     \
    if (r_ != UL_OK) {                                                                         \
      rank_fail((x), "rank %d: %s: %s: %s", (x)->rank, (what), ul_result_name(r_),             \
                ul_comm_last_error((x)->comm));                                                \
      return;                                                                                  \
    }                                                                                          \
  } while (0)

static void *rank_main(void *arg) {
  rank_ctx_t *x = arg;
  ul_config_t cfg = cfg_on(x->device);
  x->init_rc = ul_comm_init_rank(&x->comm, &cfg, x->nranks, x->id, x->rank);
  if (x->init_rc != UL_OK) {
    rank_fail(x, "rank %d: init: %s: %s", x->rank, ul_result_name(x->init_rc), ul_last_error());
    return NULL;
  }
  if (x->body) x->body(x);
  return NULL;
}

/* Init n thread ranks (devices[r], or UNDEF when devices is NULL) and run body in each;
 * comms stay alive for the caller (destroy_all). */
static void run_threads(rank_ctx_t *x, int n, const int *devices, rank_body_t body, void *arg) {
  ul_unique_id_t id;
  ul_result_t rc = ul_get_unique_id("cuda", &id);
  cr_assert_eq(rc, UL_OK, "ul_get_unique_id: %s", ul_last_error());
  pthread_t th[MAXR];
  for (int r = 0; r < n; r++) {
    memset(&x[r], 0, sizeof x[r]);
    x[r].rank = r;
    x[r].nranks = n;
    x[r].device = devices ? devices[r] : UL_CONFIG_UNDEF;
    x[r].id = id;
    x[r].body = body;
    x[r].arg = arg;
    cr_assert_eq(pthread_create(&th[r], NULL, rank_main, &x[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < n; r++) cr_assert_eq(x[r].bad, 0, "%s", x[r].why);
}

static void destroy_all(rank_ctx_t *x, int n) {
  for (int r = 0; r < n; r++)
    if (x[r].comm) cr_assert_eq(ul_comm_destroy(x[r].comm), UL_OK);
}

/* The fake's leak counters, all of them at once. */
typedef struct counts {
  int allocs, registered, pinned, ipc, streams, events;
} counts_t;

static counts_t counts_now(void) {
  counts_t c = {fakecuda_live_allocations(), fakecuda_registered_ranges(),
                fakecuda_pinned_allocations(), fakecuda_open_ipc(), fakecuda_live_streams(),
                fakecuda_live_events()};
  return c;
}

static int counts_equal(counts_t a, counts_t b, char *buf, size_t len) {
  snprintf(buf, len,
           "allocations %d->%d, host registrations %d->%d, pinned %d->%d, open IPC %d->%d, "
           "streams %d->%d, events %d->%d",
           a.allocs, b.allocs, a.registered, b.registered, a.pinned, b.pinned, a.ipc, b.ipc,
           a.streams, b.streams, a.events, b.events);
  return a.allocs == b.allocs && a.registered == b.registered && a.pinned == b.pinned &&
         a.ipc == b.ipc && a.streams == b.streams && a.events == b.events;
}

/* --------------------------------------------------- allreduce, exact result */

typedef struct ar_arg {
  size_t count;
  int iters;
  int use_stream; /* 1: a ul_stream_create stream (then synchronize), 0: NULL stream */
} ar_arg_t;

static int32_t ar_value(int rank, size_t i, int it) {
  return (int32_t)((rank + 1) * 1000003 + (int64_t)i * 7 + it * 13);
}

/* Device buffers in and out through ul_mem_copy, exact int32 sum. */
static void ar_body(rank_ctx_t *x) {
  const ar_arg_t *a = x->arg;
  size_t bytes = a->count * sizeof(int32_t);
  int32_t *host = malloc(bytes);
  void *dsend = NULL, *drecv = NULL;
  if (!host) RFAIL(x, "out of memory");
  ul_stream_t st = NULL;
  if (a->use_stream) RCHECK(x, ul_stream_create(x->comm, &st), "ul_stream_create");
  RCHECK(x, ul_mem_alloc(x->comm, bytes, &dsend), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, bytes, &drecv), "ul_mem_alloc");
  for (int it = 0; it < a->iters; it++) {
    for (size_t i = 0; i < a->count; i++) host[i] = ar_value(x->rank, i, it);
    RCHECK(x, ul_mem_copy(dsend, host, bytes, x->comm, st), "ul_mem_copy in");
    RCHECK(x, ul_allreduce(dsend, drecv, a->count, UL_INT32, UL_SUM, x->comm, st), "ul_allreduce");
    memset(host, 0xee, bytes);
    RCHECK(x, ul_mem_copy(host, drecv, bytes, x->comm, st), "ul_mem_copy out");
    if (st) RCHECK(x, ul_stream_synchronize(st), "ul_stream_synchronize");
    for (size_t i = 0; i < a->count; i++) {
      uint32_t want = 0;
      for (int r = 0; r < x->nranks; r++) want += (uint32_t)ar_value(r, i, it);
      if ((uint32_t)host[i] != want) {
        rank_fail(x, "rank %d iteration %d: element %zu of %zu is %d, want %d", x->rank, it, i,
                  a->count, host[i], (int32_t)want);
        break;
      }
    }
  }
  RCHECK(x, ul_mem_free(x->comm, dsend), "ul_mem_free");
  RCHECK(x, ul_mem_free(x->comm, drecv), "ul_mem_free");
  if (st) RCHECK(x, ul_stream_destroy(st), "ul_stream_destroy");
  free(host);
}

/* p2p path: two GPUs of one process with peer access. Sizes: one-shot, one chunk, many
 * chunks with a ragged tail. */
Test(cuda_backend, allreduce_two_devices_p2p) {
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  ar_arg_t a = {1, 2, 0};
  size_t counts[] = {1, 5000, 300001};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    a.count = counts[k];
    run_threads(x, 2, devs, ar_body, &a);
    ul_call_info_t info = {.struct_size = sizeof(ul_call_info_t)};
    cr_assert_eq(ul_comm_last_call(x[0].comm, &info), UL_OK);
    cr_assert_str_eq(info.path, "p2p");
    destroy_all(x, 2);
  }
}

/* The same on a user stream. */
Test(cuda_backend, allreduce_two_devices_user_stream) {
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  ar_arg_t a = {300001, 2, 1};
  run_threads(x, 2, devs, ar_body, &a);
  destroy_all(x, 2);
}

/* staged path (forced), exact result too: every chunk goes through the pinned shadow. */
Test(cuda_backend, allreduce_two_devices_staged) {
  setenv("UNILINK_CUDA_PATH", "staged", 1);
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  ar_arg_t a = {1, 2, 0};
  size_t counts[] = {1, 5000, 300001};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    a.count = counts[k];
    run_threads(x, 2, devs, ar_body, &a);
    ul_call_info_t info = {.struct_size = sizeof(ul_call_info_t)};
    cr_assert_eq(ul_comm_last_call(x[0].comm, &info), UL_OK);
    cr_assert_str_eq(info.path, "staged");
    destroy_all(x, 2);
  }
}

/* auto path on GPUs without peer access picks staged and stays exact. */
Test(cuda_backend, allreduce_no_p2p_auto_staged) {
  setenv("FAKEGPU_P2P", "no", 1);
  rank_ctx_t x[3];
  int devs[3] = {0, 1, 2};
  ar_arg_t a = {300001, 2, 0};
  run_threads(x, 3, devs, ar_body, &a);
  ul_call_info_t info = {.struct_size = sizeof(ul_call_info_t)};
  cr_assert_eq(ul_comm_last_call(x[1].comm, &info), UL_OK);
  cr_assert_str_eq(info.path, "staged");
  destroy_all(x, 3);
}

/* ------------------------------------------- C3: staged send/recv is exact */

static uint8_t sr_byte(int from, int msg, size_t i) {
  return (uint8_t)(from * 101 + msg * 37 + i * 13 + (i >> 9));
}

#define SR_MSGS 4
static const size_t sr_bytes[SR_MSGS] = {1, 4096, 1048576 + 12, 300000};

/* Ranks 0 and 1 exchange SR_MSGS messages both ways at once (one group per message),
 * device buffers, each received message compared byte for byte. */
static void sr_body(rank_ctx_t *x) {
  int peer = 1 - x->rank;
  size_t maxb = 1048576 + 12;
  uint8_t *host = malloc(maxb);
  void *dsend = NULL, *drecv = NULL;
  if (!host) RFAIL(x, "out of memory");
  RCHECK(x, ul_mem_alloc(x->comm, maxb, &dsend), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, maxb, &drecv), "ul_mem_alloc");
  for (int m = 0; m < SR_MSGS; m++) {
    size_t n = sr_bytes[m];
    for (size_t i = 0; i < n; i++) host[i] = sr_byte(x->rank, m, i);
    RCHECK(x, ul_mem_copy(dsend, host, n, x->comm, NULL), "ul_mem_copy in");
    RCHECK(x, ul_mem_set(drecv, 0, n, x->comm, NULL), "ul_mem_set");
    RCHECK(x, ul_group_start(), "ul_group_start");
    RCHECK(x, ul_send(dsend, n, UL_UINT8, peer, x->comm, NULL), "ul_send");
    RCHECK(x, ul_recv(drecv, n, UL_UINT8, peer, x->comm, NULL), "ul_recv");
    RCHECK(x, ul_group_end(), "ul_group_end");
    memset(host, 0, n);
    RCHECK(x, ul_mem_copy(host, drecv, n, x->comm, NULL), "ul_mem_copy out");
    for (size_t i = 0; i < n; i++)
      if (host[i] != sr_byte(peer, m, i)) {
        rank_fail(x, "rank %d message %d (%zu bytes): byte %zu is 0x%02x, want 0x%02x", x->rank,
                  m, n, i, host[i], sr_byte(peer, m, i));
        break;
      }
    if (x->bad) break;
  }
  ul_mem_free(x->comm, dsend);
  ul_mem_free(x->comm, drecv);
  free(host);
}

Test(cuda_backend, sendrecv_staged_exact) {
  setenv("UNILINK_CUDA_PATH", "staged", 1);
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, sr_body, NULL);
  destroy_all(x, 2);
}

/* Only receiving (no credit waits of its own that would drain by chance). */
static void recv_only_body(rank_ctx_t *x) {
  size_t n = 1048576 + 12;
  uint8_t *host = malloc(n);
  void *d = NULL;
  if (!host) RFAIL(x, "out of memory");
  RCHECK(x, ul_mem_alloc(x->comm, n, &d), "ul_mem_alloc");
  for (int m = 0; m < 2; m++) {
    if (x->rank == 0) {
      for (size_t i = 0; i < n; i++) host[i] = sr_byte(0, m, i);
      RCHECK(x, ul_mem_copy(d, host, n, x->comm, NULL), "ul_mem_copy in");
      RCHECK(x, ul_send(d, n, UL_UINT8, 1, x->comm, NULL), "ul_send");
    } else {
      RCHECK(x, ul_recv(d, n, UL_UINT8, 0, x->comm, NULL), "ul_recv");
      RCHECK(x, ul_mem_copy(host, d, n, x->comm, NULL), "ul_mem_copy out");
      for (size_t i = 0; i < n; i++)
        if (host[i] != sr_byte(0, m, i)) {
          rank_fail(x, "message %d: byte %zu is 0x%02x, want 0x%02x", m, i, host[i],
                    sr_byte(0, m, i));
          break;
        }
    }
  }
  ul_mem_free(x->comm, d);
  free(host);
}

Test(cuda_backend, recv_staged_exact) {
  setenv("UNILINK_CUDA_PATH", "staged", 1);
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, recv_only_body, NULL);
  destroy_all(x, 2);
}

/* ------------------------- H1: a NULL stream runs after the legacy stream */

/* Each iteration: zero the input (done), cudaMemsetAsync it on the legacy default stream
 * (slow: FAKEGPU_DELAY_US), then ul_allreduce on the NULL stream, which must see the
 * memset's bytes. */
static void legacy_body(rank_ctx_t *x) {
  const int n = 4096;
  void *din = NULL, *dout = NULL;
  int32_t *host = malloc(n * sizeof(int32_t));
  if (!host) RFAIL(x, "out of memory");
  RCHECK(x, ul_mem_alloc(x->comm, n * sizeof(int32_t), &din), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, n * sizeof(int32_t), &dout), "ul_mem_alloc");
  if (cudaSetDevice(x->device) != cudaSuccess) RFAIL(x, "cudaSetDevice");
  for (int it = 0; it < 8; it++) {
    RCHECK(x, ul_mem_set(din, 0, n * sizeof(int32_t), x->comm, NULL), "ul_mem_set");
    int v = 1 + x->rank + 2 * it; /* byte value */
    if (cudaMemsetAsync(din, v, n * sizeof(int32_t), 0) != cudaSuccess)
      RFAIL(x, "cudaMemsetAsync on the legacy stream failed");
    RCHECK(x, ul_allreduce(din, dout, n, UL_INT32, UL_SUM, x->comm, NULL), "ul_allreduce");
    RCHECK(x, ul_mem_copy(host, dout, n * sizeof(int32_t), x->comm, NULL), "ul_mem_copy out");
    uint32_t want = 0;
    for (int r = 0; r < x->nranks; r++) want += 0x01010101u * (uint32_t)(1 + r + 2 * it);
    for (int i = 0; i < n; i++)
      if ((uint32_t)host[i] != want) {
        rank_fail(x, "rank %d iteration %d: element %d is 0x%08x, want 0x%08x (the NULL stream "
                  "ran before the legacy stream's memset)",
                  x->rank, it, i, (uint32_t)host[i], want);
        return;
      }
  }
  ul_mem_free(x->comm, din);
  ul_mem_free(x->comm, dout);
  free(host);
}

Test(cuda_backend, null_stream_after_legacy_stream) {
  setenv("FAKEGPU_DELAY_US", "4000", 1);
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, legacy_body, NULL);
  destroy_all(x, 2);
}

/* ------------------------ H2: one thread drives comms on GPUs 1 and 2 */

static void noop_body(rank_ctx_t *x) { (void)x; }

/* Group of two communicators' allreduces from this thread, whose device is 3: the core
 * runs them on helper threads (device 0); every kernel must land on its comm's GPU. */
static void drive_group(ul_comm_t *comms, int n, size_t count) {
  size_t bytes = count * sizeof(int32_t);
  void *ds[MAXR], *dr[MAXR];
  int32_t *host = malloc(bytes);
  cr_assert_not_null(host);
  for (int r = 0; r < n; r++) {
    cr_assert_eq(ul_mem_alloc(comms[r], bytes, &ds[r]), UL_OK, "%s", ul_comm_last_error(comms[r]));
    cr_assert_eq(ul_mem_alloc(comms[r], bytes, &dr[r]), UL_OK);
    for (size_t i = 0; i < count; i++) host[i] = ar_value(r, i, 0);
    cr_assert_eq(ul_mem_copy(ds[r], host, bytes, comms[r], NULL), UL_OK, "%s",
                 ul_comm_last_error(comms[r]));
  }
  cr_assert_eq(cudaSetDevice(3), cudaSuccess);
  cr_assert_eq(ul_group_start(), UL_OK);
  for (int r = 0; r < n; r++)
    cr_assert_eq(ul_allreduce(ds[r], dr[r], count, UL_INT32, UL_SUM, comms[r], NULL), UL_OK);
  ul_result_t rc = ul_group_end();
  cr_assert_eq(rc, UL_OK, "ul_group_end: %s: %s / %s", ul_result_name(rc),
               ul_comm_last_error(comms[0]), ul_comm_last_error(comms[1]));
  for (int r = 0; r < n; r++) {
    memset(host, 0, bytes);
    cr_assert_eq(ul_mem_copy(host, dr[r], bytes, comms[r], NULL), UL_OK);
    for (size_t i = 0; i < count; i++) {
      uint32_t want = 0;
      for (int q = 0; q < n; q++) want += (uint32_t)ar_value(q, i, 0);
      cr_assert_eq((uint32_t)host[i], want, "rank %d element %zu", r, i);
    }
  }
  /* The calling thread keeps its own device through every call. */
  int dev = -1;
  cr_assert_eq(cudaGetDevice(&dev), cudaSuccess);
  cr_assert_eq(dev, 3, "unilink left this thread on device %d", dev);
  for (int r = 0; r < n; r++) {
    cr_assert_eq(ul_mem_free(comms[r], ds[r]), UL_OK);
    cr_assert_eq(ul_mem_free(comms[r], dr[r]), UL_OK);
  }
  free(host);
}

Test(cuda_backend, group_one_thread_two_devices) {
  rank_ctx_t x[2];
  int devs[2] = {1, 2};
  run_threads(x, 2, devs, noop_body, NULL);
  ul_comm_t comms[2] = {x[0].comm, x[1].comm};
  drive_group(comms, 2, 5000);   /* one-shot and ring sizes */
  drive_group(comms, 2, 300001);
  destroy_all(x, 2);
}

/* A stream made from a thread on another device belongs to the comm's device. */
static void stream_other_device_body(rank_ctx_t *x) {
  if (cudaSetDevice(3) != cudaSuccess) RFAIL(x, "cudaSetDevice");
  ar_arg_t a = {20000, 1, 1};
  x->arg = &a;
  ar_body(x);
  int dev = -1;
  cudaGetDevice(&dev);
  if (dev != 3) rank_fail(x, "rank %d: left on device %d, not 3", x->rank, dev);
}

Test(cuda_backend, calls_from_a_thread_on_another_device) {
  rank_ctx_t x[2];
  int devs[2] = {1, 2};
  run_threads(x, 2, devs, stream_other_device_body, NULL);
  destroy_all(x, 2);
}

/* M2: signals are running counts; rank 0 signals rank 1 on stream 1 (behind a slow
 * memset) and then on stream 2. The second store must not land first and be overwritten
 * by the first (the count would go back from 2 to 1 and rank 1 would wait forever). */
static void signal_order_body(rank_ctx_t *x) {
  ul_stream_t s1 = NULL, s2 = NULL;
  void *wm = NULL;
  ul_window_t win = NULL;
  RCHECK(x, ul_stream_create(x->comm, &s1), "ul_stream_create");
  RCHECK(x, ul_stream_create(x->comm, &s2), "ul_stream_create");
  RCHECK(x, ul_mem_alloc(x->comm, 1 << 16, &wm), "ul_mem_alloc");
  RCHECK(x, ul_window_register(x->comm, wm, 1 << 16, &win), "ul_window_register");
  for (int it = 1; it <= 8; it++) {
    if (x->rank == 0) {
      RCHECK(x, ul_mem_set(wm, it, 1 << 16, x->comm, s1), "ul_mem_set");
      RCHECK(x, ul_signal(1, win, 0, s1), "ul_signal on stream 1");
      RCHECK(x, ul_signal(1, win, 0, s2), "ul_signal on stream 2");
      RCHECK(x, ul_stream_synchronize(s1), "ul_stream_synchronize");
      RCHECK(x, ul_stream_synchronize(s2), "ul_stream_synchronize");
    }
    /* Both stores are done now: rank 1 looks at the final count, not a passing one. */
    RCHECK(x, ul_barrier(x->comm, NULL), "ul_barrier");
    if (x->rank == 1) {
      ul_result_t rc = ul_wait_signal(win, 0, (uint64_t)(2 * it), NULL);
      if (rc != UL_OK)
        RFAIL(x, "iteration %d: waiting for signal 0 to reach %d: %s: %s", it, 2 * it,
              ul_result_name(rc), ul_comm_last_error(x->comm));
    }
  }
  RCHECK(x, ul_barrier(x->comm, NULL), "ul_barrier");
  RCHECK(x, ul_window_deregister(win), "ul_window_deregister");
  RCHECK(x, ul_stream_destroy(s1), "ul_stream_destroy");
  RCHECK(x, ul_stream_destroy(s2), "ul_stream_destroy");
  ul_mem_free(x->comm, wm);
}

Test(cuda_backend, signals_of_two_streams_keep_issue_order) {
  setenv("FAKEGPU_DELAY_US", "20000", 1);
  g_timeout_ms = 3000;
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, signal_order_body, NULL);
  destroy_all(x, 2);
}

/* staged: rank 1 puts range A (signal 0) and range B (signal 1) into rank 0's window.
 * Rank 0 waits for signal 0 on a slow stream, which drains both ranges, then for signal 1
 * on another stream and reads B there: that read must still wait for the drain. */
static void cross_drain_body(rank_ctx_t *x) {
  const size_t half = 65536;
  void *wm = NULL, *src = NULL, *slow = NULL;
  ul_window_t win = NULL;
  ul_stream_t s1 = NULL, s2 = NULL;
  uint8_t *h = NULL;
  RCHECK(x, ul_mem_alloc(x->comm, 2 * half, &wm), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, 2 * half, &src), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, 1 << 20, &slow), "ul_mem_alloc");
  RCHECK(x, ul_mem_set(wm, 0, 2 * half, x->comm, NULL), "ul_mem_set");
  RCHECK(x, ul_window_register(x->comm, wm, 2 * half, &win), "ul_window_register");
  RCHECK(x, ul_stream_create(x->comm, &s1), "ul_stream_create");
  RCHECK(x, ul_stream_create(x->comm, &s2), "ul_stream_create");
  if (cudaMallocHost((void **)&h, 2 * half) != cudaSuccess) RFAIL(x, "cudaMallocHost");
  for (int it = 1; it <= 8; it++) {
    if (x->rank == 1) {
      for (size_t i = 0; i < 2 * half; i++) h[i] = sr_byte(it, i >= half, i);
      RCHECK(x, ul_mem_copy(src, h, 2 * half, x->comm, NULL), "ul_mem_copy");
      RCHECK(x, ul_put(src, half, 0, win, 0, NULL), "ul_put A");
      RCHECK(x, ul_signal(0, win, 0, NULL), "ul_signal 0");
      RCHECK(x, ul_put((char *)src + half, half, 0, win, half, NULL), "ul_put B");
      RCHECK(x, ul_signal(0, win, 1, NULL), "ul_signal 1");
    }
    RCHECK(x, ul_barrier(x->comm, NULL), "ul_barrier"); /* both ranges are logged */
    if (x->rank == 0) {
      RCHECK(x, ul_mem_set(slow, it, 1 << 20, x->comm, s1), "ul_mem_set on stream 1");
      RCHECK(x, ul_wait_signal(win, 0, (uint64_t)it, s1), "ul_wait_signal 0 on stream 1");
      RCHECK(x, ul_wait_signal(win, 1, (uint64_t)it, s2), "ul_wait_signal 1 on stream 2");
      memset(h, 0, 2 * half);
      RCHECK(x, ul_mem_copy(h + half, (char *)wm + half, half, x->comm, s2), "ul_mem_copy B");
      RCHECK(x, ul_stream_synchronize(s2), "ul_stream_synchronize");
      RCHECK(x, ul_stream_synchronize(s1), "ul_stream_synchronize");
      for (size_t i = half; i < 2 * half; i++)
        if (h[i] != sr_byte(it, 1, i))
          RFAIL(x, "iteration %d: byte %zu of range B is 0x%02x, want 0x%02x (read before the "
                "drain that another stream's wait started)", it, i - half, h[i], sr_byte(it, 1, i));
    }
    RCHECK(x, ul_barrier(x->comm, NULL), "ul_barrier");
  }
  RCHECK(x, ul_window_deregister(win), "ul_window_deregister");
  RCHECK(x, ul_stream_destroy(s1), "ul_stream_destroy");
  RCHECK(x, ul_stream_destroy(s2), "ul_stream_destroy");
  cudaFreeHost(h);
  ul_mem_free(x->comm, wm), ul_mem_free(x->comm, src), ul_mem_free(x->comm, slow);
}

Test(cuda_backend, staged_drain_seen_by_every_stream) {
  setenv("UNILINK_CUDA_PATH", "staged", 1);
  setenv("FAKEGPU_DELAY_US", "5000", 1);
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, cross_drain_body, NULL);
  destroy_all(x, 2);
}

/* ---------------------------- H4: destroy releases every CUDA resource */

typedef struct leak_arg {
  size_t win_bytes;
} leak_arg_t;

/* An allreduce, a user window registered and never deregistered, a signal through it. */
static void leak_body(rank_ctx_t *x) {
  ar_arg_t a = {70000, 1, 0};
  x->arg = &a;
  ar_body(x);
  if (x->bad) return;
  void *wmem = NULL;
  ul_window_t win = NULL;
  RCHECK(x, ul_mem_alloc(x->comm, 65536, &wmem), "ul_mem_alloc");
  RCHECK(x, ul_window_register(x->comm, wmem, 65536, &win), "ul_window_register");
  RCHECK(x, ul_signal(1 - x->rank, win, 0, NULL), "ul_signal");
  RCHECK(x, ul_wait_signal(win, 0, 1, NULL), "ul_wait_signal");
  /* wmem stays allocated too: destroy frees ul_mem_alloc memory */
}

static void leak_check(const char *path) {
  if (path) setenv("UNILINK_CUDA_PATH", path, 1);
  counts_t before = counts_now();
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, leak_body, NULL);
  destroy_all(x, 2);
  char buf[256];
  cr_assert(counts_equal(before, counts_now(), buf, sizeof buf), "%s path: %s", path, buf);
}

Test(cuda_backend, destroy_releases_everything_p2p) { leak_check("p2p"); }
Test(cuda_backend, destroy_releases_everything_staged) { leak_check("staged"); }

/* ------------------------- one-sided get on the staged path (thread ranks) */

static void staged_get_body(rank_ctx_t *x) {
  const size_t n = 70001;
  uint8_t *h = malloc(n);
  void *wm = NULL, *dst = NULL;
  ul_window_t win = NULL;
  if (!h) RFAIL(x, "out of memory");
  RCHECK(x, ul_mem_alloc(x->comm, n, &wm), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, n, &dst), "ul_mem_alloc");
  for (size_t i = 0; i < n; i++) h[i] = sr_byte(x->rank, 9, i);
  RCHECK(x, ul_mem_copy(wm, h, n, x->comm, NULL), "ul_mem_copy in");
  RCHECK(x, ul_window_register(x->comm, wm, n, &win), "ul_window_register");
  RCHECK(x, ul_barrier(x->comm, NULL), "ul_barrier");
  int peer = 1 - x->rank;
  RCHECK(x, ul_get(dst, n - 5, peer, win, 5, NULL), "ul_get");
  RCHECK(x, ul_mem_copy(h, dst, n - 5, x->comm, NULL), "ul_mem_copy out");
  for (size_t i = 0; i + 5 < n; i++)
    if (h[i] != sr_byte(peer, 9, i + 5)) RFAIL(x, "rank %d: ul_get byte %zu wrong", x->rank, i);
  RCHECK(x, ul_barrier(x->comm, NULL), "ul_barrier");
  RCHECK(x, ul_window_deregister(win), "ul_window_deregister");
  ul_mem_free(x->comm, wm);
  ul_mem_free(x->comm, dst);
  free(h);
}

Test(cuda_backend, get_on_staged_path_thread_ranks) {
  setenv("FAKEGPU_P2P", "no", 1);
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, staged_get_body, NULL);
  destroy_all(x, 2);
}

/* --------------------------------------------------------- process ranks */

/* Run body(rank, nranks, comm, arg) in n forked children, each with its initialised
 * communicator; fail on any nonzero exit. Rank 0 makes the unique id and sends it to the
 * others through pipes. */
typedef int (*proc_body_t)(int rank, int nranks, ul_comm_t comm, void *arg);

static int proc_child(int rank, int nranks, int rfd, int *wfds, proc_body_t body, void *arg) {
  ul_unique_id_t id;
  if (rank == 0) {
    if (ul_get_unique_id("cuda", &id) != UL_OK) return 90;
    for (int r = 1; r < nranks; r++)
      if (write(wfds[r], &id, sizeof id) != (ssize_t)sizeof id) return 91;
  } else if (read(rfd, &id, sizeof id) != (ssize_t)sizeof id) {
    return 92;
  }
  ul_config_t cfg = cfg_on(rank);
  ul_comm_t comm = NULL;
  ul_result_t rc = ul_comm_init_rank(&comm, &cfg, nranks, id, rank);
  if (rc != UL_OK) {
    fprintf(stderr, "rank %d: init: %s: %s\n", rank, ul_result_name(rc), ul_last_error());
    return 93;
  }
  return body(rank, nranks, comm, arg);
}

static void run_procs(int n, proc_body_t body, void *arg) {
  int fds[MAXR][2];
  pid_t pid[MAXR];
  for (int r = 0; r < n; r++) cr_assert_eq(pipe(fds[r]), 0);
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    cr_assert_neq(pid[r], -1);
    if (pid[r] == 0) {
      /* Keep only this rank's read end (and rank 0's write ends), so that a rank 0 that
       * dies before sending the id gives the others EOF, not a hang. */
      int w[MAXR];
      for (int q = 0; q < n; q++) {
        w[q] = r == 0 ? fds[q][1] : -1;
        if (r != 0) close(fds[q][1]);
        if (q != r) close(fds[q][0]);
      }
      alarm(TIMEOUT_MS / 1000 * 3); /* a hung rank ends as a failure, never an orphan */
      _exit(proc_child(r, n, fds[r][0], w, body, arg));
    }
  }
  for (int r = 0; r < n; r++) close(fds[r][0]), close(fds[r][1]);
  for (int r = 0; r < n; r++) {
    int st = 0;
    cr_assert_eq(waitpid(pid[r], &st, 0), pid[r]);
    cr_assert(WIFEXITED(st), "rank %d died (signal %d)", r, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    cr_assert_eq(WEXITSTATUS(st), 0, "rank %d exited with %d (see its stderr)", r,
                 WEXITSTATUS(st));
  }
}

/* Exact allreduce between processes (IPC on p2p, shm shadows on staged), then destroy;
 * afterwards the process holds no CUDA allocation, registration, IPC mapping or stream. */
static int proc_leak_body(int rank, int nranks, ul_comm_t comm, void *arg) {
  (void)arg;
  rank_ctx_t x;
  memset(&x, 0, sizeof x);
  x.rank = rank;
  x.nranks = nranks;
  x.device = rank;
  x.comm = comm;
  ar_arg_t a = {300001, 2, 0};
  x.arg = &a;
  ar_body(&x);
  if (x.bad) {
    fprintf(stderr, "%s\n", x.why);
    return 10;
  }
  ul_call_info_t info = {.struct_size = sizeof(ul_call_info_t)};
  if (ul_comm_last_call(comm, &info) != UL_OK) return 11;
  const char *want = getenv("UNILINK_CUDA_PATH");
  if (want && strcmp(info.path, want) != 0) {
    fprintf(stderr, "rank %d: path %s, want %s\n", rank, info.path, want);
    return 12;
  }
  if (ul_comm_destroy(comm) != UL_OK) return 13;
  counts_t zero = {0, 0, 0, 0, 0, 0};
  char buf[256];
  if (!counts_equal(zero, counts_now(), buf, sizeof buf)) {
    fprintf(stderr, "rank %d after ul_comm_destroy (%s path): %s\n", rank, info.path, buf);
    return 14;
  }
  return 0;
}

Test(cuda_backend, processes_p2p_exact_and_no_leaks) {
  setenv("UNILINK_CUDA_PATH", "p2p", 1);
  run_procs(2, proc_leak_body, NULL);
}

Test(cuda_backend, processes_staged_exact_and_no_leaks) {
  setenv("UNILINK_CUDA_PATH", "staged", 1);
  run_procs(2, proc_leak_body, NULL);
}

/* ul_get between processes on the staged path (no peer access): the peer's export is
 * opened on the peer's GPU; destroy closes it. */
static int proc_get_body(int rank, int nranks, ul_comm_t comm, void *arg) {
  (void)arg;
  rank_ctx_t x;
  memset(&x, 0, sizeof x);
  x.rank = rank;
  x.nranks = nranks;
  x.device = rank;
  x.comm = comm;
  staged_get_body(&x);
  if (x.bad) {
    fprintf(stderr, "%s\n", x.why);
    return 30;
  }
  if (ul_comm_destroy(comm) != UL_OK) return 31;
  counts_t zero = {0, 0, 0, 0, 0, 0};
  char buf[256];
  if (!counts_equal(zero, counts_now(), buf, sizeof buf)) {
    fprintf(stderr, "rank %d after ul_comm_destroy: %s\n", rank, buf);
    return 32;
  }
  return 0;
}

Test(cuda_backend, processes_staged_get) {
  setenv("FAKEGPU_P2P", "no", 1);
  run_procs(2, proc_get_body, NULL);
}

/* ------------------- M6: window registration fails on every rank at once */

/* Rank 1's window is pinned host memory, which CUDA IPC cannot export: every rank must
 * get an error promptly (not rank 1 alone while rank 0 waits for its first collective),
 * and the communicator stays usable. */
static int proc_window_agree_body(int rank, int nranks, ul_comm_t comm, void *arg) {
  (void)arg;
  void *mem = NULL;
  if (rank == 0) {
    if (ul_mem_alloc(comm, 65536, &mem) != UL_OK) return 20;
  } else if (cudaSetDevice(rank) != cudaSuccess || cudaMallocHost(&mem, 65536) != cudaSuccess) {
    return 21;
  }
  ul_window_t win = NULL;
  double t0 = now_ms();
  ul_result_t rc = ul_window_register(comm, mem, 65536, &win);
  double dt = now_ms() - t0;
  if (rc == UL_OK) {
    fprintf(stderr, "rank %d: ul_window_register succeeded though rank 1 cannot export\n", rank);
    return 22;
  }
  if (dt > TIMEOUT_MS / 4) {
    fprintf(stderr, "rank %d: the failure took %.0f ms\n", rank, dt);
    return 23;
  }
  if (rank == 0 && !strstr(ul_comm_last_error(comm), "rank 1")) {
    fprintf(stderr, "rank 0: the error does not name rank 1: %s\n", ul_comm_last_error(comm));
    return 24;
  }
  /* Still in step: a collective works. */
  rank_ctx_t x;
  memset(&x, 0, sizeof x);
  x.rank = rank;
  x.nranks = nranks;
  x.device = rank;
  x.comm = comm;
  ar_arg_t a = {1000, 1, 0};
  x.arg = &a;
  ar_body(&x);
  if (x.bad) {
    fprintf(stderr, "%s\n", x.why);
    return 25;
  }
  if (rank == 0) ul_mem_free(comm, mem);
  else cudaFreeHost(mem);
  return ul_comm_destroy(comm) == UL_OK ? 0 : 26;
}

Test(cuda_backend, window_register_failure_agreed) {
  setenv("UNILINK_CUDA_PATH", "p2p", 1);
  run_procs(2, proc_window_agree_body, NULL);
}

/* ---------------------------------------------------- ul_comm_init_all */

Test(cuda_backend, init_all_two_devices) {
  counts_t before = counts_now();
  ul_comm_t comms[2] = {NULL, NULL};
  int devs[2] = {2, 1};
  ul_config_t cfg = cfg_on(UL_CONFIG_UNDEF);
  ul_result_t rc = ul_comm_init_all(comms, &cfg, 2, devs);
  cr_assert_eq(rc, UL_OK, "ul_comm_init_all: %s: %s", ul_result_name(rc), ul_last_error());
  for (int r = 0; r < 2; r++) {
    int rank = -1, size = -1, dev = -1;
    cr_assert_eq(ul_comm_rank(comms[r], &rank), UL_OK);
    cr_assert_eq(ul_comm_size(comms[r], &size), UL_OK);
    cr_assert_eq(ul_comm_device(comms[r], &dev), UL_OK);
    cr_assert_eq(rank, r);
    cr_assert_eq(size, 2);
    cr_assert_eq(dev, devs[r]);
  }
  drive_group(comms, 2, 300001);
  for (int r = 0; r < 2; r++) cr_assert_eq(ul_comm_destroy(comms[r]), UL_OK);
  char buf[256];
  cr_assert(counts_equal(before, counts_now(), buf, sizeof buf), "%s", buf);
}

Test(cuda_backend, init_all_bad_device_fails_promptly) {
  ul_comm_t comms[3] = {NULL, NULL, NULL};
  int devs[3] = {0, 1, 7}; /* the fake has 4 GPUs */
  ul_config_t cfg = cfg_on(UL_CONFIG_UNDEF);
  double t0 = now_ms();
  ul_result_t rc = ul_comm_init_all(comms, &cfg, 3, devs);
  double dt = now_ms() - t0;
  cr_assert_eq(rc, UL_ERR_INVALID_ARG, "ul_comm_init_all: %s: %s", ul_result_name(rc),
               ul_last_error());
  cr_assert(dt < TIMEOUT_MS / 4, "took %.0f ms", dt);
  cr_assert(strstr(ul_last_error(), "device 7") != NULL, "error: %s", ul_last_error());
  for (int r = 0; r < 3; r++) cr_assert_null(comms[r]);
  cr_assert_eq(fakecuda_live_streams(), 0);
  cr_assert_eq(fakecuda_registered_ranges(), 0);
}

/* M6 for init: a rank asking for a GPU that does not exist makes every rank fail at
 * once, each naming the cause, instead of the others waiting for their timeout. */
Test(cuda_backend, init_failure_agreed) {
  g_timeout_ms = 8000;
  rank_ctx_t x[2];
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("cuda", &id), UL_OK);
  pthread_t th[2];
  int devs[2] = {0, 7};
  double t0 = now_ms();
  for (int r = 0; r < 2; r++) {
    memset(&x[r], 0, sizeof x[r]);
    x[r].rank = r;
    x[r].nranks = 2;
    x[r].device = devs[r];
    x[r].id = id;
    cr_assert_eq(pthread_create(&th[r], NULL, rank_main, &x[r]), 0);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  double dt = now_ms() - t0;
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(x[r].init_rc, UL_ERR_INVALID_ARG, "rank %d: %s", r, ul_result_name(x[r].init_rc));
    cr_assert(strstr(x[r].why, "device 7") != NULL, "rank %d: %s", r, x[r].why);
  }
  cr_assert(strstr(x[0].why, "rank 1") != NULL, "rank 0: %s", x[0].why);
  cr_assert(dt < g_timeout_ms / 2, "the failure took %.0f ms", dt);
}

/* ------------------------------------------------ devices: exact, split */

static void device_body(rank_ctx_t *x) {
  int dev = -1;
  RCHECK(x, ul_comm_device(x->comm, &dev), "ul_comm_device");
  if (dev != x->device) RFAIL(x, "rank %d: device %d, want %d", x->rank, dev, x->device);
  void *p = NULL;
  RCHECK(x, ul_mem_alloc(x->comm, 4096, &p), "ul_mem_alloc");
  struct cudaPointerAttributes at;
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess || at.type != cudaMemoryTypeDevice ||
      at.device != x->device)
    rank_fail(x, "rank %d: ul_mem_alloc memory is on device %d, want %d", x->rank, at.device,
              x->device);
  ul_mem_free(x->comm, p);
}

Test(cuda_backend, device_is_the_one_asked_for) {
  rank_ctx_t x[2];
  int devs[2] = {3, 2};
  run_threads(x, 2, devs, device_body, NULL);
  destroy_all(x, 2);
}

/* H3: a split child keeps its parent's GPU (reversed keys move every rank). Parent
 * devices are the backend's choice (rank % 4); no peer access, so a child on another
 * GPU than the parent's buffers would fault in its first kernel. */
static void split_body(rank_ctx_t *x) {
  int pdev = -1, cdev = -1, crank = -1;
  RCHECK(x, ul_comm_device(x->comm, &pdev), "ul_comm_device");
  if (pdev != x->rank) RFAIL(x, "rank %d: parent reports device %d, want %d", x->rank, pdev, x->rank);
  ul_comm_t child = NULL;
  RCHECK(x, ul_comm_split(x->comm, 0, x->nranks - x->rank, &child, NULL), "ul_comm_split");
  RCHECK(x, ul_comm_device(child, &cdev), "ul_comm_device");
  RCHECK(x, ul_comm_rank(child, &crank), "ul_comm_rank");
  if (crank != x->nranks - 1 - x->rank)
    rank_fail(x, "rank %d: child rank %d, want %d", x->rank, crank, x->nranks - 1 - x->rank);
  if (cdev != pdev) rank_fail(x, "rank %d: child on device %d, parent on %d", x->rank, cdev, pdev);
  void *p = NULL;
  struct cudaPointerAttributes at;
  memset(&at, 0, sizeof at);
  if (ul_mem_alloc(child, 64, &p) != UL_OK || cudaPointerGetAttributes(&at, p) != cudaSuccess ||
      at.device != pdev)
    rank_fail(x, "rank %d: child's ul_mem_alloc memory is on device %d, parent on %d", x->rank,
              at.device, pdev);
  if (p) ul_mem_free(child, p);
  /* The parent's buffers on the child communicator. */
  const size_t n = 5000;
  int32_t *h = malloc(n * sizeof(int32_t));
  void *din = NULL, *dout = NULL;
  RCHECK(x, ul_mem_alloc(x->comm, n * sizeof(int32_t), &din), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, n * sizeof(int32_t), &dout), "ul_mem_alloc");
  for (size_t i = 0; i < n; i++) h[i] = ar_value(x->rank, i, 0);
  RCHECK(x, ul_mem_copy(din, h, n * sizeof(int32_t), x->comm, NULL), "ul_mem_copy in");
  ul_result_t rc = ul_allreduce(din, dout, n, UL_INT32, UL_SUM, child, NULL);
  if (rc != UL_OK)
    RFAIL(x, "rank %d: allreduce on the child: %s: %s", x->rank, ul_result_name(rc),
          ul_comm_last_error(child));
  RCHECK(x, ul_mem_copy(h, dout, n * sizeof(int32_t), x->comm, NULL), "ul_mem_copy out");
  for (size_t i = 0; i < n; i++) {
    uint32_t want = 0;
    for (int r = 0; r < x->nranks; r++) want += (uint32_t)ar_value(r, i, 0);
    if ((uint32_t)h[i] != want) RFAIL(x, "rank %d: child allreduce element %zu wrong", x->rank, i);
  }
  ul_mem_free(x->comm, din);
  ul_mem_free(x->comm, dout);
  free(h);
  ul_comm_destroy(child);
}

Test(cuda_backend, split_child_keeps_parent_device) {
  setenv("FAKEGPU_P2P", "no", 1);
  rank_ctx_t x[3];
  run_threads(x, 3, NULL, split_body, NULL); /* devices rank % 4: 0, 1, 2 */
  destroy_all(x, 3);
}

/* Two streams of one communicator with collectives in flight at once (allreduce,
 * broadcast, allreduce, allgather alternating, as conformance streams/two-streams):
 * exact results. */
static void two_streams_body(rank_ctx_t *x) {
  const size_t n = 65537, nb = 1023, ng = 7;
  const int iters = x->arg ? *(const int *)x->arg : 4;
  int nr = x->nranks, root = nr - 1;
  ul_stream_t s[2] = {NULL, NULL};
  int32_t *h = malloc(n * sizeof(int32_t) * 2);
  void *a_in, *a_out, *b_in, *b_out, *c_buf, *g_in, *g_out;
  if (!h) RFAIL(x, "out of memory");
  for (int k = 0; k < 2; k++) RCHECK(x, ul_stream_create(x->comm, &s[k]), "ul_stream_create");
  RCHECK(x, ul_mem_alloc(x->comm, nb * 4, &a_in), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, nb * 4, &a_out), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, n * 4, &b_in), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, n * 4, &b_out), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, nb, &c_buf), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, ng * 4, &g_in), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, ng * 4 * (size_t)nr, &g_out), "ul_mem_alloc");
  for (int it = 0; it < iters; it++) {
    for (size_t i = 0; i < n; i++) h[i] = ar_value(x->rank, i, it);
    RCHECK(x, ul_mem_copy(a_in, h, nb * 4, x->comm, NULL), "ul_mem_copy");
    RCHECK(x, ul_mem_copy(b_in, h, n * 4, x->comm, NULL), "ul_mem_copy");
    RCHECK(x, ul_mem_copy(g_in, h, ng * 4, x->comm, NULL), "ul_mem_copy");
    RCHECK(x, ul_mem_set(c_buf, x->rank == root ? 0x40 + it : 0, nb, x->comm, NULL), "ul_mem_set");
    /* enqueue everything before waiting for anything */
    RCHECK(x, ul_allreduce(a_in, a_out, nb, UL_INT32, UL_SUM, x->comm, s[0]), "allreduce s1");
    RCHECK(x, ul_broadcast(c_buf, c_buf, nb, UL_UINT8, root, x->comm, s[1]), "broadcast s2");
    RCHECK(x, ul_allreduce(b_in, b_out, n, UL_INT32, UL_SUM, x->comm, s[0]), "allreduce s1");
    RCHECK(x, ul_allgather(g_in, g_out, ng, UL_INT32, x->comm, s[1]), "allgather s2");
    for (int k = 0; k < 2; k++) RCHECK(x, ul_stream_synchronize(s[k]), "ul_stream_synchronize");
    RCHECK(x, ul_mem_copy(h, b_out, n * 4, x->comm, NULL), "ul_mem_copy out");
    for (size_t i = 0; i < n; i++) {
      uint32_t want = 0;
      for (int r = 0; r < nr; r++) want += (uint32_t)ar_value(r, i, it);
      if ((uint32_t)h[i] != want) RFAIL(x, "rank %d iteration %d: allreduce element %zu wrong", x->rank, it, i);
    }
    RCHECK(x, ul_mem_copy(h, g_out, ng * 4 * (size_t)nr, x->comm, NULL), "ul_mem_copy out");
    for (int r = 0; r < nr; r++)
      for (size_t i = 0; i < ng; i++)
        if (h[(size_t)r * ng + i] != ar_value(r, i, it))
          RFAIL(x, "rank %d iteration %d: allgather block %d element %zu wrong", x->rank, it, r, i);
    uint8_t *hb = (uint8_t *)h;
    RCHECK(x, ul_mem_copy(hb, c_buf, nb, x->comm, NULL), "ul_mem_copy out");
    for (size_t i = 0; i < nb; i++)
      if (hb[i] != 0x40 + it) RFAIL(x, "rank %d iteration %d: broadcast byte %zu wrong", x->rank, it, i);
  }
  for (int k = 0; k < 2; k++) RCHECK(x, ul_stream_destroy(s[k]), "ul_stream_destroy");
  ul_mem_free(x->comm, a_in), ul_mem_free(x->comm, a_out), ul_mem_free(x->comm, b_in);
  ul_mem_free(x->comm, b_out), ul_mem_free(x->comm, c_buf), ul_mem_free(x->comm, g_in);
  ul_mem_free(x->comm, g_out);
  free(h);
}

Test(cuda_backend, two_streams_in_flight) {
  setenv("FAKEGPU_DELAY_US", "800", 1);
  g_timeout_ms = 8000;
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, two_streams_body, NULL);
  destroy_all(x, 2);
}


/* --------------------------------------------- ul_mem_copy / ul_mem_set */

static void memops_body(rank_ctx_t *x) {
  const size_t n = 100003;
  uint8_t *host = malloc(n), *pinned = NULL;
  void *d = NULL, *d2 = NULL;
  if (!host) RFAIL(x, "out of memory");
  RCHECK(x, ul_mem_alloc(x->comm, n, &d), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, n, &d2), "ul_mem_alloc");
  /* device memset, device -> pageable host */
  RCHECK(x, ul_mem_set(d, 0x5a, n, x->comm, NULL), "ul_mem_set device");
  memset(host, 0, n);
  RCHECK(x, ul_mem_copy(host, d, n, x->comm, NULL), "ul_mem_copy d->h");
  for (size_t i = 0; i < n; i++)
    if (host[i] != 0x5a) RFAIL(x, "ul_mem_set device: byte %zu is 0x%02x", i, host[i]);
  /* pageable host -> device -> device (offsets) -> pinned host, on a user stream */
  for (size_t i = 0; i < n; i++) host[i] = (uint8_t)(i * 7 + x->rank);
  ul_stream_t st = NULL;
  RCHECK(x, ul_stream_create(x->comm, &st), "ul_stream_create");
  if (cudaMallocHost((void **)&pinned, n) != cudaSuccess) RFAIL(x, "cudaMallocHost");
  memset(pinned, 0, n);
  RCHECK(x, ul_mem_copy(d, host, n, x->comm, st), "ul_mem_copy h->d");
  RCHECK(x, ul_mem_copy((char *)d2 + 1, (char *)d + 3, n - 3, x->comm, st), "ul_mem_copy d->d");
  RCHECK(x, ul_mem_set(d2, 0xc3, 1, x->comm, st), "ul_mem_set on stream");
  RCHECK(x, ul_mem_copy(pinned, d2, n, x->comm, st), "ul_mem_copy d->pinned");
  RCHECK(x, ul_stream_synchronize(st), "ul_stream_synchronize");
  if (pinned[0] != 0xc3) RFAIL(x, "byte 0 is 0x%02x, want 0xc3", pinned[0]);
  for (size_t i = 1; i + 2 < n; i++)
    if (pinned[i] != (uint8_t)((i + 2) * 7 + x->rank))
      RFAIL(x, "d->d copy: byte %zu is 0x%02x", i, pinned[i]);
  /* host memset through the backend (ordered on the stream) */
  RCHECK(x, ul_mem_set(pinned, 0x11, n, x->comm, st), "ul_mem_set pinned host");
  RCHECK(x, ul_mem_set(host, 0x22, n, x->comm, NULL), "ul_mem_set host");
  RCHECK(x, ul_stream_synchronize(st), "ul_stream_synchronize");
  for (size_t i = 0; i < n; i++)
    if (pinned[i] != 0x11 || host[i] != 0x22)
      RFAIL(x, "host ul_mem_set: byte %zu is 0x%02x/0x%02x", i, pinned[i], host[i]);
  RCHECK(x, ul_stream_destroy(st), "ul_stream_destroy");
  cudaFreeHost(pinned);
  ul_mem_free(x->comm, d);
  ul_mem_free(x->comm, d2);
  free(host);
}

Test(cuda_backend, mem_copy_and_mem_set) {
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, memops_body, NULL);
  destroy_all(x, 2);
}

/* The core asks mem_kind and refuses pageable host memory for a collective. */
static void pageable_body(rank_ctx_t *x) {
  int32_t *h = calloc(1024, sizeof(int32_t));
  void *d = NULL;
  RCHECK(x, ul_mem_alloc(x->comm, 1024 * sizeof(int32_t), &d), "ul_mem_alloc");
  ul_result_t rc = ul_allreduce(h, d, 1024, UL_INT32, UL_SUM, x->comm, NULL);
  if (rc != UL_ERR_INVALID_ARG)
    rank_fail(x, "rank %d: allreduce from pageable host memory returned %s", x->rank,
              ul_result_name(rc));
  ul_mem_free(x->comm, d);
  free(h);
}

Test(cuda_backend, collective_refuses_pageable_host_memory) {
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, pageable_body, NULL);
  destroy_all(x, 2);
}
