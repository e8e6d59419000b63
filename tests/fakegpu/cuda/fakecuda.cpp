// A fake CUDA runtime (libcudart.so.13) for proving the cuda and nccl plugins without a GPU.
// Written from the CUDA 13 headers' declarations and documented semantics only. See
// README.md for what is faithful and what is not.
//
// Shape: several fake devices per process (FAKEGPU_GPUS), a per-thread current device,
// device memory from fakemem (the CPU cannot touch it), one worker thread per stream with a
// FIFO queue and CUDA's legacy-default-stream rules expressed as dependencies between tasks,
// events as (stream, sequence) marks, kernels dispatched by their registered device name to
// host implementations built on backends/cuda/cuda_elementops.cuh.
#include <cuda_runtime_api.h>
#include <driver_types.h>
#include <vector_types.h>

#include <ctype.h>
#include <cxxabi.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda_elementops.cuh"
#include "fakecuda.h"
#include "fakemem.h"

#define FC_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxDev = 64;

// ---------------------------------------------------------------- configuration
struct Config {
  int ndev = 4;
  bool p2p = true;
  unsigned delay_us = 0;
  unsigned long long seed = 1;
  int driver_version = 13000;
  bool serialize = false; // debugging aid, not CUDA: one FIFO per device across all streams
};

const Config &cfg() {
  static const Config *c = [] {
    Config *k = new Config;
    if (const char *s = getenv("FAKEGPU_GPUS")) {
      int n = atoi(s);
      k->ndev = n < 0 ? 0 : n > kMaxDev ? kMaxDev : n;
    }
    if (const char *s = getenv("FAKEGPU_P2P")) k->p2p = !(strcmp(s, "no") == 0 || strcmp(s, "0") == 0);
    if (const char *s = getenv("FAKEGPU_DELAY_US")) k->delay_us = (unsigned)strtoul(s, nullptr, 10);
    if (const char *s = getenv("FAKEGPU_SEED")) k->seed = strtoull(s, nullptr, 10);
    if (const char *s = getenv("FAKEGPU_DRIVER_VERSION")) k->driver_version = atoi(s);
    if (const char *s = getenv("FAKEGPU_SERIALIZE")) k->serialize = atoi(s) != 0;
    return k;
  }();
  return *c;
}

int64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// ---------------------------------------------------------------- errors
thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;
thread_local bool t_worker = false; // stream worker threads (host functions run there)

std::atomic<int> g_sticky[kMaxDev];

// Record @e as this thread's last error (CUDA does so for every failing call).
cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}

bool dev_ok(int d) { return d >= 0 && d < cfg().ndev; }

cudaError_t sticky(int dev) {
  if (!dev_ok(dev)) return cudaSuccess;
  return (cudaError_t)g_sticky[dev].load();
}

void set_sticky(int dev, cudaError_t e) {
  int zero = 0;
  if (dev_ok(dev)) g_sticky[dev].compare_exchange_strong(zero, (int)e);
}

// ---------------------------------------------------------------- streams
struct Stream;
struct Dep {
  std::shared_ptr<Stream> s;
  uint64_t seq;
};
struct Task {
  std::function<void()> fn;
  std::vector<Dep> deps;
  uint64_t seq = 0;
  bool device_work = true; // kernels/copies/memsets: skipped once the device has a sticky error
};

enum StreamKind { SK_USER, SK_LEGACY, SK_PER_THREAD };

struct Stream : std::enable_shared_from_this<Stream> {
  int device = 0;
  unsigned flags = 0;
  int priority = 0;
  StreamKind kind = SK_USER;
  unsigned id = 0;
  std::mutex m;
  std::condition_variable cv_work, cv_done;
  std::deque<Task> q;
  uint64_t enq = 0;  // guarded by the device lock (and m for readers)
  uint64_t done = 0; // guarded by m
  bool dying = false;
  bool blocking() const { return kind != SK_LEGACY && !(flags & cudaStreamNonBlocking); }
};

struct Device {
  std::mutex m; // serializes enqueues on this device's streams (legacy dependencies)
  std::shared_ptr<Stream> legacy;
  std::vector<std::weak_ptr<Stream>> streams; // every stream of the device but the legacy one
  bool peer[kMaxDev] = {};
  std::shared_ptr<Stream> last; // FAKEGPU_SERIALIZE: the stream of the device's last task
  uint64_t last_seq = 0;
};

Device *devs() {
  static Device *d = new Device[kMaxDev];
  return d;
}

std::mutex g_reg_m; // stream/event handle registries
std::unordered_map<void *, std::shared_ptr<Stream>> &stream_reg() {
  static auto *m = new std::unordered_map<void *, std::shared_ptr<Stream>>;
  return *m;
}
std::atomic<unsigned> g_stream_ids{0};
std::atomic<long> g_kernels_run{0};

uint64_t stream_done(Stream &s) {
  std::lock_guard<std::mutex> l(s.m);
  return s.done;
}

void wait_done(Stream &s, uint64_t seq) {
  std::unique_lock<std::mutex> l(s.m);
  s.cv_done.wait(l, [&] { return s.done >= seq; });
}

void worker_main(std::shared_ptr<Stream> s) {
  t_worker = true;
  t_device = s->device;
  std::mt19937_64 rng(cfg().seed * 0x9e3779b97f4a7c15ULL + s->id);
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> l(s->m);
      s->cv_work.wait(l, [&] { return !s->q.empty() || s->dying; });
      if (s->q.empty()) break;
      t = std::move(s->q.front());
      s->q.pop_front();
    }
    for (auto &d : t.deps) wait_done(*d.s, d.seq);
    t.deps.clear();
    if (cfg().delay_us) {
      unsigned us = (unsigned)(rng() % (cfg().delay_us + 1ULL));
      if (us) std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
    if (t.fn && !(t.device_work && sticky(s->device) != cudaSuccess)) t.fn();
    t.fn = nullptr;
    {
      std::lock_guard<std::mutex> l(s->m);
      s->done = t.seq;
    }
    s->cv_done.notify_all();
  }
}

std::shared_ptr<Stream> new_stream(int dev, unsigned flags, StreamKind kind, int prio) {
  auto s = std::make_shared<Stream>();
  s->device = dev;
  s->flags = flags;
  s->kind = kind;
  s->priority = prio;
  s->id = ++g_stream_ids;
  std::thread(worker_main, s).detach();
  if (kind != SK_LEGACY) {
    Device &D = devs()[dev];
    std::lock_guard<std::mutex> l(D.m);
    auto &v = D.streams;
    v.erase(std::remove_if(v.begin(), v.end(), [](const std::weak_ptr<Stream> &w) { return w.expired(); }),
            v.end());
    v.push_back(s);
  }
  return s;
}

