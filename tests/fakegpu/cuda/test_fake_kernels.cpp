// The cuda backend's kernel arithmetic against the core's host kernels, bit for bit
// (review section 3.2 made a test): every element operation of cuda_elementops.cuh (the
// header cuda_kernels.cu is built from) called directly on the host, and, where nvcc built
// cuda_kernels.cu into this test, the real ulcuda_launch_reduce/scale launchers through the
// fake runtime (nvcc's stubs -> __cudaLaunchKernel -> the fake's host kernels on a stream
// worker, device buffers the CPU cannot touch). fp8: all 65536 pairs x {sum, prod, min,
// max, avg} and avg n = 2..9; fp16/bf16: 1e6 seeded random pairs; integers and fp32/fp64
// with edge values. A difference is allowed only where both results are NaN encodings;
// the counts are reported. Plain C++ (exit status), run by ctest.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_elementops.cuh"
#include "fakecuda.h"
extern "C" {
#include <unilink/backend.h>
}
#ifdef FAKECUDA_HAVE_NVCC_KERNELS
#include "cuda_kernels.h"
#endif

namespace {

int g_failures = 0;

#define CHECK(cond, ...)                                                                         \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                       \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fprintf(stderr, "\n");                                                                     \
      g_failures++;                                                                              \
    }                                                                                            \
  } while (0)

#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_));   \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

const char *op_name(int op) {
  static const char *n[] = {"sum", "prod", "min", "max", "avg"};
  return n[op];
}

bool is_nan_bits(int dt, uint64_t v) {
  switch (dt) {
  case UL_FP16: return (v & 0x7c00) == 0x7c00 && (v & 0x3ff);
  case UL_BF16: return (v & 0x7f80) == 0x7f80 && (v & 0x7f);
  case UL_FP8_E4M3: return (v & 0x7f) == 0x7f;
  case UL_FP8_E5M2: return (v & 0x7c) == 0x7c && (v & 3);
  case UL_FP32: {
    float f;
    uint32_t u = (uint32_t)v;
    memcpy(&f, &u, 4);
    return f != f;
  }
  case UL_FP64: {
    double f;
    memcpy(&f, &v, 8);
    return f != f;
  }
  default: return false;
  }
}

struct Diff {
  size_t real = 0, nan_only = 0;
};

// Compare element by element; @what names the case in messages.
template <typename S>
Diff compare(int dt, const S *got, const S *want, size_t n, const std::string &what, bool quiet = false) {
  Diff d;
  for (size_t i = 0; i < n; i++) {
    if (memcmp(&got[i], &want[i], sizeof(S)) == 0) continue;
    uint64_t g = 0, w = 0;
    memcpy(&g, &got[i], sizeof(S));
    memcpy(&w, &want[i], sizeof(S));
    if (is_nan_bits(dt, g) && is_nan_bits(dt, w)) {
      d.nan_only++;
      continue;
    }
    if (d.real < 5 && !quiet)
      fprintf(stderr, "  %s: element %zu: kernel 0x%llx, core 0x%llx\n", what.c_str(), i, (unsigned long long)g,
              (unsigned long long)w);
    d.real++;
  }
  if (!quiet) CHECK(d.real == 0, "%s: %zu non-NaN differences", what.c_str(), d.real);
  return d;
}

void report(const char *path, const char *dt, const std::string &what, size_t n, const Diff &d) {
  printf("%-6s %-6s %-16s %9zu elements: %zu non-NaN differences, %zu NaN-only\n", path, dt, what.c_str(), n,
         d.real, d.nan_only);
}

// ---------------------------------------------------------------- the host path of the header
template <typename C> void small_direct(int dt, const char *name, const std::vector<typename C::S> &a,
                                        const std::vector<typename C::S> &b) {
  typedef typename C::S S;
  size_t n = a.size();
  std::vector<S> k(n), h(n);
  for (int op = 0; op <= 4; op++) {
    for (size_t i = 0; i < n; i++) k[i] = ulk::small_op<C>(op, a[i], b[i]);
    CHECK(ul_reduce_local(h.data(), a.data(), b.data(), n, (ul_dtype_t)dt, (ul_op_t)op) == UL_OK, "core reduce");
    report("header", name, op_name(op), n, compare<S>(dt, k.data(), h.data(), n, std::string(name) + " " + op_name(op)));
  }
  // avg scaling over every distinct value (the first 65536 or all values for fp8)
  size_t m = n < 65536 ? n : 65536;
  for (int r = 2; r <= 9; r++) {
    for (size_t i = 0; i < m; i++) k[i] = ulk::scale_small<C>(a[i], (float)r);
    memcpy(h.data(), a.data(), m * sizeof(S));
    CHECK(ul_scale_avg_local(h.data(), m, (ul_dtype_t)dt, r) == UL_OK, "core scale");
    std::string w = "avg n=" + std::to_string(r);
    report("header", name, w, m, compare<S>(dt, k.data(), h.data(), m, std::string(name) + " " + w));
  }
}

