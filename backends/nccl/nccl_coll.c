/* nccl backend: collectives, grouped fallbacks for entry points an old NCCL lacks, and
 * point to point with group brackets; all enqueued on the stream's cudaStream_t. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_internal.h"

/* ------------------------------------------------------------- collectives */

/* Every collective: hold the comm, make its GPU current, refuse when aborted/broken,
 * map dtype (and op); count 0 is a no-op. */
#define NCCL_COLL_BEGIN(c, what, dtype, reduce, op)                      \
  NCCL_ENTER(c);                                                         \
  ncclDataType_t t;                                                      \
  ncclRedOp_t o = ncclSum;                                               \
  ul_result_t rc = ulnccl_usable(c, what);                                 \
  if (rc == UL_OK) rc = ulnccl_types(c, dtype, reduce, op, &t, &o);        \
  if (rc != UL_OK || count == 0) return rc;                              \
  (void)o

ul_result_t ulnccl_allreduce(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                             ul_dtype_t dtype, ul_op_t op, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_allreduce", dtype, 1, op);
  return ulnccl_finish(c, "ncclAllReduce",
                     ncclAllReduce(sb, rb, count, t, o, c->nc, ulnccl_stream_of(c, s)), s);
}

ul_result_t ulnccl_broadcast(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                             ul_dtype_t dtype, int root, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_broadcast", dtype, 0, UL_SUM);
  ulnccl_coll_buffers(UL_COLL_BROADCAST, c->rank, root, &sb, &rb);
  return ulnccl_finish(c, "ncclBroadcast",
                     ncclBroadcast(sb, rb, count, t, root, c->nc, ulnccl_stream_of(c, s)), s);
}

ul_result_t ulnccl_reduce(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                          ul_dtype_t dtype, ul_op_t op, int root, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_reduce", dtype, 1, op);
  ulnccl_coll_buffers(UL_COLL_REDUCE, c->rank, root, &sb, &rb);
  return ulnccl_finish(c, "ncclReduce",
                     ncclReduce(sb, rb, count, t, o, root, c->nc, ulnccl_stream_of(c, s)), s);
}

ul_result_t ulnccl_allgather(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                             ul_dtype_t dtype, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_allgather", dtype, 0, UL_SUM);
  return ulnccl_finish(c, "ncclAllGather",
                     ncclAllGather(sb, rb, count, t, c->nc, ulnccl_stream_of(c, s)), s);
}

ul_result_t ulnccl_reduce_scatter(ul_backend_comm_t *c, const void *sb, void *rb,
                                  size_t count, ul_dtype_t dtype, ul_op_t op,
                                  ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_reduce_scatter", dtype, 1, op);
  return ulnccl_finish(c, "ncclReduceScatter",
                     ncclReduceScatter(sb, rb, count, t, o, c->nc, ulnccl_stream_of(c, s)), s);
}

/* Run a plan of ncclSend/ncclRecv as one group; frees plan. */
static ul_result_t nccl_group_run(ul_backend_comm_t *c, const char *call, ulnccl_vp2p_t *plan,
                                  int n, ncclDataType_t t, ul_backend_stream_t *s) {
  cudaStream_t st = ulnccl_stream_of(c, s);
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    free(plan);
    return ulnccl_fail(c, "ncclGroupStart", r);
  }
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n && (first == ncclSuccess || first == ncclInProgress); i++)
    first = plan[i].is_send ? ncclSend(plan[i].buf, plan[i].count, t, plan[i].peer, c->nc, st)
                            : ncclRecv(plan[i].buf, plan[i].count, t, plan[i].peer, c->nc, st);
  free(plan);
  r = ncclGroupEnd(); /* a started group is always ended */
  if (first != ncclSuccess && first != ncclInProgress) return ulnccl_fail(c, call, first);
  return ulnccl_finish(c, call, r, s);
}

/* NCCL < 2.28.3: alltoall/gather/scatter as ncclSend/ncclRecv in one group (what
 * nccl-tests does for those versions). */
static ul_result_t nccl_p2p_fallback(ul_backend_comm_t *c, ul_coll_t coll, const char *call,
                                     const void *sb, void *rb, size_t count, ul_dtype_t dtype,
                                     ncclDataType_t t, int root, ul_backend_stream_t *s) {
  size_t room = 2 * (size_t)c->nranks;
  ulnccl_p2p_t *fixed = malloc(room * sizeof(*fixed));
  ulnccl_vp2p_t *plan = malloc(room * sizeof(*plan));
  if (!fixed || !plan) {
    free(fixed);
    free(plan);
    return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  }
  int n = ulnccl_p2p_plan(coll, c->rank, c->nranks, root, count * ul_dtype_size(dtype), sb, rb,
                          fixed);
  for (int i = 0; i < n; i++)
    plan[i] = (ulnccl_vp2p_t){fixed[i].is_send, fixed[i].peer, fixed[i].buf, count};
  free(fixed);
  return nccl_group_run(c, call, plan, n, t, s);
}

/* gather and scatter: NCCL's own when this NCCL has it, else the grouped fallback. */
static ul_result_t nccl_rooted(ul_backend_comm_t *c, ul_coll_t coll, const char *what,
                               const char *call, const char *fallback_call, ulnccl_rooted_fn fn,
                               const void *sb, void *rb, size_t count, ul_dtype_t dtype, int root,
                               ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, what, dtype, 0, UL_SUM);
  ulnccl_coll_buffers(coll, c->rank, root, &sb, &rb);
  if (!fn) return nccl_p2p_fallback(c, coll, fallback_call, sb, rb, count, dtype, t, root, s);
  return ulnccl_finish(c, call, fn(sb, rb, count, t, root, c->nc, ulnccl_stream_of(c, s)), s);
}

