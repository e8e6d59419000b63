/* Public collectives, point to point and groups: validate, then dispatch to the
 * backend's native collective or to the generic algorithm layer, in issue order.
 * The stream handles they run on are in stream_api.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "generic/generic.h"
#include "ul_core.h"

/* ------------------------------------------------------------ turn order */

/* Calls on one communicator run in issue order (ticket). The usual case is that the
 * caller's turn has come: one atomic load, no lock. Only a call that must wait takes the
 * mutex and says so (waiters), and only then does the finishing call lock to wake it. */
typedef struct ul__turn {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int waiters; /* threads in wait_turn's slow path (atomic) */
} ul__turn_t;

void *ul__turn_create(void) {
  ul__turn_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  pthread_mutex_init(&t->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&t->cv, &ca);
  pthread_condattr_destroy(&ca);
  return t;
}

void ul__turn_destroy(void *p) {
  ul__turn_t *t = p;
  if (!t) return;
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  free(t);
}

/* fast: the owner's call (ul__owner_enter), the only thread touching the turn. */
static uint64_t take_ticket(ul_comm_t c, int fast) {
  if (fast) {
    uint64_t t = __atomic_load_n(&c->issue_ticket, __ATOMIC_RELAXED);
    __atomic_store_n(&c->issue_ticket, t + 1, __ATOMIC_RELAXED);
    return t;
  }
  return __atomic_fetch_add(&c->issue_ticket, 1, __ATOMIC_SEQ_CST);
}

static ul_result_t wait_turn(ul_comm_t c, uint64_t ticket) {
  ul__turn_t *t = c->turn;
  if (__atomic_load_n(&c->exec_ticket, __ATOMIC_ACQUIRE) == ticket) return UL_OK;
  pthread_mutex_lock(&t->mu);
  /* seq_cst pairs with end_turn: it either sees us waiting or we see its new ticket */
  __atomic_add_fetch(&t->waiters, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&c->exec_ticket, __ATOMIC_SEQ_CST) != ticket) {
    if (__atomic_load_n(&c->abort_flag, __ATOMIC_ACQUIRE)) {
      __atomic_sub_fetch(&t->waiters, 1, __ATOMIC_SEQ_CST);
      pthread_mutex_unlock(&t->mu);
      return UL_ERR_ABORTED;
    }
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += 20000000L;
    if (dl.tv_nsec >= 1000000000L) {
      dl.tv_sec++;
      dl.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&t->cv, &t->mu, &dl);
  }
  __atomic_sub_fetch(&t->waiters, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&t->mu);
  return UL_OK;
}

static void end_turn(ul_comm_t c, int fast) {
  if (fast) { /* no other thread can be waiting: it would have revoked us first */
    __atomic_store_n(&c->exec_ticket, __atomic_load_n(&c->exec_ticket, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_RELEASE);
    return;
  }
  ul__turn_t *t = c->turn;
  __atomic_add_fetch(&c->exec_ticket, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&t->waiters, __ATOMIC_SEQ_CST) == 0) return;
  /* a waiter holds the mutex from its check until it sleeps: locking here means the
   * broadcast cannot fall between the two */
  pthread_mutex_lock(&t->mu);
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
}

/* End the turn of a call, publishing its record first when it ran (publish). The
 * owner's call (fast) does both with plain stores unless it was revoked meanwhile; a
 * revoking thread waits while owner_crit is set, which covers only these few stores. */
static void end_call_turn(ul_comm_t c, int fast, int publish) {
  int plain = fast && ul__owner_crit_begin(c);
  if (publish) ul__comm_record_call(c, plain);
  end_turn(c, plain);
  if (fast) ul__owner_crit_end(c);
}

/* ul__owner_guard with its sentence. */
static ul_result_t owner_guard(ul_comm_t c, int here) {
  ul_result_t rc = ul__owner_guard(c, here);
  return rc == UL_OK ? rc : ul__comm_set_error(c, rc, UL__OWNER_STUCK, c->config.timeout_ms);
}

/* ------------------------------------------------------------- overrides */

/* A bare name (no "<collective>:") applies to every collective that has that algorithm,
 * as NCCL_ALGO=Ring does; a name no collective has is passed on, so the call refuses it
 * with a sentence naming it. */
static int bare_algo_applies(ul_coll_t coll, const char *name) {
  if (!strcmp(name, "native") || !strcmp(name, "ring") || !strcmp(name, "generic")) return 1;
  if (ul__generic_algo_known(coll, name)) return 1;
  for (int k = 0; k < UL_COLL_COUNT; k++)
    if (ul__generic_algo_known((ul_coll_t)k, name)) return 0;
  return 1;
}

/* getenv("UNILINK_ALGO") without the scan. It is read on every call (tests and the
 * conformance harness change it between calls), but getenv compares every entry of the
 * environment: ~100 under mpirun, 8% of a tiny collective's time. Per thread, remember
 * the array, its length, the last entry and where the variable was: setenv, unsetenv and
 * putenv replace the variable's entry, move entries, append or reallocate, and any of
 * these sends us back to getenv. (A string handed to putenv and then edited in place is
 * not noticed; setenv is how the value is meant to change.) */
