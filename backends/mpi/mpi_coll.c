/* mpi backend: native collectives and point to point.
 *
 * Each unilink collective is the MPI collective that does it. By default the
 * nonblocking form (MPI_Iallreduce, ...) is started and polled, so that the
 * communicator's timeout and abort flag are honoured; UNILINK_MPI_BLOCKING=1 calls
 * the blocking form instead (MPI's tuned algorithms, no timeout). In-place requests
 * (NCCL pointer aliasing, already validated by the core) become MPI_IN_PLACE. */
#include "mpi_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MPI_P2P_TAG 0x554c /* "UL": our own communicator, so any fixed tag will do */

static ul_result_t mpi_finish(ul_backend_comm_t *c, int rc, MPI_Request *req, const char *name) {
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, name);
  if (!req) return UL_OK;
  return mpi_waitall(c, 1, req, name, c->timeout_ms);
}

/* Run the blocking or the nonblocking form of one MPI collective; `req` must be an
 * MPI_Request in scope. */
#define MPI_COLL(c, BLOCKING, NONBLOCKING, ...)                                                  \
  (mpi_g.blocking ? mpi_finish((c), BLOCKING(__VA_ARGS__), NULL, #BLOCKING)                      \
                  : mpi_finish((c), NONBLOCKING(__VA_ARGS__, &req), &req, #NONBLOCKING))

static ul_result_t mpi_check_alive(ul_backend_comm_t *c, const char *what) {
  if (c->dead || (c->abort_flag && *c->abort_flag))
    return ul_backend_set_error(c->ucomm, UL_ERR_ABORTED,
                                "rank %d: %s refused: the communicator was aborted", c->rank, what);
  return UL_OK;
}

/* Block collectives hand MPI one int count per rank. */
static ul_result_t mpi_check_block_count(ul_backend_comm_t *c, size_t count, const char *what) {
  if (count > INT_MAX)
    return ul_backend_set_error(c->ucomm, UL_ERR_UNSUPPORTED,
                                "rank %d: %s of %zu elements per rank: the mpi backend passes "
                                "per-rank counts to MPI as int (at most %d)",
                                c->rank, what, count, INT_MAX);
  return UL_OK;
}

static size_t mpi_chunk_len(size_t count, size_t off) {
  size_t left = count - off, max = (size_t)mpi_g.chunk;
  return left < max ? left : max;
}

static ul_result_t mpi_scale_avg(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype) {
  ul_result_t r = ul_scale_avg_local(buf, count, dtype, c->nranks);
  if (r != UL_OK)
    return ul_backend_set_error(c->ucomm, r, "rank %d: avg scaling of %zu %s failed", c->rank,
                                count, ul_dtype_name(dtype));
  return UL_OK;
}

static ul_result_t mpi_coll_allreduce(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                                      size_t count, ul_dtype_t dtype, ul_op_t op,
                                      ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = mpi_check_alive(c, "allreduce");
  if (r != UL_OK || count == 0) return r;
  MPI_Datatype dt = mpi_dtype_of(dtype);
  MPI_Op mop = mpi_op_of(dtype, op);
  size_t esz = ul_dtype_size(dtype);
  int inplace = sendbuf == recvbuf;
  MPI_Request req;
  for (size_t off = 0; off < count; off += mpi_chunk_len(count, off)) {
    int n = (int)mpi_chunk_len(count, off);
    const void *sb = inplace ? MPI_IN_PLACE : (const char *)sendbuf + off * esz;
    void *rb = (char *)recvbuf + off * esz;
    r = MPI_COLL(c, MPI_Allreduce, MPI_Iallreduce, sb, rb, n, dt, mop, c->comm);
    if (r != UL_OK) return r;
  }
  return op == UL_AVG ? mpi_scale_avg(c, recvbuf, count, dtype) : UL_OK;
}

static ul_result_t mpi_coll_broadcast(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                                      size_t count, ul_dtype_t dtype, int root,
                                      ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = mpi_check_alive(c, "broadcast");
  if (r != UL_OK || count == 0) return r;
  MPI_Datatype dt = mpi_dtype_of(dtype);
  size_t esz = ul_dtype_size(dtype);
  /* MPI_Bcast works on one buffer: root's data must already be in recvbuf. */
  if (c->rank == root && sendbuf != recvbuf) memcpy(recvbuf, sendbuf, count * esz);
  MPI_Request req;
  for (size_t off = 0; off < count; off += mpi_chunk_len(count, off)) {
    int n = (int)mpi_chunk_len(count, off);
    r = MPI_COLL(c, MPI_Bcast, MPI_Ibcast, (char *)recvbuf + off * esz, n, dt, root, c->comm);
    if (r != UL_OK) return r;
  }
  return UL_OK;
}

static ul_result_t mpi_coll_reduce(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                                   size_t count, ul_dtype_t dtype, ul_op_t op, int root,
                                   ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = mpi_check_alive(c, "reduce");
  if (r != UL_OK || count == 0) return r;
  MPI_Datatype dt = mpi_dtype_of(dtype);
  MPI_Op mop = mpi_op_of(dtype, op);
  size_t esz = ul_dtype_size(dtype);
  int isroot = c->rank == root;
  MPI_Request req;
  for (size_t off = 0; off < count; off += mpi_chunk_len(count, off)) {
    int n = (int)mpi_chunk_len(count, off);
    const void *sb;
    void *rb;
    if (isroot) {
      /* MPI_IN_PLACE is a root-only option for MPI_Reduce. */
      sb = sendbuf == recvbuf ? MPI_IN_PLACE : (const char *)sendbuf + off * esz;
      rb = (char *)recvbuf + off * esz;
    } else {
      /* recvbuf is not significant (and may be NULL or alias sendbuf) off root. */
      sb = (const char *)sendbuf + off * esz;
      rb = NULL;
    }
    r = MPI_COLL(c, MPI_Reduce, MPI_Ireduce, sb, rb, n, dt, mop, root, c->comm);
    if (r != UL_OK) return r;
  }
  return op == UL_AVG && isroot ? mpi_scale_avg(c, recvbuf, count, dtype) : UL_OK;
}

static ul_result_t mpi_coll_allgather(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                                      size_t sendcount, ul_dtype_t dtype, ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = mpi_check_alive(c, "allgather");
  if (r == UL_OK) r = mpi_check_block_count(c, sendcount, "allgather");
  if (r != UL_OK || sendcount == 0) return r;
  MPI_Datatype dt = mpi_dtype_of(dtype);
  size_t esz = ul_dtype_size(dtype);
  int n = (int)sendcount;
  /* unilink: in place when sendbuf is this rank's block of recvbuf; MPI then reads
   * the input from that very block. */
  const void *sb =
      (const char *)sendbuf == (char *)recvbuf + (size_t)c->rank * sendcount * esz ? MPI_IN_PLACE
                                                                                   : sendbuf;
  MPI_Request req;
  return MPI_COLL(c, MPI_Allgather, MPI_Iallgather, sb, n, dt, recvbuf, n, dt, c->comm);
}

static ul_result_t mpi_coll_reduce_scatter(ul_backend_comm_t *c, const void *sendbuf,
                                           void *recvbuf, size_t recvcount, ul_dtype_t dtype,
                                           ul_op_t op, ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = mpi_check_alive(c, "reduce_scatter");
  if (r == UL_OK) r = mpi_check_block_count(c, recvcount, "reduce_scatter");
  if (r != UL_OK || recvcount == 0) return r;
  MPI_Datatype dt = mpi_dtype_of(dtype);
  MPI_Op mop = mpi_op_of(dtype, op);
  size_t esz = ul_dtype_size(dtype);
  int n = (int)recvcount;
  MPI_Request req;
  /* unilink's in-place form (recvbuf = block `rank` of sendbuf) is not MPI's: with
   * MPI_IN_PLACE the result lands in block 0 and the rest of the buffer is scratch.
   * Keep unilink's meaning (only block `rank` changes) by reducing into a temporary
   * block and copying it in after MPI no longer reads sendbuf. */
  if ((char *)recvbuf == (const char *)sendbuf + (size_t)c->rank * recvcount * esz) {
    void *tmp = malloc(recvcount * esz);
    if (!tmp)
      return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY,
                                  "rank %d: reduce_scatter: no memory for a %zu-byte block",
                                  c->rank, recvcount * esz);
    r = MPI_COLL(c, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, sendbuf, tmp, n, dt, mop,
                 c->comm);
    if (r == UL_OK) memcpy(recvbuf, tmp, recvcount * esz);
    /* After a timeout MPI may still write tmp: leak it rather than free live memory. */
    if (r != UL_ERR_TIMEOUT && r != UL_ERR_ABORTED) free(tmp);
  } else {
    r = MPI_COLL(c, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, sendbuf, recvbuf, n, dt,
                 mop, c->comm);
  }
  if (r != UL_OK) return r;
  return op == UL_AVG ? mpi_scale_avg(c, recvbuf, recvcount, dtype) : UL_OK;
}

static ul_result_t mpi_coll_alltoall(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                                     size_t count, ul_dtype_t dtype, ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = mpi_check_alive(c, "alltoall");
  if (r == UL_OK) r = mpi_check_block_count(c, count, "alltoall");
  if (r != UL_OK || count == 0) return r;
  /* The core allows sendbuf == recvbuf only for one rank: the data is already there. */
  if (sendbuf == recvbuf) return UL_OK;
  MPI_Datatype dt = mpi_dtype_of(dtype);
  int n = (int)count;
  MPI_Request req;
  return MPI_COLL(c, MPI_Alltoall, MPI_Ialltoall, sendbuf, n, dt, recvbuf, n, dt, c->comm);
}

static ul_result_t mpi_coll_gather(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                                   size_t count, ul_dtype_t dtype, int root,
                                   ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = mpi_check_alive(c, "gather");
  if (r == UL_OK) r = mpi_check_block_count(c, count, "gather");
  if (r != UL_OK || count == 0) return r;
  MPI_Datatype dt = mpi_dtype_of(dtype);
  size_t esz = ul_dtype_size(dtype);
  int n = (int)count;
  const void *sb = sendbuf;
  void *rb = NULL;
  if (c->rank == root) {
    rb = recvbuf;
    if ((const char *)sendbuf == (char *)recvbuf + (size_t)root * count * esz) sb = MPI_IN_PLACE;
  }
  MPI_Request req;
  return MPI_COLL(c, MPI_Gather, MPI_Igather, sb, n, dt, rb, n, dt, root, c->comm);
}

static ul_result_t mpi_coll_scatter(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                                    size_t count, ul_dtype_t dtype, int root,
                                    ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = mpi_check_alive(c, "scatter");
  if (r == UL_OK) r = mpi_check_block_count(c, count, "scatter");
  if (r != UL_OK || count == 0) return r;
  MPI_Datatype dt = mpi_dtype_of(dtype);
  size_t esz = ul_dtype_size(dtype);
  int n = (int)count;
  const void *sb = NULL;
  void *rb = recvbuf;
  if (c->rank == root) {
    sb = sendbuf;
    if ((char *)recvbuf == (const char *)sendbuf + (size_t)root * count * esz) rb = MPI_IN_PLACE;
  }
  MPI_Request req;
  return MPI_COLL(c, MPI_Scatter, MPI_Iscatter, sb, n, dt, rb, n, dt, root, c->comm);
}

static ul_result_t mpi_coll_barrier(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = mpi_check_alive(c, "barrier");
  if (r != UL_OK) return r;
  MPI_Request req;
  return MPI_COLL(c, MPI_Barrier, MPI_Ibarrier, c->comm);
}

const ul_backend_coll_ops_t mpi_coll_ops = {
    .struct_size = sizeof(ul_backend_coll_ops_t),
    .allreduce = mpi_coll_allreduce,
    .broadcast = mpi_coll_broadcast,
    .reduce = mpi_coll_reduce,
    .allgather = mpi_coll_allgather,
    .reduce_scatter = mpi_coll_reduce_scatter,
    .alltoall = mpi_coll_alltoall,
    .gather = mpi_coll_gather,
    .scatter = mpi_coll_scatter,
    .barrier = mpi_coll_barrier,
    .alltoallv = mpi_coll_alltoallv,
    .allgatherv = mpi_coll_allgatherv,
};

/* ------------------------------------------------------- point to point */
/* Sends and receives are posted as MPI_Isend/MPI_Irecv as they are issued and all
 * completed at group_end (outside a group each call completes by itself). Messages
 * longer than the chunk limit are several MPI messages; MPI keeps them in order on
 * one (source, tag, communicator). */

static ul_result_t mpi_p2p_reserve(ul_backend_comm_t *c, int more) {
  if (c->nreqs + more <= c->reqs_cap) return UL_OK;
  int cap = c->reqs_cap ? c->reqs_cap * 2 : 64;
  while (cap < c->nreqs + more) cap *= 2;
  MPI_Request *n = realloc(c->reqs, (size_t)cap * sizeof *n);
  if (n) c->reqs = n;
  int *k = n ? realloc(c->req_count, (size_t)cap * sizeof *k) : NULL;
  if (k) c->req_count = k;
  MPI_Datatype *t = k ? realloc(c->req_dt, (size_t)cap * sizeof *t) : NULL;
  if (!t)
    return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: out of memory", c->rank);
  c->req_dt = t;
  c->reqs_cap = cap;
  return UL_OK;
}

/* Wait for the group's requests one by one (MPI_Testsome), so each receive's status is
 * seen: a message longer than the receive (MPI_ERR_TRUNCATE) or shorter than it is
 * UL_ERR_MISMATCH at the receiver, as on the host backend, and not sticky (MPI consumed
 * the message; nothing was written past the buffer). Other errors stay errors. */
static ul_result_t mpi_p2p_wait(ul_backend_comm_t *c, int n, const char *call) {
  if (n <= 0) return UL_OK;
  MPI_Status *st = malloc((size_t)n * sizeof *st);
  int *idx = malloc((size_t)n * sizeof *idx);
  if (!st || !idx) {
    free(st);
    free(idx);
    return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: out of memory", c->rank);
  }
  ul_result_t r = UL_OK, mismatch = UL_OK;
  int left = n;
  double t0 = mpi_now_ms();
  unsigned spins = 0;
  while (left > 0 && r == UL_OK) {
    int got = 0;
    int rc = MPI_Testsome(n, c->reqs, &got, idx, st);
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      r = mpi_error_set(c, rc, call);
      break;
    }
    if (got == MPI_UNDEFINED) break; /* every request already complete */
    for (int j = 0; j < got && r == UL_OK; j++) {
      int i = idx[j], err = rc == MPI_ERR_IN_STATUS ? st[j].MPI_ERROR : MPI_SUCCESS, cls = err;
      left--;
      if (err != MPI_SUCCESS) MPI_Error_class(err, &cls);
      int want = c->req_count[i], have = want;
      if (err == MPI_SUCCESS && want >= 0) MPI_Get_count(&st[j], c->req_dt[i], &have);
      if (cls == MPI_ERR_TRUNCATE || (err == MPI_SUCCESS && want >= 0 && have != want)) {
        int esz = 1;
        MPI_Type_size(c->req_dt[i], &esz);
        if (mismatch == UL_OK && cls == MPI_ERR_TRUNCATE)
          mismatch = ul_backend_set_error(
              c->ucomm, UL_ERR_MISMATCH,
              "rank %d: recv of %lld bytes from rank %d matched a longer send: send and recv "
              "counts must be equal; the receive buffer's contents are as MPI left them, "
              "nothing past it was written",
              c->rank, (long long)want * esz, st[j].MPI_SOURCE);
        else if (mismatch == UL_OK)
          mismatch = ul_backend_set_error(
              c->ucomm, UL_ERR_MISMATCH,
              "rank %d: recv of %lld bytes from rank %d matched a send of %lld bytes: send and "
              "recv counts must be equal; the receive buffer holds the first %lld bytes, "
              "nothing past it was written",
              c->rank, (long long)want * esz, st[j].MPI_SOURCE, (long long)have * esz,
              (long long)have * esz);
      } else if (err != MPI_SUCCESS) {
        r = mpi_error_set(c, err, call);
      }
    }
    if (r == UL_OK && left > 0 && got == 0) r = mpi_wait_idle(c, call, c->timeout_ms, t0, &spins);
  }
  free(st);
  free(idx);
  return r != UL_OK ? r : mismatch;
}

static ul_result_t mpi_p2p_complete(ul_backend_comm_t *c) {
  ul_result_t r = c->group_rc;
  int n = c->nreqs;
  if (r == UL_OK) {
    r = mpi_p2p_wait(c, n, "point-to-point group (MPI_Isend/MPI_Irecv)");
  }
  if (r != UL_OK && r != UL_ERR_MISMATCH) {
    /* Leave nothing behind that refers to this group. */
    for (int i = 0; i < n; i++)
      if (c->reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&c->reqs[i]);
  }
  c->nreqs = 0;
  c->group_rc = UL_OK;
  return r;
}

static ul_result_t mpi_p2p_post(ul_backend_comm_t *c, int is_send, void *buf, size_t count,
                                ul_dtype_t dtype, int peer) {
  ul_result_t r = mpi_check_alive(c, is_send ? "send" : "recv");
  if (r != UL_OK) return r;
  MPI_Datatype dt = mpi_dtype_of(dtype);
  size_t esz = ul_dtype_size(dtype);
  pthread_mutex_lock(&c->lock);
  int grouped = c->group_depth > 0;
  if (grouped && c->group_rc != UL_OK) {
    pthread_mutex_unlock(&c->lock);
    return c->group_rc;
  }
  size_t nmsg = count == 0 ? 1 : (count + (size_t)mpi_g.chunk - 1) / (size_t)mpi_g.chunk;
  r = nmsg > INT_MAX ? UL_ERR_INVALID_ARG : mpi_p2p_reserve(c, (int)nmsg);
  for (size_t off = 0, m = 0; r == UL_OK && m < nmsg; m++) {
    int n = count == 0 ? 0 : (int)mpi_chunk_len(count, off);
    char *p = (char *)buf + off * esz;
    int rc = is_send
                 ? MPI_Isend(p, n, dt, peer, MPI_P2P_TAG, c->comm, &c->reqs[c->nreqs])
                 : MPI_Irecv(p, n, dt, peer, MPI_P2P_TAG, c->comm, &c->reqs[c->nreqs]);
    if (rc != MPI_SUCCESS) r = mpi_error_set(c, rc, is_send ? "MPI_Isend" : "MPI_Irecv");
    else {
      c->req_dt[c->nreqs] = dt;
      c->req_count[c->nreqs++] = is_send ? -1 : n;
    }
    off += (size_t)n;
  }
  if (grouped) {
    if (r != UL_OK) c->group_rc = r; /* the whole group fails at group_end */
  } else {
    if (r != UL_OK) c->group_rc = r;
    r = mpi_p2p_complete(c);
  }
  pthread_mutex_unlock(&c->lock);
  return r;
}

ul_result_t mpi_p2p_send(ul_backend_comm_t *c, const void *buf, size_t count, ul_dtype_t dtype,
                         int peer, ul_backend_stream_t *s) {
  (void)s;
  return mpi_p2p_post(c, 1, (void *)buf, count, dtype, peer);
}

ul_result_t mpi_p2p_recv(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                         int peer, ul_backend_stream_t *s) {
  (void)s;
  return mpi_p2p_post(c, 0, buf, count, dtype, peer);
}

ul_result_t mpi_p2p_group_start(ul_backend_comm_t *c) {
  pthread_mutex_lock(&c->lock);
  if (c->group_depth++ == 0) {
    c->nreqs = 0;
    c->group_rc = UL_OK;
  }
  pthread_mutex_unlock(&c->lock);
  return UL_OK;
}

ul_result_t mpi_p2p_group_end(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  (void)s;
  pthread_mutex_lock(&c->lock);
  if (c->group_depth > 1) {
    c->group_depth--;
    pthread_mutex_unlock(&c->lock);
    return UL_OK;
  }
  c->group_depth = 0;
  ul_result_t r = mpi_p2p_complete(c);
  pthread_mutex_unlock(&c->lock);
  return r;
}
