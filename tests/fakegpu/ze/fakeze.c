/* Fake Level Zero loader (libze_loader.so.1) for running the ze backend without a GPU.
 *
 * One driver with FAKEGPU_GPUS root devices (optionally sub-devices). Device memory is
 * fakemem (the CPU alias is PROT_NONE); host and shared allocations are ordinary memory.
 * Immediate command lists execute on one worker thread each, asynchronously to the host;
 * events live in pools and follow the specification's signal/wait/reset rules. A command
 * that touches memory its device cannot reach (another device's memory without peer
 * access, past the end of an allocation, freed memory) loses the device, as a GPU page
 * fault would: see README.md for what is faithful and what is not.
 *
 * Written from the Level Zero 1.8.12 headers (Debian libze-dev) only. */
/* This file: the loader's state and setup, driver, devices, contexts and the
 * introspection of fakeze.h. */
#define _GNU_SOURCE
#define ZE_APIEXPORT __attribute__((visibility("default")))
#include <level_zero/ze_api.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fakeze.h"
#include "fakeze_int.h"

/* ------------------------------------------------------------------- state */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
_Atomic int g_inited;
static int g_no_device;    /* FAKEGPU_ZE_NO_DEVICE=1: no driver */
static int g_init_fails;   /* FAKEGPU_ZE_NO_DEVICE=init: zeInit itself fails */
int g_ngpu, g_nsub, g_ndev;
static int g_p2p[FZ_MAX_DEV][FZ_MAX_DEV]; /* root pairs with peer access */
unsigned g_delay_us, g_seed;
int g_reorder, g_copy_group = 1, g_fabric = 1, g_pageable = 1, g_have_vm;
static struct _ze_driver_handle_t g_drv = {FZ_MAGIC_DRV};
struct _ze_device_handle_t g_dev[FZ_MAX_DEV * (1 + FZ_MAX_SUB)];
static struct _ze_fabric_edge_handle_t g_edge[FZ_MAX_DEV][FZ_MAX_DEV];

/* Event state changes: one lock and condition for all events (waits are rare and
 * short in tests; a per-event scheme buys nothing here). */
pthread_mutex_t g_ev_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_ev_cv;

_Atomic int g_live_lists, g_live_pools, g_live_events, g_live_ctx, g_dropped, g_violations;
_Atomic int g_ipc_out; /* newer loader: handles gotten and not put back */

/* Every live command list, so that zeMemFree can see commands that still use memory. */
pthread_mutex_t g_lists_mu = PTHREAD_MUTEX_INITIALIZER;
struct _ze_command_list_handle_t *g_lists;
/* Held (read) by workers while a copy or fill runs, (write) while memory is unmapped:
 * memory freed under a running command faults in that command instead of crashing
 * the process from a worker thread. */
pthread_rwlock_t g_mem_rw = PTHREAD_RWLOCK_INITIALIZER;

void fz_warn(const char *fmt, ...) {
  va_list ap;
  char buf[512];
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  fprintf(stderr, "fakeze: %s\n", buf);
}

void fz_violation(const char *fmt, ...) {
  va_list ap;
  char buf[512];
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  atomic_fetch_add(&g_violations, 1);
  fprintf(stderr, "fakeze: spec violation: %s\n", buf);
}

static long env_long(const char *name, long dflt, long lo, long hi) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  long v = strtol(s, &end, 0);
  if (*end || v < lo || v > hi) {
    fz_warn("%s=%s ignored (want %ld..%ld)", name, s, lo, hi);
    return dflt;
  }
  return v;
}

static int env_yes(const char *name, int dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  if (!strcmp(s, "1") || !strcmp(s, "yes") || !strcmp(s, "on")) return 1;
  if (!strcmp(s, "0") || !strcmp(s, "no") || !strcmp(s, "off")) return 0;
  fz_warn("%s=%s ignored (want yes or no)", name, s);
  return dflt;
}

