// Kernel launches of the fake CUDA runtime: kernels registered by nvcc-generated host code,
// dispatched by their device name to host implementations built on
// backends/cuda/cuda_elementops.cuh, run as stream tasks that may touch only what a GPU
// could. Over fakecuda_memory.cpp and fakecuda_streams.cpp.
#include "cuda_elementops.cuh"
#include "fakecuda_int.h"

using namespace fc;

namespace fc {

// ---------------------------------------------------------------- kernels
static std::atomic<long> g_kernels_run{0}; // executed by the stream workers (fakecuda.h)

// The host side of one kernel execution: translates the application's pointers to what
// the fake may touch; any pointer a GPU could not dereference makes the launch fail
// with the sticky cudaErrorIllegalAddress.
struct Exec {
  int device;
  bool bad = false;
  char why[160] = "";
  template <typename T> T *map(const void *p, size_t count) {
    size_t bytes = count * sizeof(T);
    if (bad) return nullptr;
    fakemem_region_t r;
    if (fakemem_find(p, bytes, &r) == 0) {
      if (!accessible(device, r)) {
        bad = true;
        snprintf(why, sizeof why, "%p (%zu bytes) is memory of device %d without peer access", p, bytes,
                 r.device);
        return nullptr;
      }
      return (T *)((char *)r.priv + ((const char *)p - (const char *)r.pub));
    }
    if (host_find(p, bytes, nullptr)) return (T *)p; // mapped pinned host memory (UVA)
    bad = true;
    if (fakemem_find(p, 1, nullptr) == 0)
      snprintf(why, sizeof why, "%p + %zu bytes runs past the end of its allocation", p, bytes);
    else
      snprintf(why, sizeof why, "%p (%zu bytes) is neither device memory nor pinned host memory", p, bytes);
    return nullptr;
  }
};

template <typename T> T arg(void **a, int i) {
  T v;
  memcpy(&v, a[i], sizeof(T));
  return v;
}

typedef void (*host_kernel_fn)(Exec &, void **);

template <typename T, typename U> void hk_reduce_int(Exec &x, void **a) {
  size_t n = arg<size_t>(a, 3);
  int op = arg<int>(a, 4);
  T *d = x.map<T>(arg<void *>(a, 0), n);
  const T *p = x.map<T>(arg<void *>(a, 1), n), *q = x.map<T>(arg<void *>(a, 2), n);
  if (x.bad) return;
  for (size_t i = 0; i < n; i++) d[i] = ulk::iop<T, U>(op, p[i], q[i]);
}
template <typename F> void hk_reduce_float(Exec &x, void **a) {
  size_t n = arg<size_t>(a, 3);
  int op = arg<int>(a, 4);
  F *d = x.map<F>(arg<void *>(a, 0), n);
  const F *p = x.map<F>(arg<void *>(a, 1), n), *q = x.map<F>(arg<void *>(a, 2), n);
  if (x.bad) return;
  for (size_t i = 0; i < n; i++) d[i] = ulk::fop<F>(op, p[i], q[i]);
}
template <typename C> void hk_reduce_small(Exec &x, void **a) {
  typedef typename C::S S;
  size_t n = arg<size_t>(a, 3);
  int op = arg<int>(a, 4);
  S *d = x.map<S>(arg<void *>(a, 0), n);
  const S *p = x.map<S>(arg<void *>(a, 1), n), *q = x.map<S>(arg<void *>(a, 2), n);
  if (x.bad) return;
  for (size_t i = 0; i < n; i++) d[i] = ulk::small_op<C>(op, p[i], q[i]);
}
template <typename T, typename DT> void hk_scale_int(Exec &x, void **a) {
  size_t n = arg<size_t>(a, 1);
  DT div = arg<DT>(a, 2);
  T *b = x.map<T>(arg<void *>(a, 0), n);
  if (x.bad) return;
  for (size_t i = 0; i < n; i++) b[i] = ulk::scale_int<T, DT>(b[i], div);
}
template <typename F> void hk_scale_float(Exec &x, void **a) {
  size_t n = arg<size_t>(a, 1);
  F div = arg<F>(a, 2);
  F *b = x.map<F>(arg<void *>(a, 0), n);
  if (x.bad) return;
  for (size_t i = 0; i < n; i++) b[i] = ulk::scale_float<F>(b[i], div);
}
template <typename C> void hk_scale_small(Exec &x, void **a) {
  typedef typename C::S S;
  size_t n = arg<size_t>(a, 1);
  float div = arg<float>(a, 2);
  S *b = x.map<S>(arg<void *>(a, 0), n);
  if (x.bad) return;
  for (size_t i = 0; i < n; i++) b[i] = ulk::scale_small<C>(b[i], div);
}
static void hk_store64(Exec &x, void **a) {
  unsigned long long *c = x.map<unsigned long long>(arg<void *>(a, 0), 1);
  unsigned long long v = arg<unsigned long long>(a, 1);
  if (x.bad) return;
  __atomic_store_n(c, v, __ATOMIC_SEQ_CST); // system-scope fences around a plain store
}

template <typename T> const char *tn();
template <> const char *tn<int8_t>() { return "signed char"; }
template <> const char *tn<uint8_t>() { return "unsigned char"; }
template <> const char *tn<int32_t>() { return "int"; }
template <> const char *tn<uint32_t>() { return "unsigned int"; }
template <> const char *tn<int64_t>() { return "long"; }
template <> const char *tn<uint64_t>() { return "unsigned long"; }
template <> const char *tn<float>() { return "float"; }
template <> const char *tn<double>() { return "double"; }
template <> const char *tn<ulk::F16>() { return "F16"; }
template <> const char *tn<ulk::BF16>() { return "BF16"; }
template <> const char *tn<ulk::E4M3>() { return "E4M3"; }
template <> const char *tn<ulk::E5M2>() { return "E5M2"; }

struct KernelImpl {
  host_kernel_fn fn;
  std::vector<size_t> param_sizes; // CUDA copies the parameters at launch
};

static std::unordered_map<std::string, KernelImpl> &impls() {
  static auto *m = [] {
    auto *t = new std::unordered_map<std::string, KernelImpl>;
    const size_t P = sizeof(void *), Z = sizeof(size_t), I = sizeof(int);
    auto two = [](const char *a, const char *b) { return std::string(a) + ", " + b; };
#define FC_RINT(T, U) (*t)[std::string("k_reduce_int<") + two(tn<T>(), tn<U>()) + ">"] = {hk_reduce_int<T, U>, {P, P, P, Z, I}}
    FC_RINT(int8_t, uint8_t);
    FC_RINT(uint8_t, uint8_t);
    FC_RINT(int32_t, uint32_t);
    FC_RINT(uint32_t, uint32_t);
    FC_RINT(int64_t, uint64_t);
    FC_RINT(uint64_t, uint64_t);
#define FC_RFLT(F) (*t)[std::string("k_reduce_float<") + tn<F>() + ">"] = {hk_reduce_float<F>, {P, P, P, Z, I}}
    FC_RFLT(float);
    FC_RFLT(double);
#define FC_RSML(C) (*t)[std::string("k_reduce_small<") + tn<C>() + ">"] = {hk_reduce_small<C>, {P, P, P, Z, I}}
    FC_RSML(ulk::F16);
    FC_RSML(ulk::BF16);
    FC_RSML(ulk::E4M3);
    FC_RSML(ulk::E5M2);
#define FC_SINT(T, DT) (*t)[std::string("k_scale_int<") + two(tn<T>(), tn<DT>()) + ">"] = {hk_scale_int<T, DT>, {P, Z, sizeof(DT)}}
    FC_SINT(int8_t, int32_t);
    FC_SINT(uint8_t, uint32_t);
    FC_SINT(int32_t, int32_t);
    FC_SINT(uint32_t, uint32_t);
    FC_SINT(int64_t, int64_t);
    FC_SINT(uint64_t, uint64_t);
#define FC_SFLT(F) (*t)[std::string("k_scale_float<") + tn<F>() + ">"] = {hk_scale_float<F>, {P, Z, sizeof(F)}}
    FC_SFLT(float);
    FC_SFLT(double);
#define FC_SSML(C) (*t)[std::string("k_scale_small<") + tn<C>() + ">"] = {hk_scale_small<C>, {P, Z, sizeof(float)}}
    FC_SSML(ulk::F16);
    FC_SSML(ulk::BF16);
    FC_SSML(ulk::E4M3);
    FC_SSML(ulk::E5M2);
    (*t)["k_store64"] = {hk_store64, {P, sizeof(unsigned long long)}};
    return t;
  }();
  return *m;
}

// "void (anonymous namespace)::k_reduce_int<signed char, unsigned char>(signed char*, ...)"
// -> "k_reduce_int<signed char, unsigned char>": namespaces (nvcc hashes the anonymous one
// per file) and the parameter list dropped.
static std::string kernel_key(const char *mangled) {
  int st = 0;
  char *d = abi::__cxa_demangle(mangled, nullptr, nullptr, &st);
  std::string s = (st == 0 && d) ? d : mangled;
  free(d);
  const std::string anon = "(anonymous namespace)::";
  for (size_t p; (p = s.find(anon)) != std::string::npos;) s.erase(p, anon.size());
  // Drop identifier:: qualifiers.
  std::string o;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    while (j < s.size() && (isalnum((unsigned char)s[j]) || s[j] == '_')) j++;
    if (j > i && j + 1 < s.size() && s[j] == ':' && s[j + 1] == ':') {
      i = j + 2;
      continue;
    }
    if (j > i) {
      o.append(s, i, j - i);
      i = j;
    } else {
      o.push_back(s[i]);
      i++;
    }
  }
  if (o.compare(0, 5, "void ") == 0) o.erase(0, 5);
  int depth = 0;
  for (size_t i = 0; i < o.size(); i++) {
    if (o[i] == '<') depth++;
    else if (o[i] == '>') depth--;
    else if (o[i] == '(' && depth == 0) return o.substr(0, i);
  }
  return o;
}