std::shared_ptr<Stream> legacy_of(int dev) {
  Device &D = devs()[dev];
  {
    std::lock_guard<std::mutex> l(D.m);
    if (D.legacy) return D.legacy;
  }
  auto s = new_stream(dev, 0, SK_LEGACY, 0);
  std::lock_guard<std::mutex> l(D.m);
  if (!D.legacy) D.legacy = s;
  else {
    std::lock_guard<std::mutex> l2(s->m);
    s->dying = true;
    s->cv_work.notify_all();
  }
  return D.legacy;
}

// This thread's cudaStreamPerThread of each device; at thread exit they drain and go away.
struct PerThreadStreams {
  std::shared_ptr<Stream> s[kMaxDev];
  ~PerThreadStreams() {
    for (auto &p : s) {
      if (!p) continue;
      std::lock_guard<std::mutex> l(p->m);
      p->dying = true;
      p->cv_work.notify_all();
    }
  }
};
thread_local PerThreadStreams t_per_thread;

std::shared_ptr<Stream> per_thread_of(int dev) {
  auto &p = t_per_thread.s[dev];
  if (!p) p = new_stream(dev, 0, SK_PER_THREAD, 0);
  return p;
}

// Resolve a cudaStream_t: 0 and cudaStreamLegacy are the current device's legacy stream,
// cudaStreamPerThread this thread's blocking stream of the current device.
cudaError_t resolve(cudaStream_t h, std::shared_ptr<Stream> *out) {
  if (!dev_ok(t_device)) return cudaErrorInvalidDevice;
  if (h == nullptr || h == cudaStreamLegacy) {
    *out = legacy_of(t_device);
    return cudaSuccess;
  }
  if (h == cudaStreamPerThread) {
    *out = per_thread_of(t_device);
    return cudaSuccess;
  }
  std::lock_guard<std::mutex> l(g_reg_m);
  auto it = stream_reg().find((void *)h);
  if (it == stream_reg().end()) return cudaErrorInvalidResourceHandle;
  *out = it->second;
  return cudaSuccess;
}

// Enqueue @fn on @s. The implicit synchronization of the legacy default stream: its work
// waits for all earlier work of the device's blocking streams, and a blocking stream's work
// waits for all earlier legacy work. Returns the task's sequence number.
uint64_t enqueue(const std::shared_ptr<Stream> &s, std::function<void()> fn, bool device_work = true,
                 std::vector<Dep> extra = {}) {
  Device &D = devs()[s->device];
  Task t;
  t.fn = std::move(fn);
  t.device_work = device_work;
  t.deps = std::move(extra);
  std::lock_guard<std::mutex> l(D.m);
  if (s->kind == SK_LEGACY) {
    for (auto &w : D.streams) {
      auto b = w.lock();
      if (!b || !b->blocking()) continue;
      uint64_t e;
      {
        std::lock_guard<std::mutex> l2(b->m);
        e = b->enq;
        if (b->done >= e) continue;
      }
      t.deps.push_back({b, e});
    }
  } else if (s->blocking() && D.legacy) {
    auto &L = D.legacy;
    std::lock_guard<std::mutex> l2(L->m);
    if (L->done < L->enq) t.deps.push_back({L, L->enq});
  }
  if (cfg().serialize && D.last && D.last != s) t.deps.push_back({D.last, D.last_seq});
  std::lock_guard<std::mutex> l3(s->m);
  t.seq = ++s->enq;
  if (cfg().serialize) {
    D.last = s;
    D.last_seq = t.seq;
  }
  uint64_t seq = t.seq;
  s->q.push_back(std::move(t));
  s->cv_work.notify_one();
  return seq;
}

// Wait for all work enqueued on @s so far.
void sync_stream(const std::shared_ptr<Stream> &s) {
  uint64_t e;
  {
    std::lock_guard<std::mutex> l(s->m);
    e = s->enq;
  }
  wait_done(*s, e);
}

void sync_device(int dev) {
  std::vector<std::shared_ptr<Stream>> all;
  {
    Device &D = devs()[dev];
    std::lock_guard<std::mutex> l(D.m);
    if (D.legacy) all.push_back(D.legacy);
    for (auto &w : D.streams)
      if (auto s = w.lock()) all.push_back(s);
  }
  for (auto &s : all) sync_stream(s);
}

// ---------------------------------------------------------------- events
struct Event {
  int device = 0;
  unsigned flags = 0;
  std::mutex m;
  std::shared_ptr<Stream> s; // last record
  uint64_t seq = 0;
  std::shared_ptr<std::atomic<int64_t>> t_ns;
};
std::unordered_map<void *, std::shared_ptr<Event>> &event_reg() {
  static auto *m = new std::unordered_map<void *, std::shared_ptr<Event>>;
  return *m;
}
std::shared_ptr<Event> find_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> l(g_reg_m);
  auto it = event_reg().find((void *)e);
  return it == event_reg().end() ? nullptr : it->second;
}

// ---------------------------------------------------------------- host memory bookkeeping
struct HostRange {
  uintptr_t base;
  size_t size;
  int device;  // current device at registration
  bool alloc;  // cudaMallocHost/cudaHostAlloc (else cudaHostRegister)
  unsigned flags;
};
std::mutex g_host_m;
std::map<uintptr_t, HostRange> &host_ranges() {
  static auto *m = new std::map<uintptr_t, HostRange>;
  return *m;
}
// The pinned range holding all of [p, p+n), if any.
bool host_find(const void *p, size_t n, HostRange *out) {
  uintptr_t a = (uintptr_t)p;
  if (n == 0) n = 1;
  std::lock_guard<std::mutex> l(g_host_m);
  auto &m = host_ranges();
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  const HostRange &r = it->second;
  if (a < r.base || a - r.base >= r.size || n > r.size - (a - r.base)) return false;
  if (out) *out = r;
  return true;
}

// ---------------------------------------------------------------- device allocations
std::mutex g_alloc_m;
struct AllocInfo {
  uint64_t serial;
  size_t size;
};
std::unordered_map<uintptr_t, AllocInfo> &allocs() { // cudaMalloc bases of this process
  static auto *m = new std::unordered_map<uintptr_t, AllocInfo>;
  return *m;
}
std::atomic<uint64_t> g_serial{0};

