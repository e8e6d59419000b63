/* Local reduction kernels (dst = a op b) and avg scaling, for host memory.
 *
 * Built with -O3 (api/CMakeLists.txt) so GCC vectorises the element loops. To let it:
 * - every kernel is a plain counted loop over one element type, instantiated per
 *   (dtype, op) by a macro, with no calls left after inlining;
 * - the common case (dst overlaps neither input) uses restrict pointers, and the
 *   in-place cases (dst == a and/or dst == b) get their own kernels that read and write
 *   one pointer, so no runtime alias check is needed;
 * - fp16/bf16/fp8 conversions are branch-free (selects and integer arithmetic), which
 *   GCC if-converts into vector blends.
 *
 * The small-float conversions (float_convert.h) are inline so that they vectorise in
 * the loops below; dtype.c defines their out-of-line versions for the rest of the core.
 *
 * Semantics
 * - Integers: sum and prod wrap around modulo 2^bits (computed in unsigned arithmetic,
 *   so there is no signed overflow); avg scaling is C truncating division.
 * - fp32/fp64: IEEE arithmetic in the type itself.
 * - fp16/bf16/fp8: both operands are widened to float, the op is done in float and the
 *   result is rounded back to nearest even. float carries more than twice the precision
 *   of these formats plus two bits, so the double rounding is innocuous: the result is
 *   the correctly rounded one (and exact whenever the exact result is representable).
 *   fp8 e4m3 saturates to +-448 on overflow; fp16/bf16/fp8 e5m2 overflow to infinity.
 * - min/max follow IEEE 754-2019 minimum/maximum: if either operand is NaN the result
 *   is NaN (which of two NaN payloads is unspecified), and -0 < +0.
 * - avg reduces as sum; ul_scale_avg_local divides afterwards.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "ul_core.h"

#include "float_convert.h"

/* ------------------------------------------------------------ element ops */

/* IEEE 754-2019 minimum/maximum: NaN wins, -0 < +0. A NaN y already falls through the
 * comparison (x < NaN is false); a NaN x is picked explicitly. For equal operands OR/AND
 * of the bits only differs from either operand for a pair of zeros. */
UL__INLINE float red_minf(float x, float y) {
  float m = x < y ? x : y;
  m = x == y ? red_u2f(red_f2u(x) | red_f2u(y)) : m;
  return x != x ? x : m;
}

UL__INLINE float red_maxf(float x, float y) {
  float m = x > y ? x : y;
  m = x == y ? red_u2f(red_f2u(x) & red_f2u(y)) : m;
  return x != x ? x : m;
}

UL__INLINE double red_mind(double x, double y) {
  double m = x < y ? x : y;
  m = x == y ? red_u2d(red_d2u(x) | red_d2u(y)) : m;
  return x != x ? x : m;
}

UL__INLINE double red_maxd(double x, double y) {
  double m = x > y ? x : y;
  m = x == y ? red_u2d(red_d2u(x) & red_d2u(y)) : m;
  return x != x ? x : m;
}

/* Integer ops: sum/prod in the unsigned type of the same width (wraps, no UB); the
 * conversion back to a signed type is modular in GCC/Clang. */
#define UL__INT_ARITH(SFX, T, UT)                                                                \
  UL__INLINE T red_sum_##SFX(T x, T y) { return (T)(UT)((UT)x + (UT)y); }                       \
  UL__INLINE T red_prod_##SFX(T x, T y) { return (T)(UT)((UT)x * (UT)y); }
#define UL__INT_MINMAX(SFX, T)                                                                   \
  UL__INLINE T red_min_##SFX(T x, T y) { return x < y ? x : y; }                                 \
  UL__INLINE T red_max_##SFX(T x, T y) { return x > y ? x : y; }

UL__INT_ARITH(i8, int8_t, uint8_t)
UL__INT_ARITH(u8, uint8_t, uint8_t)
UL__INT_ARITH(i32, int32_t, uint32_t)
UL__INT_ARITH(u32, uint32_t, uint32_t)
UL__INT_ARITH(i64, int64_t, uint64_t)
UL__INT_ARITH(u64, uint64_t, uint64_t)
UL__INT_MINMAX(i8, int8_t)
UL__INT_MINMAX(u8, uint8_t)
UL__INT_MINMAX(i32, int32_t)
UL__INT_MINMAX(u32, uint32_t)

