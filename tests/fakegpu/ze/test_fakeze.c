/* The fake Level Zero loader itself: device memory faults on the CPU, copies are exact,
 * command lists order by barriers and events, lost devices, IPC across processes.
 * Each Criterion test runs in its own process, so FAKEGPU_* set before zeInit apply. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <level_zero/ze_api.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fakeze.h"

#define ZE_OK(call) cr_assert_eq((call), ZE_RESULT_SUCCESS, "%s", #call)

typedef struct fx {
  ze_driver_handle_t drv;
  ze_context_handle_t ctx;
  ze_device_handle_t dev[8];
  uint32_t ndev;
  ze_event_pool_handle_t pool;
  ze_event_handle_t ev[8];
} fx_t;

static void fx_init(fx_t *f) {
  memset(f, 0, sizeof(*f));
  ZE_OK(zeInit(ZE_INIT_FLAG_GPU_ONLY));
  uint32_t n = 1;
  ZE_OK(zeDriverGet(&n, &f->drv));
  cr_assert_eq(n, 1);
  f->ndev = 8;
  ZE_OK(zeDeviceGet(f->drv, &f->ndev, f->dev));
  ze_context_desc_t cd = {ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
  ZE_OK(zeContextCreate(f->drv, &cd, &f->ctx));
  ze_event_pool_desc_t pd = {ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL,
                             ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 8};
  ZE_OK(zeEventPoolCreate(f->ctx, &pd, 0, NULL, &f->pool));
  for (uint32_t i = 0; i < 8; i++) {
    ze_event_desc_t ed = {ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, i, ZE_EVENT_SCOPE_FLAG_HOST,
                          ZE_EVENT_SCOPE_FLAG_HOST};
    ZE_OK(zeEventCreate(f->pool, &ed, &f->ev[i]));
  }
}

static void fx_fini(fx_t *f) {
  for (int i = 0; i < 8; i++) ZE_OK(zeEventDestroy(f->ev[i]));
  ZE_OK(zeEventPoolDestroy(f->pool));
  ZE_OK(zeContextDestroy(f->ctx));
  cr_assert_eq(fakeze_live_events(), 0);
  cr_assert_eq(fakeze_live_event_pools(), 0);
  cr_assert_eq(fakeze_live_contexts(), 0);
  cr_assert_eq(fakeze_spec_violations(), 0);
}

static ze_command_list_handle_t fx_list(fx_t *f, int dev, uint32_t ordinal, int sync) {
  ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, ordinal, 0, 0,
                                sync ? ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS
                                     : ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
                                ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t l = NULL;
  ZE_OK(zeCommandListCreateImmediate(f->ctx, f->dev[dev], &qd, &l));
  return l;
}

static void *fx_dev_alloc(fx_t *f, int dev, size_t n) {
  ze_device_mem_alloc_desc_t d = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  void *p = NULL;
  ZE_OK(zeMemAllocDevice(f->ctx, &d, n, 64, f->dev[dev], &p));
  return p;
}

static void *fx_host_alloc(fx_t *f, size_t n) {
  ze_host_mem_alloc_desc_t d = {ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, NULL, 0};
  void *p = NULL;
  ZE_OK(zeMemAllocHost(f->ctx, &d, n, 64, &p));
  return p;
}

/* Everything appended so far completes; the result of waiting on it. */
static ze_result_t fx_sync(fx_t *f, ze_command_list_handle_t l) {
  ze_result_t r = zeCommandListAppendBarrier(l, f->ev[7], 0, NULL);
  if (r != ZE_RESULT_SUCCESS) return r;
  r = zeEventHostSynchronize(f->ev[7], UINT64_MAX);
  zeEventHostReset(f->ev[7]);
  return r;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ----------------------------------------------------------- enumeration */

Test(fakeze, uninitialized_until_zeInit) {
  uint32_t n = 0;
  cr_assert_eq(zeDriverGet(&n, NULL), ZE_RESULT_ERROR_UNINITIALIZED);
  ZE_OK(zeInit(ZE_INIT_FLAG_GPU_ONLY));
  ZE_OK(zeDriverGet(&n, NULL));
  cr_assert_eq(n, 1);
}

Test(fakeze, no_device_gives_no_driver) {
  setenv("FAKEGPU_ZE_NO_DEVICE", "1", 1);
  ZE_OK(zeInit(ZE_INIT_FLAG_GPU_ONLY));
  uint32_t n = 5;
  ze_driver_handle_t d[5];
  ZE_OK(zeDriverGet(&n, d));
  cr_assert_eq(n, 0);
}

Test(fakeze, no_device_init_fails) {
  setenv("FAKEGPU_ZE_NO_DEVICE", "init", 1);
  cr_assert_eq(zeInit(ZE_INIT_FLAG_GPU_ONLY), ZE_RESULT_ERROR_UNINITIALIZED);
}

Test(fakeze, devices_and_properties) {
  setenv("FAKEGPU_GPUS", "3", 1);
  fx_t f;
  fx_init(&f);
  cr_assert_eq(f.ndev, 3);
  uint32_t n = 0;
  ZE_OK(zeDeviceGet(f.drv, &n, NULL));
  cr_assert_eq(n, 3);
  n = 2; /* fewer than there are: only two written */
  ze_device_handle_t two[3] = {0};
  ZE_OK(zeDeviceGet(f.drv, &n, two));
  cr_assert_eq(n, 2);
  cr_assert_null(two[2]);
  uint8_t uuids[3][16];
  for (uint32_t i = 0; i < 3; i++) {
    ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
    ZE_OK(zeDeviceGetProperties(f.dev[i], &p));
    cr_assert_eq(p.type, ZE_DEVICE_TYPE_GPU);
    cr_assert_str_eq(p.name, "unilink fake Xe GPU");
    cr_assert_eq(p.vendorId, 0x8086);
    cr_assert_eq(p.flags & ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE, 0);
    memcpy(uuids[i], p.uuid.id, 16);
    ze_pci_ext_properties_t pci = {.stype = ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES};
    ZE_OK(zeDevicePciGetPropertiesExt(f.dev[i], &pci));
    cr_assert_eq(pci.address.bus, 0x18 + 0x10 * i);
    uint32_t ns = 7;
    ZE_OK(zeDeviceGetSubDevices(f.dev[i], &ns, NULL));
    cr_assert_eq(ns, 0);
  }
  cr_assert_neq(memcmp(uuids[0], uuids[1], 16), 0);
  cr_assert_neq(memcmp(uuids[1], uuids[2], 16), 0);
  uint32_t ng = 0;
  ZE_OK(zeDeviceGetCommandQueueGroupProperties(f.dev[0], &ng, NULL));
  cr_assert_eq(ng, 2);
  ze_command_queue_group_properties_t g[2] = {{.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES},
                                              {.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES}};
  ZE_OK(zeDeviceGetCommandQueueGroupProperties(f.dev[0], &ng, g));
  cr_assert(g[0].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE);
  cr_assert(g[0].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY);
  cr_assert_eq(g[1].flags, ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY);
  ze_api_version_t v = 0;
  ZE_OK(zeDriverGetApiVersion(f.drv, &v));
  cr_assert_eq(v, ZE_API_VERSION_CURRENT);
  void *fn = (void *)1;
  cr_assert_eq(zeDriverGetExtensionFunctionAddress(f.drv, "zeMemGetIpcHandleFromFileDescriptorExp", &fn),
               ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
  cr_assert_null(fn);
  fx_fini(&f);
}

Test(fakeze, no_copy_engine_option) {
  setenv("FAKEGPU_ZE_COPY_ENGINE", "0", 1);
  fx_t f;
  fx_init(&f);
  uint32_t ng = 0;
  ZE_OK(zeDeviceGetCommandQueueGroupProperties(f.dev[0], &ng, NULL));
  cr_assert_eq(ng, 1);
  ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, 1, 0, 0,
                                ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t l = NULL;
  cr_assert_eq(zeCommandListCreateImmediate(f.ctx, f.dev[0], &qd, &l), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  fx_fini(&f);
}

Test(fakeze, sub_devices) {
  setenv("FAKEGPU_GPUS", "2", 1);
  setenv("FAKEGPU_ZE_SUBDEVICES", "2", 1);
  setenv("FAKEGPU_P2P", "no", 1);
  fx_t f;
  fx_init(&f);
  cr_assert_eq(f.ndev, 2);
  ze_device_handle_t s0[2], s1[2];
  uint32_t n = 2;
  ZE_OK(zeDeviceGetSubDevices(f.dev[0], &n, s0));
  cr_assert_eq(n, 2);
  ZE_OK(zeDeviceGetSubDevices(f.dev[1], &n, s1));
  ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
  ZE_OK(zeDeviceGetProperties(s1[1], &p));
  cr_assert(p.flags & ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE);
  cr_assert_eq(p.subdeviceId, 1);
  ze_bool_t can = 0;
  ZE_OK(zeDeviceCanAccessPeer(s0[0], s0[1], &can)); /* sibling tiles: always */
  cr_assert_eq(can, 1);
  ZE_OK(zeDeviceCanAccessPeer(s0[0], f.dev[0], &can)); /* tile and its parent */
  cr_assert_eq(can, 1);
  ZE_OK(zeDeviceCanAccessPeer(s0[0], s1[0], &can)); /* other card, no P2P */
  cr_assert_eq(can, 0);
  fx_fini(&f);
}

Test(fakeze, peer_access_and_fabric) {
  setenv("FAKEGPU_GPUS", "3", 1);
  setenv("FAKEGPU_P2P", "0-1", 1);
  fx_t f;
  fx_init(&f);
  ze_bool_t can = 9;
  ZE_OK(zeDeviceCanAccessPeer(f.dev[0], f.dev[1], &can));
  cr_assert_eq(can, 1);
  ZE_OK(zeDeviceCanAccessPeer(f.dev[1], f.dev[0], &can));
  cr_assert_eq(can, 1);
  ZE_OK(zeDeviceCanAccessPeer(f.dev[0], f.dev[2], &can));
  cr_assert_eq(can, 0);
  ZE_OK(zeDeviceCanAccessPeer(f.dev[2], f.dev[2], &can));
  cr_assert_eq(can, 1);
  ze_device_p2p_bandwidth_exp_properties_t bw = {.stype = ZE_STRUCTURE_TYPE_DEVICE_P2P_BANDWIDTH_EXP_PROPERTIES};
  ze_device_p2p_properties_t pp = {.stype = ZE_STRUCTURE_TYPE_DEVICE_P2P_PROPERTIES, .pNext = &bw};
  ZE_OK(zeDeviceGetP2PProperties(f.dev[0], f.dev[1], &pp));
  cr_assert(pp.flags & ZE_DEVICE_P2P_PROPERTY_FLAG_ACCESS);
  cr_assert_gt(bw.logicalBandwidth, 0);
  ZE_OK(zeDeviceGetP2PProperties(f.dev[0], f.dev[2], &pp));
  cr_assert_eq(pp.flags, 0);
  cr_assert_eq(bw.logicalBandwidth, 0);
  ze_fabric_vertex_handle_t v0, v1, v2;
  ZE_OK(zeDeviceGetFabricVertexExp(f.dev[0], &v0));
  ZE_OK(zeDeviceGetFabricVertexExp(f.dev[1], &v1));
  ZE_OK(zeDeviceGetFabricVertexExp(f.dev[2], &v2));
  uint32_t ne = 0;
  ZE_OK(zeFabricEdgeGetExp(v0, v1, &ne, NULL));
  cr_assert_eq(ne, 1);
  ze_fabric_edge_handle_t e;
  ZE_OK(zeFabricEdgeGetExp(v1, v0, &ne, &e));
  ze_fabric_edge_exp_properties_t ep = {.stype = ZE_STRUCTURE_TYPE_FABRIC_EDGE_EXP_PROPERTIES};
  ZE_OK(zeFabricEdgeGetPropertiesExp(e, &ep));
  cr_assert_str_eq(ep.model, "fake XeLink");
  cr_assert_eq(ep.bandwidthUnit, ZE_BANDWIDTH_UNIT_BYTES_PER_NANOSEC);
  ne = 0;
  ZE_OK(zeFabricEdgeGetExp(v0, v2, &ne, NULL));
  cr_assert_eq(ne, 0);
  fx_fini(&f);
}

/* ------------------------------------------------------------------ memory */

static void touch_in_child(void *p, int write) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would turn the fault into an exit */
    if (write)
      *(volatile char *)p = 1;
    else
      (void)*(volatile char *)p;
    _exit(0);
  }
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "a CPU %s of device memory did not fault",
            write ? "store" : "load");
}

