/* The owner of a communicator: the one thread that drives it, as MPI_THREAD_SINGLE
 * programs and NCCL users do. Its blocking calls take the turn, publish the call record
 * and end the turn with plain stores; every other case keeps the locked protocol of
 * coll.c (decision 0017). Locked instructions were a third of an 8-byte call, and on a
 * broadcast root each one waits for the line stores before it to leave the core.
 *
 * The first thread to take a turn on a communicator owns it, if the kernel offers
 * private expedited membarrier. A second thread revokes the ownership for good: it
 * marks the communicator shared and runs membarrier, a full barrier on every thread of
 * the process. The owner stores owner_crit before it loads the owner field to take or
 * end a turn, so either it sees the mark (and ends its turn the locked way, waking
 * whoever waits) or the revoker sees owner_crit and waits those few instructions out.
 * This is Dekker's handshake with the owner's fence moved to the rare side. Nobody waits
 * for the owner's whole call. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ul_core.h"

static pthread_mutex_t membarrier_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t membarrier_pid; /* the process that registered: a fork must register again */
static int membarrier_ok;

static long membarrier_call(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

/* Whether this process may use MEMBARRIER_CMD_PRIVATE_EXPEDITED (registered once). */
static int membarrier_ready(void) {
  pthread_mutex_lock(&membarrier_lock);
  pid_t me = getpid();
  if (membarrier_pid != me) {
    long cmds = membarrier_call(MEMBARRIER_CMD_QUERY);
    membarrier_ok = cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                    membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
    membarrier_pid = me;
    if (!membarrier_ok)
      UL_INFO("INIT", "membarrier unavailable (errno %d): communicators keep the locked turn",
              errno);
  }
  int ok = membarrier_ok;
  pthread_mutex_unlock(&membarrier_lock);
  return ok;
}

/* Mark comm shared, then wait until its owner `o` is not taking or ending a turn with
 * plain stores: afterwards it sees the mark before its next plain store to the turn.
 * wait: 0 for an abort, which waits for the owner's whole call itself. */
static ul_result_t owner_revoke(ul_comm_t c, uintptr_t o, int wait) {
  if (!__atomic_compare_exchange_n(&c->owner, &o, UL__OWNER_SHARED, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return UL_OK; /* someone else revoked it, or it changed: the caller looks again */
  UL_INFO("INIT", "rank %d/%d: a second thread uses the communicator; its calls take the "
          "locked turn from now on", c->rank, c->nranks);
  if (membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)
    UL_WARN("INIT", "membarrier failed (errno %d) revoking a communicator's owner", errno);
  if (!wait) return UL_OK;
  const struct timespec nap = {0, 20000}; /* the owner was preempted there: rare */
  double t0 = ul__now_ms();
  while (__atomic_load_n(&c->owner_crit, __ATOMIC_ACQUIRE)) {
    int timeout = c->config.timeout_ms;
    if (timeout > 0 && ul__now_ms() - t0 > timeout) return UL_ERR_TIMEOUT; /* UL__OWNER_STUCK */
    nanosleep(&nap, NULL);
  }
  return UL_OK;
}

ul_result_t ul__owner_guard_slow(ul_comm_t c, int here) {
  uintptr_t me = (uintptr_t)pthread_self();
  for (;;) {
    uintptr_t o = __atomic_load_n(&c->owner, __ATOMIC_ACQUIRE);
    if (o == UL__OWNER_SHARED) return UL_OK;
    if (o == me) {
      /* Another thread will run the turn (a stream worker): no plain stores from now on.
       * We are not inside a call, so no handshake is needed. */
      if (!here) __atomic_store_n(&c->owner, UL__OWNER_SHARED, __ATOMIC_RELEASE);
      return UL_OK;
    }
    if (o == UL__OWNER_NONE) {
      uintptr_t want = here && membarrier_ready() ? me : UL__OWNER_SHARED;
      if (__atomic_compare_exchange_n(&c->owner, &o, want, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        UL_INFO("INIT", "rank %d/%d: %s", c->rank, c->nranks,
                want == me ? "owned by the thread that took its first turn: its blocking calls "
                             "take the turn without locked instructions"
                           : "shared: every call takes the locked turn");
        return UL_OK;
      }
      continue;
    }
    ul_result_t rc = owner_revoke(c, o, 1);
    if (rc != UL_OK) return rc;
  }
}

ul_result_t ul__owner_sync(ul_comm_t c) {
  uintptr_t me = (uintptr_t)pthread_self();
  for (;;) {
    uintptr_t o = __atomic_load_n(&c->owner, __ATOMIC_ACQUIRE);
    if (o == UL__OWNER_SHARED || o == UL__OWNER_NONE || o == me) return UL_OK;
    ul_result_t rc = owner_revoke(c, o, 1);
    if (rc != UL_OK) return rc;
  }
}

void ul__owner_release(ul_comm_t c) {
  uintptr_t o = __atomic_load_n(&c->owner, __ATOMIC_ACQUIRE);
  while (o != UL__OWNER_SHARED) {
    if (o == UL__OWNER_NONE || o == (uintptr_t)pthread_self()) {
      if (__atomic_compare_exchange_n(&c->owner, &o, UL__OWNER_SHARED, 0, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE))
        return;
    } else {
      owner_revoke(c, o, 0);
      o = __atomic_load_n(&c->owner, __ATOMIC_ACQUIRE);
    }
  }
}
