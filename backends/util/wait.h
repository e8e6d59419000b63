/* The one timed wait of every backend: poll a condition, spin, then yield, then sleep,
 * until it is reached, the backend's checks fail (abort, revoke, a lost peer, an
 * asynchronous error) or the communicator's timeout passes. What differs between
 * backends (their checks, their sentences, how long each phase lasts, how they sleep)
 * is data and callbacks in a ulbu_waiter_t and a ulbu_cond_t, so the loop exists once.
 *
 * Header-only on purpose: the host backend's spin is latency-critical (a 2-rank 8-byte
 * allreduce takes about a microsecond) and must inline its poll, and the built-in
 * backends (host, sim) do not link the plugins' helper library. */
#ifndef UL_BACKEND_WAIT_H
#define UL_BACKEND_WAIT_H

#include <sched.h>
#include <time.h>
#include <unilink/backend.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How one backend waits: its failure checks and sentences, its timeout, its backoff. */
typedef struct ulbu_waiter {
  void *arg; /* given to check and expired: usually the backend's communicator */
  /* Before every backoff once the spin is over (elapsed_ms counts from there): UL_OK to
   * keep waiting, else the failure, its sentence set. NULL: nothing to check. */
  ul_result_t (*check)(void *arg, double elapsed_ms, const char *what);
  /* The timeout's result, its sentence set. NULL: plain UL_ERR_TIMEOUT. */
  ul_result_t (*expired)(void *arg, int timeout_ms, const char *what);
  int timeout_ms;  /* 0: forever */
  int spin;        /* polls with a CPU pause before the clock starts */
  double pause_ms; /* then a CPU pause between polls until this long since the clock started */
  double yield_ms; /* then sched_yield between polls until this long */
  long sleep_ns;   /* then sleep between polls (cond->block, else nanosleep) this long */
  int recheck;     /* after a failed check, poll once more: what a peer finished before it
                    * died or aborted is still valid */
} ulbu_waiter_t;

/* What is waited for. */
typedef struct ulbu_cond {
  /* UL_OK: reached; UL_IN_PROGRESS: not yet; anything else: failed (sentence set). */
  ul_result_t (*poll)(void *arg);
  /* Optional: sleep at most ns, or less when the condition may have changed (futex). */
  void (*block)(void *arg, long ns);
  void *arg;
} ulbu_cond_t;

/* CLOCK_MONOTONIC in milliseconds. */
static inline double ulbu_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}


/* One idle step of a wait that began (spin over) at t0: the backend's checks, the
 * timeout, then yield or sleep. UL_OK: poll again. For loops that poll in their own way
 * (several requests, a barrier under a lock); cond may be NULL then. */
static inline ul_result_t ulbu_wait_idle(const ulbu_waiter_t *w, const ulbu_cond_t *cond, double t0,
                                         const char *what) {
  double el = ulbu_now_ms() - t0;
  if (w->check) {
    ul_result_t rc = w->check(w->arg, el, what);
    if (rc != UL_OK) {
      if (w->recheck && cond && cond->poll(cond->arg) == UL_OK) return UL_OK;
      return rc;
    }
  }
  if (w->timeout_ms > 0 && el >= w->timeout_ms)
    return w->expired ? w->expired(w->arg, w->timeout_ms, what) : UL_ERR_TIMEOUT;
  if (el < w->pause_ms) {
    ul_backend_cpu_pause();
    return UL_OK;
  }
  if (el < w->yield_ms) {
    sched_yield();
    return UL_OK;
  }
  long ns = w->sleep_ns;
  if (w->timeout_ms > 0 && (w->timeout_ms - el) * 1e6 < (double)ns)
    ns = (long)((w->timeout_ms - el) * 1e6) + 1; /* wake up for the deadline, not after it */
  if (cond && cond->block) {
    cond->block(cond->arg, ns);
  } else {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
  }
  return UL_OK;
}

/* Poll and back off until cond is reached (UL_OK), fails (its result) or w gives up (its
 * result), the clock started at t0 (a later stage of one wait keeps the first stage's
 * t0, so both share one timeout). */
static inline ul_result_t ulbu_wait_since(const ulbu_waiter_t *w, const ulbu_cond_t *cond,
                                          const char *what, double t0) {
  ul_result_t rc;
  while ((rc = cond->poll(cond->arg)) == UL_IN_PROGRESS &&
         (rc = ulbu_wait_idle(w, cond, t0, what)) == UL_OK) {
  }
  return rc;
}

/* The wait: poll, spin w->spin polls, then ulbu_wait_since. *elapsed_ms (may be NULL):
 * time since the spin ended, 0 when it never ended. */
static inline ul_result_t ulbu_wait(const ulbu_waiter_t *w, const ulbu_cond_t *cond,
                                    const char *what, double *elapsed_ms) {
  ul_result_t rc = cond->poll(cond->arg);
  for (int i = 0; rc == UL_IN_PROGRESS && i < w->spin; i++) {
    ul_backend_cpu_pause();
    rc = cond->poll(cond->arg);
  }
  if (elapsed_ms) *elapsed_ms = 0;
  if (rc != UL_IN_PROGRESS) return rc;
  double t0 = ulbu_now_ms();
  rc = ulbu_wait_since(w, cond, what, t0);
  if (elapsed_ms) *elapsed_ms = ulbu_now_ms() - t0;
  return rc;
}

#ifdef __cplusplus
}
#endif
#endif
