// Devices of the fake CUDA runtime: count, current device, attributes and properties, PCI
// ids, peer access, device synchronization. The top of the library, with
// fakecuda_launch.cpp: nothing else of it calls these.
#include "fakecuda_int.h"

using namespace fc;

// ================================================================ exported API
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

// ---- introspection (fakecuda.h)
FC_API int fakecuda_peer_enabled(int from, int to) {
  if (!dev_ok(from) || !dev_ok(to)) return 0;
  Device &D = devs()[from];
  std::lock_guard<std::mutex> l(D.m);
  return D.peer[to] ? 1 : 0;
}