struct KernelRec {
  const void *host_fun;
  std::string name, key;
  const KernelImpl *impl; // null: no host implementation (cudaErrorInvalidDeviceFunction)
  void **module;
};
static std::mutex g_kern_m;
static std::unordered_map<const void *, KernelRec *> &kern_by_host() {
  static auto *m = new std::unordered_map<const void *, KernelRec *>;
  return *m;
}
static std::unordered_set<KernelRec *> &kern_all() {
  static auto *m = new std::unordered_set<KernelRec *>;
  return *m;
}

struct CallConfig {
  dim3 grid, block;
  size_t shmem;
  void *stream;
};
static thread_local std::vector<CallConfig> t_configs;

static cudaError_t check_config(dim3 g, dim3 b) {
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0)
    return cudaErrorInvalidConfiguration;
  if ((unsigned long long)b.x * b.y * b.z > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64)
    return cudaErrorInvalidConfiguration;
  if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) return cudaErrorInvalidConfiguration;
  return cudaSuccess;
}

static cudaError_t launch(KernelRec *k, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t h) {
  if (t_worker) return cudaErrorNotPermitted;
  if (!dev_ok(t_device)) return cudaErrorInvalidDevice;
  if (cudaError_t e = sticky(t_device)) return e;
  if (!k || !k->impl) return cudaErrorInvalidDeviceFunction;
  if (cudaError_t e = check_config(g, b)) return e;
  if (shmem > 227 * 1024) return cudaErrorInvalidValue;
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(h, &s)) return e;
  // "A kernel launch will fail if it is issued to a stream that is not associated to the
  // current device" (CUDA Programming Guide, multi-device system).
  if (s->device != t_device) return cudaErrorInvalidResourceHandle;
  // Copy the parameter values now, as CUDA does.
  const auto &ps = k->impl->param_sizes;
  auto blob = std::make_shared<std::vector<std::vector<char>>>(ps.size());
  for (size_t i = 0; i < ps.size(); i++) {
    (*blob)[i].assign((const char *)args[i], (const char *)args[i] + ps[i]);
  }
  host_kernel_fn fn = k->impl->fn;
  int dev = s->device;
  std::string key = k->key;
  enqueue(s, [fn, blob, dev, key] {
    std::vector<void *> av(blob->size());
    for (size_t i = 0; i < blob->size(); i++) av[i] = (*blob)[i].data();
    Exec x{dev};
    fn(x, av.data());
    g_kernels_run++;
    if (x.bad) {
      // Not CUDA (it says nothing more than the code), but what a debugger would show.
      if (sticky(dev) == cudaSuccess)
        fprintf(stderr, "fakecuda: device %d: kernel %s: %s: cudaErrorIllegalAddress (sticky)\n", dev,
                key.c_str(), x.why);
      set_sticky(dev, cudaErrorIllegalAddress);
    }
  });
  return cudaSuccess;
}

} // namespace fc