/* FAKEGPU_P2P: yes (default), no, or root pairs "0-1,2-3". */
static void parse_p2p(void) {
  const char *s = getenv("FAKEGPU_P2P");
  int all = 1;
  if (s && (!strcmp(s, "no") || !strcmp(s, "0") || !strcmp(s, "off"))) all = 0;
  for (int a = 0; a < FZ_MAX_DEV; a++)
    for (int b = 0; b < FZ_MAX_DEV; b++) g_p2p[a][b] = a == b || all;
  if (!s || !strchr(s, '-')) return;
  for (int a = 0; a < FZ_MAX_DEV; a++)
    for (int b = 0; b < FZ_MAX_DEV; b++) g_p2p[a][b] = a == b;
  const char *p = s;
  while (*p) {
    char *end;
    long a = strtol(p, &end, 10), b;
    if (end == p || *end != '-') break;
    p = end + 1;
    b = strtol(p, &end, 10);
    if (end == p) break;
    if (a >= 0 && b >= 0 && a < FZ_MAX_DEV && b < FZ_MAX_DEV) g_p2p[a][b] = g_p2p[b][a] = 1;
    p = end;
    if (*p == ',') p++;
  }
}

static void fz_setup(void) {
  const char *nd = getenv("FAKEGPU_ZE_NO_DEVICE");
  g_no_device = nd && (!strcmp(nd, "1") || !strcmp(nd, "yes"));
  g_init_fails = nd && !strcmp(nd, "init");
  g_ngpu = (int)env_long("FAKEGPU_GPUS", 4, 1, FZ_MAX_DEV);
  g_nsub = (int)env_long("FAKEGPU_ZE_SUBDEVICES", 0, 0, FZ_MAX_SUB);
  g_delay_us = (unsigned)env_long("FAKEGPU_DELAY_US", 0, 0, 1000000);
  g_seed = (unsigned)env_long("FAKEGPU_SEED", 1, 0, 0x7fffffff);
  g_reorder = env_yes("FAKEGPU_ZE_REORDER", 0);
  g_copy_group = env_yes("FAKEGPU_ZE_COPY_ENGINE", 1);
  g_fabric = env_yes("FAKEGPU_ZE_FABRIC", 1);
  g_pageable = env_yes("FAKEGPU_ZE_PAGEABLE", 1);
  parse_p2p();
  g_ndev = g_ngpu * (1 + g_nsub);
  for (int i = 0; i < g_ndev; i++) {
    struct _ze_device_handle_t *d = &g_dev[i];
    d->magic = FZ_MAGIC_DEV;
    d->idx = i;
    d->root = i < g_ngpu ? i : (i - g_ngpu) / g_nsub;
    d->sub = i < g_ngpu ? -1 : (i - g_ngpu) % g_nsub;
    d->vertex.magic = FZ_MAGIC_VERTEX;
    d->vertex.dev = i;
  }
  for (int a = 0; a < g_ngpu; a++)
    for (int b = 0; b < g_ngpu; b++) {
      g_edge[a][b].magic = FZ_MAGIC_EDGE;
      g_edge[a][b].a = a < b ? a : b;
      g_edge[a][b].b = a < b ? b : a;
    }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g_ev_cv, &ca);
  pthread_condattr_destroy(&ca);
  /* Pageable host memory is copied with process_vm_readv so a bad host pointer is a
   * device fault (EFAULT), not a crash of the fake; plain memmove where the call is
   * not allowed (seccomp). */
  char a[8] = "abcdefg", b[8] = {0};
  struct iovec l = {b, sizeof(b)}, r = {a, sizeof(a)};
  g_have_vm = process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)sizeof(a);
}

struct _ze_device_handle_t *fz_dev(ze_device_handle_t h) {
  if (!h || h->magic != FZ_MAGIC_DEV) return NULL;
  return h;
}

int fz_can_access(int a, int b) {
  if (a == b) return 1;
  int ra = g_dev[a].root, rb = g_dev[b].root;
  return ra == rb || g_p2p[ra][rb];
}

/* The count/array protocol of every zeXxxGet: *pCount 0 (or no array) asks for the
 * total; otherwise fill min(*pCount, total) and report how many were written. */
static void fz_count(uint32_t *pCount, uint32_t total, int has_array, uint32_t *fill) {
  if (!has_array || *pCount == 0) {
    *pCount = total;
    *fill = 0;
    return;
  }
  if (*pCount > total) *pCount = total;
  *fill = *pCount;
}

/* ------------------------------------------------------------ driver/device */

