/* The other rank of test_fakenccl's process test: fakenccl_peer <hex unique id> <nranks>
 * <rank> <count>. Joins the communicator on device <rank>, allreduces int32 (rank+1)*i
 * and allgathers, checks both results, exits 0 when right. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                    \
  do {                                                                                           \
    if ((x) != 0) {                                                                              \
      fprintf(stderr, "fakenccl_peer: %s failed: %s\n", #x, ncclGetLastError(NULL));             \
      return 2;                                                                                  \
    }                                                                                            \
  } while (0)

int main(int argc, char **argv) {
  if (argc != 5 || strlen(argv[1]) != 2 * NCCL_UNIQUE_ID_BYTES) return 3;
  ncclUniqueId id;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
    unsigned v;
    sscanf(argv[1] + 2 * i, "%2x", &v);
    id.internal[i] = (char)v;
  }
  int n = atoi(argv[2]), rank = atoi(argv[3]);
  size_t count = (size_t)atol(argv[4]);
  CK(cudaSetDevice(rank));
  ncclComm_t comm;
  CK(ncclCommInitRank(&comm, n, id, rank));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int *h = malloc(count * n * sizeof(int)), *d, *g;
  for (size_t i = 0; i < count; i++) h[i] = (int)((rank + 1) * i);
  CK(cudaMalloc((void **)&d, count * sizeof(int)));
  CK(cudaMalloc((void **)&g, count * n * sizeof(int)));
  CK(cudaMemcpy(d, h, count * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize()); /* a pageable copy may still be in flight */
  CK(ncclAllGather(d, g, count, ncclInt32, comm, st));
  CK(ncclAllReduce(d, d, count, ncclInt32, ncclSum, comm, st));
  CK(cudaStreamSynchronize(st));
  int bad = 0, tri = n * (n + 1) / 2;
  CK(cudaMemcpy(h, d, count * sizeof(int), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; i++) bad += h[i] != (int)(tri * i);
  CK(cudaMemcpy(h, g, count * n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) bad += h[r * count + i] != (int)((r + 1) * i);
  CK(ncclCommDestroy(comm));
  cudaFree(d);
  cudaFree(g);
  cudaStreamDestroy(st);
  free(h);
  if (bad) fprintf(stderr, "fakenccl_peer: rank %d: %d wrong elements\n", rank, bad);
  return bad ? 1 : 0;
}
