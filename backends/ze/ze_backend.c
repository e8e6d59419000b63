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
 * per communicator, or any wait of this backend), the host adds one to the peer's cell.
 * Signals are delivered in issue order per list and per cell (ze_progress); a stalled
 * list does not hold back unrelated signals of other lists. Waits run on the host with
 * the timeout and the abort flag, so no device work can hang on a lost peer.
 *
 * Threads: every operation holds its list's lock while it appends (and, on the NULL
 * stream, while it waits), because a command list must not be appended to from two
 * threads at once.
 *
 * Teardown: the communicator keeps every window and stream it made; destroy waits (with
 * a bound, even after an abort) for the device to finish every list, then closes opened
 * IPC mappings, returns exported IPC handles, and frees lists, events and memory. If the
 * device does not finish in time, lists and memory are leaked rather than freed under it.
 *
 * Local reductions (v1): staged through host memory: both operands are copied to pinned
 * host buffers (zeMemAllocHost), reduced with ul_reduce_local, copied back. Correct for
 * every dtype and op, not fast; device kernels are future work.
 *
 * Bootstrap: a POSIX shm "board" named by random bytes of the unique id (0600, unlinked
 * once every rank joined) with a barrier and one slot per rank. Ranks share one host.
 *
 * Files: ze_backend.c (process: driver, devices, context; the ops table), ze_comm.c
 * (communicators: bootstrap, topology, teardown), ze_wait.c (command lists, events,
 * signal delivery, streams), ze_mem.c (allocations, windows, IPC, ul_mem_copy/set),
 * ze_p2p.c (put/get/signals, host-staged local math), ze_internal.h (shared types). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ze_internal.h"

/* ------------------------------------------------------------ process state */

ze_driver_handle_t ze_drv;
ze_context_handle_t ze_ctx;
ze_devinfo_t ze_devs[ZE_MAX_DEVICES];
int ze_ndev;
int ze_have_bw_ext, ze_have_fabric_ext;
static char ze_version[64] = "Level Zero (no driver)";
ze_fd_from_handle_fn ze_fd_from_handle;
ze_handle_from_fd_fn ze_handle_from_fd;
ze_put_ipc_fn ze_put_ipc;

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

/* An entry point of the loader this plugin is linked with, if that loader has it. The
 * registry dlopens plugins RTLD_LOCAL, so the loader is not in the global scope and
 * RTLD_DEFAULT alone would not find it. */
static void *ze_loader_sym(const char *name) {
  void *p = NULL;
  void *h = dlopen("libze_loader.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h) {
    p = dlsym(h, name);
    dlclose(h); /* RTLD_NOLOAD took a reference; the plugin's own link keeps it loaded */
  }
  return p ? p : dlsym(RTLD_DEFAULT, name);
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
  ze_fd_from_handle = (ze_fd_from_handle_fn)ze_loader_sym("zeMemGetFileDescriptorFromIpcHandleExp");
  ze_handle_from_fd = (ze_handle_from_fd_fn)ze_loader_sym("zeMemGetIpcHandleFromFileDescriptorExp");
  ze_put_ipc = (ze_put_ipc_fn)ze_loader_sym("zeMemPutIpcHandle");
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

ul_result_t ze_get_unique_id(unsigned char *payload, size_t bytes) {
  return ulbu_token_id_make(payload, bytes, ZE_ID_MAGIC, "ze backend");
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
    .mem_kind = ze_mem_kind,
    .mem_copy = ze_mem_copy,
    .mem_set = ze_mem_set,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &ze_ops;
}
