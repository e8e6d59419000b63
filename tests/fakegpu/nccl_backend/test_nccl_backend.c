/* UNILINK_TEST_LINK_SHARED: the shipped nccl plugin through the public API on the fake
 * CUDA runtime and fake NCCL of tests/fakegpu (device memory the CPU cannot touch,
 * streams on worker threads, NCCL communicators across threads, fault injection).
 *
 * One executable, several CTest entries (CMakeLists.txt): each entry selects tests with
 * --filter and sets the fault/version environment they need, since the fakes read it
 * once per process. Each Criterion test runs in its own process. Findings of the GPU
 * review (docs: reviews/gpu-backends.md) each have a test here: H1 null_stream_*, H5
 * abort_*, H6 destroy_*, H7 old_nccl_*, M11 stream_sync_*, M12 async_*, L1 in
 * test_nccl_map, plus init_all, duplicate GPU and the mem ops. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <unilink/unilink.h>

#define MAXR 4

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A counter of the fake CUDA runtime (fakecuda.h), found where the plugin got it. */
static int fc(const char *name) {
  void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
  cr_assert_not_null(h, "libcudart.so.13 not loaded");
  int (*f)(void) = (int (*)(void))dlsym(h, name);
  cr_assert_not_null(f, "%s missing: not the fake CUDA runtime (LD_LIBRARY_PATH?)", name);
  int v = f();
  dlclose(h);
  return v;
}

/* ------------------------------------------------------------ thread ranks */

typedef struct rank_ctx rank_ctx_t;
typedef void (*rank_fn)(rank_ctx_t *);
struct rank_ctx {
  int rank, nranks, device;
  int timeout_ms;
  ul_unique_id_t id;
  ul_comm_t comm;
  ul_result_t init_rc, rc, rc2;
  char err[512];
  double ms;          /* time of the measured step */
  long long sum;      /* any result a test wants back */
  rank_fn body;
  volatile int *go;   /* main thread -> ranks */
  volatile int step;  /* rank -> main thread: reached the blocking call */
  void *arg;
};

static void *rank_main(void *p) {
  rank_ctx_t *r = p;
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "nccl";
  cfg.device = r->device;
  if (r->timeout_ms) cfg.timeout_ms = r->timeout_ms;
  double t0 = now_ms();
  r->init_rc = ul_comm_init_rank(&r->comm, &cfg, r->nranks, r->id, r->rank);
  r->ms = now_ms() - t0;
  if (r->init_rc != UL_OK) {
    snprintf(r->err, sizeof r->err, "%s", ul_last_error());
    return NULL;
  }
  if (r->body) r->body(r);
  return NULL;
}

static void run_ranks(rank_ctx_t *r, int n, rank_fn body, int timeout_ms, pthread_t *th,
                      int join) {
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("nccl", &id), UL_OK, "ul_get_unique_id(nccl): %s",
               ul_last_error());
  for (int i = 0; i < n; i++) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].rank = i;
    r[i].nranks = n;
    r[i].device = i % MAXR;
    r[i].id = id;
    r[i].body = body;
    r[i].timeout_ms = timeout_ms;
  }
  for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, rank_main, &r[i]);
  if (join)
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static void expect_init_ok(rank_ctx_t *r, int n) {
  for (int i = 0; i < n; i++)
    cr_assert_eq(r[i].init_rc, UL_OK, "rank %d init: %s", i, r[i].err);
}

/* ------------------------------------------------------------ exact data */

#define N 1027 /* odd: no accidental alignment */

/* Device buffers in, allreduce, device buffers out; NULL stream and a user stream. The
 * calling thread's current device is another GPU and must be left as it was (L9). */