FZ_EXPORT ze_result_t zeInit(ze_init_flags_t flags) {
  pthread_once(&g_once, fz_setup);
  if (flags & ~(ze_init_flags_t)(ZE_INIT_FLAG_GPU_ONLY | ZE_INIT_FLAG_VPU_ONLY))
    return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  /* No VPU here: asking for VPUs only finds no driver, as the loader reports it. */
  if (g_init_fails || flags == ZE_INIT_FLAG_VPU_ONLY) return ZE_RESULT_ERROR_UNINITIALIZED;
  atomic_store(&g_inited, 1);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeDriverGet(uint32_t *pCount, ze_driver_handle_t *phDrivers) {
  FZ_CHECK_INIT();
  if (!pCount) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  uint32_t fill;
  fz_count(pCount, g_no_device ? 0 : 1, phDrivers != NULL, &fill);
  if (fill) phDrivers[0] = &g_drv;
  return ZE_RESULT_SUCCESS;
}

static int fz_drv_ok(ze_driver_handle_t h) { return h && h->magic == FZ_MAGIC_DRV; }

FZ_EXPORT ze_result_t zeDriverGetApiVersion(ze_driver_handle_t hDriver, ze_api_version_t *version) {
  FZ_CHECK_INIT();
  if (!fz_drv_ok(hDriver)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!version) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *version = ZE_API_VERSION_CURRENT;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeDriverGetProperties(ze_driver_handle_t hDriver,
                                            ze_driver_properties_t *p) {
  FZ_CHECK_INIT();
  if (!fz_drv_ok(hDriver)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  memset(p->uuid.id, 0, sizeof(p->uuid.id));
  memcpy(p->uuid.id, "unilink-fakeze", 14);
  p->driverVersion = 1;
  return ZE_RESULT_SUCCESS;
}

static const char *const g_ext_names[] = {"ZE_experimental_fabric",
                                          "ZE_experimental_bandwidth_properties"};

FZ_EXPORT ze_result_t zeDriverGetExtensionProperties(ze_driver_handle_t hDriver, uint32_t *pCount,
                                                     ze_driver_extension_properties_t *pExt) {
  FZ_CHECK_INIT();
  if (!fz_drv_ok(hDriver)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!pCount) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  uint32_t fill, total = g_fabric ? 2 : 0;
  fz_count(pCount, total, pExt != NULL, &fill);
  for (uint32_t i = 0; i < fill; i++) {
    memset(&pExt[i], 0, sizeof(pExt[i]));
    snprintf(pExt[i].name, sizeof(pExt[i].name), "%s", g_ext_names[i]);
    pExt[i].version = ZE_MAKE_VERSION(1, 0);
  }
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeDriverGetExtensionFunctionAddress(ze_driver_handle_t hDriver,
                                                          const char *name, void **ppFunctionAddress) {
  FZ_CHECK_INIT();
  if (!fz_drv_ok(hDriver)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!name || !ppFunctionAddress) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  /* The fabric/bandwidth extensions are plain exported entry points; no extension here
   * is reached through this call (zeMemGet*FileDescriptor*Exp are not in 1.8.12). */
  *ppFunctionAddress = NULL;
  return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
}

FZ_EXPORT ze_result_t zeContextCreate(ze_driver_handle_t hDriver, const ze_context_desc_t *desc,
                                      ze_context_handle_t *phContext) {
  FZ_CHECK_INIT();
  if (!fz_drv_ok(hDriver)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!desc || !phContext) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->flags > 0x1) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  ze_context_handle_t c = calloc(1, sizeof(*c));
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  c->magic = FZ_MAGIC_CTX;
  atomic_fetch_add(&g_live_ctx, 1);
  *phContext = c;
  return ZE_RESULT_SUCCESS;
}

int fz_ctx_ok(ze_context_handle_t c) { return c && c->magic == FZ_MAGIC_CTX; }

FZ_EXPORT ze_result_t zeContextDestroy(ze_context_handle_t hContext) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  hContext->magic = 0;
  free(hContext);
  atomic_fetch_sub(&g_live_ctx, 1);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeDeviceGet(ze_driver_handle_t hDriver, uint32_t *pCount,
                                  ze_device_handle_t *phDevices) {
  FZ_CHECK_INIT();
  if (!fz_drv_ok(hDriver)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!pCount) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  uint32_t fill;
  fz_count(pCount, (uint32_t)g_ngpu, phDevices != NULL, &fill);
  for (uint32_t i = 0; i < fill; i++) phDevices[i] = &g_dev[i];
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeDeviceGetSubDevices(ze_device_handle_t hDevice, uint32_t *pCount,
                                            ze_device_handle_t *phSubdevices) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *d = fz_dev(hDevice);
  if (!d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!pCount) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  uint32_t fill;
  fz_count(pCount, d->sub < 0 ? (uint32_t)g_nsub : 0, phSubdevices != NULL, &fill);
  for (uint32_t i = 0; i < fill; i++) phSubdevices[i] = &g_dev[g_ngpu + d->idx * g_nsub + (int)i];
  return ZE_RESULT_SUCCESS;
}

static void fz_uuid(const struct _ze_device_handle_t *d, uint8_t *id) {
  /* Stable across processes: ranks of different processes match devices by uuid. */
  memset(id, 0, ZE_MAX_DEVICE_UUID_SIZE);
  memcpy(id, "fakeXe", 6);
  id[8] = (uint8_t)d->root;
  id[9] = (uint8_t)(d->sub + 1);
}

FZ_EXPORT ze_result_t zeDeviceGetProperties(ze_device_handle_t hDevice,
                                            ze_device_properties_t *p) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *d = fz_dev(hDevice);
  if (!d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  p->type = ZE_DEVICE_TYPE_GPU;
  p->vendorId = 0x8086;
  p->deviceId = 0x0bd5;
  p->flags = d->sub >= 0 ? ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE : 0;
  p->subdeviceId = d->sub >= 0 ? (uint32_t)d->sub : 0;
  p->coreClockRate = 1600;
  p->maxMemAllocSize = (uint64_t)1 << 34;
  p->maxHardwareContexts = 64;
  p->maxCommandQueuePriority = 0;
  p->numThreadsPerEU = 8;
  p->physicalEUSimdWidth = 16;
  p->numEUsPerSubslice = 8;
  p->numSubslicesPerSlice = 64;
  p->numSlices = 1;
  p->timerResolution = p->stype == ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2 ? 1000000000ull : 1;
  p->timestampValidBits = 64;
  p->kernelTimestampValidBits = 32;
  fz_uuid(d, p->uuid.id);
  if (d->sub >= 0)
    snprintf(p->name, sizeof(p->name), "unilink fake Xe GPU (tile %d)", d->sub);
  else
    snprintf(p->name, sizeof(p->name), "unilink fake Xe GPU");
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeDevicePciGetPropertiesExt(ze_device_handle_t hDevice,
                                                  ze_pci_ext_properties_t *p) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *d = fz_dev(hDevice);
  if (!d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  p->address.domain = 0;
  p->address.bus = 0x18 + 0x10 * (uint32_t)d->root;
  p->address.device = 0;
  p->address.function = 0;
  p->maxSpeed.genVersion = 5;
  p->maxSpeed.width = 16;
  p->maxSpeed.maxBandwidth = 63000000000ll;
  return ZE_RESULT_SUCCESS;
}

/* Group 0: compute (can copy); group 1: copy only (FAKEGPU_ZE_COPY_ENGINE=0 drops it). */
uint32_t fz_ngroups(void) { return g_copy_group ? 2 : 1; }

void fz_group(uint32_t ordinal, ze_command_queue_group_properties_t *g) {
  if (ordinal == 0) {
    g->flags = ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE | ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY |
               ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COOPERATIVE_KERNELS |
               ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_METRICS;
    g->maxMemoryFillPatternSize = FZ_MAX_FILL;
    g->numQueues = 1;
  } else {
    g->flags = ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
    g->maxMemoryFillPatternSize = 4;
    g->numQueues = 2;
  }
}

FZ_EXPORT ze_result_t zeDeviceGetCommandQueueGroupProperties(
    ze_device_handle_t hDevice, uint32_t *pCount, ze_command_queue_group_properties_t *pProps) {
  FZ_CHECK_INIT();
  if (!fz_dev(hDevice)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!pCount) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  uint32_t fill;
  fz_count(pCount, fz_ngroups(), pProps != NULL, &fill);
  for (uint32_t i = 0; i < fill; i++) fz_group(i, &pProps[i]);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeDeviceCanAccessPeer(ze_device_handle_t hDevice, ze_device_handle_t hPeer,
                                            ze_bool_t *value) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *a = fz_dev(hDevice), *b = fz_dev(hPeer);
  if (!a || !b) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!value) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *value = fz_can_access(a->idx, b->idx) ? 1 : 0;
  return ZE_RESULT_SUCCESS;
}

/* Edges: one "fake XeLink" edge between two root devices with peer access. */
static uint32_t fz_nedges(int a, int b) {
  int ra = g_dev[a].root, rb = g_dev[b].root;
  return ra != rb && g_p2p[ra][rb] ? 1 : 0;
}

FZ_EXPORT ze_result_t zeDeviceGetP2PProperties(ze_device_handle_t hDevice, ze_device_handle_t hPeer,
                                               ze_device_p2p_properties_t *p) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *a = fz_dev(hDevice), *b = fz_dev(hPeer);
  if (!a || !b) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  int can = fz_can_access(a->idx, b->idx);
  p->flags = can ? ZE_DEVICE_P2P_PROPERTY_FLAG_ACCESS | ZE_DEVICE_P2P_PROPERTY_FLAG_ATOMICS : 0;
  for (ze_base_properties_t *x = p->pNext; x; x = x->pNext) {
    if (x->stype != ZE_STRUCTURE_TYPE_DEVICE_P2P_BANDWIDTH_EXP_PROPERTIES) continue;
    ze_device_p2p_bandwidth_exp_properties_t *bw = (ze_device_p2p_bandwidth_exp_properties_t *)x;
    uint32_t n = fz_nedges(a->idx, b->idx);
    int tiles = can && !n && a->idx != b->idx; /* sibling tiles / root and its tile */
    bw->logicalBandwidth = bw->physicalBandwidth = n ? 26 * n : tiles ? 200 : 0;
    bw->bandwidthUnit = ZE_BANDWIDTH_UNIT_BYTES_PER_NANOSEC;
    bw->logicalLatency = bw->physicalLatency = n ? 1000 : tiles ? 300 : 0;
    bw->latencyUnit = ZE_LATENCY_UNIT_NANOSEC;
  }
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeDeviceGetFabricVertexExp(ze_device_handle_t hDevice,
                                                 ze_fabric_vertex_handle_t *phVertex) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *d = fz_dev(hDevice);
  if (!d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!phVertex) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (!g_fabric) return ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX;
  *phVertex = &d->vertex;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeFabricEdgeGetExp(ze_fabric_vertex_handle_t hVertexA,
                                         ze_fabric_vertex_handle_t hVertexB, uint32_t *pCount,
                                         ze_fabric_edge_handle_t *phEdges) {
  FZ_CHECK_INIT();
  if (!hVertexA || !hVertexB || hVertexA->magic != FZ_MAGIC_VERTEX ||
      hVertexB->magic != FZ_MAGIC_VERTEX)
    return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!pCount) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  uint32_t fill;
  fz_count(pCount, fz_nedges(hVertexA->dev, hVertexB->dev), phEdges != NULL, &fill);
  if (fill) phEdges[0] = &g_edge[g_dev[hVertexA->dev].root][g_dev[hVertexB->dev].root];
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeFabricEdgeGetPropertiesExp(ze_fabric_edge_handle_t hEdge,
                                                   ze_fabric_edge_exp_properties_t *p) {
  FZ_CHECK_INIT();
  if (!hEdge || hEdge->magic != FZ_MAGIC_EDGE) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  memset(p->uuid.id, 0, sizeof(p->uuid.id));
  memcpy(p->uuid.id, "fakeEdge", 8);
  p->uuid.id[8] = (uint8_t)hEdge->a;
  p->uuid.id[9] = (uint8_t)hEdge->b;
  snprintf(p->model, sizeof(p->model), "fake XeLink");
  p->bandwidth = 26;
  p->bandwidthUnit = ZE_BANDWIDTH_UNIT_BYTES_PER_NANOSEC;
  p->latency = 1000;
  p->latencyUnit = ZE_LATENCY_UNIT_NANOSEC;
  p->duplexity = ZE_FABRIC_EDGE_EXP_DUPLEXITY_FULL_DUPLEX;
  return ZE_RESULT_SUCCESS;
}

/* ----------------------------------------------------------- introspection */

FZ_EXPORT int fakeze_ipc_handles_out(void) { return atomic_load(&g_ipc_out); }
FZ_EXPORT int fakeze_newer_loader(void) {
#ifdef FAKEZE_NEWER_LOADER
  return 1;
#else
  return 0;
#endif
}
FZ_EXPORT int fakeze_live_command_lists(void) { return atomic_load(&g_live_lists); }
FZ_EXPORT int fakeze_live_event_pools(void) { return atomic_load(&g_live_pools); }
FZ_EXPORT int fakeze_live_events(void) { return atomic_load(&g_live_events); }
FZ_EXPORT int fakeze_live_contexts(void) { return atomic_load(&g_live_ctx); }
FZ_EXPORT int fakeze_dropped_commands(void) { return atomic_load(&g_dropped); }
FZ_EXPORT int fakeze_spec_violations(void) { return atomic_load(&g_violations); }
FZ_EXPORT int fakeze_device_lost(int device) {
  if (device < 0 || device >= g_ndev) return 0;
  return atomic_load(&g_dev[device].lost);
}