// ================================================================ exported API
// ---- kernels: the entry points of nvcc-generated host code
FC_API void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin) {
  void **h = new void *[2];
  h[0] = fatCubin;
  h[1] = nullptr;
  return h;
}
FC_API void CUDARTAPI __cudaRegisterFatBinaryEnd(void **) {}
FC_API void CUDARTAPI __cudaUnregisterFatBinary(void **h) {
  // The module (a plugin) is going away: its host stubs must not resolve any more.
  std::lock_guard<std::mutex> l(g_kern_m);
  for (auto it = kern_all().begin(); it != kern_all().end();) {
    KernelRec *k = *it;
    if (k->module == h) {
      auto f = kern_by_host().find(k->host_fun);
      if (f != kern_by_host().end() && f->second == k) kern_by_host().erase(f);
      it = kern_all().erase(it);
      delete k;
    } else {
      ++it;
    }
  }
  delete[] h;
}
FC_API void CUDARTAPI __cudaRegisterFunction(void **module, const char *hostFun, char *deviceFun,
                                             const char *deviceName, int, uint3 *, uint3 *, dim3 *, dim3 *,
                                             int *) {
  KernelRec *k = new KernelRec;
  k->host_fun = hostFun;
  k->name = deviceName ? deviceName : (deviceFun ? deviceFun : "");
  k->key = kernel_key(k->name.c_str());
  auto it = impls().find(k->key);
  k->impl = it == impls().end() ? nullptr : &it->second;
  k->module = module;
  std::lock_guard<std::mutex> l(g_kern_m);
  kern_by_host()[hostFun] = k;
  kern_all().insert(k);
  if (getenv("FAKEGPU_TRACE"))
    fprintf(stderr, "fakecuda: kernel %s -> %s%s\n", k->name.c_str(), k->key.c_str(),
            k->impl ? "" : " (no host implementation)");
}
FC_API void CUDARTAPI __cudaRegisterVar(void **, char *, char *, const char *, int, size_t, int, int) {}
FC_API void CUDARTAPI __cudaRegisterManagedVar(void **, void **, char *, const char *, int, size_t, int, int) {}
FC_API char CUDARTAPI __cudaInitModule(void **) { return 1; }

