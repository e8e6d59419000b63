/* The fake NCCL's view of memory: what a task may touch (fake device memory through its
 * private alias, host memory the device reaches) and the pointer check of the argument
 * checks. Below the communicators and the tasks; calls only fakenccl_errors.c. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <string.h>

#include "fakemem.h"
#include "fakenccl_int.h"

/* ================================================================ device memory access */

/* The runtime's view of [p, p+n): fake device memory through its private alias; other
 * memory the device can reach (pinned, managed, registered host memory) directly.
 * NULL: an illegal address, as a kernel would fault. Called from stream tasks, so it
 * uses no CUDA API. */
void *dev_view(const void *p, size_t n) {
  if (n == 0) return (void *)p;
  void *v = fakemem_view(p, n, NULL);
  return v;
}

/* Whether a buffer the arg check accepted is host memory the device can reach. */
int host_reachable(const void *p) {
  if (!p || fakemem_find(p, 1, NULL) == 0) return 0;
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof attr);
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return attr.type == cudaMemoryTypeHost || attr.type == cudaMemoryTypeManaged;
}

/* ================================================================ pointer checks */

/* CudaPtrCheck: cudaPointerGetAttributes must know the pointer and, for device memory,
 * place it on the communicator's device. */
ncclResult_t cuda_ptr_check(const void *p, ncclComm_t c, const char *what, const char *opname) {
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof attr);
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess || attr.devicePointer == NULL) {
    (void)cudaGetLastError();
    fn_warn("%s : %s %p is not a valid pointer", opname, what, p);
    return ncclInvalidArgument;
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != c->dev) {
    fn_warn("%s : %s allocated on device %d mismatchs with NCCL device %d", opname, what,
            attr.device, c->dev);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}
