/* ze backend: Level Zero peer copies under the core's generic algorithm layer.
 *
 * Ranks: one per Level Zero GPU device of the first driver that has one, or one per
 * sub-device (tile) with UNILINK_ZE_SUBDEVICES=1. Every rank of a process shares one
 * context, so devices of one process copy to each other directly; ranks in other
 * processes export their window memory with zeMemGetIpcHandle, the dma-buf descriptor
 * inside travels over a Unix socket with SCM_RIGHTS (ze_ipc.c), and the importer opens
 * it with zeMemOpenIpcHandle.
 *
 * Data movement: immediate command lists on a copy-only engine group (COPY flag without
 * COMPUTE; a compute group that can copy when no such group exists). A ul_stream_t is one
 * such list. Level Zero does not order commands in a list by itself, so a barrier
 * (zeCommandListAppendBarrier) goes between dependent commands.
 *
 * Signals: host-memory counters in a POSIX shm segment per rank and window, one cell per
 * (index, sender) so that only the sender writes a cell. ul_signal appends a barrier that
 * signals a host-visible event once every earlier command of the list has completed and
 * its writes are globally visible; when the event is seen signalled (a progress thread
 * per communicator, or any wait of this backend), the host stores the sender's new count
 * into the peer's cell. Pending signals are delivered strictly in issue order. Waits run
 * on the host with the timeout and the abort flag, so no device work can hang on a lost
 * peer.
 *
 * Local reductions (v1): staged through host memory: both operands are copied to pinned
 * host buffers (zeMemAllocHost), reduced with ul_reduce_local, copied back. Correct for
 * every dtype and op, not fast; device kernels are future work.
 *
 * Bootstrap: a POSIX shm "board" named by random bytes of the unique id (0600, unlinked
 * once every rank joined) with a barrier and one slot per rank. Ranks share one host. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <level_zero/ze_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <unilink/backend.h>

#include "backend_util.h"
#include "ze_common.h"
#include "ze_ipc.h"

#define ZE_ID_MAGIC 0x5a45424bu /* "ZEBK" */
#define ZE_SLOT_BYTES 512
#define ZE_NEVENTS 512
#define ZE_MAX_DEVICES 64

/* ------------------------------------------------------------ process state */

typedef struct ze_devinfo {
  ze_device_handle_t h;
  int root, sub; /* sub = -1 for a root device */
  uint8_t uuid[16];
  double clock_mhz;
  uint32_t copy_ordinal;
  int copy_is_compute; /* no copy-only group: the copy runs on a compute engine */
  char name[64];
} ze_devinfo_t;

static ze_driver_handle_t ze_drv;
static ze_context_handle_t ze_ctx;
static ze_devinfo_t ze_devs[ZE_MAX_DEVICES];
static int ze_ndev;
static int ze_have_bw_ext, ze_have_fabric_ext;
static char ze_version[64] = "Level Zero (no driver)";

/* Newer loaders convert between IPC handles and descriptors; older ones do not export
 * these, then the descriptor is the first int of the handle (Intel's layout). */
typedef ze_result_t (*ze_fd_from_handle_fn)(ze_context_handle_t, ze_ipc_mem_handle_t, uint64_t *);
typedef ze_result_t (*ze_handle_from_fd_fn)(ze_context_handle_t, uint64_t, ze_ipc_mem_handle_t *);
static ze_fd_from_handle_fn ze_fd_from_handle;
static ze_handle_from_fd_fn ze_handle_from_fd;

/* ------------------------------------------------------------------ types */

typedef struct ze_ident {
  uint64_t host_hash;
  int32_t pid;
  int32_t device;
  uint8_t uuid[16];
  int32_t root, sub;
} ze_ident_t;

typedef struct ze_slot {
  ze_ident_t ident;
  int32_t p2p_ok;
  int32_t has_ipc;
  uint8_t ipc[ZE_MAX_IPC_HANDLE_SIZE];
  uint64_t ipc_offset, raw_base, size;
  char why[160];
} ze_slot_t;
_Static_assert(sizeof(ze_slot_t) <= ZE_SLOT_BYTES, "slot too small");

struct ul_backend_stream {
  ul_backend_comm_t *c;
  ze_command_list_handle_t list;
  int owned;
  int dirty;          /* commands since the last barrier */
  uint64_t ops;       /* commands appended so far */
  int probe;          /* event of stream_query, -1 none */
  uint64_t probe_ops; /* ops when the probe was appended */
};

typedef struct ze_pending {
  int ev;
  _Atomic uint64_t *cell;
  uint64_t value;
  ze_command_list_handle_t list;
} ze_pending_t;

struct ul_backend_comm {
  ul_comm_t core;
  int rank, nranks, device;
  int timeout_ms;
  const volatile int *abort_flag;
  volatile int dead;
  ze_device_handle_t dev;
  struct ul_backend_stream internal;
  int same_process;
  ulbu_board_t board; /* bootstrap: barrier and allgathers */
  ze_ident_t *idents;
  int *peer_dev; /* local device index of each peer, -1 if not visible */
  ul_link_info_t *links;
  unsigned win_seq;
  ulbu_alloc_list_t allocs; /* ul_mem_alloc memory */
  /* events and pending signals */
  ze_event_pool_handle_t pool;
  ze_event_handle_t ev[ZE_NEVENTS];
  int ev_free[ZE_NEVENTS];
  int ev_nfree;
  ze_pending_t pend[ZE_NEVENTS];
  uint64_t pend_head, pend_tail;
  ze_result_t async_err;
  pthread_mutex_t evlock;
  pthread_cond_t evcond;
  pthread_t progress;
  int progress_started, stop;
  /* host staging for reductions */
  pthread_mutex_t stage_lock;
  void *stage_a, *stage_b;
  size_t stage_bytes;
  char path[32];
};

typedef struct ze_peer_win {
  void *dev;       /* peer window in this process's address space */
  void *ipc_base;  /* opened IPC allocation (to close) */
  char *seg;       /* peer's signal segment mapped here */
  uint64_t *my_count;
} ze_peer_win_t;

struct ul_backend_window {
  void *base;
  size_t size;
  int nsig;
  size_t seg_len;
  ze_peer_win_t *peers;
};

/* ---------------------------------------------------------------- helpers */

static ul_result_t ze_fail(ul_backend_comm_t *c, const char *call, ze_result_t r) {
  char buf[320];
  ulze_format_error(buf, sizeof(buf), call, (uint32_t)r, NULL);
  return ul_backend_set_error(c ? c->core : NULL, ulze_result((uint32_t)r), "ze backend: %s", buf);
}

static int ze_aborted(ul_backend_comm_t *c) { return c->dead || (c->abort_flag && *c->abort_flag); }

/* UL_OK to keep waiting, else the error to return. */
static ul_result_t ze_wait_check(ul_backend_comm_t *c, double t0, int timeout_ms, const char *what) {
  int aborted = ze_aborted(c);
  /* An abort is reported before a failed signal delivery. */
  if (!aborted && c->async_err != ZE_RESULT_SUCCESS)
    return ze_fail(c, "zeEventQueryStatus (signal)", c->async_err);
  return ulbu_wait_step(c->core, c->rank, aborted, t0, timeout_ms, what);
}

static ul_result_t ze_board_wait(void *arg, double t0, const char *what) {
  ul_backend_comm_t *c = arg;
  return ze_wait_check(c, t0, c->timeout_ms, what);
}

