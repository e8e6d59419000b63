/* ze backend: immediate command lists (streams), the events of a communicator, signal
 * delivery by the host, and every host wait on the device. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ze_internal.h"

/* --------------------------------------------------- errors, waits, exchange */
ul_result_t ze_fail(ul_backend_comm_t *c, const char *call, ze_result_t r) {
  char buf[320];
  ulze_format_error(buf, sizeof(buf), call, (uint32_t)r, NULL);
  return ul_backend_set_error(c ? c->core : NULL, ulze_result((uint32_t)r), "ze backend: %s", buf);
}

/* Abort first, then a failed signal delivery: UL_OK to keep waiting. */
static ul_result_t ze_wait_check(void *arg, double elapsed_ms, const char *what) {
  (void)elapsed_ms;
  ul_backend_comm_t *c = arg;
  if (ze_aborted(c)) return ulbu_aborted_error(c->core, c->rank, what);
  if (c->async_err != ZE_RESULT_SUCCESS) return ze_fail(c, "zeEventQueryStatus (signal)", c->async_err);
  return UL_OK;
}

static ul_result_t ze_wait_expired(void *arg, int timeout_ms, const char *what) {
  ul_backend_comm_t *c = arg;
  return ulbu_timeout_error(c->core, c->rank, what, timeout_ms);
}

void ze_waiter_init(ul_backend_comm_t *c) {
  c->waiter = ulbu_gpu_waiter(c, ze_wait_check, ze_wait_expired, c->timeout_ms);
}

/* Publish *mine, then read every rank's slot into all[] (collective). */
ul_result_t ze_allgather(ul_backend_comm_t *c, const ze_slot_t *mine, ze_slot_t *all,
                         const char *what) {
  return ulbu_board_allgather(&c->board, mine, all, sizeof(*mine), what);
}


/* Lists and cells with an undelivered signal seen so far in one ze_progress pass. */
#define ZE_MAX_STALLED 32

/* Deliver completed signals. A signal is delivered after every signal issued before it
 * on the same list (a count promises all earlier work of that list) and every signal
 * issued before it to the same cell from any list (a count of k promises the first k
 * signals, as the generic layer's channels, which use one sequence across streams,
 * rely on). Nothing else orders them: a stalled list holds back only its own signals
 * and those that share a cell with them. */
void ze_progress(ul_backend_comm_t *c) {
  ze_command_list_handle_t slist[ZE_MAX_STALLED];
  _Atomic uint64_t *scell[ZE_MAX_STALLED];
  int nl = 0, nc = 0;
  pthread_mutex_lock(&c->evlock);
  for (uint64_t i = c->pend_head; i != c->pend_tail; i++) {
    ze_pending_t *p = &c->pend[i % ZE_NEVENTS];
    if (p->done) continue;
    int blocked = 0;
    for (int k = 0; k < nl && !blocked; k++) blocked = slist[k] == p->list;
    for (int k = 0; k < nc && !blocked; k++) blocked = scell[k] == p->cell;
    ze_result_t r = blocked ? ZE_RESULT_NOT_READY : zeEventQueryStatus(c->ev[p->ev]);
    if (r == ZE_RESULT_NOT_READY) {
      int have_l = 0, have_c = 0;
      for (int k = 0; k < nl; k++) have_l |= slist[k] == p->list;
      for (int k = 0; k < nc; k++) have_c |= scell[k] == p->cell;
      if ((!have_l && nl == ZE_MAX_STALLED) || (!have_c && nc == ZE_MAX_STALLED))
        break; /* the rest waits for the next pass */
      if (!have_l) slist[nl++] = p->list;
      if (!have_c) scell[nc++] = p->cell;
      continue;
    }
    if (r != ZE_RESULT_SUCCESS) {
      c->async_err = r;
      break;
    }
    /* Only this rank writes its cell and its signals reach it in issue order. */
    atomic_fetch_add(p->cell, 1);
    zeEventHostReset(c->ev[p->ev]);
    c->ev_free[c->ev_nfree++] = p->ev;
    p->done = 1;
  }
  while (c->pend_head != c->pend_tail && c->pend[c->pend_head % ZE_NEVENTS].done)
    c->pend_head++;
  pthread_mutex_unlock(&c->evlock);
}

int ze_pending_on(ul_backend_comm_t *c, ze_command_list_handle_t list) {
  int any = 0;
  pthread_mutex_lock(&c->evlock);
  for (uint64_t i = c->pend_head; i != c->pend_tail && !any; i++) {
    ze_pending_t *p = &c->pend[i % ZE_NEVENTS];
    any = !p->done && p->list == list;
  }
  pthread_mutex_unlock(&c->evlock);
  return any;
}