template <typename T, typename U, typename DT> void int_direct(int dt, const char *name, const std::vector<T> &a,
                                                               const std::vector<T> &b) {
  size_t n = a.size();
  std::vector<T> k(n), h(n);
  for (int op = 0; op <= 4; op++) {
    for (size_t i = 0; i < n; i++) k[i] = ulk::iop<T, U>(op, a[i], b[i]);
    CHECK(ul_reduce_local(h.data(), a.data(), b.data(), n, (ul_dtype_t)dt, (ul_op_t)op) == UL_OK, "core reduce");
    report("header", name, op_name(op), n, compare<T>(dt, k.data(), h.data(), n, std::string(name) + " " + op_name(op)));
  }
  for (int r = 2; r <= 9; r++) {
    for (size_t i = 0; i < n; i++) k[i] = ulk::scale_int<T, DT>(a[i], (DT)r);
    h = a;
    CHECK(ul_scale_avg_local(h.data(), n, (ul_dtype_t)dt, r) == UL_OK, "core scale");
    std::string w = "avg n=" + std::to_string(r);
    report("header", name, w, n, compare<T>(dt, k.data(), h.data(), n, std::string(name) + " " + w));
  }
}

template <typename F> void float_direct(int dt, const char *name, const std::vector<F> &a, const std::vector<F> &b) {
  size_t n = a.size();
  std::vector<F> k(n), h(n);
  for (int op = 0; op <= 4; op++) {
    for (size_t i = 0; i < n; i++) k[i] = ulk::fop<F>(op, a[i], b[i]);
    CHECK(ul_reduce_local(h.data(), a.data(), b.data(), n, (ul_dtype_t)dt, (ul_op_t)op) == UL_OK, "core reduce");
    report("header", name, op_name(op), n, compare<F>(dt, k.data(), h.data(), n, std::string(name) + " " + op_name(op)));
  }
  for (int r = 2; r <= 9; r++) {
    for (size_t i = 0; i < n; i++) k[i] = ulk::scale_float<F>(a[i], (F)r);
    h = a;
    CHECK(ul_scale_avg_local(h.data(), n, (ul_dtype_t)dt, r) == UL_OK, "core scale");
    std::string w = "avg n=" + std::to_string(r);
    report("header", name, w, n, compare<F>(dt, k.data(), h.data(), n, std::string(name) + " " + w));
  }
}

