// The fake CUDA runtime's errors and configuration: FAKEGPU_* settings, the calling thread's
// current device and last error, the devices' sticky errors, error names and texts, and
// the error and version entry points. The bottom of the library: calls nothing else of it.
#include "fakecuda_int.h"

using namespace fc;

namespace fc {

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

static std::atomic<int> g_sticky[kMaxDev];

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

static const char *err_name(cudaError_t e) {
  switch (e) {
#define FC_ERR(n)                                                                                \
  case n: return #n;
#include "cuda_error_names.inc"
#undef FC_ERR
  default: return nullptr;
  }
}

static const char *err_text(cudaError_t e) {
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

} // namespace fc

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

// ---- introspection (fakecuda.h)
FC_API int fakecuda_sticky_error(int device) { return (int)sticky(device); }
FC_API void fakecuda_fail_device(int device, int error) { set_sticky(device, (cudaError_t)error); }
