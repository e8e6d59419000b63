/* mpi backend: the vector collectives (alltoallv, allgatherv).
 *
 * MPI_Alltoallv / MPI_Allgatherv take int counts and int displacements. When every
 * count fits the per-call element limit (UNILINK_MPI_CHUNK, at most INT_MAX) and every
 * displacement fits an int, the call is that MPI collective (nonblocking and polled, or
 * blocking under UNILINK_MPI_BLOCKING, as the other collectives). Otherwise the same
 * exchange runs as nonblocking sends and receives of at most the limit each, on a tag
 * of its own, so any size_t count and displacement works. Counts and displacements
 * differ between ranks, so the ranks first agree on the form (a one-int allreduce):
 * one rank in MPI_Alltoallv and another in sends would never match. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_internal.h"

#define MPI_VCOLL_TAG 0x5576 /* "Uv": apart from the point-to-point tag */

static ul_result_t vcoll_alive(ul_backend_comm_t *c, const char *what) {
  if (c->dead || (c->abort_flag && *c->abort_flag))
    return ul_backend_set_error(c->ucomm, UL_ERR_ABORTED,
                                "rank %d: %s refused: the communicator was aborted", c->rank, what);
  return UL_OK;
}

/* counts[j] <= the per-call limit and displs[j] <= INT_MAX for every j. */
static int fits_int(const size_t *counts, const size_t *displs, int n) {
  for (int j = 0; j < n; j++)
    if (counts[j] > (size_t)mpi_g.chunk || (counts[j] && displs[j] > (size_t)INT_MAX)) return 0;
  return 1;
}

/* 1 on every rank when any rank's arrays do not fit (mine: this rank's answer). */
static ul_result_t agree_p2p(ul_backend_comm_t *c, int mine, int *any, const char *name) {
  MPI_Request req;
  int rc = MPI_Iallreduce(&mine, any, 1, MPI_INT, MPI_MAX, c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Iallreduce");
  return mpi_waitall(c, 1, &req, name, c->timeout_ms);
}

static int *to_int(const size_t *v, int n, int *out) {
  for (int j = 0; j < n; j++) out[j] = (int)v[j];
  return out;
}

/* Start or run one MPI collective: rc of the start, *req set when nonblocking. */
static ul_result_t vcoll_finish(ul_backend_comm_t *c, int rc, MPI_Request *req,
                                const char *name) {
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, name);
  return req ? mpi_waitall(c, 1, req, name, c->timeout_ms) : UL_OK;
}

/* The chunked point-to-point form: rank j gets scnt[j] elements from sbuf + sdsp[j]
 * (sdsp NULL: sbuf itself for every j) and this rank gets rcnt[j] at rbuf + rdsp[j]. */
static ul_result_t vcoll_p2p(ul_backend_comm_t *c, const void *sbuf, const size_t *scnt,
                             const size_t *sdsp, void *rbuf, const size_t *rcnt,
                             const size_t *rdsp, ul_dtype_t dtype, const char *name) {
  int n = c->nranks, me = c->rank;
  size_t esz = ul_dtype_size(dtype), lim = (size_t)mpi_g.chunk, nreq = 0;
  MPI_Datatype dt = mpi_dtype_of(dtype);
  for (int j = 0; j < n; j++)
    if (j != me) nreq += (scnt[j] + lim - 1) / lim + (rcnt[j] + lim - 1) / lim;
  if (nreq > (size_t)INT_MAX)
    return ul_backend_set_error(c->ucomm, UL_ERR_UNSUPPORTED,
                                "rank %d: %s would need %zu MPI messages (more than %d)", me, name,
                                nreq, INT_MAX);
  MPI_Request *reqs = malloc((nreq ? nreq : 1) * sizeof *reqs);
  if (!reqs)
    return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY,
                                "rank %d: %s: no memory for %zu requests", me, name, nreq);
  int k = 0, rc = MPI_SUCCESS;
  const char *what = "MPI_Irecv";
  /* Receives first, then sends, each peer from me+1 on: no rank waits on a send. */
  for (int i = 1; i < n && rc == MPI_SUCCESS; i++) {
    int j = (me + n - i) % n;
    char *p = (char *)rbuf + rdsp[j] * esz;
    for (size_t off = 0; off < rcnt[j] && rc == MPI_SUCCESS; off += lim) {
      size_t len = rcnt[j] - off < lim ? rcnt[j] - off : lim;
      rc = MPI_Irecv(p + off * esz, (int)len, dt, j, MPI_VCOLL_TAG, c->comm, &reqs[k]);
      if (rc == MPI_SUCCESS) k++;
    }
  }
  for (int i = 1; i < n && rc == MPI_SUCCESS; i++) {
    int j = (me + i) % n;
    const char *p = (const char *)sbuf + (sdsp ? sdsp[j] * esz : 0);
    what = "MPI_Isend";
    for (size_t off = 0; off < scnt[j] && rc == MPI_SUCCESS; off += lim) {
      size_t len = scnt[j] - off < lim ? scnt[j] - off : lim;
      rc = MPI_Isend(p + off * esz, (int)len, dt, j, MPI_VCOLL_TAG, c->comm, &reqs[k]);
      if (rc == MPI_SUCCESS) k++;
    }
  }
  ul_result_t r = mpi_waitall(c, k, reqs, name, c->timeout_ms);
  if (rc != MPI_SUCCESS && r == UL_OK) r = mpi_error_set(c, rc, what);
  /* After a timeout MPI may still use the requests: leak them rather than free live ones. */
  if (r != UL_ERR_TIMEOUT && r != UL_ERR_ABORTED) free(reqs);
  return r;
}

