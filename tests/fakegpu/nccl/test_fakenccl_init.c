/* The fake NCCL: two processes, nonblocking init, "Duplicate GPU", pointer checks.
 * See test_fakenccl.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test_fakenccl.h"

extern char **environ;

/* A missed rendezvous hangs like NCCL would: fail the test instead of the whole run. */
TestSuite(process, .timeout = 60);
TestSuite(init, .timeout = 60);
TestSuite(checks, .timeout = 60);

/* ---------------------------------------------------------------- two processes */

Test(process, two_ranks) {
  ncclUniqueId id;
  cr_assert_eq(ncclGetUniqueId(&id), ncclSuccess);
  char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)id.internal[i]);
  char *argv[] = {(char *)FAKENCCL_PEER, hex, "2", "1", "70000", NULL};
  pid_t pid;
  cr_assert_eq(posix_spawn(&pid, FAKENCCL_PEER, NULL, NULL, argv, environ), 0);
  size_t count = 70000;
  int *h = malloc(count * 2 * sizeof(int));
  for (size_t i = 0; i < count; i++) h[i] = (int)i;
  cudaSetDevice(0);
  ncclComm_t comm;
  cr_assert_eq(ncclCommInitRank(&comm, 2, id, 0), ncclSuccess, "%s", ncclGetLastError(NULL));
  cudaStream_t st;
  cudaStreamCreate(&st);
  int *d = dev_from(h, count * sizeof(int)), *g = dev_from(NULL, 2 * count * sizeof(int));
  cr_assert_eq(ncclAllGather(d, g, count, ncclInt32, comm, st), ncclSuccess);
  cr_assert_eq(ncclAllReduce(d, d, count, ncclInt32, ncclSum, comm, st), ncclSuccess);
  cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
  to_host(h, d, count * sizeof(int));
  for (size_t i = 0; i < count; i++) cr_assert_eq(h[i], (int)(3 * i));
  to_host(h, g, 2 * count * sizeof(int));
  for (size_t i = 0; i < count; i++) cr_assert_eq(h[count + i], (int)(2 * i));
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "peer status %d", status);
  cr_expect_eq(ncclCommDestroy(comm), ncclSuccess);
  free(h);
  cudaFree(d);
  cudaFree(g);
}

/* ---------------------------------------------------------------- nonblocking init */

typedef struct {
  ncclUniqueId id;
  int rank, polls;
  ncclResult_t first;
  ncclComm_t comm;
} nb_t;

static void *nb_main(void *p) {
  nb_t *a = p;
  cudaSetDevice(a->rank);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  a->first = ncclCommInitRankConfig(&a->comm, 2, a->id, a->rank, &cfg);
  ncclResult_t st = ncclInProgress;
  while (st == ncclInProgress) {
    ncclCommGetAsyncError(a->comm, &st);
    if (st == ncclInProgress) a->polls++;
  }
  a->first = a->first == ncclInProgress && st == ncclSuccess ? ncclInProgress : st;
  return NULL;
}

