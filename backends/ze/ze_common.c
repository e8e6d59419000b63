/* Pure helpers of the ze backend (see ze_common.h). No Level Zero calls. */
#include "ze_common.h"
#include "gpu_util.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Every ze_result_t of the Level Zero headers up to spec 1.13, by value, so the table
 * also names codes a newer driver returns through an older header.
 * X(name, value, ul_result) */
#define ULZE_RESULTS(X)                                                                          \
  X(ZE_RESULT_SUCCESS, 0x0u, UL_OK)                                                              \
  X(ZE_RESULT_NOT_READY, 0x1u, UL_IN_PROGRESS)                                                   \
  X(ZE_RESULT_ERROR_DEVICE_LOST, 0x70000001u, UL_ERR_BACKEND)                                    \
  X(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, 0x70000002u, UL_ERR_NO_MEMORY)                           \
  X(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, 0x70000003u, UL_ERR_NO_MEMORY)                         \
  X(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE, 0x70000004u, UL_ERR_BACKEND)                           \
  X(ZE_RESULT_ERROR_MODULE_LINK_FAILURE, 0x70000005u, UL_ERR_BACKEND)                            \
  X(ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET, 0x70000006u, UL_ERR_BACKEND)                          \
  X(ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE, 0x70000007u, UL_ERR_UNAVAILABLE)                  \
  X(ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX, 0x7ff00001u, UL_ERR_NOT_FOUND)                     \
  X(ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE, 0x7ff00002u, UL_ERR_NOT_FOUND)                     \
  X(ZE_RESULT_EXP_ERROR_REMOTE_DEVICE, 0x7ff00003u, UL_ERR_NOT_FOUND)                            \
  X(ZE_RESULT_EXP_ERROR_OPERANDS_INCOMPATIBLE, 0x7ff00004u, UL_ERR_INVALID_ARG)                  \
  X(ZE_RESULT_EXP_RTAS_BUILD_RETRY, 0x7ff00005u, UL_ERR_BACKEND)                                 \
  X(ZE_RESULT_EXP_RTAS_BUILD_DEFERRED, 0x7ff00006u, UL_IN_PROGRESS)                              \
  X(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS, 0x70010000u, UL_ERR_UNAVAILABLE)                   \
  X(ZE_RESULT_ERROR_NOT_AVAILABLE, 0x70010001u, UL_ERR_UNAVAILABLE)                              \
  X(ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE, 0x70020000u, UL_ERR_UNAVAILABLE)                     \
  X(ZE_RESULT_WARNING_DROPPED_DATA, 0x70020001u, UL_ERR_BACKEND)                                 \
  X(ZE_RESULT_ERROR_UNINITIALIZED, 0x78000001u, UL_ERR_UNAVAILABLE)                              \
  X(ZE_RESULT_ERROR_UNSUPPORTED_VERSION, 0x78000002u, UL_ERR_VERSION)                            \
  X(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, 0x78000003u, UL_ERR_UNSUPPORTED)                        \
  X(ZE_RESULT_ERROR_INVALID_ARGUMENT, 0x78000004u, UL_ERR_INVALID_ARG)                           \
  X(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, 0x78000005u, UL_ERR_INVALID_ARG)                        \
  X(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE, 0x78000006u, UL_ERR_INVALID_USAGE)                     \
  X(ZE_RESULT_ERROR_INVALID_NULL_POINTER, 0x78000007u, UL_ERR_INVALID_ARG)                       \
  X(ZE_RESULT_ERROR_INVALID_SIZE, 0x78000008u, UL_ERR_INVALID_ARG)                               \
  X(ZE_RESULT_ERROR_UNSUPPORTED_SIZE, 0x78000009u, UL_ERR_UNSUPPORTED)                           \
  X(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT, 0x7800000au, UL_ERR_UNSUPPORTED)                      \
  X(ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT, 0x7800000bu, UL_ERR_INVALID_USAGE)           \
  X(ZE_RESULT_ERROR_INVALID_ENUMERATION, 0x7800000cu, UL_ERR_INVALID_ARG)                        \
  X(ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION, 0x7800000du, UL_ERR_UNSUPPORTED)                    \
  X(ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT, 0x7800000eu, UL_ERR_UNSUPPORTED)                   \
  X(ZE_RESULT_ERROR_INVALID_NATIVE_BINARY, 0x7800000fu, UL_ERR_INVALID_ARG)                      \
  X(ZE_RESULT_ERROR_INVALID_GLOBAL_NAME, 0x78000010u, UL_ERR_INVALID_ARG)                        \
  X(ZE_RESULT_ERROR_INVALID_KERNEL_NAME, 0x78000011u, UL_ERR_INVALID_ARG)                        \
  X(ZE_RESULT_ERROR_INVALID_FUNCTION_NAME, 0x78000012u, UL_ERR_INVALID_ARG)                      \
  X(ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION, 0x78000013u, UL_ERR_INVALID_ARG)               \
  X(ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION, 0x78000014u, UL_ERR_INVALID_ARG)             \
  X(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX, 0x78000015u, UL_ERR_INVALID_ARG)              \
  X(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE, 0x78000016u, UL_ERR_INVALID_ARG)               \
  X(ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE, 0x78000017u, UL_ERR_INVALID_ARG)             \
  X(ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED, 0x78000018u, UL_ERR_INVALID_USAGE)                  \
  X(ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE, 0x78000019u, UL_ERR_INVALID_ARG)                  \
  X(ZE_RESULT_ERROR_OVERLAPPING_REGIONS, 0x7800001au, UL_ERR_INVALID_ARG)                        \
  X(ZE_RESULT_WARNING_ACTION_REQUIRED, 0x7800001bu, UL_ERR_BACKEND)                              \
  X(ZE_RESULT_ERROR_INVALID_KERNEL_HANDLE, 0x7800001cu, UL_ERR_INVALID_ARG)                      \
  X(ZE_RESULT_EXT_RTAS_BUILD_RETRY, 0x7800001du, UL_ERR_BACKEND)                                 \
  X(ZE_RESULT_EXT_RTAS_BUILD_DEFERRED, 0x7800001eu, UL_IN_PROGRESS)                              \
  X(ZE_RESULT_EXT_ERROR_OPERANDS_INCOMPATIBLE, 0x7800001fu, UL_ERR_INVALID_ARG)                  \
  X(ZE_RESULT_ERROR_SURVIVABILITY_MODE_DETECTED, 0x78000020u, UL_ERR_UNAVAILABLE)                \
  X(ZE_RESULT_ERROR_UNKNOWN, 0x7ffffffeu, UL_ERR_BACKEND)

