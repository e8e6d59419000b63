/* Introspection of the fake CUDA runtime (tests only): counts for leak checks and the
 * state a test wants to assert. Exported by the fake libcudart.so.13 only; a test that
 * calls them must run against the fake. */
#ifndef UNILINK_FAKECUDA_H
#define UNILINK_FAKECUDA_H

#ifdef __cplusplus
extern "C" {
#endif

/* cudaMalloc allocations not yet freed (IPC imports not counted). */
int fakecuda_live_allocations(void);
/* cudaHostRegister ranges not yet unregistered. */
int fakecuda_registered_ranges(void);
/* cudaMallocHost / cudaHostAlloc blocks not yet freed. */
int fakecuda_pinned_allocations(void);
/* cudaIpcOpenMemHandle mappings not yet closed (each open counts, as CUDA refcounts). */
int fakecuda_open_ipc(void);
/* Streams created and not destroyed (default streams not counted). */
int fakecuda_live_streams(void);
/* Events created and not destroyed. */
int fakecuda_live_events(void);
/* 1 if peer access from device @from to @to is enabled in this process. */
int fakecuda_peer_enabled(int from, int to);
/* Kernels executed so far (by the stream workers), and kernels whose execution failed. */
long fakecuda_kernels_run(void);
/* The sticky error of @device (0 when none). */
int fakecuda_sticky_error(int device);
/* Make @device fail as after a faulting kernel: @error (e.g. cudaErrorIllegalAddress = 700)
 * becomes its sticky error, if it has none yet. For other fakes (the fake NCCL's kernels
 * run as host functions) and fault-injection tests. */
void fakecuda_fail_device(int device, int error);

#ifdef __cplusplus
}
#endif
#endif