static uint64_t ze_host_hash(void) {
  char buf[512] = "";
  gethostname(buf, 255);
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    size_t l = strlen(buf);
    ssize_t n = read(fd, buf + l, sizeof(buf) - l - 1);
    if (n > 0) buf[l + (size_t)n] = '\0';
    close(fd);
  }
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = buf; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

/* ------------------------------------------------------- events / signals */

/* Deliver completed signals in issue order. */
static void ze_progress(ul_backend_comm_t *c) {
  pthread_mutex_lock(&c->evlock);
  while (c->pend_head != c->pend_tail) {
    ze_pending_t *p = &c->pend[c->pend_head % ZE_NEVENTS];
    ze_result_t r = zeEventQueryStatus(c->ev[p->ev]);
    if (r == ZE_RESULT_NOT_READY) break;
    if (r != ZE_RESULT_SUCCESS) {
      c->async_err = r;
      break;
    }
    /* Only the sender writes its cell; a store-max keeps it monotone. */
    uint64_t cur = atomic_load(p->cell);
    while (cur < p->value && !atomic_compare_exchange_weak(p->cell, &cur, p->value)) {
    }
    zeEventHostReset(c->ev[p->ev]);
    c->ev_free[c->ev_nfree++] = p->ev;
    c->pend_head++;
  }
  pthread_mutex_unlock(&c->evlock);
}

static int ze_pending_on(ul_backend_comm_t *c, ze_command_list_handle_t list) {
  int any = 0;
  pthread_mutex_lock(&c->evlock);
  for (uint64_t i = c->pend_head; i != c->pend_tail && !any; i++)
    any = c->pend[i % ZE_NEVENTS].list == list;
  pthread_mutex_unlock(&c->evlock);
  return any;
}

