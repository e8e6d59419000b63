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
#define _GNU_SOURCE
#define ZE_APIEXPORT __attribute__((visibility("default")))
#include <level_zero/ze_api.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fakemem.h"
#include "fakeze.h"


#define FZ_EXPORT __attribute__((visibility("default")))
#define FZ_MAX_DEV 64
#define FZ_MAX_SUB 8
#define FZ_MAX_FILL 128
#define FZ_MAGIC_DRV 0x465a4452u
#define FZ_MAGIC_DEV 0x465a4456u
#define FZ_MAGIC_CTX 0x465a4358u
#define FZ_MAGIC_LIST 0x465a434cu
#define FZ_MAGIC_POOL 0x465a5050u
#define FZ_MAGIC_EVENT 0x465a4556u
#define FZ_MAGIC_VERTEX 0x465a5658u
#define FZ_MAGIC_EDGE 0x465a4547u
#define FZ_MAGIC_IPC 0x46434950u /* inside an IPC handle */

/* ------------------------------------------------------------------ objects */

struct _ze_fabric_vertex_handle_t {
  uint32_t magic;
  int dev;
};

struct _ze_fabric_edge_handle_t {
  uint32_t magic;
  int a, b; /* root device indexes, a < b */
};

struct _ze_device_handle_t {
  uint32_t magic;
  int idx;  /* flat index: roots 0..G-1, then the sub-devices */
  int root; /* root device index (itself for a root) */
  int sub;  /* -1 for a root device */
  _Atomic int lost;
  struct _ze_fabric_vertex_handle_t vertex;
};

struct _ze_driver_handle_t {
  uint32_t magic;
};

struct _ze_context_handle_t {
  uint32_t magic;
};

enum { FZ_EV_RESET = 0, FZ_EV_SIGNALED = 1, FZ_EV_LOST = 2 };

struct _ze_event_handle_t {
  uint32_t magic;
  struct _ze_event_pool_handle_t *pool;
  uint32_t index;
  int created;
  _Atomic int state;
};

struct _ze_event_pool_handle_t {
  uint32_t magic;
  ze_context_handle_t ctx;
  uint32_t count;
  ze_event_pool_flags_t flags;
  int destroyed;
  int refs; /* queued commands that name one of its events (g_ev_mu) */
  struct _ze_event_handle_t *ev;
};

enum { FZ_CMD_COPY, FZ_CMD_FILL, FZ_CMD_BARRIER, FZ_CMD_SIGNAL, FZ_CMD_WAIT, FZ_CMD_RESET };

typedef struct fz_cmd {
  int kind;
  void *dst;
  const void *src;
  size_t size;
  unsigned char pattern[FZ_MAX_FILL];
  size_t pattern_size;
  ze_event_handle_t signal; /* signalled (or reset, FZ_CMD_RESET) when done */
  uint32_t nwait;
  ze_event_handle_t *wait;
  struct fz_cmd *next;
} fz_cmd_t;

struct _ze_command_list_handle_t {
  uint32_t magic;
  ze_context_handle_t ctx;
  struct _ze_device_handle_t *dev;
  uint32_t ordinal;
  int sync;        /* ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS: appends wait for completion */
  size_t max_fill; /* maxMemoryFillPatternSize of its group */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* queue changed / commands retired */
  fz_cmd_t *head, *tail;
  uint64_t appended, retired;
  _Atomic int closing;
  _Atomic int lost;
  _Atomic int in_append; /* detects appends from two threads at once */
  unsigned rng;
  pthread_t th;
  fz_cmd_t *batch[16]; /* the commands the worker is running (under mu) */
  int nbatch;
  struct _ze_command_list_handle_t *gprev, *gnext; /* g_lists */
};

typedef struct fz_alloc {
  void *base;
  size_t size;
  ze_memory_type_t type;
  ze_context_handle_t ctx;
  int dev; /* reported device index, -1 none */
  int ipc; /* opened with zeMemOpenIpcHandle */
  uint64_t id;
} fz_alloc_t;

/* What an IPC handle carries. The descriptor comes first: the ze backend ships
 * data[0..3] over SCM_RIGHTS and writes the receiver's own number back there. */
typedef struct fz_ipc {
  int32_t fd;
  uint32_t magic;
  uint64_t size;
  int32_t device; /* physical owner (flat index) */
  int32_t pid;    /* exporter, for messages */
  uint64_t id;
} fz_ipc_t;
_Static_assert(sizeof(fz_ipc_t) <= ZE_MAX_IPC_HANDLE_SIZE, "IPC handle too small");

/* ------------------------------------------------------------------- state */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic int g_inited;
static int g_no_device;    /* FAKEGPU_ZE_NO_DEVICE=1: no driver */
static int g_init_fails;   /* FAKEGPU_ZE_NO_DEVICE=init: zeInit itself fails */
static int g_ngpu, g_nsub, g_ndev;
static int g_p2p[FZ_MAX_DEV][FZ_MAX_DEV]; /* root pairs with peer access */
static unsigned g_delay_us, g_seed;
static int g_reorder, g_copy_group = 1, g_fabric = 1, g_pageable = 1, g_have_vm;
static struct _ze_driver_handle_t g_drv = {FZ_MAGIC_DRV};
static struct _ze_device_handle_t g_dev[FZ_MAX_DEV * (1 + FZ_MAX_SUB)];
static struct _ze_fabric_edge_handle_t g_edge[FZ_MAX_DEV][FZ_MAX_DEV];

static pthread_mutex_t g_alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static fz_alloc_t *g_allocs;
static int g_nalloc, g_capalloc;
static uint64_t g_next_id = 1;