struct IpcOpen {
  int refs;
  int device;    // the device current when opened: it may access the mapping
  std::string key;
};
std::unordered_map<uintptr_t, IpcOpen> &ipc_opens() {
  static auto *m = new std::unordered_map<uintptr_t, IpcOpen>;
  return *m;
}
std::unordered_map<std::string, uintptr_t> &ipc_by_key() {
  static auto *m = new std::unordered_map<std::string, uintptr_t>;
  return *m;
}
std::atomic<int> g_ipc_open_count{0};

enum MemClass { MC_PAGEABLE, MC_PINNED, MC_DEVICE };
struct PtrInfo {
  MemClass cls = MC_PAGEABLE;
  int device = -1;
  bool partial = false; // starts in an allocation but runs past its end
  fakemem_region_t reg{};
};

PtrInfo classify(const void *p, size_t n) {
  PtrInfo r;
  if (fakemem_find(p, 1, &r.reg) == 0) {
    r.cls = MC_DEVICE;
    r.device = r.reg.device;
    if (fakemem_find(p, n, nullptr) != 0) r.partial = true;
    return r;
  }
  HostRange h;
  if (host_find(p, n, &h)) {
    r.cls = MC_PINNED;
    r.device = h.device;
  }
  return r;
}

int ipc_device_of(uintptr_t base) {
  std::lock_guard<std::mutex> l(g_alloc_m);
  auto it = ipc_opens().find(base);
  return it == ipc_opens().end() ? -1 : it->second.device;
}

// May a kernel on @dev touch device memory of region @r?
bool accessible(int dev, const fakemem_region_t &r) {
  if (r.device == dev) return true;
  if (r.imported && ipc_device_of((uintptr_t)r.pub) == dev) return true;
  Device &D = devs()[dev];
  std::lock_guard<std::mutex> l(D.m);
  return dev_ok(r.device) && D.peer[r.device];
}

// ---------------------------------------------------------------- kernels
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
void hk_store64(Exec &x, void **a) {
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

std::unordered_map<std::string, KernelImpl> &impls() {
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
std::string kernel_key(const char *mangled) {
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
std::mutex g_kern_m;
std::unordered_map<const void *, KernelRec *> &kern_by_host() {
  static auto *m = new std::unordered_map<const void *, KernelRec *>;
  return *m;
}
std::unordered_set<KernelRec *> &kern_all() {
  static auto *m = new std::unordered_set<KernelRec *>;
  return *m;
}

struct CallConfig {
  dim3 grid, block;
  size_t shmem;
  void *stream;
};
thread_local std::vector<CallConfig> t_configs;

cudaError_t check_config(dim3 g, dim3 b) {
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0)
    return cudaErrorInvalidConfiguration;
  if ((unsigned long long)b.x * b.y * b.z > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64)
    return cudaErrorInvalidConfiguration;
  if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) return cudaErrorInvalidConfiguration;
  return cudaSuccess;
}

cudaError_t launch(KernelRec *k, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t h) {
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

// ---------------------------------------------------------------- copies
// Where a copy reads or writes at execution: the private alias of device memory (any
// device: copies between devices stage, as in CUDA), or the host pointer itself.
void *xlate_copy(const void *p, size_t n, bool *ok) {
  fakemem_region_t r;
  if (fakemem_find(p, 1, &r) == 0) {
    void *v = fakemem_view(p, n, nullptr);
    if (!v) *ok = false;
    return v;
  }
  return (void *)p;
}

bool kind_ok(cudaMemcpyKind kind, const PtrInfo &d, const PtrInfo &s) {
  // Host sides accept any host memory; device sides device memory or mapped pinned host
  // memory (a device-accessible UVA address). Anything else contradicts the pointers.
  auto is_host = [](const PtrInfo &p) { return p.cls != MC_DEVICE; };
  auto is_dev = [](const PtrInfo &p) { return p.cls != MC_PAGEABLE; };
  switch (kind) {
  case cudaMemcpyHostToHost: return is_host(d) && is_host(s);
  case cudaMemcpyHostToDevice: return is_dev(d) && is_host(s);
  case cudaMemcpyDeviceToHost: return is_host(d) && is_dev(s);
  case cudaMemcpyDeviceToDevice: return is_dev(d) && is_dev(s);
  case cudaMemcpyDefault: return true;
  default: return false;
  }
}

// Enqueue a copy on @s; @sync_api: cudaMemcpy rather than cudaMemcpyAsync.
cudaError_t copy_on(const std::shared_ptr<Stream> &s, void *dst, const void *src, size_t n,
                    cudaMemcpyKind kind, bool sync_api) {
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return cudaErrorInvalidValue;
  PtrInfo d = classify(dst, n), sr = classify(src, n);
  if (d.partial || sr.partial) return cudaErrorInvalidValue;
  if (!kind_ok(kind, d, sr)) return cudaErrorInvalidValue;
  if (cudaError_t e = sticky(s->device)) return e;
  bool dev_dst = d.cls == MC_DEVICE, dev_src = sr.cls == MC_DEVICE;
  std::shared_ptr<std::vector<char>> snap;
  if (sr.cls == MC_PAGEABLE && dev_dst) {
    // Pageable source: staged into pinned memory before the call returns, as CUDA does.
    snap = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
  }
  int sdev = s->device;
  auto fn = [dst, src, n, snap, sdev] {
    bool ok = true;
    void *dv = xlate_copy(dst, n, &ok);
    const void *sv = snap ? snap->data() : xlate_copy(src, n, &ok);
    if (!ok) {
      set_sticky(sdev, cudaErrorIllegalAddress); // freed while the copy was queued
      return;
    }
    memmove(dv, sv, n);
  };
  uint64_t seq = enqueue(s, fn);
  bool host_only = !dev_dst && !dev_src;
  // Synchronous cases (CUDA's "API synchronization behavior"): host to host always;
  // cudaMemcpy unless device to device or from pageable memory (returns once staged).
  // cudaMemcpyAsync with pinned memory or to pageable memory is asynchronous (CUDA "might
  // be synchronous" there; the fake is not, to expose missing synchronization).
  bool wait = host_only || (sync_api && !(dev_dst && dev_src) && !snap);
  if (wait) {
    wait_done(*s, seq);
    return sticky(s->device);
  }
  return cudaSuccess;
}

cudaError_t memset_on(const std::shared_ptr<Stream> &s, void *p, int v, size_t n, bool sync_api) {
  if (n == 0) return cudaSuccess;
  PtrInfo d = classify(p, n);
  if (d.cls == MC_PAGEABLE || d.partial) return cudaErrorInvalidValue;
  if (cudaError_t e = sticky(s->device)) return e;
  int sdev = s->device;
  uint64_t seq = enqueue(s, [p, v, n, sdev] {
    bool ok = true;
    void *dv = xlate_copy(p, n, &ok);
    if (!ok) {
      set_sticky(sdev, cudaErrorIllegalAddress);
      return;
    }
    memset(dv, v, n);
  });
  if (sync_api && d.cls == MC_PINNED) wait_done(*s, seq); // synchronous only for host memory
  return cudaSuccess;
}

const char *err_name(cudaError_t e) {
  switch (e) {
#define FC_ERR(n)                                                                                \
  case n: return #n;
#include "cuda_error_names.inc"
#undef FC_ERR
  default: return nullptr;
  }
}

const char *err_text(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidDeviceFunction: return "invalid device function";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  case cudaErrorNotReady: return "device not ready";
  case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
  case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
  case cudaErrorPeerAccessNotEnabled: return "peer access has not been enabled";
  case cudaErrorPeerAccessUnsupported: return "peer access is not supported between these two devices";
  case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
  case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
  case cudaErrorDeviceUninitialized: return "invalid device context";
  case cudaErrorNotPermitted: return "operation not permitted";
  case cudaErrorNotSupported: return "operation not supported";
  case cudaErrorSymbolNotFound: return "named symbol not found";
  case cudaErrorMapBufferObjectFailed: return "mapping of buffer object failed";
  case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
  default: return nullptr;
  }
}

#define FC_RET(x) return fail(x)

struct IpcWire { // what we put in the 64-byte cudaIpcMemHandle_t
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  int32_t device;
  uint64_t size;
  uint64_t offset; // of the exported pointer in its allocation (opening maps the allocation)
  uint64_t serial;
  uint64_t inode;  // the memfd's inode: a stale fd number cannot map another allocation
};
static_assert(sizeof(IpcWire) <= sizeof(cudaIpcMemHandle_t), "IPC handle too small");
constexpr uint32_t kIpcMagic = 0x46434950; // "FCIP"

} // namespace