Test(fakeze, cpu_access_to_device_memory_faults) {
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 0, 8192);
  touch_in_child(d, 1);
  touch_in_child(d + 5000, 0);
  char *h = fx_host_alloc(&f, 64); /* host memory: the CPU may touch it */
  h[0] = 1;
  ZE_OK(zeMemFree(f.ctx, d));
  ZE_OK(zeMemFree(f.ctx, h));
  fx_fini(&f);
}

Test(fakeze, allocation_properties) {
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 2, 1000);
  char *h = fx_host_alloc(&f, 300);
  cr_assert_eq(fakeze_live_allocations(), 2);
  ze_memory_allocation_properties_t p = {.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES};
  ze_device_handle_t dh = NULL;
  ZE_OK(zeMemGetAllocProperties(f.ctx, d + 10, &p, &dh));
  cr_assert_eq(p.type, ZE_MEMORY_TYPE_DEVICE);
  cr_assert_eq(dh, f.dev[2]);
  uint64_t did = p.id;
  ZE_OK(zeMemGetAllocProperties(f.ctx, h + 299, &p, &dh));
  cr_assert_eq(p.type, ZE_MEMORY_TYPE_HOST);
  cr_assert_null(dh);
  cr_assert_neq(p.id, did);
  int stack = 0;
  ZE_OK(zeMemGetAllocProperties(f.ctx, &stack, &p, &dh));
  cr_assert_eq(p.type, ZE_MEMORY_TYPE_UNKNOWN);
  ZE_OK(zeMemGetAllocProperties(f.ctx, d + 1000, &p, NULL)); /* one past the end */
  cr_assert_eq(p.type, ZE_MEMORY_TYPE_UNKNOWN);
  void *base = NULL;
  size_t size = 0;
  ZE_OK(zeMemGetAddressRange(f.ctx, d + 999, &base, &size));
  cr_assert_eq(base, d);
  cr_assert_eq(size, 1000);
  ZE_OK(zeMemGetAddressRange(f.ctx, h + 1, &base, &size));
  cr_assert_eq(base, h);
  cr_assert_eq(size, 300);
  cr_assert_eq(zeMemGetAddressRange(f.ctx, &stack, &base, &size), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(zeMemFree(f.ctx, d + 1), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  ZE_OK(zeMemFree(f.ctx, d));
  cr_assert_eq(zeMemFree(f.ctx, d), ZE_RESULT_ERROR_INVALID_ARGUMENT); /* twice */
  ZE_OK(zeMemFree(f.ctx, h));
  cr_assert_eq(fakeze_live_allocations(), 0);
  ze_device_mem_alloc_desc_t dd = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  void *x = NULL;
  cr_assert_eq(zeMemAllocDevice(f.ctx, &dd, 0, 0, f.dev[0], &x), ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
  cr_assert_eq(zeMemAllocDevice(f.ctx, &dd, 64, 3, f.dev[0], &x), ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
  fx_fini(&f);
}

/* ------------------------------------------------------------------ copies */

static void fill_pattern(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed * 7u + (i >> 8)) & 0xff);
}

Test(fakeze, copies_host_device_device_host) {
  fx_t f;
  fx_init(&f);
  const size_t n = (1 << 20) + 13;
  unsigned char *src = malloc(n), *out = fx_host_alloc(&f, n);
  fill_pattern(src, n, 3);
  memset(out, 0, n);
  void *d0 = fx_dev_alloc(&f, 0, n), *d1 = fx_dev_alloc(&f, 1, n);
  ze_command_list_handle_t l0 = fx_list(&f, 0, 1, 0), l1 = fx_list(&f, 1, 0, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l0, d0, src, n, NULL, 0, NULL)); /* pageable -> device */
  ZE_OK(zeCommandListAppendBarrier(l0, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(l0, d1, d0, n, f.ev[0], 0, NULL)); /* device -> peer */
  /* the other device's list waits for the peer copy through the event */
  ZE_OK(zeCommandListAppendMemoryCopy(l1, out, d1, n, f.ev[1], 1, &f.ev[0]));
  ZE_OK(zeEventHostSynchronize(f.ev[1], UINT64_MAX));
  cr_assert_eq(memcmp(out, src, n), 0);
  /* interior pointers, odd sizes */
  memset(out, 0, n);
  ZE_OK(zeCommandListAppendMemoryCopy(l1, out + 1, (char *)d1 + 7, 1001, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l1));
  cr_assert_eq(memcmp(out + 1, src + 7, 1001), 0);
  cr_assert_eq(out[0], 0);
  cr_assert_eq(out[1002], 0);
  ZE_OK(zeCommandListDestroy(l0));
  ZE_OK(zeCommandListDestroy(l1));
  cr_assert_eq(fakeze_live_command_lists(), 0);
  ZE_OK(zeMemFree(f.ctx, d0));
  ZE_OK(zeMemFree(f.ctx, d1));
  ZE_OK(zeMemFree(f.ctx, out));
  free(src);
  cr_assert_eq(fakeze_device_lost(0) + fakeze_device_lost(1), 0);
  fx_fini(&f);
}

Test(fakeze, fill) {
  fx_t f;
  fx_init(&f);
  const size_t n = 10000;
  unsigned char *d = fx_dev_alloc(&f, 0, n), *out = fx_host_alloc(&f, n);
  ze_command_list_handle_t copy = fx_list(&f, 0, 1, 0), comp = fx_list(&f, 0, 0, 0);
  uint8_t b = 0xab;
  ZE_OK(zeCommandListAppendMemoryFill(copy, d, &b, 1, n, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(copy, NULL, 0, NULL));
  uint32_t w = 0x04030201;
  ZE_OK(zeCommandListAppendMemoryFill(copy, d + 4, &w, 4, 10, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(copy, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(copy, out, d, n, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, copy));
  const unsigned char want[] = {0xab, 0xab, 0xab, 0xab, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 0xab};
  cr_assert_eq(memcmp(out, want, sizeof(want)), 0);
  for (size_t i = sizeof(want); i < n; i++) cr_assert_eq(out[i], 0xab, "byte %zu", i);
  /* a copy engine fills with at most 4-byte patterns; compute engines take 128 */
  uint64_t q = 0x0807060504030201ull;
  cr_assert_eq(zeCommandListAppendMemoryFill(copy, d, &q, 8, 16, NULL, 0, NULL), ZE_RESULT_ERROR_INVALID_SIZE);
  cr_assert_eq(fakeze_spec_violations(), 1);
  ZE_OK(zeCommandListAppendMemoryFill(comp, d, &q, 8, 16, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(comp, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(comp, out, d, 16, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, comp));
  cr_assert_eq(memcmp(out, &q, 8), 0);
  cr_assert_eq(memcmp(out + 8, &q, 8), 0);
  ZE_OK(zeCommandListDestroy(copy));
  ZE_OK(zeCommandListDestroy(comp));
  ZE_OK(zeMemFree(f.ctx, d));
  ZE_OK(zeMemFree(f.ctx, out));
  for (int i = 0; i < 8; i++) zeEventDestroy(f.ev[i]);
  zeEventPoolDestroy(f.pool);
  zeContextDestroy(f.ctx);
}

/* A chain of dependent copies d[0] -> d[1] -> ... -> d[K-1] with random delays. */
static void run_chain(fx_t *f, int barriers) {
  enum { K = 24, N = 4096 };
  unsigned char *src = fx_host_alloc(f, N), *out = fx_host_alloc(f, N);
  fill_pattern(src, N, 11);
  memset(out, 0, N);
  void *d[K];
  for (int i = 0; i < K; i++) d[i] = fx_dev_alloc(f, 0, N);
  ze_command_list_handle_t l = fx_list(f, 0, 1, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l, d[0], src, N, NULL, 0, NULL));
  for (int i = 1; i < K; i++) {
    if (barriers) ZE_OK(zeCommandListAppendBarrier(l, NULL, 0, NULL));
    ZE_OK(zeCommandListAppendMemoryCopy(l, d[i], d[i - 1], N, NULL, 0, NULL));
  }
  if (barriers) ZE_OK(zeCommandListAppendBarrier(l, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(l, out, d[K - 1], N, NULL, 0, NULL));
  ZE_OK(fx_sync(f, l));
  cr_assert_eq(memcmp(out, src, N), 0, "the chain lost its data");
  ZE_OK(zeCommandListDestroy(l));
  for (int i = 0; i < K; i++) ZE_OK(zeMemFree(f->ctx, d[i]));
  ZE_OK(zeMemFree(f->ctx, src));
  ZE_OK(zeMemFree(f->ctx, out));
}

Test(fakeze, in_order_with_delays) {
  setenv("FAKEGPU_DELAY_US", "300", 1);
  setenv("FAKEGPU_SEED", "7", 1);
  fx_t f;
  fx_init(&f);
  run_chain(&f, 0); /* default: each command executes after the one before */
  fx_fini(&f);
}

Test(fakeze, reorder_mode_keeps_barrier_order) {
  setenv("FAKEGPU_DELAY_US", "100", 1);
  setenv("FAKEGPU_ZE_REORDER", "1", 1);
  fx_t f;
  fx_init(&f);
  run_chain(&f, 1);
  fx_fini(&f);
}

Test(fakeze, reorder_mode_reorders_without_barriers) {
  /* Sixteen queued copies into one host byte, no barrier between them: the last one
   * appended must not always be the last one run. Appends are queued while the worker
   * is held in a wait on an event, so the whole batch is there when it resumes. */
  setenv("FAKEGPU_ZE_REORDER", "1", 1);
  fx_t f;
  fx_init(&f);
  unsigned char *vals = fx_host_alloc(&f, 16), *out = fx_host_alloc(&f, 1);
  for (int i = 0; i < 16; i++) vals[i] = (unsigned char)i;
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  int not_last = 0;
  for (int round = 0; round < 20 && !not_last; round++) {
    ZE_OK(zeCommandListAppendWaitOnEvents(l, 1, &f.ev[0]));
    for (int i = 0; i < 16; i++) ZE_OK(zeCommandListAppendMemoryCopy(l, out, vals + i, 1, NULL, 0, NULL));
    ZE_OK(zeEventHostSignal(f.ev[0]));
    ZE_OK(fx_sync(&f, l));
    ZE_OK(zeEventHostReset(f.ev[0]));
    not_last = *out != 15;
  }
  cr_assert(not_last, "FAKEGPU_ZE_REORDER=1 never reordered unordered copies");
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, vals));
  ZE_OK(zeMemFree(f.ctx, out));
  fx_fini(&f);
}

Test(fakeze, commands_run_asynchronously) {
  fx_t f;
  fx_init(&f);
  unsigned char *h = fx_host_alloc(&f, 64), *o = fx_host_alloc(&f, 64);
  memset(h, 5, 64);
  memset(o, 0, 64);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  /* The list is held on an event only the host signals: appends behind it must still
   * return (a blocking append would hang here until the test times out). */
  ZE_OK(zeCommandListAppendWaitOnEvents(l, 1, &f.ev[0]));
  for (int i = 0; i < 10; i++) ZE_OK(zeCommandListAppendMemoryCopy(l, o, h, 64, NULL, 0, NULL));
  usleep(10000);
  cr_assert_eq(o[0], 0, "a copy ran before the list's wait was satisfied");
  ZE_OK(zeEventHostSignal(f.ev[0]));
  ZE_OK(fx_sync(&f, l));
  cr_assert_eq(o[63], 5);
  ZE_OK(zeCommandListDestroy(l));
  /* a synchronous-mode list completes each command before the append returns */
  l = fx_list(&f, 0, 1, 1);
  memset(h, 9, 64);
  ZE_OK(zeCommandListAppendMemoryCopy(l, o, h, 64, NULL, 0, NULL));
  cr_assert_eq(o[0], 9);
  cr_assert_eq(o[63], 9);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, h));
  ZE_OK(zeMemFree(f.ctx, o));
  fx_fini(&f);
}

/* ------------------------------------------------------------------ events */

Test(fakeze, event_host_semantics) {
  fx_t f;
  fx_init(&f);
  ze_event_handle_t e = f.ev[0];
  cr_assert_eq(zeEventQueryStatus(e), ZE_RESULT_NOT_READY);
  cr_assert_eq(zeEventHostSynchronize(e, 0), ZE_RESULT_NOT_READY);
  double t0 = now_ms();
  cr_assert_eq(zeEventHostSynchronize(e, 30ull * 1000 * 1000), ZE_RESULT_NOT_READY);
  cr_assert_geq(now_ms() - t0, 29.0);
  ZE_OK(zeEventHostSignal(e));
  ZE_OK(zeEventQueryStatus(e));
  ZE_OK(zeEventHostSynchronize(e, 0));
  ZE_OK(zeEventHostSignal(e)); /* signalling twice is allowed */
  ZE_OK(zeEventHostReset(e));
  cr_assert_eq(zeEventQueryStatus(e), ZE_RESULT_NOT_READY);
  /* same index twice: refused */
  ze_event_desc_t ed = {ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, 0, 0, 0};
  ze_event_handle_t dup = NULL;
  cr_assert_eq(zeEventCreate(f.pool, &ed, &dup), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  ed.index = 8;
  cr_assert_eq(zeEventCreate(f.pool, &ed, &dup), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(fakeze_spec_violations(), 1);
  for (int i = 0; i < 8; i++) ZE_OK(zeEventDestroy(f.ev[i]));
  ZE_OK(zeEventPoolDestroy(f.pool));
  ZE_OK(zeContextDestroy(f.ctx));
}

Test(fakeze, device_waits_on_events) {
  fx_t f;
  fx_init(&f);
  unsigned char *h = fx_host_alloc(&f, 16), *o = fx_host_alloc(&f, 16);
  memset(h, 7, 16);
  memset(o, 0, 16);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  /* the copy waits for ev0, which only the host signals */
  ZE_OK(zeCommandListAppendMemoryCopy(l, o, h, 16, f.ev[1], 1, &f.ev[0]));
  ZE_OK(zeCommandListAppendBarrier(l, f.ev[2], 0, NULL));
  usleep(30000);
  cr_assert_eq(zeEventQueryStatus(f.ev[1]), ZE_RESULT_NOT_READY);
  cr_assert_eq(zeEventQueryStatus(f.ev[2]), ZE_RESULT_NOT_READY);
  cr_assert_eq(o[0], 0, "the copy ran before its wait event was signalled");
  ZE_OK(zeEventHostSignal(f.ev[0]));
  ZE_OK(zeEventHostSynchronize(f.ev[2], UINT64_MAX));
  ZE_OK(zeEventQueryStatus(f.ev[1]));
  cr_assert_eq(o[15], 7);
  /* wait-on-events, signal-event and event-reset commands */
  ZE_OK(zeEventHostReset(f.ev[0]));
  ZE_OK(zeCommandListAppendWaitOnEvents(l, 1, &f.ev[0]));
  ZE_OK(zeCommandListAppendSignalEvent(l, f.ev[3]));
  ZE_OK(zeCommandListAppendEventReset(l, f.ev[1]));
  ZE_OK(zeCommandListAppendBarrier(l, f.ev[4], 0, NULL));
  usleep(20000);
  cr_assert_eq(zeEventQueryStatus(f.ev[3]), ZE_RESULT_NOT_READY);
  ZE_OK(zeEventQueryStatus(f.ev[1]));
  ZE_OK(zeEventHostSignal(f.ev[0]));
  ZE_OK(zeEventHostSynchronize(f.ev[4], UINT64_MAX));
  ZE_OK(zeEventQueryStatus(f.ev[3]));
  cr_assert_eq(zeEventQueryStatus(f.ev[1]), ZE_RESULT_NOT_READY);
  /* appending with a NULL wait list but a count */
  cr_assert_eq(zeCommandListAppendBarrier(l, NULL, 1, NULL), ZE_RESULT_ERROR_INVALID_SIZE);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, h));
  ZE_OK(zeMemFree(f.ctx, o));
  fx_fini(&f);
}

Test(fakeze, destroy_list_waiting_on_event_drops_commands) {
  fx_t f;
  fx_init(&f);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendWaitOnEvents(l, 1, &f.ev[0]));
  ZE_OK(zeCommandListAppendBarrier(l, f.ev[1], 0, NULL));
  usleep(10000);
  ZE_OK(zeCommandListDestroy(l)); /* must not hang */
  cr_assert_eq(fakeze_dropped_commands(), 2);
  cr_assert_eq(zeEventQueryStatus(f.ev[1]), ZE_RESULT_NOT_READY);
  cr_assert_eq(fakeze_live_command_lists(), 0);
  fx_fini(&f);
}

/* -------------------------------------------------------------- lost device */

Test(fakeze, copy_without_peer_access_loses_the_device) {
  setenv("FAKEGPU_P2P", "no", 1);
  fx_t f;
  fx_init(&f);
  ze_bool_t can = 1;
  ZE_OK(zeDeviceCanAccessPeer(f.dev[0], f.dev[1], &can));
  cr_assert_eq(can, 0);
  void *d0 = fx_dev_alloc(&f, 0, 4096), *d1 = fx_dev_alloc(&f, 1, 4096);
  ze_command_list_handle_t l1 = fx_list(&f, 1, 1, 0), l0 = fx_list(&f, 0, 1, 0);
  /* held on ev2 so that both commands are queued before the fault happens */
  ZE_OK(zeCommandListAppendWaitOnEvents(l1, 1, &f.ev[2]));
  ZE_OK(zeCommandListAppendMemoryCopy(l1, d1, d0, 4096, f.ev[0], 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(l1, f.ev[1], 0, NULL)); /* queued behind the fault */
  ZE_OK(zeEventHostSignal(f.ev[2]));
  cr_assert_eq(zeEventHostSynchronize(f.ev[0], UINT64_MAX), ZE_RESULT_ERROR_DEVICE_LOST);
  cr_assert_eq(zeEventHostSynchronize(f.ev[1], UINT64_MAX), ZE_RESULT_ERROR_DEVICE_LOST);
  cr_assert_eq(zeEventQueryStatus(f.ev[1]), ZE_RESULT_ERROR_DEVICE_LOST);
  cr_assert_eq(zeCommandListAppendBarrier(l1, NULL, 0, NULL), ZE_RESULT_ERROR_DEVICE_LOST);
  cr_assert_eq(fakeze_device_lost(1), 1);
  cr_assert_eq(fakeze_device_lost(0), 0);
  /* device 0 is fine: its own memory and host memory */
  unsigned char *h = fx_host_alloc(&f, 16);
  ZE_OK(zeCommandListAppendMemoryCopy(l0, h, d0, 16, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l0));
  ZE_OK(zeCommandListDestroy(l0));
  ZE_OK(zeCommandListDestroy(l1));
  ZE_OK(zeMemFree(f.ctx, d0));
  ZE_OK(zeMemFree(f.ctx, d1));
  ZE_OK(zeMemFree(f.ctx, h));
  fx_fini(&f);
}

Test(fakeze, copy_past_the_end_loses_the_device) {
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 0, 4096);
  unsigned char *h = fx_host_alloc(&f, 8192);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l, h, d + 100, 4000, NULL, 0, NULL)); /* 100 too many */
  cr_assert_eq(fx_sync(&f, l), ZE_RESULT_ERROR_DEVICE_LOST);
  cr_assert_eq(fakeze_device_lost(0), 1);
  ze_device_mem_alloc_desc_t dd = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  void *x = NULL;
  cr_assert_eq(zeMemAllocDevice(f.ctx, &dd, 64, 0, f.dev[0], &x), ZE_RESULT_ERROR_DEVICE_LOST);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, d));
  ZE_OK(zeMemFree(f.ctx, h));
  fx_fini(&f);
}

