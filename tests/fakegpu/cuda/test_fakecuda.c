/* The fake CUDA runtime behaves like CUDA where our bugs would show: device memory the CPU
 * cannot touch, copies, legacy/non-blocking stream ordering under random delays, events,
 * the per-thread device and launches on another device's stream, peer access enforcement,
 * sticky errors, IPC across fork/exec. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"
#include "fakemem.h"

/* nvcc-generated host code calls these (crt/host_runtime.h, C++ only): a test registers a
 * kernel by its device name exactly as a stub would. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **h);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);

#define CK(x) cr_assert_eq((x), cudaSuccess, "%s: %s", #x, cudaGetErrorName(x))

static void stub_store64(void) {}
static void stub_unknown(void) {}
static void **g_module;

static void register_kernels(void) {
  static int fatbin;
  g_module = __cudaRegisterFatBinary(&fatbin);
  /* (anonymous namespace)::k_store64(unsigned long long volatile*, unsigned long long) */
  __cudaRegisterFunction(g_module, (const char *)stub_store64, (char *)"_ZN12_GLOBAL__N_19k_store64EPVyy",
                         "_ZN12_GLOBAL__N_19k_store64EPVyy", -1, NULL, NULL, NULL, NULL, NULL);
  __cudaRegisterFunction(g_module, (const char *)stub_unknown, (char *)"_Z9k_nothingv", "_Z9k_nothingv", -1,
                         NULL, NULL, NULL, NULL, NULL);
  __cudaRegisterFatBinaryEnd(g_module);
}

static cudaError_t store64(volatile uint64_t *cell, uint64_t v, cudaStream_t s) {
  unsigned long long vv = v;
  void *c = (void *)cell;
  void *args[] = {&c, &vv};
  dim3 one = {1, 1, 1};
  return cudaLaunchKernel((const void *)stub_store64, one, one, args, 0, s);
}

static void setup_delay(void) {
  setenv("FAKEGPU_DELAY_US", "3000", 1);
  setenv("FAKEGPU_SEED", "7", 1);
  register_kernels();
}
static void setup_plain(void) { register_kernels(); }
static void setup_nop2p(void) {
  setenv("FAKEGPU_P2P", "no", 1);
  register_kernels();
}

/* ---- device memory */

static int child_touch(void *p, int write) {
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would turn the fault into an exit */
    if (write) *(volatile char *)p = 1;
    else (void)*(volatile char *)p;
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFSIGNALED(st) ? WTERMSIG(st) : -1;
}

Test(fakecuda, cpu_touch_of_device_memory_faults, .init = setup_plain) {
  void *p = NULL;
  CK(cudaMalloc(&p, 4096));
  cr_assert_eq(child_touch(p, 1), SIGSEGV, "a CPU store into cudaMalloc memory must fault");
  cr_assert_eq(child_touch((char *)p + 100, 0), SIGSEGV, "a CPU load must fault");
  void *h = NULL;
  CK(cudaMallocHost(&h, 4096));
  cr_assert_eq(child_touch(h, 1), -1, "pinned host memory is ordinary CPU memory");
  CK(cudaFreeHost(h));
  cr_assert_eq(fakecuda_live_allocations(), 1);
  CK(cudaFree(p));
  cr_assert_eq(fakecuda_live_allocations(), 0);
  cr_assert_eq(fakemem_live(), 0);
  cr_assert_eq(cudaFree(p), cudaErrorInvalidValue, "double free is refused");
  cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
  cr_assert_eq(cudaGetLastError(), cudaSuccess, "cudaGetLastError resets a non-sticky error");
}

