/* The importing side of test_fakecuda's IPC test, exec'd with the handle in hex: opens
 * it, checks the data, writes through the mapping, and checks that the mapping outlives
 * the exporter's cudaFree. Reports one byte on stdout ('o' = good so far). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "fakemem.h"

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
static void stub_store64(void) {}

#define N (3 * 4096)
#define FAIL(code)                                                                               \
  do {                                                                                           \
    fprintf(stderr, "ipc child: failure %d at line %d\n", code, __LINE__);                      \
    if (write(1, "x", 1) < 0) {}                                                                 \
    return code;                                                                                 \
  } while (0)

int main(int argc, char **argv) {
  static int fatbin;
  void **m = __cudaRegisterFatBinary(&fatbin);
  __cudaRegisterFunction(m, (const char *)stub_store64, (char *)"_ZN12_GLOBAL__N_19k_store64EPVyy",
                         "_ZN12_GLOBAL__N_19k_store64EPVyy", -1, NULL, NULL, NULL, NULL, NULL);
  if (argc != 2 || strlen(argv[1]) != 2 * sizeof(cudaIpcMemHandle_t)) FAIL(2);
  cudaIpcMemHandle_t h;
  for (size_t i = 0; i < sizeof h; i++) {
    unsigned v;
    sscanf(argv[1] + 2 * i, "%2x", &v);
    h.reserved[i] = (char)v;
  }
  void *p = NULL, *q = NULL;
  if (cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) FAIL(3);
  if (cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess || q != p) FAIL(4);
  if (fakecuda_open_ipc() != 2) FAIL(5);
  if (cudaIpcCloseMemHandle(q) != cudaSuccess) FAIL(6);
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeDevice || a.device != 1) FAIL(7);
  static unsigned char back[N];
  /* The opened pointer is the allocation's base, not the exported interior pointer. */
  if (cudaMemcpy(back, p, N, cudaMemcpyDefault) != cudaSuccess) FAIL(8);
  for (int i = 0; i < N; i++)
    if (back[i] != (unsigned char)(i ^ 0x35)) FAIL(9);
  if (cudaMemset(p, 0xee, 4096) != cudaSuccess) FAIL(10);
  /* A kernel on the opening device (0) may touch the mapping (device 1's memory). */
  unsigned long long v = 0xeeeeeeeeeeeeeeeeULL;
  void *cell = (char *)p + 8;
  void *args[] = {&cell, &v};
  dim3 one = {1, 1, 1};
  if (cudaLaunchKernel((const void *)stub_store64, one, one, args, 0, 0) != cudaSuccess) FAIL(11);
  if (cudaDeviceSynchronize() != cudaSuccess) FAIL(12);
  if (write(1, "o", 1) != 1) return 13;
  char c;
  if (read(0, &c, 1) != 1 || c != 'f') return 14;
  /* The exporter has freed its allocation: the mapping still holds the data. */
  memset(back, 0, N);
  if (cudaMemcpy(back, p, N, cudaMemcpyDefault) != cudaSuccess) return 15;
  for (int i = 0; i < N; i++)
    if (back[i] != (i < 4096 ? 0xee : (unsigned char)(i ^ 0x35))) return 16;
  if (cudaIpcCloseMemHandle(p) != cudaSuccess) return 17;
  if (cudaIpcCloseMemHandle(p) != cudaErrorInvalidValue) return 18;
  if (fakecuda_open_ipc() != 0 || fakemem_live() != 0) return 19;
  return 0;
}