/* 64-bit min/max: baseline x86-64 (SSE2) has no 64-bit vector compare, so GCC leaves
 * x < y ? x : y scalar. The comparison written as arithmetic on the sign bit of the
 * difference (overflow-corrected) vectorises and is ~25% faster than scalar cmov. */
UL__INLINE uint64_t red_lt_s64(uint64_t x, uint64_t y) {
  uint64_t d = x - y;
  return (d ^ ((x ^ y) & (d ^ x))) >> 63;
}
UL__INLINE uint64_t red_lt_u64(uint64_t x, uint64_t y) {
  return ((~x & y) | ((~x | y) & (x - y))) >> 63;
}
/* m all ones ? x : y */
UL__INLINE uint64_t red_pick64(uint64_t m, uint64_t x, uint64_t y) { return y ^ ((x ^ y) & m); }
UL__INLINE int64_t red_min_i64(int64_t x, int64_t y) {
  return (int64_t)red_pick64(0 - red_lt_s64((uint64_t)x, (uint64_t)y), (uint64_t)x, (uint64_t)y);
}
UL__INLINE int64_t red_max_i64(int64_t x, int64_t y) {
  return (int64_t)red_pick64(0 - red_lt_s64((uint64_t)y, (uint64_t)x), (uint64_t)x, (uint64_t)y);
}
UL__INLINE uint64_t red_min_u64(uint64_t x, uint64_t y) {
  return red_pick64(0 - red_lt_u64(x, y), x, y);
}
UL__INLINE uint64_t red_max_u64(uint64_t x, uint64_t y) {
  return red_pick64(0 - red_lt_u64(y, x), x, y);
}

UL__INLINE float red_sum_f32(float x, float y) { return x + y; }
UL__INLINE float red_prod_f32(float x, float y) { return x * y; }
UL__INLINE float red_min_f32(float x, float y) { return red_minf(x, y); }
UL__INLINE float red_max_f32(float x, float y) { return red_maxf(x, y); }
UL__INLINE double red_sum_f64(double x, double y) { return x + y; }
UL__INLINE double red_prod_f64(double x, double y) { return x * y; }
UL__INLINE double red_min_f64(double x, double y) { return red_mind(x, y); }
UL__INLINE double red_max_f64(double x, double y) { return red_maxd(x, y); }

/* Storage types computed in float: decode both, op in float, encode (RNE). */
#define UL__SMALL_FLOAT_OPS(SFX, T, DEC, ENC)                                                    \
  UL__INLINE T red_sum_##SFX(T x, T y) { return ENC(DEC(x) + DEC(y)); }                          \
  UL__INLINE T red_prod_##SFX(T x, T y) { return ENC(DEC(x) * DEC(y)); }                         \
  UL__INLINE T red_min_##SFX(T x, T y) { return ENC(red_minf(DEC(x), DEC(y))); }                 \
  UL__INLINE T red_max_##SFX(T x, T y) { return ENC(red_maxf(DEC(x), DEC(y))); }

UL__SMALL_FLOAT_OPS(f16, uint16_t, red_fp16_to_float, red_float_to_fp16)
UL__SMALL_FLOAT_OPS(bf16, uint16_t, red_bf16_to_float, red_float_to_bf16)
UL__SMALL_FLOAT_OPS(e4m3, uint8_t, red_e4m3_to_float, red_float_to_e4m3)
UL__SMALL_FLOAT_OPS(e5m2, uint8_t, red_e5m2_to_float, red_float_to_e5m2)

/* --------------------------------------------------------------- kernels */
/* Four variants per (type, op):
 *   k3: dst overlaps neither input (a and b may overlap each other: both only read);
 *   k2: dst == one input, the other input is disjoint: dst[i] = dst[i] op other[i]
 *       (every op is commutative, so dst == b reuses it with a as `other`);
 *   k1: dst == a == b;
 *   ks: whole 64-byte lines of a op b, each line stored streaming into every one of
 *       ndst outputs at byte offset off (aligned to the line there, overlapping nothing). */