ul_result_t ulze_result(uint32_t r) {
  switch (r) {
#define ULZE_CASE_MAP(name, value, ul) \
  case value:                          \
    return ul;
    ULZE_RESULTS(ULZE_CASE_MAP)
#undef ULZE_CASE_MAP
  default:
    return UL_ERR_BACKEND;
  }
}

const char *ulze_result_name(uint32_t r) {
  switch (r) {
#define ULZE_CASE_NAME(name, value, ul) \
  case value:                           \
    return #name;
    ULZE_RESULTS(ULZE_CASE_NAME)
#undef ULZE_CASE_NAME
  default:
    return NULL;
  }
}

void ulze_format_error(char *buf, size_t len, const char *call, uint32_t r, const char *detail) {
  if (!buf || len == 0) return;
  const char *name = ulze_result_name(r);
  snprintf(buf, len, "%s: %s (0x%08x)%s%s", call ? call : "ze",
           name ? name : "ZE_RESULT_<unknown>", (unsigned)r, detail && detail[0] ? ": " : "",
           detail ? detail : "");
}

/* Element sizes (the dtype numbering is ABI); local so this file needs no libunilink. */
static size_t ulze_dtype_bytes(ul_dtype_t d) {
  static const unsigned char sz[UL_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1};
  return (unsigned)d < UL_DTYPE_COUNT ? sz[d] : 0;
}