static void *ze_progress_main(void *arg) {
  ul_backend_comm_t *c = arg;
  for (;;) {
    pthread_mutex_lock(&c->evlock);
    while (!c->stop && c->pend_head == c->pend_tail) pthread_cond_wait(&c->evcond, &c->evlock);
    int stop = c->stop;
    pthread_mutex_unlock(&c->evlock);
    if (stop) break;
    ze_progress(c);
    struct timespec ts = {0, 10000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static ul_result_t ze_event_get(ul_backend_comm_t *c, int *idx) {
  double t0 = ulbu_now_ms();
  for (;;) {
    pthread_mutex_lock(&c->evlock);
    if (c->ev_nfree > 0) {
      *idx = c->ev_free[--c->ev_nfree];
      pthread_mutex_unlock(&c->evlock);
      return UL_OK;
    }
    pthread_mutex_unlock(&c->evlock);
    ze_progress(c);
    ul_result_t rc = ze_wait_check(c, t0, c->timeout_ms, "waiting for a free completion event");
    if (rc != UL_OK) return rc;
  }
}

static void ze_event_put(ul_backend_comm_t *c, int idx) {
  pthread_mutex_lock(&c->evlock);
  zeEventHostReset(c->ev[idx]);
  c->ev_free[c->ev_nfree++] = idx;
  pthread_mutex_unlock(&c->evlock);
}

/* ---------------------------------------------------------------- streams */

static inline struct ul_backend_stream *ze_st(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return s ? s : &c->internal;
}

/* Barrier before a command that depends on earlier ones of the list. */
static ul_result_t ze_order(ul_backend_comm_t *c, struct ul_backend_stream *st) {
  if (!st->dirty) return UL_OK;
  ze_result_t r = zeCommandListAppendBarrier(st->list, NULL, 0, NULL);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeCommandListAppendBarrier", r);
  st->dirty = 0;
  return UL_OK;
}

static ul_result_t ze_copy(ul_backend_comm_t *c, struct ul_backend_stream *st, void *dst,
                           const void *src, size_t bytes, const char *what) {
  ul_result_t rc = ze_order(c, st);
  if (rc != UL_OK) return rc;
  ze_result_t r = zeCommandListAppendMemoryCopy(st->list, dst, src, bytes, NULL, 0, NULL);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, what, r);
  st->dirty = 1;
  st->ops++;
  return UL_OK;
}

/* Wait (host) until everything appended to st so far completed and its signals were
 * delivered. */
static ul_result_t ze_list_sync(ul_backend_comm_t *c, struct ul_backend_stream *st, int timeout_ms) {
  int ev;
  ul_result_t rc = ze_event_get(c, &ev);
  if (rc != UL_OK) return rc;
  ze_result_t r = zeCommandListAppendBarrier(st->list, c->ev[ev], 0, NULL);
  if (r != ZE_RESULT_SUCCESS) {
    ze_event_put(c, ev);
    return ze_fail(c, "zeCommandListAppendBarrier (synchronize)", r);
  }
  st->dirty = 0;
  double t0 = ulbu_now_ms();
  for (;;) {
    r = zeEventQueryStatus(c->ev[ev]);
    if (r == ZE_RESULT_SUCCESS) break;
    if (r != ZE_RESULT_NOT_READY) {
      rc = ze_fail(c, "zeEventQueryStatus (synchronize)", r);
      break;
    }
    ze_progress(c);
    if ((rc = ze_wait_check(c, t0, timeout_ms, "work on the stream")) != UL_OK) break;
  }
  if (rc != UL_OK) {
    /* The device may still signal this event: never reuse it. */
    return rc;
  }
  ze_event_put(c, ev);
  while (ze_pending_on(c, st->list)) {
    ze_progress(c);
    if ((rc = ze_wait_check(c, t0, timeout_ms, "signal delivery")) != UL_OK) return rc;
  }
  return UL_OK;
}

/* NULL stream: run now. */
static ul_result_t ze_done(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return s ? UL_OK : ze_list_sync(c, &c->internal, c->timeout_ms);
}

static ul_result_t ze_list_create(ul_backend_comm_t *c, ze_command_list_handle_t *out) {
  ze_devinfo_t *d = &ze_devs[c->device];
  ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, d->copy_ordinal, 0, 0,
                                ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
                                ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_result_t r = zeCommandListCreateImmediate(ze_ctx, d->h, &qd, out);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeCommandListCreateImmediate (copy engine)", r);
  return UL_OK;
}

static ul_result_t ze_stream_create(ul_backend_comm_t *c, ul_backend_stream_t **out) {
  ul_backend_stream_t *s = calloc(1, sizeof(*s));
  if (!s) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  ul_result_t rc = ze_list_create(c, &s->list);
  if (rc != UL_OK) {
    free(s);
    return rc;
  }
  s->c = c;
  s->owned = 1;
  s->probe = -1;
  *out = s;
  return UL_OK;
}

/* native: a ze_command_list_handle_t the caller created as an immediate list on this
 * communicator's device and context (appended commands must execute without a queue). */
static ul_result_t ze_stream_wrap(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out) {
  ul_backend_stream_t *s = calloc(1, sizeof(*s));
  if (!s) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  s->c = c;
  s->list = (ze_command_list_handle_t)native;
  s->dirty = 1; /* unknown earlier work of the caller */
  s->probe = -1;
  *out = s;
  return UL_OK;
}

static ul_result_t ze_stream_synchronize(ul_backend_stream_t *s, int timeout_ms) {
  return ze_list_sync(s->c, s, timeout_ms);
}

static ul_result_t ze_stream_query(ul_backend_stream_t *s) {
  ul_backend_comm_t *c = s->c;
  if (s->probe >= 0) {
    ze_result_t r = zeEventQueryStatus(c->ev[s->probe]);
    if (r == ZE_RESULT_NOT_READY) return UL_IN_PROGRESS;
    if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeEventQueryStatus (query)", r);
    ze_event_put(c, s->probe);
    s->probe = -1;
    if (s->probe_ops == s->ops) {
      ze_progress(c);
      return ze_pending_on(c, s->list) ? UL_IN_PROGRESS : UL_OK;
    }
  }
  int ev;
  ul_result_t rc = ze_event_get(c, &ev);
  if (rc != UL_OK) return rc;
  ze_result_t r = zeCommandListAppendBarrier(s->list, c->ev[ev], 0, NULL);
  if (r != ZE_RESULT_SUCCESS) {
    ze_event_put(c, ev);
    return ze_fail(c, "zeCommandListAppendBarrier (query)", r);
  }
  s->dirty = 0;
  s->probe = ev;
  s->probe_ops = s->ops;
  return ze_stream_query(s); /* probe set: one level of recursion at most */
}

static ul_result_t ze_stream_destroy(ul_backend_stream_t *s) {
  ul_backend_comm_t *c = s->c;
  ul_result_t rc = c->dead ? UL_OK : ze_list_sync(c, s, c->timeout_ms);
  if (s->probe >= 0 && rc == UL_OK) ze_event_put(c, s->probe);
  if (s->owned) zeCommandListDestroy(s->list);
  free(s);
  return rc;
}

/* ------------------------------------------------------------------- board */

static const ulbu_board_conf_t ze_board_conf = {"ze backend", "ulze", ZE_SLOT_BYTES, 0,
                                                ze_board_wait};

/* Publish *mine, then read every rank's slot into all[] (collective). */
static ul_result_t ze_allgather(ul_backend_comm_t *c, const ze_slot_t *mine, ze_slot_t *all,
                                const char *what) {
  return ulbu_board_allgather(&c->board, mine, all, sizeof(*mine), what);
}

/* --------------------------------------------------------------- lifecycle */

static int ze_has_extension(const char *want) {
  uint32_t n = 0;
  if (zeDriverGetExtensionProperties(ze_drv, &n, NULL) != ZE_RESULT_SUCCESS || n == 0) return 0;
  ze_driver_extension_properties_t *e = calloc(n, sizeof(*e));
  if (!e) return 0;
  int found = 0;
  if (zeDriverGetExtensionProperties(ze_drv, &n, e) == ZE_RESULT_SUCCESS)
    for (uint32_t i = 0; i < n && !found; i++) found = strcmp(e[i].name, want) == 0;
  free(e);
  return found;
}

/* Copy-only engine group of a device, else one that can copy. */
static void ze_pick_copy_group(ze_devinfo_t *d) {
  uint32_t n = 0;
  d->copy_ordinal = 0;
  d->copy_is_compute = 1;
  if (zeDeviceGetCommandQueueGroupProperties(d->h, &n, NULL) != ZE_RESULT_SUCCESS || n == 0) return;
  ze_command_queue_group_properties_t *g = calloc(n, sizeof(*g));
  if (!g) return;
  for (uint32_t i = 0; i < n; i++) g[i].stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
  if (zeDeviceGetCommandQueueGroupProperties(d->h, &n, g) == ZE_RESULT_SUCCESS) {
    int any = -1, only = -1;
    for (uint32_t i = 0; i < n; i++) {
      if (!(g[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY)) continue;
      if (any < 0) any = (int)i;
      if (!(g[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) && only < 0) only = (int)i;
    }
    if (only >= 0) {
      d->copy_ordinal = (uint32_t)only;
      d->copy_is_compute = 0;
    } else if (any >= 0) {
      d->copy_ordinal = (uint32_t)any;
    }
  }
  free(g);
}

static void ze_add_device(ze_device_handle_t h, int root, int sub) {
  if (ze_ndev >= ZE_MAX_DEVICES) return;
  ze_devinfo_t *d = &ze_devs[ze_ndev++];
  memset(d, 0, sizeof(*d));
  d->h = h;
  d->root = root;
  d->sub = sub;
  ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
  if (zeDeviceGetProperties(h, &p) == ZE_RESULT_SUCCESS) {
    memcpy(d->uuid, p.uuid.id, sizeof(d->uuid));
    d->clock_mhz = p.coreClockRate;
    snprintf(d->name, sizeof(d->name), "%.63s", p.name);
  }
  ze_pick_copy_group(d);
}

static ul_result_t ze_init(char *reason, size_t reason_len) {
  int want_sub = (int)ul_backend_param_int(
      "ZE_SUBDEVICES", 0, "ze backend: 1 = one rank per sub-device (tile), 0 = per root device");
  ul_backend_param_int("ZE_STAGE_BYTES", 4 << 20,
                       "ze backend: host staging buffer for local reductions (v1), bytes");
  if (ze_ctx) return UL_OK; /* probed before (the registry probes once, tests may reset) */
  ze_ndev = 0;
  ze_result_t r = zeInit(ZE_INIT_FLAG_GPU_ONLY);
  if (r != ZE_RESULT_SUCCESS) {
    ulze_format_error(reason, reason_len, "zeInit", (uint32_t)r,
                      r == ZE_RESULT_ERROR_UNINITIALIZED ? "no Level Zero driver found" : NULL);
    return UL_ERR_UNAVAILABLE;
  }
  uint32_t nd = 0;
  r = zeDriverGet(&nd, NULL);
  if (r != ZE_RESULT_SUCCESS || nd == 0) {
    ulze_format_error(reason, reason_len, "zeDriverGet", (uint32_t)r, "no Level Zero driver");
    return UL_ERR_UNAVAILABLE;
  }
  ze_driver_handle_t drv[16];
  if (nd > 16) nd = 16;
  if ((r = zeDriverGet(&nd, drv)) != ZE_RESULT_SUCCESS) {
    ulze_format_error(reason, reason_len, "zeDriverGet", (uint32_t)r, NULL);
    return UL_ERR_UNAVAILABLE;
  }
  for (uint32_t i = 0; i < nd && ze_ndev == 0; i++) {
    uint32_t n = 0;
    if (zeDeviceGet(drv[i], &n, NULL) != ZE_RESULT_SUCCESS || n == 0) continue;
    ze_device_handle_t devs[ZE_MAX_DEVICES];
    if (n > ZE_MAX_DEVICES) n = ZE_MAX_DEVICES;
    if (zeDeviceGet(drv[i], &n, devs) != ZE_RESULT_SUCCESS) continue;
    for (uint32_t k = 0; k < n; k++) {
      ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
      if (zeDeviceGetProperties(devs[k], &p) != ZE_RESULT_SUCCESS || p.type != ZE_DEVICE_TYPE_GPU)
        continue;
      uint32_t ns = 0;
      if (want_sub && zeDeviceGetSubDevices(devs[k], &ns, NULL) == ZE_RESULT_SUCCESS && ns > 0) {
        ze_device_handle_t subs[16];
        if (ns > 16) ns = 16;
        if (zeDeviceGetSubDevices(devs[k], &ns, subs) == ZE_RESULT_SUCCESS) {
          for (uint32_t s = 0; s < ns; s++) ze_add_device(subs[s], (int)k, (int)s);
          continue;
        }
      }
      ze_add_device(devs[k], (int)k, -1);
    }
    if (ze_ndev > 0) ze_drv = drv[i];
  }
  if (ze_ndev == 0) {
    snprintf(reason, reason_len, "zeDeviceGet: no Level Zero GPU device in %u driver(s)", nd);
    return UL_ERR_UNAVAILABLE;
  }
  ze_context_desc_t cd = {ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
  if ((r = zeContextCreate(ze_drv, &cd, &ze_ctx)) != ZE_RESULT_SUCCESS) {
    ulze_format_error(reason, reason_len, "zeContextCreate", (uint32_t)r, NULL);
    ze_ndev = 0;
    return UL_ERR_UNAVAILABLE;
  }
  ze_have_bw_ext = ze_has_extension("ZE_experimental_bandwidth_properties");
  ze_have_fabric_ext = ze_has_extension("ZE_experimental_fabric");
  ze_fd_from_handle = (ze_fd_from_handle_fn)dlsym(RTLD_DEFAULT, "zeMemGetFileDescriptorFromIpcHandleExp");
  ze_handle_from_fd = (ze_handle_from_fd_fn)dlsym(RTLD_DEFAULT, "zeMemGetIpcHandleFromFileDescriptorExp");
  ze_api_version_t v = 0;
  ze_driver_properties_t dp = {.stype = ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES};
  zeDriverGetApiVersion(ze_drv, &v);
  zeDriverGetProperties(ze_drv, &dp);
  snprintf(ze_version, sizeof(ze_version), "Level Zero API %u.%u, driver %u", ZE_MAJOR_VERSION(v),
           ZE_MINOR_VERSION(v), (unsigned)dp.driverVersion);
  return UL_OK;
}

static void ze_fini(void) {
  if (ze_ctx) zeContextDestroy(ze_ctx);
  ze_ctx = NULL;
  ze_ndev = 0;
}

static ul_result_t ze_query_caps(ul_backend_caps_t *caps) {
  if (ze_ndev == 0) /* no driver: say which headers the plugin was built with */
    snprintf(ze_version, sizeof(ze_version), "Level Zero headers %u.%u, no driver",
             ZE_MAJOR_VERSION(ZE_API_VERSION_CURRENT), ZE_MINOR_VERSION(ZE_API_VERSION_CURRENT));
  caps->features = UL_FEATURE_THREAD_RANKS | UL_FEATURE_PROCESS_RANKS | UL_FEATURE_INIT_ALL |
                   UL_FEATURE_STREAMS | UL_FEATURE_P2P | UL_FEATURE_ONE_SIDED |
                   UL_FEATURE_DEVICE_MEMORY | UL_FEATURE_GENERIC_COLL | UL_FEATURE_SPLIT;
  caps->flags = 0; /* native streams (command lists); buffers are device memory */
  caps->native_colls = 0;
  caps->dtypes = ulze_dtype_mask();
  caps->reduce_dtypes = ulze_dtype_mask(); /* host-staged ul_reduce_local covers all */
  caps->ops = (1u << UL_OP_COUNT) - 1;
  caps->max_ranks = 0;
  snprintf(caps->version, sizeof(caps->version), "%s", ze_version);
  return UL_OK;
}

static ul_result_t ze_get_unique_id(unsigned char *payload, size_t bytes) {
  return ulbu_token_id_make(payload, bytes, ZE_ID_MAGIC, "ze backend");
}

static void ze_alloc_release(void *ptr, int tag, void *arg) {
  (void)tag, (void)arg;
  zeMemFree(ze_ctx, ptr);
}

static void ze_comm_free(ul_backend_comm_t *c) {
  if (!c) return;
  if (c->progress_started) {
    pthread_mutex_lock(&c->evlock);
    c->stop = 1;
    pthread_cond_broadcast(&c->evcond);
    pthread_mutex_unlock(&c->evlock);
    pthread_join(c->progress, NULL);
  }
  if (c->internal.list) zeCommandListDestroy(c->internal.list);
  for (int i = 0; i < ZE_NEVENTS; i++)
    if (c->ev[i]) zeEventDestroy(c->ev[i]);
  if (c->pool) zeEventPoolDestroy(c->pool);
  ulbu_alloc_list_destroy(&c->allocs, ze_alloc_release, NULL);
  if (c->stage_a) zeMemFree(ze_ctx, c->stage_a);
  if (c->stage_b) zeMemFree(ze_ctx, c->stage_b);
  ulbu_board_leave(&c->board);
  free(c->idents);
  free(c->peer_dev);
  free(c->links);
  pthread_mutex_destroy(&c->evlock);
  pthread_cond_destroy(&c->evcond);
  pthread_mutex_destroy(&c->stage_lock);
  free(c);
}

static int ze_find_device(const uint8_t *uuid) {
  for (int i = 0; i < ze_ndev; i++)
    if (memcmp(ze_devs[i].uuid, uuid, 16) == 0) return i;
  return -1;
}

/* Facts the driver gives about the path from local device a to local device b. */
static void ze_pair_facts(int a, int b, ulze_pair_facts_t *f) {
  ze_devinfo_t *da = &ze_devs[a], *db = &ze_devs[b];
  f->peer_visible = 1;
  f->same_device = a == b;
  if (a == b) return;
  f->sibling_tiles = da->root == db->root && da->sub >= 0 && db->sub >= 0;
  f->clock_mhz = da->clock_mhz;
  ze_bool_t can = 0;
  if (zeDeviceCanAccessPeer(da->h, db->h, &can) == ZE_RESULT_SUCCESS) f->can_access = can != 0;
  ze_device_p2p_bandwidth_exp_properties_t bw = {.stype = ZE_STRUCTURE_TYPE_DEVICE_P2P_BANDWIDTH_EXP_PROPERTIES};
  ze_device_p2p_properties_t pp = {.stype = ZE_STRUCTURE_TYPE_DEVICE_P2P_PROPERTIES};
  if (ze_have_bw_ext) pp.pNext = &bw;
  if (zeDeviceGetP2PProperties(da->h, db->h, &pp) == ZE_RESULT_SUCCESS) {
    f->p2p_flags = pp.flags;
    if (ze_have_bw_ext) {
      f->have_p2p_bw = 1;
      f->logical_bw = bw.logicalBandwidth;
      f->physical_bw = bw.physicalBandwidth;
      f->bw_unit = (uint32_t)bw.bandwidthUnit;
      f->logical_lat = bw.logicalLatency;
      f->physical_lat = bw.physicalLatency;
      f->lat_unit = (uint32_t)bw.latencyUnit;
    }
  }
  if (!ze_have_fabric_ext) return;
  ze_fabric_vertex_handle_t va = NULL, vb = NULL;
  if (zeDeviceGetFabricVertexExp(da->h, &va) != ZE_RESULT_SUCCESS ||
      zeDeviceGetFabricVertexExp(db->h, &vb) != ZE_RESULT_SUCCESS)
    return;
  uint32_t n = 0;
  if (zeFabricEdgeGetExp(va, vb, &n, NULL) != ZE_RESULT_SUCCESS || n == 0) return;
  ze_fabric_edge_handle_t edges[32];
  if (n > 32) n = 32;
  if (zeFabricEdgeGetExp(va, vb, &n, edges) != ZE_RESULT_SUCCESS || n == 0) return;
  ze_fabric_edge_exp_properties_t ep = {.stype = ZE_STRUCTURE_TYPE_FABRIC_EDGE_EXP_PROPERTIES};
  if (zeFabricEdgeGetPropertiesExp(edges[0], &ep) != ZE_RESULT_SUCCESS) return;
  f->nedges = (int)n;
  snprintf(f->edge_model, sizeof(f->edge_model), "%.31s", ep.model);
  f->edge_bw = ep.bandwidth;
  f->edge_bw_unit = (uint32_t)ep.bandwidthUnit;
  f->edge_lat = ep.latency;
  f->edge_lat_unit = (uint32_t)ep.latencyUnit;
}

static ul_result_t ze_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                ul_backend_comm_props_t *props) {
  *out = NULL;
  ulbu_token_id_t p;
  ul_result_t prc = ulbu_token_id_read(a, ZE_ID_MAGIC, "ze backend", "ze", &p);
  if (prc != UL_OK) return prc;
  int device = a->device != UL_CONFIG_UNDEF ? a->device : (ze_ndev ? a->rank % ze_ndev : 0);
  if (device < 0 || device >= ze_ndev)
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "ze backend: device %d out of range (%d visible)", device, ze_ndev);
  ul_backend_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  c->core = a->comm;
  c->rank = a->rank;
  c->nranks = a->nranks;
  c->timeout_ms = a->timeout_ms;
  c->abort_flag = a->abort_flag;
  c->device = device;
  c->dev = ze_devs[device].h;
  c->internal.c = c;
  c->internal.probe = -1;
  ulbu_alloc_list_init(&c->allocs);
  pthread_mutex_init(&c->evlock, NULL);
  pthread_cond_init(&c->evcond, NULL);
  pthread_mutex_init(&c->stage_lock, NULL);
  snprintf(c->path, sizeof(c->path), "%s",
           ze_devs[device].copy_is_compute ? "copy-engine (compute)" : "copy-engine");
  ul_result_t rc = UL_OK;
  ze_result_t r;
  ze_slot_t mine, *all = NULL;
  if ((rc = ze_list_create(c, &c->internal.list)) != UL_OK) goto fail;
  ze_event_pool_desc_t pd = {ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL, ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
                             ZE_NEVENTS};
  if ((r = zeEventPoolCreate(ze_ctx, &pd, 1, &c->dev, &c->pool)) != ZE_RESULT_SUCCESS) {
    rc = ze_fail(c, "zeEventPoolCreate", r);
    goto fail;
  }
  for (int i = 0; i < ZE_NEVENTS; i++) {
    ze_event_desc_t ed = {ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, (uint32_t)i, ZE_EVENT_SCOPE_FLAG_HOST,
                          ZE_EVENT_SCOPE_FLAG_HOST};
    if ((r = zeEventCreate(c->pool, &ed, &c->ev[i])) != ZE_RESULT_SUCCESS) {
      rc = ze_fail(c, "zeEventCreate", r);
      goto fail;
    }
    c->ev_free[c->ev_nfree++] = ZE_NEVENTS - 1 - i;
  }
  if (pthread_create(&c->progress, NULL, ze_progress_main, c) != 0) {
    rc = ul_backend_set_error(a->comm, UL_ERR_SYSTEM, "ze backend: cannot start progress thread");
    goto fail;
  }
  c->progress_started = 1;
  c->idents = calloc((size_t)c->nranks, sizeof(*c->idents));
  c->peer_dev = calloc((size_t)c->nranks, sizeof(int));
  c->links = calloc((size_t)c->nranks, sizeof(*c->links));
  all = calloc((size_t)c->nranks, sizeof(*all));
  if (!c->idents || !c->peer_dev || !c->links || !all) {
    rc = ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "ze backend: out of memory");
    goto fail;
  }
  if ((rc = ulbu_board_join(&c->board, &ze_board_conf, c, c->core, c->rank, c->nranks,
                           p.token)) != UL_OK)
    goto fail;
  memset(&mine, 0, sizeof(mine));
  mine.ident.host_hash = ze_host_hash();
  mine.ident.pid = (int32_t)getpid();
  mine.ident.device = device;
  memcpy(mine.ident.uuid, ze_devs[device].uuid, 16);
  mine.ident.root = ze_devs[device].root;
  mine.ident.sub = ze_devs[device].sub;
  if ((rc = ze_allgather(c, &mine, all, "comm init")) != UL_OK) goto fail;
  mine.p2p_ok = 1;
  c->same_process = 1;
  for (int q = 0; q < c->nranks; q++) {
    c->idents[q] = all[q].ident;
    if (all[q].ident.pid != mine.ident.pid) c->same_process = 0;
    ulze_pair_facts_t f;
    memset(&f, 0, sizeof(f));
    f.self = q == c->rank;
    f.same_host = all[q].ident.host_hash == mine.ident.host_hash;
    int d = f.same_host ? ze_find_device(all[q].ident.uuid) : -1;
    c->peer_dev[q] = d;
    if (!f.self && d >= 0) ze_pair_facts(device, d, &f);
    c->links[q].peer = q;
    ulze_describe_pair(&f, &c->links[q]);
    if (f.self || f.same_device) continue;
    if (!f.same_host) {
      mine.p2p_ok = 0;
      snprintf(mine.why, sizeof(mine.why), "rank %d is on another host; the ze backend connects "
               "GPUs of one host (use mpi across hosts)", q);
    } else if (d < 0 || !f.can_access) {
      mine.p2p_ok = 0;
      snprintf(mine.why, sizeof(mine.why), "device %d (rank %d) cannot access the device of rank "
               "%d (zeDeviceCanAccessPeer); ze backend v1 needs peer access", device, c->rank, q);
    }
  }
  /* Agree: every rank fails with the same sentence if one pair lacks peer access. */
  if ((rc = ze_allgather(c, &mine, all, "comm init")) != UL_OK) goto fail;
  for (int q = 0; q < c->nranks; q++)
    if (!all[q].p2p_ok) {
      all[q].why[sizeof(all[q].why) - 1] = '\0';
      rc = ul_backend_set_error(a->comm, UL_ERR_UNSUPPORTED, "ze backend: %s", all[q].why);
      goto fail;
    }
  ul_backend_log(UL_LOG_INFO, "ze", "rank %d: device %d (%s), %s", c->rank, device,
                 ze_devs[device].name, c->path);
  free(all);
  if (props) {
    props->load_store_peers = 0; /* device memory: the host cannot load/store it */
    snprintf(props->path, sizeof(props->path), "%s", c->path);
  }
  *out = c;
  return UL_OK;
fail:
  free(all);
  ze_comm_free(c);
  return rc;
}

typedef struct ze_init_job {
  ul_backend_comm_args_t args;
  ul_backend_comm_t **out;
  ul_backend_comm_props_t *props;
  ul_result_t rc;
} ze_init_job_t;

static void *ze_init_thread(void *arg) {
  ze_init_job_t *j = arg;
  j->rc = ze_comm_init(&j->args, j->out, j->props);
  return NULL;
}

/* One process, several devices: a fresh id and one joining thread per rank. */
static ul_result_t ze_comm_init_all(const ul_backend_comm_args_t *args, int ndev,
                                    ul_backend_comm_t **out, ul_backend_comm_props_t *props) {
  unsigned char payload[UL_BACKEND_ID_PAYLOAD_BYTES];
  ul_result_t rc = ze_get_unique_id(payload, sizeof(payload));
  if (rc != UL_OK) return rc;
  ze_init_job_t *jobs = calloc((size_t)ndev, sizeof(*jobs));
  pthread_t *th = calloc((size_t)ndev, sizeof(*th));
  int *started = calloc((size_t)ndev, sizeof(int));
  if (!jobs || !th || !started) {
    free(jobs), free(th), free(started);
    return ul_backend_set_error(args[0].comm, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  }
  for (int i = 0; i < ndev; i++) {
    jobs[i].args = args[i];
    jobs[i].args.id_payload = payload;
    jobs[i].args.id_payload_bytes = sizeof(payload);
    jobs[i].out = &out[i];
    jobs[i].props = &props[i];
    started[i] = pthread_create(&th[i], NULL, ze_init_thread, &jobs[i]) == 0;
    if (!started[i]) jobs[i].rc = ul_backend_set_error(args[i].comm, UL_ERR_SYSTEM,
                                                       "ze backend: pthread_create failed");
  }
  for (int i = 0; i < ndev; i++)
    if (started[i]) pthread_join(th[i], NULL);
  for (int i = 0; i < ndev && rc == UL_OK; i++) rc = jobs[i].rc;
  if (rc != UL_OK)
    for (int i = 0; i < ndev; i++)
      if (out[i]) {
        ze_comm_free(out[i]);
        out[i] = NULL;
      }
  free(jobs), free(th), free(started);
  return rc;
}

static ul_result_t ze_comm_finalize(ul_backend_comm_t *c) {
  ul_result_t rc = ze_list_sync(c, &c->internal, c->timeout_ms);
  if (rc != UL_OK) return rc;
  return ulbu_board_barrier(&c->board, "comm finalize");
}

static ul_result_t ze_comm_destroy(ul_backend_comm_t *c) {
  ze_comm_free(c);
  return UL_OK;
}

static ul_result_t ze_comm_abort(ul_backend_comm_t *c) {
  c->dead = 1;
  pthread_mutex_lock(&c->evlock);
  pthread_cond_broadcast(&c->evcond);
  pthread_mutex_unlock(&c->evlock);
  return UL_OK;
}

static ul_result_t ze_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  *out = c->links[peer];
  out->peer = peer;
  return UL_OK;
}

/* ------------------------------------------------------------------ memory */

static ul_result_t ze_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  void *p = NULL;
  ze_device_mem_alloc_desc_t d = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  ze_result_t r = zeMemAllocDevice(ze_ctx, &d, size, 64, c->dev, &p);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeMemAllocDevice", r);
  ul_result_t rc = ulbu_alloc_add(&c->allocs, c->core, "ze backend", p, size, 0);
  if (rc != UL_OK) {
    zeMemFree(ze_ctx, p);
    return rc;
  }
  *ptr = p;
  return UL_OK;
}

static ul_result_t ze_mem_free(ul_backend_comm_t *c, void *ptr) {
  ul_result_t rc = ulbu_alloc_remove(&c->allocs, c->core, "ze backend", ptr, NULL);
  if (rc != UL_OK) return rc;
  zeMemFree(ze_ctx, ptr);
  return UL_OK;
}

static void ze_window_free(ul_backend_comm_t *c, ul_backend_window_t *w) {
  if (!w) return;
  for (int r = 0; w->peers && r < c->nranks; r++) {
    ze_peer_win_t *pw = &w->peers[r];
    if (pw->ipc_base) zeMemCloseIpcHandle(ze_ctx, pw->ipc_base);
    if (pw->seg) munmap(pw->seg, w->seg_len);
    free(pw->my_count);
  }
  free(w->peers);
  free(w);
}

typedef struct ze_serve_job {
  int listen_fd, fd;
  int32_t *pids;
  int npids, nconn, timeout_ms;
  volatile int stop; /* set when this rank gives up or aborts: peers will not connect */
  _Atomic int done;
  ul_result_t rc;
  char err[200];
} ze_serve_job_t;

static void *ze_serve_main(void *arg) {
  ze_serve_job_t *j = arg;
  j->rc = ulze_ipc_serve(j->listen_fd, j->fd, j->pids, j->npids, j->nconn, j->timeout_ms,
                         &j->stop, j->err, sizeof(j->err));
  atomic_store(&j->done, 1);
  return NULL;
}

/* Export [base, base+size) for ranks of other processes: IPC handle, descriptor, and a
 * socket that hands the descriptor to them. */
static ul_result_t ze_export(ul_backend_comm_t *c, void *base, unsigned seq, ze_slot_t *mine,
                             ze_serve_job_t *job) {
  void *abase = NULL;
  size_t asize = 0;
  ze_result_t r = zeMemGetAddressRange(ze_ctx, base, &abase, &asize);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeMemGetAddressRange (window memory must come from ul_mem_alloc)", r);
  ze_ipc_mem_handle_t h;
  if ((r = zeMemGetIpcHandle(ze_ctx, abase, &h)) != ZE_RESULT_SUCCESS)
    return ze_fail(c, "zeMemGetIpcHandle", r);
  int fd = -1;
  uint64_t fd64 = 0;
  if (ze_fd_from_handle && ze_fd_from_handle(ze_ctx, h, &fd64) == ZE_RESULT_SUCCESS) fd = (int)fd64;
  else memcpy(&fd, h.data, sizeof(fd));
  mine->has_ipc = 1;
  memcpy(mine->ipc, h.data, sizeof(mine->ipc));
  mine->ipc_offset = (uint64_t)((char *)base - (char *)abase);
  char name[96], err[200];
  ulbu_board_name(&c->board, name, sizeof(name), "ipc", (int)seq, c->rank);
  int lfd = ulze_ipc_listen(name, err, sizeof(err));
  if (lfd < 0) return ul_backend_set_error(c->core, UL_ERR_SYSTEM, "ze backend: %s", err);
  job->listen_fd = lfd;
  job->fd = fd;
  job->timeout_ms = c->timeout_ms;
  job->pids = calloc((size_t)c->nranks, sizeof(int32_t));
  if (!job->pids) {
    close(lfd);
    return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  }
  for (int q = 0; q < c->nranks; q++)
    if (c->idents[q].pid != c->idents[c->rank].pid) {
      job->pids[job->npids++] = c->idents[q].pid;
      job->nconn++;
    }
  return UL_OK;
}

static ul_result_t ze_import(ul_backend_comm_t *c, unsigned seq, int q, const ze_slot_t *s,
                             ze_peer_win_t *pw) {
  char name[96], err[200];
  ulbu_board_name(&c->board, name, sizeof(name), "ipc", (int)seq, q);
  int fd = -1;
  ul_result_t rc = ulze_ipc_fetch(name, c->timeout_ms, c->abort_flag, &fd, err, sizeof(err));
  if (rc != UL_OK)
    return ul_backend_set_error(c->core, rc, "ze backend: IPC handle of rank %d: %s", q, err);
  ze_ipc_mem_handle_t h;
  memcpy(h.data, s->ipc, sizeof(h.data));
  if (!ze_handle_from_fd || ze_handle_from_fd(ze_ctx, (uint64_t)fd, &h) != ZE_RESULT_SUCCESS) {
    memcpy(h.data, s->ipc, sizeof(h.data));
    memcpy(h.data, &fd, sizeof(fd)); /* the descriptor, now valid in this process */
  }
  void *p = NULL;
  ze_result_t r = zeMemOpenIpcHandle(ze_ctx, c->dev, h, 0, &p);
  close(fd); /* the driver imported the buffer; our copy of the descriptor is not needed */
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeMemOpenIpcHandle", r);
  pw->ipc_base = p;
  pw->dev = (char *)p + s->ipc_offset;
  return UL_OK;
}

static ul_result_t ze_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                      int extra_signals, ul_backend_window_t **out,
                                      void **peer_bases) {
  ul_result_t rc = UL_OK;
  ze_slot_t mine, *all = calloc((size_t)c->nranks, sizeof(ze_slot_t));
  ul_backend_window_t *w = calloc(1, sizeof(*w));
  ze_serve_job_t job;
  memset(&job, 0, sizeof(job));
  job.listen_fd = -1;
  pthread_t server;
  int serving = 0;
  if (w) w->peers = calloc((size_t)c->nranks, sizeof(ze_peer_win_t));
  if (!w || !all || !w->peers) {
    free(all);
    ze_window_free(c, w);
    return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  }
  unsigned seq = c->win_seq++;
  w->base = base;
  w->size = size;
  w->nsig = UL_WINDOW_SIGNALS + (extra_signals > 0 ? extra_signals : 0);
  size_t sig_bytes = (size_t)w->nsig * (size_t)c->nranks * sizeof(uint64_t);
  w->seg_len = (sig_bytes + 4095) & ~(size_t)4095;
  char name[96];
  ulbu_board_name(&c->board, name, sizeof(name), "w", (int)seq, c->rank);
  /* On failure still take part in the allgather below so peers fail fast rather than
   * time out. */
  rc = ulbu_shm_create(c->core, "ze backend", name, w->seg_len);
  memset(&mine, 0, sizeof(mine));
  mine.ident = c->idents[c->rank];
  mine.raw_base = (uint64_t)(uintptr_t)base;
  mine.size = size;
  if (rc == UL_OK && !c->same_process && base && size) {
    rc = ze_export(c, base, seq, &mine, &job);
    if (rc == UL_OK && job.nconn > 0) {
      serving = pthread_create(&server, NULL, ze_serve_main, &job) == 0;
      if (!serving) {
        close(job.listen_fd);
        rc = ul_backend_set_error(c->core, UL_ERR_SYSTEM, "ze backend: cannot start IPC server");
      }
    } else if (job.listen_fd >= 0) {
      close(job.listen_fd);
    }
  }
  mine.p2p_ok = rc == UL_OK;
  ul_result_t grc = ze_allgather(c, &mine, all, "window register");
  if (rc == UL_OK) rc = grc;
  for (int q = 0; rc == UL_OK && q < c->nranks; q++)
    if (!all[q].p2p_ok)
      rc = ul_backend_set_error(c->core, UL_ERR_BACKEND,
                                "ze backend: rank %d could not export its window", q);
  for (int q = 0; rc == UL_OK && q < c->nranks; q++) {
    ze_peer_win_t *pw = &w->peers[q];
    char pname[96];
    void *m = NULL;
    ulbu_board_name(&c->board, pname, sizeof(pname), "w", (int)seq, q);
    if ((rc = ulbu_shm_map(c->core, "ze backend", pname, w->seg_len, &m)) != UL_OK) break;
    pw->seg = m;
    pw->my_count = calloc((size_t)w->nsig, sizeof(uint64_t));
    if (!pw->my_count) {
      rc = ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "ze backend: out of memory");
      break;
    }
    if (q == c->rank || all[q].ident.pid == c->idents[c->rank].pid)
      pw->dev = (void *)(uintptr_t)all[q].raw_base; /* one context: pointers are shared */
    else if (all[q].has_ipc)
      rc = ze_import(c, seq, q, &all[q], pw);
    peer_bases[q] = NULL; /* device memory: not host load/store reachable */
  }
  if (serving) {
    if (rc != UL_OK) job.stop = 1;
    while (!atomic_load(&job.done)) { /* the server sees our abort flag through stop */
      if (ze_aborted(c)) job.stop = 1;
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    pthread_join(server, NULL);
    if (rc == UL_OK && job.rc != UL_OK)
      rc = ul_backend_set_error(c->core, job.rc, "ze backend: %s", job.err);
  }
  free(job.pids);
  grc = ulbu_board_barrier(&c->board, "window register");
  shm_unlink(name); /* every rank has mapped it (or failed): no name left behind */
  if (rc == UL_OK) rc = grc;
  free(all);
  if (rc != UL_OK) {
    ze_window_free(c, w);
    return rc;
  }
  *out = w;
  return UL_OK;
}

