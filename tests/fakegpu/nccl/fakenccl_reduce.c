/* Element arithmetic of the fake NCCL, see fakenccl_reduce.h.
 *
 * What NCCL 2.28 does per datatype (sm90, the arch a current GPU has):
 * - integers: sum/prod wrap in the type's width; min/max compare signed or unsigned;
 *   avg is FuncSumPostDiv: wrapped sum, then |x|/n truncated, sign restored.
 * - fp32/fp64: native arithmetic, min/max are fminf/fmaxf; avg is PreMulSum by 1/n.
 * - fp16/bf16: __hadd/__hmul, i.e. the exact result rounded once to the type (we
 *   compute in double, which holds the exact sum or product of two such values).
 * - fp8: each operation goes through half: fp8 -> half, __hadd/__hmul in half, then
 *   back to fp8 with __NV_SATFINITE (the conversions of cuda_fp8.h, usable from C). */
#include "fakenccl_reduce.h"

#include <cuda_fp8.h>
#include <math.h>
#include <nccl.h>
#include <string.h>

size_t fn_type_size(int t) {
  switch (t) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: return 0;
  }
}

/* ------------------------------------------------------- 16-bit floats */

/* Round |x| to a binary format with @ebits exponent and @mbits mantissa bits (IEEE
 * layout, with infinities), nearest even. */
static uint32_t enc_ieee(double x, int ebits, int mbits) {
  uint32_t sign = signbit(x) ? 1u << (ebits + mbits) : 0;
  uint32_t expmask = (1u << ebits) - 1;
  if (isnan(x)) return sign | (expmask << mbits) | (1u << (mbits - 1));
  double ax = fabs(x);
  if (ax == 0) return sign;
  int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias, e;
  (void)frexp(ax, &e);
  e -= 1; /* ax = 1.f * 2^e */
  uint64_t q;
  if (e < emin) {
    q = (uint64_t)rint(ldexp(ax, mbits - emin)); /* subnormal units; may round up to normal */
  } else {
    q = (uint64_t)rint(ldexp(ax, mbits - e));   /* in [2^m, 2^(m+1)], carry is fine */
    q = ((uint64_t)(e + bias) << mbits) + (q - (1ull << mbits));
  }
  if (q >= (uint64_t)expmask << mbits) q = (uint64_t)expmask << mbits; /* overflow: inf */
  return sign | (uint32_t)q;
}

static double dec_ieee(uint32_t b, int ebits, int mbits) {
  uint32_t expmask = (1u << ebits) - 1;
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t ex = (b >> mbits) & expmask, man = b & ((1u << mbits) - 1);
  double s = (b >> (ebits + mbits)) & 1 ? -1.0 : 1.0;
  if (ex == expmask) return man ? NAN : s * INFINITY;
  if (ex == 0) return s * ldexp((double)man, 1 - bias - mbits);
  return s * ldexp((double)(man | (1u << mbits)), (int)ex - bias - mbits);
}

uint16_t fn_half_from_double(double x) { return (uint16_t)enc_ieee(x, 5, 10); }
double fn_half_to_double(uint16_t h) { return dec_ieee(h, 5, 10); }
uint16_t fn_bf16_from_double(double x) {
  if (isnan(x)) return (uint16_t)(signbit(x) ? 0xffc0 : 0x7fc0);
  return (uint16_t)enc_ieee(x, 8, 7);
}
double fn_bf16_to_double(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ------------------------------------------------------------- fp8 */

static double f8_to_d(uint8_t v, __nv_fp8_interpretation_t k) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(v, k);
  return fn_half_to_double(h.x);
}
/* half bits -> fp8, saturating to the largest finite value as NCCL's __nv_fp8_* ctors. */
static uint8_t h_to_f8(uint16_t hb, __nv_fp8_interpretation_t k) {
  __half_raw h;
  h.x = hb;
  return __nv_cvt_halfraw_to_fp8(h, __NV_SATFINITE, k);
}

/* ------------------------------------------------------------ generic */

typedef struct {
  int dtype;
  fn_redop_t op;
} ctx_t;