// ---------------------------------------------------------------- through the fake launch
#ifdef FAKECUDA_HAVE_NVCC_KERNELS
template <typename S> void launched(int dt, const char *name, const std::vector<S> &a, const std::vector<S> &b,
                                    cudaStream_t st) {
  size_t n = a.size(), bytes = n * sizeof(S);
  S *da, *db, *dd;
  CK(cudaMalloc((void **)&da, bytes));
  CK(cudaMalloc((void **)&db, bytes));
  CK(cudaMalloc((void **)&dd, bytes));
  // On the kernels' stream: cudaMemcpy from pageable memory may return before its DMA is
  // done, and a non-blocking stream does not wait for the legacy stream.
  CK(cudaMemcpyAsync(da, a.data(), bytes, cudaMemcpyHostToDevice, st));
  CK(cudaMemcpyAsync(db, b.data(), bytes, cudaMemcpyHostToDevice, st));
  std::vector<S> k(n), h(n);
  for (int op = 0; op <= 4; op++) {
    CK((cudaError_t)ulcuda_launch_reduce(dd, da, db, n, dt, op, st));
    CK(cudaMemcpyAsync(k.data(), dd, bytes, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    CHECK(ul_reduce_local(h.data(), a.data(), b.data(), n, (ul_dtype_t)dt, (ul_op_t)op) == UL_OK, "core reduce");
    report("launch", name, op_name(op), n, compare<S>(dt, k.data(), h.data(), n, std::string("launch ") + name + " " + op_name(op)));
  }
  // in place (dst == a) with an odd count
  size_t odd = n > 1 ? n - 1 : n;
  CK((cudaError_t)ulcuda_launch_reduce(da, da, db, odd, dt, UL_SUM, st));
  CK(cudaMemcpyAsync(k.data(), da, bytes, cudaMemcpyDeviceToHost, st));
  CK(cudaStreamSynchronize(st));
  h = a;
  CHECK(ul_reduce_local(h.data(), h.data(), b.data(), odd, (ul_dtype_t)dt, UL_SUM) == UL_OK, "core reduce");
  report("launch", name, "sum in place", n, compare<S>(dt, k.data(), h.data(), n, std::string("launch ") + name + " in place"));
  for (int r = 2; r <= 9; r++) {
    CK(cudaMemcpyAsync(dd, a.data(), bytes, cudaMemcpyHostToDevice, st));
    CK((cudaError_t)ulcuda_launch_scale(dd, n, dt, r, st));
    CK(cudaMemcpyAsync(k.data(), dd, bytes, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    h = a;
    CHECK(ul_scale_avg_local(h.data(), n, (ul_dtype_t)dt, r) == UL_OK, "core scale");
    std::string w = "avg n=" + std::to_string(r);
    report("launch", name, w, n, compare<S>(dt, k.data(), h.data(), n, std::string("launch ") + name + " " + w));
  }
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dd));
}
#endif

template <typename T> std::vector<T> random_vec(std::mt19937_64 &rng, size_t n, const std::vector<T> &edges) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rng();
    if (i < edges.size() * edges.size()) v[i] = edges[i % edges.size()];
    else memcpy(&v[i], &r, sizeof(T));
  }
  return v;
}
template <typename T> std::vector<T> random_vec2(std::mt19937_64 &rng, size_t n, const std::vector<T> &edges) {
  std::vector<T> v = random_vec<T>(rng, n, edges);
  for (size_t i = 0; i < edges.size() * edges.size() && i < n; i++) v[i] = edges[i / edges.size()];
  return v; // with random_vec as the first operand: every pair of edge values
}

template <typename F> std::vector<F> float_edges() {
  F inf = std::numeric_limits<F>::infinity(), nan = std::numeric_limits<F>::quiet_NaN();
  return {F(0), -F(0), F(1), F(-1), inf, -inf, nan, -nan, std::numeric_limits<F>::max(),
          std::numeric_limits<F>::lowest(), std::numeric_limits<F>::denorm_min(), F(3.5)};
}
template <typename T> std::vector<T> int_edges() {
  return {T(0), T(1), T(-1), std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), T(7), T(-7)};
}

} // namespace

