/* The fake NCCL: the injected faults that drive timeout, abort and destroy, and
 * teardown (destroy, finalize). See test_fakenccl.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_fakenccl.h"

/* A missed rendezvous hangs like NCCL would: fail the test instead of the whole run. */
TestSuite(faults, .timeout = 60);
TestSuite(teardown, .timeout = 60);

/* ncclCommDestroy without ncclCommFinalize waits for the communicator's operations. */
static int destroy_body(int rank, int n, ncclComm_t comm, cudaStream_t st, void *arg) {
  (void)n, (void)st, (void)arg;
  return 0;
}

typedef struct {
  ncclUniqueId id;
  int rank;
  double destroy_ms;
  int value;
} dw_t;

static void *dw_main(void *p) {
  dw_t *a = p;
  cudaSetDevice(a->rank);
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, 2, a->id, a->rank) == ncclSuccess);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  int h = 5 + a->rank, *d = dev_from(&h, sizeof h);
  if (a->rank == 0) usleep(300 * 1000); /* rank 1 destroys while its allreduce waits */
  CHECK(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, comm, st) == ncclSuccess);
  double t0 = now_ms();
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  a->destroy_ms = now_ms() - t0;
  cudaStreamSynchronize(st);
  to_host(&a->value, d, sizeof h);
  cudaFree(d);
  cudaStreamDestroy(st);
  return NULL;
}

