/* Local reduction kernels and avg scaling against references computed here in double
 * (or in wide integers), with seeded inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ul_core.h"

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s >> 11;
}

static double rnd_int(uint64_t *s, int lo, int hi) {
  return (double)(lo + (int)(lcg(s) % (uint64_t)(hi - lo + 1)));
}

/* Inputs for which a op b is exactly representable in the dtype for every op (sums,
 * products, min, max): small integers, scaled per dtype within its precision. */
static double gen_exact(ul_dtype_t dt, int operand, uint64_t *s) {
  switch (dt) {
  case UL_INT8: return rnd_int(s, -11, 11);
  case UL_UINT8: return rnd_int(s, 0, 15);
  case UL_INT32: return rnd_int(s, -40000, 40000);
  case UL_UINT32: return rnd_int(s, 0, 60000);
  case UL_INT64: return rnd_int(s, -(1 << 20), 1 << 20);
  case UL_UINT64: return rnd_int(s, 0, 1 << 20);
  case UL_FP16: return rnd_int(s, -31, 31) * 0.25;   /* 11-bit significand */
  case UL_BF16: return rnd_int(s, -15, 15) * 0.125;  /* 8-bit significand */
  case UL_FP32: return rnd_int(s, -2048, 2048) * 0.0625;
  case UL_FP64: return rnd_int(s, -(1 << 20), 1 << 20) * 0x1p-10;
  case UL_FP8_E4M3: return rnd_int(s, -4, 4) * 0.5; /* 4-bit significand */
  default: {                                          /* e5m2: 3-bit significand */
    static const double pow2[] = {0.0, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0};
    return operand == 0 ? rnd_int(s, -4, 4) : pow2[lcg(s) % 7];
  }
  }
}

static double ref_op(ul_op_t op, double x, double y) {
  switch (op) {
  case UL_SUM:
  case UL_AVG: return x + y;
  case UL_PROD: return x * y;
  case UL_MIN: return x < y ? x : y;
  default: return x > y ? x : y;
  }
}

static void store(ul_dtype_t dt, void *buf, size_t i, double v) {
  cr_assert_eq(ul_value_store(dt, (char *)buf + i * ul_dtype_size(dt), v), UL_OK);
}

static double load(ul_dtype_t dt, const void *buf, size_t i) {
  return ul_value_load(dt, (const char *)buf + i * ul_dtype_size(dt));
}

#define GUARD 16 /* bytes of canary after every output */

/* Run one reduction out of place and in all three aliasing forms; check every element
 * against the double reference and that no byte past the end is touched. */
static void check_exact(ul_dtype_t dt, ul_op_t op, size_t count, size_t misalign, uint64_t *s) {
  size_t es = ul_dtype_size(dt), bytes = count * es;
  unsigned char *ma = malloc(bytes + 3 * es + GUARD), *mb = malloc(bytes + 3 * es + GUARD);
  unsigned char *md = malloc(bytes + 3 * es + GUARD), *mx = malloc(bytes + 3 * es + GUARD);
  cr_assert(ma && mb && md && mx);
  unsigned char *a = ma + misalign * es, *b = mb + misalign * es, *d = md + misalign * es;
  unsigned char *x = mx + misalign * es;
  for (size_t i = 0; i < count; i++) {
    store(dt, a, i, gen_exact(dt, 0, s));
    store(dt, b, i, gen_exact(dt, 1, s));
  }
  memset(d + bytes, 0xA5, GUARD);
  cr_assert_eq(ul_reduce_local(d, a, b, count, dt, op), UL_OK);
  for (size_t i = 0; i < GUARD; i++)
    cr_assert_eq(d[bytes + i], 0xA5, "%s: wrote past the end", ul_dtype_name(dt));
  for (size_t i = 0; i < count; i++) {
    double want = ref_op(op, load(dt, a, i), load(dt, b, i));
    double got = load(dt, d, i);
    int zero_sign_ok = want != 0 || !ul__dtype_is_float(dt) || signbit(got) == signbit(want);
    cr_assert(got == want && zero_sign_ok,
              "%s %s count %zu [%zu]: %g op %g = %g, want %g", ul_dtype_name(dt), ul_op_name(op),
              count, i, load(dt, a, i), load(dt, b, i), got, want);
  }
  /* dst == a */
  memcpy(x, a, bytes);
  memset(x + bytes, 0x5A, GUARD);
  cr_assert_eq(ul_reduce_local(x, x, b, count, dt, op), UL_OK);
  cr_assert_eq(memcmp(x, d, bytes), 0, "%s %s count %zu: dst==a differs", ul_dtype_name(dt),
               ul_op_name(op), count);
  cr_assert_eq(x[bytes], 0x5A);
  /* dst == b */
  memcpy(x, b, bytes);
  cr_assert_eq(ul_reduce_local(x, a, x, count, dt, op), UL_OK);
  cr_assert_eq(memcmp(x, d, bytes), 0, "%s %s count %zu: dst==b differs", ul_dtype_name(dt),
               ul_op_name(op), count);
  cr_assert_eq(x[bytes], 0x5A);
  /* dst == a == b */
  memcpy(x, a, bytes);
  cr_assert_eq(ul_reduce_local(x, x, x, count, dt, op), UL_OK);
  for (size_t i = 0; i < count; i++) {
    /* a op a need not be representable (e5m2: 3 * 3): compare with its rounding */
    unsigned char w[8];
    store(dt, w, 0, ref_op(op, load(dt, a, i), load(dt, a, i)));
    cr_assert_eq(load(dt, x, i), load(dt, w, 0), "%s %s count %zu: dst==a==b [%zu]",
                 ul_dtype_name(dt), ul_op_name(op), count, i);
  }
  cr_assert_eq(x[bytes], 0x5A);
  free(ma);
  free(mb);
  free(md);
  free(mx);
}

