/* Pure helpers shared by the nccl and cuda backends: CUDA error mapping, NVLink
 * generation/description from NVML facts, the UNILINK_CUDA_PATH parser and the
 * NVML function table. Nothing here calls the CUDA runtime or the driver, so unit
 * tests compile and run it on machines without a GPU. */
#ifndef UL_GPU_COMMON_H
#define UL_GPU_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <unilink/unilink.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cudaError_t (passed as int so callers need no CUDA header) -> ul_result_t.
 * "No driver / no device" family -> UL_ERR_UNAVAILABLE; allocation -> NO_MEMORY;
 * cudaErrorNotReady -> UL_IN_PROGRESS; bad values -> INVALID_ARG; missing features
 * -> UNSUPPORTED; timeouts -> TIMEOUT; anything else -> UL_ERR_BACKEND. */
ul_result_t ulgpu_cuda_result(int cuda_error);

/* Format "<call>: <error string> (code N)" into buf (always NUL-terminated). */
void ulgpu_format_cuda_error(char *buf, size_t len, const char *call, int cuda_error,
                             const char *error_string);

/* NVLink generation (1..6) of a GPU. NVML reports per link a value that is the
 * nvmlNvlinkVersion_t enum (1=1.0 2=2.0 3=2.2 4=3.0 5=3.1 6=4.0 7=5.0 8=6.0), and some
 * drivers have been seen reporting values that disagree with the architecture (e.g.
 * "5.0" on H100). The architecture is authoritative when known: sm60 -> 1, sm70 -> 2,
 * sm80/86/87 -> 3, sm90 -> 4, sm100/103 -> 5; the NVML value is decoded otherwise.
 * sm_major <= 0 means unknown. Returns 0 when nothing is known. */
int ulgpu_nvlink_generation(unsigned nvml_version, int sm_major, int sm_minor);

/* One NVLink of the local GPU, as read from NVML. */
typedef struct ulgpu_nvlink_state {
  int active;           /* nvmlDeviceGetNvLinkState == NVML_FEATURE_ENABLED */
  unsigned version;     /* nvmlDeviceGetNvLinkVersion (0 unknown) */
  int to_peer;          /* remote end is the peer GPU */
  int to_switch;        /* remote end is an NVSwitch (reaches every GPU on it) */
} ulgpu_nvlink_state_t;

/* Facts about the path from this GPU to one peer GPU. */
typedef struct ulgpu_pair_facts {
  int self;              /* the peer is this rank */
  int same_host;         /* 0: another host (network) */
  int peer_visible;      /* the peer GPU is visible to this process */
  int p2p_access;        /* cudaDevP2PAttrAccessSupported */
  int p2p_rank;          /* cudaDevP2PAttrPerformanceRank (0 = best) */
  int sm_major, sm_minor;
  const ulgpu_nvlink_state_t *links; /* NVML links of the local GPU; NULL if no NVML */
  int nlinks;
} ulgpu_pair_facts_t;

/* Count the active links that reach the peer (direct or through a switch) and the
 * generation they run at. Returns the count; *generation gets 0 if none. */
int ulgpu_nvlink_count(const ulgpu_nvlink_state_t *links, int nlinks, int sm_major,
                       int sm_minor, int *generation);

/* Fill a ul_link_info_t (peer field excluded) from pair facts:
 * self -> UL_LINK_SELF "self"; other host -> UL_LINK_NETWORK "network";
 * NVLink links to the peer -> UL_LINK_NVLINK "nvlink4 x18" (source DRIVER, lanes =
 * link count, generation); else PCIe: "pcie p2p" (peer access) or "pcie (no p2p,
 * staged through host)"; a peer GPU this process cannot see -> UL_LINK_UNKNOWN. */
void ulgpu_describe_pair(const ulgpu_pair_facts_t *f, ul_link_info_t *out);

/* UNILINK_CUDA_PATH values. */
typedef enum ulgpu_path { ULGPU_PATH_AUTO = 0, ULGPU_PATH_P2P = 1, ULGPU_PATH_STAGED = 2 } ulgpu_path_t;
/* Parse "auto" | "p2p" | "staged" (case-insensitive). UL_ERR_INVALID_ARG otherwise. */
ul_result_t ulgpu_parse_path(const char *text, ulgpu_path_t *out);
const char *ulgpu_path_name(ulgpu_path_t p);
/* The path a communicator uses: p2p only when requested/auto and every pair of
 * same-host GPUs has peer access; staged otherwise. Returns UL_ERR_UNSUPPORTED with a
 * sentence in why when "p2p" is forced but some pair lacks peer access. */
ul_result_t ulgpu_choose_path(ulgpu_path_t requested, int all_pairs_p2p, ulgpu_path_t *chosen,
                              char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