Test(teardown, destroy_waits_for_outstanding_ops) {
  (void)destroy_body;
  dw_t a[2];
  pthread_t th[2];
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  for (int i = 0; i < 2; i++) {
    a[i] = (dw_t){id, i, 0, 0};
    pthread_create(&th[i], NULL, dw_main, &a[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  cr_expect_geq(a[1].destroy_ms, 200.0, "destroy returned after %.0f ms", a[1].destroy_ms);
  for (int i = 0; i < 2; i++) cr_expect_eq(a[i].value, 11);
}

Test(teardown, nonblocking_finalize) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  cudaSetDevice(0);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  setenv("FAKEGPU_NCCL_INIT_POLLS", "0", 1);
  ncclComm_t c;
  ncclResult_t r = ncclCommInitRankConfig(&c, 1, id, 0, &cfg), st = ncclInProgress;
  cr_assert(r == ncclInProgress || r == ncclSuccess);
  while (st == ncclInProgress) ncclCommGetAsyncError(c, &st);
  cr_assert_eq(st, ncclSuccess);
  r = ncclCommFinalize(c);
  cr_expect(r == ncclSuccess || r == ncclInProgress);
  st = ncclInProgress;
  while (st == ncclInProgress) ncclCommGetAsyncError(c, &st);
  cr_expect_eq(st, ncclSuccess);
  cr_expect_eq(ncclCommFinalize(c), ncclInvalidArgument, "finalize twice");
  cr_expect_eq(ncclCommAbort(c), ncclSuccess);
}
/* ---------------------------------------------------------------- faults */

typedef struct {
  ncclUniqueId id;
  int rank, n;
  ncclComm_t comm;
  cudaStream_t st;
  ncclResult_t r;
} fr_t;

static void *fr_init(void *p) {
  fr_t *a = p;
  cudaSetDevice(a->rank);
  a->r = ncclCommInitRank(&a->comm, a->n, a->id, a->rank);
  cudaStreamCreateWithFlags(&a->st, cudaStreamNonBlocking);
  return NULL;
}

static void init_n(fr_t *a, int n) {
  pthread_t th[4];
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  for (int i = 0; i < n; i++) {
    memset(&a[i], 0, sizeof a[i]);
    a[i].id = id;
    a[i].rank = i;
    a[i].n = n;
    pthread_create(&th[i], NULL, fr_init, &a[i]);
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < n; i++) cr_assert_eq(a[i].r, ncclSuccess);
}

Test(faults, abort_releases_hung_operation) {
  setenv("FAKEGPU_NCCL_FAULT", "hang:0:2", 1);
  fr_t a[2];
  init_n(a, 2);
  void *b[2];
  for (int i = 0; i < 2; i++) {
    cudaSetDevice(i);
    b[i] = dev_from(NULL, 4096);
  }
  /* op 1 completes, op 2 of rank 0 never finishes; rank 1 waits for it */
  for (int op = 0; op < 2; op++)
    for (int i = 0; i < 2; i++)
      cr_assert_eq(ncclAllReduce(b[i], b[i], 1024, ncclFloat, ncclSum, a[i].comm, a[i].st), ncclSuccess);
  usleep(300 * 1000);
  for (int i = 0; i < 2; i++) cr_expect_eq(cudaStreamQuery(a[i].st), cudaErrorNotReady);
  for (int i = 0; i < 2; i++) {
    double t0 = now_ms();
    cr_expect_eq(ncclCommAbort(a[i].comm), ncclSuccess);
    cr_expect_eq(cudaStreamSynchronize(a[i].st), cudaSuccess);
    cr_expect_lt(now_ms() - t0, 1000.0, "abort + stream drain took %.0f ms", now_ms() - t0);
  }
  for (int i = 0; i < 2; i++) {
    cudaFree(b[i]);
    cudaStreamDestroy(a[i].st);
  }
}

Test(faults, async_remote_error) {
  setenv("FAKEGPU_NCCL_FAULT", "async_error:1:2", 1);
  fr_t a[2];
  init_n(a, 2);
  int *b[2], h[256];
  for (int i = 0; i < 2; i++) {
    for (int k = 0; k < 256; k++) h[k] = k + i;
    cudaSetDevice(i);
    b[i] = dev_from(h, sizeof h);
  }
  for (int op = 0; op < 2; op++)
    for (int i = 0; i < 2; i++)
      cr_assert_eq(ncclAllReduce(b[i], b[i], 256, ncclInt32, ncclSum, a[i].comm, a[i].st), ncclSuccess);
  cr_assert_eq(cudaStreamSynchronize(a[1].st), cudaSuccess);
  ncclResult_t st = ncclSuccess;
  cr_assert_eq(ncclCommGetAsyncError(a[1].comm, &st), ncclSuccess);
  cr_expect_eq(st, ncclRemoteError);
  to_host(h, b[1], sizeof h);
  cr_expect_eq(h[10], 21, "op 1 ran (10+11), op 2 did not write");
  /* a failed communicator refuses work and destroy; abort frees it */
  cr_expect_eq(ncclAllReduce(b[1], b[1], 256, ncclInt32, ncclSum, a[1].comm, a[1].st), ncclRemoteError);
  cr_expect_eq(ncclCommDestroy(a[1].comm), ncclRemoteError);
  /* rank 0 waits for rank 1 in op 2 forever */
  usleep(100 * 1000);
  cr_expect_eq(cudaStreamQuery(a[0].st), cudaErrorNotReady);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(ncclCommAbort(a[i].comm), ncclSuccess);
    cudaStreamSynchronize(a[i].st);
    cudaStreamDestroy(a[i].st);
    cudaFree(b[i]);
  }
}

typedef struct {
  ncclUniqueId id;
  int rank, blocking;
  ncclResult_t r;
  ncclComm_t comm;
  double ms;
} nj_t;

static void *nj_main(void *p) {
  nj_t *a = p;
  cudaSetDevice(a->rank);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = a->blocking;
  double t0 = now_ms();
  a->r = ncclCommInitRankConfig(&a->comm, 2, a->id, a->rank, &cfg);
  a->ms = now_ms() - t0;
  return NULL;
}

static void never_join(int blocking, nj_t *a) {
  pthread_t th[2];
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  for (int i = 0; i < 2; i++) {
    a[i] = (nj_t){id, i, blocking, ncclSuccess, NULL, 0};
    pthread_create(&th[i], NULL, nj_main, &a[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
}

Test(faults, never_join_blocking_times_out) {
  setenv("FAKEGPU_NCCL_FAULT", "never_join:1", 1);
  setenv("FAKEGPU_NCCL_TIMEOUT_MS", "300", 1);
  nj_t a[2];
  never_join(1, a);
  cr_expect_eq(a[0].r, ncclSystemError);
  cr_expect_geq(a[0].ms, 290.0);
  cr_expect_lt(a[0].ms, 5000.0);
  for (int i = 0; i < 2; i++) cr_expect_eq(ncclCommAbort(a[i].comm), ncclSuccess);
}

Test(faults, never_join_nonblocking_stays_in_progress) {
  setenv("FAKEGPU_NCCL_FAULT", "never_join:1", 1);
  setenv("FAKEGPU_NCCL_TIMEOUT_MS", "100", 1);
  nj_t a[2];
  never_join(0, a);
  for (int i = 0; i < 2; i++) cr_expect_eq(a[i].r, ncclInProgress);
  usleep(400 * 1000);
  ncclResult_t st = ncclSuccess;
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(ncclCommGetAsyncError(a[i].comm, &st), ncclSuccess);
    cr_expect_eq(st, ncclInProgress);
  }
  for (int i = 0; i < 2; i++) {
    double t0 = now_ms();
    cr_expect_eq(ncclCommAbort(a[i].comm), ncclSuccess);
    cr_expect_lt(now_ms() - t0, 1000.0);
  }
}
