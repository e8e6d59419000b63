// Device kernels of the cuda backend: local reductions per dtype x op, avg scaling and
// the signal store. One grid-stride kernel per (type, op) over the element operations of
// cuda_elementops.cuh (CUDA's own round-to-nearest-even conversions), so results equal the
// core's host kernels.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_elementops.cuh"
#include "cuda_kernels.h"

namespace {

// The element operations live in cuda_elementops.cuh (shared with the fake runtime's host
// kernels and the tests); the kernels here are only grid-stride loops over them. The
// kernel names and template parameters are part of what the fake runtime dispatches on.
using namespace ulk;

#define GRID_LOOP(i, n)                                                                          \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
       i += (size_t)blockDim.x * gridDim.x)

template <typename T, typename U>
__global__ void k_reduce_int(T *d, const T *a, const T *b, size_t n, int op) {
  GRID_LOOP(i, n) d[i] = iop<T, U>(op, a[i], b[i]);
}
template <typename F> __global__ void k_reduce_float(F *d, const F *a, const F *b, size_t n, int op) {
  GRID_LOOP(i, n) d[i] = fop<F>(op, a[i], b[i]);
}
template <typename C>
__global__ void k_reduce_small(typename C::S *d, const typename C::S *a, const typename C::S *b,
                               size_t n, int op) {
  GRID_LOOP(i, n) d[i] = small_op<C>(op, a[i], b[i]);
}

template <typename T, typename DT> __global__ void k_scale_int(T *buf, size_t n, DT div) {
  GRID_LOOP(i, n) buf[i] = scale_int<T, DT>(buf[i], div);
}
template <typename F> __global__ void k_scale_float(F *buf, size_t n, F div) {
  GRID_LOOP(i, n) buf[i] = scale_float<F>(buf[i], div);
}
template <typename C> __global__ void k_scale_small(typename C::S *buf, size_t n, float div) {
  GRID_LOOP(i, n) buf[i] = scale_small<C>(buf[i], div);
}

__global__ void k_store64(volatile unsigned long long *cell, unsigned long long v) {
  __threadfence_system(); // earlier stream work is complete; make it visible system-wide first
  *cell = v;
  __threadfence_system();
}

inline unsigned blocks_for(size_t n) {
  size_t b = (n + 255) / 256;
  if (b > 65535) b = 65535; // grid-stride covers the rest
  return b ? (unsigned)b : 1u;
}

} // namespace

extern "C" int ulcuda_launch_reduce(void *dst, const void *a, const void *b, size_t n, int dtype,
                                    int op, void *stream) {
  if (n == 0) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  unsigned g = blocks_for(n);
#define R_INT(T, U) k_reduce_int<T, U><<<g, 256, 0, s>>>((T *)dst, (const T *)a, (const T *)b, n, op)
#define R_FLT(F) k_reduce_float<F><<<g, 256, 0, s>>>((F *)dst, (const F *)a, (const F *)b, n, op)
#define R_SML(C)                                                                                 \
  k_reduce_small<C><<<g, 256, 0, s>>>((C::S *)dst, (const C::S *)a, (const C::S *)b, n, op)
  switch (dtype) {
  case D_I8: R_INT(int8_t, uint8_t); break;
  case D_U8: R_INT(uint8_t, uint8_t); break;
  case D_I32: R_INT(int32_t, uint32_t); break;
  case D_U32: R_INT(uint32_t, uint32_t); break;
  case D_I64: R_INT(int64_t, uint64_t); break;
  case D_U64: R_INT(uint64_t, uint64_t); break;
  case D_F16: R_SML(F16); break;
  case D_BF16: R_SML(BF16); break;
  case D_F32: R_FLT(float); break;
  case D_F64: R_FLT(double); break;
  case D_E4M3: R_SML(E4M3); break;
  case D_E5M2: R_SML(E5M2); break;
  default: return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}

extern "C" int ulcuda_launch_scale(void *buf, size_t n, int dtype, int nranks, void *stream) {
  if (n == 0 || nranks == 1) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  unsigned g = blocks_for(n);
  switch (dtype) {
  case D_I8: k_scale_int<int8_t, int32_t><<<g, 256, 0, s>>>((int8_t *)buf, n, (int32_t)nranks); break;
  case D_U8: k_scale_int<uint8_t, uint32_t><<<g, 256, 0, s>>>((uint8_t *)buf, n, (uint32_t)nranks); break;
  case D_I32: k_scale_int<int32_t, int32_t><<<g, 256, 0, s>>>((int32_t *)buf, n, (int32_t)nranks); break;
  case D_U32: k_scale_int<uint32_t, uint32_t><<<g, 256, 0, s>>>((uint32_t *)buf, n, (uint32_t)nranks); break;
  case D_I64: k_scale_int<int64_t, int64_t><<<g, 256, 0, s>>>((int64_t *)buf, n, (int64_t)nranks); break;
  case D_U64: k_scale_int<uint64_t, uint64_t><<<g, 256, 0, s>>>((uint64_t *)buf, n, (uint64_t)nranks); break;
  case D_F16: k_scale_small<F16><<<g, 256, 0, s>>>((uint16_t *)buf, n, (float)nranks); break;
  case D_BF16: k_scale_small<BF16><<<g, 256, 0, s>>>((uint16_t *)buf, n, (float)nranks); break;
  case D_F32: k_scale_float<float><<<g, 256, 0, s>>>((float *)buf, n, (float)nranks); break;
  case D_F64: k_scale_float<double><<<g, 256, 0, s>>>((double *)buf, n, (double)nranks); break;
  case D_E4M3: k_scale_small<E4M3><<<g, 256, 0, s>>>((uint8_t *)buf, n, (float)nranks); break;
  case D_E5M2: k_scale_small<E5M2><<<g, 256, 0, s>>>((uint8_t *)buf, n, (float)nranks); break;
  default: return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}

extern "C" int ulcuda_launch_store64(volatile uint64_t *cell, uint64_t value, void *stream) {
  k_store64<<<1, 1, 0, (cudaStream_t)stream>>>((volatile unsigned long long *)cell,
                                               (unsigned long long)value);
  return (int)cudaGetLastError();
}
