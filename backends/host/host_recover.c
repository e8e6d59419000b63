/* Recovery on the host backend: revoke, the ranks known lost, and shrink.
 *
 * Everything goes through the control area every rank of the communicator maps, so it
 * works for thread ranks and process ranks alike and needs no message from a peer that
 * may be gone. A rank is lost when it aborted, destroyed its communicator, or (process
 * ranks) its process exited; loss is permanent, so every survivor's view of it only
 * grows and the views converge.
 *
 * Shrink k (the k-th ul_comm_shrink on this communicator; survivors call it equally
 * often): each survivor announces k, then waits until every rank has either announced k
 * or is lost. The lowest announced rank that is alive is the coordinator: it writes the
 * members (announced and alive, in old-rank order) and a fresh unique id, then publishes
 * "k decided". If the coordinator dies before publishing, the next one sees it lost and
 * decides instead. Everyone then joins the new communicator with host_comm_init, whose
 * rendezvous is bounded by the timeout like any other. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "host.h"

static void recover_nap(void) {
  struct timespec ts = {0, 200000}; /* shrink is rare: 0.2 ms polls cost nothing */
  nanosleep(&ts, NULL);
}

/* Is rank p of c lost? */
static int recover_lost(const ul_backend_comm_t *c, int p) {
  const host_ctrl_rank_t *r = &c->ctrl->ranks[p];
  if (p == c->rank) return 0;
  if (atomic_load_explicit(&r->aborted, memory_order_acquire) ||
      atomic_load_explicit(&r->left, memory_order_acquire))
    return 1;
  return !c->threads && !ulbu_pid_alive(c->pids[p], c->pidfds[p]);
}

ul_result_t host_comm_revoke(ul_backend_comm_t *c) {
  atomic_store_explicit(&c->ctrl->revoked, 1, memory_order_release);
  host_comm_wake_all(c); /* sleepers see the flag at once, not after their slice */
  return UL_OK;
}

ul_result_t host_comm_failed_ranks(ul_backend_comm_t *c, int *ranks, int max, int *count) {
  int n = 0;
  for (int p = 0; p < c->nranks; p++)
    if (recover_lost(c, p)) {
      if (n < max) ranks[n] = p;
      n++;
    }
  *count = n;
  return UL_OK;
}

/* Coordinator of shrink k: members and id, then the decision (release). */
static ul_result_t recover_decide(ul_backend_comm_t *c, uint32_t k) {
  host_ctrl_t *m = c->ctrl;
  unsigned char id[HOST_ID_USED];
  UL_CHECK(host_get_unique_id(id, sizeof id));
  int nn = 0;
  for (int p = 0; p < c->nranks; p++) {
    host_ctrl_rank_t *r = &m->ranks[p];
    if (atomic_load_explicit(&r->shrink_epoch, memory_order_acquire) < k || recover_lost(c, p))
      continue;
    r->shrink_new_rank = nn++;
    atomic_store_explicit(&r->shrink_member, k, memory_order_relaxed);
  }
  memcpy(m->shrink_id, id, sizeof id);
  m->shrink_new_nranks = nn;
  atomic_store_explicit(&m->shrink_decided, k, memory_order_release);
  return UL_OK;
}

/* "1, 3": ranks neither in shrink k nor lost. */
static void recover_pending_text(const ul_backend_comm_t *c, uint32_t k, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int p = 0; p < c->nranks && n + 16 < len; p++)
    if (atomic_load_explicit(&c->ctrl->ranks[p].shrink_epoch, memory_order_acquire) < k &&
        !recover_lost(c, p))
      n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? ", " : "", p);
}

ul_result_t host_comm_shrink(ul_backend_comm_t *c, const ul_backend_comm_args_t *args,
                             ul_backend_comm_t **out, ul_backend_comm_props_t *props,
                             int *new_rank, int *new_nranks) {
  host_ctrl_t *m = c->ctrl;
  uint32_t k = ++c->shrinks;
  atomic_store_explicit(&m->ranks[c->rank].shrink_epoch, k, memory_order_release);
  double t0 = ul__now_ms();
  int timeout = args->timeout_ms;
  for (;;) {
    if (atomic_load_explicit(&m->shrink_decided, memory_order_acquire) >= k) break;
    if (args->abort_flag && __atomic_load_n(args->abort_flag, __ATOMIC_ACQUIRE))
      return ul_backend_set_error(args->comm, UL_ERR_ABORTED,
                                  "host: rank %d: shrink abandoned: the new communicator was "
                                  "aborted",
                                  c->rank);
    int pending = 0, coordinator = -1;
    for (int p = 0; p < c->nranks; p++) {
      if (recover_lost(c, p)) continue;
      if (atomic_load_explicit(&m->ranks[p].shrink_epoch, memory_order_acquire) < k)
        pending++;
      else if (coordinator < 0)
        coordinator = p;
    }
    if (pending == 0 && coordinator == c->rank) {
      UL_CHECK(recover_decide(c, k));
      break;
    }
    if (timeout > 0 && ul__now_ms() - t0 >= timeout) {
      char who[256];
      recover_pending_text(c, k, who, sizeof who);
      return ul_backend_set_error(args->comm, UL_ERR_TIMEOUT,
                                  "host: rank %d: shrink timed out after %d ms: rank(s) %s neither "
                                  "called ul_comm_shrink nor were lost",
                                  c->rank, timeout, who[0] ? who : "(none; coordinator silent)");
    }
    recover_nap();
  }
  host_ctrl_rank_t *me = &m->ranks[c->rank];
  if (atomic_load_explicit(&me->shrink_member, memory_order_acquire) != k)
    return ul_backend_set_error(args->comm, UL_ERR_TIMEOUT,
                                "host: rank %d: shrink %u was decided without this rank (it "
                                "arrived after the survivors agreed)",
                                c->rank, (unsigned)k);
  /* A local copy: a later shrink's coordinator may rewrite the shared one. */
  unsigned char id[HOST_ID_USED];
  memcpy(id, m->shrink_id, sizeof id);
  ul_backend_comm_args_t a = *args;
  a.rank = me->shrink_new_rank;
  a.nranks = m->shrink_new_nranks;
  a.id_payload = id;
  a.id_payload_bytes = sizeof id;
  double spent = ul__now_ms() - t0;
  if (timeout > 0) a.timeout_ms = spent >= timeout ? 1 : timeout - (int)spent;
  UL_CHECK(host_comm_init(&a, out, props));
  *new_rank = a.rank;
  *new_nranks = a.nranks;
  ul_backend_log(UL_LOG_INFO, "host", "rank %d/%d: shrink %u: rank %d/%d of the survivors",
                 c->rank, c->nranks, (unsigned)k, a.rank, a.nranks);
  return UL_OK;
}
