/* Errors and waiting in the mpi backend: MPI codes to unilink results with a sentence,
 * and the one polling wait every nonblocking MPI call goes through (abort flag, revoke,
 * lost peers, timeout). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "mpi_internal.h"
#include "proc_alive.h"
#include "wait.h"

#define MPI_TAG_REVOKE 0x7e51 /* revoke notices on c->ctl (mpi_recover.c sends them) */

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

double mpi_now_ms(void) { return ulbu_now_ms(); }

/* Peers' liveness costs one poll per peer: every 5 ms of a wait is plenty next to the
 * timeout and invisible next to the wait itself. */
#define MPI_LIVENESS_PERIOD_MS 5.0
static __thread double mpi_next_liveness_ms;
/* Polls before the first yield (latency), then yield (ranks are often oversubscribed)
 * for a second, then sleep, so idle ranks leave the cores to the others. */
#define MPI_SPIN_POLLS 256
#define MPI_YIELD_MS 1000.0
#define MPI_SLEEP_NS 50000L

static ul_result_t mpi_check_abort(ul_backend_comm_t *c, const char *call) {
  if (c && ((c->abort_flag && *c->abort_flag) || c->dead))
    return ul_backend_set_error(c->ucomm, UL_ERR_ABORTED,
                                "rank %d: %s abandoned: the communicator was aborted", c->rank,
                                call);
  return UL_OK;
}

/* Abort every step; revoke notices and lost peers every 5 ms once a wait is 5 ms old. */
static ul_result_t mpi_wait_check(void *arg, double elapsed_ms, const char *call) {
  ul_backend_comm_t *c = arg;
  ul_result_t r = mpi_check_abort(c, call);
  if (r != UL_OK || !c || elapsed_ms < MPI_LIVENESS_PERIOD_MS) return r;
  double now = mpi_now_ms();
  if (now < mpi_next_liveness_ms) return UL_OK;
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
  return UL_OK;
}

static ul_result_t mpi_wait_expired(void *arg, int timeout_ms, const char *call) {
  ul_backend_comm_t *c = arg;
  mpi_g.trouble = 1;
  if (c)
    return ul_backend_set_error(
        c->ucomm, UL_ERR_TIMEOUT,
        "rank %d of %d: %s did not complete within %d ms (a peer did not call it, "
        "called something else, or died); the communicator is unusable",
        c->rank, c->nranks, call, timeout_ms);
  return ul_backend_set_error(NULL, UL_ERR_TIMEOUT, "mpi: %s did not complete within %d ms", call,
                              timeout_ms);
}

static ulbu_waiter_t mpi_waiter(ul_backend_comm_t *c, int timeout_ms) {
  ulbu_waiter_t w = {.arg = c,
                     .check = mpi_wait_check,
                     .expired = mpi_wait_expired,
                     .timeout_ms = timeout_ms,
                     .spin = MPI_SPIN_POLLS,
                     .yield_ms = MPI_YIELD_MS,
                     .sleep_ns = MPI_SLEEP_NS};
  return w;
}

ul_result_t mpi_wait_idle(ul_backend_comm_t *c, const char *call, int timeout_ms, double t0,
                          unsigned *spins) {
  if (++*spins <= MPI_SPIN_POLLS) return mpi_check_abort(c, call);
  ulbu_waiter_t w = mpi_waiter(c, timeout_ms);
  return ulbu_wait_idle(&w, NULL, t0, call);
}

typedef struct mpi_reqs_cond {
  ul_backend_comm_t *c;
  int n;
  MPI_Request *reqs;
  const char *call;
} mpi_reqs_cond_t;