static ul_result_t ze_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  /* Peers may still copy into our window until everyone is here. */
  ul_result_t rc = ze_list_sync(c, &c->internal, c->timeout_ms);
  ul_result_t b = ulbu_board_barrier(&c->board, "window deregister");
  ze_window_free(c, w);
  return rc != UL_OK ? rc : b;
}

/* ----------------------------------------------------------- data movement */

static ul_result_t ze_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                          const void *src, size_t bytes, ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  ze_peer_win_t *pw = &w->peers[peer];
  if (!pw->dev)
    return ul_backend_set_error(c->core, UL_ERR_INVALID_USAGE,
                                "ze backend: rank %d's window is empty", peer);
  ul_result_t rc = ze_copy(c, ze_st(c, s), (char *)pw->dev + off, src, bytes,
                           "zeCommandListAppendMemoryCopy (put)");
  return rc != UL_OK ? rc : ze_done(c, s);
}

static ul_result_t ze_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                          void *dst, size_t bytes, ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  ze_peer_win_t *pw = &w->peers[peer];
  if (!pw->dev)
    return ul_backend_set_error(c->core, UL_ERR_INVALID_USAGE,
                                "ze backend: rank %d's window is empty", peer);
  ul_result_t rc = ze_copy(c, ze_st(c, s), dst, (char *)pw->dev + off, bytes,
                           "zeCommandListAppendMemoryCopy (get)");
  return rc != UL_OK ? rc : ze_done(c, s);
}

