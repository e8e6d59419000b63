/* Collectives of the fake NCCL: argument checks, enqueueing into the caller's group, the
 * one-rank path, the entry points (collectives, send, recv) and user reduction ops: the
 * top of the library. What the tasks run is in fakenccl_kernel.c and fakenccl_p2p.c.
 * See fakenccl.c. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakenccl_int.h"

/* ================================================================ argument checks */

static int check_pointers(void) { return env_int("FAKEGPU_NCCL_CHECK_POINTERS", 1) != 0; }

static int is_reduction(fn_kind_t k) {
  return k == K_ALLREDUCE || k == K_REDUCE || k == K_REDUCESCATTER;
}

/* ncclRedOp_t -> the device op (hostToDevRedOp). */
static ncclResult_t dev_redop(ncclComm_t c, ncclRedOp_t op, int dtype, fn_op_t *o) {
  o->op.scalar = 0;
  o->scalar_ptr = NULL;
  switch ((int)op) {
  case ncclSum: o->op.op = FN_OP_SUM; return ncclSuccess;
  case ncclProd: o->op.op = FN_OP_PROD; return ncclSuccess;
  case ncclMin: o->op.op = FN_OP_MIN; return ncclSuccess;
  case ncclMax: o->op.op = FN_OP_MAX; return ncclSuccess;
  case ncclAvg:
    if (dtype <= ncclUint64) {
      o->op.op = FN_OP_SUMPOSTDIV;
      o->op.scalar = (uint64_t)c->nranks;
    } else {
      o->op.op = FN_OP_PREMULSUM;
      o->op.scalar = fn_avg_scalar(dtype, c->nranks);
    }
    return ncclSuccess;
  default: break;
  }
  int ix = (int)op - (int)ncclNumOps;
  if (ix < 0 || ix >= c->nuserops || !c->userops[ix].used) return ncclInvalidArgument;
  o->op.op = FN_OP_PREMULSUM;
  if (c->userops[ix].is_ptr) o->scalar_ptr = (const void *)(uintptr_t)c->userops[ix].scalar;
  else o->op.scalar = c->userops[ix].scalar;
  return ncclSuccess;
}