/* Event state changes: one lock and condition for all events (waits are rare and
 * short in tests; a per-event scheme buys nothing here). */
static pthread_mutex_t g_ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_ev_cv;

static _Atomic int g_live_lists, g_live_pools, g_live_events, g_live_ctx, g_dropped, g_violations;
static _Atomic int g_ipc_out; /* newer loader: handles gotten and not put back */

/* Every live command list, so that zeMemFree can see commands that still use memory. */
static pthread_mutex_t g_lists_mu = PTHREAD_MUTEX_INITIALIZER;
static struct _ze_command_list_handle_t *g_lists;
/* Held (read) by workers while a copy or fill runs, (write) while memory is unmapped:
 * memory freed under a running command faults in that command instead of crashing
 * the process from a worker thread. */
static pthread_rwlock_t g_mem_rw = PTHREAD_RWLOCK_INITIALIZER;
static _Atomic unsigned g_list_seq;

static void fz_warn(const char *fmt, ...) {
  va_list ap;
  char buf[512];
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  fprintf(stderr, "fakeze: %s\n", buf);
}

static void fz_violation(const char *fmt, ...) {
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

#define FZ_CHECK_INIT()                                                  \
  do {                                                                   \
    if (!atomic_load(&g_inited)) return ZE_RESULT_ERROR_UNINITIALIZED;   \
  } while (0)

static struct _ze_device_handle_t *fz_dev(ze_device_handle_t h) {
  if (!h || h->magic != FZ_MAGIC_DEV) return NULL;
  return h;
}

static int fz_can_access(int a, int b) {
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

/* -------------------------------------------------------- allocation table */

static int fz_alloc_add(const fz_alloc_t *a) {
  pthread_mutex_lock(&g_alloc_mu);
  if (g_nalloc == g_capalloc) {
    int cap = g_capalloc ? 2 * g_capalloc : 64;
    fz_alloc_t *n = realloc(g_allocs, (size_t)cap * sizeof(*n));
    if (!n) {
      pthread_mutex_unlock(&g_alloc_mu);
      return -1;
    }
    g_allocs = n;
    g_capalloc = cap;
  }
  g_allocs[g_nalloc] = *a;
  g_allocs[g_nalloc].id = g_next_id++;
  g_nalloc++;
  pthread_mutex_unlock(&g_alloc_mu);
  return 0;
}

/* The allocation containing ptr (1) or not (0). */
static int fz_alloc_find(const void *ptr, fz_alloc_t *out) {
  uintptr_t p = (uintptr_t)ptr;
  int found = 0;
  pthread_mutex_lock(&g_alloc_mu);
  for (int i = 0; i < g_nalloc && !found; i++) {
    uintptr_t b = (uintptr_t)g_allocs[i].base;
    if (p >= b && p - b < g_allocs[i].size) {
      if (out) *out = g_allocs[i];
      found = 1;
    }
  }
  pthread_mutex_unlock(&g_alloc_mu);
  return found;
}

/* Remove the allocation based at ptr with ipc flag @ipc; 1 when removed. */
static int fz_alloc_remove(const void *ptr, int ipc, fz_alloc_t *out) {
  int found = 0;
  pthread_mutex_lock(&g_alloc_mu);
  for (int i = 0; i < g_nalloc; i++)
    if (g_allocs[i].base == ptr && g_allocs[i].ipc == ipc) {
      if (out) *out = g_allocs[i];
      g_allocs[i] = g_allocs[--g_nalloc];
      found = 1;
      break;
    }
  pthread_mutex_unlock(&g_alloc_mu);
  return found;
}

static int fz_alloc_count(int ipc) {
  int n = 0;
  pthread_mutex_lock(&g_alloc_mu);
  for (int i = 0; i < g_nalloc; i++) n += g_allocs[i].ipc == ipc;
  pthread_mutex_unlock(&g_alloc_mu);
  return n;
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

static int fz_ctx_ok(ze_context_handle_t c) { return c && c->magic == FZ_MAGIC_CTX; }

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
static uint32_t fz_ngroups(void) { return g_copy_group ? 2 : 1; }

static void fz_group(uint32_t ordinal, ze_command_queue_group_properties_t *g) {
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

/* ------------------------------------------------------------------ memory */

FZ_EXPORT ze_result_t zeMemAllocDevice(ze_context_handle_t hContext,
                                       const ze_device_mem_alloc_desc_t *desc, size_t size,
                                       size_t alignment, ze_device_handle_t hDevice, void **pptr) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *d = fz_dev(hDevice);
  if (!fz_ctx_ok(hContext) || !d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!desc || !pptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (size == 0 || size > ((uint64_t)1 << 34)) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  /* fakemem maps whole pages: page alignment is all it can promise. */
  if ((alignment & (alignment - 1)) || alignment > 4096) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  if (atomic_load(&d->lost)) return ZE_RESULT_ERROR_DEVICE_LOST;
  void *p = NULL;
  int e = fakemem_alloc(size, d->idx, &p);
  if (e) return e == ENOMEM ? ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY : ZE_RESULT_ERROR_UNKNOWN;
  fz_alloc_t a = {p, size, ZE_MEMORY_TYPE_DEVICE, hContext, d->idx, 0, 0};
  if (fz_alloc_add(&a) != 0) {
    fakemem_free(p);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  *pptr = p;
  return ZE_RESULT_SUCCESS;
}

static ze_result_t fz_host_alloc(ze_context_handle_t hContext, size_t size, size_t alignment,
                                 ze_memory_type_t type, int dev, void **pptr) {
  if (size == 0) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  if (alignment & (alignment - 1)) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  void *p = NULL;
  if (posix_memalign(&p, alignment > 64 ? alignment : 64, size) != 0)
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  fz_alloc_t a = {p, size, type, hContext, dev, 0, 0};
  if (fz_alloc_add(&a) != 0) {
    free(p);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  *pptr = p;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemAllocHost(ze_context_handle_t hContext,
                                     const ze_host_mem_alloc_desc_t *desc, size_t size,
                                     size_t alignment, void **pptr) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!desc || !pptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return fz_host_alloc(hContext, size, alignment, ZE_MEMORY_TYPE_HOST, -1, pptr);
}

FZ_EXPORT ze_result_t zeMemAllocShared(ze_context_handle_t hContext,
                                       const ze_device_mem_alloc_desc_t *ddesc,
                                       const ze_host_mem_alloc_desc_t *hdesc, size_t size,
                                       size_t alignment, ze_device_handle_t hDevice, void **pptr) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ddesc || !hdesc || !pptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  struct _ze_device_handle_t *d = hDevice ? fz_dev(hDevice) : NULL;
  if (hDevice && !d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return fz_host_alloc(hContext, size, alignment, ZE_MEMORY_TYPE_SHARED, d ? d->idx : -1, pptr);
}

static int fz_cmd_touches(const fz_cmd_t *c, uintptr_t b, size_t n) {
  if (c->kind != FZ_CMD_COPY && c->kind != FZ_CMD_FILL) return 0;
  uintptr_t d = (uintptr_t)c->dst, s = (uintptr_t)c->src;
  if (c->size && d < b + n && b < d + c->size) return 1;
  return c->kind == FZ_CMD_COPY && c->size && s < b + n && b < s + c->size;
}

/* The specification: "the application must ensure the device is not currently
 * referencing the memory before it is freed". Report a copy or fill still queued on, or
 * running in, any command list that touches [base, base+size). */
static void fz_check_unused(const char *call, const void *base, size_t size) {
  uintptr_t b = (uintptr_t)base;
  pthread_mutex_lock(&g_lists_mu);
  for (ze_command_list_handle_t l = g_lists; l; l = l->gnext) {
    int hit = 0;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->nbatch && !hit; i++) hit = fz_cmd_touches(l->batch[i], b, size);
    for (fz_cmd_t *c = l->head; c && !hit; c = c->next) hit = fz_cmd_touches(c, b, size);
    pthread_mutex_unlock(&l->mu);
    if (hit)
      fz_violation("%s(%p): a copy or fill of command list %p that touches it has not "
                   "completed (the device still references the memory)", call, base, (void *)l);
  }
  pthread_mutex_unlock(&g_lists_mu);
}

FZ_EXPORT ze_result_t zeMemFree(ze_context_handle_t hContext, void *ptr) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_alloc_t a;
  if (!fz_alloc_remove(ptr, 0, &a)) {
    if (fz_alloc_find(ptr, &a) && a.ipc)
      fz_violation("zeMemFree(%p) of memory opened with zeMemOpenIpcHandle "
                   "(close it with zeMemCloseIpcHandle)", ptr);
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (a.ctx != hContext) fz_violation("zeMemFree(%p) with another context than it was allocated on", ptr);
  fz_check_unused("zeMemFree", a.base, a.size);
  pthread_rwlock_wrlock(&g_mem_rw);
  if (a.type == ZE_MEMORY_TYPE_DEVICE)
    fakemem_free(ptr);
  else
    free(ptr);
  pthread_rwlock_unlock(&g_mem_rw);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemGetAddressRange(ze_context_handle_t hContext, const void *ptr,
                                           void **pBase, size_t *pSize) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_alloc_t a;
  /* Not an allocation of this driver: the specification names no code; this one is
   * chosen (README). */
  if (!fz_alloc_find(ptr, &a)) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (pBase) *pBase = a.base;
  if (pSize) *pSize = a.size;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemGetAllocProperties(ze_context_handle_t hContext, const void *ptr,
                                              ze_memory_allocation_properties_t *p,
                                              ze_device_handle_t *phDevice) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr || !p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_alloc_t a;
  if (!fz_alloc_find(ptr, &a)) {
    p->type = ZE_MEMORY_TYPE_UNKNOWN;
    p->id = 0;
    p->pageSize = 0;
    if (phDevice) *phDevice = NULL;
    return ZE_RESULT_SUCCESS;
  }
  p->type = a.type;
  p->id = a.id;
  p->pageSize = 4096;
  if (phDevice) *phDevice = a.dev >= 0 ? &g_dev[a.dev] : NULL;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemGetIpcHandle(ze_context_handle_t hContext, const void *ptr,
                                        ze_ipc_mem_handle_t *pIpcHandle) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr || !pIpcHandle) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_alloc_t a;
  fakemem_region_t r;
  if (!fz_alloc_find(ptr, &a) || a.type != ZE_MEMORY_TYPE_DEVICE || a.ipc) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (a.base != ptr) {
    fz_violation("zeMemGetIpcHandle(%p): not the base of its allocation (%p); the "
                 "specification requires the pointer zeMemAllocDevice returned", ptr, a.base);
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (fakemem_find(ptr, 1, &r) != 0) return ZE_RESULT_ERROR_UNKNOWN;
#ifdef FAKEZE_NEWER_LOADER
  /* A descriptor of its own per handle, as a dma-buf export is; zeMemPutIpcHandle
   * closes it. */
  int fd = fcntl(r.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  atomic_fetch_add(&g_ipc_out, 1);
#else
  /* 1.8.12 has no zeMemPutIpcHandle: the allocation's own descriptor, valid until
   * zeMemFree, so no descriptor is created that nobody could close. */
  int fd = r.fd;
#endif
  fz_ipc_t h = {fd, FZ_MAGIC_IPC, a.size, a.dev, (int32_t)getpid(), a.id};
  memset(pIpcHandle->data, 0, sizeof(pIpcHandle->data));
  memcpy(pIpcHandle->data, &h, sizeof(h));
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemOpenIpcHandle(ze_context_handle_t hContext, ze_device_handle_t hDevice,
                                         ze_ipc_mem_handle_t handle, ze_ipc_memory_flags_t flags,
                                         void **pptr) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *d = fz_dev(hDevice);
  if (!fz_ctx_ok(hContext) || !d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (flags > 0x3) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (!pptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_ipc_t h;
  memcpy(&h, handle.data, sizeof(h));
  if (h.magic != FZ_MAGIC_IPC || h.size == 0 || h.device < -1 || h.device >= g_ndev)
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (h.device == -1) h.device = d->idx; /* built from a bare descriptor: owner unknown */
  /* The descriptor must be valid in this process (the importer received its own copy). */
  void *p = NULL;
  int e = fakemem_import(getpid(), h.fd, h.size, h.device, &p);
  if (e) {
    fz_warn("zeMemOpenIpcHandle: descriptor %d (from pid %d) cannot be mapped here: %s", h.fd,
            h.pid, strerror(e));
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  fz_alloc_t a = {p, h.size, ZE_MEMORY_TYPE_DEVICE, hContext, d->idx, 1, 0};
  if (fz_alloc_add(&a) != 0) {
    fakemem_free(p);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  *pptr = p;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemCloseIpcHandle(ze_context_handle_t hContext, const void *ptr) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_alloc_t a;
  if (!fz_alloc_remove(ptr, 1, &a)) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  fz_check_unused("zeMemCloseIpcHandle", a.base, a.size);
  pthread_rwlock_wrlock(&g_mem_rw);
  fakemem_free((void *)ptr);
  pthread_rwlock_unlock(&g_mem_rw);
  return ZE_RESULT_SUCCESS;
}

#ifdef FAKEZE_NEWER_LOADER
FZ_EXPORT ze_result_t zeMemPutIpcHandle(ze_context_handle_t hContext, ze_ipc_mem_handle_t handle) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_ipc_t h;
  memcpy(&h, handle.data, sizeof(h));
  if (h.magic != FZ_MAGIC_IPC || h.pid != (int32_t)getpid()) {
    fz_violation("zeMemPutIpcHandle of a handle this process did not get");
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (close(h.fd) != 0) {
    fz_violation("zeMemPutIpcHandle: descriptor %d of the handle is not open (put twice?)", h.fd);
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  atomic_fetch_sub(&g_ipc_out, 1);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemGetFileDescriptorFromIpcHandleExp(ze_context_handle_t hContext,
                                                             ze_ipc_mem_handle_t ipcHandle,
                                                             uint64_t *pHandle) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!pHandle) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_ipc_t h;
  memcpy(&h, ipcHandle.data, sizeof(h));
  if (h.magic != FZ_MAGIC_IPC) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  *pHandle = (uint64_t)(uint32_t)h.fd;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemGetIpcHandleFromFileDescriptorExp(ze_context_handle_t hContext,
                                                             uint64_t handle,
                                                             ze_ipc_mem_handle_t *pIpcHandle) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!pIpcHandle) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  struct stat st;
  if (handle > INT32_MAX || fstat((int)handle, &st) != 0 || st.st_size <= 0)
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  /* Everything comes from the descriptor alone, as for a dma-buf: its size; the owning
   * device is not in it (-1: zeMemOpenIpcHandle takes the opening device). */
  fz_ipc_t h = {(int32_t)handle, FZ_MAGIC_IPC, (uint64_t)st.st_size, -1, 0, 0};
  memset(pIpcHandle->data, 0, sizeof(pIpcHandle->data));
  memcpy(pIpcHandle->data, &h, sizeof(h));
  return ZE_RESULT_SUCCESS;
}
#endif

/* ------------------------------------------------------------------ events */

FZ_EXPORT ze_result_t zeEventPoolCreate(ze_context_handle_t hContext, const ze_event_pool_desc_t *desc,
                                        uint32_t numDevices, ze_device_handle_t *phDevices,
                                        ze_event_pool_handle_t *phEventPool) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!desc || !phEventPool) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->flags > 0xf) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (desc->count == 0 || (numDevices > 0 && !phDevices)) return ZE_RESULT_ERROR_INVALID_SIZE;
  for (uint32_t i = 0; i < numDevices; i++)
    if (!fz_dev(phDevices[i])) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  ze_event_pool_handle_t p = calloc(1, sizeof(*p));
  if (p) p->ev = calloc(desc->count, sizeof(*p->ev));
  if (!p || !p->ev) {
    free(p);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  p->magic = FZ_MAGIC_POOL;
  p->ctx = hContext;
  p->count = desc->count;
  p->flags = desc->flags;
  for (uint32_t i = 0; i < desc->count; i++) {
    p->ev[i].pool = p;
    p->ev[i].index = i;
  }
  atomic_fetch_add(&g_live_pools, 1);
  *phEventPool = p;
  return ZE_RESULT_SUCCESS;
}

static void fz_pool_free(ze_event_pool_handle_t p) {
  free(p->ev);
  free(p);
}

FZ_EXPORT ze_result_t zeEventPoolDestroy(ze_event_pool_handle_t hEventPool) {
  FZ_CHECK_INIT();
  if (!hEventPool || hEventPool->magic != FZ_MAGIC_POOL) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  int busy = 0;
  pthread_mutex_lock(&g_ev_mu);
  hEventPool->magic = 0;
  hEventPool->destroyed = 1;
  busy = hEventPool->refs > 0;
  for (uint32_t i = 0; i < hEventPool->count; i++)
    if (hEventPool->ev[i].created) {
      hEventPool->ev[i].created = 0;
      hEventPool->ev[i].magic = 0;
      atomic_fetch_sub(&g_live_events, 1);
    }
  pthread_mutex_unlock(&g_ev_mu);
  atomic_fetch_sub(&g_live_pools, 1);
  if (busy)
    fz_violation("zeEventPoolDestroy while commands of a command list still use its events");
  else
    fz_pool_free(hEventPool);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeEventCreate(ze_event_pool_handle_t hEventPool, const ze_event_desc_t *desc,
                                    ze_event_handle_t *phEvent) {
  FZ_CHECK_INIT();
  if (!hEventPool || hEventPool->magic != FZ_MAGIC_POOL) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!desc || !phEvent) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->signal > 0x7 || desc->wait > 0x7) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (desc->index >= hEventPool->count) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  ze_event_handle_t e = &hEventPool->ev[desc->index];
  pthread_mutex_lock(&g_ev_mu);
  int twice = e->created;
  if (!twice) {
    e->created = 1;
    e->magic = FZ_MAGIC_EVENT;
    atomic_store(&e->state, FZ_EV_RESET);
  }
  pthread_mutex_unlock(&g_ev_mu);
  if (twice) {
    fz_violation("zeEventCreate: index %u of the pool already has an event", desc->index);
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  atomic_fetch_add(&g_live_events, 1);
  *phEvent = e;
  return ZE_RESULT_SUCCESS;
}

static int fz_ev_ok(ze_event_handle_t e) { return e && e->magic == FZ_MAGIC_EVENT && e->created; }

FZ_EXPORT ze_result_t zeEventDestroy(ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_ev_ok(hEvent)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  pthread_mutex_lock(&g_ev_mu);
  hEvent->created = 0;
  hEvent->magic = 0;
  pthread_mutex_unlock(&g_ev_mu);
  atomic_fetch_sub(&g_live_events, 1);
  return ZE_RESULT_SUCCESS;
}

static void fz_ev_set(ze_event_handle_t e, int state) {
  pthread_mutex_lock(&g_ev_mu);
  atomic_store(&e->state, state);
  pthread_cond_broadcast(&g_ev_cv);
  pthread_mutex_unlock(&g_ev_mu);
}

static ze_result_t fz_ev_result(ze_event_handle_t e) {
  int s = atomic_load(&e->state);
  return s == FZ_EV_SIGNALED ? ZE_RESULT_SUCCESS : s == FZ_EV_LOST ? ZE_RESULT_ERROR_DEVICE_LOST
                                                                   : ZE_RESULT_NOT_READY;
}

FZ_EXPORT ze_result_t zeEventHostSignal(ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_ev_ok(hEvent)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_ev_set(hEvent, FZ_EV_SIGNALED);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeEventHostReset(ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_ev_ok(hEvent)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_ev_set(hEvent, FZ_EV_RESET);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeEventQueryStatus(ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_ev_ok(hEvent)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return fz_ev_result(hEvent);
}

FZ_EXPORT ze_result_t zeEventHostSynchronize(ze_event_handle_t hEvent, uint64_t timeout) {
  FZ_CHECK_INIT();
  if (!fz_ev_ok(hEvent)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  if (timeout != UINT64_MAX) {
    uint64_t ns = (uint64_t)dl.tv_nsec + timeout % 1000000000ull;
    dl.tv_sec += (time_t)(timeout / 1000000000ull + ns / 1000000000ull);
    dl.tv_nsec = (long)(ns % 1000000000ull);
  }
  pthread_mutex_lock(&g_ev_mu);
  while (atomic_load(&hEvent->state) == FZ_EV_RESET && timeout != 0) {
    if (timeout == UINT64_MAX)
      pthread_cond_wait(&g_ev_cv, &g_ev_mu);
    else if (pthread_cond_timedwait(&g_ev_cv, &g_ev_mu, &dl) == ETIMEDOUT)
      break;
  }
  pthread_mutex_unlock(&g_ev_mu);
  return fz_ev_result(hEvent);
}

/* ----------------------------------------------------------- command lists */

/* A pointer a command touches, as the device sees it. direct: the fake can access it
 * with plain loads and stores (its private alias of device memory, or a USM host
 * allocation); otherwise it is pageable host memory, copied with fault checks. */
typedef struct fz_ptr {
  void *p;
  int direct;
} fz_ptr_t;

static int fz_resolve(ze_command_list_handle_t l, const void *ptr, size_t n, fz_ptr_t *out,
                      char *why, size_t wlen) {
  fakemem_region_t r;
  if (fakemem_find(ptr, 1, &r) == 0) {
    size_t off = (size_t)((const char *)ptr - (const char *)r.pub);
    if (n > r.size - off) {
      snprintf(why, wlen, "%zu bytes at %p run past the end of a %zu-byte device allocation",
               n, ptr, r.size);
      return -1;
    }
    if (!fz_can_access(l->dev->idx, r.device)) {
      snprintf(why, wlen, "%p is memory of device %d, which device %d cannot access (no peer "
               "access)", ptr, r.device, l->dev->idx);
      return -1;
    }
    out->p = (char *)r.priv + off;
    out->direct = 1;
    return 0;
  }
  fz_alloc_t a;
  if (fz_alloc_find(ptr, &a)) {
    if (n > a.size - (size_t)((const char *)ptr - (const char *)a.base)) {
      snprintf(why, wlen, "%zu bytes at %p run past the end of a %zu-byte host allocation", n,
               ptr, a.size);
      return -1;
    }
    out->p = (void *)ptr;
    out->direct = 1;
    return 0;
  }
  if (!g_pageable) {
    snprintf(why, wlen, "%p is pageable host memory (FAKEGPU_ZE_PAGEABLE=no)", ptr);
    return -1;
  }
  out->p = (void *)ptr;
  out->direct = 0;
  return 0;
}

/* Copy where one side may be pageable memory: the kernel checks both ranges. */
static int fz_vm_copy(void *dst, const void *src, size_t n) {
  if (!g_have_vm) {
    memmove(dst, src, n);
    return 0;
  }
  pid_t self = getpid();
  while (n) {
    struct iovec l = {dst, n}, r = {(void *)src, n};
    ssize_t k = process_vm_readv(self, &l, 1, &r, 1, 0);
    if (k <= 0) return -1;
    dst = (char *)dst + k;
    src = (const char *)src + k;
    n -= (size_t)k;
  }
  return 0;
}

static int fz_exec_copy(ze_command_list_handle_t l, fz_cmd_t *c, char *why, size_t wlen) {
  if (c->size == 0) return 0;
  fz_ptr_t d, s;
  if (fz_resolve(l, c->dst, c->size, &d, why, wlen) || fz_resolve(l, c->src, c->size, &s, why, wlen))
    return -1;
  if (d.direct && s.direct) {
    memmove(d.p, s.p, c->size);
    return 0;
  }
  if (fz_vm_copy(d.p, s.p, c->size) != 0) {
    snprintf(why, wlen, "copy of %zu bytes %p -> %p faulted (unmapped host memory?)", c->size,
             c->src, c->dst);
    return -1;
  }
  return 0;
}

static int fz_exec_fill(ze_command_list_handle_t l, fz_cmd_t *c, char *why, size_t wlen) {
  if (c->size == 0) return 0;
  fz_ptr_t d;
  if (fz_resolve(l, c->dst, c->size, &d, why, wlen)) return -1;
  unsigned char buf[4096];
  for (size_t i = 0; i < sizeof(buf); i++) buf[i] = c->pattern[i % c->pattern_size];
  /* The pattern repeats from the start of the range; sizeof(buf) is a multiple of every
   * allowed (power-of-two) pattern size, so chunks keep its phase. */
  for (size_t off = 0; off < c->size; off += sizeof(buf)) {
    size_t k = c->size - off < sizeof(buf) ? c->size - off : sizeof(buf);
    if (d.direct)
      memcpy((char *)d.p + off, buf, k);
    else if (fz_vm_copy((char *)d.p + off, buf, k) != 0) {
      snprintf(why, wlen, "fill of %zu bytes at %p faulted (unmapped host memory?)", c->size, c->dst);
      return -1;
    }
  }
  return 0;
}

static void fz_cmd_release(fz_cmd_t *c) {
  /* A pool destroyed while commands still named its events is freed by the last one;
   * refs counts every reference, so no later event of this command is in a freed pool. */
  pthread_mutex_lock(&g_ev_mu);
  for (uint32_t i = 0; i <= c->nwait; i++) {
    ze_event_handle_t e = i < c->nwait ? c->wait[i] : c->signal;
    if (!e) continue;
    ze_event_pool_handle_t p = e->pool;
    if (--p->refs == 0 && p->destroyed) fz_pool_free(p);
  }
  pthread_mutex_unlock(&g_ev_mu);
  free(c->wait);
  free(c);
}

/* Wait for the command's wait events: 0 all signalled, 1 one is lost, 2 the list is
 * being destroyed (the application destroyed a list the device still waits in). */
static int fz_wait_events(ze_command_list_handle_t l, fz_cmd_t *c) {
  int rc = 0;
  pthread_mutex_lock(&g_ev_mu);
  for (;;) {
    int all = 1;
    rc = 0;
    for (uint32_t i = 0; i < c->nwait && !rc; i++) {
      int s = atomic_load(&c->wait[i]->state);
      if (s == FZ_EV_LOST) rc = 1;
      if (s == FZ_EV_RESET) all = 0;
    }
    if (rc || all) break;
    if (atomic_load(&l->closing)) { /* atomic: l->mu is taken before g_ev_mu elsewhere */
      rc = 2;
      break;
    }
    pthread_cond_wait(&g_ev_cv, &g_ev_mu);
  }
  pthread_mutex_unlock(&g_ev_mu);
  return rc;
}

static void fz_lose(ze_command_list_handle_t l, const char *why) {
  /* Device first: whoever sees the list lost also sees its device lost. */
  atomic_store(&l->dev->lost, 1);
  if (!atomic_exchange(&l->lost, 1))
    fz_warn("device %d lost (command list %p): %s", l->dev->idx, (void *)l, why);
}

/* Run one command; 0 done, 1 lost, 2 abandoned (list destroyed while it waited). */
static int fz_run(ze_command_list_handle_t l, fz_cmd_t *c) {
  char why[256] = "";
  int w = fz_wait_events(l, c);
  if (w == 1) {
    fz_lose(l, "waited on an event of a lost device");
    return 1;
  }
  if (w == 2) return 2;
  if (g_delay_us) usleep((useconds_t)(rand_r(&l->rng) % (g_delay_us + 1)));
  int bad = 0;
  if (c->kind == FZ_CMD_COPY || c->kind == FZ_CMD_FILL) {
    pthread_rwlock_rdlock(&g_mem_rw);
    bad = c->kind == FZ_CMD_COPY ? fz_exec_copy(l, c, why, sizeof(why))
                                 : fz_exec_fill(l, c, why, sizeof(why));
    pthread_rwlock_unlock(&g_mem_rw);
  }
  if (bad) {
    fz_lose(l, why);
    return 1;
  }
  if (c->signal) fz_ev_set(c->signal, c->kind == FZ_CMD_RESET ? FZ_EV_RESET : FZ_EV_SIGNALED);
  return 0;
}

static int fz_is_batchable(const fz_cmd_t *c) { return c->kind == FZ_CMD_COPY || c->kind == FZ_CMD_FILL; }

static void *fz_worker(void *arg) {
  ze_command_list_handle_t l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->head && !l->closing) pthread_cond_wait(&l->cv, &l->mu);
    if (!l->head) break;
    /* Normally one command at a time, in order. FAKEGPU_ZE_REORDER=1: the queued
     * copies/fills up to the next barrier, signal, wait or reset run in a random order,
     * which the specification allows (only barriers and events order a list). The
     * batch stays visible in l->batch (for zeMemFree's check) until it is retired. */
    fz_cmd_t **batch = l->batch;
    int n = 0;
    do {
      batch[n++] = l->head;
      l->head = l->head->next;
    } while (g_reorder && l->head && n < 16 && fz_is_batchable(batch[0]) &&
             fz_is_batchable(l->head));
    if (!l->head) l->tail = NULL;
    for (int i = n - 1; i > 0; i--) {
      int j = rand_r(&l->rng) % (i + 1);
      fz_cmd_t *t = batch[i];
      batch[i] = batch[j];
      batch[j] = t;
    }
    l->nbatch = n;
    pthread_mutex_unlock(&l->mu);
    int stop = 0;
    for (int i = 0; i < n; i++) {
      int r = stop ? stop : fz_run(l, batch[i]);
      if (r == 1 && batch[i]->signal) fz_ev_set(batch[i]->signal, FZ_EV_LOST);
      if (r == 2) atomic_fetch_add(&g_dropped, 1);
      if (r) stop = r;
    }
    pthread_mutex_lock(&l->mu);
    l->nbatch = 0;
    for (int i = 0; i < n; i++) fz_cmd_release(batch[i]);
    l->retired += (uint64_t)n;
    if (stop) {
      /* Lost, or destroyed while waiting: nothing queued behind it runs. */
      while (l->head) {
        fz_cmd_t *c = l->head;
        l->head = c->next;
        if (stop == 1 && c->signal) fz_ev_set(c->signal, FZ_EV_LOST);
        if (stop == 2) atomic_fetch_add(&g_dropped, 1);
        fz_cmd_release(c);
        l->retired++;
      }
      l->tail = NULL;
    }
    pthread_cond_broadcast(&l->cv);
    if (stop == 2) break;
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

FZ_EXPORT ze_result_t zeCommandListCreateImmediate(ze_context_handle_t hContext,
                                                   ze_device_handle_t hDevice,
                                                   const ze_command_queue_desc_t *altdesc,
                                                   ze_command_list_handle_t *phCommandList) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *d = fz_dev(hDevice);
  if (!fz_ctx_ok(hContext) || !d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!altdesc || !phCommandList) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (altdesc->flags > 0x1 || altdesc->mode > ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS ||
      altdesc->priority > ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_HIGH)
    return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (atomic_load(&d->lost)) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (altdesc->ordinal >= fz_ngroups()) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  ze_command_queue_group_properties_t g;
  fz_group(altdesc->ordinal, &g);
  if (altdesc->index >= g.numQueues) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  ze_command_list_handle_t l = calloc(1, sizeof(*l));
  if (!l) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  l->magic = FZ_MAGIC_LIST;
  l->ctx = hContext;
  l->dev = d;
  l->ordinal = altdesc->ordinal;
  l->sync = altdesc->mode == ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS;
  l->max_fill = g.maxMemoryFillPatternSize;
  l->rng = g_seed * 2654435761u + atomic_fetch_add(&g_list_seq, 1);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  if (pthread_create(&l->th, NULL, fz_worker, l) != 0) {
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  atomic_fetch_add(&g_live_lists, 1);
  pthread_mutex_lock(&g_lists_mu);
  l->gnext = g_lists;
  if (g_lists) g_lists->gprev = l;
  g_lists = l;
  pthread_mutex_unlock(&g_lists_mu);
  *phCommandList = l;
  return ZE_RESULT_SUCCESS;
}

static int fz_list_ok(ze_command_list_handle_t l) { return l && l->magic == FZ_MAGIC_LIST; }

FZ_EXPORT ze_result_t zeCommandListDestroy(ze_command_list_handle_t hCommandList) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  ze_command_list_handle_t l = hCommandList;
  int before = atomic_load(&g_dropped);
  pthread_mutex_lock(&l->mu);
  l->magic = 0;
  atomic_store(&l->closing, 1);
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  /* Wake a command waiting on an event: it gives up (below). Copies and fills already
   * queued still run first, as the device would finish them. */
  pthread_mutex_lock(&g_ev_mu);
  pthread_cond_broadcast(&g_ev_cv);
  pthread_mutex_unlock(&g_ev_mu);
  pthread_join(l->th, NULL);
  pthread_mutex_lock(&g_lists_mu);
  if (l->gprev)
    l->gprev->gnext = l->gnext;
  else
    g_lists = l->gnext;
  if (l->gnext) l->gnext->gprev = l->gprev;
  pthread_mutex_unlock(&g_lists_mu);
  int dropped = atomic_load(&g_dropped) - before;
  if (dropped > 0)
    fz_warn("zeCommandListDestroy(%p): %d command(s) still waited on events and were dropped "
            "(the application must ensure the device no longer uses the list)", (void *)l, dropped);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
  atomic_fetch_sub(&g_live_lists, 1);
  return ZE_RESULT_SUCCESS;
}

/* Common front of every append: validation, then queue @c (owned by this call). */
static ze_result_t fz_append(ze_command_list_handle_t l, fz_cmd_t *c, uint32_t nwait,
                             ze_event_handle_t *wait) {
  if (nwait > 0 && !wait) {
    free(c);
    return ZE_RESULT_ERROR_INVALID_SIZE;
  }
  for (uint32_t i = 0; i < nwait; i++)
    if (!fz_ev_ok(wait[i])) {
      free(c);
      return ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT;
    }
  if (c->signal && !fz_ev_ok(c->signal)) {
    free(c);
    return ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT;
  }
  if (atomic_load(&l->lost) || atomic_load(&l->dev->lost)) {
    free(c);
    return ZE_RESULT_ERROR_DEVICE_LOST;
  }
  if (nwait) {
    c->wait = malloc(nwait * sizeof(*c->wait));
    if (!c->wait) {
      free(c);
      return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    memcpy(c->wait, wait, nwait * sizeof(*wait));
    c->nwait = nwait;
  }
  if (atomic_exchange(&l->in_append, 1))
    fz_violation("command list %p appended to from two threads at once", (void *)l);
  pthread_mutex_lock(&g_ev_mu);
  for (uint32_t i = 0; i < c->nwait; i++) c->wait[i]->pool->refs++;
  if (c->signal) c->signal->pool->refs++;
  pthread_mutex_unlock(&g_ev_mu);
  pthread_mutex_lock(&l->mu);
  if (l->tail)
    l->tail->next = c;
  else
    l->head = c;
  l->tail = c;
  uint64_t seq = ++l->appended;
  pthread_cond_broadcast(&l->cv);
  ze_result_t r = ZE_RESULT_SUCCESS;
  if (l->sync) {
    while (l->retired < seq) pthread_cond_wait(&l->cv, &l->mu);
    if (atomic_load(&l->lost)) r = ZE_RESULT_ERROR_DEVICE_LOST;
  }
  pthread_mutex_unlock(&l->mu);
  atomic_store(&l->in_append, 0);
  return r;
}

static fz_cmd_t *fz_cmd_new(int kind, ze_event_handle_t signal) {
  fz_cmd_t *c = calloc(1, sizeof(*c));
  if (c) {
    c->kind = kind;
    c->signal = signal;
  }
  return c;
}

FZ_EXPORT ze_result_t zeCommandListAppendMemoryCopy(ze_command_list_handle_t hCommandList,
                                                    void *dstptr, const void *srcptr, size_t size,
                                                    ze_event_handle_t hSignalEvent,
                                                    uint32_t numWaitEvents,
                                                    ze_event_handle_t *phWaitEvents) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!dstptr || !srcptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_COPY, hSignalEvent);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  /* Pointers are resolved when the copy executes, as a device would. */
  c->dst = dstptr;
  c->src = srcptr;
  c->size = size;
  return fz_append(hCommandList, c, numWaitEvents, phWaitEvents);
}

FZ_EXPORT ze_result_t zeCommandListAppendMemoryFill(ze_command_list_handle_t hCommandList, void *ptr,
                                                    const void *pattern, size_t pattern_size,
                                                    size_t size, ze_event_handle_t hSignalEvent,
                                                    uint32_t numWaitEvents,
                                                    ze_event_handle_t *phWaitEvents) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr || !pattern) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (pattern_size == 0 || (pattern_size & (pattern_size - 1)) ||
      pattern_size > hCommandList->max_fill) {
    fz_violation("zeCommandListAppendMemoryFill: pattern_size %zu is not a power of two <= %zu "
                 "(maxMemoryFillPatternSize of the list's queue group)", pattern_size,
                 hCommandList->max_fill);
    return ZE_RESULT_ERROR_INVALID_SIZE;
  }
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_FILL, hSignalEvent);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  c->dst = ptr;
  c->size = size;
  c->pattern_size = pattern_size;
  memcpy(c->pattern, pattern, pattern_size); /* the pattern is read at append time */
  return fz_append(hCommandList, c, numWaitEvents, phWaitEvents);
}

FZ_EXPORT ze_result_t zeCommandListAppendBarrier(ze_command_list_handle_t hCommandList,
                                                 ze_event_handle_t hSignalEvent,
                                                 uint32_t numWaitEvents,
                                                 ze_event_handle_t *phWaitEvents) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_BARRIER, hSignalEvent);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  return fz_append(hCommandList, c, numWaitEvents, phWaitEvents);
}

FZ_EXPORT ze_result_t zeCommandListAppendSignalEvent(ze_command_list_handle_t hCommandList,
                                                     ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList) || !hEvent) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_SIGNAL, hEvent);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  return fz_append(hCommandList, c, 0, NULL);
}

FZ_EXPORT ze_result_t zeCommandListAppendWaitOnEvents(ze_command_list_handle_t hCommandList,
                                                      uint32_t numEvents,
                                                      ze_event_handle_t *phEvents) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!phEvents) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_WAIT, NULL);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  return fz_append(hCommandList, c, numEvents, phEvents);
}

FZ_EXPORT ze_result_t zeCommandListAppendEventReset(ze_command_list_handle_t hCommandList,
                                                    ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList) || !hEvent) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_RESET, hEvent);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  return fz_append(hCommandList, c, 0, NULL);
}

/* ----------------------------------------------------------- introspection */

FZ_EXPORT int fakeze_live_allocations(void) { return fz_alloc_count(0); }
FZ_EXPORT int fakeze_open_ipc(void) { return fz_alloc_count(1); }
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