extern char **environ;
static const char *algo_env(void) {
  static __thread char **arr, **at;
  static __thread char *entry, *last;
  static __thread size_t len;
  static __thread const char *value;
  char **e = environ;
  if (e && e == arr && e[len] == NULL && (len == 0 || e[len - 1] == last) && (!at || *at == entry))
    return value;
  value = getenv("UNILINK_ALGO");
  arr = e;
  at = NULL;
  entry = last = NULL;
  for (len = 0; e && e[len]; len++)
    if (value && e[len] + sizeof "UNILINK_ALGO=" - 1 == value) at = &e[len], entry = e[len];
  if (len) last = e[len - 1];
  return value;
}

/* UNILINK_ALGO="allreduce:ring,broadcast:native". Returns a static-per-thread copy. */
static const char *algo_override(ul_coll_t coll) {
  static __thread char out[32];
  /* Per collective: skip the registry's lock in the usual case (ALGO is registered with
   * the core parameters, so unilink-info lists it anyway). */
  const char *raw = algo_env();
  if (!raw || !raw[0]) return NULL;
  const char *spec = ul__param_get_str(UL__P_ALGO);
  if (!spec || !spec[0]) return NULL;
  const char *name = ul_coll_name(coll);
  size_t nl = strlen(name);
  const char *p = spec, *bare = NULL;
  size_t bare_len = 0;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len > nl && strncmp(p, name, nl) == 0 && p[nl] == ':' && len - nl - 1 < sizeof out) {
      memcpy(out, p + nl + 1, len - nl - 1);
      out[len - nl - 1] = '\0';
      return out; /* "<collective>:<algorithm>" wins over a bare name */
    }
    if (!bare && len > 0 && len < sizeof out && !memchr(p, ':', len)) bare = p, bare_len = len;
    p += len + (e ? 1 : 0);
  }
  if (!bare) return NULL;
  memcpy(out, bare, bare_len);
  out[bare_len] = '\0';
  return bare_algo_applies(coll, out) ? out : NULL;
}

/* --------------------------------------------------------- check mode */

typedef struct check_rec {
  int32_t coll, dtype, op, root;
  uint64_t count;
} check_rec_t;

static ul_result_t run_coll_now(ul_comm_t c, const ul__coll_args_t *a, ul_backend_stream_t *bs,
                                ul_call_info_t *info);

static ul_result_t check_args(ul_comm_t c, const ul__coll_args_t *a, ul_backend_stream_t *bs) {
  int n = c->nranks;
  check_rec_t mine = {(int32_t)a->coll, (int32_t)a->dtype, (int32_t)a->op, (int32_t)a->root,
                      (uint64_t)a->count};
  if (a->coll != UL_COLL_ALLREDUCE && a->coll != UL_COLL_REDUCE &&
      a->coll != UL_COLL_REDUCE_SCATTER)
    mine.op = -1;
  if (a->coll != UL_COLL_BROADCAST && a->coll != UL_COLL_REDUCE && a->coll != UL_COLL_GATHER &&
      a->coll != UL_COLL_SCATTER)
    mine.root = -1;
  if (a->coll == UL_COLL_BARRIER) mine.dtype = -1, mine.count = 0;
  if (ul__is_vcoll(a->coll)) mine.count = 0; /* counts differ per rank by design */
  check_rec_t *all = calloc((size_t)n, sizeof *all);
  if (!all) return ul__comm_set_error(c, UL_ERR_NO_MEMORY, "check mode: out of memory");
  ul_result_t rc = ul__exchange(c, &mine, all, sizeof mine, bs, 1);
  if (rc == UL_OK) {
    /* Compare with the record most ranks hold (lowest rank on ties), not with our own:
     * every rank then names the same odd one out, the odd rank included. */
    int ref = 0, best = 0;
    for (int r = 0; r < n && best * 2 <= n; r++) {
      int votes = 0;
      for (int q = 0; q < n; q++) votes += memcmp(&all[q], &all[r], sizeof all[r]) == 0;
      if (votes > best) best = votes, ref = r;
    }
    const check_rec_t refrec = all[ref];
    for (int r = 0; r < n; r++) {
      const check_rec_t *o = &all[r];
      const char *what = NULL;
      if (o->coll != refrec.coll) what = "operation";
      else if (o->count != refrec.count) what = "count";
      else if (o->dtype != refrec.dtype) what = "datatype";
      else if (o->op != refrec.op) what = "reduction op";
      else if (o->root != refrec.root) what = "root";
      if (what) {
        char theirs[96], ours[96];
        snprintf(theirs, sizeof theirs, "%s count=%llu dtype=%s op=%s root=%d",
                 ul_coll_name((ul_coll_t)o->coll) ? ul_coll_name((ul_coll_t)o->coll) : "?",
                 (unsigned long long)o->count,
                 o->dtype >= 0 && ul_dtype_name((ul_dtype_t)o->dtype) ? ul_dtype_name((ul_dtype_t)o->dtype) : "-",
                 o->op >= 0 && ul_op_name((ul_op_t)o->op) ? ul_op_name((ul_op_t)o->op) : "-", o->root);
        const check_rec_t *f = &refrec;
        snprintf(ours, sizeof ours, "%s count=%llu dtype=%s op=%s root=%d",
                 ul_coll_name((ul_coll_t)f->coll) ? ul_coll_name((ul_coll_t)f->coll) : "?",
                 (unsigned long long)f->count,
                 f->dtype >= 0 && ul_dtype_name((ul_dtype_t)f->dtype) ? ul_dtype_name((ul_dtype_t)f->dtype) : "-",
                 f->op >= 0 && ul_op_name((ul_op_t)f->op) ? ul_op_name((ul_op_t)f->op) : "-", f->root);
        rc = ul__comm_set_error(c, UL_ERR_MISMATCH,
                                "check mode: %s differs on rank %d (%s) from rank %d (%s, as on "
                                "%d of %d ranks)",
                                what, r, theirs, ref, ours, best, n);
        break;
      }
    }
  }
  free(all);
  return rc;
}