/* ArgsCheck with checkPointers = 1. */
static ncclResult_t args_check(fn_op_t *o, ncclRedOp_t op) {
  ncclComm_t c = o->comm;
  int p2p = o->kind == K_SEND || o->kind == K_RECV;
  if (!p2p && (o->root < 0 || o->root >= c->nranks)) {
    fn_warn("%s : invalid root %d (root should be in the 0..%d range)", o->name, o->root, c->nranks);
    return ncclInvalidArgument;
  }
  if (p2p && (o->root < 0 || o->root >= c->nranks)) {
    fn_warn("%s : invalid peer %d (peer should be in the 0..%d range)", o->name, o->root,
            c->nranks);
    return ncclInvalidArgument;
  }
  if (o->dtype < 0 || o->dtype >= ncclNumTypes) {
    fn_warn("%s : invalid type %d", o->name, o->dtype);
    return ncclInvalidArgument;
  }
  if ((int)op < 0) {
    fn_warn("%s : invalid reduction operation %d", o->name, (int)op);
    return ncclInvalidArgument;
  }
  if (dev_redop(c, op, o->dtype, o) != ncclSuccess) {
    fn_warn("%s : reduction operation %d unknown to this communicator", o->name, (int)op);
    return ncclInvalidArgument;
  }
  if (check_pointers()) {
    ncclResult_t r = ncclSuccess;
    if (p2p) {
      if (o->count > 0) r = cuda_ptr_check(o->kind == K_SEND ? o->sbuf : o->rbuf, c, "buff", o->name);
    } else {
      if (o->kind != K_BROADCAST || c->rank == o->root)
        r = cuda_ptr_check(o->sbuf, c, "sendbuff", o->name);
      if (r == ncclSuccess && (o->kind != K_REDUCE || c->rank == o->root))
        r = cuda_ptr_check(o->rbuf, c, "recvbuff", o->name);
    }
    if (r != ncclSuccess) return r;
  }
  if ((o->dtype == ncclFloat8e4m3 || o->dtype == ncclFloat8e5m2) && is_reduction(o->kind) &&
      o->count > 0 && c->cc_major < 9) {
    fn_warn("FP8 reduction support begins with sm90 capable devices.");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t one_rank(fn_op_t *o);

/* ncclEnqueueCheck: check, then append to the thread's group (an implicit one when the
 * caller is not in a group). */
ncclResult_t enqueue(fn_op_t tmpl, ncclRedOp_t op) {
  ncclComm_t c = tmpl.comm;
  ncclResult_t ret = comm_check(c, tmpl.name);
  if (ret != ncclSuccess) return group_err_check(ret);
  g_depth++;
  int old = -1;
  fn_op_t *o = NULL;
  if ((ret = comm_ensure_ready(c)) != ncclSuccess) goto fail;
  if (atomic_load(&c->abort_flag)) {
    fn_warn("%s : communicator was aborted", tmpl.name);
    ret = ncclInvalidUsage;
    goto fail;
  }
  if (cudaGetDevice(&old) != cudaSuccess || cudaSetDevice(c->dev) != cudaSuccess) {
    fn_warn("Cuda failure '%s'", cuda_str(cudaErrorInvalidDevice));
    ret = ncclUnhandledCudaError;
    goto fail;
  }
  if ((ret = args_check(&tmpl, op)) != ncclSuccess) goto fail;
  group_join_comm(c, &ret);
  if (ret != ncclSuccess) goto fail;
  if (tmpl.kind != K_SEND && tmpl.kind != K_RECV) {
    if (tmpl.count == 0) goto out; /* empty collectives are discarded */
    if (c->nranks == 1) {
      ret = one_rank(&tmpl);
      if (ret != ncclSuccess) goto fail;
      goto out;
    }
  }
  o = malloc(sizeof *o);
  if (!o) {
    ret = ncclSystemError;
    goto fail;
  }
  *o = tmpl;
  o->next = NULL;
  if (!g_ops_tail) g_ops_tail = &g_ops;
  *g_ops_tail = o;
  g_ops_tail = &o->next;
out:
  if (old >= 0) cudaSetDevice(old);
  group_err_check(ret);
  ret = group_end_internal();
  if (ret == ncclSuccess && !c->blocking) ret = comm_state(c);
  return ret;
fail:
  if (!c->blocking) atomic_store(&c->async, ret);
  if (old >= 0) cudaSetDevice(old);
  group_err_check(ret);
  group_end_internal();
  return ret;
}

/* ================================================================ one rank */

typedef struct {
  void *dst;
  const void *src;
  size_t n;
  int dtype, dst_host, src_host;
  fn_redop_t op;
  const void *scalar_ptr;
} fn_onerank_t;

static void CUDART_CB onerank_fn(void *arg) {
  fn_onerank_t *t = arg;
  size_t es = fn_type_size(t->dtype);
  void *d = t->dst_host ? t->dst : dev_view(t->dst, t->n * es);
  const void *s = t->src_host ? t->src : dev_view(t->src, t->n * es);
  fn_redop_t op = t->op;
  if (t->scalar_ptr) {
    const void *sv = dev_view(t->scalar_ptr, es);
    if (!sv) sv = NULL;
    if (sv) memcpy(&op.scalar, sv, es);
    else d = NULL;
  }
  if (d && s) {
    const void *srcs[1] = {s};
    fn_reduce(t->dtype, op, srcs, 1, d, t->n);
  } else {
    fprintf(stderr, "fakenccl: one-rank PreMulSum kernel: illegal address (host memory?)\n");
  }
  free(t);
}

/* ncclLaunchOneRank: a copy, or a PreMulSum kernel for avg of floats and user ops. */
static ncclResult_t one_rank(fn_op_t *o) {
  size_t es = fn_type_size(o->dtype);
  size_t n = o->count;
  if (o->op.op != FN_OP_PREMULSUM) {
    if (o->rbuf != o->sbuf)
      CUDACHECK(cudaMemcpyAsync(o->rbuf, o->sbuf, n * es, cudaMemcpyDefault, o->stream));
    return ncclSuccess;
  }
  fn_onerank_t *t = calloc(1, sizeof *t);
  if (!t) return ncclSystemError;
  t->dst = o->rbuf;
  t->src = o->sbuf;
  t->n = n;
  t->dtype = o->dtype;
  t->op = o->op;
  t->scalar_ptr = o->scalar_ptr;
  t->dst_host = host_reachable(o->rbuf);
  t->src_host = host_reachable(o->sbuf);
  cudaError_t e = cudaLaunchHostFunc(o->stream, onerank_fn, t);
  if (e != cudaSuccess) {
    free(t);
    fn_warn("Cuda failure '%s'", cuda_str(e));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* ================================================================ collectives API */

fn_op_t op_tmpl(fn_kind_t k, const char *name, const void *s, void *r, size_t count,
                       ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t st) {
  fn_op_t o;
  memset(&o, 0, sizeof o);
  o.kind = k;
  o.name = name;
  o.sbuf = s;
  o.rbuf = r;
  o.count = count;
  o.dtype = (int)dt;
  o.root = root;
  o.comm = comm;
  o.stream = st;
  return o;
}

FN_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream) {
  return enqueue(op_tmpl(K_ALLREDUCE, "AllReduce", sendbuff, recvbuff, count, datatype, 0, comm,
                         stream), op);
}

FN_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  return enqueue(op_tmpl(K_BROADCAST, "Broadcast", sendbuff, recvbuff, count, datatype, root,
                         comm, stream), ncclSum);
}

FN_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                              ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

FN_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  return enqueue(op_tmpl(K_REDUCE, "Reduce", sendbuff, recvbuff, count, datatype, root, comm,
                         stream), op);
}

FN_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(op_tmpl(K_ALLGATHER, "AllGather", sendbuff, recvbuff, sendcount, datatype, 0,
                         comm, stream), ncclSum);
}

