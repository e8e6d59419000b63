/* GPU identity and pair topology for the nccl and cuda backends (CUDA runtime +
 * NVML through dlopen; NVML is optional). */
#ifndef UL_GPU_TOPO_H
#define UL_GPU_TOPO_H

#include <stdint.h>
#include <unilink/unilink.h>

#include "gpu_common.h"

/* What one rank tells the others about its GPU (exchanged at comm init). */
typedef struct ulgpu_ident {
  uint64_t host_hash; /* hash of the host name + boot id: same host test */
  int32_t pid;
  int32_t device;     /* CUDA index in that process */
  int32_t pci_domain, pci_bus, pci_dev;
  int32_t sm_major, sm_minor;
  int32_t pad;
} ulgpu_ident_t;

/* Fill the identity of CUDA device @p device of this process. UL_OK or a mapped error. */
ul_result_t ulgpu_ident_get(int device, ulgpu_ident_t *out);
/* Describe the link from local device @p self to @p peer (links[i].peer is kept). */
void ulgpu_topology(const ulgpu_ident_t *self, const ulgpu_ident_t *peer, int is_self,
                    ul_link_info_t *out);
/* "12.8" style driver/runtime description for caps.version (never fails). */
void ulgpu_runtime_version(char *buf, size_t len);

#endif