/* Floating types as doubles: binary op, then rounding to the type. */
static double round_to(int t, double v) {
  switch (t) {
  case ncclFloat16: return fn_half_to_double(fn_half_from_double(v));
  case ncclBfloat16: return fn_bf16_to_double(fn_bf16_from_double(v));
  case ncclFloat32: return (double)(float)v;
  default: return v;
  }
}

static double fmin_nan(double a, double b) { return fmin(a, b); }
static double fmax_nan(double a, double b) { return fmax(a, b); }

/* One element of a floating type (not fp8), rounded after every operation. */
static double float_op(int t, fn_devop_t op, double a, double b) {
  switch (op) {
  case FN_OP_SUM: case FN_OP_PREMULSUM: return round_to(t, a + b);
  case FN_OP_PROD: return round_to(t, a * b);
  case FN_OP_MIN: return fmin_nan(a, b);
  case FN_OP_MAX: return fmax_nan(a, b);
  default: return a;
  }
}

static double load_f(int t, const void *p, size_t i) {
  switch (t) {
  case ncclFloat16: return fn_half_to_double(((const uint16_t *)p)[i]);
  case ncclBfloat16: return fn_bf16_to_double(((const uint16_t *)p)[i]);
  case ncclFloat32: return ((const float *)p)[i];
  default: return ((const double *)p)[i];
  }
}
static void store_f(int t, void *p, size_t i, double v) {
  switch (t) {
  case ncclFloat16: ((uint16_t *)p)[i] = fn_half_from_double(v); break;
  case ncclBfloat16: ((uint16_t *)p)[i] = fn_bf16_from_double(v); break;
  case ncclFloat32: ((float *)p)[i] = (float)v; break;
  default: ((double *)p)[i] = v; break;
  }
}

