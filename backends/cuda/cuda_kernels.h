/* Launchers of the cuda backend's device kernels (cuda_kernels.cu). Each returns a
 * cudaError_t as int (0 = enqueued). Semantics match the core's host kernels
 * (api/src/reduce.c): integers wrap, fp16/bf16/fp8 computed in float and rounded to
 * nearest even (e4m3 saturates to 448, e5m2/fp16/bf16 overflow to inf), min/max are
 * IEEE 754-2019 minimum/maximum (NaN wins, -0 < +0), avg reduces as sum. */
#ifndef UL_CUDA_KERNELS_H
#define UL_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst = a op b, count elements of dtype (ul_dtype_t values), op (ul_op_t; avg = sum). */
int ulcuda_launch_reduce(void *dst, const void *a, const void *b, size_t count, int dtype, int op,
                         void *stream);
/* buf[i] /= nranks (integer division truncates). */
int ulcuda_launch_scale(void *buf, size_t count, int dtype, int nranks, void *stream);
/* *cell = value with a system-scope fence first: a signal written into host-mapped
 * memory after all earlier work on the stream (copies included) has completed. */
int ulcuda_launch_store64(volatile uint64_t *cell, uint64_t value, void *stream);

#ifdef __cplusplus
}
#endif
#endif
