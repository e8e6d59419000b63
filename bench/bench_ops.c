/* One small descriptor per operation: buffers, call, expected result. */
#include "bench_ops.h"

#include <stdlib.h>
#include <string.h>

static char *bench_at(char *base, size_t elems, size_t es) { return base + elems * es; }

/* ---- buffer layouts (in place follows NCCL's pointer-aliasing rules) ---------- */

static void ptrs_same(const bench_call_t *c, const void **s, void **r) {
  /* allreduce, broadcast, reduce, sendrecv, alltoall: in place means send == recv */
  *s = c->in_place ? c->rbuf : c->sbuf;
  *r = c->rbuf;
}

static void ptrs_gatherlike(const bench_call_t *c, const void **s, void **r) {
  /* allgather, gather: send = recv + rank * count */
  *r = c->rbuf;
  *s = c->in_place ? bench_at(c->rbuf, (size_t)c->rank * c->counts.send_inplace_off, c->es)
                   : c->sbuf;
  /* off root, gather's recvbuf is unused; in place it would overlap our send block */
  if (c->op == BENCH_GATHER && c->in_place && c->rank != c->root) *r = NULL;
}

static void ptrs_scatterlike(const bench_call_t *c, const void **s, void **r) {
  /* reduce_scatter, scatter: recv = send + rank * count */
  *s = c->in_place ? c->rbuf : c->sbuf;
  *r = c->in_place ? bench_at(c->rbuf, (size_t)c->rank * c->counts.recv_inplace_off, c->es)
                   : c->rbuf;
  if (c->op == BENCH_SCATTER && c->in_place && c->rank != c->root) *s = NULL;
}

/* ---- calls -------------------------------------------------------------------- */

static ul_result_t run_allreduce(const bench_call_t *c, const void *s, void *r) {
  return ul_allreduce(s, r, c->counts.paramcount, c->dtype, c->redop, c->comm, c->stream);
}
static ul_result_t run_allgather(const bench_call_t *c, const void *s, void *r) {
  return ul_allgather(s, r, c->counts.paramcount, c->dtype, c->comm, c->stream);
}
static ul_result_t run_reduce_scatter(const bench_call_t *c, const void *s, void *r) {
  return ul_reduce_scatter(s, r, c->counts.paramcount, c->dtype, c->redop, c->comm, c->stream);
}
static ul_result_t run_broadcast(const bench_call_t *c, const void *s, void *r) {
  return ul_broadcast(s, r, c->counts.paramcount, c->dtype, c->root, c->comm, c->stream);
}
static ul_result_t run_reduce(const bench_call_t *c, const void *s, void *r) {
  return ul_reduce(s, r, c->counts.paramcount, c->dtype, c->redop, c->root, c->comm, c->stream);
}
static ul_result_t run_alltoall(const bench_call_t *c, const void *s, void *r) {
  return ul_alltoall(s, r, c->counts.paramcount, c->dtype, c->comm, c->stream);
}
static ul_result_t run_gather(const bench_call_t *c, const void *s, void *r) {
  return ul_gather(s, r, c->counts.paramcount, c->dtype, c->root, c->comm, c->stream);
}
static ul_result_t run_scatter(const bench_call_t *c, const void *s, void *r) {
  return ul_scatter(s, r, c->counts.paramcount, c->dtype, c->root, c->comm, c->stream);
}
static ul_result_t run_sendrecv(const bench_call_t *c, const void *s, void *r) {
  /* ring shift as nccl-tests: send to rank+1, receive from rank-1, one group */
  int n = c->nranks;
  ul_result_t rc = ul_group_start();
  if (rc != UL_OK) return rc;
  ul_result_t a = ul_send(s, c->counts.paramcount, c->dtype, (c->rank + 1) % n, c->comm, c->stream);
  ul_result_t b = ul_recv(r, c->counts.paramcount, c->dtype, (c->rank - 1 + n) % n, c->comm,
                          c->stream);
  ul_result_t e = ul_group_end();
  return a != UL_OK ? a : b != UL_OK ? b : e;
}

static ul_result_t run_hypercube(const bench_call_t *c, const void *s, void *r) {
  /* nccl-tests hypercube_perf: own block in place, then log2(n) exchanges of doubling
   * size with rank ^ mask (n must be a power of two, as there) */
  int n = c->nranks, me = c->rank;
  size_t b = c->counts.paramcount, bb = b * c->es;
  char *rb = r;
  if (rb + (size_t)me * bb != (const char *)s && bb) {
    ul_result_t rc = ul_mem_copy(rb + (size_t)me * bb, s, bb, c->comm, c->stream);
    if (rc != UL_OK) return rc;
  }
  for (int mask = 1; mask < n; mask <<= 1) {
    int lo = me & ~(mask - 1), peer_lo = lo ^ mask;
    ul_result_t rc = ul_group_start();
    if (rc != UL_OK) return rc;
    ul_result_t a = ul_send(rb + (size_t)lo * bb, b * (size_t)mask, c->dtype, me ^ mask, c->comm,
                            c->stream);
    ul_result_t q = ul_recv(rb + (size_t)peer_lo * bb, b * (size_t)mask, c->dtype, me ^ mask,
                            c->comm, c->stream);
    rc = ul_group_end();
    if (a != UL_OK || q != UL_OK || rc != UL_OK) return a != UL_OK ? a : q != UL_OK ? q : rc;
  }
  return UL_OK;
}