typedef void (*red_k3_fn)(void *restrict, const void *restrict, const void *restrict, size_t);
typedef void (*red_k2_fn)(void *restrict, const void *restrict, size_t);
typedef void (*red_k1_fn)(void *, size_t);
typedef void (*red_ks_fn)(void *const *, int, size_t, const void *, const void *,
                          size_t);

#define RED_LINE 64

/* Whole 64-byte lines to d (16-byte aligned), bypassing the cache: no read for
 * ownership of the output, no eviction of the inputs still to be read. Unordered until
 * an sfence. */
UL__INLINE void red_stream_lines(void *d, const void *s, size_t lines) {
#if defined(__x86_64__)
  const __m128i *l = s;
  __m128i *o = d;
  for (size_t i = 0; i < lines; i++, l += 4, o += 4) {
    __m128i w0 = _mm_loadu_si128(l), w1 = _mm_loadu_si128(l + 1);
    __m128i w2 = _mm_loadu_si128(l + 2), w3 = _mm_loadu_si128(l + 3);
    _mm_stream_si128(o, w0);
    _mm_stream_si128(o + 1, w1);
    _mm_stream_si128(o + 2, w2);
    _mm_stream_si128(o + 3, w3);
  }
#else
  memcpy(d, s, lines * RED_LINE);
#endif
}

#define UL__KERNELS(SFX, OP, T)                                                                  \
  static void red_k3_##OP##_##SFX(void *restrict dv, const void *restrict av,                    \
                                  const void *restrict bv, size_t n) {                           \
    T *restrict d = dv;                                                                          \
    const T *restrict a = av;                                                                    \
    const T *restrict b = bv;                                                                    \
    for (size_t i = 0; i < n; i++) d[i] = red_##OP##_##SFX(a[i], b[i]);                         \
  }                                                                                              \
  static void red_k2_##OP##_##SFX(void *restrict dv, const void *restrict bv, size_t n) {       \
    T *restrict d = dv;                                                                          \
    const T *restrict b = bv;                                                                    \
    for (size_t i = 0; i < n; i++) d[i] = red_##OP##_##SFX(d[i], b[i]);                         \
  }                                                                                              \
  static void red_k1_##OP##_##SFX(void *dv, size_t n) {                                          \
    T *d = dv;                                                                                   \
    for (size_t i = 0; i < n; i++) d[i] = red_##OP##_##SFX(d[i], d[i]);                         \
  }                                                                                              \
  static void red_ks_##OP##_##SFX(void *const *dst, int ndst, size_t off, const void *av,        \
                                  const void *bv, size_t lines) {                                \
    const T *a = av;                                                                             \
    const T *b = bv;                                                                             \
    for (size_t k = 0; k < lines; k++, a += RED_LINE / sizeof(T), b += RED_LINE / sizeof(T)) {   \
      T line[RED_LINE / sizeof(T)] __attribute__((aligned(RED_LINE)));                           \
      for (size_t i = 0; i < RED_LINE / sizeof(T); i++) line[i] = red_##OP##_##SFX(a[i], b[i]);  \
      for (int d = 0; d < ndst; d++) red_stream_lines((char *)dst[d] + off + k * RED_LINE, line, 1); \
    }                                                                                            \
  }

#define UL__KERNELS_ALL_OPS(SFX, T)                                                              \
  UL__KERNELS(SFX, sum, T)                                                                       \
  UL__KERNELS(SFX, prod, T)                                                                      \
  UL__KERNELS(SFX, min, T)                                                                       \
  UL__KERNELS(SFX, max, T)

/* One instantiation per line so -fopt-info/-fdump-tree-vect map to a dtype. */
UL__KERNELS_ALL_OPS(i8, int8_t)
UL__KERNELS_ALL_OPS(u8, uint8_t)
UL__KERNELS_ALL_OPS(i32, int32_t)
UL__KERNELS_ALL_OPS(u32, uint32_t)
UL__KERNELS_ALL_OPS(i64, int64_t)
UL__KERNELS_ALL_OPS(u64, uint64_t)
UL__KERNELS_ALL_OPS(f16, uint16_t)
UL__KERNELS_ALL_OPS(bf16, uint16_t)
UL__KERNELS_ALL_OPS(f32, float)
UL__KERNELS_ALL_OPS(f64, double)
UL__KERNELS_ALL_OPS(e4m3, uint8_t)
UL__KERNELS_ALL_OPS(e5m2, uint8_t)