static ul_result_t ze_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                             ul_backend_stream_t *s) {
  struct ul_backend_stream *st = ze_st(c, s);
  ze_peer_win_t *pw = &w->peers[peer];
  int ev;
  ul_result_t rc = ze_event_get(c, &ev);
  if (rc != UL_OK) return rc;
  /* The barrier signals ev after every earlier command of the list completed. */
  ze_result_t r = zeCommandListAppendBarrier(st->list, c->ev[ev], 0, NULL);
  if (r != ZE_RESULT_SUCCESS) {
    ze_event_put(c, ev);
    return ze_fail(c, "zeCommandListAppendBarrier (signal)", r);
  }
  st->dirty = 0;
  st->ops++;
  uint64_t v = ++pw->my_count[index];
  pthread_mutex_lock(&c->evlock);
  ze_pending_t *p = &c->pend[c->pend_tail % ZE_NEVENTS];
  p->ev = ev;
  p->cell = (_Atomic uint64_t *)(pw->seg) + (size_t)index * c->nranks + c->rank;
  p->value = v;
  p->list = st->list;
  c->pend_tail++;
  pthread_cond_signal(&c->evcond);
  pthread_mutex_unlock(&c->evlock);
  return ze_done(c, s);
}

static uint64_t ze_signal_sum(ul_backend_comm_t *c, ul_backend_window_t *w, int index) {
  _Atomic uint64_t *cells = (_Atomic uint64_t *)(w->peers[c->rank].seg) + (size_t)index * c->nranks;
  uint64_t sum = 0;
  for (int r = 0; r < c->nranks; r++) sum += atomic_load(&cells[r]);
  return sum;
}

