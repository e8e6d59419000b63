/* The mpi backend after a lost rank: watching the peers on this node, revoke, the ranks
 * known lost, and shrink (issue 16).
 *
 * Without ULFM (Debian's Open MPI 4.1 and MPICH 4.0 have none), MPI itself cannot say
 * that a peer died. A rank that shares our host name and pid namespace can be watched by
 * pidfd; ranks on other nodes are only a timeout. Revoke notices and the shrink
 * agreement travel on a duplicate of the communicator (c->ctl), so they never match
 * user traffic. Shrink: every survivor sends its view of the lost ranks to the lowest
 * rank it believes alive (the coordinator), which merges them and answers with the
 * members; a coordinator that dies meanwhile is replaced by the next. The members then
 * build the new communicator with MPI_Comm_create_group, which is collective over the
 * members only, so the dead ranks are not needed. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_internal.h"
#include "proc_alive.h"
#include "wait.h"

#define MPI_TAG_REVOKE 0x7e51 /* as mpi_wait.c, which receives them */
#define MPI_TAG_VIEW(k) (0x7e52 + 2 * (int)((k) & 0x3fff))
#define MPI_TAG_DECIDE(k) (0x7e53 + 2 * (int)((k) & 0x3fff))

/* ---------------------------------------------------------------- revoke */
/* A send we never wait for: to a rank that may be dead. The buffer must outlive it, so
 * it is a static constant. */
static void mpi_send_and_forget(const void *buf, int n, int peer, int tag, MPI_Comm comm) {
  MPI_Request r;
  if (MPI_Isend(buf, n, MPI_BYTE, peer, tag, comm, &r) == MPI_SUCCESS) MPI_Request_free(&r);
}

ul_result_t mpi_comm_revoke(ul_backend_comm_t *c) {
  static const int one = 1;
  if (c->revoked) return UL_OK;
  c->revoked = 1;
  mpi_g.trouble = 1;
  for (int p = 0; p < c->nranks; p++)
    if (p != c->rank) mpi_send_and_forget(&one, (int)sizeof one, p, MPI_TAG_REVOKE, c->ctl);
  return UL_OK;
}

ul_result_t mpi_comm_failed_ranks(ul_backend_comm_t *c, int *ranks, int max, int *count) {
  int n = 0;
  for (int p = 0; p < c->nranks; p++) {
    if (p == c->rank || c->pidfd_of[p] == -2 || ulbu_pid_alive(c->pid_of[p], c->pidfd_of[p]))
      continue;
    if (n < max) ranks[n] = p;
    n++;
  }
  *count = n;
  return UL_OK;
}

/* ---------------------------------------------------------------- shrink */
/* Mark in lost[] every watched peer that has exited. */
static void shrink_local_view(ul_backend_comm_t *c, unsigned char *lost) {
  for (int p = 0; p < c->nranks; p++)
    if (p != c->rank && c->pidfd_of[p] != -2 && !ulbu_pid_alive(c->pid_of[p], c->pidfd_of[p]))
      lost[p] = 1;
}

static int shrink_lowest_alive(const ul_backend_comm_t *c, const unsigned char *lost) {
  for (int p = 0; p < c->nranks; p++)
    if (!lost[p]) return p;
  return c->rank;
}

static void shrink_cancel(MPI_Request *r) {
  if (*r == MPI_REQUEST_NULL) return;
  MPI_Cancel(r);
  MPI_Request_free(r);
}

/* The shrink's waits poll requests and the local view; no abort check (a shrink follows
 * an abort), only the timeout, counted from the start of the shrink. */
static ulbu_waiter_t shrink_waiter(void *arg, int timeout_ms,
                                   ul_result_t (*expired)(void *, int, const char *)) {
  ulbu_waiter_t w = {.arg = arg, .expired = expired, .timeout_ms = timeout_ms,
                     .sleep_ns = 200000L};
  return w;
}

typedef struct shrink_views {
  ul_backend_comm_t *c;
  unsigned char *lost, *views;
  MPI_Request *rq;
} shrink_views_t;