static ul_result_t run_alltoallv(const bench_call_t *c, const void *s, void *r) {
  const size_t *v = c->vcounts, n = (size_t)c->nranks;
  return ul_alltoallv(s, v, v + n, r, v + 2 * n, v + 3 * n, c->dtype, c->comm, c->stream);
}
static ul_result_t run_allgatherv(const bench_call_t *c, const void *s, void *r) {
  const size_t *v = c->vcounts, n = (size_t)c->nranks;
  return ul_allgatherv(s, c->counts.paramcount, r, v, v + n, c->dtype, c->comm, c->stream);
}

/* ---- expected results (gen values of the source rank and element) ------------- */

static size_t count_param(const bench_call_t *c) { return c->counts.paramcount; }
static size_t count_recv(const bench_call_t *c) { return c->counts.recvcount; }

static int exp_allreduce(const bench_call_t *c, const bench_gen_t *g, size_t i, double *v) {
  (void)c;
  *v = bench_gen_reduced(g, i);
  return 1;
}
static int exp_reduce(const bench_call_t *c, const bench_gen_t *g, size_t i, double *v) {
  if (c->rank != c->root) return 0;
  *v = bench_gen_reduced(g, i);
  return 1;
}
static int exp_broadcast(const bench_call_t *c, const bench_gen_t *g, size_t i, double *v) {
  *v = bench_gen_value(g, c->root, i);
  return 1;
}
static int exp_allgather(const bench_call_t *c, const bench_gen_t *g, size_t i, double *v) {
  size_t b = c->counts.paramcount;
  *v = bench_gen_value(g, (int)(i / b), i % b);
  return 1;
}
static int exp_gather(const bench_call_t *c, const bench_gen_t *g, size_t i, double *v) {
  if (c->rank != c->root) return 0;
  return exp_allgather(c, g, i, v);
}
static int exp_reduce_scatter(const bench_call_t *c, const bench_gen_t *g, size_t i, double *v) {
  *v = bench_gen_reduced(g, (size_t)c->rank * c->counts.paramcount + i);
  return 1;
}
static int exp_scatter(const bench_call_t *c, const bench_gen_t *g, size_t i, double *v) {
  *v = bench_gen_value(g, c->root, (size_t)c->rank * c->counts.paramcount + i);
  return 1;
}
static int exp_alltoall(const bench_call_t *c, const bench_gen_t *g, size_t i, double *v) {
  size_t b = c->counts.paramcount;
  *v = bench_gen_value(g, (int)(i / b), (size_t)c->rank * b + i % b);
  return 1;
}
/* alltoallv: element i of this rank's result is in source j's block (recvcounts[j] at
 * rdispls[j]), which j sent from its own offset srcoffs[j] (bench_a2av_rank_counts) */
static int exp_alltoallv(const bench_call_t *c, const bench_gen_t *g, size_t i, double *v) {
  size_t n = (size_t)c->nranks;
  const size_t *rd = c->vcounts + 3 * n, *so = c->vcounts + 4 * n;
  /* the last j with rd[j] <= i: an empty block starts where the next one does, so the
   * last such j is the block that holds i */
  size_t lo = 0, hi = n;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (rd[mid] <= i) lo = mid;
    else hi = mid;
  }
  *v = bench_gen_value(g, (int)lo, so[lo] + (i - rd[lo]));
  return 1;
}
static size_t count_recv_v(const bench_call_t *c) {
  size_t n = (size_t)c->nranks;
  return c->vcounts[3 * n + n - 1] + c->vcounts[2 * n + n - 1]; /* this rank's own total */
}

static int exp_sendrecv(const bench_call_t *c, const bench_gen_t *g, size_t i, double *v) {
  *v = bench_gen_value(g, (c->rank - 1 + c->nranks) % c->nranks, i);
  return 1;
}

static const bench_op_desc_t bench_descs[BENCH_OP_COUNT] = {
    [BENCH_ALLREDUCE] = {BENCH_ALLREDUCE, ptrs_same, run_allreduce, exp_allreduce, count_param},
    [BENCH_ALLGATHER] = {BENCH_ALLGATHER, ptrs_gatherlike, run_allgather, exp_allgather, count_recv},
    [BENCH_REDUCE_SCATTER] = {BENCH_REDUCE_SCATTER, ptrs_scatterlike, run_reduce_scatter,
                              exp_reduce_scatter, count_recv},
    [BENCH_BROADCAST] = {BENCH_BROADCAST, ptrs_same, run_broadcast, exp_broadcast, count_param},
    [BENCH_REDUCE] = {BENCH_REDUCE, ptrs_same, run_reduce, exp_reduce, count_param},
    [BENCH_ALLTOALL] = {BENCH_ALLTOALL, ptrs_same, run_alltoall, exp_alltoall, count_recv},
    [BENCH_GATHER] = {BENCH_GATHER, ptrs_gatherlike, run_gather, exp_gather, count_recv},
    [BENCH_SCATTER] = {BENCH_SCATTER, ptrs_scatterlike, run_scatter, exp_scatter, count_recv},
    [BENCH_SENDRECV] = {BENCH_SENDRECV, ptrs_same, run_sendrecv, exp_sendrecv, count_param, 1},
    [BENCH_HYPERCUBE] = {BENCH_HYPERCUBE, ptrs_gatherlike, run_hypercube, exp_allgather, count_recv},
    [BENCH_ALLTOALLV] = {BENCH_ALLTOALLV, ptrs_same, run_alltoallv, exp_alltoallv, count_recv_v},
    [BENCH_ALLGATHERV] = {BENCH_ALLGATHERV, ptrs_gatherlike, run_allgatherv, exp_allgather,
                          count_recv},
};

