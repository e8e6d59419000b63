/* Waiting on a 64-bit counter: a short spin (cheap when the peer is running on another
 * core), polls between yields (between pauses when each rank has a CPU of its own), then
 * futex sleeps in slices of at most 10 ms so that the abort flag, the deadline and peer
 * liveness are checked regularly.
 *
 * Lost-wakeup freedom: the waiter increments `waiters` then re-reads the value; the
 * signaller adds to the value then reads `waiters`, both sequentially consistent, so at
 * least one of them sees the other. FUTEX_WAIT compares the low 32 bits of the value
 * in the kernel, so an add between our read and the sleep returns EAGAIN at once. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../util/wait.h"
#include "host.h"

#define HOST_SLICE_NS (10 * 1000 * 1000L)
/* After the spin, until HOST_POLL_MS: yield between polls, unless every rank has a CPU
 * of its own (pinned_apart): then poll between CPU pauses. Then futex sleeps, because a
 * futex wake costs the signaller a system call and the sleeper a wake-up of tens of
 * microseconds on a loaded machine (50-100 us measured here, docs/performance.md).
 * - Pinned apart, a yield can only hand the CPU to some other task runnable there, for
 *   the rest of that task's time slice: next to one busy process, a synchronized 2-rank
 *   allreduce took 1.2-4 ms a call instead of 0.4-6 us, while Open MPI and MPICH, which
 *   poll without yielding, kept their times.
 * - Not pinned, the peer we wait for may be queued on our CPU: 2 thread ranks next to a
 *   busy process took 130-330 us a call in some runs when polling between pauses,
 *   10-16 us when yielding.
 * Ranks outnumbering CPUs yield longer: their peers need the CPU (stop 44 in
 * docs/performance.md has the measurements). */
#define HOST_POLL_MS 0.2
#define HOST_POLL_MS_OVERSUBSCRIBED 2.0
/* A word without a futex (host_wait_word_geq) is polled between sleeps this long: Linux's
 * default timer slack (50 us, prctl(2) PR_SET_TIMERSLACK) makes any shorter nanosleep
 * about as long, and the abort flag and the deadline are checked after each. */
#define HOST_POLL_SLEEP_NS (50 * 1000L)

/* How long a wait polls before it sleeps in the kernel. */
static double host_poll_ms(const host_waiter_t *w) {
  return w->oversubscribed ? HOST_POLL_MS_OVERSUBSCRIBED : HOST_POLL_MS;
}

/* The futex word is the low 32 bits of the counter. */
static inline uint32_t *host_futex_word(host_slot_t *s) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return (uint32_t *)&s->value + 1;
#else
  return (uint32_t *)&s->value;
#endif
}

void host_slot_wake(host_slot_t *slot, int shared) {
  syscall(SYS_futex, host_futex_word(slot), FUTEX_WAKE | (shared ? 0 : FUTEX_PRIVATE_FLAG),
          INT32_MAX, NULL, NULL, 0);
}

uint64_t host_slot_add(host_slot_t *slot, uint64_t delta, int shared) {
  /* seq_cst (a full barrier on x86 via lock xadd): earlier stores, including the
   * non-temporal ones of a large memcpy, are visible before the new value. */
  uint64_t prev = atomic_fetch_add_explicit(&slot->value, delta, memory_order_seq_cst);
  if (atomic_load_explicit(&slot->waiters, memory_order_seq_cst) != 0)
    host_slot_wake(slot, shared);
  return prev;
}

/* One wait: the waiter, the counter and target, and where a failure is described. */
typedef struct host_wait_ctx {
  const host_waiter_t *w;
  const _Atomic uint64_t *value; /* the counter */
  host_slot_t *slot;             /* its futex slot; NULL: a plain word, polled */
  uint64_t target;
  host_wait_fail_t *fail;
} host_wait_ctx_t;

static ul_result_t host_wait_poll(void *arg) {
  host_wait_ctx_t *x = arg;
  return atomic_load_explicit(x->value, memory_order_acquire) >= x->target ? UL_OK
                                                                           : UL_IN_PROGRESS;
}