/* -------------------------------------------------------------- execution */

static ul_result_t native_coll(ul_comm_t c, const ul__coll_args_t *a, ul_backend_stream_t *bs,
                               int *handled) {
  const ul_backend_coll_ops_t *k = &c->backend->coll;
  ul_backend_comm_t *b = c->bcomm;
  *handled = 1;
  switch (a->coll) {
    case UL_COLL_ALLREDUCE:
      if (k->allreduce) return k->allreduce(b, a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, bs);
      break;
    case UL_COLL_BROADCAST:
      if (k->broadcast) return k->broadcast(b, a->sendbuf, a->recvbuf, a->count, a->dtype, a->root, bs);
      break;
    case UL_COLL_REDUCE:
      if (k->reduce)
        return k->reduce(b, a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, a->root, bs);
      break;
    case UL_COLL_ALLGATHER:
      if (k->allgather) return k->allgather(b, a->sendbuf, a->recvbuf, a->count, a->dtype, bs);
      break;
    case UL_COLL_REDUCE_SCATTER:
      if (k->reduce_scatter)
        return k->reduce_scatter(b, a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, bs);
      break;
    case UL_COLL_ALLTOALL:
      if (k->alltoall) return k->alltoall(b, a->sendbuf, a->recvbuf, a->count, a->dtype, bs);
      break;
    case UL_COLL_GATHER:
      if (k->gather) return k->gather(b, a->sendbuf, a->recvbuf, a->count, a->dtype, a->root, bs);
      break;
    case UL_COLL_SCATTER:
      if (k->scatter) return k->scatter(b, a->sendbuf, a->recvbuf, a->count, a->dtype, a->root, bs);
      break;
    case UL_COLL_BARRIER:
      if (k->barrier) return k->barrier(b, bs);
      break;
    case UL_COLL_ALLTOALLV:
      if (k->alltoallv)
        return k->alltoallv(b, a->sendbuf, a->scounts, a->sdispls, a->recvbuf, a->rcounts,
                            a->rdispls, a->dtype, bs);
      break;
    case UL_COLL_ALLGATHERV:
      if (k->allgatherv)
        return k->allgatherv(b, a->sendbuf, a->count, a->recvbuf, a->rcounts, a->rdispls,
                             a->dtype, bs);
      break;
    default: break;
  }
  *handled = 0;
  return UL_ERR_UNSUPPORTED;
}

static int has_native(ul_comm_t c, ul_coll_t coll) {
  const ul_backend_coll_ops_t *k = &c->backend->coll;
  switch (coll) {
    case UL_COLL_ALLREDUCE: return k->allreduce != NULL;
    case UL_COLL_BROADCAST: return k->broadcast != NULL;
    case UL_COLL_REDUCE: return k->reduce != NULL;
    case UL_COLL_ALLGATHER: return k->allgather != NULL;
    case UL_COLL_REDUCE_SCATTER: return k->reduce_scatter != NULL;
    case UL_COLL_ALLTOALL: return k->alltoall != NULL;
    case UL_COLL_GATHER: return k->gather != NULL;
    case UL_COLL_SCATTER: return k->scatter != NULL;
    case UL_COLL_BARRIER: return k->barrier != NULL;
    case UL_COLL_ALLTOALLV: return k->alltoallv != NULL;
    case UL_COLL_ALLGATHERV: return k->allgatherv != NULL;
    default: return 0;
  }
}