Test(reduce, every_dtype_op_exact, .timeout = 60) {
  uint64_t s = 42;
  for (int dt = 0; dt < UL_DTYPE_COUNT; dt++)
    for (int op = 0; op < UL_OP_COUNT; op++) {
      for (size_t count = 1; count <= 67; count++)
        check_exact((ul_dtype_t)dt, (ul_op_t)op, count, count % 3, &s);
      check_exact((ul_dtype_t)dt, (ul_op_t)op, 4099, 1, &s);
    }
}

/* ------------------------------------------------ rounding, NaN, signed zeros */

/* IEEE 754-2019 minimum/maximum in double, written independently of the library. */
static double ref_minmax(int is_max, double x, double y) {
  if (isnan(x) || isnan(y)) return NAN;
  if (x == y) return (signbit(x) && signbit(y)) || (!is_max && (signbit(x) || signbit(y)))
                         ? -fabs(x) : fabs(x);
  return is_max ? (x > y ? x : y) : (x < y ? x : y);
}

static double ref_full(ul_op_t op, double x, double y) {
  if (op == UL_MIN || op == UL_MAX) return ref_minmax(op == UL_MAX, x, y);
  return op == UL_PROD ? x * y : x + y;
}

/* Every small-float dtype over seeded random codes (NaN, inf, subnormals, overflow
 * included): the result must be the correctly rounded a op b. The double result of
 * two such values is rounded once more by ul_value_store, which is innocuous (double
 * has more than 2p+2 bits for these formats) and checked against its own reference in
 * test_dtype. */
Test(reduce, small_floats_correctly_rounded, .timeout = 60) {
  ul_dtype_t dts[] = {UL_FP16, UL_BF16, UL_FP8_E4M3, UL_FP8_E5M2};
  uint64_t s = 99;
  enum { N = 4096 };
  static uint16_t a[N], b[N], d[N];
  for (int k = 0; k < 4; k++) {
    ul_dtype_t dt = dts[k];
    size_t es = ul_dtype_size(dt);
    unsigned mask = es == 1 ? 0xffu : 0xffffu;
    for (int op = 0; op < UL_OP_COUNT; op++) {
      for (int i = 0; i < N; i++) {
        uint16_t va = (uint16_t)(lcg(&s) & mask), vb = (uint16_t)(lcg(&s) & mask);
        memcpy((char *)a + i * es, &va, es);
        memcpy((char *)b + i * es, &vb, es);
      }
      cr_assert_eq(ul_reduce_local(d, a, b, N, dt, (ul_op_t)op), UL_OK);
      for (int i = 0; i < N; i++) {
        double want = ref_full((ul_op_t)op, load(dt, a, i), load(dt, b, i));
        uint16_t wbits = 0, gbits = 0;
        memcpy(&gbits, (char *)d + i * es, es);
        if (isnan(want)) {
          cr_assert(isnan(load(dt, d, i)), "%s %s: %g op %g should be NaN, got 0x%x",
                    ul_dtype_name(dt), ul_op_name((ul_op_t)op), load(dt, a, i), load(dt, b, i),
                    gbits);
          continue;
        }
        cr_assert_eq(ul_value_store(dt, &wbits, want), UL_OK);
        cr_assert_eq(gbits, wbits, "%s %s: %a op %a = 0x%x, want 0x%x (%a)", ul_dtype_name(dt),
                     ul_op_name((ul_op_t)op), load(dt, a, i), load(dt, b, i), gbits, wbits, want);
      }
    }
  }
}

