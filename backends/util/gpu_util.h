/* What the GPU backends (cuda, ze) share when they describe the link to a peer. */
#ifndef UL_BACKEND_GPU_UTIL_H
#define UL_BACKEND_GPU_UTIL_H

#include <unilink/unilink.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The part of a link description that does not depend on the vendor: the peer is this
 * rank (UL_LINK_SELF "self"), on another host (UL_LINK_NETWORK "network"), or on this
 * host with a device this process cannot see (UL_LINK_UNKNOWN, "same host, peer <device>
 * not visible to this process"). Clears *out but for its peer field, then returns 1 when
 * one of those decided it, 0 when the backend describes the device-to-device link. */
int ulbu_gpu_describe_common(int self, int same_host, int peer_visible, const char *device,
                             ul_link_info_t *out);

#ifdef __cplusplus
}
#endif
#endif