/* Run a collective now (caller holds the turn). */
static ul_result_t run_coll_now(ul_comm_t c, const ul__coll_args_t *a, ul_backend_stream_t *bs,
                                ul_call_info_t *info) {
  const char *forced = algo_override(a->coll);
  int native = has_native(c, a->coll);
  info->fallback = 0;
  if (forced && strcmp(forced, "native") == 0) {
    if (!native)
      return ul__comm_set_error(c, UL_ERR_UNSUPPORTED,
                                "UNILINK_ALGO asks for the native %s, but backend %s has none",
                                ul_coll_name(a->coll), c->backend->ops.name);
    forced = NULL;
  } else if (forced) {
    native = 0;
  }
  if (native) {
    int handled = 0;
    ul__copy_str(info->algorithm, sizeof info->algorithm, "native");
    snprintf(info->reason, sizeof info->reason, "backend %s implements %s natively",
             c->backend->ops.name, ul_coll_name(a->coll));
    ul_result_t rc = native_coll(c, a, bs, &handled);
    if (rc != UL_ERR_UNSUPPORTED || !ul__generic_available(c)) return rc;
    /* The backend declined this call (e.g. a dtype it lacks): fall back, and say why. */
    char cause[160];
    snprintf(cause, sizeof cause, "%.150s", c->last_error);
    info->fallback = 1;
    rc = ul__generic_collective(c, a, NULL, bs, info);
    char r2[192];
    snprintf(r2, sizeof r2, "native %s declined (%.120s); generic fallback", ul_coll_name(a->coll),
             cause);
    ul__copy_str(info->reason, sizeof info->reason, r2);
    return rc;
  }
  return ul__generic_collective(c, a, forced, bs, info);
}


/* Staged exchange for device-memory backends: the host data goes to device scratch, an
 * in-place allgather runs there, the result comes back, all ordered on bs. */
static ul_result_t exchange_staged(ul_comm_t c, const void *mine, void *all, size_t bytes,
                                   ul_backend_stream_t *bs, ul_call_info_t *info) {
  const ul_backend_ops_t *o = &c->backend->ops;
  size_t total = bytes * (size_t)c->nranks;
  if (c->xchg_cap < total) {
    ul__exchange_free(c);
    void *p = NULL;
    UL_CHECK(o->mem_alloc(c->bcomm, total, &p));
    c->xchg_buf = p;
    c->xchg_cap = total;
  }
  char *scratch = c->xchg_buf;
  UL_CHECK(o->mem_copy(c->bcomm, scratch + (size_t)c->rank * bytes, mine, bytes, bs));
  ul__coll_args_t ag = UL__COLL_ARGS(UL_COLL_ALLGATHER, scratch + (size_t)c->rank * bytes, scratch, bytes,
                        UL_UINT8, UL_SUM, 0, 0);
  UL_CHECK(run_coll_now(c, &ag, bs, info));
  return o->mem_copy(c->bcomm, all, scratch, total, bs);
}

ul_result_t ul__exchange(ul_comm_t c, const void *mine, void *all, size_t bytes,
                         ul_backend_stream_t *bs, int in_turn) {
  ul_call_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ul_result_t rc = UL_OK;
  if (!in_turn) UL_CHECK(owner_guard(c, 1));
  __atomic_add_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  if (!in_turn) {
    rc = wait_turn(c, take_ticket(c, 0));
    if (rc != UL_OK) {
      __atomic_sub_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
      return ul__comm_set_error(c, rc, "exchange: aborted before it ran");
    }
  }
  if (c->backend->caps.flags & UL_BACKEND_HOST_MEMORY) {
    ul__coll_args_t ag = UL__COLL_ARGS(UL_COLL_ALLGATHER, mine, all, bytes, UL_UINT8, UL_SUM, 0, 0);
    rc = run_coll_now(c, &ag, bs, &info);
  } else {
    rc = exchange_staged(c, mine, all, bytes, bs, &info);
  }
  /* The caller reads the result on the host: a device queue must have finished it. */
  if (rc == UL_OK && bs && !(c->backend->caps.flags & UL_BACKEND_HOST_STREAMS))
    rc = c->backend->ops.stream_synchronize(bs, c->config.timeout_ms);
  if (!in_turn) {
    if (ul__fatal_error(rc)) c->sticky = rc;
    end_turn(c, 0);
  }
  __atomic_sub_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  return rc;
}

/* The turn holder's record (ul__comm_call_record), cleared field by field: what follows
 * a string's terminator is never read. */
static ul_call_info_t *call_info_init(ul_comm_t c, uint64_t seq, ul_coll_t coll) {
  ul_call_info_t *info = ul__comm_call_record(c);
  info->struct_size = sizeof *info;
  info->sequence = seq;
  info->coll = coll;
  info->algorithm[0] = info->reason[0] = '\0';
  info->fallback = 0;
  info->bytes = 0;
  info->modeled_us = 0;
  /* backend and selection are the communicator's: ul_comm_last_call fills them in. A
   * fixed-size copy, no strlen: props.path is terminated within its 32 bytes. */
  _Static_assert(sizeof info->path == sizeof c->props.path, "path sizes differ");
  memcpy(info->path, c->props.path, sizeof info->path);
  return info;
}