static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static double bitsd(uint64_t u) {
  double f;
  memcpy(&f, &u, 8);
  return f;
}

/* fp32/fp64 over random bit patterns: fp32 result must equal the double computation
 * rounded to float (innocuous double rounding), fp64 the reference itself. */
Test(reduce, fp32_fp64_random_bits, .timeout = 30) {
  uint64_t s = 7;
  enum { N = 2003 };
  static float af[N], bf[N], df[N];
  static double ad[N], bd[N], dd[N];
  for (int op = 0; op < UL_OP_COUNT; op++) {
    for (int i = 0; i < N; i++) {
      af[i] = bitsf((uint32_t)lcg(&s));
      bf[i] = i % 7 == 0 ? af[i] : bitsf((uint32_t)lcg(&s)); /* some equal pairs */
      ad[i] = bitsd(lcg(&s) << 11 ^ lcg(&s));
      bd[i] = i % 5 == 0 ? -ad[i] : bitsd(lcg(&s) << 11 ^ lcg(&s));
    }
    cr_assert_eq(ul_reduce_local(df, af, bf, N, UL_FP32, (ul_op_t)op), UL_OK);
    cr_assert_eq(ul_reduce_local(dd, ad, bd, N, UL_FP64, (ul_op_t)op), UL_OK);
    for (int i = 0; i < N; i++) {
      float wf = (float)ref_full((ul_op_t)op, af[i], bf[i]);
      double wd = ref_full((ul_op_t)op, ad[i], bd[i]);
      if (isnan(wf))
        cr_assert(isnan(df[i]));
      else
        cr_assert(memcmp(&wf, &df[i], 4) == 0, "fp32 %s: %a op %a = %a want %a",
                  ul_op_name((ul_op_t)op), af[i], bf[i], df[i], wf);
      if (isnan(wd))
        cr_assert(isnan(dd[i]));
      else
        cr_assert(memcmp(&wd, &dd[i], 8) == 0, "fp64 %s: %a op %a = %a want %a",
                  ul_op_name((ul_op_t)op), ad[i], bd[i], dd[i], wd);
    }
  }
}

Test(reduce, min_max_nan_and_signed_zero, .timeout = 10) {
  ul_dtype_t dts[] = {UL_FP16, UL_BF16, UL_FP32, UL_FP64, UL_FP8_E4M3, UL_FP8_E5M2};
  /* pairs (x, y): NaN either side, zeros of both signs, ordinary values */
  const double xs[] = {NAN, 1.0, NAN, -0.0, 0.0, -0.0, 0.0, -2.0, 3.0};
  const double ys[] = {1.0, NAN, NAN, 0.0, -0.0, -0.0, 0.0, 3.0, -2.0};
  enum { P = 9 };
  for (int k = 0; k < 6; k++) {
    ul_dtype_t dt = dts[k];
    unsigned char a[P * 8], b[P * 8], d[P * 8];
    for (int i = 0; i < P; i++) {
      store(dt, a, (size_t)i, xs[i]);
      store(dt, b, (size_t)i, ys[i]);
    }
    for (int is_max = 0; is_max < 2; is_max++) {
      cr_assert_eq(ul_reduce_local(d, a, b, P, dt, is_max ? UL_MAX : UL_MIN), UL_OK);
      for (int i = 0; i < P; i++) {
        double want = ref_minmax(is_max, xs[i], ys[i]), got = load(dt, d, (size_t)i);
        if (isnan(want)) {
          cr_assert(isnan(got), "%s %s(%g,%g) = %g, want NaN", ul_dtype_name(dt),
                    is_max ? "max" : "min", xs[i], ys[i], got);
        } else {
          cr_assert(got == want && signbit(got) == signbit(want), "%s %s(%g,%g) = %g want %g",
                    ul_dtype_name(dt), is_max ? "max" : "min", xs[i], ys[i], got, want);
        }
      }
    }
    /* sum with NaN is NaN */
    cr_assert_eq(ul_reduce_local(d, a, b, P, dt, UL_SUM), UL_OK);
    cr_assert(isnan(load(dt, d, 0)) && isnan(load(dt, d, 1)) && isnan(load(dt, d, 2)));
  }
}