/* Queue a signal whose barrier signals event ev. */
void ze_pend_add(ul_backend_comm_t *c, int ev, _Atomic uint64_t *cell,
                        ze_command_list_handle_t list) {
  pthread_mutex_lock(&c->evlock);
  if (c->pend_tail - c->pend_head == ZE_NEVENTS) {
    /* Full of entries delivered behind a stalled one: squeeze the undelivered ones
     * (fewer than ZE_NEVENTS, as ev is not among them) towards the tail, in order. */
    uint64_t w = c->pend_tail;
    for (uint64_t i = c->pend_tail; i-- != c->pend_head;)
      if (!c->pend[i % ZE_NEVENTS].done) c->pend[--w % ZE_NEVENTS] = c->pend[i % ZE_NEVENTS];
    c->pend_head = w;
  }
  ze_pending_t *p = &c->pend[c->pend_tail % ZE_NEVENTS];
  p->ev = ev;
  p->done = 0;
  p->cell = cell;
  p->list = list;
  c->pend_tail++;
  pthread_cond_signal(&c->evcond);
  pthread_mutex_unlock(&c->evlock);
}

void *ze_progress_main(void *arg) {
  ul_backend_comm_t *c = arg;
  for (;;) {
    pthread_mutex_lock(&c->evlock);
    while (!c->stop && c->pend_head == c->pend_tail) pthread_cond_wait(&c->evcond, &c->evlock);
    int stop = c->stop;
    pthread_mutex_unlock(&c->evlock);
    if (stop) break;
    ze_progress(c);
    struct timespec ts = {0, 10000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

typedef struct ze_event_cond {
  ul_backend_comm_t *c;
  int *idx;
} ze_event_cond_t;

static ul_result_t ze_event_poll(void *arg) {
  ze_event_cond_t *x = arg;
  ul_backend_comm_t *c = x->c;
  pthread_mutex_lock(&c->evlock);
  int got = c->ev_nfree > 0;
  if (got) *x->idx = c->ev_free[--c->ev_nfree];
  pthread_mutex_unlock(&c->evlock);
  if (got) return UL_OK;
  ze_progress(c); /* delivering signals frees their events */
  return UL_IN_PROGRESS;
}

ul_result_t ze_event_get(ul_backend_comm_t *c, int *idx) {
  ze_event_cond_t x = {c, idx};
  const ulbu_cond_t cond = {ze_event_poll, NULL, &x};
  return ulbu_wait(&c->waiter, &cond, "waiting for a free completion event", NULL);
}

void ze_event_put(ul_backend_comm_t *c, int idx) {
  pthread_mutex_lock(&c->evlock);
  zeEventHostReset(c->ev[idx]);
  c->ev_free[c->ev_nfree++] = idx;
  pthread_mutex_unlock(&c->evlock);
}

/* The list of s (NULL: the internal one), locked for one operation. */
struct ul_backend_stream *ze_lock(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  struct ul_backend_stream *st = ze_st(c, s);
  pthread_mutex_lock(&st->lock);
  return st;
}

void ze_unlock(struct ul_backend_stream *st) { pthread_mutex_unlock(&st->lock); }

void ze_stream_lock_init(struct ul_backend_stream *st) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&st->lock, &a);
  pthread_mutexattr_destroy(&a);
}

/* Barrier before a command that depends on earlier ones of the list. */
ul_result_t ze_order(ul_backend_comm_t *c, struct ul_backend_stream *st) {
  if (!st->dirty) return UL_OK;
  ze_result_t r = zeCommandListAppendBarrier(st->list, NULL, 0, NULL);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeCommandListAppendBarrier", r);
  st->dirty = 0;
  return UL_OK;
}

ul_result_t ze_copy(ul_backend_comm_t *c, struct ul_backend_stream *st, void *dst,
                           const void *src, size_t bytes, const char *what) {
  ul_result_t rc = ze_order(c, st);
  if (rc != UL_OK) return rc;
  ze_result_t r = zeCommandListAppendMemoryCopy(st->list, dst, src, bytes, NULL, 0, NULL);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, what, r);
  st->dirty = 1;
  st->ops++;
  return UL_OK;
}