/* End of an operation's turn: record what ran (the backend may amend it), or make a
 * fatal error sticky. */
static ul_result_t finish_call(ul_comm_t c, ul_result_t rc, ul_call_info_t *info, int fast) {
  ul__flight_end(c, rc, info);
  if (rc == UL_ERR_TIMEOUT) {
    /* Say what this rank did last: a peer's file or sentence shows where it stopped. */
    char recent[256], why[sizeof c->last_error];
    ul__flight_summary(c, 3, recent, sizeof recent);
    snprintf(why, sizeof why, "%s", c->last_error);
    char *tail = strstr(why, " [UL_ERR_TIMEOUT]");
    if (tail) *tail = '\0';
    char *head = strstr(why, "): "); /* drop the "rank r/n (backend): " prefix set again */
    ul__comm_set_error(c, rc, "%s; recent here: %s", head ? head + 3 : why, recent);
    ul__flight_dump(c);
  }
  if (rc == UL_OK && c->annotates) c->backend->ops.annotate_call(c->bcomm, info);
  else if (ul__fatal_error(rc)) c->sticky = rc;
  end_call_turn(c, fast, rc == UL_OK);
  return rc;
}

typedef struct coll_task {
  ul_comm_t comm;
  ul__coll_args_t args;
  uint64_t ticket;
  ul_backend_stream_t *bs;
  int fast; /* the owner's call on its own thread (ul__owner_enter) */
} coll_task_t;

static ul_result_t execute_coll(coll_task_t *t) {
  ul_comm_t c = t->comm;
  ul_result_t rc = wait_turn(c, t->ticket);
  if (rc != UL_OK) return ul__comm_set_error(c, rc, "%s: aborted before it ran", ul_coll_name(t->args.coll));
  uint64_t seq = ++c->seq;
  ul_call_info_t *info = call_info_init(c, seq, t->args.coll);
  size_t es = t->args.coll == UL_COLL_BARRIER ? 0 : ul_dtype_size(t->args.dtype);
  info->bytes = (ul__is_vcoll(t->args.coll) ? ul__vcoll_max_block(&t->args, c->nranks)
                                            : t->args.count) * es;
  if (c->sticky != UL_OK) {
    rc = c->sticky;
    ul__comm_set_error(c, rc, "%s #%llu refused: the communicator is in error state (%s); abort "
                       "or destroy it", ul_coll_name(t->args.coll), (unsigned long long)seq,
                       ul_result_name(rc));
    end_call_turn(c, t->fast, 0);
    return rc;
  }
  ul__flight_begin(c, seq, t->args.coll, info->bytes);
  if (c->config.check) rc = check_args(c, &t->args, t->bs);
  if (rc == UL_OK) rc = run_coll_now(c, &t->args, t->bs, info);
  if (rc == UL_OK) ul__fault_after_coll(c, &t->args); /* no-op outside test builds */
  if (rc == UL_OK) {
    UL_TRACE("COLL", "%s #%llu %zu B on %s: %s (%s)", ul_coll_name(t->args.coll),
             (unsigned long long)seq, info->bytes, c->backend->ops.name, info->algorithm, info->reason);
  }
  return finish_call(c, rc, info, t->fast);
}

static ul_result_t coll_task_fn(void *arg) {
  coll_task_t *t = arg;
  ul_comm_t c = t->comm;
  ul_result_t rc;
  if (t->fast) { /* owner_busy, set by ul__owner_enter, is in_flight's part here */
    rc = execute_coll(t);
    ul__owner_leave(c);
  } else {
    __atomic_add_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
    rc = execute_coll(t);
    __atomic_sub_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  }
  free(t->args.vblock);
  return rc;
}

/* --------------------------------------------------------------- groups */

typedef struct group_item {
  int is_coll;
  ul_comm_t comm;
  ul_stream_t stream;
  ul__coll_args_t args;  /* collectives */
  ul__p2p_op_t p2p;      /* send/recv */
  ul_dtype_t dtype;
  size_t count;
} group_item_t;

static __thread int group_depth;
static __thread group_item_t *group_items;
static __thread int group_n, group_cap;
static __thread ul_result_t group_error;

/* The per-thread list is freed when its thread exits. */
static pthread_key_t group_key;
static pthread_once_t group_key_once = PTHREAD_ONCE_INIT;
static void group_key_free(void *p) { free(p); }
static void group_key_create(void) { pthread_key_create(&group_key, group_key_free); }

static ul_result_t group_append(const group_item_t *it) {
  if (group_n == group_cap) {
    int cap = group_cap ? group_cap * 2 : 16;
    if (cap > UL__MAX_GROUP_OPS) return UL_ERR_NO_MEMORY;
    group_item_t *p = realloc(group_items, (size_t)cap * sizeof *p);
    if (!p) return UL_ERR_NO_MEMORY;
    group_items = p;
    group_cap = cap;
    pthread_once(&group_key_once, group_key_create);
    pthread_setspecific(group_key, p);
  }
  group_items[group_n++] = *it;
  return UL_OK;
}