/* ------------------------------------------------------------- integers */

Test(reduce, integer_wraparound, .timeout = 10) {
  int8_t a8[] = {127, 100, -128, -128, -1}, b8[] = {1, 3, -1, -1, 127}, d8[5];
  cr_assert_eq(ul_reduce_local(d8, a8, b8, 5, UL_INT8, UL_SUM), UL_OK);
  cr_assert(d8[0] == -128 && d8[1] == 103 && d8[2] == 127 && d8[3] == 127 && d8[4] == 126);
  cr_assert_eq(ul_reduce_local(d8, a8, b8, 5, UL_INT8, UL_PROD), UL_OK);
  cr_assert(d8[0] == 127 && d8[1] == 44 && d8[2] == -128 && d8[4] == -127);
  uint8_t u8a[] = {255, 16, 200}, u8b[] = {1, 16, 100}, u8d[3];
  cr_assert_eq(ul_reduce_local(u8d, u8a, u8b, 3, UL_UINT8, UL_SUM), UL_OK);
  cr_assert(u8d[0] == 0 && u8d[1] == 32 && u8d[2] == 44);
  cr_assert_eq(ul_reduce_local(u8d, u8a, u8b, 3, UL_UINT8, UL_PROD), UL_OK);
  cr_assert(u8d[0] == 255 && u8d[1] == 0 && u8d[2] == 32);
  int32_t a32[] = {INT32_MAX, 65536, 65537, INT32_MIN}, b32[] = {1, 65536, 65537, -1}, d32[4];
  cr_assert_eq(ul_reduce_local(d32, a32, b32, 4, UL_INT32, UL_SUM), UL_OK);
  cr_assert(d32[0] == INT32_MIN && d32[3] == INT32_MAX);
  cr_assert_eq(ul_reduce_local(d32, a32, b32, 4, UL_INT32, UL_PROD), UL_OK);
  cr_assert(d32[1] == 0 && d32[2] == 131073 && d32[3] == INT32_MIN);
  uint32_t u32a[] = {UINT32_MAX, 0x80000000u}, u32b[] = {2, 2}, u32d[2];
  cr_assert_eq(ul_reduce_local(u32d, u32a, u32b, 2, UL_UINT32, UL_SUM), UL_OK);
  cr_assert(u32d[0] == 1 && u32d[1] == 0x80000002u);
  cr_assert_eq(ul_reduce_local(u32d, u32a, u32b, 2, UL_UINT32, UL_PROD), UL_OK);
  cr_assert(u32d[0] == UINT32_MAX - 1 && u32d[1] == 0);
  int64_t a64[] = {INT64_MAX, INT64_MIN, 1LL << 32}, b64[] = {1, -1, 1LL << 32}, d64[3];
  cr_assert_eq(ul_reduce_local(d64, a64, b64, 3, UL_INT64, UL_SUM), UL_OK);
  cr_assert(d64[0] == INT64_MIN && d64[1] == INT64_MAX && d64[2] == 1LL << 33);
  cr_assert_eq(ul_reduce_local(d64, a64, b64, 3, UL_INT64, UL_PROD), UL_OK);
  cr_assert(d64[0] == INT64_MAX && d64[1] == INT64_MIN && d64[2] == 0);
  uint64_t u64a[] = {UINT64_MAX, 3}, u64b[] = {UINT64_MAX, 0x5555555555555556ULL}, u64d[2];
  cr_assert_eq(ul_reduce_local(u64d, u64a, u64b, 2, UL_UINT64, UL_PROD), UL_OK);
  cr_assert(u64d[0] == 1 && u64d[1] == 2);
  cr_assert_eq(ul_reduce_local(u64d, u64a, u64b, 2, UL_UINT64, UL_SUM), UL_OK);
  cr_assert(u64d[0] == UINT64_MAX - 1);
}

/* Value of the low `bits` bits of v as a (sign-extended if is_signed) wide integer. */
static __int128 widen(uint64_t v, unsigned bits, int is_signed) {
  if (!is_signed || !(v >> (bits - 1) & 1)) return (__int128)v;
  return (__int128)v - ((__int128)1 << bits);
}

/* Full-range integers (extremes mixed in) against wide-integer references; min/max of
 * 64-bit types use a branch-free compare that must be right where x - y overflows. */
