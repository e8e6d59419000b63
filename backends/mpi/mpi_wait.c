/* Errors and waiting in the mpi backend: MPI codes to unilink results with a sentence,
 * and the one polling wait every nonblocking MPI call goes through (abort flag, revoke,
 * lost peers, timeout). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "mpi_internal.h"

/* --------------------------------------------------------------- errors */
ul_result_t mpi_error_set(ul_backend_comm_t *c, int mpirc, const char *call) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0, cls = mpirc;
  if (MPI_Error_string(mpirc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "unknown");
  if (MPI_Error_class(mpirc, &cls) != MPI_SUCCESS) cls = mpirc;
  ul_result_t r;
  switch (cls) {
  case MPI_ERR_NO_MEM: r = UL_ERR_NO_MEMORY; break;
  case MPI_ERR_TRUNCATE: r = UL_ERR_MISMATCH; break;
  case MPI_ERR_BUFFER:
  case MPI_ERR_COUNT:
  case MPI_ERR_TYPE:
  case MPI_ERR_TAG:
  case MPI_ERR_RANK:
  case MPI_ERR_ROOT:
  case MPI_ERR_OP:
  case MPI_ERR_ARG:
  case MPI_ERR_DISP:
  case MPI_ERR_SIZE:
  case MPI_ERR_RMA_RANGE: r = UL_ERR_INVALID_ARG; break;
  case MPI_ERR_UNSUPPORTED_OPERATION: r = UL_ERR_UNSUPPORTED; break;
#ifdef MPI_ERR_PROC_ABORTED
  case MPI_ERR_PROC_ABORTED: r = UL_ERR_PEER_LOST; break;
#endif
#ifdef MPIX_ERR_PROC_FAILED
  case MPIX_ERR_PROC_FAILED: r = UL_ERR_PEER_LOST; break;
#endif
  default: r = UL_ERR_BACKEND; break;
  }
  if (r == UL_ERR_PEER_LOST || r == UL_ERR_BACKEND) mpi_g.trouble = 1;
  int rank = c ? c->rank : -1;
  /* A transport error (a reset connection, a failed shared-memory read) is usually the
   * death of a peer: say which one when we can see it. */
  if (c && r == UL_ERR_BACKEND && mpi_find_lost_peer(c) >= 0) {
    char who[256];
    mpi_lost_peers_text(c, who, sizeof who);
    return ul_backend_set_error(c->ucomm, UL_ERR_PEER_LOST,
                                "rank %d: %s failed: peer %s gone (process exited); MPI said: %s "
                                "(class %d, code %d)",
                                rank, call, who, text, cls, mpirc);
  }
  if (c)
    return ul_backend_set_error(c->ucomm, r, "rank %d: %s failed: %s (MPI error class %d, code %d)",
                                rank, call, text, cls, mpirc);
  return ul_backend_set_error(NULL, r, "mpi: %s failed: %s (MPI error class %d, code %d)", call,
                              text, cls, mpirc);
}

double mpi_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Peers' liveness costs one poll per peer: every 5 ms of a wait is plenty next to the
 * timeout and invisible next to the wait itself. */
#define MPI_LIVENESS_PERIOD_MS 5.0
static __thread double mpi_next_liveness_ms;

/* One idle step of a polling wait: abort, lost-peer and timeout checks, then spin, yield
 * or sleep. UL_OK: poll again. */
ul_result_t mpi_wait_idle(ul_backend_comm_t *c, const char *call, int timeout_ms, double t0,
                          unsigned *spins) {
  if (c && ((c->abort_flag && *c->abort_flag) || c->dead))
    return ul_backend_set_error(c->ucomm, UL_ERR_ABORTED,
                                "rank %d: %s abandoned: the communicator was aborted", c->rank,
                                call);
  (*spins)++;
  /* Spin briefly for latency, then yield (ranks are often oversubscribed), then
   * sleep once a wait is clearly long, so idle ranks leave the cores to the others. */
  if ((*spins & 63u) == 0) {
    double now = mpi_now_ms(), el = now - t0;
    if (c && el >= MPI_LIVENESS_PERIOD_MS && now >= mpi_next_liveness_ms) {
      mpi_next_liveness_ms = now + MPI_LIVENESS_PERIOD_MS;
      if (mpi_revoke_seen(c))
        return ul_backend_set_error(c->ucomm, UL_ERR_REVOKED,
                                    "rank %d of %d: %s abandoned: the communicator was revoked "
                                    "(ul_comm_revoke on some rank); shrink or destroy it",
                                    c->rank, c->nranks, call);
      if (mpi_find_lost_peer(c) >= 0) {
        char who[256];
        mpi_lost_peers_text(c, who, sizeof who);
        return ul_backend_set_error(c->ucomm, UL_ERR_PEER_LOST,
                                    "rank %d of %d: %s abandoned: peer %s gone (process exited, "
                                    "seen on %s); the communicator is unusable",
                                    c->rank, c->nranks, call, who, c->host_of[c->rank]);
      }
    }
    if (timeout_ms > 0 && el >= timeout_ms) {
      mpi_g.trouble = 1;
      if (c)
        return ul_backend_set_error(
            c->ucomm, UL_ERR_TIMEOUT,
            "rank %d of %d: %s did not complete within %d ms (a peer did not call it, "
            "called something else, or died); the communicator is unusable",
            c->rank, c->nranks, call, timeout_ms);
      return ul_backend_set_error(NULL, UL_ERR_TIMEOUT, "mpi: %s did not complete within %d ms",
                                  call, timeout_ms);
    }
    if (el > 1000.0) {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    } else {
      sched_yield();
    }
  } else if (*spins > 256) {
    sched_yield();
  }
  return UL_OK;
}

ul_result_t mpi_waitall(ul_backend_comm_t *c, int n, MPI_Request *reqs, const char *call,
                        int timeout_ms) {
  if (n <= 0) return UL_OK;
  double t0 = mpi_now_ms();
  unsigned spins = 0;
  for (;;) {
    int flag = 0;
/* GCC mistakes the MPI_STATUSES_IGNORE sentinel for a zero-size array. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
    int rc = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
#pragma GCC diagnostic pop
    if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, call);
    if (flag) return UL_OK;
    ul_result_t r = mpi_wait_idle(c, call, timeout_ms, t0, &spins);
    if (r != UL_OK) return r;
  }
}