typedef struct ze_list_cond {
  ul_backend_comm_t *c;
  ze_event_handle_t ev;
  ze_command_list_handle_t list;
  const char *call; /* a failed query: "zeEventQueryStatus (synchronize)" */
} ze_list_cond_t;

/* The device finished what came before the event. A communicator's own waits (call
 * set) deliver signals meanwhile and say what failed; teardown's drain (call NULL) only
 * learns whether it may free. */
static ul_result_t ze_event_done_poll(void *arg) {
  ze_list_cond_t *x = arg;
  ze_result_t r = zeEventQueryStatus(x->ev);
  if (r == ZE_RESULT_SUCCESS) return UL_OK;
  if (r != ZE_RESULT_NOT_READY)
    return x->call ? ze_fail(x->c, x->call, r) : UL_ERR_BACKEND;
  if (x->call) ze_progress(x->c);
  return UL_IN_PROGRESS;
}

/* Every signal appended to the list so far has been delivered. */
static ul_result_t ze_delivered_poll(void *arg) {
  ze_list_cond_t *x = arg;
  if (!ze_pending_on(x->c, x->list)) return UL_OK;
  ze_progress(x->c);
  return UL_IN_PROGRESS;
}

/* Wait (host) until everything appended to st so far completed and its signals were
 * delivered; one timeout for both. */
ul_result_t ze_list_sync(ul_backend_comm_t *c, struct ul_backend_stream *st, int timeout_ms) {
  int ev;
  ul_result_t rc = ze_event_get(c, &ev);
  if (rc != UL_OK) return rc;
  ze_result_t r = zeCommandListAppendBarrier(st->list, c->ev[ev], 0, NULL);
  if (r != ZE_RESULT_SUCCESS) {
    ze_event_put(c, ev);
    return ze_fail(c, "zeCommandListAppendBarrier (synchronize)", r);
  }
  st->dirty = 0;
  uint64_t ops = st->ops;
  ulbu_waiter_t w = c->waiter;
  w.timeout_ms = timeout_ms;
  ze_list_cond_t x = {c, c->ev[ev], st->list, "zeEventQueryStatus (synchronize)"};
  const ulbu_cond_t done = {ze_event_done_poll, NULL, &x};
  double t0 = ulbu_now_ms();
  if ((rc = ulbu_wait_since(&w, &done, "work on the stream", t0)) != UL_OK)
    return rc; /* the device may still signal this event: never reuse it */
  ze_event_put(c, ev);
  st->done_ops = ops;
  const ulbu_cond_t delivered = {ze_delivered_poll, NULL, &x};
  return ulbu_wait_since(&w, &delivered, "signal delivery", t0);
}

/* NULL stream: run now. */
ul_result_t ze_done(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return s ? UL_OK : ze_list_sync(c, &c->internal, c->timeout_ms);
}

ul_result_t ze_list_create(ul_backend_comm_t *c, ze_command_list_handle_t *out) {
  ze_devinfo_t *d = &ze_devs[c->device];
  ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, d->copy_ordinal, 0, 0,
                                ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
                                ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_result_t r = zeCommandListCreateImmediate(ze_ctx, d->h, &qd, out);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeCommandListCreateImmediate (copy engine)", r);
  return UL_OK;
}

/* Teardown wait: until the device has finished everything appended to list so far,
 * whether or not the communicator was aborted (an abort stops no queued copy), for at
 * most ZE_DRAIN_MAX_MS (the communicator timeout when shorter). 1 when it finished: only
 * then may the list, and the memory its commands touch, be freed. Under objlock: the
 * drain event is one per communicator. */
int ze_list_drain(ul_backend_comm_t *c, ze_command_list_handle_t list) {
  ze_event_handle_t ev = c->ev[ZE_DRAIN_EVENT];
  if (!list || !ev) return 1; /* no drain event: init failed before any command */
  int limit = c->timeout_ms > 0 && c->timeout_ms < ZE_DRAIN_MAX_MS ? c->timeout_ms : ZE_DRAIN_MAX_MS;
  zeEventHostReset(ev);
  if (zeCommandListAppendBarrier(list, ev, 0, NULL) != ZE_RESULT_SUCCESS) return 0;
  /* No abort check and no sentence: teardown only learns whether it may free. */
  ulbu_waiter_t w = ulbu_gpu_waiter(c, NULL, NULL, limit);
  ze_list_cond_t x = {c, ev, list, NULL};
  const ulbu_cond_t done = {ze_event_done_poll, NULL, &x};
  return ulbu_wait(&w, &done, "drain", NULL) == UL_OK;
}