Test(reduce, integers_full_range_random, .timeout = 30) {
  enum { N = 1031 };
  static int64_t a[N], b[N], d[N];
  static const uint64_t extremes[] = {0, 1, UINT64_MAX, 0x7fffffffffffffffULL,
                                      0x8000000000000000ULL, 0x8000000000000001ULL,
                                      0xfffffffffffffffeULL};
  uint64_t s = 2024;
  ul_dtype_t ints[] = {UL_INT8, UL_UINT8, UL_INT32, UL_UINT32, UL_INT64, UL_UINT64};
  for (int k = 0; k < 6; k++) {
    ul_dtype_t dt = ints[k];
    size_t es = ul_dtype_size(dt);
    int is_signed = dt == UL_INT8 || dt == UL_INT32 || dt == UL_INT64;
    for (int op = 0; op < UL_OP_COUNT; op++) {
      for (int i = 0; i < N; i++) {
        uint64_t x = lcg(&s) << 11 ^ lcg(&s), y = lcg(&s) << 11 ^ lcg(&s);
        if (i % 4 == 1) x = extremes[lcg(&s) % 7];
        if (i % 3 == 1) y = extremes[lcg(&s) % 7];
        memcpy((char *)a + i * es, &x, es); /* little-endian low bytes */
        memcpy((char *)b + i * es, &y, es);
      }
      cr_assert_eq(ul_reduce_local(d, a, b, N, dt, (ul_op_t)op), UL_OK);
      unsigned bits = (unsigned)es * 8;
      uint64_t mask = bits == 64 ? UINT64_MAX : (1ULL << bits) - 1;
      for (int i = 0; i < N; i++) {
        uint64_t x = 0, y = 0, got = 0, want;
        memcpy(&x, (char *)a + i * es, es);
        memcpy(&y, (char *)b + i * es, es);
        memcpy(&got, (char *)d + i * es, es);
        __int128 sx = widen(x, bits, is_signed), sy = widen(y, bits, is_signed);
        switch (op) {
        case UL_PROD: want = (uint64_t)((unsigned __int128)x * y) & mask; break;
        case UL_MIN: want = (sx < sy ? x : y) & mask; break;
        case UL_MAX: want = (sx > sy ? x : y) & mask; break;
        default: want = (x + y) & mask; break;
        }
        cr_assert_eq(got, want, "%s %s: 0x%llx op 0x%llx = 0x%llx, want 0x%llx",
                     ul_dtype_name(dt), ul_op_name((ul_op_t)op), (unsigned long long)x,
                     (unsigned long long)y, (unsigned long long)got, (unsigned long long)want);
      }
    }
  }
}

/* ----------------------------------------------------------- avg scaling */

Test(reduce, scale_avg_integers_truncate, .timeout = 10) {
  int32_t i32[] = {-7, 7, 8, -1, INT32_MIN, INT32_MAX};
  cr_assert_eq(ul_scale_avg_local(i32, 6, UL_INT32, 2), UL_OK);
  cr_assert(i32[0] == -3 && i32[1] == 3 && i32[2] == 4 && i32[3] == 0 &&
            i32[4] == INT32_MIN / 2 && i32[5] == INT32_MAX / 2);
  int8_t i8[] = {-128, 127, -5};
  cr_assert_eq(ul_scale_avg_local(i8, 3, UL_INT8, 3), UL_OK);
  cr_assert(i8[0] == -42 && i8[1] == 42 && i8[2] == -1);
  uint8_t u8[] = {255, 2};
  cr_assert_eq(ul_scale_avg_local(u8, 2, UL_UINT8, 4), UL_OK);
  cr_assert(u8[0] == 63 && u8[1] == 0);
  uint32_t u32[] = {UINT32_MAX};
  cr_assert_eq(ul_scale_avg_local(u32, 1, UL_UINT32, 7), UL_OK);
  cr_assert_eq(u32[0], UINT32_MAX / 7);
  int64_t i64[] = {INT64_MIN, -9};
  cr_assert_eq(ul_scale_avg_local(i64, 2, UL_INT64, 5), UL_OK);
  cr_assert(i64[0] == INT64_MIN / 5 && i64[1] == -1);
  uint64_t u64[] = {UINT64_MAX};
  cr_assert_eq(ul_scale_avg_local(u64, 1, UL_UINT64, 3), UL_OK);
  cr_assert_eq(u64[0], UINT64_MAX / 3);
}

/* Float avg: fp32 in float, fp64 in double, small floats through float with one
 * rounding back: each must equal the correctly rounded quotient. For the small
 * formats every code is tried. */