typedef struct red_kernels {
  red_k3_fn k3;
  red_k2_fn k2;
  red_k1_fn k1;
  red_ks_fn ks;
} red_kernels_t;

#define UL__K(SFX, OP)                                                                           \
  {red_k3_##OP##_##SFX, red_k2_##OP##_##SFX, red_k1_##OP##_##SFX, red_ks_##OP##_##SFX}
/* Indexed [dtype][op]; avg (op 4) reduces as sum. */
#define UL__KROW(SFX)                                                                            \
  {UL__K(SFX, sum), UL__K(SFX, prod), UL__K(SFX, min), UL__K(SFX, max), UL__K(SFX, sum)}

static const red_kernels_t red_table[UL_DTYPE_COUNT][UL_OP_COUNT] = {
    [UL_INT8] = UL__KROW(i8),      [UL_UINT8] = UL__KROW(u8),     [UL_INT32] = UL__KROW(i32),
    [UL_UINT32] = UL__KROW(u32),   [UL_INT64] = UL__KROW(i64),    [UL_UINT64] = UL__KROW(u64),
    [UL_FP16] = UL__KROW(f16),     [UL_BF16] = UL__KROW(bf16),    [UL_FP32] = UL__KROW(f32),
    [UL_FP64] = UL__KROW(f64),     [UL_FP8_E4M3] = UL__KROW(e4m3), [UL_FP8_E5M2] = UL__KROW(e5m2),
};

/* Byte ranges [p, p+len) and [q, q+len) share at least one byte. */
static int red_overlap(const void *p, const void *q, size_t len) {
  uintptr_t x = (uintptr_t)p, y = (uintptr_t)q;
  return x < y + len && y < x + len;
}

/* dst = a op b with the kernel for how dst aliases the inputs (exactly or not at all). */
static void red_apply(const red_kernels_t *k, void *dst, const void *a, const void *b,
                      size_t count) {
  if (dst == a && dst == b) k->k1(dst, count);
  else if (dst == a) k->k2(dst, b, count);
  else if (dst == b) k->k2(dst, a, count);
  else k->k3(dst, a, b, count);
}

/* The checks both entry points make: dtype, op, NULL pointers with count > 0 (outputs
 * counted in nd of dst; indexed: the caller's outputs are an array, named dst[i], else
 * one pointer, named dst), size overflow. *bytes gets the length of one buffer. */
static ul_result_t red_check(const char *fn, void *const *dst, int nd, int indexed,
                             const void *a, const void *b, size_t count, ul_dtype_t dtype,
                             ul_op_t op, size_t *bytes) {
  *bytes = 0;
  if (!ul__dtype_valid(dtype))
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "%s: unknown dtype %d", fn, (int)dtype);
  if (!ul__op_valid(op))
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "%s: unknown op %d", fn, (int)op);
  if (count == 0) return UL_OK;
  for (int d = 0; d < nd; d++)
    if (!dst[d]) {
      char name[24] = "dst";
      if (indexed) snprintf(name, sizeof name, "dst[%d]", d);
      return ul__set_thread_error(UL_ERR_INVALID_ARG, "%s: %s is NULL with count %zu > 0", fn,
                                  name, count);
    }
  if (!a || !b)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "%s: %s is NULL with count %zu > 0", fn,
                                !a ? "a" : "b", count);
  size_t esize = ul_dtype_size(dtype);
  if (count > SIZE_MAX / esize)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "%s: count %zu * %zu bytes overflows size_t",
                                fn, count, esize);
  *bytes = count * esize;
  return UL_OK;
}