static void body_roundtrip(rank_ctx_t *r) {
  ul_comm_t c = r->comm;
  int other = (r->device + 1) % MAXR;
  cudaSetDevice(other);
  int32_t *in = NULL, *out = NULL;
  int32_t host[N], back[N];
  r->rc = ul_mem_alloc(c, N * sizeof(int32_t), (void **)&in);
  if (r->rc == UL_OK) r->rc = ul_mem_alloc(c, N * sizeof(int32_t), (void **)&out);
  if (r->rc != UL_OK) goto fail;
  for (int i = 0; i < N; i++) host[i] = (r->rank + 1) * 1000 + i;
  if ((r->rc = ul_mem_copy(in, host, sizeof host, c, NULL)) != UL_OK) goto fail;
  if ((r->rc = ul_allreduce(in, out, N, UL_INT32, UL_SUM, c, NULL)) != UL_OK) goto fail;
  memset(back, 0, sizeof back);
  if ((r->rc = ul_mem_copy(back, out, sizeof back, c, NULL)) != UL_OK) goto fail;
  long long bad = 0;
  int n = r->nranks;
  for (int i = 0; i < N; i++)
    if (back[i] != 1000 * n * (n + 1) / 2 + n * i) bad++;
  /* Same on a user stream, with ul_mem_set in between. */
  ul_stream_t s = NULL;
  if ((r->rc = ul_stream_create(c, &s)) != UL_OK) goto fail;
  if ((r->rc = ul_mem_set(out, 0, sizeof back, c, s)) != UL_OK) goto fail;
  if ((r->rc = ul_allreduce(in, out, N, UL_INT32, UL_MAX, c, s)) != UL_OK) goto fail;
  if ((r->rc = ul_mem_copy(back, out, sizeof back, c, s)) != UL_OK) goto fail;
  if ((r->rc = ul_stream_synchronize(s)) != UL_OK) goto fail;
  for (int i = 0; i < N; i++)
    if (back[i] != n * 1000 + i) bad += 1000000;
  r->rc = ul_stream_destroy(s);
  int cur = -1;
  cudaGetDevice(&cur);
  if (cur != other) bad += 1000000000LL;
  r->sum = bad;
  ul_mem_free(c, in);
  ul_mem_free(c, out);
  if (r->rc == UL_OK) r->rc = ul_comm_destroy(c);
  return;
fail:
  snprintf(r->err, sizeof r->err, "%s", ul_comm_last_error(c));
}

static void roundtrip(int n) {
  rank_ctx_t r[MAXR];
  pthread_t th[MAXR];
  run_ranks(r, n, body_roundtrip, 0, th, 1);
  expect_init_ok(r, n);
  for (int i = 0; i < n; i++) {
    cr_expect_eq(r[i].rc, UL_OK, "rank %d: %s", i, r[i].err);
    cr_expect_eq(r[i].sum % 1000000, 0, "rank %d: %lld wrong sums (NULL stream)", i, r[i].sum % 1000000);
    cr_expect_eq((r[i].sum / 1000000) % 1000, 0, "rank %d: wrong max on a user stream", i);
    cr_expect_eq(r[i].sum / 1000000000LL, 0, "rank %d: the caller's current device changed", i);
  }
  cr_expect_eq(fc("fakecuda_live_allocations"), 0, "%d device allocations left after destroy",
               fc("fakecuda_live_allocations"));
  cr_expect_eq(fc("fakecuda_live_streams"), 0, "%d streams left after destroy",
               fc("fakecuda_live_streams"));
}

Test(nccl_backend, roundtrip_2_ranks, .timeout = 60) { roundtrip(2); }
Test(nccl_backend, roundtrip_4_ranks, .timeout = 60) { roundtrip(4); }

/* Every byte mover: mem_set on device and host memory, device -> device, peer device,
 * and host memory refused by a collective (mem_kind). */
static void body_mem_ops(rank_ctx_t *r) {
  ul_comm_t c = r->comm;
  unsigned char *a = NULL, *b = NULL;
  unsigned char host[300], back[300];
  long long bad = 0;
  r->rc = ul_mem_alloc(c, sizeof host, (void **)&a);
  if (r->rc == UL_OK) r->rc = ul_mem_alloc(c, sizeof host, (void **)&b);
  if (r->rc != UL_OK) goto fail;
  if ((r->rc = ul_mem_set(a, 0x5a, sizeof host, c, NULL)) != UL_OK) goto fail;
  if ((r->rc = ul_mem_copy(b, a, sizeof host, c, NULL)) != UL_OK) goto fail; /* D2D */
  memset(back, 0, sizeof back);
  if ((r->rc = ul_mem_copy(back, b, sizeof back, c, NULL)) != UL_OK) goto fail;
  for (size_t i = 0; i < sizeof back; i++) bad += back[i] != 0x5a;
  memset(host, 1, sizeof host);
  if ((r->rc = ul_mem_set(host, 7, 100, c, NULL)) != UL_OK) goto fail; /* host memory */
  for (int i = 0; i < 300; i++) bad += host[i] != (i < 100 ? 7 : 1);
  /* A collective on pageable host memory is refused before NCCL sees it. */
  int32_t hs[4] = {1, 2, 3, 4}, hr[4];
  r->rc2 = ul_allreduce(hs, hr, 4, UL_INT32, UL_SUM, c, NULL);
  r->sum = bad;
  ul_mem_free(c, a);
  ul_mem_free(c, b);
  r->rc = ul_comm_destroy(c);
  return;
fail:
  snprintf(r->err, sizeof r->err, "%s", ul_comm_last_error(c));
}

