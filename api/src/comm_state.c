/* Communicator handles below every other core file: which handles are live (and claimed
 * by a teardown), the per-communicator error sentence and last call, and which results
 * are fatal. Everything that reports an error on a communicator calls down to here, so
 * this file calls nothing of the core above it (issue 19: no loops). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "failure_seen.h"
#include "ul_core.h"

/* The handle is one of ours and not freed (it may still be initializing). */
bool ul__comm_alive(ul_comm_t comm) { return comm != NULL && comm->magic == UL__COMM_MAGIC; }

bool ul__comm_valid(ul_comm_t comm) {
  return ul__comm_alive(comm) && __atomic_load_n(&comm->init_state, __ATOMIC_ACQUIRE) == UL_OK;
}

ul_result_t ul__comm_invalid(ul_comm_t comm, const char *fn) {
  if (ul__comm_alive(comm)) {
    int st = __atomic_load_n(&comm->init_state, __ATOMIC_ACQUIRE);
    if (st == UL_IN_PROGRESS)
      return ul__set_thread_error(UL_ERR_INVALID_USAGE,
                                  "%s: the communicator is still being created (config.blocking "
                                  "= 0): poll ul_comm_get_async_error until it returns UL_OK",
                                  fn);
    if (st != UL_OK)
      return ul__set_thread_error((ul_result_t)st,
                                  "%s: the communicator's nonblocking creation failed (%s); "
                                  "destroy it",
                                  fn, comm->last_error);
  }
  return ul__set_thread_error(UL_ERR_INVALID_ARG, "%s: comm is NULL or invalid", fn);
}

/* Live communicators and whether a teardown (abort/destroy) has claimed each: racing
 * ul_comm_abort calls (a watchdog and the main thread) must not both free the handle.
 * Only teardown consults it, so calls on the hot path pay nothing. */
typedef struct live_comm {
  ul_comm_t comm;
  int claimed;
} live_comm_t;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static live_comm_t *live;
static size_t nlive, live_cap;

int ul__comm_live_add(ul_comm_t c) {
  pthread_mutex_lock(&live_lock);
  int ok = 1;
  if (nlive == live_cap) {
    size_t cap = live_cap ? 2 * live_cap : 16;
    live_comm_t *n = realloc(live, cap * sizeof *n);
    if (n) {
      live = n;
      live_cap = cap;
    } else {
      ok = 0;
    }
  }
  if (ok) live[nlive++] = (live_comm_t){c, 0};
  pthread_mutex_unlock(&live_lock);
  return ok;
}

void ul__comm_live_remove(ul_comm_t c) {
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < nlive; i++)
    if (live[i].comm == c) {
      live[i] = live[--nlive];
      break;
    }
  pthread_mutex_unlock(&live_lock);
}

/* Claim c's teardown: 0 claimed by this caller, 1 another teardown has it (abort: the
 * flag is raised here, under the lock, while c is certainly alive), -1 not live. */
int ul__comm_live_claim(ul_comm_t c, int raise_abort) {
  int st = -1;
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < nlive; i++)
    if (live[i].comm == c) {
      st = live[i].claimed ? 1 : 0;
      live[i].claimed = 1;
      if (raise_abort) __atomic_store_n(&c->abort_flag, 1, __ATOMIC_SEQ_CST);
      break;
    }
  pthread_mutex_unlock(&live_lock);
  return st;
}

/* Enter a call that an abort must wait for (in_flight), unless a teardown has already
 * claimed comm or freed it: decided under the registry lock, so it cannot interleave
 * with the claim. The handle is not read before it is known to be live. */
bool ul__comm_enter(ul_comm_t comm) {
  bool ok = false;
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < nlive; i++)
    if (live[i].comm == comm) {
      ok = !live[i].claimed;
      if (ok) __atomic_add_fetch(&comm->in_flight, 1, __ATOMIC_SEQ_CST);
      break;
    }
  pthread_mutex_unlock(&live_lock);
  return ok;
}