ul_result_t ul_reduce_local(void *dst, const void *a, const void *b, size_t count,
                            ul_dtype_t dtype, ul_op_t op) {
  size_t bytes;
  ul_result_t rc = red_check("ul_reduce_local", &dst, 1, 0, a, b, count, dtype, op, &bytes);
  if (rc != UL_OK || bytes == 0) return rc;
  if ((dst != a && red_overlap(dst, a, bytes)) || (dst != b && red_overlap(dst, b, bytes)))
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_reduce_local: dst partially overlaps %s (only exact "
                                "aliasing is allowed)",
                                dst != a && red_overlap(dst, a, bytes) ? "a" : "b");
  red_apply(&red_table[dtype][op], dst, a, b, count);
  return UL_OK;
}

/* Elements [i, i + n) of a op b into every output, with ordinary stores (the parts of a
 * streaming reduction that are not whole aligned lines). An output that is an input
 * gets its copy after the reduction has read that part. */
static void red_part(const red_kernels_t *k, void *const *dst, int ndst, const void *a,
                     const void *b, size_t i, size_t n, size_t esize) {
  if (n == 0) return;
  size_t off = i * esize;
  red_apply(k, (char *)dst[0] + off, (const char *)a + off, (const char *)b + off, n);
  for (int d = 1; d < ndst; d++) memcpy((char *)dst[d] + off, (char *)dst[0] + off, n * esize);
}

ul_result_t ul_reduce_stream_local(void *const *dst, int ndst, const void *a, const void *b,
                                   size_t count, ul_dtype_t dtype, ul_op_t op) {
  static const char fn[] = "ul_reduce_stream_local";
  if (!dst || ndst < 1)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "%s: %d outputs (dst %s); at least one",
                                fn, ndst, dst ? "set" : "NULL");
  size_t bytes;
  ul_result_t rc = red_check(fn, dst, ndst, 1, a, b, count, dtype, op, &bytes);
  if (rc != UL_OK || bytes == 0) return rc;
  for (int d = 0; d < ndst; d++) {
    /* exact aliasing is safe: each line is read before it is written */
    if ((dst[d] != a && red_overlap(dst[d], a, bytes)) ||
        (dst[d] != b && red_overlap(dst[d], b, bytes)))
      return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                  "%s: dst[%d] partially overlaps %s (only exact aliasing is "
                                  "allowed)",
                                  fn, d, dst[d] != a && red_overlap(dst[d], a, bytes) ? "a" : "b");
    for (int e = 0; e < d; e++)
      if (red_overlap(dst[d], dst[e], bytes))
        return ul__set_thread_error(UL_ERR_INVALID_ARG, "%s: dst[%d] overlaps dst[%d]", fn, d, e);
  }
  const red_kernels_t *k = &red_table[dtype][op];
  size_t esize = ul_dtype_size(dtype);
  uintptr_t d0 = (uintptr_t)dst[0];
  /* Streaming stores need every output at the same offset within 16 bytes as dst[0]
   * (it is aligned to the line) and whole elements up to the line: otherwise ordinary
   * stores, as ul_reduce_local. */
  int lines_ok = d0 % esize == 0;
  for (int d = 1; d < ndst; d++) lines_ok &= ((uintptr_t)dst[d] - d0) % 16 == 0;
  size_t head = lines_ok ? ((RED_LINE - d0 % RED_LINE) % RED_LINE) / esize : count;
  if (head > count) head = count;
  size_t lines = (count - head) * esize / RED_LINE, per = RED_LINE / esize;
  red_part(k, dst, ndst, a, b, 0, head, esize);
  size_t off = head * esize;
  if (lines) k->ks(dst, ndst, off, (const char *)a + off, (const char *)b + off, lines);
  red_part(k, dst, ndst, a, b, head + lines * per, count - head - lines * per, esize);
#if defined(__x86_64__)
  _mm_sfence(); /* the streaming stores are ordered before whatever signal follows */
#endif
  return UL_OK;
}

ul_result_t ul_copy_stream_local(void *dst, const void *src, size_t bytes) {
  if (bytes == 0 || dst == src) return UL_OK;
  if (!dst || !src)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_copy_stream_local: %s is NULL with %zu bytes > 0",
                                !dst ? "dst" : "src", bytes);
  char *d = dst;
  const char *p = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15;
  if (head > bytes) head = bytes;
  memcpy(d, p, head);
  bytes -= head;
  size_t lines = bytes / RED_LINE, body = lines * RED_LINE;
  red_stream_lines(d + head, p + head, lines);
  memcpy(d + head + body, p + head + body, bytes - body);