/* A batch: consecutive items of one communicator, run under one ticket. */
typedef struct batch_task {
  ul_comm_t comm;
  uint64_t ticket;
  ul_backend_stream_t *bs;
  int n;
  group_item_t *items; /* owned */
} batch_task_t;

static ul_result_t run_p2p_native(ul_comm_t c, group_item_t *it, int n, ul_backend_stream_t *bs) {
  const ul_backend_ops_t *o = &c->backend->ops;
  ul_result_t rc = o->group_start(c->bcomm);
  if (rc == UL_ERR_UNSUPPORTED) rc = UL_OK; /* a backend without group brackets */
  if (rc != UL_OK) return rc;
  for (int i = 0; i < n && rc == UL_OK; i++) {
    if (it[i].p2p.is_send)
      rc = o->send(c->bcomm, it[i].p2p.buf, it[i].count, it[i].dtype, it[i].p2p.peer, bs);
    else
      rc = o->recv(c->bcomm, it[i].p2p.buf, it[i].count, it[i].dtype, it[i].p2p.peer, bs);
  }
  ul_result_t rc2 = o->group_end(c->bcomm, bs);
  if (rc == UL_OK && rc2 != UL_ERR_UNSUPPORTED) rc = rc2;
  return rc;
}

static ul_result_t execute_batch(batch_task_t *t) {
  ul_comm_t c = t->comm;
  ul_result_t rc = wait_turn(c, t->ticket);
  if (rc != UL_OK) return ul__comm_set_error(c, rc, "group: aborted before it ran");
  uint64_t seq = ++c->seq;
  if (c->sticky != UL_OK) {
    rc = ul__comm_set_error(c, c->sticky, "group #%llu refused: communicator in error state",
                            (unsigned long long)seq);
    end_turn(c, 0);
    return rc;
  }
  ul__flight_begin(c, seq, UL_COLL_SENDRECV, 0);
  int native_p2p = !ul__op_is_stub((const void *)c->backend->ops.send);
  for (int i = 0; i < t->n && rc == UL_OK;) {
    if (t->items[i].is_coll) {
      ul_call_info_t info;
      memset(&info, 0, sizeof info);
      info.struct_size = sizeof info;
      rc = run_coll_now(c, &t->items[i].args, t->bs, &info);
      i++;
      continue;
    }
    int j = i;
    while (j < t->n && !t->items[j].is_coll) j++;
    if (native_p2p) {
      rc = run_p2p_native(c, &t->items[i], j - i, t->bs);
    } else {
      ul__p2p_op_t *ops = calloc((size_t)(j - i), sizeof *ops);
      if (!ops) rc = ul__comm_set_error(c, UL_ERR_NO_MEMORY, "group: out of memory");
      else {
        for (int k = i; k < j; k++) ops[k - i] = t->items[k].p2p;
        rc = ul__generic_p2p(c, ops, j - i, t->bs);
        free(ops);
      }
    }
    i = j;
  }
  ul_call_info_t *info = call_info_init(c, seq, UL_COLL_SENDRECV);
  if (rc == UL_OK) {
    snprintf(info->algorithm, sizeof info->algorithm, "%s", native_p2p ? "native" : "channels");
    snprintf(info->reason, sizeof info->reason, "%d operation(s) in one group", t->n);
    for (int i = 0; i < t->n; i++)
      if (!t->items[i].is_coll && t->items[i].p2p.is_send) info->bytes += t->items[i].p2p.bytes;
  }
  return finish_call(c, rc, info, 0);
}

/* Free items and the count copies of the v-collectives among them. */
static void items_free(group_item_t *items, int n, int free_array) {
  for (int i = 0; i < n; i++) free(items[i].args.vblock);
  if (free_array) free(items);
}

static ul_result_t batch_task_fn(void *arg) {
  batch_task_t *t = arg;
  ul_comm_t c = t->comm;
  __atomic_add_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  ul_result_t rc = execute_batch(t);
  __atomic_sub_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  items_free(t->items, t->n, 1);
  return rc;
}

static void *batch_thread(void *arg) {
  batch_task_t *t = arg;
  ul_result_t rc = batch_task_fn(t);
  return (void *)(intptr_t)rc;
}

static ul_backend_stream_t *bstream_of(ul_stream_t s) { return s ? s->bstream : NULL; }

/* Enqueue a prepared batch on its stream, or run it now. */
static ul_result_t submit_batch(batch_task_t *t, ul_stream_t stream) {
  if (stream && stream->host) {
    ul_result_t rc = ul__host_stream_enqueue(stream->host, batch_task_fn, t, sizeof *t);
    if (rc != UL_OK) items_free(t->items, t->n, 1);
    return rc;
  }
  return batch_task_fn(t);
}