Test(fakecuda, memcpy_round_trip_and_kinds, .init = setup_plain) {
  enum { N = 1 << 16 };
  unsigned char *h = malloc(N), *back = malloc(N);
  for (int i = 0; i < N; i++) h[i] = (unsigned char)(i * 7 + 3);
  void *d0 = NULL, *d1 = NULL;
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&d0, N));
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&d1, N));
  CK(cudaMemcpy(d0, h, N, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d1, d0, N, cudaMemcpyDefault)); /* between devices: always allowed */
  memset(back, 0, N);
  CK(cudaMemcpy(back, d1, N, cudaMemcpyDeviceToHost));
  cr_assert_eq(memcmp(h, back, N), 0);

  /* Attributes as CUDA 13 reports them. */
  struct cudaPointerAttributes a;
  CK(cudaPointerGetAttributes(&a, (char *)d0 + 10));
  cr_assert_eq(a.type, cudaMemoryTypeDevice);
  cr_assert_eq(a.device, 0);
  cr_assert_null(a.hostPointer);
  cr_assert_null(a.devicePointer, "device 1 cannot access device 0 memory without peer access");
  CK(cudaPointerGetAttributes(&a, h));
  cr_assert_eq(a.type, cudaMemoryTypeUnregistered);

  /* A kind that contradicts the pointers is refused (use cudaMemcpyDefault). */
  cr_assert_eq(cudaMemcpy(back, d0, N, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  cr_assert_eq(cudaMemcpy(d0, h, N, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
  /* Past the end of the allocation. */
  cr_assert_eq(cudaMemcpy((char *)d0 + 1, h, N, cudaMemcpyDefault), cudaErrorInvalidValue);
  (void)cudaGetLastError();

  /* Async with pinned memory on a non-blocking stream, then memset. */
  unsigned char *pin = NULL;
  cudaStream_t s;
  CK(cudaHostAlloc((void **)&pin, N, cudaHostAllocDefault));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMemsetAsync(d1, 0x5a, N / 2, s));
  CK(cudaMemcpyAsync(pin, d1, N, cudaMemcpyDefault, s));
  CK(cudaStreamSynchronize(s));
  for (int i = 0; i < N; i++) cr_assert_eq(pin[i], i < N / 2 ? 0x5a : h[i], "byte %d", i);
  CK(cudaPointerGetAttributes(&a, pin + 5));
  cr_assert_eq(a.type, cudaMemoryTypeHost);
  cr_assert_eq(a.devicePointer, pin + 5);
  CK(cudaStreamDestroy(s));
  CK(cudaFreeHost(pin));
  CK(cudaFree(d0));
  CK(cudaFree(d1));
  cr_assert_eq(fakecuda_live_allocations(), 0);
  free(h);
  free(back);
}

/* ---- streams */

typedef struct {
  atomic_int flag;
  atomic_int seen;
  int wait_ms;
} rendezvous_t;

static void CUDART_CB set_flag(void *u) { atomic_store(&((rendezvous_t *)u)->flag, 1); }
static void CUDART_CB wait_flag(void *u) {
  rendezvous_t *r = u;
  for (int i = 0; i < r->wait_ms; i++) {
    if (atomic_load(&r->flag)) {
      atomic_store(&r->seen, 1);
      return;
    }
    usleep(1000);
  }
}
static void CUDART_CB sleep_30ms(void *u) {
  (void)u;
  usleep(30000);
}

Test(fakecuda, legacy_stream_orders_with_blocking_streams, .init = setup_delay) {
  enum { N = 4096 };
  void *d = NULL;
  unsigned char out[N];
  cudaStream_t b;
  CK(cudaMalloc(&d, N));
  CK(cudaStreamCreate(&b)); /* blocking */
  for (int round = 0; round < 5; round++) {
    /* blocking stream first, legacy after: legacy work waits for it */
    CK(cudaLaunchHostFunc(b, sleep_30ms, NULL));
    CK(cudaMemsetAsync(d, 1, N, b));
    CK(cudaMemsetAsync(d, 2, N, 0));
    CK(cudaMemcpy(out, d, N, cudaMemcpyDefault));
    cr_assert_eq(out[0], 2);
    cr_assert_eq(out[N - 1], 2);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out, d, N, cudaMemcpyDefault));
    cr_assert_eq(out[0], 2, "the blocking stream's memset ran after the legacy one");
    /* legacy first, blocking after: the blocking stream waits for the legacy stream */
    CK(cudaLaunchHostFunc(0, sleep_30ms, NULL));
    CK(cudaMemsetAsync(d, 3, N, 0));
    CK(cudaMemsetAsync(d, 4, N, b));
    CK(cudaStreamSynchronize(b));
    CK(cudaMemcpyAsync(out, d, N, cudaMemcpyDefault, b));
    CK(cudaStreamSynchronize(b));
    cr_assert_eq(out[0], 4);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out, d, N, cudaMemcpyDefault));
    cr_assert_eq(out[0], 4, "the legacy stream's memset ran after the blocking one");
  }
  /* cudaStreamPerThread is a blocking stream too. */
  CK(cudaLaunchHostFunc(0, sleep_30ms, NULL));
  CK(cudaMemsetAsync(d, 5, N, 0));
  CK(cudaMemsetAsync(d, 6, N, cudaStreamPerThread));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(out, d, N, cudaMemcpyDefault));
  cr_assert_eq(out[0], 6, "the per-thread stream overtook the legacy stream");
  /* A blocking stream's work cannot run while earlier legacy work waits. */
  rendezvous_t r = {0, 0, 200};
  CK(cudaLaunchHostFunc(0, wait_flag, &r));
  CK(cudaLaunchHostFunc(b, set_flag, &r));
  CK(cudaDeviceSynchronize());
  cr_assert_eq(atomic_load(&r.seen), 0, "blocking stream overtook the legacy stream");
  cr_assert_eq(atomic_load(&r.flag), 1);
  CK(cudaStreamDestroy(b));
  CK(cudaFree(d));
}

