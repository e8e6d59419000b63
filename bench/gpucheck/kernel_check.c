/* ul_kernel_check: the cuda backend's device kernels (backends/cuda/cuda_kernels.cu, linked
 * into this program through the launchers of cuda_kernels.h) against the core's host
 * reductions (ul_reduce_local / ul_scale_avg_local), element by element, bit for bit.
 *
 *   all 65536 pairs for fp8 e4m3/e5m2 and int8/uint8 x sum/prod/min/max/avg;
 *   fp16/bf16: every value against random partners plus 1e6 random pairs (-s N);
 *   fp32/fp64/int32/uint32/int64/uint64: edge values and 1e6 random pairs;
 *   avg scaling for nranks 2..9 over the same inputs;
 *   counts 1, 3, 7, 257: aligned, one element off, in place (dst == a, dst == b), with
 *   guard elements around dst that must stay untouched;
 *   one count above 2^31 (int8 sum, 2^31+5 elements, ~6 GiB of device memory; --no-huge).
 *
 * Differences where both values are NaN are counted apart (the device's conversions give a
 * canonical NaN, the core keeps sign and payload: review finding L4); they fail only with
 * --strict-nan. Any other difference, a guard overwritten or a CUDA error fails.
 * Last line: "kernel-check: RESULT PASS|FAIL cases=.. elements=.. nan_only=.. diff=.. huge=..".
 * Exit: 0 pass, 1 differences, 2 CUDA or usage error, 3 no CUDA device. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unilink/backend.h>
#include <unilink/unilink.h>

#include "cuda_kernels.h"

#define GUARD 64                 /* guard elements each side of dst */
#define GUARD_BYTE 0xa5
#define SCRATCH (40u << 20)      /* bytes per device scratch buffer */

static cudaStream_t g_stream;
static void *g_da, *g_db, *g_dd; /* device scratch: a, b, dst (with guards) */
static int g_strict_nan, g_verbose;
static unsigned long long g_cases, g_elems, g_nan_only, g_diff, g_guard_bad;
static int g_cuda_failed;

static const ul_dtype_t k_dtypes[] = {UL_INT8, UL_UINT8, UL_INT32, UL_UINT32, UL_INT64, UL_UINT64,
                                      UL_FP16, UL_BF16, UL_FP32, UL_FP64, UL_FP8_E4M3, UL_FP8_E5M2};
#define NDT (sizeof k_dtypes / sizeof k_dtypes[0])

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int ck(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  printf("kernel-check: CUDA error in %s: %s (%s)\n", what, cudaGetErrorString(e),
         cudaGetErrorName(e));
  g_cuda_failed = 1;
  return 1;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* xorshift64*: reproducible inputs */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}

static uint64_t elem_bits(const void *p, size_t i, size_t es) {
  uint64_t v = 0;
  memcpy(&v, (const char *)p + i * es, es); /* little endian: low bytes */
  return v;
}

static int is_nan_bits(ul_dtype_t dt, uint64_t v) {
  switch (dt) {
  case UL_FP8_E4M3: return (v & 0x7f) == 0x7f;
  case UL_FP8_E5M2: return (v & 0x7f) > 0x7c;
  case UL_FP16: return (v & 0x7fff) > 0x7c00;
  case UL_BF16: return (v & 0x7fff) > 0x7f80;
  case UL_FP32: return (v & 0x7fffffffu) > 0x7f800000u;
  case UL_FP64: return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
  default: return 0;
  }
}

/* Compare n elements; print the first few real differences. Returns the real ones. */
static unsigned long long compare(const char *what, ul_dtype_t dt, const void *got,
                                  const void *exp, const void *a, const void *b, size_t n) {
  size_t es = ul_dtype_size(dt);
  unsigned long long nan_only = 0, diff = 0;
  if (memcmp(got, exp, n * es) != 0) {
    for (size_t i = 0; i < n; i++) {
      uint64_t g = elem_bits(got, i, es), e = elem_bits(exp, i, es);
      if (g == e) continue;
      if (is_nan_bits(dt, g) && is_nan_bits(dt, e)) {
        nan_only++;
        continue;
      }
      if (++diff <= 5)
        printf("  DIFF %s [%zu]: a=0x%llx b=0x%llx device=0x%llx core=0x%llx\n", what, i,
               a ? (unsigned long long)elem_bits(a, i, es) : 0ull,
               b ? (unsigned long long)elem_bits(b, i, es) : 0ull, (unsigned long long)g,
               (unsigned long long)e);
    }
  }
  g_cases++;
  g_elems += n;
  g_nan_only += nan_only;
  g_diff += diff;
  if (g_strict_nan) g_diff += nan_only;
  if (g_verbose || diff || (g_strict_nan && nan_only))
    printf("kernel-check: %-40s n=%zu nan_only=%llu diff=%llu %s\n", what, n, nan_only, diff,
           diff || (g_strict_nan && nan_only) ? "FAIL" : "ok");
  return diff;
}