// ================================================================ exported API
// ---- errors, versions
FC_API cudaError_t CUDARTAPI cudaGetLastError(void) {
  cudaError_t st = sticky(t_device);
  if (st != cudaSuccess) return st;
  cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}
FC_API cudaError_t CUDARTAPI cudaPeekAtLastError(void) {
  cudaError_t st = sticky(t_device);
  return st != cudaSuccess ? st : t_last;
}
FC_API const char *CUDARTAPI cudaGetErrorName(cudaError_t e) {
  const char *n = err_name(e);
  return n ? n : "cudaErrorUnknown";
}
FC_API const char *CUDARTAPI cudaGetErrorString(cudaError_t e) {
  const char *t = err_text(e);
  if (t) return t;
  const char *n = err_name(e);
  return n ? n : "unrecognized error code";
}
FC_API cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *v) {
  if (!v) FC_RET(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaDriverGetVersion(int *v) {
  if (!v) FC_RET(cudaErrorInvalidValue);
  *v = cfg().driver_version;
  return cudaSuccess;
}
static cudaError_t entry_point(const char *symbol, void **fp, enum cudaDriverEntryPointQueryResult *status) {
  if (!symbol || !fp) return cudaErrorInvalidValue;
  *fp = nullptr; // the fake has no driver API
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  return cudaErrorSymbolNotFound;
}
FC_API cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **fp, unsigned long long,
                                                     enum cudaDriverEntryPointQueryResult *status) {
  FC_RET(entry_point(symbol, fp, status));
}
FC_API cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char *symbol, void **fp, unsigned int ver,
                                                              unsigned long long flags,
                                                              enum cudaDriverEntryPointQueryResult *status) {
  (void)ver;
  (void)flags;
  FC_RET(entry_point(symbol, fp, status));
}