Test(fakecuda, nonblocking_stream_does_not_wait_for_legacy, .init = setup_delay) {
  cudaStream_t nb;
  CK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
  rendezvous_t r = {0, 0, 5000};
  CK(cudaLaunchHostFunc(0, wait_flag, &r));
  cr_assert_eq(cudaStreamQuery(0), cudaErrorNotReady);
  cr_assert_eq(cudaGetLastError(), cudaSuccess, "NotReady is not an error");
  CK(cudaLaunchHostFunc(nb, set_flag, &r));
  CK(cudaStreamSynchronize(nb));
  CK(cudaDeviceSynchronize());
  cr_assert_eq(atomic_load(&r.seen), 1, "a non-blocking stream must not wait for the legacy stream");
  CK(cudaStreamQuery(0));
  CK(cudaStreamDestroy(nb));
}

typedef struct {
  int log[200];
  atomic_int n;
} order_t;
typedef struct {
  order_t *o;
  int v;
} order_item_t;
static void CUDART_CB append(void *u) {
  order_item_t *it = u;
  it->o->log[atomic_fetch_add(&it->o->n, 1)] = it->v;
}

Test(fakecuda, fifo_order_and_events_under_delays, .init = setup_delay) {
  cudaStream_t a, b;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  static order_t o;
  static order_item_t items[200];
  for (int i = 0; i < 100; i++) {
    items[i] = (order_item_t){&o, i};
    CK(cudaLaunchHostFunc(a, append, &items[i]));
  }
  cudaEvent_t ev, t0, t1;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  CK(cudaEventRecord(t0, a));
  CK(cudaLaunchHostFunc(a, sleep_30ms, NULL));
  CK(cudaEventRecord(ev, a));
  CK(cudaEventRecord(t1, a));
  cr_assert_eq(cudaEventQuery(ev), cudaErrorNotReady);
  cr_assert_eq(cudaEventElapsedTime(&(float){0}, t0, t1), cudaErrorNotReady);
  /* b waits for everything a had when the event was recorded */
  CK(cudaStreamWaitEvent(b, ev, 0));
  items[100] = (order_item_t){&o, 1000};
  CK(cudaLaunchHostFunc(b, append, &items[100]));
  CK(cudaStreamSynchronize(b));
  cr_assert_eq(atomic_load(&o.n), 101);
  for (int i = 0; i < 100; i++) cr_assert_eq(o.log[i], i, "FIFO order broken at %d", i);
  cr_assert_eq(o.log[100], 1000);
  CK(cudaEventSynchronize(t1));
  CK(cudaEventQuery(ev));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, t0, t1));
  cr_assert_geq(ms, 29.0f, "elapsed %f ms", ms);
  cr_assert_eq(cudaEventElapsedTime(&ms, t0, ev), cudaErrorInvalidResourceHandle, "timing disabled");
  (void)cudaGetLastError();
  /* an event belongs to the device current at its creation */
  CK(cudaSetDevice(1));
  cudaStream_t s1;
  CK(cudaStreamCreate(&s1));
  cr_assert_eq(cudaEventRecord(ev, s1), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  CK(cudaStreamDestroy(s1));
  CK(cudaSetDevice(0));
  CK(cudaEventDestroy(ev));
  CK(cudaEventDestroy(t0));
  CK(cudaEventDestroy(t1));
  CK(cudaStreamDestroy(a));
  CK(cudaStreamDestroy(b));
  cr_assert_eq(fakecuda_live_streams(), 0);
  cr_assert_eq(fakecuda_live_events(), 0);
  cr_assert_eq(cudaStreamDestroy(a), cudaErrorInvalidResourceHandle, "destroyed handle");
}