Test(nccl_backend, mem_ops, .timeout = 60) {
  rank_ctx_t r[2];
  pthread_t th[2];
  run_ranks(r, 2, body_mem_ops, 0, th, 1);
  expect_init_ok(r, 2);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(r[i].rc, UL_OK, "rank %d: %s", i, r[i].err);
    cr_expect_eq(r[i].sum, 0, "rank %d: %lld wrong bytes", i, r[i].sum);
    cr_expect_eq(r[i].rc2, UL_ERR_INVALID_ARG, "rank %d: allreduce on host memory gave %s", i,
                 ul_result_string(r[i].rc2));
  }
}

/* H1: a NULL-stream collective must see what work on the legacy default stream wrote
 * before it: a memset on stream 0 that runs late (after a 300 ms host function). */
static void CUDART_CB sleep_300ms(void *arg) {
  (void)arg;
  usleep(300 * 1000);
}

static void body_null_after_legacy(rank_ctx_t *r) {
  ul_comm_t c = r->comm;
  int32_t *in = NULL, *out = NULL;
  int32_t back[N];
  r->rc = ul_mem_alloc(c, sizeof back, (void **)&in);
  if (r->rc == UL_OK) r->rc = ul_mem_alloc(c, sizeof back, (void **)&out);
  if (r->rc == UL_OK) r->rc = ul_mem_set(in, 0, sizeof back, c, NULL);
  if (r->rc != UL_OK) goto fail;
  cudaSetDevice(r->device);
  if (cudaLaunchHostFunc(0, sleep_300ms, NULL) != cudaSuccess ||
      cudaMemsetAsync(in, 1, sizeof back, 0) != cudaSuccess) {
    r->rc = UL_ERR_BACKEND;
    snprintf(r->err, sizeof r->err, "legacy-stream work could not be enqueued");
    return;
  }
  if ((r->rc = ul_allreduce(in, out, N, UL_INT32, UL_SUM, c, NULL)) != UL_OK) goto fail;
  if ((r->rc = ul_mem_copy(back, out, sizeof back, c, NULL)) != UL_OK) goto fail;
  long long bad = 0;
  for (int i = 0; i < N; i++) bad += back[i] != r->nranks * 0x01010101;
  r->sum = bad;
  ul_mem_free(c, in);
  ul_mem_free(c, out);
  r->rc = ul_comm_destroy(c);
  return;
fail:
  snprintf(r->err, sizeof r->err, "%s", ul_comm_last_error(c));
}

Test(nccl_backend, null_stream_after_legacy_stream_work, .timeout = 60) {
  rank_ctx_t r[2];
  pthread_t th[2];
  run_ranks(r, 2, body_null_after_legacy, 0, th, 1);
  expect_init_ok(r, 2);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(r[i].rc, UL_OK, "rank %d: %s", i, r[i].err);
    cr_expect_eq(r[i].sum, 0, "rank %d: %lld of %d elements read before the legacy-stream "
                              "memset landed", i, r[i].sum, N);
  }
}

