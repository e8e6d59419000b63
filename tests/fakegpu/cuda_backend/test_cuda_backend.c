/* The cuda backend (libunilink-cuda.so through the public API) under the fake CUDA
 * runtime: device memory the CPU cannot touch, streams as worker threads with the legacy
 * default stream's rules, a current device per thread, kernels that fail on another
 * device's stream, leak counters (fakecuda.h). Each test names the review finding it
 * proves fixed (shared/reviews/gpu-backends.md). Thread ranks run in threads of the test
 * process, process ranks in forked children.
 *
 * This file: thread ranks (allreduce, send/recv, streams, groups, teardown, get);
 * test_cuda_backend_procs.c: process ranks; test_cuda_backend_devices.c: init_all,
 * devices, split, two streams, ul_mem_*. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unilink/unilink.h>

#include "cuda_internal.h" /* the staged segment's log (white-box test) */
#include "test_cuda_backend.h"

/* --------------------------------------------------- allreduce, exact result */

int32_t ar_value(int rank, size_t i, int it) {
  return (int32_t)((rank + 1) * 1000003 + (int64_t)i * 7 + it * 13);
}

/* Device buffers in and out through ul_mem_copy, exact int32 sum. */
void ar_body(rank_ctx_t *x) {
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

uint8_t sr_byte(int from, int msg, size_t i) {
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
void drive_group(ul_comm_t *comms, int n, size_t count) {
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

/* staged: senders reserve an entry of the receiver's log (log_head) and write it later,
 * each from its own stream's host callback. Rank 1's range sits behind an entry that
 * another sender reserved and has not written yet (this test plays that sender, stalled
 * in cuda_log_append, as a preempted callback thread is). Rank 0 sees rank 1's signal:
 * its wait must not return before rank 1's range is in the window (the drain used to
 * stop at the unwritten entry: conformance errors/allreduce-partial-overlap/ranks=4,
 * 4 thread ranks on one fake GPU, got a wrong sum once). White box: the segment layout
 * is cuda_internal.h's, found by its shm name in /proc/self/maps. */
#define STALL_BYTES 4096
#define STALL_MS 300

/* Rank @rank's segment of the communicator's window number @seq (0 is the generic
 * layer's), mapped in this process (every thread rank maps it: any mapping will do). */
static cuda_seg_hdr_t *staged_segment(int seq, int rank) {
  char want[32], line[512];
  snprintf(want, sizeof want, "-w%d-%d", seq, rank);
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return NULL;
  void *found = NULL;
  while (!found && fgets(line, sizeof line, f)) {
    char *name = strstr(line, "/ulcuda-");
    if (!name) continue;
    char *end = name + strcspn(name, " \n");
    size_t wl = strlen(want);
    if ((size_t)(end - name) > wl && !memcmp(end - wl, want, wl))
      found = (void *)(uintptr_t)strtoull(line, NULL, 16);
  }
  fclose(f);
  return found;
}

typedef struct stall_arg {
  cuda_seg_hdr_t *h;
  uint64_t n; /* the reserved entry */
} stall_arg_t;

/* The stalled sender: writes its (empty) entry STALL_MS later. */
static void *stall_publish(void *arg) {
  stall_arg_t *a = arg;
  struct timespec ts = {0, STALL_MS * 1000000L};
  nanosleep(&ts, NULL);
  cuda_log_entry_t *en = &a->h->log[a->n % CUDA_LOG_N];
  en->off = 0;
  en->bytes = 0;
  atomic_store(&en->seq, a->n + 1);
  return NULL;
}

static void reserved_entry_body(rank_ctx_t *x) {
  void *wm = NULL, *src = NULL;
  ul_window_t win = NULL;
  uint8_t h[STALL_BYTES];
  pthread_t th;
  int started = 0;
  stall_arg_t sa = {NULL, 0};
  RCHECK(x, ul_mem_alloc(x->comm, STALL_BYTES, &wm), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, STALL_BYTES, &src), "ul_mem_alloc");
  RCHECK(x, ul_mem_set(wm, 0, STALL_BYTES, x->comm, NULL), "ul_mem_set");
  RCHECK(x, ul_window_register(x->comm, wm, STALL_BYTES, &win), "ul_window_register");
  if (x->rank == 0) {
    if (!(sa.h = staged_segment(1, 0))) RFAIL(x, "rank 0's window segment is not in /proc/self/maps");
    sa.n = atomic_fetch_add(&sa.h->log_head, 1); /* the other sender's reservation */
    if (pthread_create(&th, NULL, stall_publish, &sa) != 0) RFAIL(x, "pthread_create");
    started = 1;
  }
  RCHECK(x, ul_barrier(x->comm, NULL), "ul_barrier"); /* the entry is reserved */
  if (x->rank == 1) {
    for (size_t i = 0; i < STALL_BYTES; i++) h[i] = sr_byte(1, 7, i);
    RCHECK(x, ul_mem_copy(src, h, STALL_BYTES, x->comm, NULL), "ul_mem_copy");
    RCHECK(x, ul_put(src, STALL_BYTES, 0, win, 0, NULL), "ul_put");
    RCHECK(x, ul_signal(0, win, 0, NULL), "ul_signal");
  } else {
    ul_result_t rc = ul_wait_signal(win, 0, 1, NULL);
    if (rc == UL_OK) rc = ul_mem_copy(h, wm, STALL_BYTES, x->comm, NULL);
    if (started) pthread_join(th, NULL);
    RCHECK(x, rc, "ul_wait_signal, then ul_mem_copy of the window");
    for (size_t i = 0; i < STALL_BYTES; i++)
      if (h[i] != sr_byte(1, 7, i))
        RFAIL(x, "byte %zu of the window is 0x%02x after rank 1's signal, want 0x%02x (its range "
              "was logged behind a reserved, unwritten entry and not drained)",
              i, h[i], sr_byte(1, 7, i));
  }
  RCHECK(x, ul_barrier(x->comm, NULL), "ul_barrier");
  RCHECK(x, ul_window_deregister(win), "ul_window_deregister");
  ul_mem_free(x->comm, wm), ul_mem_free(x->comm, src);
}

Test(cuda_backend, staged_drain_waits_for_reserved_log_entries) {
  setenv("UNILINK_CUDA_PATH", "staged", 1);
  g_timeout_ms = 3000; /* before the fix, rank 1 waited in the last barrier for rank 0 */
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, reserved_entry_body, NULL);
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

void staged_get_body(rank_ctx_t *x) {
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
