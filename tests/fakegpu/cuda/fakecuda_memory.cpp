// Memory of the fake CUDA runtime: device allocations (fakemem: the CPU cannot touch them),
// pinned and registered host memory, pointer classification, copies and sets, and IPC
// handles, with their entry points. Over fakecuda_streams.cpp.
#include "fakecuda_int.h"

using namespace fc;

namespace fc {

// ---------------------------------------------------------------- host memory bookkeeping
struct HostRange {
  uintptr_t base;
  size_t size;
  int device;  // current device at registration
  bool alloc;  // cudaMallocHost/cudaHostAlloc (else cudaHostRegister)
  unsigned flags;
};
static std::mutex g_host_m;
static std::map<uintptr_t, HostRange> &host_ranges() {
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
static std::mutex g_alloc_m;
struct AllocInfo {
  uint64_t serial;
  size_t size;
};
static std::unordered_map<uintptr_t, AllocInfo> &allocs() { // cudaMalloc bases of this process
  static auto *m = new std::unordered_map<uintptr_t, AllocInfo>;
  return *m;
}
static std::atomic<uint64_t> g_serial{0};

struct IpcOpen {
  int refs;
  int device;    // the device current when opened: it may access the mapping
  std::string key;
};
static std::unordered_map<uintptr_t, IpcOpen> &ipc_opens() {
  static auto *m = new std::unordered_map<uintptr_t, IpcOpen>;
  return *m;
}
static std::unordered_map<std::string, uintptr_t> &ipc_by_key() {
  static auto *m = new std::unordered_map<std::string, uintptr_t>;
  return *m;
}
static std::atomic<int> g_ipc_open_count{0};

enum MemClass { MC_PAGEABLE, MC_PINNED, MC_DEVICE };
struct PtrInfo {
  MemClass cls = MC_PAGEABLE;
  int device = -1;
  bool partial = false; // starts in an allocation but runs past its end
  fakemem_region_t reg{};
};

static PtrInfo classify(const void *p, size_t n) {
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

static int ipc_device_of(uintptr_t base) {
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

// ---------------------------------------------------------------- copies
// Where a copy reads or writes at execution: the private alias of device memory (any
// device: copies between devices stage, as in CUDA), or the host pointer itself.
static void *xlate_copy(const void *p, size_t n, bool *ok) {
  fakemem_region_t r;
  if (fakemem_find(p, 1, &r) == 0) {
    void *v = fakemem_view(p, n, nullptr);
    if (!v) *ok = false;
    return v;
  }
  return (void *)p;
}

static bool kind_ok(cudaMemcpyKind kind, const PtrInfo &d, const PtrInfo &s) {
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
static cudaError_t copy_on(const std::shared_ptr<Stream> &s, void *dst, const void *src, size_t n,
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

static cudaError_t memset_on(const std::shared_ptr<Stream> &s, void *p, int v, size_t n, bool sync_api) {
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

} // namespace fc

// ================================================================ exported API
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