void ul__comm_lock(ul_comm_t c) { pthread_mutex_lock((pthread_mutex_t *)c->lock); }
void ul__comm_unlock(ul_comm_t c) { pthread_mutex_unlock((pthread_mutex_t *)c->lock); }

static ul_result_t comm_vset_error(ul_comm_t comm, ul_result_t rc, const char *fmt, va_list ap) {
  ul__failure_note(rc); /* a launcher's finalize must not wait for a lost peer */
  char buf[512];
  ul__vformat_error(buf, sizeof buf, fmt, ap);
  if (!ul__comm_alive(comm)) return ul__set_thread_error(rc, "%s", buf);
  /* Format into a local copy: another thread (a stream task) may set the next error on
   * comm as soon as the lock is released. */
  char full[sizeof comm->last_error];
  snprintf(full, sizeof full, "rank %d/%d (%.24s): %.400s [%s]", comm->rank, comm->nranks,
           comm->backend->ops.name, buf, ul_result_name(rc));
  ul__comm_lock(comm);
  memcpy(comm->last_error, full, sizeof full);
  ul__comm_unlock(comm);
  ul__set_thread_error(rc, "%s", full);
  if (rc != UL_OK) UL_INFO("ERROR", "%s", full);
  return rc;
}

ul_result_t ul__comm_set_error(ul_comm_t comm, ul_result_t rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ul_result_t r = comm_vset_error(comm, rc, fmt, ap);
  va_end(ap);
  return r;
}

UL_API ul_result_t ul_backend_set_error(ul_comm_t comm, ul_result_t result, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ul_result_t r = comm_vset_error(comm, result, fmt, ap);
  va_end(ap);
  return r;
}

UL_API const char *ul_comm_last_error(ul_comm_t comm) {
  if (comm == NULL) return ul_last_error();
  if (!ul__comm_alive(comm)) return "invalid communicator handle";
  return comm->last_error;
}

UL_API ul_result_t ul_comm_last_call(ul_comm_t comm, ul_call_info_t *info) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_comm_last_call");
  if (info == NULL || info->struct_size < offsetof(ul_call_info_t, reason))
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                              "ul_comm_last_call: info is NULL or its struct_size is too small");
  size_t sz = info->struct_size < sizeof(ul_call_info_t) ? info->struct_size : sizeof(ul_call_info_t);
  /* the owner publishes the record without the lock until another thread reads it */
  if (ul__owner_sync(comm) != UL_OK)
    return ul__comm_set_error(comm, UL_ERR_TIMEOUT, UL__OWNER_STUCK, comm->config.timeout_ms);
  ul__comm_lock(comm);
  if (comm->calls[comm->last_call].sequence == 0) {
    ul__comm_unlock(comm);
    return UL_ERR_NOT_FOUND;
  }
  ul_call_info_t copy = comm->calls[comm->last_call];
  ul__comm_unlock(comm);
  copy.struct_size = sz;
  /* the communicator's, not copied on every call */
  ul__copy_str(copy.backend, sizeof copy.backend, comm->backend->ops.name);
  ul__copy_str(copy.selection, sizeof copy.selection, comm->selection);
  memcpy(info, &copy, sz);
  return UL_OK;
}

ul_call_info_t *ul__comm_call_record(ul_comm_t comm) { return &comm->calls[comm->last_call ^ 1]; }

void ul__comm_record_call(ul_comm_t comm, int fast) {
  if (fast) { /* the owner's call: a reader on another thread revokes it first */
    comm->last_call ^= 1;
    return;
  }
  ul__comm_lock(comm);
  comm->last_call ^= 1;
  ul__comm_unlock(comm);
}


int ul__fatal_error(ul_result_t rc) {
  return rc == UL_ERR_TIMEOUT || rc == UL_ERR_PEER_LOST || rc == UL_ERR_ABORTED ||
         rc == UL_ERR_REVOKED || rc == UL_ERR_INTERNAL || rc == UL_ERR_BACKEND || rc == UL_ERR_SYSTEM;
}