const bench_op_desc_t *bench_op_desc(bench_op_t op) {
  return (op >= 0 && op < BENCH_OP_COUNT) ? &bench_descs[op] : NULL;
}

const char *bench_dtype_nccl_name(ul_dtype_t dtype) {
  static const char *const names[UL_DTYPE_COUNT] = {
      "int8", "uint8", "int32", "uint32", "int64", "uint64",
      "half", "bfloat16", "float", "double", "f8e4m3", "f8e5m2"};
  return (dtype >= 0 && dtype < UL_DTYPE_COUNT) ? names[dtype] : "?";
}

/* Fast stores for the common types; the narrow floats go through the public API. */
static void bench_store(ul_dtype_t dt, void *p, double v) {
  switch (dt) {
  case UL_INT8: *(int8_t *)p = (int8_t)v; break;
  case UL_UINT8: *(uint8_t *)p = (uint8_t)v; break;
  case UL_INT32: *(int32_t *)p = (int32_t)v; break;
  case UL_UINT32: *(uint32_t *)p = (uint32_t)v; break;
  case UL_INT64: *(int64_t *)p = (int64_t)v; break;
  case UL_UINT64: *(uint64_t *)p = (uint64_t)v; break;
  case UL_FP32: *(float *)p = (float)v; break;
  case UL_FP64: *(double *)p = v; break;
  default: ul_value_store(dt, p, v); break;
  }
}

ul_result_t bench_call_run(const bench_call_t *c) {
  const bench_op_desc_t *d = bench_op_desc(c->op);
  const void *s;
  void *r;
  d->ptrs(c, &s, &r);
  return d->run(c, s, r);
}

ul_result_t bench_call_fill(const bench_call_t *c, uint64_t seed) {
  const bench_op_desc_t *d = bench_op_desc(c->op);
  bench_gen_t g;
  bench_gen_init(&g, c->dtype, c->redop, c->nranks, seed, bench_op_reduces(c->op));
  const void *s;
  void *r;
  d->ptrs(c, &s, &r);
  /* poison the whole receive area first: stale results must not pass the check */
  size_t rbytes = c->counts.recvcount * c->es;
  if (c->in_place) {
    size_t sb = c->counts.sendcount * c->es;
    rbytes = rbytes > sb ? rbytes : sb;
  }
  if (rbytes) {
    ul_result_t rc = ul_mem_set(c->rbuf, 0xA5, rbytes, c->comm, NULL);
    if (rc != UL_OK) return rc;
  }
  int src_rank = c->rank;
  size_t n = c->counts.sendcount;
  switch (c->op) {
  case BENCH_BROADCAST:
  case BENCH_SCATTER:
    if (c->rank != c->root) return UL_OK; /* only root's send buffer is read */
    break;
  default:
    break;
  }
  if (!s || !n) return UL_OK;
  char *h = c->shadow;
  for (size_t i = 0; i < n; i++) bench_store(c->dtype, h + i * c->es, bench_gen_value(&g, src_rank, i));
  return ul_mem_copy((void *)(uintptr_t)s, h, n * c->es, c->comm, NULL);
}

ul_result_t bench_call_check(const bench_call_t *c, uint64_t seed, int64_t *wrong) {
  const bench_op_desc_t *d = bench_op_desc(c->op);
  bench_gen_t g;
  bench_gen_init(&g, c->dtype, c->redop, c->nranks, seed, bench_op_reduces(c->op));
  const void *s;
  void *r;
  d->ptrs(c, &s, &r);
  *wrong = 0;
  if (!r) return UL_OK;
  size_t n = d->result_count(c);
  double v;
  if (!n || !d->expect(c, &g, 0, &v)) return UL_OK; /* no result on this rank */
  ul_result_t rc = ul_mem_copy(c->shadow, r, n * c->es, c->comm, NULL);
  if (rc != UL_OK) return rc;
  unsigned char want[8];
  const unsigned char *got = (const unsigned char *)c->shadow;
  for (size_t i = 0; i < n; i++) {
    if (!d->expect(c, &g, i, &v)) return UL_OK;
    bench_store(c->dtype, want, v);
    if (memcmp(want, got + i * c->es, c->es) != 0) (*wrong)++;
  }
  return UL_OK;
}
