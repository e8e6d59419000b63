/* Branch-free conversions between float and the small formats (fp16, bf16, fp8 e4m3 and
 * e5m2), inline so that the reduction loops (reduce.c) vectorise them; dtype.c defines
 * the out-of-line ul__* versions the rest of the core uses. Round to nearest even. */
#ifndef UL_FLOAT_CONVERT_H
#define UL_FLOAT_CONVERT_H
#include <stdint.h>
#include <string.h>

#define UL__INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------ bit-level helpers */

UL__INLINE uint32_t red_f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

UL__INLINE float red_u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

UL__INLINE uint64_t red_d2u(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

UL__INLINE double red_u2d(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* cond ? x : y on bit patterns, written with masks: GCC sinks a float op that feeds
 * only one arm of a ?: into a branch and then (with -ftrapping-math, the default)
 * refuses to if-convert it, which blocks vectorisation. */
UL__INLINE uint32_t red_sel(int cond, uint32_t x, uint32_t y) {
  uint32_t m = 0u - (uint32_t)(cond != 0);
  return (x & m) | (y & ~m);
}

/* ------------------------------------------------ small float conversions */
/* One generic decoder/encoder for binary formats with E exponent bits, M mantissa bits
 * and bias B; the callers pass constants so everything folds. `ieee` = the all-ones
 * exponent means inf/NaN (fp16, e5m2); otherwise only all-ones exponent and mantissa is
 * NaN and there is no infinity (OCP e4m3). */

UL__INLINE float red_mini_decode(uint32_t v, unsigned E, unsigned M, unsigned B, int ieee) {
  const unsigned width = E + M;
  const uint32_t absmask = (1u << width) - 1u;
  const uint32_t expmask = ((1u << E) - 1u) << 23; /* exponent field at float position */
  uint32_t sign = (v >> width & 1u) << 31;
  uint32_t em = (v & absmask) << (23 - M);
  uint32_t exp = em & expmask;
  uint32_t normal = em + ((127u - B) << 23);
  /* Subnormal: put the mantissa under the smallest normal exponent, then subtract
   * that power of two; both steps are exact. */
  const uint32_t minnorm = (127u + 1u - B) << 23;
  float sub = red_u2f(em + minnorm) - red_u2f(minnorm);
  uint32_t r = red_sel(exp == 0, red_f2u(sub), normal);
  if (ieee)
    r = red_sel(exp == expmask, em | 0x7f800000u, r); /* inf/NaN keep their payload */
  else
    r = red_sel((v & absmask) == absmask, 0x7fc00000u, r);
  return red_u2f(r | sign);
}

/* Magnitude bits a (finite, not NaN) rounded to nearest even into the format; the
 * result may exceed the largest finite encoding, which the caller clamps. */
UL__INLINE uint32_t red_mini_round(uint32_t a, unsigned M, unsigned B) {
  const unsigned drop = 23 - M;
  /* Normal range: rebias the exponent, then add half an ulp minus one plus the
   * lowest kept bit, which rounds ties to even; the carry may bump the exponent. */
  uint32_t norm = (a - ((127u - B) << 23) + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) >>
                  drop;
  /* Subnormal range: adding a power of two whose ulp is the format's subnormal step
   * makes the FPU do the round to nearest even; the difference of the bit patterns is
   * then the encoding (rounding up into the smallest normal works too). */
  const uint32_t magic = (151u - B - M) << 23;
  uint32_t sub = red_f2u(red_u2f(a) + red_u2f(magic)) - magic;
  const uint32_t minnorm = (127u + 1u - B) << 23;
  return red_sel(a < minnorm, sub, norm);
}

UL__INLINE float red_fp16_to_float(uint16_t h) { return red_mini_decode(h, 5, 10, 15, 1); }

UL__INLINE uint16_t red_float_to_fp16(float f) {
  uint32_t u = red_f2u(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  uint32_t r = red_mini_round(a, 10, 15);
  r = red_sel(r > 0x7c00u, 0x7c00u, r);
  uint32_t payload = (a >> 13) & 0x3ffu; /* keep the top payload bits; never make inf */
  uint32_t nan = 0x7c00u | payload | red_sel(payload == 0, 0x200u, 0u);
  r = red_sel(a > 0x7f800000u, nan, r);
  return (uint16_t)(r | sign);
}

UL__INLINE float red_bf16_to_float(uint16_t h) { return red_u2f((uint32_t)h << 16); }

UL__INLINE uint16_t red_float_to_bf16(float f) {
  uint32_t u = red_f2u(f);
  /* Same exponent range as float: only the mantissa is rounded; a carry out of the
   * largest finite value lands exactly on infinity. */
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t t = u >> 16;
  uint32_t nan = t | red_sel((t & 0x7fu) == 0, 0x40u, 0u);
  r = red_sel((u & 0x7fffffffu) > 0x7f800000u, nan, r);
  return (uint16_t)r;
}

UL__INLINE float red_e4m3_to_float(uint8_t v) { return red_mini_decode(v, 4, 3, 7, 0); }

UL__INLINE uint8_t red_float_to_e4m3(float f) {
  uint32_t u = red_f2u(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7fffffffu;
  uint32_t r = red_mini_round(a, 3, 7);
  r = red_sel(r > 0x7eu, 0x7eu, r); /* saturate (infinities included) to 448 */
  r = red_sel(a > 0x7f800000u, 0x7fu, r);
  return (uint8_t)(r | sign);
}

UL__INLINE float red_e5m2_to_float(uint8_t v) { return red_mini_decode(v, 5, 2, 15, 1); }

UL__INLINE uint8_t red_float_to_e5m2(float f) {
  uint32_t u = red_f2u(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7fffffffu;
  uint32_t r = red_mini_round(a, 2, 15);
  r = red_sel(r > 0x7cu, 0x7cu, r);
  uint32_t payload = (a >> 21) & 0x3u;
  uint32_t nan = 0x7cu | payload | red_sel(payload == 0, 0x2u, 0u);
  r = red_sel(a > 0x7f800000u, nan, r);
  return (uint8_t)(r | sign);
}

#endif