static double scalar_f(int t, uint64_t bits) {
  switch (t) {
  case ncclFloat16: return fn_half_to_double((uint16_t)bits);
  case ncclBfloat16: return fn_bf16_to_double((uint16_t)bits);
  case ncclFloat32: {
    uint32_t u = (uint32_t)bits;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  default: {
    double d;
    memcpy(&d, &bits, 8);
    return d;
  }
  }
}

static void reduce_float(int t, fn_redop_t op, const void *const *srcs, int nsrc, void *dst,
                         size_t n) {
  double s = op.op == FN_OP_PREMULSUM ? scalar_f(t, op.scalar) : 1.0;
  for (size_t i = 0; i < n; i++) {
    double acc = load_f(t, srcs[0], i);
    if (op.op == FN_OP_PREMULSUM) acc = round_to(t, acc * s);
    for (int k = 1; k < nsrc; k++) {
      double v = load_f(t, srcs[k], i);
      if (op.op == FN_OP_PREMULSUM) v = round_to(t, v * s);
      acc = float_op(t, op.op, acc, v);
    }
    store_f(t, dst, i, acc);
  }
}

static void reduce_fp8(int t, fn_redop_t op, const void *const *srcs, int nsrc, void *dst,
                       size_t n) {
  __nv_fp8_interpretation_t k8 = t == ncclFloat8e4m3 ? __NV_E4M3 : __NV_E5M2;
  /* PreMulSum keeps its scalar as fp8 and multiplies in half. */
  double s = op.op == FN_OP_PREMULSUM ? f8_to_d((uint8_t)op.scalar, k8) : 1.0;
  for (size_t i = 0; i < n; i++) {
    uint8_t acc = ((const uint8_t *)srcs[0])[i];
    if (op.op == FN_OP_PREMULSUM) acc = h_to_f8(fn_half_from_double(f8_to_d(acc, k8) * s), k8);
    for (int k = 1; k < nsrc; k++) {
      uint8_t v = ((const uint8_t *)srcs[k])[i];
      if (op.op == FN_OP_PREMULSUM) v = h_to_f8(fn_half_from_double(f8_to_d(v, k8) * s), k8);
      double a = f8_to_d(acc, k8), b = f8_to_d(v, k8), r;
      switch (op.op) {
      case FN_OP_PROD: r = a * b; break;
      case FN_OP_MIN: r = fmin_nan(a, b); break;
      case FN_OP_MAX: r = fmax_nan(a, b); break;
      default: r = a + b; break;
      }
      acc = h_to_f8(fn_half_from_double(r), k8);
    }
    ((uint8_t *)dst)[i] = acc;
  }
}

/* Integers: unsigned arithmetic in the type's width (wraps as the device does). */
#define INT_REDUCE(UT, ST, SIGNED)                                                             \
  do {                                                                                         \
    const UT *const *s_ = (const UT *const *)srcs;                                             \
    UT *d_ = (UT *)dst;                                                                        \
    for (size_t i = 0; i < n; i++) {                                                           \
      UT acc = s_[0][i];                                                                       \
      if (op.op == FN_OP_PREMULSUM) acc = (UT)(acc * (UT)op.scalar);                           \
      for (int k = 1; k < nsrc; k++) {                                                         \
        UT v = s_[k][i];                                                                       \
        switch (op.op) {                                                                       \
        case FN_OP_PROD: acc = (UT)(acc * v); break;                                           \
        case FN_OP_MIN:                                                                        \
          if (SIGNED ? (ST)v < (ST)acc : v < acc) acc = v;                                     \
          break;                                                                               \
        case FN_OP_MAX:                                                                        \
          if (SIGNED ? (ST)v > (ST)acc : v > acc) acc = v;                                     \
          break;                                                                               \
        case FN_OP_PREMULSUM: acc = (UT)(acc + (UT)(v * (UT)op.scalar)); break;                \
        default: acc = (UT)(acc + v); break;                                                   \
        }                                                                                      \
      }                                                                                        \
      if (op.op == FN_OP_SUMPOSTDIV) {                                                         \
        int neg_ = SIGNED && (ST)acc < 0;                                                      \
        UT mag_ = neg_ ? (UT)(0 - acc) : acc;                                                  \
        UT q_ = (UT)(mag_ / (UT)op.scalar);                                                    \
        acc = neg_ ? (UT)(0 - q_) : q_;                                                        \
      }                                                                                        \
      d_[i] = acc;                                                                             \
    }                                                                                          \
  } while (0)

void fn_reduce(int t, fn_redop_t op, const void *const *srcs, int nsrc, void *dst, size_t n) {
  switch (t) {
  case ncclInt8: INT_REDUCE(uint8_t, int8_t, 1); break;
  case ncclUint8: INT_REDUCE(uint8_t, int8_t, 0); break;
  case ncclInt32: INT_REDUCE(uint32_t, int32_t, 1); break;
  case ncclUint32: INT_REDUCE(uint32_t, int32_t, 0); break;
  case ncclInt64: INT_REDUCE(uint64_t, int64_t, 1); break;
  case ncclUint64: INT_REDUCE(uint64_t, int64_t, 0); break;
  case ncclFloat8e4m3: case ncclFloat8e5m2: reduce_fp8(t, op, srcs, nsrc, dst, n); break;
  default: reduce_float(t, op, srcs, nsrc, dst, n); break;
  }
}

uint64_t fn_avg_scalar(int t, int nranks) {
  double inv = 1.0 / nranks;
  uint64_t bits = 0;
  switch (t) {
  case ncclFloat16: return fn_half_from_double((float)inv); /* __float2half(float(1.0/n)) */
  case ncclBfloat16: return fn_bf16_from_double((float)inv);
  case ncclFloat32: {
    float f = (float)inv;
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
  }
  case ncclFloat64: memcpy(&bits, &inv, 8); return bits;
  case ncclFloat8e4m3: return __nv_cvt_float_to_fp8((float)inv, __NV_SATFINITE, __NV_E4M3);
  case ncclFloat8e5m2: return __nv_cvt_float_to_fp8((float)inv, __NV_SATFINITE, __NV_E5M2);
  default: return (uint64_t)nranks; /* integers: SumPostDiv divisor */
  }
}
