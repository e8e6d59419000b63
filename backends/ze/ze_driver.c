/* ze backend, process-wide: the driver, its devices and the context every rank of the
 * process shares, the loader's optional entry points, capabilities and the unique id.
 * The lowest file of the plugin. */
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

ul_result_t ze_init(char *reason, size_t reason_len) {
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

void ze_fini(void) {
  if (ze_ctx) zeContextDestroy(ze_ctx);
  ze_ctx = NULL;
  ze_ndev = 0;
}

ul_result_t ze_query_caps(ul_backend_caps_t *caps) {
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
