/* Helpers of the tests of the fake NCCL (see test_fakenccl.h). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <time.h>

#include "test_fakenccl.h"

double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *rank_main(void *p) {
  rank_t *r = p;
  cudaSetDevice(r->dev);
  ncclComm_t comm = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = r->blocking;
  ncclResult_t res = ncclCommInitRankConfig(&comm, r->nranks, r->id, r->rank, &cfg);
  if (res == ncclInProgress) {
    ncclResult_t st = ncclInProgress;
    while (st == ncclInProgress) ncclCommGetAsyncError(comm, &st);
    res = st;
  }
  if (res != ncclSuccess) {
    r->rc = 100 + res;
    return NULL;
  }
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  r->rc = r->fn(r->rank, r->nranks, comm, st, r->arg);
  cudaStreamSynchronize(st);
  cudaStreamDestroy(st);
  if (ncclCommDestroy(comm) != ncclSuccess && r->rc == 0) r->rc = 99;
  return NULL;
}

/* Runs @fn on @n thread ranks, rank r on device r; every rank's return must be 0. */
void run_ranks(int n, int blocking, int (*fn)(int, int, ncclComm_t, cudaStream_t, void *),
                      void *arg) {
  pthread_t th[8];
  rank_t r[8];
  ncclUniqueId id;
  cr_assert_eq(ncclGetUniqueId(&id), ncclSuccess);
  for (int i = 0; i < n; i++) {
    r[i] = (rank_t){i, n, i, id, arg, fn, blocking, -1};
    pthread_create(&th[i], NULL, rank_main, &r[i]);
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < n; i++) cr_expect_eq(r[i].rc, 0, "rank %d returned %d", i, r[i].rc);
}

void *dev_from(const void *host, size_t bytes) {
  void *d = NULL;
  CHECK(cudaMalloc(&d, bytes ? bytes : 1) == cudaSuccess);
  if (host) CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  else CHECK(cudaMemset(d, 0x5a, bytes) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  return d;
}

void to_host(void *host, const void *dev, size_t bytes) {
  CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
}