/* Sleep in the kernel until the counter changes (or ns pass). Lost-wakeup freedom: see
 * the top of this file; the value is re-read after `waiters` counts us. */
static void host_wait_block(void *arg, long ns) {
  host_wait_ctx_t *x = arg;
  atomic_fetch_add_explicit(&x->slot->waiters, 1, memory_order_seq_cst);
  uint64_t v = atomic_load_explicit(&x->slot->value, memory_order_seq_cst);
  if (v < x->target) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    syscall(SYS_futex, host_futex_word(x->slot), FUTEX_WAIT | (x->w->shared ? 0 : FUTEX_PRIVATE_FLAG),
            (uint32_t)v, &ts, NULL, 0);
  }
  atomic_fetch_sub_explicit(&x->slot->waiters, 1, memory_order_relaxed);
}

/* Our abort, peers' aborts, peers' deaths. While still polling only the abort flags
 * (cheap); the peers' liveness costs system calls, so it waits for the sleeps. */
static ul_result_t host_wait_check(void *arg, double elapsed_ms, const char *what) {
  (void)what;
  host_wait_ctx_t *x = arg;
  const host_waiter_t *w = x->w;
  /* The core stores the flag with __atomic_store_n from another thread (ul_comm_abort):
   * load it atomically too, a volatile read is a data race. */
  if ((w->abort_flag && __atomic_load_n(w->abort_flag, __ATOMIC_ACQUIRE)) ||
      (w->dead && atomic_load(w->dead)))
    return UL_ERR_ABORTED;
  if (!w->ctrl || elapsed_ms < host_poll_ms(w))
    return UL_OK;
  if (atomic_load_explicit(&w->ctrl->revoked, memory_order_acquire)) return UL_ERR_REVOKED;
  for (int p = 0; p < w->nranks; p++) {
    if (p == w->self) continue;
    host_ctrl_rank_t *r = &w->ctrl->ranks[p];
    if (atomic_load_explicit(&r->aborted, memory_order_acquire)) {
      x->fail->rank = p;
      x->fail->pid = r->pid;
      x->fail->aborted = 1;
      return UL_ERR_PEER_LOST;
    }
    if (w->pids && w->pids[p] > 0 && w->pids[p] != w->pids[w->self] &&
        !ulbu_pid_alive(w->pids[p], w->pidfds ? w->pidfds[p] : -1)) {
      x->fail->rank = p;
      x->fail->pid = w->pids[p];
      x->fail->aborted = 0;
      return UL_ERR_PEER_LOST;
    }
  }
  return UL_OK;
}

int host_aborted_peer(const host_ctrl_t *ctrl, int nranks, int self) {
  for (int p = 0; p < nranks; p++)
    if (p != self && atomic_load_explicit(&ctrl->ranks[p].aborted, memory_order_acquire))
      return p;
  return -1;
}

/* host_wait_geq and host_wait_word_geq: *value >= target, sleeping on slot's futex
 * (slot NULL: polling between short sleeps). */
static ul_result_t host_wait_value(const host_waiter_t *w, const _Atomic uint64_t *value,
                                   host_slot_t *slot, uint64_t target, int staged,
                                   host_wait_fail_t *fail) {
  fail->rank = -1;
  fail->pid = 0;
  fail->aborted = 0;
  fail->elapsed_ms = 0;
  /* A peer that aborted may have signalled before it left; what it staged is gone (thread
   * ranks free it), so the communicator is broken even when the value is reached. A
   * barrier is the exception: it stages nothing, and a peer that arrived and then aborted
   * (say, right after its init returned) must not fail the others' init. */
  int p = w->ctrl && staged ? host_aborted_peer(w->ctrl, w->nranks, w->self) : -1;
  if (p >= 0) {
    fail->rank = p;
    fail->pid = w->ctrl->ranks[p].pid;
    fail->aborted = 1;
    return UL_ERR_PEER_LOST;
  }
  host_wait_ctx_t x = {w, value, slot, target, fail};
  const ulbu_waiter_t how = {
      .arg = &x,
      .check = host_wait_check,
      .timeout_ms = w->timeout_ms,
      .spin = w->spin,
      .pause_ms = w->pinned_apart ? HOST_POLL_MS : 0,
      .yield_ms = host_poll_ms(w),
      .sleep_ns = slot ? HOST_SLICE_NS : HOST_POLL_SLEEP_NS,
      .recheck = 1,
  };
  const ulbu_cond_t cond = {host_wait_poll, slot ? host_wait_block : NULL, &x};
  double elapsed = 0;
  ul_result_t rc = ulbu_wait(&how, &cond, "", &elapsed);
  fail->elapsed_ms = (int)elapsed;
  return rc;
}