static ul_result_t mpi_reqs_poll(void *arg) {
  mpi_reqs_cond_t *x = arg;
  int flag = 0;
/* GCC mistakes the MPI_STATUSES_IGNORE sentinel for a zero-size array. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
  int rc = MPI_Testall(x->n, x->reqs, &flag, MPI_STATUSES_IGNORE);
#pragma GCC diagnostic pop
  if (rc != MPI_SUCCESS) return mpi_error_set(x->c, rc, x->call);
  return flag ? UL_OK : UL_IN_PROGRESS;
}

ul_result_t mpi_waitall(ul_backend_comm_t *c, int n, MPI_Request *reqs, const char *call,
                        int timeout_ms) {
  if (n <= 0) return UL_OK;
  ulbu_waiter_t w = mpi_waiter(c, timeout_ms);
  mpi_reqs_cond_t x = {c, n, reqs, call};
  const ulbu_cond_t cond = {mpi_reqs_poll, NULL, &x};
  return ulbu_wait(&w, &cond, call, NULL);
}

/* ------------------------------------------- watching peers and revoke notices */
int mpi_find_lost_peer(ul_backend_comm_t *c) {
  if (!c || !c->pid_of) return -1;
  int first = -1;
  for (int r = 0; r < c->nranks; r++) {
    if (r == c->rank || c->pidfd_of[r] == -2) continue;
    if (!ulbu_pid_alive(c->pid_of[r], c->pidfd_of[r])) {
      if (first < 0) first = r;
    }
  }
  if (first >= 0) {
    c->lost_rank = first;
    mpi_g.trouble = 1;
  }
  return first;
}

/* "rank 1 (pid 123), rank 3 (pid 456)": every watched peer that has exited. More than one
 * may be gone by the time we look (survivors that saw the loss first leave too), so all
 * are named rather than guessing which died first. */
void mpi_lost_peers_text(ul_backend_comm_t *c, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int r = 0; r < c->nranks && n < len; r++) {
    if (r == c->rank || c->pidfd_of[r] == -2 || ulbu_pid_alive(c->pid_of[r], c->pidfd_of[r]))
      continue;
    int w = snprintf(buf + n, len - n, "%srank %d (pid %d)", n ? ", " : "", r, (int)c->pid_of[r]);
    if (w < 0) break;
    n += (size_t)w;
  }
}


/* Watch the peers that run beside us (same host name and pid namespace): a rank that
 * dies inside a shared-memory transfer leaves MPI waiting forever, but its exit is
 * visible here (issue 16: name the lost rank, well before the timeout). */
ul_result_t mpi_comm_liveness_setup(ul_backend_comm_t *c) {
  int n = c->nranks;
  uint64_t mine[2] = {(uint64_t)getpid(), ulbu_pid_namespace()}, *all = calloc((size_t)n * 2, 8);
  c->pid_of = calloc((size_t)n, sizeof *c->pid_of);
  c->pidfd_of = malloc((size_t)n * sizeof *c->pidfd_of);
  if (!all || !c->pid_of || !c->pidfd_of) {
    free(all);
    return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: out of memory", c->rank);
  }
  for (int r = 0; r < n; r++) c->pidfd_of[r] = -2;
  MPI_Request req;
  int rc = MPI_Iallgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, c->comm, &req);
  ul_result_t res = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Iallgather", c->timeout_ms)
                                      : mpi_error_set(c, rc, "MPI_Iallgather");
  if (res == UL_OK)
    for (int r = 0; r < n; r++) {
      c->pid_of[r] = (pid_t)all[2 * r];
      if (r != c->rank && all[2 * r + 1] == mine[1] && mine[1] != 0 &&
          strcmp(c->host_of[r], c->host_of[c->rank]) == 0)
        c->pidfd_of[r] = ulbu_pid_open(c->pid_of[r]);
    }
  free(all);
  return res;
}

ul_result_t mpi_comm_ctl_setup(ul_backend_comm_t *c) {
  MPI_Request req;
  /* MPI_Comm_idup writes the handle before the duplicate is usable: the polling wait
   * below must not probe it for revoke notices until it completes (ctl_ready). */
  c->ctl_ready = 0;
  int rc = MPI_Comm_idup(c->comm, &c->ctl, &req);
  ul_result_t r = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Comm_idup (control)", c->timeout_ms)
                                    : mpi_error_set(c, rc, "MPI_Comm_idup (control)");
  if (r == UL_OK) {
    MPI_Comm_set_errhandler(c->ctl, MPI_ERRORS_RETURN);
    c->ctl_ready = 1;
  }
  c->ctl_buf = calloc((size_t)c->nranks * (size_t)(c->nranks + 2), 1);
  if (r == UL_OK && !c->ctl_buf)
    r = ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: out of memory", c->rank);
  return r;
}

int mpi_revoke_seen(ul_backend_comm_t *c) {
  if (c->revoked) return 1;
  if (c->ctl == MPI_COMM_NULL || !c->ctl_ready) return 0;
  int flag = 0;
  MPI_Status st;
  if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_TAG_REVOKE, c->ctl, &flag, &st) == MPI_SUCCESS && flag) {
    int v = 0;
    MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, MPI_TAG_REVOKE, c->ctl, MPI_STATUS_IGNORE);
    c->revoked = 1;
  }
  return c->revoked;
}