// ---- devices
FC_API cudaError_t CUDARTAPI cudaGetDeviceCount(int *n) {
  if (!n) FC_RET(cudaErrorInvalidValue);
  *n = cfg().ndev;
  if (cfg().ndev == 0) FC_RET(cudaErrorNoDevice);
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaSetDevice(int d) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  if (!dev_ok(d)) FC_RET(cfg().ndev ? cudaErrorInvalidDevice : cudaErrorNoDevice);
  t_device = d;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaGetDevice(int *d) {
  if (!d) FC_RET(cudaErrorInvalidValue);
  if (cfg().ndev == 0) FC_RET(cudaErrorNoDevice);
  *d = t_device;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaInitDevice(int d, unsigned int, unsigned int) {
  if (!dev_ok(d)) FC_RET(cudaErrorInvalidDevice);
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaSetDeviceFlags(unsigned int) { return cudaSuccess; }
FC_API cudaError_t CUDARTAPI cudaGetDeviceFlags(unsigned int *f) {
  if (!f) FC_RET(cudaErrorInvalidValue);
  *f = 0;
  return cudaSuccess;
}

static int pci_bus_of(int d) { return 0x18 + 0x10 * d; } // distinct, like a real board

FC_API cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
  if (!v) FC_RET(cudaErrorInvalidValue);
  if (!dev_ok(d)) FC_RET(cudaErrorInvalidDevice);
  if ((int)a <= 0 || (int)a >= (int)cudaDevAttrMax) FC_RET(cudaErrorInvalidValue);
  int r = 0;
  switch (a) {
  case cudaDevAttrComputeCapabilityMajor: r = 9; break;
  case cudaDevAttrComputeCapabilityMinor: r = 0; break;
  case cudaDevAttrPciBusId: r = pci_bus_of(d); break;
  case cudaDevAttrPciDeviceId: r = 0; break;
  case cudaDevAttrPciDomainId: r = 0; break;
  case cudaDevAttrMaxThreadsPerBlock: r = 1024; break;
  case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: r = 1024; break;
  case cudaDevAttrMaxBlockDimZ: r = 64; break;
  case cudaDevAttrMaxGridDimX: r = 2147483647; break;
  case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: r = 65535; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: r = 49152; break;
  case cudaDevAttrWarpSize: r = 32; break;
  case cudaDevAttrMultiProcessorCount: r = 132; break;
  case cudaDevAttrClockRate: r = 1980000; break;
  case cudaDevAttrL2CacheSize: r = 50 * 1024 * 1024; break;
  case cudaDevAttrAsyncEngineCount: r = 3; break;
  case cudaDevAttrConcurrentKernels: case cudaDevAttrUnifiedAddressing: case cudaDevAttrCanMapHostMemory:
  case cudaDevAttrManagedMemory: case cudaDevAttrConcurrentManagedAccess: case cudaDevAttrCooperativeLaunch:
  case cudaDevAttrHostRegisterSupported: case cudaDevAttrIpcEventSupport: case cudaDevAttrMemoryPoolsSupported:
  case cudaDevAttrGPUDirectRDMASupported:
    r = 1;
    break;
  default: r = 0; break;
  }
  *v = r;
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
  if (!p) FC_RET(cudaErrorInvalidValue);
  if (!dev_ok(d)) FC_RET(cudaErrorInvalidDevice);
  memset(p, 0, sizeof(*p));
  snprintf(p->name, sizeof(p->name), "unilink fake GPU");
  for (int i = 0; i < 16; i++) p->uuid.bytes[i] = (char)(i == 0 ? 0xfa : i == 15 ? d : 0x11 * (i % 8));
  p->totalGlobalMem = (size_t)80 << 30;
  p->sharedMemPerBlock = 49152;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->pciBusID = pci_bus_of(d);
  p->asyncEngineCount = 3;
  p->unifiedAddressing = 1;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->managedMemory = 1;
  p->concurrentManagedAccess = 1;
  p->cooperativeLaunch = 1;
  p->hostRegisterSupported = 1;
  p->memoryPoolsSupported = 1;
  p->ipcEventSupported = 1;
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaDeviceGetPCIBusId(char *buf, int len, int d) {
  if (!buf || len <= 0) FC_RET(cudaErrorInvalidValue);
  if (!dev_ok(d)) FC_RET(cudaErrorInvalidDevice);
  snprintf(buf, (size_t)len, "%04X:%02X:%02X.0", 0, pci_bus_of(d), 0);
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaDeviceGetByPCIBusId(int *d, const char *bus) {
  if (!d || !bus) FC_RET(cudaErrorInvalidValue);
  unsigned dom = 0, b = 0, dv = 0, fn = 0;
  // [domain:]bus:device.function, hexadecimal, either case.
  if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &dv, &fn) != 4) {
    dom = 0;
    if (sscanf(bus, "%x:%x.%x", &b, &dv, &fn) != 3) FC_RET(cudaErrorInvalidValue);
  }
  for (int i = 0; i < cfg().ndev; i++) {
    if (dom == 0 && (int)b == pci_bus_of(i) && dv == 0) {
      *d = i;
      return cudaSuccess;
    }
  }
  FC_RET(cudaErrorInvalidDevice);
}

FC_API cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int *can, int d, int peer) {
  if (!can) FC_RET(cudaErrorInvalidValue);
  if (!dev_ok(d) || !dev_ok(peer)) FC_RET(cudaErrorInvalidDevice);
  *can = (cfg().p2p && d != peer) ? 1 : 0;
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaDeviceGetP2PAttribute(int *v, enum cudaDeviceP2PAttr a, int src, int dst) {
  if (!v) FC_RET(cudaErrorInvalidValue);
  if (!dev_ok(src) || !dev_ok(dst) || src == dst) FC_RET(cudaErrorInvalidDevice);
  int p = cfg().p2p ? 1 : 0;
  switch (a) {
  case cudaDevP2PAttrPerformanceRank: *v = 0; break;
  case cudaDevP2PAttrAccessSupported: *v = p; break;
  case cudaDevP2PAttrNativeAtomicSupported: *v = p; break;
  case cudaDevP2PAttrCudaArrayAccessSupported: *v = p; break;
  case cudaDevP2PAttrOnlyPartialNativeAtomicSupported: *v = 0; break;
  default: FC_RET(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  if (flags != 0) FC_RET(cudaErrorInvalidValue);
  if (!dev_ok(peer) || peer == t_device) FC_RET(cudaErrorInvalidDevice);
  if (!cfg().p2p) FC_RET(cudaErrorPeerAccessUnsupported);
  Device &D = devs()[t_device];
  std::lock_guard<std::mutex> l(D.m);
  if (D.peer[peer]) FC_RET(cudaErrorPeerAccessAlreadyEnabled);
  D.peer[peer] = true;
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaDeviceDisablePeerAccess(int peer) {
  if (!dev_ok(peer) || peer == t_device) FC_RET(cudaErrorInvalidDevice);
  Device &D = devs()[t_device];
  std::lock_guard<std::mutex> l(D.m);
  if (!D.peer[peer]) FC_RET(cudaErrorPeerAccessNotEnabled);
  D.peer[peer] = false;
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  if (!dev_ok(t_device)) FC_RET(cudaErrorInvalidDevice);
  sync_device(t_device);
  FC_RET(sticky(t_device));
}

FC_API cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaMemGetInfo(size_t *fr, size_t *total) {
  if (!fr || !total) FC_RET(cudaErrorInvalidValue);
  *total = (size_t)80 << 30;
  *fr = *total - (*total / 100);
  return cudaSuccess;
}

// ---- device memory
FC_API cudaError_t CUDARTAPI cudaMalloc(void **p, size_t size) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  if (!p) FC_RET(cudaErrorInvalidValue);
  if (!dev_ok(t_device)) FC_RET(cudaErrorInvalidDevice);
  if (cudaError_t e = sticky(t_device)) FC_RET(e);
  if (size == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  void *q = nullptr;
  if (fakemem_alloc(size, t_device, &q) != 0) {
    *p = nullptr;
    FC_RET(cudaErrorMemoryAllocation);
  }
  std::lock_guard<std::mutex> l(g_alloc_m);
  allocs()[(uintptr_t)q] = {++g_serial, size};
  *p = q;
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaFree(void *p) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  if (!p) return cudaSuccess;
  fakemem_region_t r;
  {
    std::lock_guard<std::mutex> l(g_alloc_m);
    if (!allocs().count((uintptr_t)p)) FC_RET(cudaErrorInvalidValue); // not a cudaMalloc base
  }
  if (fakemem_find(p, 1, &r) != 0) FC_RET(cudaErrorInvalidValue);
  // cudaFree synchronizes: queued work that uses the memory finishes first.
  if (dev_ok(r.device)) sync_device(r.device);
  {
    std::lock_guard<std::mutex> l(g_alloc_m);
    allocs().erase((uintptr_t)p);
  }
  fakemem_free(p);
  FC_RET(sticky(t_device));
}

// ---- host memory
FC_API cudaError_t CUDARTAPI cudaHostRegister(void *p, size_t size, unsigned int flags) {
  if (!p || size == 0) FC_RET(cudaErrorInvalidValue);
  if (flags & ~(unsigned)(cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory |
                          cudaHostRegisterReadOnly))
    FC_RET(cudaErrorInvalidValue);
  if (fakemem_find(p, 1, nullptr) == 0) FC_RET(cudaErrorInvalidValue);
  uintptr_t a = (uintptr_t)p;
  std::lock_guard<std::mutex> l(g_host_m);
  auto &m = host_ranges();
  auto it = m.lower_bound(a);
  if (it != m.end() && it->first < a + size) FC_RET(cudaErrorHostMemoryAlreadyRegistered);
  if (it != m.begin()) {
    auto pr = std::prev(it);
    if (pr->first + pr->second.size > a) FC_RET(cudaErrorHostMemoryAlreadyRegistered);
  }
  m[a] = {a, size, t_device, false, flags};
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaHostUnregister(void *p) {
  std::lock_guard<std::mutex> l(g_host_m);
  auto it = host_ranges().find((uintptr_t)p);
  if (it == host_ranges().end() || it->second.alloc) FC_RET(cudaErrorHostMemoryNotRegistered);
  host_ranges().erase(it);
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaHostGetDevicePointer(void **d, void *h, unsigned int flags) {
  if (!d || flags != 0) FC_RET(cudaErrorInvalidValue);
  if (!host_find(h, 1, nullptr)) FC_RET(cudaErrorInvalidValue);
  *d = h; // unified addressing: the device sees the host address
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaHostGetFlags(unsigned int *f, void *h) {
  HostRange r;
  if (!f || !host_find(h, 1, &r)) FC_RET(cudaErrorInvalidValue);
  *f = r.flags;
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaHostAlloc(void **p, size_t size, unsigned int flags) {
  if (!p) FC_RET(cudaErrorInvalidValue);
  if (size == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  void *q = nullptr;
  if (posix_memalign(&q, 4096, size) != 0) FC_RET(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> l(g_host_m);
  host_ranges()[(uintptr_t)q] = {(uintptr_t)q, size, t_device, true, flags};
  *p = q;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaMallocHost(void **p, size_t size) { return cudaHostAlloc(p, size, 0); }
FC_API cudaError_t CUDARTAPI cudaFreeHost(void *p) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard<std::mutex> l(g_host_m);
    auto it = host_ranges().find((uintptr_t)p);
    if (it == host_ranges().end() || !it->second.alloc) FC_RET(cudaErrorInvalidValue);
    host_ranges().erase(it);
  }
  // Like cudaFree, freeing pinned memory waits for the work that may use it.
  if (dev_ok(t_device) && !t_worker) sync_device(t_device);
  free(p);
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  if (!a) FC_RET(cudaErrorInvalidValue);
  memset(a, 0, sizeof(*a));
  fakemem_region_t r;
  if (fakemem_find(p, 1, &r) == 0) {
    a->type = cudaMemoryTypeDevice;
    a->device = r.device;
    a->hostPointer = nullptr;
    a->devicePointer = (dev_ok(t_device) && accessible(t_device, r)) ? (void *)p : nullptr;
    return cudaSuccess;
  }
  HostRange h;
  if (host_find(p, 1, &h)) {
    a->type = cudaMemoryTypeHost;
    a->device = h.device;
    a->hostPointer = (void *)p;
    a->devicePointer = (void *)p;
    return cudaSuccess;
  }
  a->type = cudaMemoryTypeUnregistered;
  a->device = -2;
  return cudaSuccess;
}

// ---- streams
static cudaError_t stream_create(cudaStream_t *out, unsigned flags, int prio) {
  if (t_worker) return cudaErrorNotPermitted;
  if (!out) return cudaErrorInvalidValue;
  if (flags & ~(unsigned)cudaStreamNonBlocking) return cudaErrorInvalidValue;
  if (!dev_ok(t_device)) return cudaErrorInvalidDevice;
  legacy_of(t_device); // the legacy stream exists before any blocking stream's first task
  auto s = new_stream(t_device, flags, SK_USER, prio);
  std::lock_guard<std::mutex> l(g_reg_m);
  stream_reg()[s.get()] = s;
  *out = (cudaStream_t)s.get();
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *s) { FC_RET(stream_create(s, 0, 0)); }
FC_API cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f) {
  FC_RET(stream_create(s, f, 0));
}
FC_API cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int prio) {
  FC_RET(stream_create(s, f, prio));
}

FC_API cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t h) {
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) FC_RET(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> l(g_reg_m);
    auto it = stream_reg().find((void *)h);
    if (it == stream_reg().end()) FC_RET(cudaErrorInvalidResourceHandle);
    s = it->second;
    stream_reg().erase(it);
  }
  // Returns at once; the worker finishes the queued work, then exits (CUDA releases the
  // stream when the device has completed all work in it).
  std::lock_guard<std::mutex> l(s->m);
  s->dying = true;
  s->cv_work.notify_all();
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t h) {
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  if (cudaError_t e = sticky(s->device)) FC_RET(e);
  bool busy;
  {
    std::lock_guard<std::mutex> l(s->m);
    busy = s->done < s->enq;
  }
  if (!busy && s->kind == SK_LEGACY) {
    // The legacy stream is also "busy" while blocking streams it would wait for are.
    Device &D = devs()[s->device];
    std::lock_guard<std::mutex> l(D.m);
    for (auto &w : D.streams) {
      auto b = w.lock();
      if (!b || !b->blocking()) continue;
      std::lock_guard<std::mutex> l2(b->m);
      if (b->done < b->enq) busy = true;
    }
  }
  return busy ? cudaErrorNotReady : cudaSuccess; // NotReady is not recorded as an error
}

FC_API cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t h) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  if (s->kind == SK_LEGACY) {
    // Synchronizing the legacy stream waits for what work issued to it now would wait for.
    uint64_t seq = enqueue(s, nullptr, false);
    wait_done(*s, seq);
  } else {
    sync_stream(s);
  }
  FC_RET(sticky(s->device));
}

FC_API cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t h, unsigned int *f) {
  std::shared_ptr<Stream> s;
  if (!f) FC_RET(cudaErrorInvalidValue);
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  *f = s->flags;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t h, int *p) {
  std::shared_ptr<Stream> s;
  if (!p) FC_RET(cudaErrorInvalidValue);
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  *p = s->priority;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t h, int *d) {
  std::shared_ptr<Stream> s;
  if (!d) FC_RET(cudaErrorInvalidValue);
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  *d = s->device;
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void *user) {
  if (t_worker) FC_RET(cudaErrorNotPermitted); // "The host function must not make any CUDA API calls"
  if (!fn) FC_RET(cudaErrorInvalidValue);
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  if (cudaError_t e = sticky(s->device)) FC_RET(e);
  enqueue(s, [fn, user] { fn(user); }, false);
  return cudaSuccess;
}

// ---- events
FC_API cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
  if (!ev) FC_RET(cudaErrorInvalidValue);
  if (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess))
    FC_RET(cudaErrorInvalidValue);
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) FC_RET(cudaErrorInvalidValue);
  if (!dev_ok(t_device)) FC_RET(cudaErrorInvalidDevice);
  auto e = std::make_shared<Event>();
  e->device = t_device;
  e->flags = flags;
  std::lock_guard<std::mutex> l(g_reg_m);
  event_reg()[e.get()] = e;
  *ev = (cudaEvent_t)e.get();
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, 0); }