typedef struct {
  void *dev;
  cudaError_t memset_rc, sync_rc, host_fn_rc;
} in_callback_t;
static void CUDART_CB nop(void *u) { (void)u; }
static void CUDART_CB call_cuda(void *u) {
  in_callback_t *c = u;
  c->memset_rc = cudaMemsetAsync(c->dev, 0, 8, 0);
  c->sync_rc = cudaDeviceSynchronize();
  c->host_fn_rc = cudaLaunchHostFunc(0, nop, NULL);
}

Test(fakecuda, host_functions_may_not_call_cuda, .init = setup_plain) {
  in_callback_t c = {NULL, cudaSuccess, cudaSuccess, cudaSuccess};
  CK(cudaMalloc(&c.dev, 8));
  CK(cudaLaunchHostFunc(0, call_cuda, &c));
  CK(cudaStreamSynchronize(0));
  cr_assert_eq(c.memset_rc, cudaErrorNotPermitted);
  cr_assert_eq(c.sync_rc, cudaErrorNotPermitted);
  cr_assert_eq(c.host_fn_rc, cudaErrorNotPermitted);
  CK(cudaFree(c.dev));
}

/* ---- devices, launches, peer access, sticky errors */

typedef struct {
  int dev;
} dev_probe_t;
static void *other_thread(void *u) {
  dev_probe_t *p = u;
  cudaGetDevice(&p->dev);
  return NULL;
}