FN_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  return enqueue(op_tmpl(K_REDUCESCATTER, "ReduceScatter", sendbuff, recvbuff, recvcount,
                         datatype, 0, comm, stream), op);
}

FN_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(op_tmpl(K_ALLTOALL, "AlltoAll", sendbuff, recvbuff, count, datatype, 0, comm,
                         stream), ncclSum);
}

FN_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  return enqueue(op_tmpl(K_GATHER, "Gather", sendbuff, recvbuff, count, datatype, root, comm,
                         stream), ncclSum);
}

FN_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
  return enqueue(op_tmpl(K_SCATTER, "Scatter", sendbuff, recvbuff, count, datatype, root, comm,
                         stream), ncclSum);
}

FN_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  return enqueue(op_tmpl(K_SEND, "Send", sendbuff, NULL, count, datatype, peer, comm, stream),
                 ncclSum);
}

FN_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  return enqueue(op_tmpl(K_RECV, "Recv", NULL, recvbuff, count, datatype, peer, comm, stream),
                 ncclSum);
}

/* ================================================================ user reduction ops */

FN_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, ncclComm_t comm) {
  ncclResult_t r;
  if ((r = comm_check(comm, "ncclRedOpCreatePreMulSum")) != ncclSuccess) return r;
  if ((r = comm_ensure_ready(comm)) != ncclSuccess) return r;
  if (!op || !scalar) return ncclInvalidArgument;
  size_t es = fn_type_size(datatype);
  if (!es) return ncclInvalidArgument;
  int ix = 0;
  while (ix < comm->nuserops && comm->userops[ix].used) ix++;
  if (ix == comm->nuserops) {
    int cap = comm->nuserops ? 2 * comm->nuserops : 4;
    fn_userop_t *n = realloc(comm->userops, (size_t)cap * sizeof *n);
    if (!n) return ncclSystemError;
    memset(n + comm->nuserops, 0, (size_t)(cap - comm->nuserops) * sizeof *n);
    comm->userops = n;
    comm->nuserops = cap;
  }
  fn_userop_t *u = &comm->userops[ix];
  memset(u, 0, sizeof *u);
  u->used = 1;
  u->dtype = datatype;
  if (residence == ncclScalarHostImmediate) {
    memcpy(&u->scalar, scalar, es);
  } else {
    u->is_ptr = 1;
    u->scalar = (uint64_t)(uintptr_t)scalar;
  }
  *op = (ncclRedOp_t)((int)ncclNumOps + ix);
  return ncclSuccess;
}

FN_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if ((int)op >= 0 && (int)op < (int)ncclNumOps) {
    fn_warn("ncclRedOpDestroy : operator is a NCCL builtin.");
    return ncclInvalidArgument;
  }
  if ((int)op < 0) {
    fn_warn("ncclRedOpDestroy :  operator is garbage.");
    return ncclInvalidArgument;
  }
  if (!comm) {
    fn_warn("ncclRedOpDestroy : invalid communicator passed.");
    return ncclInvalidArgument;
  }
  int ix = (int)op - (int)ncclNumOps;
  if (ix >= comm->nuserops || !comm->userops[ix].used) {
    fn_warn("ncclRedOpDestroy : operator unknown to this communicator.");
    return ncclInvalidArgument;
  }
  comm->userops[ix].used = 0;
  return ncclSuccess;
}