FC_API cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t ev) {
  std::lock_guard<std::mutex> l(g_reg_m);
  if (!event_reg().erase((void *)ev)) FC_RET(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

static cudaError_t event_record(cudaEvent_t ev, cudaStream_t h) {
  if (t_worker) return cudaErrorNotPermitted;
  auto e = find_event(ev);
  if (!e) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<Stream> s;
  if (cudaError_t r = resolve(h, &s)) return r;
  // "cudaEventRecord() will fail if the input event and input stream are associated to
  // different devices" (CUDA Programming Guide, multi-device system).
  if (s->device != e->device) return cudaErrorInvalidResourceHandle;
  if (cudaError_t r = sticky(s->device)) return r;
  auto cell = std::make_shared<std::atomic<int64_t>>(0);
  std::lock_guard<std::mutex> l(e->m);
  uint64_t seq = enqueue(s, [cell] { cell->store(now_ns()); }, false);
  e->s = s;
  e->seq = seq;
  e->t_ns = cell;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t ev, cudaStream_t h) { FC_RET(event_record(ev, h)); }
FC_API cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t ev, cudaStream_t h, unsigned int) {
  FC_RET(event_record(ev, h));
}

FC_API cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t ev) {
  auto e = find_event(ev);
  if (!e) FC_RET(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> s;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(e->m);
    s = e->s;
    seq = e->seq;
  }
  if (cudaError_t r = sticky(e->device)) FC_RET(r);
  if (!s) return cudaSuccess; // never recorded: complete
  return stream_done(*s) >= seq ? cudaSuccess : cudaErrorNotReady;
}