UL_API ul_result_t ul_group_start(void) {
  if (group_depth >= 64)
    return ul__set_thread_error(UL_ERR_INVALID_USAGE, "ul_group_start: groups nested deeper than 64");
  if (group_depth == 0) {
    group_n = 0;
    group_error = UL_OK;
  }
  group_depth++;
  return UL_OK;
}

UL_API ul_result_t ul_group_end(void) {
  if (group_depth == 0)
    return ul__set_thread_error(UL_ERR_INVALID_USAGE, "ul_group_end without ul_group_start");
  if (--group_depth > 0) return UL_OK;
  ul_result_t rc = group_error;
  int n = group_n;
  group_n = 0;
  if (rc != UL_OK) items_free(group_items, n, 0);
  if (rc != UL_OK || n == 0) return rc;
  /* One batch per communicator (items keep their issue order within it). */
  int nb = 0;
  ul_comm_t comms[256];
  for (int i = 0; i < n; i++) {
    int k;
    for (k = 0; k < nb; k++)
      if (comms[k] == group_items[i].comm) break;
    if (k == nb) {
      if (nb == 256) {
        items_free(group_items, n, 0);
        return ul__set_thread_error(UL_ERR_INVALID_USAGE, "ul_group_end: more than 256 communicators in one group");
      }
      comms[nb++] = group_items[i].comm;
    }
  }
  batch_task_t *tasks = calloc((size_t)nb, sizeof *tasks);
  ul_stream_t *streams = calloc((size_t)nb, sizeof *streams);
  pthread_t *th = calloc((size_t)nb, sizeof *th);
  if (!tasks || !streams || !th) {
    items_free(group_items, n, 0);
    free(tasks), free(streams), free(th);
    return ul__set_thread_error(UL_ERR_NO_MEMORY, "ul_group_end: out of memory");
  }
  for (int k = 0; k < nb; k++) {
    tasks[k].comm = comms[k];
    tasks[k].items = calloc((size_t)n, sizeof(group_item_t));
    if (!tasks[k].items) rc = UL_ERR_NO_MEMORY;
  }
  for (int i = 0; i < n && rc == UL_OK; i++)
    for (int k = 0; k < nb; k++)
      if (tasks[k].comm == group_items[i].comm) {
        if (tasks[k].n == 0) streams[k] = group_items[i].stream;
        else if (streams[k] != group_items[i].stream)
          rc = ul__comm_set_error(comms[k], UL_ERR_INVALID_ARG,
                                  "ul_group_end: operations of one communicator in a group must "
                                  "use one stream");
        tasks[k].items[tasks[k].n++] = group_items[i];
      }
  /* Several communicators driven by this one thread must progress together (one
   * process driving several ranks): run NULL-stream batches on helper threads. */
  int need_threads = 0;
  for (int k = 0; k < nb; k++)
    if (!(streams[k] && streams[k]->host)) need_threads++;
  /* Before any ticket: a ticket taken and never run would stop the communicator. */
  for (int k = 0; k < nb && rc == UL_OK; k++)
    rc = owner_guard(comms[k], !(streams[k] && streams[k]->host) && need_threads <= 1);
  if (rc != UL_OK) {
    items_free(group_items, n, 0); /* the tasks' items are shallow copies */
    for (int k = 0; k < nb; k++) free(tasks[k].items);
    free(tasks), free(streams), free(th);
    return rc;
  }
  for (int k = 0; k < nb; k++) {
    tasks[k].ticket = take_ticket(comms[k], 0);
    tasks[k].bs = bstream_of(streams[k]);
  }
  for (int k = 0; k < nb; k++) {
    ul_result_t r;
    if (streams[k] && streams[k]->host) r = submit_batch(&tasks[k], streams[k]);
    else if (need_threads > 1) {
      r = pthread_create(&th[k], NULL, batch_thread, &tasks[k]) == 0 ? UL_OK : UL_ERR_SYSTEM;
      if (r != UL_OK) items_free(tasks[k].items, tasks[k].n, 1);
    } else
      r = submit_batch(&tasks[k], streams[k]);
    if (r != UL_OK && rc == UL_OK) rc = r;
  }
  for (int k = 0; k < nb; k++)
    if (th[k]) {
      void *ret;
      pthread_join(th[k], &ret);
      ul_result_t r = (ul_result_t)(intptr_t)ret;
      if (r != UL_OK && rc == UL_OK) rc = r;
    }
  for (int k = 0; k < nb && rc == UL_OK; k++)
    if (streams[k] && streams[k] == __atomic_load_n(&comms[k]->nb_stream, __ATOMIC_ACQUIRE))
      rc = UL_IN_PROGRESS; /* nonblocking */
  free(tasks), free(streams), free(th);
  return rc;
}

/* ----------------------------------------------------------- entry points */

