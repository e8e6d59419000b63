/* The fake NCCL against NCCL 2.28's documented behaviour: exact results of every
 * collective and send/recv on thread and process ranks, nonblocking init, pointer checks,
 * "Duplicate GPU", and the injected faults that drive timeout, abort and destroy. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <nccl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fakenccl_reduce.h"

extern char **environ;

/* A missed rendezvous hangs like NCCL would: fail the test instead of the whole run. */
TestSuite(threads, .timeout = 60);
TestSuite(process, .timeout = 60);
TestSuite(init, .timeout = 60);
TestSuite(checks, .timeout = 60);
TestSuite(faults, .timeout = 60);
TestSuite(teardown, .timeout = 60);
TestSuite(split, .timeout = 60);
TestSuite(reduce, .timeout = 60);

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---------------------------------------------------------------- thread ranks */

typedef struct {
  int rank, nranks, dev;
  ncclUniqueId id;
  void *arg;
  int (*fn)(int rank, int nranks, ncclComm_t comm, cudaStream_t st, void *arg);
  int blocking;
  int rc;
} rank_t;

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
static void run_ranks(int n, int blocking, int (*fn)(int, int, ncclComm_t, cudaStream_t, void *),
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

/* Thread-safe helpers (Criterion's asserts belong to the main thread). The legacy-stream
 * copy and memset are ordered before later work on other streams by a device sync, as
 * CUDA requires: a pageable cudaMemcpy may return before the data reaches the device. */
#define CHECK(x)                                                                                 \
  do {                                                                                           \
    if (!(x)) {                                                                                  \
      fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x);                             \
      abort();                                                                                   \
    }                                                                                            \
  } while (0)

