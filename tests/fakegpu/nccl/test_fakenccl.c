/* The fake NCCL against NCCL 2.28's documented behaviour: exact results of every
 * collective and send/recv on thread and process ranks, nonblocking init, pointer checks,
 * "Duplicate GPU", and the injected faults that drive timeout, abort and destroy.
 *
 * This file: collectives on thread ranks, split, arithmetic; test_fakenccl_init.c:
 * init, process ranks, pointer checks; test_fakenccl_faults.c: faults and teardown. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>

#include "fakenccl_reduce.h"
#include "test_fakenccl.h"

/* A missed rendezvous hangs like NCCL would: fail the test instead of the whole run. */
TestSuite(threads, .timeout = 60);
TestSuite(split, .timeout = 60);
TestSuite(reduce, .timeout = 60);

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
