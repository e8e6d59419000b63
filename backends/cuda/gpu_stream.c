/* CUDA-runtime helpers shared by the nccl and cuda backends (see gpu_stream.h). */
#include "gpu_stream.h"

#include <stdio.h>
#include <stdlib.h>

#include "gpu_common.h"

ul_result_t ulgpu_fail(ul_comm_t core, const char *who, const char *call, cudaError_t e) {
  char buf[320];
  /* Clear the thread's last error (non-sticky ones): the next launch's cudaGetLastError
   * must not report this failure again as its own. */
  (void)cudaGetLastError();
  ulgpu_format_cuda_error(buf, sizeof(buf), call, (int)e, cudaGetErrorString(e));
  return ul_backend_set_error(core, ulgpu_cuda_result((int)e), "%s: %s", who, buf);
}

ul_result_t ulgpu_device_count(char *reason, size_t reason_len, int *ndev) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    ulgpu_format_cuda_error(reason, reason_len, "cudaGetDeviceCount", (int)e,
                            cudaGetErrorString(e));
    return UL_ERR_UNAVAILABLE;
  }
  if (n <= 0) {
    snprintf(reason, reason_len, "cudaGetDeviceCount: no CUDA device visible");
    return UL_ERR_UNAVAILABLE;
  }
  *ndev = n;
  return UL_OK;
}

ul_result_t ulgpu_stream_create(ul_backend_comm_t *c, ul_comm_t core, const char *who, int device,
                                ul_backend_stream_t **out) {
  ul_backend_stream_t *s = calloc(1, sizeof(*s));
  if (!s) return ul_backend_set_error(core, UL_ERR_NO_MEMORY, "%s: out of memory", who);
  /* On device, then the caller's current device back (the thread's device is the
   * program's state, not ours). */
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  cudaError_t e = prev == device ? cudaSuccess : cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking);
  if (prev >= 0 && prev != device) cudaSetDevice(prev);
  if (e != cudaSuccess) {
    free(s);
    return ulgpu_fail(core, who, "cudaStreamCreateWithFlags", e);
  }
  s->c = c;
  s->owned = 1;
  *out = s;
  return UL_OK;
}

ul_result_t ulgpu_stream_wrap(ul_backend_comm_t *c, ul_comm_t core, const char *who, void *native,
                              ul_backend_stream_t **out) {
  ul_backend_stream_t *s = calloc(1, sizeof(*s));
  if (!s) return ul_backend_set_error(core, UL_ERR_NO_MEMORY, "%s: out of memory", who);
  s->c = c;
  s->s = (cudaStream_t)native;
  s->owned = 0;
  *out = s;
  return UL_OK;
}
