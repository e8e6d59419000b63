// Element operations of the cuda backend's kernels: conversions of the small float formats,
// IEEE minimum/maximum, the op switch, integer ops and avg scaling. Every function is
// __host__ __device__ so that cuda_kernels.cu (nvcc, device) and the fake CUDA runtime's host
// kernels and tests (g++ against the CUDA headers) run the same arithmetic: what ships is what
// is tested. The conversions are CUDA's own round-to-nearest-even helpers from cuda_fp16.h,
// cuda_bf16.h and cuda_fp8.h, which have host paths (the device uses cvt instructions where
// the architecture has them).
#ifndef UL_CUDA_ELEMENTOPS_CUH
#define UL_CUDA_ELEMENTOPS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ULK_HD __host__ __device__ __forceinline__
#else
#include <cmath>
#define ULK_HD __host__ __device__ inline
#endif

namespace ulk {

#ifndef __CUDACC__
using std::signbit; // nvcc provides ::signbit for both passes; g++ only std::signbit
#endif

// Same values as ul_dtype_t / ul_op_t (api/include/unilink/unilink.h).
enum { D_I8, D_U8, D_I32, D_U32, D_I64, D_U64, D_F16, D_BF16, D_F32, D_F64, D_E4M3, D_E5M2 };
enum { O_SUM, O_PROD, O_MIN, O_MAX, O_AVG };

// IEEE 754-2019 minimum/maximum: NaN propagates, -0 < +0 (fminf would drop the NaN).
template <typename F> ULK_HD F ieee_min(F x, F y) {
  if (x != x) return x;
  if (y != y) return y;
  if (x < y) return x;
  if (y < x) return y;
  return signbit(x) ? x : y;
}
template <typename F> ULK_HD F ieee_max(F x, F y) {
  if (x != x) return x;
  if (y != y) return y;
  if (x > y) return x;
  if (y > x) return y;
  return signbit(x) ? y : x;
}

// Floating ops (avg reduces as sum).
template <typename F> ULK_HD F fop(int op, F x, F y) {
  switch (op) {
  case O_PROD: return x * y;
  case O_MIN: return ieee_min(x, y);
  case O_MAX: return ieee_max(x, y);
  default: return x + y;
  }
}

// Integers: sum/prod in the unsigned type U (wraps without UB).
template <typename T, typename U> ULK_HD T iop(int op, T x, T y) {
  switch (op) {
  case O_PROD: return (T)(U)((U)x * (U)y);
  case O_MIN: return x < y ? x : y;
  case O_MAX: return x > y ? x : y;
  default: return (T)(U)((U)x + (U)y);
  }
}

// Storage <-> float for the small float formats (raw structs: the bit patterns pass through
// unchanged on host and device).
struct F16 {
  typedef uint16_t S;
  static ULK_HD float dec(S v) {
    __half_raw r;
    r.x = v;
    return __half2float(__half(r));
  }
  static ULK_HD S enc(float f) {
    __half_raw r = __half_raw(__float2half_rn(f));
    return r.x;
  }
};
struct BF16 {
  typedef uint16_t S;
  static ULK_HD float dec(S v) {
    __nv_bfloat16_raw r;
    r.x = v;
    return __bfloat162float(__nv_bfloat16(r));
  }
  static ULK_HD S enc(float f) {
    __nv_bfloat16_raw r = __nv_bfloat16_raw(__float2bfloat16_rn(f));
    return r.x;
  }
};
struct E4M3 {
  typedef uint8_t S;
  static ULK_HD float dec(S v) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, __NV_E4M3)));
  }
  // Saturating: out-of-range values become +-448, as the core does.
  static ULK_HD S enc(float f) { return (S)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3); }
};
struct E5M2 {
  typedef uint8_t S;
  static ULK_HD float dec(S v) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, __NV_E5M2)));
  }
  static ULK_HD S enc(float f) { return (S)__nv_cvt_float_to_fp8(f, __NV_NOSAT, __NV_E5M2); }
};

// One element of each kernel.
template <typename C> ULK_HD typename C::S small_op(int op, typename C::S a, typename C::S b) {
  return C::enc(fop<float>(op, C::dec(a), C::dec(b)));
}
// Integer avg: divide in DT (int32/uint32 for 8-bit types), truncating.
template <typename T, typename DT> ULK_HD T scale_int(T v, DT div) { return (T)((DT)v / div); }
template <typename F> ULK_HD F scale_float(F v, F div) { return v / div; }
template <typename C> ULK_HD typename C::S scale_small(typename C::S v, float div) {
  return C::enc(C::dec(v) / div);
}

} // namespace ulk

#endif
