/* Pure helpers of the ze (Level Zero) backend: ze_result_t mapping and names, the
 * error sentence, dtype/staging arithmetic for the host-staged reductions, and the
 * link description from P2P/fabric facts. Nothing here calls Level Zero, so unit tests
 * compile and run it on machines without an Intel GPU or driver. Values are passed as
 * plain integers (the ze_api.h enum values) so callers need no Level Zero header. */
#ifndef UL_ZE_COMMON_H
#define UL_ZE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <unilink/unilink.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ze_result_t -> ul_result_t (one function for the whole backend):
 * SUCCESS -> UL_OK; NOT_READY and deferred builds -> UL_IN_PROGRESS; no driver/device,
 * permissions, low power, dependencies -> UL_ERR_UNAVAILABLE; out of host/device memory
 * -> UL_ERR_NO_MEMORY; invalid arguments/handles/pointers/sizes -> UL_ERR_INVALID_ARG;
 * objects in use or in a wrong state -> UL_ERR_INVALID_USAGE; unsupported
 * features/sizes/alignments/enumerations -> UL_ERR_UNSUPPORTED; unsupported version ->
 * UL_ERR_VERSION; fabric "not a vertex/device" -> UL_ERR_NOT_FOUND; device lost and
 * everything else (unknown values included) -> UL_ERR_BACKEND. */
ul_result_t ulze_result(uint32_t ze_result);

/* "ZE_RESULT_ERROR_UNINITIALIZED"; NULL for a value this build does not know. */
const char *ulze_result_name(uint32_t ze_result);

/* Format "<call>: <NAME> (0x%08x)[: <detail>]" into buf (always NUL-terminated).
 * Unknown values print as "ZE_RESULT_<unknown>". call NULL prints "ze". */
void ulze_format_error(char *buf, size_t len, const char *call, uint32_t ze_result,
                       const char *detail);

/* The dtypes the backend moves and reduces: every ul_dtype_t (reductions run on the
 * host through ul_reduce_local in v1, which covers all of them). */
uint32_t ulze_dtype_mask(void);

/* Host-staged reduction plan: split count elements of dtype into chunks that fit a
 * staging buffer of stage_bytes. UL_ERR_INVALID_ARG for an unknown dtype, a staging
 * buffer smaller than one element, or count * size overflowing size_t (outputs
 * unchanged); else *chunk_elems (> 0) and *nchunks (0 for count 0). */
ul_result_t ulze_stage_plan(size_t count, ul_dtype_t dtype, size_t stage_bytes,
                            size_t *chunk_elems, size_t *nchunks);

/* Unit conversions of the P2P bandwidth extension / fabric edge properties.
 * bandwidth: unit 1 = bytes/ns (= GB/s), 2 = bytes/clock (needs clock_mhz > 0);
 * latency: unit 1 = ns, 2 = clocks (needs clock_mhz), 3 = hops (not a time).
 * Return 0 when the figure cannot be converted. */
double ulze_bandwidth_gbps(uint32_t value, uint32_t unit, double clock_mhz);
double ulze_latency_us(uint32_t value, uint32_t unit, double clock_mhz);

/* What the driver said about the path from this rank's device to one peer's. */
typedef struct ulze_pair_facts {
  int self;              /* the peer is this rank */
  int same_host;         /* 0: another host */
  int peer_visible;      /* the peer's device is in this process's driver */
  int same_device;       /* both ranks on one device */
  int sibling_tiles;     /* sub-devices of one root device */
  int can_access;        /* zeDeviceCanAccessPeer */
  uint32_t p2p_flags;    /* ze_device_p2p_properties_t.flags (bit0 access, bit1 atomics) */
  int have_p2p_bw;       /* ze_device_p2p_bandwidth_exp_properties_t was filled */
  uint32_t logical_bw, physical_bw, bw_unit;
  uint32_t logical_lat, physical_lat, lat_unit;
  int nedges;            /* fabric edges between the two vertices (zeFabricEdgeGetExp) */
  char edge_model[32];   /* first edge's model ("XeLink", "MDFI", ...) */
  uint32_t edge_bw, edge_bw_unit, edge_lat, edge_lat_unit; /* per edge */
  double clock_mhz;      /* device core clock for per-clock units; 0 unknown */
} ulze_pair_facts_t;

/* Fill out (peer field excluded) from the facts:
 *  self -> UL_LINK_SELF "self"; other host -> UL_LINK_NETWORK "network";
 *  peer device not visible -> UL_LINK_UNKNOWN; same device -> UL_LINK_SELF
 *  "same device"; fabric edges whose model names Xe Link -> UL_LINK_XELINK
 *  "xelink xN" (lanes = N); sibling tiles (or an MDFI edge) -> UL_LINK_XELINK
 *  "mdfi (tiles of one card)"; otherwise UL_LINK_PCIE, "pcie p2p" with peer access
 *  or "pcie (no p2p)". Bandwidth/latency come from the P2P bandwidth extension
 *  (logical figure, else physical), else from the fabric edges (bandwidth summed over
 *  edges), with source UL_SOURCE_DRIVER when any figure was reported. */
void ulze_describe_pair(const ulze_pair_facts_t *f, ul_link_info_t *out);

#ifdef __cplusplus
}
#endif
#endif