int main() {
  std::mt19937_64 rng(1);
  // fp8: every (a, b) pair
  std::vector<uint8_t> fa(65536), fb(65536);
  for (unsigned i = 0; i < 65536; i++) {
    fa[i] = (uint8_t)(i >> 8);
    fb[i] = (uint8_t)i;
  }
  // fp16/bf16: 1e6 random pairs (the first 65536 a values cover every encoding for avg)
  const size_t NH = 1000000;
  std::vector<uint16_t> ha(NH), hb(NH);
  for (size_t i = 0; i < NH; i++) {
    uint64_t r = rng();
    ha[i] = i < 65536 ? (uint16_t)i : (uint16_t)r;
    hb[i] = (uint16_t)(r >> 16);
  }
  const size_t NI = 200000;
  auto i8a = random_vec<int8_t>(rng, NI, int_edges<int8_t>()), i8b = random_vec2<int8_t>(rng, NI, int_edges<int8_t>());
  auto u8a = random_vec<uint8_t>(rng, NI, int_edges<uint8_t>()), u8b = random_vec2<uint8_t>(rng, NI, int_edges<uint8_t>());
  auto i32a = random_vec<int32_t>(rng, NI, int_edges<int32_t>()), i32b = random_vec2<int32_t>(rng, NI, int_edges<int32_t>());
  auto u32a = random_vec<uint32_t>(rng, NI, int_edges<uint32_t>()), u32b = random_vec2<uint32_t>(rng, NI, int_edges<uint32_t>());
  auto i64a = random_vec<int64_t>(rng, NI, int_edges<int64_t>()), i64b = random_vec2<int64_t>(rng, NI, int_edges<int64_t>());
  auto u64a = random_vec<uint64_t>(rng, NI, int_edges<uint64_t>()), u64b = random_vec2<uint64_t>(rng, NI, int_edges<uint64_t>());
  auto f32a = random_vec<float>(rng, NI, float_edges<float>()), f32b = random_vec2<float>(rng, NI, float_edges<float>());
  auto f64a = random_vec<double>(rng, NI, float_edges<double>()), f64b = random_vec2<double>(rng, NI, float_edges<double>());

  small_direct<ulk::E4M3>(UL_FP8_E4M3, "e4m3", fa, fb);
  small_direct<ulk::E5M2>(UL_FP8_E5M2, "e5m2", fa, fb);
  small_direct<ulk::F16>(UL_FP16, "fp16", ha, hb);
  small_direct<ulk::BF16>(UL_BF16, "bf16", ha, hb);
  int_direct<int8_t, uint8_t, int32_t>(UL_INT8, "int8", i8a, i8b);
  int_direct<uint8_t, uint8_t, uint32_t>(UL_UINT8, "uint8", u8a, u8b);
  int_direct<int32_t, uint32_t, int32_t>(UL_INT32, "int32", i32a, i32b);
  int_direct<uint32_t, uint32_t, uint32_t>(UL_UINT32, "uint32", u32a, u32b);
  int_direct<int64_t, uint64_t, int64_t>(UL_INT64, "int64", i64a, i64b);
  int_direct<uint64_t, uint64_t, uint64_t>(UL_UINT64, "uint64", u64a, u64b);
  float_direct<float>(UL_FP32, "fp32", f32a, f32b);
  float_direct<double>(UL_FP64, "fp64", f64a, f64b);

  // Sanity of the comparison itself: a known edge conversion and a deliberate mismatch.
  CHECK(ulk::E4M3::enc(INFINITY) == 0x7e, "e4m3(+inf) saturates to 448 (0x7e), got 0x%x", ulk::E4M3::enc(INFINITY));
  CHECK(ulk::E4M3::enc(464.0f) == 0x7e, "e4m3(464) = 448");
  CHECK(ulk::E5M2::enc(1e6f) == 0x7c, "e5m2 overflows to inf");
  {
    uint8_t x[3] = {0x01, 0x7f, 0xff}, y[3] = {0x02, 0xff, 0x7f};
    Diff d = compare<uint8_t>(UL_FP8_E4M3, x, y, 3, "self-check", true);
    CHECK(d.real == 1 && d.nan_only == 2, "the comparison must catch a difference and only excuse NaNs");
  }

#ifdef FAKECUDA_HAVE_NVCC_KERNELS
  cudaStream_t st;
  CK(cudaSetDevice(1));
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  long k0 = fakecuda_kernels_run();
  launched<uint8_t>(UL_FP8_E4M3, "e4m3", fa, fb, st);
  launched<uint8_t>(UL_FP8_E5M2, "e5m2", fa, fb, st);
  launched<uint16_t>(UL_FP16, "fp16", ha, hb, st);
  launched<uint16_t>(UL_BF16, "bf16", ha, hb, st);
  launched<int8_t>(UL_INT8, "int8", i8a, i8b, st);
  launched<uint8_t>(UL_UINT8, "uint8", u8a, u8b, st);
  launched<int32_t>(UL_INT32, "int32", i32a, i32b, st);
  launched<uint32_t>(UL_UINT32, "uint32", u32a, u32b, st);
  launched<int64_t>(UL_INT64, "int64", i64a, i64b, st);
  launched<uint64_t>(UL_UINT64, "uint64", u64a, u64b, st);
  launched<float>(UL_FP32, "fp32", f32a, f32b, st);
  launched<double>(UL_FP64, "fp64", f64a, f64b, st);
  long ran = fakecuda_kernels_run() - k0;
  // 12 dtypes x (5 ops + in place + 8 avg) kernels, all executed by the fake
  CHECK(ran == 12 * 14, "kernels executed through the fake: %ld", ran);
  // The launcher on a stream of another device fails as CUDA does.
  CK(cudaSetDevice(0));
  void *d = nullptr;
  CK(cudaMalloc(&d, 64));
  CHECK(ulcuda_launch_scale(d, 4, UL_FP32, 2, st) == (int)cudaErrorInvalidResourceHandle,
        "launch on another device's stream must fail");
  CK(cudaFree(d));
  CK(cudaSetDevice(1));
  CK(cudaStreamDestroy(st));
  CHECK(fakecuda_live_allocations() == 0, "leaked device allocations");
#else
  printf("launch: SKIP (no nvcc: cuda_kernels.cu not built into this test)\n");
#endif
  if (g_failures) {
    fprintf(stderr, "%d failures\n", g_failures);
    return 1;
  }
  printf("OK: kernel arithmetic equals the core bit for bit (NaN encodings aside)\n");
  return 0;
}