ul_result_t host_wait_geq(const host_waiter_t *w, host_slot_t *slot, uint64_t target,
                          int staged, host_wait_fail_t *fail) {
  return host_wait_value(w, &slot->value, slot, target, staged, fail);
}

ul_result_t host_wait_word_geq(const host_waiter_t *w, const _Atomic uint64_t *word,
                               uint64_t target, host_wait_fail_t *fail) {
  return host_wait_value(w, word, NULL, target, 0, fail);
}

void host_waiter_for_comm(const ul_backend_comm_t *c, host_waiter_t *w, int ctrl_word) {
  w->abort_flag = c->abort_flag;
  w->dead = &c->dead;
  w->timeout_ms = c->timeout_ms;
  w->spin = c->spin;
  w->oversubscribed = c->oversubscribed;
  w->pinned_apart = c->pinned_apart;
  w->shared = ctrl_word ? c->ctrl_shared : !c->threads;
  w->ctrl = c->ctrl;
  w->nranks = c->nranks;
  w->self = c->rank;
  w->pids = c->threads ? NULL : c->pids;
  w->pidfds = c->threads ? NULL : c->pidfds;
}

ul_result_t host_wait_error(const ul_backend_comm_t *c, ul_result_t rc,
                            const host_wait_fail_t *fail, const char *what) {
  switch (rc) {
  case UL_ERR_ABORTED:
    return ul_backend_set_error(c->handle, rc, "host: rank %d: communicator aborted while %s",
                                c->rank, what);
  case UL_ERR_PEER_LOST:
    if (fail->aborted)
      return ul_backend_set_error(c->handle, rc,
                                  "host: rank %d: peer rank %d (pid %d) aborted its communicator "
                                  "while this rank was %s",
                                  c->rank, fail->rank, (int)fail->pid, what);
    return ul_backend_set_error(c->handle, rc,
                                "host: rank %d: peer rank %d (pid %d) exited while this rank was "
                                "%s",
                                c->rank, fail->rank, (int)fail->pid, what);
  case UL_ERR_REVOKED:
    return ul_backend_set_error(c->handle, rc,
                                "host: rank %d: the communicator was revoked (ul_comm_revoke on "
                                "some rank) while this rank was %s; shrink or destroy it",
                                c->rank, what);
  case UL_ERR_TIMEOUT:
    return ul_backend_set_error(c->handle, rc, "host: rank %d: timed out after %d ms %s", c->rank,
                                c->timeout_ms, what);
  default:
    return rc;
  }
}

/* All ranks of c: the control area's monotonic barrier counter. */
ul_result_t host_comm_barrier(ul_backend_comm_t *c, const char *what) {
  c->barrier_epoch++;
  uint64_t target = c->barrier_epoch * (uint64_t)c->nranks;
  host_slot_add(&c->ctrl->barrier, 1, c->ctrl_shared);
  host_waiter_t w;
  host_waiter_for_comm(c, &w, 1);
  host_wait_fail_t fail;
  ul_result_t rc = host_wait_geq(&w, &c->ctrl->barrier, target, 0, &fail);
  if (rc == UL_OK) return UL_OK;
  char buf[160];
  snprintf(buf, sizeof buf, "in the barrier of %s", what);
  return host_wait_error(c, rc, &fail, buf);
}