/* Every view received (merged into lost[]) or its sender seen to exit. */
static ul_result_t shrink_views_poll(void *arg) {
  shrink_views_t *x = arg;
  int n = x->c->nranks, pending = 0;
  for (int p = 0; p < n; p++) {
    if (x->rq[p] == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Test(&x->rq[p], &done, MPI_STATUS_IGNORE);
    if (done) {
      for (int q = 0; q < n; q++) x->lost[q] |= x->views[(size_t)p * (size_t)n + q];
      continue;
    }
    shrink_local_view(x->c, x->lost);
    if (x->lost[p]) {
      shrink_cancel(&x->rq[p]);
      continue;
    }
    pending++;
  }
  return pending ? UL_IN_PROGRESS : UL_OK;
}

static ul_result_t shrink_views_expired(void *arg, int timeout_ms, const char *what) {
  (void)what;
  shrink_views_t *x = arg;
  char who[256] = "";
  size_t w = 0;
  for (int p = 0; p < x->c->nranks && w + 16 < sizeof who; p++)
    if (x->rq[p] != MPI_REQUEST_NULL)
      w += (size_t)snprintf(who + w, sizeof who - w, "%s%d", w ? ", " : "", p);
  return ul_backend_set_error(x->c->ucomm, UL_ERR_TIMEOUT,
                              "rank %d: shrink timed out after %d ms: rank(s) %s neither called "
                              "ul_comm_shrink nor were seen to exit (ranks on other nodes can "
                              "only be waited for)",
                              x->c->rank, timeout_ms, who);
}

/* The coordinator: a view from every rank it believes alive (or that rank's death),
 * merged into lost[], then the decision to every member. */
static ul_result_t shrink_coordinate(ul_backend_comm_t *c, uint32_t k, unsigned char *lost,
                                     double t0, int timeout_ms) {
  int n = c->nranks;
  unsigned char *views = c->ctl_buf + 2 * (size_t)n;
  MPI_Request *rq = malloc((size_t)n * sizeof *rq);
  if (!rq) return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: out of memory", c->rank);
  for (int p = 0; p < n; p++) {
    rq[p] = MPI_REQUEST_NULL;
    if (p != c->rank && !lost[p])
      MPI_Irecv(views + (size_t)p * (size_t)n, n, MPI_BYTE, p, MPI_TAG_VIEW(k), c->ctl, &rq[p]);
  }
  shrink_views_t x = {c, lost, views, rq};
  const ulbu_waiter_t w = shrink_waiter(&x, timeout_ms, shrink_views_expired);
  const ulbu_cond_t cond = {shrink_views_poll, NULL, &x};
  ul_result_t r = ulbu_wait_since(&w, &cond, "shrink", t0);
  for (int p = 0; p < n; p++) shrink_cancel(&rq[p]);
  free(rq);
  if (r != UL_OK) return r;
  /* The decision goes out in a buffer that stays valid: ctl_buf[n..2n). */
  unsigned char *decision = c->ctl_buf + n;
  memcpy(decision, lost, (size_t)n);
  for (int p = 0; p < n; p++)
    if (p != c->rank && !lost[p]) mpi_send_and_forget(decision, n, p, MPI_TAG_DECIDE(k), c->ctl);
  return UL_OK;
}

typedef struct shrink_decision {
  ul_backend_comm_t *c;
  unsigned char *lost, *decision;
  MPI_Request rq;
  int coord;
} shrink_decision_t;

/* UL_OK: the decision is in lost[]; UL_ERR_PEER_LOST (no sentence): the coordinator
 * died, ask the next one. */
static ul_result_t shrink_decision_poll(void *arg) {
  shrink_decision_t *x = arg;
  int done = 0;
  MPI_Test(&x->rq, &done, MPI_STATUS_IGNORE);
  if (done) {
    memcpy(x->lost, x->decision, (size_t)x->c->nranks);
    return UL_OK;
  }
  shrink_local_view(x->c, x->lost);
  return x->lost[x->coord] ? UL_ERR_PEER_LOST : UL_IN_PROGRESS;
}

static ul_result_t shrink_decision_expired(void *arg, int timeout_ms, const char *what) {
  (void)what;
  shrink_decision_t *x = arg;
  return ul_backend_set_error(x->c->ucomm, UL_ERR_TIMEOUT,
                              "rank %d: shrink timed out after %d ms waiting for the "
                              "decision of rank %d",
                              x->c->rank, timeout_ms, x->coord);
}

/* A member: its view to the coordinator, the decision back; a coordinator that dies is
 * replaced by the next alive rank. */
static ul_result_t shrink_follow(ul_backend_comm_t *c, uint32_t k, unsigned char *lost,
                                 double t0, int timeout_ms) {
  int n = c->nranks;
  unsigned char *view = c->ctl_buf;
  shrink_decision_t x = {c, lost, c->ctl_buf + n, MPI_REQUEST_NULL, -1};
  const ulbu_waiter_t w = shrink_waiter(&x, timeout_ms, shrink_decision_expired);
  const ulbu_cond_t cond = {shrink_decision_poll, NULL, &x};
  for (;;) {
    x.coord = shrink_lowest_alive(c, lost);
    if (x.coord == c->rank) return shrink_coordinate(c, k, lost, t0, timeout_ms);
    memcpy(view, lost, (size_t)n);
    mpi_send_and_forget(view, n, x.coord, MPI_TAG_VIEW(k), c->ctl);
    MPI_Irecv(x.decision, n, MPI_BYTE, x.coord, MPI_TAG_DECIDE(k), c->ctl, &x.rq);
    ul_result_t r = ulbu_wait_since(&w, &cond, "shrink", t0);
    if (r == UL_OK) return UL_OK;
    shrink_cancel(&x.rq);
    if (r != UL_ERR_PEER_LOST) return r; /* else the coordinator died: ask the next one */
  }
}

ul_result_t mpi_comm_shrink(ul_backend_comm_t *c, const ul_backend_comm_args_t *args,
                            ul_backend_comm_t **out, ul_backend_comm_props_t *props,
                            int *new_rank, int *new_nranks) {
  *out = NULL;
  int n = c->nranks;
  uint32_t k = ++c->shrinks;
  double t0 = mpi_now_ms();
  unsigned char *lost = calloc((size_t)n, 1);
  int *members = malloc((size_t)n * sizeof *members);
  if (!lost || !members) {
    free(lost);
    free(members);
    return ul_backend_set_error(args->comm, UL_ERR_NO_MEMORY, "mpi: out of memory");
  }
  shrink_local_view(c, lost);
  ul_result_t r = shrink_follow(c, k, lost, t0, args->timeout_ms);
  int nm = 0;
  for (int p = 0; p < n; p++)
    if (!lost[p]) members[nm++] = p;
  if (r == UL_OK && lost[c->rank])
    r = ul_backend_set_error(args->comm, UL_ERR_TIMEOUT,
                             "rank %d: the survivors' shrink %u left this rank out", c->rank,
                             (unsigned)k);
  MPI_Comm nc = MPI_COMM_NULL;
  if (r == UL_OK) {
    MPI_Group all = MPI_GROUP_NULL, keep = MPI_GROUP_NULL;
    int rc = MPI_Comm_group(c->comm, &all);
    if (rc == MPI_SUCCESS) rc = MPI_Group_incl(all, nm, members, &keep);
    /* Collective over the members only: the lost ranks are not needed. */
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(c->comm, keep, (int)(k & 0x7fff), &nc);
    if (keep != MPI_GROUP_NULL) MPI_Group_free(&keep);
    if (all != MPI_GROUP_NULL) MPI_Group_free(&all);
    if (rc != MPI_SUCCESS) r = mpi_error_set(c, rc, "MPI_Comm_create_group (shrink)");
  }
  free(lost);
  free(members);
  if (r != UL_OK) return r;
  ul_backend_comm_t *s = mpi_comm_new(args);
  if (!s) {
    MPI_Comm_free(&nc);
    return ul_backend_set_error(args->comm, UL_ERR_NO_MEMORY, "mpi: out of memory");
  }
  s->comm = nc;
  r = mpi_comm_setup(s, props);
  if (r != UL_OK) {
    mpi_backend_comm_destroy(s);
    return r;
  }
  *new_rank = s->rank;
  *new_nranks = s->nranks;
  *out = s;
  return UL_OK;
}
