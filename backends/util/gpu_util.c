/* Link descriptions shared by the GPU backends (see gpu_util.h). */
#include "gpu_util.h"

#include <stdio.h>
#include <string.h>

int ulbu_gpu_describe_common(int self, int same_host, int peer_visible, const char *device,
                             ul_link_info_t *out) {
  int peer = out->peer;
  memset(out, 0, sizeof(*out));
  out->peer = peer;
  out->source = UL_SOURCE_NONE; /* nothing was measured or reported for these three */
  if (self) {
    out->kind = UL_LINK_SELF;
    snprintf(out->description, sizeof(out->description), "self");
  } else if (!same_host) {
    out->kind = UL_LINK_NETWORK;
    snprintf(out->description, sizeof(out->description), "network");
  } else if (!peer_visible) {
    out->kind = UL_LINK_UNKNOWN;
    snprintf(out->description, sizeof(out->description),
             "same host, peer %s not visible to this process", device);
  } else {
    return 0;
  }
  return 1;
}