Test(fakeze, copy_from_freed_memory_loses_the_device) {
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 0, 4096);
  unsigned char *h = fx_host_alloc(&f, 4096);
  ZE_OK(zeMemFree(f.ctx, d));
  void *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(gone, MAP_FAILED);
  munmap(gone, 4096);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l, h, gone, 4096, NULL, 0, NULL));
  cr_assert_eq(fx_sync(&f, l), ZE_RESULT_ERROR_DEVICE_LOST);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, h));
  fx_fini(&f);
}

Test(fakeze, free_under_a_queued_copy_is_reported_and_faults) {
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 0, 4096), *other = fx_dev_alloc(&f, 0, 4096);
  unsigned char *h = fx_host_alloc(&f, 4096);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendWaitOnEvents(l, 1, &f.ev[0])); /* hold the list */
  ZE_OK(zeCommandListAppendMemoryCopy(l, h, d + 100, 10, NULL, 0, NULL));
  ZE_OK(zeMemFree(f.ctx, other)); /* untouched by the queued copy: fine */
  cr_assert_eq(fakeze_spec_violations(), 0);
  ZE_OK(zeMemFree(f.ctx, d));
  cr_assert_eq(fakeze_spec_violations(), 1, "freeing memory a queued copy reads was not reported");
  ZE_OK(zeEventHostSignal(f.ev[0]));
  cr_assert_eq(fx_sync(&f, l), ZE_RESULT_ERROR_DEVICE_LOST); /* the copy reads freed memory */
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, h));
  for (int i = 0; i < 8; i++) zeEventDestroy(f.ev[i]);
  zeEventPoolDestroy(f.pool);
  zeContextDestroy(f.ctx);
}