Test(init, nonblocking_reports_in_progress) {
  setenv("FAKEGPU_NCCL_INIT_POLLS", "5", 1);
  nb_t a[2];
  pthread_t th[2];
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  for (int i = 0; i < 2; i++) {
    memset(&a[i], 0, sizeof a[i]);
    a[i].id = id;
    a[i].rank = i;
    pthread_create(&th[i], NULL, nb_main, &a[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(a[i].first, ncclInProgress);
    cr_expect_geq(a[i].polls, 5);
    cr_expect_eq(ncclCommDestroy(a[i].comm), ncclSuccess);
  }
}

Test(init, nonblocking_use_before_ready_is_invalid) {
  setenv("FAKEGPU_NCCL_INIT_POLLS", "1000000", 1);
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t c;
  cudaSetDevice(0);
  cr_assert_eq(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), ncclInProgress);
  int n = 0;
  cr_expect_eq(ncclCommCount(c, &n), ncclInvalidArgument);
  cr_expect(strstr(ncclGetLastError(NULL), "Attempt to use communicator before"), "%s",
            ncclGetLastError(NULL));
  cr_expect_eq(ncclCommDestroy(c), ncclInvalidArgument, "destroy needs a ready comm");
  cr_expect_eq(ncclCommAbort(c), ncclSuccess);
}

/* ---------------------------------------------------------------- pointer checks */

static int hostptr_body(int rank, int n, ncclComm_t comm, cudaStream_t st, void *arg) {
  (void)n;
  float host[16] = {0};
  void *dev = dev_from(NULL, 64);
  int bad = 0;
  /* ncclGetLastError is one string per process: one rank at a time. */
  pthread_barrier_t *turn = arg;
  if (rank == 1) pthread_barrier_wait(turn);
  bad += ncclAllReduce(host, dev, 16, ncclFloat, ncclSum, comm, st) != ncclInvalidArgument;
  bad += strstr(ncclGetLastError(NULL), "sendbuff") == NULL;
  bad += strstr(ncclGetLastError(NULL), "is not a valid pointer") == NULL;
  bad += ncclSend(host, 16, ncclFloat, 1 - rank, comm, st) != ncclInvalidArgument;
  /* memory of another device */
  cudaSetDevice(2 + rank);
  void *other = dev_from(NULL, 64);
  cudaSetDevice(rank);
  bad += ncclAllReduce(dev, other, 16, ncclFloat, ncclSum, comm, st) != ncclInvalidArgument;
  bad += strstr(ncclGetLastError(NULL), "mismatchs with NCCL device") == NULL &&
         strstr(ncclGetLastError(NULL), "is not a valid pointer") == NULL;
  /* a stream of another device cannot run this communicator's kernel */
  cudaStream_t ost;
  cudaSetDevice(2 + rank);
  cudaStreamCreateWithFlags(&ost, cudaStreamNonBlocking);
  cudaSetDevice(rank);
  bad += ncclAllReduce(dev, dev, 16, ncclFloat, ncclSum, comm, ost) != ncclUnhandledCudaError;
  cudaStreamDestroy(ost);
  if (rank == 0) pthread_barrier_wait(turn);
  /* the blocking comm is still usable after argument errors */
  bad += ncclAllReduce(dev, dev, 16, ncclFloat, ncclSum, comm, st) != ncclSuccess;
  cudaStreamSynchronize(st);
  cudaFree(dev);
  cudaFree(other);
  return bad;
}

Test(checks, host_and_foreign_pointers) {
  pthread_barrier_t turn;
  pthread_barrier_init(&turn, NULL, 2);
  run_ranks(2, 1, hostptr_body, &turn);
  pthread_barrier_destroy(&turn);
}

Test(checks, one_rank_host_pointers) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  cudaSetDevice(0);
  ncclComm_t c;
  cr_assert_eq(ncclCommInitRank(&c, 1, id, 0), ncclSuccess);
  int a[4] = {1, 2, 3, 4}, b[4] = {0};
  /* NCCL_CHECK_POINTERS=1 checks before the one-rank copy... */
  cr_expect_eq(ncclAllReduce(a, b, 4, ncclInt32, ncclSum, c, 0), ncclInvalidArgument);
  /* ...NCCL's default does not, and one rank is a cudaMemcpyAsync, host memory works. */
  setenv("FAKEGPU_NCCL_CHECK_POINTERS", "0", 1);
  cr_expect_eq(ncclAllReduce(a, b, 4, ncclInt32, ncclSum, c, 0), ncclSuccess);
  cudaStreamSynchronize(0);
  cr_expect_eq(b[3], 4);
  cr_expect_eq(ncclCommDestroy(c), ncclSuccess);
}

/* ---------------------------------------------------------------- duplicate GPU */

typedef struct {
  ncclUniqueId id;
  int rank;
  ncclResult_t r;
  ncclComm_t comm;
} dup_t;

static void *dup_main(void *p) {
  dup_t *a = p;
  cudaSetDevice(0);
  a->r = ncclCommInitRank(&a->comm, 2, a->id, a->rank);
  return NULL;
}

Test(init, duplicate_gpu) {
  dup_t a[2];
  pthread_t th[2];
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  for (int i = 0; i < 2; i++) {
    a[i] = (dup_t){id, i, ncclSuccess, NULL};
    pthread_create(&th[i], NULL, dup_main, &a[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) cr_expect_eq(a[i].r, ncclInvalidUsage);
  cr_expect(strstr(ncclGetLastError(NULL), "Duplicate GPU detected : rank ") &&
                strstr(ncclGetLastError(NULL), "both on CUDA device"),
            "%s", ncclGetLastError(NULL));
  for (int i = 0; i < 2; i++) cr_expect_eq(ncclCommAbort(a[i].comm), ncclSuccess);
}