/* ul_comm_init_all: one thread, four GPUs, then one allreduce per comm from a group. */
Test(nccl_backend, init_all_four_devices, .timeout = 60) {
  ul_comm_t comms[4] = {0};
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "nccl";
  cr_assert_eq(ul_comm_init_all(comms, &cfg, 4, NULL), UL_OK, "init_all: %s", ul_last_error());
  int32_t *buf[4];
  for (int i = 0; i < 4; i++) {
    int dev = -1;
    cr_assert_eq(ul_comm_device(comms[i], &dev), UL_OK);
    cr_expect_eq(dev, i);
    int32_t h[N];
    for (int k = 0; k < N; k++) h[k] = i + k;
    cr_assert_eq(ul_mem_alloc(comms[i], sizeof h, (void **)&buf[i]), UL_OK);
    cr_assert_eq(ul_mem_copy(buf[i], h, sizeof h, comms[i], NULL), UL_OK, "%s",
                 ul_comm_last_error(comms[i]));
  }
  cr_assert_eq(ul_group_start(), UL_OK);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(ul_allreduce(buf[i], buf[i], N, UL_INT32, UL_SUM, comms[i], NULL), UL_OK, "%s",
                 ul_comm_last_error(comms[i]));
  cr_assert_eq(ul_group_end(), UL_OK, "group: %s", ul_last_error());
  for (int i = 0; i < 4; i++) {
    int32_t h[N];
    cr_assert_eq(ul_mem_copy(h, buf[i], sizeof h, comms[i], NULL), UL_OK);
    int bad = 0;
    for (int k = 0; k < N; k++) bad += h[k] != 6 + 4 * k;
    cr_expect_eq(bad, 0, "comm %d: %d wrong sums", i, bad);
    ul_mem_free(comms[i], buf[i]);
  }
  for (int i = 0; i < 4; i++) cr_expect_eq(ul_comm_destroy(comms[i]), UL_OK);
  cr_expect_eq(fc("fakecuda_live_allocations"), 0);
}

/* Two ranks on one GPU: NCCL's "Duplicate GPU" as UL_ERR_INVALID_USAGE, promptly. */
Test(nccl_backend, duplicate_gpu_is_a_clean_error, .timeout = 60) {
  rank_ctx_t r[2];
  pthread_t th[2];
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("nccl", &id), UL_OK);
  for (int i = 0; i < 2; i++) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].rank = i;
    r[i].nranks = 2;
    r[i].device = 0;
    r[i].id = id;
    r[i].timeout_ms = 20000;
  }
  double t0 = now_ms();
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, rank_main, &r[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  double ms = now_ms() - t0;
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(r[i].init_rc, UL_ERR_INVALID_USAGE, "rank %d: %s (%s)", i,
                 ul_result_string(r[i].init_rc), r[i].err);
    cr_expect(strstr(r[i].err, "Duplicate GPU") != NULL, "rank %d: %s", i, r[i].err);
  }
  cr_expect_lt(ms, 5000, "init failed only after %.0f ms", ms);
  cr_expect_eq(fc("fakecuda_live_allocations"), 0);
}

/* ------------------------------------------------- faults: abort and destroy */

/* Rank 1's first collective never completes (FAKEGPU_NCCL_FAULT=hang:1:2; op 1 is the
 * backend's identity allgather at init). */
static void body_hung_null_stream(rank_ctx_t *r) {
  int32_t *buf = NULL;
  if ((r->rc = ul_mem_alloc(r->comm, 64, (void **)&buf)) != UL_OK) return;
  r->step = 1;
  r->rc = ul_allreduce(buf, buf, 16, UL_INT32, UL_SUM, r->comm, NULL);
  snprintf(r->err, sizeof r->err, "%s", ul_last_error());
  r->step = 2;
  /* the communicator is gone after ul_comm_abort: nothing more on it */
}

/* H5: ul_comm_abort returns promptly even when ncclCommAbort takes seconds (NVIDIA/nccl
 * #1777; FAKEGPU_NCCL_ABORT_DELAY_MS in the preload shim of this folder). */
Test(nccl_backend, abort_of_hung_op_returns_within_1s, .timeout = 60) {
  rank_ctx_t r[2];
  pthread_t th[2];
  run_ranks(r, 2, body_hung_null_stream, 0, th, 0);
  double t0 = now_ms();
  while ((r[0].step < 1 || r[1].step < 1) && now_ms() - t0 < 20000) {
    if (r[0].init_rc != UL_OK || r[1].init_rc != UL_OK) break;
    usleep(1000);
  }
  expect_init_ok(r, 2);
  usleep(300 * 1000); /* both inside the allreduce */
  cr_assert_eq(r[1].step, 1, "rank 1's allreduce returned (%s): the hang fault did not apply",
               r[1].err);
  for (int i = 0; i < 2; i++) {
    double a0 = now_ms();
    cr_expect_eq(ul_comm_abort(r[i].comm), UL_OK);
    double ms = now_ms() - a0;
    cr_expect_lt(ms, 1000, "ul_comm_abort of rank %d took %.0f ms", i, ms);
  }
  t0 = now_ms();
  while ((r[0].step < 2 || r[1].step < 2) && now_ms() - t0 < 5000) usleep(1000);
  cr_assert_eq(r[1].step, 2, "rank 1 still blocked 5 s after the abort");
  cr_expect_eq(r[1].rc, UL_ERR_ABORTED, "rank 1: %s", r[1].err);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
}