FC_API cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t ev) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  auto e = find_event(ev);
  if (!e) FC_RET(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> s;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(e->m);
    s = e->s;
    seq = e->seq;
  }
  if (s) wait_done(*s, seq);
  FC_RET(sticky(e->device));
}

FC_API cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (!ms) FC_RET(cudaErrorInvalidValue);
  auto ea = find_event(a), eb = find_event(b);
  if (!ea || !eb) FC_RET(cudaErrorInvalidResourceHandle);
  if ((ea->flags | eb->flags) & cudaEventDisableTiming) FC_RET(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> sa, sb;
  uint64_t qa, qb;
  std::shared_ptr<std::atomic<int64_t>> ta, tb;
  {
    std::lock_guard<std::mutex> l(ea->m);
    sa = ea->s, qa = ea->seq, ta = ea->t_ns;
  }
  {
    std::lock_guard<std::mutex> l(eb->m);
    sb = eb->s, qb = eb->seq, tb = eb->t_ns;
  }
  if (!sa || !sb) FC_RET(cudaErrorInvalidResourceHandle);
  if (stream_done(*sa) < qa || stream_done(*sb) < qb) return cudaErrorNotReady;
  *ms = (float)((double)(tb->load() - ta->load()) / 1e6);
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t ev, unsigned int flags) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  if (flags & ~(unsigned)cudaEventWaitExternal) FC_RET(cudaErrorInvalidValue);
  auto e = find_event(ev);
  if (!e) FC_RET(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> s;
  if (cudaError_t r = resolve(h, &s)) FC_RET(r);
  std::shared_ptr<Stream> es;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(e->m);
    es = e->s;
    seq = e->seq;
  }
  if (!es) return cudaSuccess; // never recorded: nothing to wait for
  enqueue(s, nullptr, false, {{es, seq}});
  return cudaSuccess;
}

// ---- copies and sets
FC_API cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                                             cudaStream_t h) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  // A copy may be issued to a stream of another device (CUDA Programming Guide).
  FC_RET(copy_on(s, dst, src, n, k, false));
}
FC_API cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(nullptr, &s)) FC_RET(e);
  FC_RET(copy_on(s, dst, src, n, k, true));
}
static cudaError_t peer_check(void *dst, int dd, const void *src, int sd, size_t n) {
  if (!dev_ok(dd) || !dev_ok(sd)) return cudaErrorInvalidDevice;
  PtrInfo a = classify(dst, n), b = classify(src, n);
  if (n && (a.cls != MC_DEVICE || b.cls != MC_DEVICE || a.partial || b.partial)) return cudaErrorInvalidValue;
  if (n && (a.device != dd || b.device != sd)) return cudaErrorInvalidValue;
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n,
                                                 cudaStream_t h) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  if (cudaError_t e = peer_check(dst, dd, src, sd, n)) FC_RET(e);
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  FC_RET(copy_on(s, dst, src, n, cudaMemcpyDefault, false));
}
FC_API cudaError_t CUDARTAPI cudaMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  if (cudaError_t e = peer_check(dst, dd, src, sd, n)) FC_RET(e);
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(nullptr, &s)) FC_RET(e);
  if (cudaError_t e = copy_on(s, dst, src, n, cudaMemcpyDefault, false)) FC_RET(e);
  return cudaSuccess;
}
FC_API cudaError_t CUDARTAPI cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t h) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(h, &s)) FC_RET(e);
  FC_RET(memset_on(s, p, v, n, false));
}
FC_API cudaError_t CUDARTAPI cudaMemset(void *p, int v, size_t n) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  std::shared_ptr<Stream> s;
  if (cudaError_t e = resolve(nullptr, &s)) FC_RET(e);
  FC_RET(memset_on(s, p, v, n, true));
}