#if defined(__x86_64__)
  _mm_sfence(); /* order the streaming stores before the signal that publishes them */
#endif
  return UL_OK;
}

/* ------------------------------------------------------------ avg scaling */
/* Integer division by a runtime divisor has no SIMD instruction on x86/arm, so the
 * integer loops stay scalar; the float loops vectorise (divps/divpd). */

#define UL__SCALE_INT(SFX, T, DT)                                                                \
  static void red_scale_##SFX(void *bufv, size_t n, int nranks) {                                \
    T *restrict buf = bufv;                                                                      \
    const DT div = (DT)nranks;                                                                   \
    for (size_t i = 0; i < n; i++) buf[i] = (T)((DT)buf[i] / div);                               \
  }

UL__SCALE_INT(i8, int8_t, int32_t)
UL__SCALE_INT(u8, uint8_t, uint32_t)
UL__SCALE_INT(i32, int32_t, int32_t)
UL__SCALE_INT(u32, uint32_t, uint32_t)
UL__SCALE_INT(i64, int64_t, int64_t)
UL__SCALE_INT(u64, uint64_t, uint64_t)

static void red_scale_f32(void *bufv, size_t n, int nranks) {
  float *restrict buf = bufv;
  const float div = (float)nranks;
  for (size_t i = 0; i < n; i++) buf[i] = buf[i] / div;
}

static void red_scale_f64(void *bufv, size_t n, int nranks) {
  double *restrict buf = bufv;
  const double div = (double)nranks;
  for (size_t i = 0; i < n; i++) buf[i] = buf[i] / div;
}

#define UL__SCALE_SMALL(SFX, T, DEC, ENC)                                                        \
  static void red_scale_##SFX(void *bufv, size_t n, int nranks) {                                \
    T *restrict buf = bufv;                                                                      \
    const float div = (float)nranks;                                                             \
    for (size_t i = 0; i < n; i++) buf[i] = ENC(DEC(buf[i]) / div);                              \
  }

UL__SCALE_SMALL(f16, uint16_t, red_fp16_to_float, red_float_to_fp16)
UL__SCALE_SMALL(bf16, uint16_t, red_bf16_to_float, red_float_to_bf16)
UL__SCALE_SMALL(e4m3, uint8_t, red_e4m3_to_float, red_float_to_e4m3)
UL__SCALE_SMALL(e5m2, uint8_t, red_e5m2_to_float, red_float_to_e5m2)

typedef void (*red_scale_fn)(void *, size_t, int);
static const red_scale_fn red_scale_table[UL_DTYPE_COUNT] = {
    [UL_INT8] = red_scale_i8,     [UL_UINT8] = red_scale_u8,     [UL_INT32] = red_scale_i32,
    [UL_UINT32] = red_scale_u32,  [UL_INT64] = red_scale_i64,    [UL_UINT64] = red_scale_u64,
    [UL_FP16] = red_scale_f16,    [UL_BF16] = red_scale_bf16,    [UL_FP32] = red_scale_f32,
    [UL_FP64] = red_scale_f64,    [UL_FP8_E4M3] = red_scale_e4m3, [UL_FP8_E5M2] = red_scale_e5m2,
};

ul_result_t ul_scale_avg_local(void *buf, size_t count, ul_dtype_t dtype, int nranks) {
  if (!ul__dtype_valid(dtype))
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_scale_avg_local: unknown dtype %d",
                                (int)dtype);
  if (nranks <= 0)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_scale_avg_local: nranks is %d, must be >= 1", nranks);
  if (count == 0) return UL_OK;
  if (!buf)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_scale_avg_local: buf is NULL with count %zu > 0", count);
  if (count > SIZE_MAX / ul_dtype_size(dtype))
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_scale_avg_local: count %zu overflows size_t bytes", count);
  if (nranks == 1) return UL_OK; /* x / 1 == x for every dtype (NaN payloads kept) */
  red_scale_table[dtype](buf, count, nranks);
  return UL_OK;
}
