/* CUDA-runtime pieces shared by the nccl and cuda backends: the CUDA error sentence,
 * the device probe of init(), and the ul_stream_t <-> cudaStream_t wrapper. Unlike
 * gpu_common.c these call libcudart, so the file is compiled into each plugin (like
 * gpu_topo.c), never into the pure helper library the unit tests link. */
#ifndef UL_GPU_STREAM_H
#define UL_GPU_STREAM_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <unilink/backend.h>

/* Both backends' streams: a CUDA stream, owned (made by stream_create) or wrapped. */
struct ul_backend_stream {
  ul_backend_comm_t *c;
  cudaStream_t s;
  int owned;
};

/* Record "<who>: <call>: <CUDA sentence> (code N)" with the mapped ul_result_t, and
 * clear the thread's last CUDA error (cudaGetLastError) so that a later launch does not
 * report this failure again. */
ul_result_t ulgpu_fail(ul_comm_t core, const char *who, const char *call, cudaError_t e);

/* init(): count the visible CUDA devices. UL_ERR_UNAVAILABLE with the reason when the
 * runtime fails (no driver) or sees none; else UL_OK and *ndev. */
ul_result_t ulgpu_device_count(char *reason, size_t reason_len, int *ndev);

/* stream_create: a new non-blocking stream on device, owned by the wrapper; the calling
 * thread's current device is left as it was. */
ul_result_t ulgpu_stream_create(ul_backend_comm_t *c, ul_comm_t core, const char *who, int device,
                                ul_backend_stream_t **out);
/* stream_wrap: the caller's cudaStream_t (not owned: never destroyed here). */
ul_result_t ulgpu_stream_wrap(ul_backend_comm_t *c, ul_comm_t core, const char *who, void *native,
                              ul_backend_stream_t **out);

#endif