static ul_result_t ze_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                  uint64_t value, ul_backend_stream_t *s) {
  double t0 = ulbu_now_ms();
  while (ze_signal_sum(c, w, index) < value) {
    ze_progress(c); /* our own pending signals may be what a peer waits for */
    ul_result_t rc = ze_wait_check(c, t0, c->timeout_ms, "ul_wait_signal");
    if (rc != UL_OK)
      return rc == UL_ERR_TIMEOUT
                 ? ul_backend_set_error(c->core, rc,
                                        "rank %d: signal %d of the window stayed at %llu < %llu "
                                        "for %d ms", c->rank, index,
                                        (unsigned long long)ze_signal_sum(c, w, index),
                                        (unsigned long long)value, c->timeout_ms)
                 : rc;
  }
  /* Commands appended after this returns run after the peer's data is visible: the
   * peer's barrier completed before its count was stored. */
  return UL_OK;
}

static ul_result_t ze_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                  uint64_t *value) {
  ze_progress(c);
  *value = ze_signal_sum(c, w, index);
  return UL_OK;
}

/* ------------------------------------------------- local math (host-staged) */

static ul_result_t ze_stage_ready(ul_backend_comm_t *c) {
  if (c->stage_a) return UL_OK;
  size_t bytes = (size_t)ul_backend_param_int("ZE_STAGE_BYTES", 4 << 20,
                                              "ze backend: host staging buffer for local "
                                              "reductions (v1), bytes");
  if (bytes < 4096) bytes = 4096;
  ze_host_mem_alloc_desc_t hd = {ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, NULL, 0};
  ze_result_t r = zeMemAllocHost(ze_ctx, &hd, bytes, 64, &c->stage_a);
  if (r == ZE_RESULT_SUCCESS) r = zeMemAllocHost(ze_ctx, &hd, bytes, 64, &c->stage_b);
  if (r != ZE_RESULT_SUCCESS) {
    if (c->stage_a) zeMemFree(ze_ctx, c->stage_a);
    c->stage_a = NULL;
    return ze_fail(c, "zeMemAllocHost (reduction staging)", r);
  }
  c->stage_bytes = bytes;
  return UL_OK;
}

