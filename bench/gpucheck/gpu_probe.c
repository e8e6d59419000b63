/* ul_gpu_probe: what the GPU check can use on this machine, as key=value lines.
 * Loads the CUDA runtime and NCCL with dlopen (nothing is linked), so it runs and says
 * what is missing on a machine with a driver only, with no runtime, or with no device.
 * Which library files were loaded (dladdr) is printed too: the check must run against
 * the carried runtime and the machine's own driver (libcuda.so.1), never a copy.
 *
 *   ul_gpu_probe [--cudart FILE] [--nccl FILE|none]
 *
 * Exit: 0 a CUDA device is usable, 3 no runtime / no driver / no device, 2 usage. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fn_ip_t)(int *);
typedef int (*fn_i_t)(int);
typedef int (*fn_attr_t)(int *, int, int);
typedef int (*fn_mem_t)(size_t *, size_t *);
typedef const char *(*fn_str_t)(int);
typedef int (*fn_prop_t)(struct cudaDeviceProp *, int);

static const char *lib_path(void *handle, const char *sym) {
  Dl_info info;
  void *p = handle ? dlsym(handle, sym) : NULL;
  if (p && dladdr(p, &info) && info.dli_fname) return info.dli_fname;
  return "?";
}

/* The driver's libcuda.so.1 once the runtime has opened it (RTLD_NOLOAD: never load one). */
static void print_driver_lib(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  printf("driver_lib=%s\n", h ? lib_path(h, "cuInit") : "(not loaded)");
  if (h) dlclose(h);
}

static const char *err_text(fn_str_t name, fn_str_t str, int e, char *buf, size_t n) {
  snprintf(buf, n, "%s (%s, code %d)", str ? str(e) : "?", name ? name(e) : "?", e);
  return buf;
}

static int probe_cuda(const char *file) {
  char eb[256];
  void *h = dlopen(file, RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    printf("cudart=missing\ncudart_error=%s\nprobe=no-runtime\n", dlerror());
    return 3;
  }
  fn_ip_t drv = (fn_ip_t)dlsym(h, "cudaDriverGetVersion");
  fn_ip_t rtv = (fn_ip_t)dlsym(h, "cudaRuntimeGetVersion");
  fn_ip_t count = (fn_ip_t)dlsym(h, "cudaGetDeviceCount");
  fn_i_t setdev = (fn_i_t)dlsym(h, "cudaSetDevice");
  fn_attr_t attr = (fn_attr_t)dlsym(h, "cudaDeviceGetAttribute");
  fn_mem_t meminfo = (fn_mem_t)dlsym(h, "cudaMemGetInfo");
  fn_str_t ename = (fn_str_t)dlsym(h, "cudaGetErrorName");
  fn_str_t estr = (fn_str_t)dlsym(h, "cudaGetErrorString");
  fn_prop_t props = (fn_prop_t)dlsym(h, "cudaGetDeviceProperties");
  /* The fake runtime (tests/fakegpu) exports its device-memory table: real PTX cannot run. */
  int fake = dlsym(h, "fakemem_view") != NULL;
  printf("cudart=%s\nfake=%d\n", lib_path(h, "cudaGetDeviceCount"), fake);
  if (!drv || !rtv || !count) {
    printf("probe=no-runtime\ncudart_error=not a CUDA runtime (missing entry points)\n");
    return 3;
  }
  int v = 0;
  rtv(&v);
  printf("runtime_version=%d.%d\n", v / 1000, (v % 1000) / 10);
  v = 0;
  drv(&v);
  /* 0: no driver at all; below the runtime's version: every call fails with code 35. */
  printf("driver_cuda_version=%d.%d\n", v / 1000, (v % 1000) / 10);
  int n = 0, e = count(&n);
  print_driver_lib();
  if (e != 0) {
    printf("devices=0\ncuda_error=cudaGetDeviceCount: %s\nprobe=no-device\n",
           err_text(ename, estr, e, eb, sizeof eb));
    return 3;
  }
  printf("devices=%d\n", n);
  if (n < 1) {
    printf("probe=no-device\n");
    return 3;
  }
  for (int d = 0; d < n; d++) {
    int maj = -1, min = -1, sms = -1;
    if (attr) {
      attr(&maj, cudaDevAttrComputeCapabilityMajor, d);
      attr(&min, cudaDevAttrComputeCapabilityMinor, d);
      attr(&sms, cudaDevAttrMultiProcessorCount, d);
    }
    char name[256] = "?";
    struct cudaDeviceProp *p = calloc(1, sizeof *p);
    /* only with the runtime the header describes: the struct layout is per major version */
    if (p && props && v / 1000 == CUDART_VERSION / 1000 && props(p, d) == 0)
      snprintf(name, sizeof name, "%s", p->name);
    free(p);
    size_t fr = 0, tot = 0;
    if (setdev) setdev(d);
    if (meminfo && (e = meminfo(&fr, &tot)) != 0)
      printf("device%d_error=cudaMemGetInfo: %s\n", d, err_text(ename, estr, e, eb, sizeof eb));
    printf("device%d=%s cc=%d.%d sms=%d mem_total_mib=%zu mem_free_mib=%zu\n", d, name, maj, min,
           sms, tot >> 20, fr >> 20);
    if (d == 0) printf("cc=%d.%d\nmem_free_mib=%zu\n", maj, min, fr >> 20);
  }
  printf("probe=ok\n");
  return 0;
}

static void probe_nccl(const char *file) {
  void *h = dlopen(file, RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    printf("nccl=missing\nnccl_error=%s\n", dlerror());
    return;
  }
  typedef int (*fn_ver_t)(int *);
  fn_ver_t ver = (fn_ver_t)dlsym(h, "ncclGetVersion");
  int v = 0;
  if (!ver || ver(&v) != 0) {
    printf("nccl=%s\nnccl_error=ncclGetVersion failed\n", lib_path(h, "ncclGetVersion"));
    return;
  }
  /* NCCL >= 2.9 encodes major*10000 + minor*100 + patch */
  printf("nccl=%s\nnccl_version=%d.%d.%d\nnccl_code=%d\n", lib_path(h, "ncclGetVersion"),
         v / 10000, (v % 10000) / 100, v % 100, v);
}

int main(int argc, char **argv) {
  const char *cudart = "libcudart.so.13", *nccl = "libnccl.so.2";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--cudart") && i + 1 < argc) cudart = argv[++i];
    else if (!strcmp(argv[i], "--nccl") && i + 1 < argc) nccl = argv[++i];
    else {
      fprintf(stderr, "usage: ul_gpu_probe [--cudart FILE] [--nccl FILE|none]\n");
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = probe_cuda(cudart);
  if (strcmp(nccl, "none") != 0) probe_nccl(nccl);
  return rc;
}
