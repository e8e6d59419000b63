/* GPU identity and pair topology. NVML is loaded with dlopen when present
 * (libnvidia-ml.so.1 ships with the driver) and is never a link dependency. */
#define _GNU_SOURCE
#include "gpu_topo.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- NVML subset (types re-declared: nvml.h is not shipped with the toolkit) ---- */
typedef int gpu_nvml_ret_t;
typedef struct gpu_nvml_dev *gpu_nvml_dev_t;
typedef struct gpu_nvml_pci {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
  char reserve[64]; /* slack in case a newer NVML writes a longer struct */
} gpu_nvml_pci_t;
#define GPU_NVML_MAX_LINKS 18
#define GPU_NVML_FEATURE_ENABLED 1
#define GPU_NVML_REMOTE_SWITCH 2

static struct {
  int ok;
  gpu_nvml_ret_t (*init)(void);
  gpu_nvml_ret_t (*by_bus_id)(const char *, gpu_nvml_dev_t *);
  gpu_nvml_ret_t (*link_state)(gpu_nvml_dev_t, unsigned, int *);
  gpu_nvml_ret_t (*link_version)(gpu_nvml_dev_t, unsigned, unsigned *);
  gpu_nvml_ret_t (*remote_pci)(gpu_nvml_dev_t, unsigned, gpu_nvml_pci_t *);
  gpu_nvml_ret_t (*remote_type)(gpu_nvml_dev_t, unsigned, int *);
} gpu_nvml;
static pthread_once_t gpu_nvml_once = PTHREAD_ONCE_INIT;

static void gpu_nvml_load(void) {
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  *(void **)&gpu_nvml.init = dlsym(h, "nvmlInit_v2");
  *(void **)&gpu_nvml.by_bus_id = dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
  *(void **)&gpu_nvml.link_state = dlsym(h, "nvmlDeviceGetNvLinkState");
  *(void **)&gpu_nvml.link_version = dlsym(h, "nvmlDeviceGetNvLinkVersion");
  *(void **)&gpu_nvml.remote_pci = dlsym(h, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  *(void **)&gpu_nvml.remote_type = dlsym(h, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (!gpu_nvml.init || !gpu_nvml.by_bus_id || !gpu_nvml.link_state) return;
  if (gpu_nvml.init() != 0) return;
  gpu_nvml.ok = 1; /* handle stays open for the life of the process */
}

static uint64_t gpu_hash(const char *s, uint64_t h) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static uint64_t gpu_host_hash(void) {
  char host[256] = "", boot[64] = "";
  gethostname(host, sizeof(host) - 1);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof(boot), f)) boot[0] = '\0';
    fclose(f);
  }
  return gpu_hash(boot, gpu_hash(host, 1469598103934665603ull));
}

ul_result_t ulgpu_ident_get(int device, ulgpu_ident_t *out) {
  memset(out, 0, sizeof(*out));
  out->host_hash = gpu_host_hash();
  out->pid = (int32_t)getpid();
  out->device = device;
  int v = 0;
  cudaError_t e;
  if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrPciDomainId, device)) != cudaSuccess)
    return ulgpu_cuda_result(e);
  out->pci_domain = v;
  cudaDeviceGetAttribute(&v, cudaDevAttrPciBusId, device);
  out->pci_bus = v;
  cudaDeviceGetAttribute(&v, cudaDevAttrPciDeviceId, device);
  out->pci_dev = v;
  cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, device);
  out->sm_major = v;
  cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMinor, device);
  out->sm_minor = v;
  return UL_OK;
}

static void gpu_bus_id(const ulgpu_ident_t *id, char *buf, size_t len) {
  snprintf(buf, len, "%04x:%02x:%02x.0", (unsigned)id->pci_domain, (unsigned)id->pci_bus,
           (unsigned)id->pci_dev);
}

/* Read the NVML link table of @p self as seen towards @p peer. */
static int gpu_nvml_links(const ulgpu_ident_t *self, const ulgpu_ident_t *peer,
                          ulgpu_nvlink_state_t *links) {
  pthread_once(&gpu_nvml_once, gpu_nvml_load);
  if (!gpu_nvml.ok) return -1;
  char bus[32];
  gpu_bus_id(self, bus, sizeof(bus));
  gpu_nvml_dev_t dev;
  if (gpu_nvml.by_bus_id(bus, &dev) != 0) return -1;
  int n = 0;
  for (unsigned l = 0; l < GPU_NVML_MAX_LINKS; l++) {
    int st = 0;
    if (gpu_nvml.link_state(dev, l, &st) != 0) continue;
    ulgpu_nvlink_state_t *s = &links[n++];
    memset(s, 0, sizeof(*s));
    s->active = st == GPU_NVML_FEATURE_ENABLED;
    if (!s->active) continue;
    if (gpu_nvml.link_version) gpu_nvml.link_version(dev, l, &s->version);
    gpu_nvml_pci_t pci;
    memset(&pci, 0, sizeof(pci));
    if (gpu_nvml.remote_pci && gpu_nvml.remote_pci(dev, l, &pci) == 0) {
      s->to_peer = (int)pci.domain == peer->pci_domain && (int)pci.bus == peer->pci_bus &&
                   (int)pci.device == peer->pci_dev;
      if (!s->to_peer) {
        int type = -1;
        if (gpu_nvml.remote_type && gpu_nvml.remote_type(dev, l, &type) == 0)
          s->to_switch = type == GPU_NVML_REMOTE_SWITCH;
        else {
          /* No type query: a remote end that NVML does not know as a GPU is a switch. */
          gpu_nvml_dev_t other;
          char rbus[40];
          snprintf(rbus, sizeof(rbus), "%04x:%02x:%02x.0", pci.domain, pci.bus, pci.device);
          s->to_switch = gpu_nvml.by_bus_id(rbus, &other) != 0;
        }
      }
    }
  }
  return n;
}

void ulgpu_topology(const ulgpu_ident_t *self, const ulgpu_ident_t *peer, int is_self,
                    ul_link_info_t *out) {
  ulgpu_pair_facts_t f;
  memset(&f, 0, sizeof(f));
  f.self = is_self;
  f.same_host = self->host_hash == peer->host_hash;
  f.sm_major = self->sm_major;
  f.sm_minor = self->sm_minor;
  ulgpu_nvlink_state_t links[GPU_NVML_MAX_LINKS];
  if (!is_self && f.same_host) {
    char bus[32];
    gpu_bus_id(peer, bus, sizeof(bus));
    int pdev = -1;
    if (cudaDeviceGetByPCIBusId(&pdev, bus) == cudaSuccess && pdev >= 0) {
      f.peer_visible = 1;
      int v = 0;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, self->device, pdev) ==
          cudaSuccess)
        f.p2p_access = v;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrPerformanceRank, self->device, pdev) ==
          cudaSuccess)
        f.p2p_rank = v;
    }
    int n = gpu_nvml_links(self, peer, links);
    if (n > 0) {
      f.links = links;
      f.nlinks = n;
      f.peer_visible = 1; /* NVML sees it even if CUDA_VISIBLE_DEVICES hides it */
    }
  }
  ulgpu_describe_pair(&f, out);
}

void ulgpu_runtime_version(char *buf, size_t len) {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  snprintf(buf, len, "cudart %d.%d, driver %d.%d", rt / 1000, (rt % 1000) / 10, drv / 1000,
           (drv % 1000) / 10);
}