static ul_result_t ze_reduce_local(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                                   size_t count, ul_dtype_t dtype, ul_op_t op,
                                   ul_backend_stream_t *s) {
  if (count == 0) return UL_OK;
  struct ul_backend_stream *st = ze_st(c, s);
  pthread_mutex_lock(&c->stage_lock);
  ul_result_t rc = ze_stage_ready(c);
  size_t per = 0, nchunks = 0, es = ul_dtype_size(dtype);
  if (rc == UL_OK && ulze_stage_plan(count, dtype, c->stage_bytes, &per, &nchunks) != UL_OK)
    rc = ul_backend_set_error(c->core, UL_ERR_INVALID_ARG, "ze backend: reduce of %zu x dtype %d",
                              count, (int)dtype);
  for (size_t k = 0; rc == UL_OK && k < nchunks; k++) {
    size_t off = k * per * es, n = count - k * per < per ? count - k * per : per;
    if ((rc = ze_copy(c, st, c->stage_a, (const char *)a + off, n * es, "zeCommandListAppendMemoryCopy (stage a)")) != UL_OK) break;
    if ((rc = ze_copy(c, st, c->stage_b, (const char *)b + off, n * es, "zeCommandListAppendMemoryCopy (stage b)")) != UL_OK) break;
    if ((rc = ze_list_sync(c, st, c->timeout_ms)) != UL_OK) break;
    if ((rc = ul_reduce_local(c->stage_a, c->stage_a, c->stage_b, n, dtype, op)) != UL_OK) break;
    if ((rc = ze_copy(c, st, (char *)dst + off, c->stage_a, n * es, "zeCommandListAppendMemoryCopy (unstage)")) != UL_OK) break;
    rc = ze_list_sync(c, st, c->timeout_ms); /* the staging buffer is reused next chunk */
  }
  pthread_mutex_unlock(&c->stage_lock);
  return rc;
}