/* Fill the whole dst scratch (guards included) with the guard byte. */
static int guard_fill(size_t bytes) {
  return ck(cudaMemsetAsync(g_dd, GUARD_BYTE, bytes, g_stream), "cudaMemsetAsync(guard)");
}

static int guard_check(const unsigned char *buf, size_t lo_bytes, size_t body, size_t hi_bytes,
                       const char *what) {
  for (size_t i = 0; i < lo_bytes; i++)
    if (buf[i] != GUARD_BYTE) goto bad;
  for (size_t i = 0; i < hi_bytes; i++)
    if (buf[lo_bytes + body + i] != GUARD_BYTE) goto bad;
  return 0;
bad:
  printf("  GUARD %s: bytes outside dst were written\n", what);
  g_guard_bad++;
  return 1;
}

enum { M_OOP, M_OFFSET, M_INPLACE_A, M_INPLACE_B };
static const char *k_mode[] = {"out-of-place", "offset+1", "in-place dst=a", "in-place dst=b"};

/* One reduce case on the device vs the core: n elements of a and b (host). */
static int reduce_case(ul_dtype_t dt, ul_op_t op, size_t n, const void *a, const void *b, int mode) {
  size_t es = ul_dtype_size(dt), bytes = n * es, off = (mode == M_OFFSET) ? es : 0;
  if (bytes + 2 * GUARD * es + es > SCRATCH) return 0;
  char what[96];
  snprintf(what, sizeof what, "%s %s %s", ul_dtype_name(dt), ul_op_name(op), k_mode[mode]);
  unsigned char *exp = malloc(bytes), *got = malloc(bytes + 2 * GUARD * es);
  if (!exp || !got) {
    printf("kernel-check: out of host memory\n");
    exit(2);
  }
  if (ul_reduce_local(exp, a, b, n, dt, op) != UL_OK) {
    printf("kernel-check: ul_reduce_local(%s) failed: %s\n", what, ul_last_error());
    exit(2);
  }
  /* dst region: [g_dd + GUARD*es, +bytes); in place uses the same region for a or b */
  char *dd = (char *)g_dd + GUARD * es;
  char *da = (char *)g_da + off, *db = (char *)g_db + off;
  int err = guard_fill(bytes + 2 * GUARD * es);
  if (mode == M_INPLACE_A) da = dd;
  if (mode == M_INPLACE_B) db = dd;
  if (mode == M_OFFSET) dd += es;
  err = err || ck(cudaMemcpyAsync(da, a, bytes, cudaMemcpyHostToDevice, g_stream), "H2D a");
  err = err || ck(cudaMemcpyAsync(db, b, bytes, cudaMemcpyHostToDevice, g_stream), "H2D b");
  if (!err) {
    int le = ulcuda_launch_reduce(dd, da, db, n, (int)dt, (int)op, g_stream);
    err = ck((cudaError_t)le, "ulcuda_launch_reduce");
  }
  size_t lo = GUARD * es + (mode == M_OFFSET ? es : 0), total = bytes + 2 * GUARD * es;
  err = err || ck(cudaMemcpyAsync(got, g_dd, total, cudaMemcpyDeviceToHost, g_stream), "D2H dst");
  err = err || ck(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
  if (!err) {
    compare(what, dt, got + lo, exp, a, b, n);
    guard_check(got, lo, bytes, total - lo - bytes, what);
  }
  free(exp);
  free(got);
  return err;
}

/* avg scaling of n elements by nranks on the device vs the core. */
static int scale_case(ul_dtype_t dt, int nranks, size_t n, const void *in, int offset) {
  size_t es = ul_dtype_size(dt), bytes = n * es, lo = GUARD * es + (offset ? es : 0);
  size_t total = bytes + 2 * GUARD * es + es;
  if (total > SCRATCH) return 0;
  char what[96];
  snprintf(what, sizeof what, "%s scale n=%d%s", ul_dtype_name(dt), nranks, offset ? " offset+1" : "");
  unsigned char *exp = malloc(bytes), *got = malloc(total);
  if (!exp || !got) exit(2);
  memcpy(exp, in, bytes);
  if (ul_scale_avg_local(exp, n, dt, nranks) != UL_OK) {
    printf("kernel-check: ul_scale_avg_local(%s) failed: %s\n", what, ul_last_error());
    exit(2);
  }
  int err = guard_fill(total);
  err = err || ck(cudaMemcpyAsync((char *)g_dd + lo, in, bytes, cudaMemcpyHostToDevice, g_stream), "H2D");
  if (!err)
    err = ck((cudaError_t)ulcuda_launch_scale((char *)g_dd + lo, n, (int)dt, nranks, g_stream),
             "ulcuda_launch_scale");
  err = err || ck(cudaMemcpyAsync(got, g_dd, total, cudaMemcpyDeviceToHost, g_stream), "D2H");
  err = err || ck(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
  if (!err) {
    compare(what, dt, got + lo, exp, in, NULL, n);
    guard_check(got, lo, bytes, total - lo - bytes, what);
  }
  free(exp);
  free(got);
  return err;
}

/* Edge values of a dtype as bit patterns (zeros, ones, extremes, infinities, NaNs, subnormals). */
static size_t edges(ul_dtype_t dt, uint64_t *out) {
  static const uint64_t e8[] = {0, 1, 2, 0x7f, 0x80, 0x81, 0xfe, 0xff, 0x40};
  static const uint64_t e32[] = {0, 1, 2, 0x7fffffff, 0x80000000, 0x80000001, 0xfffffffe, 0xffffffff, 0x10000};
  static const uint64_t e64[] = {0, 1, 2, 0x7fffffffffffffffull, 0x8000000000000000ull,
                                 0x8000000000000001ull, 0xfffffffffffffffeull, 0xffffffffffffffffull,
                                 0x100000000ull};
  static const uint64_t f32[] = {0, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000,
                                 0x7fc00000, 0xffc00001, 0x7f7fffff, 0xff7fffff, 0x00000001,
                                 0x807fffff, 0x00800000, 0x7f000000, 0x3effffff};
  static const uint64_t f64[] = {0, 0x8000000000000000ull, 0x3ff0000000000000ull, 0xbff0000000000000ull,
                                 0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000000ull,
                                 0xfff8000000000001ull, 0x7fefffffffffffffull, 0x0000000000000001ull,
                                 0x800fffffffffffffull, 0x0010000000000000ull, 0x7fe0000000000000ull};
  const uint64_t *s;
  size_t n;
  switch (dt) {
  case UL_INT32: case UL_UINT32: s = e32; n = sizeof e32 / 8; break;
  case UL_INT64: case UL_UINT64: s = e64; n = sizeof e64 / 8; break;
  case UL_FP32: s = f32; n = sizeof f32 / 8; break;
  case UL_FP64: s = f64; n = sizeof f64 / 8; break;
  default: s = e8; n = sizeof e8 / 8; break;
  }
  memcpy(out, s, n * 8);
  return n;
}

static void put_bits(void *p, size_t i, size_t es, uint64_t v) { memcpy((char *)p + i * es, &v, es); }

/* Random element bits; for fp32/fp64 half are "ordinary" values (random bits are mostly huge
 * or tiny), so sums and products that round are exercised too. */
static uint64_t rnd_elem(ul_dtype_t dt) {
  uint64_t r = rnd();
  if ((dt == UL_FP32 || dt == UL_FP64) && (r & 1)) {
    double v = (double)(int64_t)(rnd() >> 11) / (double)(1ull << 40) - 4096.0;
    unsigned char buf[8] = {0};
    ul_value_store(dt, buf, v);
    return elem_bits(buf, 0, ul_dtype_size(dt));
  }
  return r;
}

/* Inputs for dtype dt: exhaustive pairs for 1-byte types, else every 16-bit value (2-byte
 * types) or the edge cross product, then random pairs. Returns the count. */
static size_t make_inputs(ul_dtype_t dt, size_t nrand, void **pa, void **pb) {
  size_t es = ul_dtype_size(dt), n = 0, cap;
  uint64_t ed[32];
  size_t ne = edges(dt, ed);
  if (es == 1) cap = 65536;
  else if (es == 2) cap = 65536 + nrand;
  else cap = ne * ne + nrand;
  if (cap * es > SCRATCH - 2 * GUARD * es - es) cap = (SCRATCH - 2 * GUARD * es - es) / es;
  char *a = malloc(cap * es), *b = malloc(cap * es);
  if (!a || !b) exit(2);
  if (es == 1) {
    for (; n < 65536; n++) {
      put_bits(a, n, 1, n & 0xff);
      put_bits(b, n, 1, n >> 8);
    }
  } else if (es == 2) {
    for (; n < 65536; n++) {
      put_bits(a, n, 2, n);
      put_bits(b, n, 2, rnd());
    }
  } else {
    for (size_t i = 0; i < ne; i++)
      for (size_t j = 0; j < ne; j++, n++) {
        put_bits(a, n, es, ed[i]);
        put_bits(b, n, es, ed[j]);
      }
  }
  for (; n < cap; n++) {
    put_bits(a, n, es, rnd_elem(dt));
    put_bits(b, n, es, rnd_elem(dt));
  }
  *pa = a;
  *pb = b;
  return n;
}

static int huge_check(void) {
  const size_t n = (1ull << 31) + 5, pad = 4096;
  size_t fr = 0, tot = 0;
  if (ck(cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo")) return 2;
  if (fr < 3 * (n + pad) + (256u << 20)) {
    printf("kernel-check: huge SKIP (needs %zu MiB free, device has %zu MiB)\n",
           (3 * (n + pad)) >> 20, fr >> 20);
    return 3;
  }
  double t0 = now_s(), tg = 0, tk0 = 0, tk = 0, td = 0, tc = 0;
  unsigned char *a = malloc(n), *b = malloc(n), *got = malloc(n + pad);
  void *da = NULL, *db = NULL, *dd = NULL;
  int rc = 2;
  if (!a || !b || !got) {
    printf("kernel-check: huge SKIP (no 6 GiB of host memory)\n");
    rc = 3;
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    a[i] = (unsigned char)(i ^ (i >> 9) ^ (i >> 23));
    b[i] = (unsigned char)((i * 37u) + (i >> 31) * 11u + (i >> 17));
  }
  tg = now_s();
  if (ck(cudaMalloc(&da, n), "cudaMalloc(huge a)") || ck(cudaMalloc(&db, n), "cudaMalloc(huge b)") ||
      ck(cudaMalloc(&dd, n + pad), "cudaMalloc(huge dst)"))
    goto out;
  /* everything on the kernel's stream: it is non-blocking, so work on the legacy stream
   * (cudaMemset, a pageable cudaMemcpy that returned once staged) would not be ordered */
  if (ck(cudaMemcpyAsync(da, a, n, cudaMemcpyHostToDevice, g_stream), "H2D huge a") ||
      ck(cudaMemcpyAsync(db, b, n, cudaMemcpyHostToDevice, g_stream), "H2D huge b") ||
      ck(cudaMemsetAsync(dd, GUARD_BYTE, n + pad, g_stream), "cudaMemsetAsync huge dst") ||
      ck(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize(huge inputs)"))
    goto out;
  tk0 = now_s();
  tk = tk0;
  if (ck((cudaError_t)ulcuda_launch_reduce(dd, da, db, n, UL_INT8, UL_SUM, g_stream),
         "ulcuda_launch_reduce(huge)") ||
      ck(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize(huge)"))
    goto out;
  tk = now_s() - tk;
  td = now_s();
  if (ck(cudaMemcpyAsync(got, dd, n + pad, cudaMemcpyDeviceToHost, g_stream), "D2H huge") ||
      ck(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize(huge D2H)"))
    goto out;
  td = now_s() - td;
  tc = now_s();
  if (ul_reduce_local(a, a, b, n, UL_INT8, UL_SUM) != UL_OK) goto out; /* expected, in place */
  tc = now_s() - tc;
  size_t bad = 0, first = 0;
  if (memcmp(got, a, n) != 0)
    for (size_t i = 0; i < n; i++)
      if (got[i] != a[i] && !bad++) first = i;
  size_t gbad = 0;
  for (size_t i = n; i < n + pad; i++) gbad += got[i] != GUARD_BYTE;
  g_cases++;
  g_elems += n;
  g_diff += bad;
  g_guard_bad += gbad != 0;
  printf("kernel-check: huge int8 sum n=%zu (2^31+5): diff=%zu last=[%zu] 0x%02x guard_bad=%zu "
         "kernel %.1f ms (%.1f GB/s r+w) total %.1f s %s\n",
         n, bad, n - 1, got[n - 1], gbad, tk * 1e3, 3.0 * n / tk / 1e9, now_s() - t0,
         bad || gbad ? "FAIL" : "ok");
  printf("kernel-check: huge timing: inputs %.1f s, H2D+memset %.1f s, kernel %.3f s, D2H %.1f s, "
         "core %.1f s\n", tg - t0, tk0 - tg, tk, td, tc);
  if (bad) printf("  DIFF huge first at [%zu]: device=0x%02x core=0x%02x\n", first, got[first], a[first]);
  rc = bad || gbad ? 1 : 0;
out:
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  free(a);
  free(b);
  free(got);
  return rc;
}

int main(int argc, char **argv) {
  size_t nrand = 1000000;
  int huge = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--no-huge")) huge = 0;
    else if (!strcmp(argv[i], "--strict-nan")) g_strict_nan = 1;
    else if (!strcmp(argv[i], "-v")) g_verbose = 1;
    else if (!strcmp(argv[i], "-s") && i + 1 < argc) nrand = strtoull(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: ul_kernel_check [-s RANDOM_PAIRS] [--no-huge] [--strict-nan] [-v]\n");
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev < 1) {
    printf("kernel-check: no CUDA device (%s)\nkernel-check: RESULT SKIP no CUDA device\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 3;
  }
  double t0 = now_s();
  if (ck(cudaSetDevice(0), "cudaSetDevice") ||
      ck(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
      ck(cudaMalloc(&g_da, SCRATCH), "cudaMalloc") || ck(cudaMalloc(&g_db, SCRATCH), "cudaMalloc") ||
      ck(cudaMalloc(&g_dd, SCRATCH), "cudaMalloc"))
    return 2;

  /* 1. full input sets: every op, out of place, plus avg scaling n = 2..9 */
  for (size_t d = 0; d < NDT && !g_cuda_failed; d++) {
    ul_dtype_t dt = k_dtypes[d];
    void *a, *b;
    size_t n = make_inputs(dt, nrand, &a, &b);
    unsigned long long d0 = g_diff, n0 = g_nan_only;
    for (int op = 0; op < UL_OP_COUNT && !g_cuda_failed; op++)
      reduce_case(dt, (ul_op_t)op, n, a, b, M_OOP);
    for (int nr = 2; nr <= 9 && !g_cuda_failed; nr++) scale_case(dt, nr, n, a, 0);
    printf("kernel-check: %-9s %zu pairs x 5 ops + scale n=2..9: nan_only=%llu diff=%llu\n",
           ul_dtype_name(dt), n, g_nan_only - n0, g_diff - d0);
    free(a);
    free(b);
  }
  /* 2. odd counts, offset pointers, in place; guards around dst */
  static const size_t counts[] = {1, 3, 7, 257};
  unsigned long long d0 = g_diff, c0 = g_cases;
  for (size_t d = 0; d < NDT && !g_cuda_failed; d++) {
    ul_dtype_t dt = k_dtypes[d];
    size_t es = ul_dtype_size(dt);
    for (size_t ci = 0; ci < 4 && !g_cuda_failed; ci++) {
      size_t n = counts[ci];
      char *a = malloc(n * es), *b = malloc(n * es);
      for (size_t i = 0; i < n; i++) {
        put_bits(a, i, es, rnd_elem(dt));
        put_bits(b, i, es, rnd_elem(dt));
      }
      for (int op = 0; op < UL_OP_COUNT; op++)
        for (int m = M_OOP; m <= M_INPLACE_B; m++) reduce_case(dt, (ul_op_t)op, n, a, b, m);
      for (int nr = 2; nr <= 9; nr += 7) {
        scale_case(dt, nr, n, a, 0);
        scale_case(dt, nr, n, a, 1);
      }
      free(a);
      free(b);
    }
  }
  printf("kernel-check: odd counts 1,3,7,257 x 12 dtypes x 5 ops x 4 layouts + scale: %llu cases, "
         "diff=%llu guard_bad=%llu\n", g_cases - c0, g_diff - d0, g_guard_bad);
  /* 3. a count above 2^31 */
  const char *huge_res = "not-run";
  if (!g_cuda_failed && huge) {
    int h = huge_check();
    huge_res = h == 0 ? "PASS" : h == 3 ? "SKIP" : "FAIL";
  } else if (!huge) {
    huge_res = "SKIP";
  }
  int fail = g_cuda_failed || g_diff || g_guard_bad || !strcmp(huge_res, "FAIL");
  printf("kernel-check: RESULT %s cases=%llu elements=%llu nan_only=%llu diff=%llu guard_bad=%llu "
         "huge=%s cuda_error=%d time=%.1fs\n",
         fail ? "FAIL" : "PASS", g_cases, g_elems, g_nan_only, g_diff, g_guard_bad, huge_res,
         g_cuda_failed, now_s() - t0);
  cudaFree(g_da);
  cudaFree(g_db);
  cudaFree(g_dd);
  cudaStreamDestroy(g_stream);
  return g_cuda_failed ? 2 : fail ? 1 : 0;
}