/* H6: destroy without finalize while an op on a user stream hangs returns within the
 * communicator timeout (finalize with timeout, then abort), not never. */
static void body_destroy_hung(rank_ctx_t *r) {
  ul_comm_t c = r->comm;
  int32_t *buf = NULL;
  cudaStream_t cs;
  ul_stream_t s = NULL;
  cudaSetDevice(r->device);
  if ((r->rc = ul_mem_alloc(c, 64, (void **)&buf)) != UL_OK ||
      cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess ||
      (r->rc = ul_stream_wrap_native(c, cs, &s)) != UL_OK) {
    snprintf(r->err, sizeof r->err, "setup: %s", ul_comm_last_error(c));
    if (r->rc == UL_OK) r->rc = UL_ERR_BACKEND;
    return;
  }
  r->rc = ul_allreduce(buf, buf, 16, UL_INT32, UL_SUM, c, s);
  if (r->rc != UL_OK) {
    snprintf(r->err, sizeof r->err, "allreduce: %s", ul_comm_last_error(c));
    return;
  }
  /* The stream handle is deliberately not destroyed (that would wait for the stream):
   * the scenario is work left on a user stream when the communicator goes. */
  double t0 = now_ms();
  r->rc2 = ul_comm_destroy(c);
  r->ms = now_ms() - t0;
  r->step = 2;
}

Test(nccl_backend, destroy_without_finalize_returns_within_timeout, .timeout = 60) {
  rank_ctx_t r[2];
  pthread_t th[2];
  run_ranks(r, 2, body_destroy_hung, 1000, th, 0);
  double t0 = now_ms();
  while ((r[0].step < 2 || r[1].step < 2) && now_ms() - t0 < 10000) usleep(2000);
  expect_init_ok(r, 2);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(r[i].step, 2, "rank %d: ul_comm_destroy still blocked after 10 s (%s)", i,
                 r[i].err);
    cr_expect_eq(r[i].rc, UL_OK, "rank %d: %s", i, r[i].err);
    cr_expect_eq(r[i].rc2, UL_OK);
    cr_expect_lt(r[i].ms, 1000 + 2000, "rank %d: destroy took %.0f ms (timeout 1000)", i, r[i].ms);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  /* The timed-out finalize turned into ncclCommAbort, which ends the hung operation, so
   * the communicators' device memory is released soon (a plain ncclCommDestroy would
   * still be waiting for it). */
  t0 = now_ms();
  while (fc("fakecuda_live_allocations") > 0 && now_ms() - t0 < 3000) usleep(10000);
  cr_expect_eq(fc("fakecuda_live_allocations"), 0,
               "%d device allocations still held 3 s after destroy: NCCL was never aborted",
               fc("fakecuda_live_allocations"));
}

/* M11: a thread in ul_stream_synchronize while another aborts: the backend comm stays
 * valid until it left (run with MALLOC_PERTURB_, so a use after free reads garbage). */
static void body_sync_hung(rank_ctx_t *r) {
  ul_comm_t c = r->comm;
  int32_t *buf = NULL;
  ul_stream_t s = NULL;
  if ((r->rc = ul_mem_alloc(c, 64, (void **)&buf)) != UL_OK ||
      (r->rc = ul_stream_create(c, &s)) != UL_OK ||
      (r->rc = ul_allreduce(buf, buf, 16, UL_INT32, UL_SUM, c, s)) != UL_OK) {
    snprintf(r->err, sizeof r->err, "setup: %s", ul_comm_last_error(c));
    return;
  }
  r->step = 1;
  r->rc = ul_stream_synchronize(s);
  snprintf(r->err, sizeof r->err, "%s", ul_last_error());
  r->step = 2;
  /* s is not destroyed: its communicator is gone (core handle freed by the abort). */
}