ul_result_t ulnccl_alltoall(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                            ul_dtype_t dtype, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_alltoall", dtype, 0, UL_SUM);
  if (!ulnccl_opt.alltoall)
    return nccl_p2p_fallback(c, UL_COLL_ALLTOALL, "ncclSend/ncclRecv (alltoall)", sb, rb, count,
                             dtype, t, 0, s);
  return ulnccl_finish(c, "ncclAlltoAll",
                     ulnccl_opt.alltoall(sb, rb, count, t, c->nc, ulnccl_stream_of(c, s)), s);
}

/* The vector collectives: grouped ncclSend/ncclRecv of per-peer counts (NCCL has no
 * alltoallv or allgatherv; this is what NCCL users write by hand). */
static ul_result_t nccl_vgroup(ul_backend_comm_t *c, const char *call, const void *sb,
                               const size_t *scounts, const size_t *sdispls, void *rb,
                               const size_t *rcounts, const size_t *rdispls, ul_dtype_t dtype,
                               ul_backend_stream_t *s) {
  size_t count = 1; /* NCCL_COLL_BEGIN's no-op test: empty blocks are left out below */
  NCCL_COLL_BEGIN(c, call, dtype, 0, UL_SUM);
  ulnccl_vp2p_t *plan = malloc(2 * (size_t)c->nranks * sizeof(*plan));
  if (!plan) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  int n = ulnccl_vplan(c->rank, c->nranks, ul_dtype_size(dtype), sb, scounts, sdispls, rb,
                       rcounts, rdispls, plan);
  return nccl_group_run(c, call, plan, n, t, s);
}

ul_result_t ulnccl_alltoallv(ul_backend_comm_t *c, const void *sb, const size_t *scounts,
                             const size_t *sdispls, void *rb, const size_t *rcounts,
                             const size_t *rdispls, ul_dtype_t dtype,
                             ul_backend_stream_t *s) {
  return nccl_vgroup(c, "ncclSend/ncclRecv (alltoallv)", sb, scounts, sdispls, rb, rcounts,
                     rdispls, dtype, s);
}

ul_result_t ulnccl_allgatherv(ul_backend_comm_t *c, const void *sb, size_t sendcount,
                              void *rb, const size_t *rcounts, const size_t *displs,
                              ul_dtype_t dtype, ul_backend_stream_t *s) {
  return nccl_vgroup(c, "ncclSend/ncclRecv (allgatherv)", sb, &sendcount, NULL, rb, rcounts,
                     displs, dtype, s);
}

ul_result_t ulnccl_gather(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                          ul_dtype_t dtype, int root, ul_backend_stream_t *s) {
  return nccl_rooted(c, UL_COLL_GATHER, "ul_gather", "ncclGather", "ncclSend/ncclRecv (gather)",
                     ulnccl_opt.gather, sb, rb, count, dtype, root, s);
}

ul_result_t ulnccl_scatter(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                           ul_dtype_t dtype, int root, ul_backend_stream_t *s) {
  return nccl_rooted(c, UL_COLL_SCATTER, "ul_scatter", "ncclScatter",
                     "ncclSend/ncclRecv (scatter)", ulnccl_opt.scatter, sb, rb, count, dtype,
                     root, s);
}

ul_result_t ulnccl_barrier(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  NCCL_ENTER(c);
  ul_result_t rc = ulnccl_usable(c, "ul_barrier");
  if (rc != UL_OK) return rc;
  /* NCCL has no barrier: a 1-element in-place allreduce of a zero int completes on every
   * rank only after all ranks entered it. */
  return ulnccl_finish(c, "ncclAllReduce (barrier)",
                     ncclAllReduce(c->barrier_buf, c->barrier_buf, 1, ncclInt32, ncclSum, c->nc,
                                   ulnccl_stream_of(c, s)),
                     s);
}

/* ---------------------------------------------------------- point to point */

ul_result_t ulnccl_send(ul_backend_comm_t *c, const void *buf, size_t count,
                        ul_dtype_t dtype, int peer, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_send", dtype, 0, UL_SUM);
  return ulnccl_finish(c, "ncclSend",
                       ncclSend(buf, count, t, peer, c->nc, ulnccl_stream_of(c, s)), s);
}

ul_result_t ulnccl_recv(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                        int peer, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_recv", dtype, 0, UL_SUM);
  return ulnccl_finish(c, "ncclRecv",
                       ncclRecv(buf, count, t, peer, c->nc, ulnccl_stream_of(c, s)), s);
}

ul_result_t ulnccl_group_start(ul_backend_comm_t *c) {
  NCCL_ENTER(c);
  ul_result_t rc = ulnccl_usable(c, "ul_group_start");
  if (rc != UL_OK) return rc;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return ulnccl_fail(c, "ncclGroupStart", r);
  ulnccl_group_depth++;
  return UL_OK;
}

ul_result_t ulnccl_group_end(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  NCCL_ENTER(c);
  if (ulnccl_group_depth > 0) ulnccl_group_depth--;
  /* Always end NCCL's group (even aborted: the thread's group state must unwind). */
  ncclResult_t r = ncclGroupEnd();
  ul_result_t rc = ulnccl_usable(c, "ul_group_end");
  if (rc != UL_OK) return rc;
  return ulnccl_finish(c, "ncclGroupEnd", r, s);
}