Test(fakecuda, devices_and_properties, .init = setup_plain) {
  int n = 0, d = -1;
  CK(cudaGetDeviceCount(&n));
  cr_assert_eq(n, 4, "FAKEGPU_GPUS defaults to 4");
  CK(cudaSetDevice(3));
  CK(cudaGetDevice(&d));
  cr_assert_eq(d, 3);
  dev_probe_t p = {-1};
  pthread_t t;
  pthread_create(&t, NULL, other_thread, &p);
  pthread_join(t, NULL);
  cr_assert_eq(p.dev, 0, "the current device is per thread");
  cr_assert_eq(cudaSetDevice(4), cudaErrorInvalidDevice);
  cr_assert_eq(cudaSetDevice(-1), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  struct cudaDeviceProp pr;
  CK(cudaGetDeviceProperties(&pr, 2));
  cr_assert_str_eq(pr.name, "unilink fake GPU");
  cr_assert_eq(pr.major, 9);
  cr_assert_eq(pr.minor, 0);
  int bus[4];
  for (int i = 0; i < 4; i++) {
    CK(cudaDeviceGetAttribute(&bus[i], cudaDevAttrPciBusId, i));
    for (int j = 0; j < i; j++) cr_assert_neq(bus[i], bus[j]);
    char id[32];
    int back = -1;
    CK(cudaDeviceGetPCIBusId(id, sizeof id, i));
    CK(cudaDeviceGetByPCIBusId(&back, id));
    cr_assert_eq(back, i);
  }
  int can = -1;
  CK(cudaDeviceCanAccessPeer(&can, 0, 1));
  cr_assert_eq(can, 1);
  CK(cudaDeviceGetP2PAttribute(&can, cudaDevP2PAttrAccessSupported, 0, 1));
  cr_assert_eq(can, 1);
}

Test(fakecuda, launch_on_another_devices_stream_fails, .init = setup_plain) {
  volatile uint64_t *cell = NULL;
  CK(cudaHostAlloc((void **)&cell, 64, cudaHostAllocMapped));
  CK(cudaSetDevice(1));
  cudaStream_t s1;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaSetDevice(0));
  cr_assert_eq(store64(cell, 42, s1), cudaErrorInvalidResourceHandle);
  cr_assert_eq(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  /* a copy may be issued to another device's stream */
  uint64_t v = 5;
  CK(cudaMemcpyAsync((void *)cell, &v, sizeof v, cudaMemcpyDefault, s1));
  CK(cudaStreamSynchronize(s1));
  cr_assert_eq(*cell, 5);
  CK(cudaSetDevice(1));
  CK(store64(cell, 42, s1));
  CK(cudaStreamSynchronize(s1));
  cr_assert_eq(*cell, 42);
  cr_assert_eq(fakecuda_kernels_run(), 1);
  dim3 one = {1, 1, 1}, big = {2048, 1, 1};
  void *args[] = {NULL};
  cr_assert_eq(cudaLaunchKernel((const void *)stub_unknown, one, one, args, 0, s1), cudaErrorInvalidDeviceFunction);
  cr_assert_eq(cudaLaunchKernel((const void *)&v, one, one, args, 0, s1), cudaErrorInvalidDeviceFunction);
  unsigned long long vv = 1;
  void *c = (void *)cell;
  void *a2[] = {&c, &vv};
  cr_assert_eq(cudaLaunchKernel((const void *)stub_store64, one, big, a2, 0, s1), cudaErrorInvalidConfiguration);
  (void)cudaGetLastError();
  CK(cudaStreamDestroy(s1));
  CK(cudaFreeHost((void *)cell));
}

Test(fakecuda, kernel_on_pageable_memory_is_a_sticky_illegal_address, .init = setup_plain) {
  static uint64_t pageable;
  cr_assert_eq(store64(&pageable, 1, 0), cudaSuccess, "the launch itself succeeds");
  cr_assert_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  cr_assert_eq(pageable, 0, "the kernel must not have written");
  cr_assert_eq(cudaGetLastError(), cudaErrorIllegalAddress);
  cr_assert_eq(cudaGetLastError(), cudaErrorIllegalAddress, "sticky: not reset");
  cr_assert_eq(cudaStreamQuery(0), cudaErrorIllegalAddress);
  void *p;
  cr_assert_eq(cudaMalloc(&p, 16), cudaErrorIllegalAddress, "the context is unusable");
}

Test(fakecuda, peer_access_is_enforced_for_kernels, .init = setup_plain) {
  void *d1 = NULL;
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&d1, 64));
  CK(cudaSetDevice(0));
  CK(store64((volatile uint64_t *)d1, 9, 0));
  cr_assert_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "device 0 touched device 1 memory without peer access");
}

Test(fakecuda, peer_access_enabled_kernel_runs, .init = setup_plain) {
  void *d1 = NULL;
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&d1, 64));
  CK(cudaSetDevice(0));
  CK(cudaDeviceEnablePeerAccess(1, 0));
  cr_assert_eq(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  cr_assert_eq(cudaGetLastError(), cudaErrorPeerAccessAlreadyEnabled);
  cr_assert_eq(fakecuda_peer_enabled(0, 1), 1);
  cr_assert_eq(fakecuda_peer_enabled(1, 0), 0, "peer access is one-directional");
  CK(store64((volatile uint64_t *)d1, 9, 0));
  CK(cudaDeviceSynchronize());
  uint64_t v = 0;
  CK(cudaMemcpy(&v, d1, sizeof v, cudaMemcpyDefault));
  cr_assert_eq(v, 9);
  CK(cudaDeviceDisablePeerAccess(1));
  cr_assert_eq(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
  (void)cudaGetLastError();
  CK(cudaFree(d1));
}

Test(fakecuda, no_p2p_matrix, .init = setup_nop2p) {
  int can = -1;
  CK(cudaDeviceCanAccessPeer(&can, 0, 1));
  cr_assert_eq(can, 0);
  cr_assert_eq(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessUnsupported);
  CK(cudaDeviceGetP2PAttribute(&can, cudaDevP2PAttrAccessSupported, 0, 1));
  cr_assert_eq(can, 0);
  /* copies between devices still work (staged) */
  void *a, *b;
  CK(cudaMalloc(&a, 8));
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&b, 8));
  uint64_t v = 77, w = 0;
  CK(cudaMemcpy(a, &v, 8, cudaMemcpyDefault));
  CK(cudaMemcpy(b, a, 8, cudaMemcpyDefault));
  CK(cudaMemcpy(&w, b, 8, cudaMemcpyDefault));
  cr_assert_eq(w, 77);
}