Test(nccl_backend, stream_sync_survives_abort, .timeout = 60) {
  rank_ctx_t r[2];
  pthread_t th[2];
  run_ranks(r, 2, body_sync_hung, 0, th, 0);
  double t0 = now_ms();
  while ((r[0].step < 1 || r[1].step < 1) && now_ms() - t0 < 20000) {
    if (r[0].init_rc != UL_OK || r[1].init_rc != UL_OK) break;
    usleep(1000);
  }
  expect_init_ok(r, 2);
  usleep(300 * 1000);
  cr_assert_eq(r[1].step, 1, "rank 1's synchronize returned (%s)", r[1].err);
  for (int i = 0; i < 2; i++) {
    double a0 = now_ms();
    cr_expect_eq(ul_comm_abort(r[i].comm), UL_OK);
    cr_expect_lt(now_ms() - a0, 1000, "ul_comm_abort of rank %d took %.0f ms", i, now_ms() - a0);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  cr_expect_eq(r[1].rc, UL_ERR_ABORTED, "rank 1: %s (%s)", ul_result_string(r[1].rc), r[1].err);
  cr_expect(strstr(r[1].err, "aborted") != NULL, "rank 1: %s", r[1].err);
}

/* M12: an async NCCL error found by ul_stream_synchronize fails the communicator: the
 * next call is refused at once with the same result instead of reaching NCCL
 * (FAKEGPU_NCCL_FAULT=async_error:1:2). */
static void body_async(rank_ctx_t *r) {
  ul_comm_t c = r->comm;
  int32_t *buf = NULL;
  ul_stream_t s = NULL;
  cudaStream_t cs;
  cudaSetDevice(r->device);
  /* The failing operation runs 300 ms after it was enqueued (a host function first), so
   * the error is found by the synchronize, not by the enqueue. */
  if ((r->rc = ul_mem_alloc(c, 64, (void **)&buf)) != UL_OK ||
      (r->rc = cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) ? UL_ERR_BACKEND : UL_OK) ||
      (r->rc = ul_stream_wrap_native(c, cs, &s)) != UL_OK ||
      (r->rc = cudaLaunchHostFunc(cs, sleep_300ms, NULL) ? UL_ERR_BACKEND : UL_OK) ||
      (r->rc = ul_allreduce(buf, buf, 16, UL_INT32, UL_SUM, c, s)) != UL_OK) {
    snprintf(r->err, sizeof r->err, "setup: %s", ul_comm_last_error(c));
    r->rc2 = UL_ERR_INTERNAL;
    return;
  }
  r->rc = ul_stream_synchronize(s);
  double t0 = now_ms();
  r->rc2 = ul_allreduce(buf, buf, 16, UL_INT32, UL_SUM, c, NULL);
  r->ms = now_ms() - t0;
  snprintf(r->err, sizeof r->err, "%s", ul_comm_last_error(c));
  ul_stream_destroy(s);
  ul_comm_destroy(c);
}

Test(nccl_backend, async_error_fails_the_communicator, .timeout = 60) {
  rank_ctx_t r[2];
  pthread_t th[2];
  run_ranks(r, 2, body_async, 3000, th, 1);
  expect_init_ok(r, 2);
  cr_expect_eq(r[1].rc, UL_ERR_PEER_LOST, "rank 1 synchronize: %s", ul_result_string(r[1].rc));
  cr_expect_eq(r[1].rc2, r[1].rc, "rank 1 next call: %s (%s)", ul_result_string(r[1].rc2), r[1].err);
  cr_expect_lt(r[1].ms, 500, "rank 1's refused call took %.0f ms", r[1].ms);
  /* refused by the core (sticky error) or by the backend (broken communicator) */
  cr_expect(strstr(r[1].err, "failed earlier") || strstr(r[1].err, "error state"), "rank 1: %s",
            r[1].err);
}

/* ------------------------------------------------------ H7: an older NCCL */