Test(reduce, scale_avg_floats_correctly_rounded, .timeout = 60) {
  ul_dtype_t dts[] = {UL_FP16, UL_BF16, UL_FP8_E4M3, UL_FP8_E5M2};
  static uint16_t buf[65536], orig[65536];
  for (int k = 0; k < 4; k++) {
    ul_dtype_t dt = dts[k];
    size_t es = ul_dtype_size(dt), n = es == 1 ? 256 : 65536;
    for (int nranks = 1; nranks <= 9; nranks += 2) {
      for (size_t i = 0; i < n; i++) {
        uint16_t c = (uint16_t)i;
        memcpy((char *)orig + i * es, &c, es);
      }
      memcpy(buf, orig, n * es);
      cr_assert_eq(ul_scale_avg_local(buf, n, dt, nranks), UL_OK);
      for (size_t i = 0; i < n; i++) {
        double want = load(dt, orig, i) / nranks;
        uint16_t w = 0, g = 0;
        memcpy(&g, (char *)buf + i * es, es);
        if (isnan(want)) {
          cr_assert(isnan(load(dt, buf, i)));
          continue;
        }
        cr_assert_eq(ul_value_store(dt, &w, want), UL_OK);
        cr_assert_eq(g, w, "%s 0x%zx / %d = 0x%x want 0x%x", ul_dtype_name(dt), i, nranks, g, w);
      }
    }
  }
  uint64_t s = 5;
  enum { N = 1001 };
  static float f[N], f0[N];
  static double d[N], d0[N];
  for (int i = 0; i < N; i++) {
    f[i] = f0[i] = bitsf((uint32_t)lcg(&s));
    d[i] = d0[i] = bitsd(lcg(&s) << 11 ^ lcg(&s));
  }
  cr_assert_eq(ul_scale_avg_local(f, N, UL_FP32, 3), UL_OK);
  cr_assert_eq(ul_scale_avg_local(d, N, UL_FP64, 6), UL_OK);
  for (int i = 0; i < N; i++) {
    float wf = (float)((double)f0[i] / 3.0);
    double wd = d0[i] / 6.0;
    cr_assert(isnan(wf) ? isnan(f[i]) : memcmp(&wf, &f[i], 4) == 0, "fp32 %a/3 = %a want %a",
              f0[i], f[i], wf);
    cr_assert(isnan(wd) ? isnan(d[i]) : memcmp(&wd, &d[i], 8) == 0);
  }
  /* avg reduces as sum: reduce then scale gives the mean */
  float x[] = {1.0f, 2.0f, -3.0f}, y[] = {3.0f, 2.0f, 1.0f}, z[3];
  cr_assert_eq(ul_reduce_local(z, x, y, 3, UL_FP32, UL_AVG), UL_OK);
  cr_assert_eq(ul_scale_avg_local(z, 3, UL_FP32, 2), UL_OK);
  cr_assert(z[0] == 2.0f && z[1] == 2.0f && z[2] == -1.0f);
}

Test(reduce, scale_avg_bad_args, .timeout = 10) {
  float f[] = {4.0f, 8.0f};
  cr_assert_eq(ul_scale_avg_local(f, 2, UL_FP32, 0), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_scale_avg_local(f, 2, UL_FP32, -2), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_scale_avg_local(f, 2, UL_DTYPE_COUNT, 2), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_scale_avg_local(f, 2, (ul_dtype_t)-1, 2), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_scale_avg_local(NULL, 2, UL_FP32, 2), UL_ERR_INVALID_ARG);
  cr_assert(f[0] == 4.0f && f[1] == 8.0f, "buffer changed on error");
  cr_assert_eq(ul_scale_avg_local(NULL, 0, UL_FP32, 2), UL_OK);
  cr_assert_eq(ul_scale_avg_local(f, 2, UL_FP32, 1), UL_OK);
  cr_assert(f[0] == 4.0f && f[1] == 8.0f);
}

/* ------------------------------------------------------------- bad args */