uint32_t ulze_dtype_mask(void) { return (1u << UL_DTYPE_COUNT) - 1u; }

ul_result_t ulze_stage_plan(size_t count, ul_dtype_t dtype, size_t stage_bytes,
                            size_t *chunk_elems, size_t *nchunks) {
  if (!chunk_elems || !nchunks) return UL_ERR_INVALID_ARG;
  size_t es = ulze_dtype_bytes(dtype);
  if (es == 0 || stage_bytes < es) return UL_ERR_INVALID_ARG;
  size_t total;
  if (__builtin_mul_overflow(count, es, &total)) return UL_ERR_INVALID_ARG;
  size_t per = stage_bytes / es;
  *chunk_elems = per;
  *nchunks = count / per + (count % per != 0);
  return UL_OK;
}

double ulze_bandwidth_gbps(uint32_t value, uint32_t unit, double clock_mhz) {
  if (value == 0) return 0;
  if (unit == 1) return (double)value; /* bytes per ns == 1e9 B/s */
  if (unit == 2 && clock_mhz > 0) return (double)value * clock_mhz / 1000.0;
  return 0;
}

double ulze_latency_us(uint32_t value, uint32_t unit, double clock_mhz) {
  if (value == 0) return 0;
  if (unit == 1) return (double)value / 1000.0;
  if (unit == 2 && clock_mhz > 0) return (double)value / clock_mhz;
  return 0; /* hops or unknown: not a time */
}

static int ulze_contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == n) return 1;
  }
  return 0;
}

void ulze_describe_pair(const ulze_pair_facts_t *f, ul_link_info_t *out) {
  if (ulbu_gpu_describe_common(f->self, f->same_host, f->peer_visible, "device", out)) return;
  if (f->same_device) {
    out->kind = UL_LINK_SELF;
    snprintf(out->description, sizeof(out->description), "same device");
    return;
  }
  int xelink = f->nedges > 0 && (ulze_contains_nocase(f->edge_model, "xelink") ||
                                 ulze_contains_nocase(f->edge_model, "xe link") ||
                                 ulze_contains_nocase(f->edge_model, "xe-link"));
  int mdfi = f->sibling_tiles || (f->nedges > 0 && ulze_contains_nocase(f->edge_model, "mdfi"));
  /* Figures: the P2P bandwidth extension describes all links between the pair; the
   * fabric edges are per link. */
  double bw = 0, lat = 0;
  if (f->have_p2p_bw) {
    bw = ulze_bandwidth_gbps(f->logical_bw ? f->logical_bw : f->physical_bw, f->bw_unit,
                             f->clock_mhz);
    lat = ulze_latency_us(f->logical_lat ? f->logical_lat : f->physical_lat, f->lat_unit,
                          f->clock_mhz);
  }
  if (bw == 0 && f->nedges > 0)
    bw = ulze_bandwidth_gbps(f->edge_bw, f->edge_bw_unit, f->clock_mhz) * f->nedges;
  if (lat == 0 && f->nedges > 0) lat = ulze_latency_us(f->edge_lat, f->edge_lat_unit, f->clock_mhz);
  out->bandwidth_gbps = bw;
  out->latency_us = lat;
  out->source = (bw > 0 || lat > 0) ? UL_SOURCE_DRIVER : UL_SOURCE_NONE;
  if (xelink) {
    out->kind = UL_LINK_XELINK;
    out->lanes = f->nedges;
    snprintf(out->description, sizeof(out->description), "xelink x%d", f->nedges);
  } else if (mdfi) {
    out->kind = UL_LINK_XELINK;
    out->lanes = f->nedges;
    snprintf(out->description, sizeof(out->description), "mdfi (tiles of one card)");
  } else {
    out->kind = UL_LINK_PCIE;
    int access = f->can_access || (f->p2p_flags & 1u);
    snprintf(out->description, sizeof(out->description), "%s", access ? "pcie p2p" : "pcie (no p2p)");
  }
}
