/* Pure helpers of the NVIDIA backends (see gpu_common.h). Only CUDA *types* are
 * used (driver_types.h enums), never a CUDA function, so this links without libcudart. */
#include "gpu_common.h"
#include "gpu_util.h"

#include <driver_types.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

ul_result_t ulgpu_cuda_result(int e) {
  switch ((enum cudaError)e) {
  case cudaSuccess: return UL_OK;
  case cudaErrorNotReady: return UL_IN_PROGRESS;
  case cudaErrorMemoryAllocation: return UL_ERR_NO_MEMORY;
  /* The machine cannot run CUDA at all: no driver, stub driver, no device... */
  case cudaErrorInitializationError:
  case cudaErrorStubLibrary:
  case cudaErrorInsufficientDriver:
  case cudaErrorDevicesUnavailable:
  case cudaErrorNoDevice:
  case cudaErrorSystemNotReady:
  case cudaErrorSystemDriverMismatch:
  case cudaErrorCompatNotSupportedOnDevice:
    return UL_ERR_UNAVAILABLE;
  case cudaErrorInvalidValue:
  case cudaErrorInvalidDevice:
  case cudaErrorInvalidResourceHandle:
    return UL_ERR_INVALID_ARG;
  case cudaErrorNotSupported:
  case cudaErrorPeerAccessUnsupported:
  case cudaErrorNoKernelImageForDevice:
  case cudaErrorUnsupportedPtxVersion:
    return UL_ERR_UNSUPPORTED;
  case cudaErrorLaunchTimeout:
  case cudaErrorTimeout:
    return UL_ERR_TIMEOUT;
  default:
    return UL_ERR_BACKEND;
  }
}

void ulgpu_format_cuda_error(char *buf, size_t len, const char *call, int e,
                             const char *error_string) {
  if (!buf || len == 0) return;
  snprintf(buf, len, "%s: %s (code %d)", call ? call : "cuda",
           (error_string && *error_string) ? error_string : "unknown CUDA error", e);
}

static int gpu_nvml_version_decode(unsigned v) {
  switch (v) {
  case 1: return 1;
  case 2: case 3: return 2;
  case 4: case 5: return 3;
  case 6: return 4;
  case 7: return 5;
  case 8: return 6;
  default: return 0;
  }
}

int ulgpu_nvlink_generation(unsigned nvml_version, int sm_major, int sm_minor) {
  if (sm_major == 6 && sm_minor == 0) return 1;
  if (sm_major == 7 && sm_minor == 0) return 2;
  if (sm_major == 8 && (sm_minor == 0 || sm_minor == 6 || sm_minor == 7)) return 3;
  if (sm_major == 9) return 4;
  if (sm_major == 10) return 5;
  return gpu_nvml_version_decode(nvml_version);
}

int ulgpu_nvlink_count(const ulgpu_nvlink_state_t *links, int nlinks, int sm_major,
                       int sm_minor, int *generation) {
  int count = 0, gen = 0;
  for (int i = 0; links && i < nlinks; i++) {
    if (!links[i].active || !(links[i].to_peer || links[i].to_switch)) continue;
    count++;
    int g = ulgpu_nvlink_generation(links[i].version, sm_major, sm_minor);
    if (g > gen) gen = g;
  }
  if (generation) *generation = count ? gen : 0;
  return count;
}

void ulgpu_describe_pair(const ulgpu_pair_facts_t *f, ul_link_info_t *out) {
  if (ulbu_gpu_describe_common(f->self, f->same_host, f->peer_visible, "GPU", out)) return;
  out->source = UL_SOURCE_DRIVER;
  int gen = 0;
  int n = ulgpu_nvlink_count(f->links, f->nlinks, f->sm_major, f->sm_minor, &gen);
  if (n > 0) {
    out->kind = UL_LINK_NVLINK;
    out->generation = gen;
    out->lanes = n;
    if (gen > 0)
      snprintf(out->description, sizeof(out->description), "nvlink%d x%d", gen, n);
    else
      snprintf(out->description, sizeof(out->description), "nvlink x%d", n);
    return;
  }
  out->kind = UL_LINK_PCIE;
  if (f->p2p_access)
    snprintf(out->description, sizeof(out->description), "pcie p2p (rank %d)", f->p2p_rank);
  else
    snprintf(out->description, sizeof(out->description), "pcie (no p2p, staged through host)");
}

ul_result_t ulgpu_parse_path(const char *text, ulgpu_path_t *out) {
  if (!text || !out) return UL_ERR_INVALID_ARG;
  if (!strcasecmp(text, "auto") || !*text) *out = ULGPU_PATH_AUTO;
  else if (!strcasecmp(text, "p2p")) *out = ULGPU_PATH_P2P;
  else if (!strcasecmp(text, "staged")) *out = ULGPU_PATH_STAGED;
  else return UL_ERR_INVALID_ARG;
  return UL_OK;
}

const char *ulgpu_path_name(ulgpu_path_t p) {
  switch (p) {
  case ULGPU_PATH_AUTO: return "auto";
  case ULGPU_PATH_P2P: return "p2p";
  case ULGPU_PATH_STAGED: return "staged";
  }
  return "unknown";
}

ul_result_t ulgpu_choose_path(ulgpu_path_t requested, int all_pairs_p2p, ulgpu_path_t *chosen,
                              char *why, size_t why_len) {
  if (why && why_len) why[0] = '\0';
  switch (requested) {
  case ULGPU_PATH_STAGED:
    *chosen = ULGPU_PATH_STAGED;
    if (why) snprintf(why, why_len, "staged: forced by UNILINK_CUDA_PATH=staged");
    return UL_OK;
  case ULGPU_PATH_P2P:
    if (!all_pairs_p2p) {
      if (why)
        snprintf(why, why_len, "UNILINK_CUDA_PATH=p2p but some GPU pair has no peer access "
                               "(cudaDeviceCanAccessPeer = 0); use auto or staged");
      return UL_ERR_UNSUPPORTED;
    }
    *chosen = ULGPU_PATH_P2P;
    if (why) snprintf(why, why_len, "p2p: forced by UNILINK_CUDA_PATH=p2p");
    return UL_OK;
  case ULGPU_PATH_AUTO:
  default:
    *chosen = all_pairs_p2p ? ULGPU_PATH_P2P : ULGPU_PATH_STAGED;
    if (why)
      snprintf(why, why_len, all_pairs_p2p ? "p2p: every GPU pair has peer access"
                                           : "staged: some GPU pair has no peer access");
    return UL_OK;
  }
}