Test(reduce, bad_args_change_nothing, .timeout = 10) {
  int32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  int32_t d[8] = {0};
  cr_assert_eq(ul_reduce_local(NULL, a, b, 4, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert(strstr(ul_last_error(), "ul_reduce_local: dst is NULL"), "%s", ul_last_error());
  cr_assert_eq(ul_reduce_local(d, NULL, b, 4, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_local(d, a, NULL, 4, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_local(d, a, b, 4, UL_DTYPE_COUNT, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_local(d, a, b, 4, (ul_dtype_t)-1, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_local(d, a, b, 4, UL_INT32, UL_OP_COUNT), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_local(d, a, b, 4, UL_INT32, (ul_op_t)-1), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_local(d, a, b, SIZE_MAX / 2, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  for (int i = 0; i < 8; i++) cr_assert_eq(d[i], 0);
  /* partial overlap of dst with an input */
  cr_assert_eq(ul_reduce_local(a + 1, a, b, 4, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_local(b, a, b + 2, 4, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_local(a + 2, a + 2, a, 4, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  for (int i = 0; i < 8; i++) cr_assert(a[i] == i + 1 && b[i] == 1);
  /* count 0: nothing to do, any pointers */
  cr_assert_eq(ul_reduce_local(NULL, NULL, NULL, 0, UL_FP32, UL_MAX), UL_OK);
  cr_assert_eq(ul_reduce_local(d, a, b, 0, UL_INT32, UL_SUM), UL_OK);
  for (int i = 0; i < 8; i++) cr_assert_eq(d[i], 0);
  /* inputs may overlap each other (both only read) */
  cr_assert_eq(ul_reduce_local(d, a, a + 1, 6, UL_INT32, UL_SUM), UL_OK);
  for (int i = 0; i < 6; i++) cr_assert_eq(d[i], 2 * i + 3);
  cr_assert_eq(d[6], 0);
}

/* ------------------------------------------------------ streaming reduction */

/* ul_reduce_stream_local writes exactly ul_reduce_local's bytes into each of its outputs
 * and nothing around them: every dtype and op, counts across line boundaries, outputs
 * at every element offset from a line and at offsets from each other that do and do
 * not allow streaming stores (a multiple of 16 bytes or not), and in place (outputs that
 * are the inputs). */
Test(reduce, stream_matches_reduce_local, .timeout = 120) {
  enum { PAD = 128, MAXC = 300 };
  static const size_t counts[] = {1, 7, 15, 16, 17, 63, 64, 65, 130, 257, MAXC};
  uint64_t s = 7;
  unsigned char *buf = aligned_alloc(64, 6 * (MAXC * 8 + 2 * PAD));
  cr_assert(buf);
  size_t stride = MAXC * 8 + 2 * PAD;
  unsigned char *a = buf + PAD, *b = a + stride, *want = b + stride;
  unsigned char *o[3] = {want + stride, want + 2 * stride, want + 3 * stride};
  for (int dt = 0; dt < UL_DTYPE_COUNT; dt++)
    for (int op = 0; op < UL_OP_COUNT; op++)
      for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        size_t count = counts[ci], es = ul_dtype_size((ul_dtype_t)dt), bytes = count * es;
        for (size_t i = 0; i < count; i++) {
          store((ul_dtype_t)dt, a, i, gen_exact((ul_dtype_t)dt, 0, &s));
          store((ul_dtype_t)dt, b, i, gen_exact((ul_dtype_t)dt, 1, &s));
        }
        cr_assert_eq(ul_reduce_local(want, a, b, count, (ul_dtype_t)dt, (ul_op_t)op), UL_OK);
        for (int ndst = 1; ndst <= 3; ndst++)
          for (size_t shift = 0; shift < 4; shift++) {
            void *dst[3];
            for (int d = 0; d < ndst; d++) {
              /* output 0 at shift elements from a line; output 2 a few bytes off the
               * others' 16-byte offset when the dtype allows (ordinary stores for it) */
              size_t skew = d == 2 && es < 16 ? es : 0;
              dst[d] = o[d] + shift * es + skew;
              memset(o[d] - PAD, 0xC3, stride);
            }
            cr_assert_eq(ul_reduce_stream_local(dst, ndst, a, b, count, (ul_dtype_t)dt,
                                                (ul_op_t)op),
                         UL_OK);
            for (int d = 0; d < ndst; d++) {
              unsigned char *p = dst[d];
              cr_assert_eq(memcmp(p, want, bytes), 0, "%s %s count %zu ndst %d shift %zu: "
                           "output %d differs", ul_dtype_name((ul_dtype_t)dt),
                           ul_op_name((ul_op_t)op), count, ndst, shift, d);
              for (unsigned char *q = o[d] - PAD; q < o[d] - PAD + stride; q++)
                if (q < p || q >= p + bytes)
                  cr_assert_eq(*q, 0xC3, "%s count %zu: byte %td around output %d written",
                               ul_dtype_name((ul_dtype_t)dt), count, q - p, d);
            }
          }
        /* in place: the outputs are the inputs themselves */
        memcpy(o[0], a, bytes);
        memcpy(o[1], b, bytes);
        void *inplace[2] = {o[0], o[1]};
        cr_assert_eq(ul_reduce_stream_local(inplace, 2, o[0], o[1], count, (ul_dtype_t)dt,
                                            (ul_op_t)op),
                     UL_OK);
        cr_assert_eq(memcmp(o[0], want, bytes), 0, "in place: a");
        cr_assert_eq(memcmp(o[1], want, bytes), 0, "in place: b");
      }
  free(buf);
}

Test(reduce, stream_bad_args_change_nothing, .timeout = 10) {
  int32_t a[32], b[32], d0[32], d1[32];
  for (int i = 0; i < 32; i++) a[i] = i, b[i] = 1, d0[i] = d1[i] = -1;
  void *two[2] = {d0, d1}, *null1[2] = {d0, NULL};
  cr_assert_eq(ul_reduce_stream_local(two, 0, a, b, 8, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_stream_local(NULL, 1, a, b, 8, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_stream_local(null1, 2, a, b, 8, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert(strstr(ul_last_error(), "dst[1] is NULL"), "%s", ul_last_error());
  cr_assert_eq(ul_reduce_stream_local(two, 2, NULL, b, 8, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_stream_local(two, 2, a, b, 8, UL_DTYPE_COUNT, UL_SUM),
               UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_stream_local(two, 2, a, b, 8, UL_INT32, UL_OP_COUNT),
               UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_stream_local(two, 2, a, b, SIZE_MAX / 2, UL_INT32, UL_SUM),
               UL_ERR_INVALID_ARG);
  /* an output partially over an input, or two outputs over each other */
  void *part[2] = {d0, a + 1}, *same[2] = {d0, d0 + 4};
  cr_assert_eq(ul_reduce_stream_local(part, 2, a, b, 8, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_reduce_stream_local(same, 2, a, b, 8, UL_INT32, UL_SUM), UL_ERR_INVALID_ARG);
  cr_assert(strstr(ul_last_error(), "overlaps dst[0]"), "%s", ul_last_error());
  for (int i = 0; i < 32; i++) cr_assert(a[i] == i && b[i] == 1 && d0[i] == -1 && d1[i] == -1);
  /* count 0: nothing to do */
  cr_assert_eq(ul_reduce_stream_local(two, 2, a, b, 0, UL_INT32, UL_SUM), UL_OK);
  for (int i = 0; i < 32; i++) cr_assert(d0[i] == -1 && d1[i] == -1);
}

/* ------------------------------------------------------------ streaming copy */

/* ul_copy_stream_local copies exactly the bytes memcpy would and nothing around them:
 * every destination offset from a line, every length across the 16-byte head, whole
 * lines and the tail, and a source at another offset than the destination. */
Test(reduce, copy_stream_matches_memcpy, .timeout = 30) {
  enum { CS_GUARD = 80, CS_MAX = 300 };
  static unsigned char src[CS_MAX + 128], dst[CS_GUARD + CS_MAX + 128 + CS_GUARD], want[sizeof dst];
  for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 37 + 11);
  for (size_t doff = 0; doff < 64; doff += 3)
    for (size_t soff = 0; soff < 20; soff += 7)
      for (size_t len = 0; len <= CS_MAX; len += len < 70 ? 1 : 23) {
        memset(dst, 0xA5, sizeof dst);
        memcpy(want, dst, sizeof dst);
        memcpy(want + CS_GUARD + doff, src + soff, len);
        cr_assert_eq(ul_copy_stream_local(dst + CS_GUARD + doff, src + soff, len), UL_OK);
        cr_assert_eq(memcmp(dst, want, sizeof dst), 0, "dst offset %zu, src offset %zu, %zu bytes",
                     doff, soff, len);
      }
  unsigned char d[8] = {0};
  cr_assert_eq(ul_copy_stream_local(NULL, src, 8), UL_ERR_INVALID_ARG);
  cr_assert(strstr(ul_last_error(), "dst is NULL"), "%s", ul_last_error());
  cr_assert_eq(ul_copy_stream_local(d, NULL, 8), UL_ERR_INVALID_ARG);
  for (int i = 0; i < 8; i++) cr_assert_eq(d[i], 0);
  cr_assert_eq(ul_copy_stream_local(NULL, NULL, 0), UL_OK);
}
