/* raw_nccl_bench: the baseline for unilink's nccl overhead. Calls NCCL directly with
 * nccl-tests' method (one process driving -g GPUs through ncclCommInitAll and grouped
 * calls; -w warm-up iterations, then -n timed iterations between two host clock reads
 * and a stream synchronize; busbw factors of nccl-tests' PERFORMANCE.md) and prints
 * rows in nccl-tests' column layout so bench/gpu-check.sh can compare them with
 * unilink-bench. Build: cc raw_nccl_bench.c -I$CUDA/include -L$CUDA/lib64 -lnccl -lcudart
 * Usage: raw_nccl_bench -C allreduce|allgather|sendrecv -b 8 -e 128M -f 2 -n 20 -w 5 -g 1 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CK_CUDA(x)                                                                               \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "raw_nccl_bench: %s: %s\n", #x, cudaGetErrorString(e_));                   \
      return 2;                                                                                  \
    }                                                                                            \
  } while (0)
#define CK_NCCL(x)                                                                               \
  do {                                                                                           \
    ncclResult_t r_ = (x);                                                                       \
    if (r_ != ncclSuccess) {                                                                     \
      fprintf(stderr, "raw_nccl_bench: %s: %s\n", #x, ncclGetErrorString(r_));                   \
      return 2;                                                                                  \
    }                                                                                            \
  } while (0)

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'K': case 'k': v *= 1024; break;
  case 'M': case 'm': v *= 1024 * 1024; break;
  case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  default: break;
  }
  return (size_t)v;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

enum { C_ALLREDUCE, C_ALLGATHER, C_SENDRECV };

static int run_once(int coll, int ng, ncclComm_t *comms, cudaStream_t *st, void **sb, void **rb,
                    size_t count, int in_place) {
  CK_NCCL(ncclGroupStart());
  for (int g = 0; g < ng; g++) {
    void *recv = rb[g];
    const void *send = sb[g];
    if (coll == C_ALLREDUCE) {
      if (in_place) send = recv;
      CK_NCCL(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comms[g], st[g]));
    } else if (coll == C_ALLGATHER) {
      if (in_place) send = (char *)recv + (size_t)g * count * sizeof(float);
      CK_NCCL(ncclAllGather(send, recv, count, ncclFloat, comms[g], st[g]));
    } else {
      int peer = (g + 1) % ng, from = (g - 1 + ng) % ng;
      CK_NCCL(ncclSend(send, count, ncclFloat, peer, comms[g], st[g]));
      CK_NCCL(ncclRecv(recv, count, ncclFloat, from, comms[g], st[g]));
    }
  }
  CK_NCCL(ncclGroupEnd());
  return 0;
}

int main(int argc, char **argv) {
  size_t minb = 8, maxb = 128u << 20;
  double factor = 2;
  int iters = 20, warm = 5, ng = 1, coll = C_ALLREDUCE, opt;
  while ((opt = getopt(argc, argv, "C:b:e:f:n:w:g:c:")) != -1) {
    switch (opt) {
    case 'C':
      coll = !strcmp(optarg, "allgather") ? C_ALLGATHER
             : !strcmp(optarg, "sendrecv") ? C_SENDRECV : C_ALLREDUCE;
      break;
    case 'b': minb = parse_size(optarg); break;
    case 'e': maxb = parse_size(optarg); break;
    case 'f': factor = atof(optarg); break;
    case 'n': iters = atoi(optarg); break;
    case 'w': warm = atoi(optarg); break;
    case 'g': ng = atoi(optarg); break;
    case 'c': break; /* accepted for nccl-tests compatibility; no checking here */
    default:
      fprintf(stderr, "usage: %s -C allreduce|allgather|sendrecv -b B -e B -f F -n N -w W -g G\n",
              argv[0]);
      return 1;
    }
  }
  if (ng < 1 || factor <= 1 || iters < 1) return 1;
  ncclComm_t comms[16];
  cudaStream_t st[16];
  void *sb[16], *rb[16];
  if (ng > 16) ng = 16;
  size_t maxalloc = maxb + 4096;
  for (int g = 0; g < ng; g++) {
    CK_CUDA(cudaSetDevice(g));
    CK_CUDA(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
    CK_CUDA(cudaMalloc(&sb[g], maxalloc));
    CK_CUDA(cudaMalloc(&rb[g], maxalloc));
    CK_CUDA(cudaMemset(sb[g], 0, maxalloc));
  }
  CK_NCCL(ncclCommInitAll(comms, ng, NULL));
  int ver = 0;
  ncclGetVersion(&ver);
  const char *name = coll == C_ALLREDUCE ? "allreduce" : coll == C_ALLGATHER ? "allgather" : "sendrecv";
  printf("# raw_nccl_bench %s: nccl-library=%d ranks=%d iters=%d warmup=%d\n", name, ver, ng, iters,
         warm);
  printf("#%11s %12s %6s %6s %5s %10s %8s %8s %6s %10s %8s %8s %6s\n", "size", "count", "type",
         "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  double n = ng;
  double busf = coll == C_ALLREDUCE ? 2 * (n - 1) / n : coll == C_ALLGATHER ? (n - 1) / n : 1;
  for (size_t bytes = minb; bytes <= maxb; bytes = (size_t)(bytes * factor)) {
    /* nccl-tests: allgather size counts the whole output, rounded to ranks*elements */
    size_t count = coll == C_ALLGATHER ? bytes / sizeof(float) / (size_t)ng : bytes / sizeof(float);
    if (count == 0) count = 1;
    size_t size = coll == C_ALLGATHER ? count * sizeof(float) * (size_t)ng : count * sizeof(float);
    double t[2];
    for (int ip = 0; ip < 2; ip++) {
      for (int i = 0; i < warm; i++)
        if (run_once(coll, ng, comms, st, sb, rb, count, ip)) return 2;
      for (int g = 0; g < ng; g++) CK_CUDA(cudaStreamSynchronize(st[g]));
      double t0 = now_us();
      for (int i = 0; i < iters; i++)
        if (run_once(coll, ng, comms, st, sb, rb, count, ip)) return 2;
      for (int g = 0; g < ng; g++) CK_CUDA(cudaStreamSynchronize(st[g]));
      t[ip] = (now_us() - t0) / iters;
    }
    double a0 = size / t[0] / 1e3, a1 = size / t[1] / 1e3; /* GB/s */
    printf("%12zu %12zu %6s %6s %5d %10.2f %8.2f %8.2f %6s %10.2f %8.2f %8.2f %6s\n", size, count,
           "float", coll == C_ALLREDUCE ? "sum" : "none", -1, t[0], a0, a0 * busf, "N/A", t[1], a1,
           a1 * busf, "N/A");
    fflush(stdout);
    if (bytes == maxb) break;
  }
  for (int g = 0; g < ng; g++) ncclCommDestroy(comms[g]);
  return 0;
}