static void *dev_from(const void *host, size_t bytes) {
  void *d = NULL;
  CHECK(cudaMalloc(&d, bytes ? bytes : 1) == cudaSuccess);
  if (host) CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  else CHECK(cudaMemset(d, 0x5a, bytes) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  return d;
}

static void to_host(void *host, const void *dev, size_t bytes) {
  CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
}

static void upload(void *dev, const void *host, size_t bytes) {
  CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

/* Seeded, exactly representable: the input of rank r, element i. */
static int val(int r, size_t i) { return (int)((i * 7 + (size_t)r * 13) % 1001) - 500; }

#define BIG 300000 /* floats: more than one 1 MiB staging step */

/* A nonblocking communicator may answer ncclInProgress: poll until it is done. */
static int ok(ncclResult_t r, ncclComm_t comm) {
  while (r == ncclInProgress) {
    ncclResult_t st;
    if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) return 0;
    r = st;
  }
  return r == ncclSuccess;
}

static int colls_body(int rank, int n, ncclComm_t comm, cudaStream_t st, void *arg) {
  (void)arg;
  size_t cnt = BIG;
  float *h = malloc(sizeof(float) * cnt * n), *o = malloc(sizeof(float) * cnt * n);
  int bad = 0;
  for (size_t i = 0; i < cnt * n; i++) h[i] = (float)val(rank, i);
  float *d = dev_from(h, sizeof(float) * cnt * n), *r = dev_from(NULL, sizeof(float) * cnt * n);

  /* allreduce sum, out of place */
  if (!ok(ncclAllReduce(d, r, cnt, ncclFloat, ncclSum, comm, st), comm)) return 1;
  cudaStreamSynchronize(st);
  to_host(o, r, sizeof(float) * cnt);
  for (size_t i = 0; i < cnt; i++) {
    float want = 0;
    for (int k = 0; k < n; k++) want += (float)val(k, i);
    bad += o[i] != want;
  }
  /* allreduce max in place, int32 */
  int *di = dev_from(NULL, sizeof(int) * 1000), hi[1000], oi[1000];
  for (int i = 0; i < 1000; i++) hi[i] = val(rank, (size_t)i);
  upload(di, hi, sizeof hi);
  if (!ok(ncclAllReduce(di, di, 1000, ncclInt32, ncclMax, comm, st), comm)) return 2;
  cudaStreamSynchronize(st);
  to_host(oi, di, sizeof oi);
  for (int i = 0; i < 1000; i++) {
    int want = val(0, (size_t)i);
    for (int k = 1; k < n; k++) want = val(k, (size_t)i) > want ? val(k, (size_t)i) : want;
    bad += oi[i] != want;
  }
  /* allgather */
  if (!ok(ncclAllGather(d, r, cnt, ncclFloat, comm, st), comm)) return 3;
  cudaStreamSynchronize(st);
  to_host(o, r, sizeof(float) * cnt * n);
  for (int k = 0; k < n; k++)
    for (size_t i = 0; i < cnt; i++) bad += o[k * cnt + i] != (float)val(k, i);
  /* reduce_scatter: rank gets block `rank` summed */
  if (!ok(ncclReduceScatter(d, r, cnt, ncclFloat, ncclSum, comm, st), comm)) return 4;
  cudaStreamSynchronize(st);
  to_host(o, r, sizeof(float) * cnt);
  for (size_t i = 0; i < cnt; i++) {
    float want = 0;
    for (int k = 0; k < n; k++) want += (float)val(k, rank * cnt + i);
    bad += o[i] != want;
  }
  /* broadcast from the last rank */
  if (!ok(ncclBroadcast(d, r, cnt, ncclFloat, n - 1, comm, st), comm)) return 5;
  cudaStreamSynchronize(st);
  to_host(o, r, sizeof(float) * cnt);
  for (size_t i = 0; i < cnt; i++) bad += o[i] != (float)val(n - 1, i);
  /* alltoall: block j of rank k lands in block k of rank j */
  if (!ok(ncclAlltoAll(d, r, cnt, ncclFloat, comm, st), comm)) return 6;
  cudaStreamSynchronize(st);
  to_host(o, r, sizeof(float) * cnt * n);
  for (int k = 0; k < n; k++)
    for (size_t i = 0; i < cnt; i++) bad += o[k * cnt + i] != (float)val(k, rank * cnt + i);
  /* reduce prod to rank 0 on small values, gather to 1, scatter from 0 */
  if (!ok(ncclReduce(di, r, 10, ncclInt32, ncclProd, 0, comm, st), comm)) return 7;
  if (!ok(ncclGather(d, r + cnt * n / 2, 100, ncclFloat, 1, comm, st), comm)) return 8;
  cudaStreamSynchronize(st);
  if (rank == 0) {
    int pr[10];
    to_host(pr, r, sizeof pr);
    for (int i = 0; i < 10; i++) {
      uint32_t want = (uint32_t)oi[i], p = 1; /* the device wraps: unsigned arithmetic */
      for (int k = 0; k < n; k++) p *= want; /* every rank holds the max now */
      bad += (uint32_t)pr[i] != p;
    }
  }
  if (rank == 1) {
    to_host(o, r + cnt * n / 2, sizeof(float) * 100 * n);
    for (int k = 0; k < n; k++)
      for (int i = 0; i < 100; i++) bad += o[k * 100 + i] != (float)val(k, (size_t)i);
  }
  if (!ok(ncclScatter(d, r, 50, ncclFloat, 0, comm, st), comm)) return 9;
  cudaStreamSynchronize(st);
  to_host(o, r, sizeof(float) * 50);
  for (int i = 0; i < 50; i++) bad += o[i] != (float)val(0, (size_t)(rank * 50 + i));
  /* send/recv ring, fused in a group, larger than a ring buffer */
  ncclGroupStart();
  ncclSend(d, cnt, ncclFloat, (rank + 1) % n, comm, st);
  ncclRecv(r, cnt, ncclFloat, (rank + n - 1) % n, comm, st);
  if (!ok(ncclGroupEnd(), comm)) return 10;
  cudaStreamSynchronize(st);
  to_host(o, r, sizeof(float) * cnt);
  for (size_t i = 0; i < cnt; i++) bad += o[i] != (float)val((rank + n - 1) % n, i);
  /* avg: floats are a PreMulSum by 1/n, integers divide the sum (toward zero) */
  int ai[4] = {rank == 0 ? -3 : 0, 7 * (rank + 1), -1, 1000};
  upload(di, ai, sizeof ai);
  if (!ok(ncclAllReduce(di, di, 4, ncclInt32, ncclAvg, comm, st), comm)) return 11;
  cudaStreamSynchronize(st);
  to_host(ai, di, sizeof ai);
  int s1 = 0;
  for (int k = 0; k < n; k++) s1 += 7 * (k + 1);
  bad += ai[0] != -3 / n;
  bad += ai[1] != s1 / n;
  bad += ai[2] != -1 * n / n;
  bad += ai[3] != 1000;
  cudaFree(d);
  cudaFree(r);
  cudaFree(di);
  free(h);
  free(o);
  return bad ? 1000 + bad : 0;
}

Test(threads, collectives_2_ranks) { run_ranks(2, 1, colls_body, NULL); }
Test(threads, collectives_4_ranks) { run_ranks(4, 1, colls_body, NULL); }
Test(threads, collectives_nonblocking_4_ranks) {
  /* Nonblocking comms: every call may return ncclInProgress, the body polls. */
  run_ranks(4, 0, colls_body, NULL);
}

/* A nonblocking call's kernel runs whether or not the caller has polled yet; the owed
 * ncclInProgress reports come after. */
static int nb_nopoll_body(int rank, int n, ncclComm_t comm, cudaStream_t st, void *arg) {
  (void)n, (void)arg;
  int h[8] = {rank, rank, rank, rank, rank, rank, rank, rank}, bad = 0;
  int *d = dev_from(h, sizeof h);
  bad += ncclAllReduce(d, d, 8, ncclInt32, ncclSum, comm, st) != ncclInProgress;
  bad += cudaStreamSynchronize(st) != cudaSuccess;
  to_host(h, d, sizeof h);
  bad += h[7] != 1;
  ncclResult_t a = ncclSuccess, b = ncclInProgress;
  ncclCommGetAsyncError(comm, &a);
  ncclCommGetAsyncError(comm, &b);
  bad += a != ncclInProgress || b != ncclSuccess;
  cudaFree(d);
  return bad;
}

Test(threads, nonblocking_kernel_runs_before_poll) {
  setenv("FAKEGPU_NCCL_OP_POLLS", "1", 1);
  run_ranks(2, 0, nb_nopoll_body, NULL);
}

/* PreMulSum: a host scalar and a device scalar. */
static int premul_body(int rank, int n, ncclComm_t comm, cudaStream_t st, void *arg) {
  (void)n, (void)arg;
  float h[4] = {1.0f + rank, 2, 3, 4}, two = 2.0f, half = 0.5f;
  float *d = dev_from(h, sizeof h), *ds = dev_from(&half, sizeof half);
  ncclRedOp_t op1, op2;
  int bad = 0;
  bad += ncclRedOpCreatePreMulSum(&op1, &two, ncclFloat, ncclScalarHostImmediate, comm) != ncclSuccess;
  bad += ncclRedOpCreatePreMulSum(&op2, ds, ncclFloat, ncclScalarDevice, comm) != ncclSuccess;
  bad += ncclAllReduce(d, d, 4, ncclFloat, op1, comm, st) != ncclSuccess;
  bad += ncclAllReduce(d, d, 4, ncclFloat, op2, comm, st) != ncclSuccess;
  cudaStreamSynchronize(st);
  to_host(h, d, sizeof h);
  /* (2*1 + 2*2) = 6, then (0.5*6 + 0.5*6) = 6; 2*2+2*2 = 8 -> 8 */
  bad += h[0] != 6.0f || h[1] != 8.0f;
  bad += ncclRedOpDestroy(op1, comm) != ncclSuccess;
  bad += ncclRedOpDestroy(op1, comm) != ncclInvalidArgument;
  bad += ncclAllReduce(d, d, 4, ncclFloat, op1, comm, st) != ncclInvalidArgument;
  bad += ncclRedOpDestroy(op2, comm) != ncclSuccess;
  bad += ncclRedOpDestroy(ncclSum, comm) != ncclInvalidArgument;
  cudaFree(d);
  cudaFree(ds);
  return bad;
}

Test(threads, premulsum_user_ops) { run_ranks(2, 1, premul_body, NULL); }

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

/* ---------------------------------------------------------------- one thread, InitAll */

Test(threads, comm_init_all_grouped) {
  ncclComm_t comms[3];
  cudaStream_t st[3];
  float *b[3];
  int devs[3] = {2, 0, 1};
  cr_assert_eq(ncclCommInitAll(comms, 3, devs), ncclSuccess);
  for (int g = 0; g < 3; g++) {
    int dev = -1, rank = -1, n = 0;
    cr_assert_eq(ncclCommCuDevice(comms[g], &dev), ncclSuccess);
    cr_assert_eq(ncclCommUserRank(comms[g], &rank), ncclSuccess);
    cr_assert_eq(ncclCommCount(comms[g], &n), ncclSuccess);
    cr_expect_eq(dev, devs[g]);
    cr_expect_eq(rank, g);
    cr_expect_eq(n, 3);
    cudaSetDevice(dev);
    cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking);
    float h[64];
    for (int i = 0; i < 64; i++) h[i] = (float)(g * 100 + i);
    b[g] = dev_from(h, sizeof h);
  }
  cudaSetDevice(0); /* NCCL sets each communicator's device itself */
  cr_assert_eq(ncclGroupStart(), ncclSuccess);
  for (int g = 0; g < 3; g++)
    cr_assert_eq(ncclAllReduce(b[g], b[g], 64, ncclFloat, ncclSum, comms[g], st[g]), ncclSuccess);
  cr_assert_eq(ncclGroupEnd(), ncclSuccess);
  for (int g = 0; g < 3; g++) cr_assert_eq(cudaStreamSynchronize(st[g]), cudaSuccess);
  for (int g = 0; g < 3; g++) {
    float h[64];
    to_host(h, b[g], sizeof h);
    for (int i = 0; i < 64; i++) cr_expect_eq(h[i], (float)(300 + 3 * i));
  }
  /* A ring of grouped send/recv driven by one thread. */
  float *rb[3];
  for (int g = 0; g < 3; g++) {
    cudaSetDevice(devs[g]);
    rb[g] = dev_from(NULL, 64 * sizeof(float));
  }
  ncclGroupStart();
  for (int g = 0; g < 3; g++) {
    ncclSend(b[g], 64, ncclFloat, (g + 1) % 3, comms[g], st[g]);
    ncclRecv(rb[g], 64, ncclFloat, (g + 2) % 3, comms[g], st[g]);
  }
  cr_assert_eq(ncclGroupEnd(), ncclSuccess);
  for (int g = 0; g < 3; g++) cr_assert_eq(cudaStreamSynchronize(st[g]), cudaSuccess);
  float h0[64];
  to_host(h0, rb[0], sizeof h0);
  cr_expect_eq(h0[5], (float)(300 + 15));
  for (int g = 0; g < 3; g++) {
    cudaFree(b[g]);
    cudaFree(rb[g]);
    cudaStreamDestroy(st[g]);
    cr_expect_eq(ncclCommDestroy(comms[g]), ncclSuccess);
  }
  int dup[2] = {1, 1};
  cr_expect_eq(ncclCommInitAll(comms, 2, dup), ncclInvalidUsage);
  cr_expect_eq(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd outside a group");
}

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

/* ---------------------------------------------------------------- split */

static int split_body(int rank, int n, ncclComm_t comm, cudaStream_t st, void *arg) {
  (void)arg;
  ncclComm_t sub = NULL;
  int color = rank == n - 1 ? NCCL_SPLIT_NOCOLOR : rank % 2;
  if (ncclCommSplit(comm, color, -rank, &sub, NULL) != ncclSuccess) return 1;
  if (color == NCCL_SPLIT_NOCOLOR) return sub != NULL;
  int sn = 0, sr = -1, sd = -1, bad = 0;
  ncclCommCount(sub, &sn);
  ncclCommUserRank(sub, &sr);
  ncclCommCuDevice(sub, &sd);
  int members = 0, below = 0;
  for (int k = 0; k < n - 1; k++)
    if (k % 2 == color) {
      members++;
      below += k > rank; /* key -rank: higher parent ranks come first */
    }
  bad += sn != members;
  bad += sr != below;
  bad += sd != rank;
  int *d = dev_from(NULL, sizeof(int));
  int one = rank;
  upload(d, &one, sizeof one);
  bad += ncclAllReduce(d, d, 1, ncclInt32, ncclSum, sub, st) != ncclSuccess;
  cudaStreamSynchronize(st);
  to_host(&one, d, sizeof one);
  int want = 0;
  for (int k = 0; k < n - 1; k++) want += k % 2 == color ? k : 0;
  bad += one != want;
  bad += ncclCommDestroy(sub) != ncclSuccess;
  cudaFree(d);
  return bad;
}

Test(split, color_key_nocolor) { run_ranks(4, 1, split_body, NULL); }

/* ---------------------------------------------------------------- arithmetic */

Test(reduce, dtype_semantics) {
  /* fp16: 2048 + 1 rounds to even in half */
  uint16_t a = fn_half_from_double(2048), b = fn_half_from_double(1), r;
  const void *srcs[2] = {&a, &b};
  fn_redop_t sum = {FN_OP_SUM, 0};
  fn_reduce(ncclFloat16, sum, srcs, 2, &r, 1);
  cr_expect_eq(fn_half_to_double(r), 2048.0);
  cr_expect_eq(fn_half_from_double(65520.0), 0x7c00, "half overflow is inf");
  cr_expect_eq(fn_half_from_double(5.960464477539063e-08), 0x0001, "smallest subnormal");
  /* fp8 e4m3 saturates: 448 + 448 -> 448 */
  uint8_t x = 0x7e, y = 0x7e, z;
  const void *s8[2] = {&x, &y};
  fn_reduce(ncclFloat8e4m3, sum, s8, 2, &z, 1);
  cr_expect_eq(z, 0x7e);
  /* int8 wraps, uint8 max is unsigned, int8 max is signed */
  int8_t i1 = 100, i2 = 100, io;
  const void *si[2] = {&i1, &i2};
  fn_reduce(ncclInt8, sum, si, 2, &io, 1);
  cr_expect_eq(io, (int8_t)200);
  uint8_t u1 = 0x80, u2 = 0x7f, uo;
  const void *su[2] = {&u1, &u2};
  fn_redop_t mx = {FN_OP_MAX, 0};
  fn_reduce(ncclUint8, mx, su, 2, &uo, 1);
  cr_expect_eq(uo, 0x80);
  fn_reduce(ncclInt8, mx, su, 2, &uo, 1);
  cr_expect_eq(uo, 0x7f);
  /* bf16 avg scalar of 3 ranks is bf16(float(1/3)) */
  cr_expect_eq(fn_avg_scalar(ncclBfloat16, 3), fn_bf16_from_double((float)(1.0 / 3)));
  cr_expect_eq(fn_bf16_from_double(1.0 / 3), 0x3eab);
}