Test(fakeze, pageable_memory_can_be_refused) {
  setenv("FAKEGPU_ZE_PAGEABLE", "no", 1);
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 0, 64);
  char stackbuf[64] = {0};
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l, d, stackbuf, 64, NULL, 0, NULL));
  cr_assert_eq(fx_sync(&f, l), ZE_RESULT_ERROR_DEVICE_LOST);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, d));
  fx_fini(&f);
}

/* ---------------------------------------------------------------------- IPC */

static void send_fd(int sock, int fd, const void *data, size_t len) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  struct iovec io = {(void *)data, len};
  struct msghdr m = {0};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof(cbuf);
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  cr_assert_eq(sendmsg(sock, &m, 0), (ssize_t)len);
}

static int recv_fd(int sock, void *data, size_t len) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  struct iovec io = {data, len};
  struct msghdr m = {0};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof(cbuf);
  if (recvmsg(sock, &m, 0) != (ssize_t)len) return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

/* The importer: a separate process with its own driver state, as the ze backend's
 * process ranks are. Exit status 0 = every check passed. */
static int ipc_child(int sock) {
  /* Shift descriptor numbers so the received one differs from the sender's. */
  int pad[5];
  for (int i = 0; i < 5; i++) pad[i] = dup(0);
  fx_t f;
  fx_init(&f);
  ze_ipc_mem_handle_t h;
  int fd = recv_fd(sock, h.data, sizeof(h.data));
  if (fd < 0) return 10;
  int sender_fd;
  memcpy(&sender_fd, h.data, sizeof(int));
  if (sender_fd == fd) return 11;
  void *p = NULL;
  /* The handle as sent names the sender's descriptor number: not valid here. */
  if (fcntl(sender_fd, F_GETFD) < 0 &&
      zeMemOpenIpcHandle(f.ctx, f.dev[1], h, 0, &p) != ZE_RESULT_ERROR_INVALID_ARGUMENT)
    return 12;
  memcpy(h.data, &fd, sizeof(int)); /* as the backend does */
  if (zeMemOpenIpcHandle(f.ctx, f.dev[1], h, 0, &p) != ZE_RESULT_SUCCESS) return 13;
  close(fd); /* the mapping does not need our descriptor */
  if (fakeze_open_ipc() != 1 || fakeze_live_allocations() != 0) return 14;
  ze_memory_allocation_properties_t mp = {.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES};
  ze_device_handle_t dh = NULL;
  if (zeMemGetAllocProperties(f.ctx, p, &mp, &dh) || mp.type != ZE_MEMORY_TYPE_DEVICE || dh != f.dev[1])
    return 15;
  unsigned char *buf = fx_host_alloc(&f, 65536), want[65536];
  fill_pattern(want, sizeof(want), 5);
  ze_command_list_handle_t l = fx_list(&f, 1, 1, 0);
  zeCommandListAppendMemoryCopy(l, buf, p, 65536, NULL, 0, NULL);
  if (fx_sync(&f, l) != ZE_RESULT_SUCCESS) return 16;
  if (memcmp(buf, want, sizeof(want)) != 0) return 17;
  /* write back through the import: the exporter sees it */
  memset(buf, 0x5c, 65536);
  zeCommandListAppendMemoryCopy(l, p, buf, 65536, NULL, 0, NULL);
  if (fx_sync(&f, l) != ZE_RESULT_SUCCESS) return 18;
  zeCommandListDestroy(l);
  if (zeMemCloseIpcHandle(f.ctx, p) != ZE_RESULT_SUCCESS) return 19;
  if (fakeze_open_ipc() != 0) return 20;
  zeMemFree(f.ctx, buf);
  char ok = 1;
  if (write(sock, &ok, 1) != 1) return 21;
  for (int i = 0; i < 5; i++) close(pad[i]);
  return 0;
}