/* Nonblocking mode (config.blocking = 0): an operation without a stream goes on the
 * communicator's own, created on first use, and the call says UL_IN_PROGRESS. */
static pthread_mutex_t nb_stream_lock = PTHREAD_MUTEX_INITIALIZER;
static ul_result_t nb_stream_of(ul_comm_t c, ul_stream_t *stream, int *queued) {
  *queued = 0;
  if (*stream || c->config.blocking) return UL_OK;
  /* Published with one atomic store: ul_comm_get_async_error reads it from any thread. */
  pthread_mutex_lock(&nb_stream_lock);
  ul_stream_t s = __atomic_load_n(&c->nb_stream, __ATOMIC_ACQUIRE);
  ul_result_t rc = UL_OK;
  if (!s && (rc = ul_stream_create(c, &s)) == UL_OK)
    __atomic_store_n(&c->nb_stream, s, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&nb_stream_lock);
  UL_CHECK(rc);
  *stream = s;
  *queued = 1;
  return UL_OK;
}

static ul_result_t submit_coll_on(ul_comm_t comm, const ul__coll_args_t *a, ul_stream_t stream);

ul_result_t ul__submit_coll(ul_comm_t comm, const ul__coll_args_t *a, ul_stream_t stream) {
  UL_CHECK(ul__validate_coll(comm, a, stream));
  int queued = 0;
  UL_CHECK(nb_stream_of(comm, &stream, &queued));
  ul_result_t rc = submit_coll_on(comm, a, stream);
  return rc == UL_OK && queued && group_depth == 0 ? UL_IN_PROGRESS : rc;
}

static ul_result_t submit_coll_on(ul_comm_t comm, const ul__coll_args_t *a, ul_stream_t stream) {
  /* The arguments are copied once, into the task (a copy is 88 bytes on every call). */
  coll_task_t t = {.comm = comm, .args = *a};
  ul__coll_args_t *own = &t.args;
  if (ul__is_vcoll(a->coll)) UL_CHECK(ul__vcoll_own(comm, own));
  if (group_depth > 0) {
    group_item_t it;
    memset(&it, 0, sizeof it);
    it.is_coll = 1;
    it.comm = comm;
    it.stream = stream;
    it.args = *own;
    ul_result_t rc = group_append(&it);
    if (rc != UL_OK) {
      free(own->vblock);
      group_error = ul__comm_set_error(comm, rc, "group: too many operations");
    }
    return rc;
  }
  int here = !(stream && stream->host);
  ul_result_t grc = owner_guard(comm, here);
  if (grc != UL_OK) {
    free(own->vblock);
    return grc;
  }
  t.bs = bstream_of(stream);
  t.fast = here && ul__owner_enter(comm);
  t.ticket = take_ticket(comm, t.fast);
  if (t.fast) ul__owner_crit_end(comm);
  if (stream && stream->host) {
    ul_result_t rc = ul__host_stream_enqueue(stream->host, coll_task_fn, &t, sizeof t);
    if (rc != UL_OK) {
      free(own->vblock);
      return ul__comm_set_error(comm, rc, "%s: cannot enqueue", ul_coll_name(a->coll));
    }
    return UL_OK;
  }
  return coll_task_fn(&t);
}

static ul_result_t p2p_call(int is_send, void *buf, size_t count, ul_dtype_t dtype, int peer,
                            ul_comm_t comm, ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_SENDRECV, buf, NULL, count, dtype, UL_SUM, 0, peer);
  ul_result_t rc = ul__validate_coll(comm, &a, stream);
  if (rc != UL_OK) return rc; /* an argument error fails this call only, not the group */
  int queued = 0;
  UL_CHECK(nb_stream_of(comm, &stream, &queued));
  group_item_t it;
  memset(&it, 0, sizeof it);
  it.comm = comm;
  it.stream = stream;
  it.p2p.is_send = is_send;
  it.p2p.buf = buf;
  it.p2p.bytes = count * ul_dtype_size(dtype);
  it.p2p.peer = peer;
  it.dtype = dtype;
  it.count = count;
  int own_group = group_depth == 0;
  if (own_group) UL_CHECK(ul_group_start());
  rc = group_append(&it);
  if (rc != UL_OK && group_error == UL_OK)
    group_error = ul__comm_set_error(comm, rc, "group: more than %d operations", UL__MAX_GROUP_OPS);
  if (own_group) {
    ul_result_t r2 = ul_group_end();
    if (rc == UL_OK) rc = r2;
  }
  return rc;
}

UL_API ul_result_t ul_send(const void *buf, size_t count, ul_dtype_t dtype, int peer,
                           ul_comm_t comm, ul_stream_t stream) {
  return p2p_call(1, (void *)buf, count, dtype, peer, comm, stream);
}

UL_API ul_result_t ul_recv(void *buf, size_t count, ul_dtype_t dtype, int peer, ul_comm_t comm,
                           ul_stream_t stream) {
  return p2p_call(0, buf, count, dtype, peer, comm, stream);
}