/* alltoall / gather / scatter (fallbacks on NCCL < 2.28.3), bf16, fp8 by version. */
static void body_old_nccl(rank_ctx_t *r) {
  ul_comm_t c = r->comm;
  int n = r->nranks, me = r->rank;
  enum { B = 33 };
  int32_t *d_in = NULL, *d_out = NULL;
  int32_t h[MAXR * B], back[MAXR * B];
  long long bad = 0;
  if ((r->rc = ul_mem_alloc(c, sizeof h, (void **)&d_in)) != UL_OK ||
      (r->rc = ul_mem_alloc(c, sizeof h, (void **)&d_out)) != UL_OK)
    goto fail;
  for (int p = 0; p < n; p++)
    for (int k = 0; k < B; k++) h[p * B + k] = me * 10000 + p * 100 + k;
  if ((r->rc = ul_mem_copy(d_in, h, n * B * 4, c, NULL)) != UL_OK) goto fail;
  /* alltoall: block p of rank q's output = block q of rank p's input */
  if ((r->rc = ul_alltoall(d_in, d_out, B, UL_INT32, c, NULL)) != UL_OK) goto fail;
  if ((r->rc = ul_mem_copy(back, d_out, n * B * 4, c, NULL)) != UL_OK) goto fail;
  for (int p = 0; p < n; p++)
    for (int k = 0; k < B; k++) bad += back[p * B + k] != p * 10000 + me * 100 + k;
  /* gather to root 1: block p = rank p's first block */
  if ((r->rc = ul_mem_set(d_out, 0, n * B * 4, c, NULL)) != UL_OK) goto fail;
  if ((r->rc = ul_gather(d_in, me == 1 ? d_out : NULL, B, UL_INT32, 1, c, NULL)) != UL_OK) goto fail;
  if (me == 1) {
    if ((r->rc = ul_mem_copy(back, d_out, n * B * 4, c, NULL)) != UL_OK) goto fail;
    for (int p = 0; p < n; p++)
      for (int k = 0; k < B; k++) bad += 100 * (back[p * B + k] != p * 10000 + k);
  }
  /* scatter from root 0: rank q gets root's block q */
  if ((r->rc = ul_scatter(me == 0 ? d_in : NULL, d_out, B, UL_INT32, 0, c, NULL)) != UL_OK) goto fail;
  if ((r->rc = ul_mem_copy(back, d_out, B * 4, c, NULL)) != UL_OK) goto fail;
  for (int k = 0; k < B; k++) bad += 10000 * (back[k] != me * 100 + k);
  /* windows register (or are a no-op) either way */
  ul_window_t w = NULL;
  if ((r->rc = ul_window_register(c, d_in, sizeof h, &w)) != UL_OK) goto fail;
  if ((r->rc = ul_window_deregister(w)) != UL_OK) goto fail;
  /* fp8 allreduce: NCCL >= 2.24 only */
  r->rc2 = ul_allreduce(d_in, d_out, 8, UL_FP8_E4M3, UL_MAX, c, NULL);
  if (r->rc2 != UL_OK) snprintf(r->err, sizeof r->err, "%s", ul_comm_last_error(c));
  r->sum = bad;
  ul_mem_free(c, d_in);
  ul_mem_free(c, d_out);
  ul_comm_destroy(c);
  return;
fail:
  snprintf(r->err, sizeof r->err, "%s", ul_comm_last_error(c));
}

static void old_nccl_run(int n, int expect_version) {
  ul_backend_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  cr_assert_eq(ul_backend_query("nccl", &info), UL_OK, "%s", ul_last_error());
  cr_assert_eq(info.available, 1, "nccl plugin unavailable: %s", info.reason);
  if (expect_version) {
    char want[32];
    snprintf(want, sizeof want, "NCCL %d.%d.%d", expect_version / 10000,
             (expect_version / 100) % 100, expect_version % 100);
    cr_expect_str_eq(info.version, want);
  }
  rank_ctx_t r[MAXR];
  pthread_t th[MAXR];
  run_ranks(r, n, body_old_nccl, 0, th, 1);
  expect_init_ok(r, n);
  for (int i = 0; i < n; i++) {
    cr_expect_eq(r[i].rc, UL_OK, "rank %d: %s", i, r[i].err);
    cr_expect_eq(r[i].sum, 0, "rank %d: wrong data (alltoall %lld, gather %lld, scatter %lld)", i,
                 r[i].sum % 100, (r[i].sum / 100) % 100, r[i].sum / 10000);
    if (expect_version && expect_version < 22400) {
      cr_expect_eq(r[i].rc2, UL_ERR_UNSUPPORTED, "rank %d: fp8 on NCCL %d: %s", i,
                   expect_version, ul_result_string(r[i].rc2));
      cr_expect(strstr(r[i].err, "2.24") != NULL, "rank %d: %s", i, r[i].err);
    } else {
      cr_expect_eq(r[i].rc2, UL_OK, "rank %d: fp8: %s", i, r[i].err);
    }
  }
}

/* Against the fake NCCL stripped to the 2.18.1 entry points (reports 2.18.1). */
Test(nccl_backend, old_nccl_2_18_loads_and_falls_back, .timeout = 60) { old_nccl_run(3, 21801); }
/* The same fallbacks forced on the full fake (UNILINK_NCCL_NEW_API=0). */
Test(nccl_backend, new_api_off_falls_back, .timeout = 60) { old_nccl_run(3, 0); }