Test(fakeze, ipc_across_processes) {
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  pid_t pid = fork(); /* before any driver state exists in this process */
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(sv[0]);
    _exit(ipc_child(sv[1]));
  }
  close(sv[1]);
  fx_t f;
  fx_init(&f);
  unsigned char src[65536], *out;
  fill_pattern(src, sizeof(src), 5);
  void *d = fx_dev_alloc(&f, 0, sizeof(src));
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l, d, src, sizeof(src), NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l));
  ze_ipc_mem_handle_t h;
  cr_assert_eq(zeMemGetIpcHandle(f.ctx, (char *)d + 64, &h), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(fakeze_spec_violations(), 1);
  ZE_OK(zeMemGetIpcHandle(f.ctx, d, &h));
  int fd;
  memcpy(&fd, h.data, sizeof(int)); /* the descriptor is the first int */
  cr_assert_geq(fd, 0);
  send_fd(sv[0], fd, h.data, sizeof(h.data));
  char ok = 0;
  cr_assert_eq(read(sv[0], &ok, 1), 1, "the importer failed");
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "importer check %d failed", WEXITSTATUS(st));
  out = fx_host_alloc(&f, sizeof(src));
  ZE_OK(zeCommandListAppendMemoryCopy(l, out, d, sizeof(src), NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l));
  for (size_t i = 0; i < sizeof(src); i++) cr_assert_eq(out[i], 0x5c, "byte %zu", i);