Test(fakecuda, host_register_bookkeeping, .init = setup_plain) {
  char *m = aligned_alloc(4096, 8192);
  CK(cudaHostRegister(m, 8192, cudaHostRegisterMapped | cudaHostRegisterPortable));
  cr_assert_eq(fakecuda_registered_ranges(), 1);
  cr_assert_eq(cudaHostRegister(m + 4096, 100, 0), cudaErrorHostMemoryAlreadyRegistered);
  void *dp = NULL;
  CK(cudaHostGetDevicePointer(&dp, m + 64, 0));
  cr_assert_eq(dp, m + 64, "UVA: the device pointer is the host address");
  CK(store64((volatile uint64_t *)(m + 64), 123, 0));
  CK(cudaDeviceSynchronize());
  cr_assert_eq(*(uint64_t *)(m + 64), 123);
  cr_assert_eq(cudaHostUnregister(m + 1), cudaErrorHostMemoryNotRegistered);
  CK(cudaHostUnregister(m));
  cr_assert_eq(fakecuda_registered_ranges(), 0);
  cr_assert_eq(cudaHostGetDevicePointer(&dp, m, 0), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  free(m);
}

/* ---- IPC across fork/exec */

Test(fakecuda, ipc_across_fork_exec, .init = setup_plain) {
  enum { N = 3 * 4096 };
  unsigned char *h = malloc(N);
  for (int i = 0; i < N; i++) h[i] = (unsigned char)(i ^ 0x35);
  void *d = NULL;
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&d, N));
  CK(cudaMemcpy(d, h, N, cudaMemcpyDefault));
  /* From pageable memory cudaMemcpy returns once the source is staged, not when the
   * device holds it: another process sees the data only after a synchronize. */
  CK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t hd;
  CK(cudaIpcGetMemHandle(&hd, (char *)d + 4096)); /* an interior pointer: the handle is the allocation */
  void *mine = NULL;
  cr_assert_eq(cudaIpcOpenMemHandle(&mine, hd, cudaIpcMemLazyEnablePeerAccess), cudaErrorDeviceUninitialized,
               "CUDA refuses to open a handle in the exporting process");
  (void)cudaGetLastError();
  char hex[2 * sizeof hd + 1];
  for (size_t i = 0; i < sizeof hd; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)hd.reserved[i]);
  int to_child[2], from_child[2];
  cr_assert_eq(pipe(to_child), 0);
  cr_assert_eq(pipe(from_child), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    execl(FAKECUDA_IPC_CHILD, FAKECUDA_IPC_CHILD, hex, (char *)NULL);
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  char c = 0;
  cr_assert_eq(read(from_child[0], &c, 1), 1, "child did not report");
  cr_assert_eq(c, 'o', "child failed before writing (%c)", c);
  /* the child wrote 0xee over the first 4096 bytes of the exported allocation */
  unsigned char back[N];
  CK(cudaMemcpy(back, d, N, cudaMemcpyDefault));
  for (int i = 0; i < N; i++) cr_assert_eq(back[i], i < 4096 ? 0xee : h[i], "byte %d", i);
  /* free in the exporter: the importer's mapping stays valid (CUDA keeps it alive) */
  CK(cudaFree(d));
  cr_assert_eq(write(to_child[1], "f", 1), 1);
  int st = 0;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st), "child died of signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  cr_assert_eq(WEXITSTATUS(st), 0, "child failed with %d", WEXITSTATUS(st));
  free(h);
}