static void ze_stream_link(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  pthread_mutex_lock(&c->objlock);
  s->next = c->streams;
  c->streams = s;
  pthread_mutex_unlock(&c->objlock);
}

static void ze_stream_unlink(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  pthread_mutex_lock(&c->objlock);
  for (ul_backend_stream_t **p = &c->streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&c->objlock);
}

ul_result_t ze_stream_create(ul_backend_comm_t *c, ul_backend_stream_t **out) {
  ul_backend_stream_t *s = calloc(1, sizeof(*s));
  if (!s) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  ul_result_t rc = ze_list_create(c, &s->list);
  if (rc != UL_OK) {
    free(s);
    return rc;
  }
  s->c = c;
  s->owned = 1;
  s->probe = -1;
  ze_stream_lock_init(s);
  ze_stream_link(c, s);
  *out = s;
  return UL_OK;
}

/* native: a ze_command_list_handle_t the caller created as an immediate list on this
 * communicator's device and context (appended commands must execute without a queue). */
ul_result_t ze_stream_wrap(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out) {
  ul_backend_stream_t *s = calloc(1, sizeof(*s));
  if (!s) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  s->c = c;
  s->list = (ze_command_list_handle_t)native;
  s->dirty = 1; /* unknown earlier work of the caller */
  s->probe = -1;
  ze_stream_lock_init(s);
  ze_stream_link(c, s);
  *out = s;
  return UL_OK;
}

ul_result_t ze_stream_synchronize(ul_backend_stream_t *s, int timeout_ms) {
  ze_lock(s->c, s);
  ul_result_t rc = ze_list_sync(s->c, s, timeout_ms);
  ze_unlock(s);
  return rc;
}

static ul_result_t ze_stream_query_locked(ul_backend_stream_t *s);

ul_result_t ze_stream_query(ul_backend_stream_t *s) {
  ze_lock(s->c, s);
  ul_result_t rc = ze_stream_query_locked(s);
  ze_unlock(s);
  return rc;
}

static ul_result_t ze_stream_query_locked(ul_backend_stream_t *s) {
  ul_backend_comm_t *c = s->c;
  if (s->probe >= 0) {
    ze_result_t r = zeEventQueryStatus(c->ev[s->probe]);
    if (r == ZE_RESULT_NOT_READY) return UL_IN_PROGRESS;
    if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeEventQueryStatus (query)", r);
    ze_event_put(c, s->probe);
    s->probe = -1;
    if (s->probe_ops > s->done_ops) s->done_ops = s->probe_ops;
  }
  /* Nothing appended since work was last seen complete (a list we own: no commands of
   * the caller's own in it): only signal delivery can be outstanding. */
  if (s->done_ops == s->ops && (s->owned || s->probe_ops == s->ops)) {
    ze_progress(c);
    return ze_pending_on(c, s->list) ? UL_IN_PROGRESS : UL_OK;
  }
  int ev;
  ul_result_t rc = ze_event_get(c, &ev);
  if (rc != UL_OK) return rc;
  ze_result_t r = zeCommandListAppendBarrier(s->list, c->ev[ev], 0, NULL);
  if (r != ZE_RESULT_SUCCESS) {
    ze_event_put(c, ev);
    return ze_fail(c, "zeCommandListAppendBarrier (query)", r);
  }
  s->dirty = 0;
  s->probe = ev;
  s->probe_ops = s->ops;
  return ze_stream_query_locked(s); /* probe set: one level of recursion at most */
}

ul_result_t ze_stream_destroy(ul_backend_stream_t *s) {
  ul_backend_comm_t *c = s->c;
  ze_lock(c, s);
  ul_result_t rc = c->dead ? UL_OK : ze_list_sync(c, s, c->timeout_ms);
  if (s->probe >= 0 && rc == UL_OK) ze_event_put(c, s->probe);
  ze_unlock(s);
  ze_stream_unlink(c, s);
  if (s->owned) {
    /* After an abort or a timeout the device may still run this list's copies. */
    pthread_mutex_lock(&c->objlock);
    int idle = rc == UL_OK && !c->dead ? 1 : ze_list_drain(c, s->list);
    pthread_mutex_unlock(&c->objlock);
    if (idle) zeCommandListDestroy(s->list);
    else ul_backend_log(UL_LOG_WARN, "ze", "rank %d: a stream's command list is still busy; "
                        "leaked, not destroyed under the device", c->rank);
  }
  pthread_mutex_destroy(&s->lock);
  free(s);
  return rc;
}