// ---- IPC
FC_API cudaError_t CUDARTAPI cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) {
  if (!h || !p) FC_RET(cudaErrorInvalidValue);
  fakemem_region_t r;
  if (fakemem_find(p, 1, &r) != 0 || r.imported) FC_RET(cudaErrorInvalidValue);
  uint64_t serial;
  {
    std::lock_guard<std::mutex> l(g_alloc_m);
    auto it = allocs().find((uintptr_t)r.pub);
    if (it == allocs().end()) FC_RET(cudaErrorInvalidValue);
    serial = it->second.serial;
  }
  struct stat st;
  if (fstat(r.fd, &st) != 0) FC_RET(cudaErrorMapBufferObjectFailed);
  IpcWire w{};
  w.magic = kIpcMagic;
  w.pid = (int32_t)getpid();
  w.fd = r.fd;
  w.device = r.device;
  w.size = r.size;
  w.offset = (uint64_t)((char *)p - (char *)r.pub);
  w.serial = serial;
  w.inode = (uint64_t)st.st_ino;
  memset(h, 0, sizeof(*h));
  memcpy(h->reserved, &w, sizeof(w));
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaIpcOpenMemHandle(void **out, cudaIpcMemHandle_t h, unsigned int flags) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  if (!out) FC_RET(cudaErrorInvalidValue);
  if (flags != cudaIpcMemLazyEnablePeerAccess) FC_RET(cudaErrorInvalidValue);
  IpcWire w;
  memcpy(&w, h.reserved, sizeof(w));
  if (w.magic != kIpcMagic || w.size == 0) FC_RET(cudaErrorInvalidResourceHandle);
  // CUDA refuses to open a handle in the process that exported it (the driver's
  // CUDA_ERROR_INVALID_CONTEXT, the runtime's cudaErrorDeviceUninitialized).
  if (w.pid == (int32_t)getpid()) FC_RET(cudaErrorDeviceUninitialized);
  if (!dev_ok(t_device)) FC_RET(cudaErrorInvalidDevice);
  if (w.device != t_device && !cfg().p2p) FC_RET(cudaErrorPeerAccessUnsupported);
  char key[96];
  snprintf(key, sizeof key, "%d/%d/%llu/%llu", w.pid, w.fd, (unsigned long long)w.serial,
           (unsigned long long)w.inode);
  std::lock_guard<std::mutex> l(g_alloc_m);
  auto k = ipc_by_key().find(key);
  if (k != ipc_by_key().end()) {
    // Already open in this process: refcount, same pointer (cudaIpcOpenMemHandle docs).
    ipc_opens()[k->second].refs++;
    g_ipc_open_count++;
    *out = (void *)k->second;
    return cudaSuccess;
  }
  void *p = nullptr;
  if (fakemem_import((pid_t)w.pid, w.fd, (size_t)w.size, w.device, &p) != 0)
    FC_RET(cudaErrorInvalidResourceHandle); // exporter gone or memory freed
  fakemem_region_t r;
  struct stat st;
  if (fakemem_find(p, 1, &r) != 0 || fstat(r.fd, &st) != 0 || (uint64_t)st.st_ino != w.inode) {
    fakemem_free(p);
    FC_RET(cudaErrorInvalidResourceHandle);
  }
  if (getenv("FAKEGPU_TRACE"))
    fprintf(stderr, "fakecuda: pid %d opened IPC memory of pid %d (%llu bytes, device %d) at %p on device %d\n",
            (int)getpid(), w.pid, (unsigned long long)w.size, w.device, p, t_device);
  ipc_opens()[(uintptr_t)p] = {1, t_device, key};
  ipc_by_key()[key] = (uintptr_t)p;
  g_ipc_open_count++;
  *out = p; // the allocation's base, whatever pointer was exported
  return cudaSuccess;
}

FC_API cudaError_t CUDARTAPI cudaIpcCloseMemHandle(void *p) {
  if (t_worker) FC_RET(cudaErrorNotPermitted);
  int dev = -1;
  {
    std::lock_guard<std::mutex> l(g_alloc_m);
    auto it = ipc_opens().find((uintptr_t)p);
    if (it == ipc_opens().end()) FC_RET(cudaErrorInvalidValue);
    g_ipc_open_count--;
    if (--it->second.refs > 0) return cudaSuccess;
    dev = it->second.device;
    ipc_by_key().erase(it->second.key);
    ipc_opens().erase(it);
  }
  if (dev_ok(dev)) sync_device(dev); // work using the mapping finishes first
  fakemem_free(p);
  return cudaSuccess;
}

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
FC_API int fakecuda_live_allocations(void) {
  std::lock_guard<std::mutex> l(g_alloc_m);
  return (int)allocs().size();
}
FC_API int fakecuda_registered_ranges(void) {
  std::lock_guard<std::mutex> l(g_host_m);
  int n = 0;
  for (auto &kv : host_ranges()) n += kv.second.alloc ? 0 : 1;
  return n;
}
FC_API int fakecuda_pinned_allocations(void) {
  std::lock_guard<std::mutex> l(g_host_m);
  int n = 0;
  for (auto &kv : host_ranges()) n += kv.second.alloc ? 1 : 0;
  return n;
}
FC_API int fakecuda_open_ipc(void) { return g_ipc_open_count.load(); }
FC_API int fakecuda_live_streams(void) {
  std::lock_guard<std::mutex> l(g_reg_m);
  return (int)stream_reg().size();
}
FC_API int fakecuda_live_events(void) {
  std::lock_guard<std::mutex> l(g_reg_m);
  return (int)event_reg().size();
}
FC_API int fakecuda_peer_enabled(int from, int to) {
  if (!dev_ok(from) || !dev_ok(to)) return 0;
  Device &D = devs()[from];
  std::lock_guard<std::mutex> l(D.m);
  return D.peer[to] ? 1 : 0;
}
FC_API long fakecuda_kernels_run(void) { return g_kernels_run.load(); }
FC_API int fakecuda_sticky_error(int device) { return (int)sticky(device); }
FC_API void fakecuda_fail_device(int device, int error) { set_sticky(device, (cudaError_t)error); }