/* The block a rank keeps: a local copy (both forms leave it to us). */
static void self_copy(void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src) memcpy(dst, src, bytes);
}

ul_result_t mpi_coll_alltoallv(ul_backend_comm_t *c, const void *sendbuf,
                               const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                               const size_t *recvcounts, const size_t *rdispls, ul_dtype_t dtype,
                               ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = vcoll_alive(c, "alltoallv");
  if (r != UL_OK) return r;
  int n = c->nranks, big = 0;
  size_t esz = ul_dtype_size(dtype);
  r = agree_p2p(c, !fits_int(sendcounts, sdispls, n) || !fits_int(recvcounts, rdispls, n), &big,
                "alltoallv");
  if (r != UL_OK) return r;
  if (big) {
    self_copy((char *)recvbuf + rdispls[c->rank] * esz,
              (const char *)sendbuf + sdispls[c->rank] * esz, sendcounts[c->rank] * esz);
    return vcoll_p2p(c, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype,
                     "alltoallv");
  }
  int *v = malloc(4 * (size_t)n * sizeof *v);
  if (!v)
    return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: alltoallv: out of memory",
                                c->rank);
  int *sc = to_int(sendcounts, n, v), *sd = to_int(sdispls, n, v + n);
  int *rc = to_int(recvcounts, n, v + 2 * n), *rd = to_int(rdispls, n, v + 3 * n);
  MPI_Datatype dt = mpi_dtype_of(dtype);
  MPI_Request req;
  if (mpi_g.blocking)
    r = vcoll_finish(c, MPI_Alltoallv(sendbuf, sc, sd, dt, recvbuf, rc, rd, dt, c->comm), NULL,
                     "MPI_Alltoallv");
  else
    r = vcoll_finish(c, MPI_Ialltoallv(sendbuf, sc, sd, dt, recvbuf, rc, rd, dt, c->comm, &req),
                     &req, "MPI_Ialltoallv");
  /* A nonblocking collective may read its arrays until it completes. */
  if (r != UL_ERR_TIMEOUT && r != UL_ERR_ABORTED) free(v);
  return r;
}

ul_result_t mpi_coll_allgatherv(ul_backend_comm_t *c, const void *sendbuf, size_t sendcount,
                                void *recvbuf, const size_t *recvcounts, const size_t *displs,
                                ul_dtype_t dtype, ul_backend_stream_t *s) {
  (void)s;
  ul_result_t r = vcoll_alive(c, "allgatherv");
  if (r != UL_OK) return r;
  int n = c->nranks, me = c->rank, big = 0;
  size_t esz = ul_dtype_size(dtype);
  void *mine = (char *)recvbuf + displs[me] * esz;
  int inplace = sendbuf == mine;
  r = agree_p2p(c, !fits_int(recvcounts, displs, n), &big, "allgatherv");
  if (r != UL_OK) return r;
  if (big) {
    self_copy(mine, sendbuf, sendcount * esz);
    size_t *sc = malloc((size_t)n * sizeof *sc);
    if (!sc)
      return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY,
                                  "rank %d: allgatherv: out of memory", me);
    for (int j = 0; j < n; j++) sc[j] = sendcount;
    /* In place the input is read from its slot in recvbuf, which no receive touches. */
    r = vcoll_p2p(c, inplace ? mine : sendbuf, sc, NULL, recvbuf, recvcounts, displs, dtype,
                  "allgatherv");
    free(sc);
    return r;
  }
  int *v = malloc(2 * (size_t)n * sizeof *v);
  if (!v)
    return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: allgatherv: out of memory",
                                me);
  int *rc = to_int(recvcounts, n, v), *rd = to_int(displs, n, v + n);
  MPI_Datatype dt = mpi_dtype_of(dtype);
  /* unilink's in-place form is MPI's: the input already sits at displs[rank]. */
  const void *sb = inplace ? MPI_IN_PLACE : sendbuf;
  int cnt = (int)sendcount;
  MPI_Request req;
  if (mpi_g.blocking)
    r = vcoll_finish(c, MPI_Allgatherv(sb, cnt, dt, recvbuf, rc, rd, dt, c->comm), NULL,
                     "MPI_Allgatherv");
  else
    r = vcoll_finish(c, MPI_Iallgatherv(sb, cnt, dt, recvbuf, rc, rd, dt, c->comm, &req), &req,
                     "MPI_Iallgatherv");
  if (r != UL_ERR_TIMEOUT && r != UL_ERR_ABORTED) free(v);
  return r;
}