FC_API unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 g, dim3 b, size_t shmem, struct CUstream_st *s) {
  t_configs.push_back({g, b, shmem, (void *)s});
  return 0;
}
FC_API cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *g, dim3 *b, size_t *shmem, void *stream) {
  if (t_configs.empty()) return cudaErrorInvalidConfiguration;
  CallConfig c = t_configs.back();
  t_configs.pop_back();
  *g = c.grid;
  *b = c.block;
  *shmem = c.shmem;
  *(cudaStream_t *)stream = (cudaStream_t)c.stream;
  return cudaSuccess;
}

static KernelRec *kernel_of_host(const void *f) {
  std::lock_guard<std::mutex> l(g_kern_m);
  auto it = kern_by_host().find(f);
  return it == kern_by_host().end() ? nullptr : it->second;
}
static KernelRec *kernel_of_handle(cudaKernel_t k) {
  std::lock_guard<std::mutex> l(g_kern_m);
  return kern_all().count((KernelRec *)k) ? (KernelRec *)k : nullptr;
}

FC_API cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *out, const void *hostFun) {
  if (!out) return cudaErrorInvalidValue;
  KernelRec *k = kernel_of_host(hostFun);
  if (!k) return cudaErrorInvalidDeviceFunction;
  *out = (cudaKernel_t)k;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t shmem,
                                                cudaStream_t s) {
  FC_RET(launch(kernel_of_handle(kernel), g, b, args, shmem, s));
}
FC_API cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 g, dim3 b, void **args,
                                                     size_t shmem, cudaStream_t s) {
  FC_RET(launch(kernel_of_handle(kernel), g, b, args, shmem, s == nullptr ? cudaStreamPerThread : s));
}
FC_API cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t shmem,
                                              cudaStream_t s) {
  FC_RET(launch(kernel_of_host(func), g, b, args, shmem, s));
}

// ---- introspection (fakecuda.h)
FC_API long fakecuda_kernels_run(void) { return g_kernels_run.load(); }