#ifdef FAKEZE_NEWER_LOADER
  cr_assert_eq(fakeze_ipc_handles_out(), 1);
  ZE_OK(zeMemPutIpcHandle(f.ctx, h));
#endif
  cr_assert_eq(fakeze_ipc_handles_out(), 0);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, d));
  ZE_OK(zeMemFree(f.ctx, out));
  for (int i = 0; i < 8; i++) zeEventDestroy(f.ev[i]);
  zeEventPoolDestroy(f.pool);
  zeContextDestroy(f.ctx);
}

Test(fakeze, ipc_in_one_process) {
  fx_t f;
  fx_init(&f);
  void *d = fx_dev_alloc(&f, 0, 4096);
  ze_ipc_mem_handle_t h;
  ZE_OK(zeMemGetIpcHandle(f.ctx, d, &h));
  void *a = NULL, *b = NULL;
  ZE_OK(zeMemOpenIpcHandle(f.ctx, f.dev[0], h, 0, &a));
  ZE_OK(zeMemOpenIpcHandle(f.ctx, f.dev[0], h, 0, &b));
  cr_assert_neq(a, b, "each open returns its own pointer");
  cr_assert_neq(a, d);
  cr_assert_eq(fakeze_open_ipc(), 2);
  cr_assert_eq(zeMemFree(f.ctx, a), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(fakeze_spec_violations(), 1);
  touch_in_child(a, 1); /* the import is device memory too */
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  uint32_t v = 0xdeadbeef, o = 0;
  ZE_OK(zeCommandListAppendMemoryCopy(l, d, &v, 4, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(l, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(l, &o, b, 4, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l));
  cr_assert_eq(o, 0xdeadbeef);
  ZE_OK(zeMemCloseIpcHandle(f.ctx, a));
  ZE_OK(zeMemCloseIpcHandle(f.ctx, b));
  cr_assert_eq(zeMemCloseIpcHandle(f.ctx, b), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(fakeze_open_ipc(), 0);
#ifdef FAKEZE_NEWER_LOADER
  ZE_OK(zeMemPutIpcHandle(f.ctx, h));
#endif
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, d));
  for (int i = 0; i < 8; i++) zeEventDestroy(f.ev[i]);
  zeEventPoolDestroy(f.pool);
  zeContextDestroy(f.ctx);
}

/* ---------------------------------------------- which loader generation */

#ifndef FAKEZE_NEWER_LOADER
Test(fakeze, exports_the_1_8_12_surface_only) {
  /* The plugin looks these up at run time; the 1.8.12 loader has none of them. */
  cr_assert_eq(fakeze_newer_loader(), 0);
  cr_assert_null(dlsym(RTLD_DEFAULT, "zeMemPutIpcHandle"));
  cr_assert_null(dlsym(RTLD_DEFAULT, "zeMemGetFileDescriptorFromIpcHandleExp"));
  cr_assert_null(dlsym(RTLD_DEFAULT, "zeMemGetIpcHandleFromFileDescriptorExp"));
  cr_assert_not_null(dlsym(RTLD_DEFAULT, "zeMemGetIpcHandle"));
}
#else
Test(fakeze, newer_loader_handles_own_descriptors) {
  cr_assert_eq(fakeze_newer_loader(), 1);
  fx_t f;
  fx_init(&f);
  void *d = fx_dev_alloc(&f, 0, 4096);
  ze_ipc_mem_handle_t a, b;
  ZE_OK(zeMemGetIpcHandle(f.ctx, d, &a));
  ZE_OK(zeMemGetIpcHandle(f.ctx, d, &b));
  cr_assert_eq(fakeze_ipc_handles_out(), 2);
  uint64_t fa = 0, fb = 0;
  ZE_OK(zeMemGetFileDescriptorFromIpcHandleExp(f.ctx, a, &fa));
  ZE_OK(zeMemGetFileDescriptorFromIpcHandleExp(f.ctx, b, &fb));
  cr_assert_neq(fa, fb, "each handle holds a descriptor of its own");
  cr_assert_eq(memcmp(a.data, &(int){(int)fa}, sizeof(int)), 0);
  /* a handle rebuilt from the bare descriptor opens the same memory */
  ze_ipc_mem_handle_t c;
  ZE_OK(zeMemGetIpcHandleFromFileDescriptorExp(f.ctx, fb, &c));
  void *p = NULL;
  ZE_OK(zeMemOpenIpcHandle(f.ctx, f.dev[0], c, 0, &p));
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  uint64_t v = 0x1122334455667788ull, o = 0;
  ZE_OK(zeCommandListAppendMemoryCopy(l, d, &v, 8, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(l, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(l, &o, p, 8, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l));
  cr_assert_eq(o, v);
  ZE_OK(zeMemCloseIpcHandle(f.ctx, p));
  /* put closes the handle's descriptor; a second put of it is refused */
  ZE_OK(zeMemPutIpcHandle(f.ctx, a));
  cr_assert_eq(fcntl((int)fa, F_GETFD), -1);
  cr_assert_eq(zeMemPutIpcHandle(f.ctx, a), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(fakeze_spec_violations(), 1);
  ZE_OK(zeMemPutIpcHandle(f.ctx, b));
  cr_assert_eq(fakeze_ipc_handles_out(), 0);
  ze_ipc_mem_handle_t bad;
  cr_assert_eq(zeMemGetIpcHandleFromFileDescriptorExp(f.ctx, 1000000, &bad),
               ZE_RESULT_ERROR_INVALID_ARGUMENT);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, d));
  for (int i = 0; i < 8; i++) zeEventDestroy(f.ev[i]);
  zeEventPoolDestroy(f.pool);
  zeContextDestroy(f.ctx);
}
#endif