static ul_result_t ze_scale_avg(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                                int nranks, ul_backend_stream_t *s) {
  if (count == 0) return UL_OK;
  struct ul_backend_stream *st = ze_st(c, s);
  pthread_mutex_lock(&c->stage_lock);
  ul_result_t rc = ze_stage_ready(c);
  size_t per = 0, nchunks = 0, es = ul_dtype_size(dtype);
  if (rc == UL_OK && ulze_stage_plan(count, dtype, c->stage_bytes, &per, &nchunks) != UL_OK)
    rc = ul_backend_set_error(c->core, UL_ERR_INVALID_ARG, "ze backend: scale of %zu x dtype %d",
                              count, (int)dtype);
  for (size_t k = 0; rc == UL_OK && k < nchunks; k++) {
    size_t off = k * per * es, n = count - k * per < per ? count - k * per : per;
    if ((rc = ze_copy(c, st, c->stage_a, (char *)buf + off, n * es, "zeCommandListAppendMemoryCopy (stage)")) != UL_OK) break;
    if ((rc = ze_list_sync(c, st, c->timeout_ms)) != UL_OK) break;
    if ((rc = ul_scale_avg_local(c->stage_a, n, dtype, nranks)) != UL_OK) break;
    if ((rc = ze_copy(c, st, (char *)buf + off, c->stage_a, n * es, "zeCommandListAppendMemoryCopy (unstage)")) != UL_OK) break;
    rc = ze_list_sync(c, st, c->timeout_ms);
  }
  pthread_mutex_unlock(&c->stage_lock);
  return rc;
}

static ul_result_t ze_copy_local(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                                 ul_backend_stream_t *s) {
  if (bytes == 0 || dst == src) return UL_OK;
  ul_result_t rc = ze_copy(c, ze_st(c, s), dst, src, bytes, "zeCommandListAppendMemoryCopy (copy)");
  return rc != UL_OK ? rc : ze_done(c, s);
}

static const ul_backend_ops_t ze_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "ze",
    .description = "Level Zero IPC handles and copy engines under the generic collective layer; "
                   "local reductions staged through host memory (v1)",
    .priority = 45,
    .init = ze_init,
    .fini = ze_fini,
    .query_caps = ze_query_caps,
    .get_unique_id = ze_get_unique_id,
    .comm_init = ze_comm_init,
    .comm_init_all = ze_comm_init_all,
    .comm_finalize = ze_comm_finalize,
    .comm_destroy = ze_comm_destroy,
    .comm_abort = ze_comm_abort,
    .comm_topology = ze_comm_topology,
    .stream_create = ze_stream_create,
    .stream_wrap = ze_stream_wrap,
    .stream_destroy = ze_stream_destroy,
    .stream_synchronize = ze_stream_synchronize,
    .stream_query = ze_stream_query,
    .mem_alloc = ze_mem_alloc,
    .mem_free = ze_mem_free,
    .window_register = ze_window_register,
    .window_deregister = ze_window_deregister,
    .put = ze_put,
    .get = ze_get,
    .signal = ze_signal,
    .wait_signal = ze_wait_signal,
    .read_signal = ze_read_signal,
    .reduce_local = ze_reduce_local,
    .scale_avg = ze_scale_avg,
    .copy_local = ze_copy_local,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &ze_ops;
}
