/* nccl backend: errors, the comm's reference count and device guard, and every wait
 * (nonblocking NCCL polled with the timeout and the abort flag). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "nccl_internal.h"

/* ------------------------------------------------------------------ errors */

ul_result_t ulnccl_fail(ul_backend_comm_t *c, const char *call, ncclResult_t rc) {
  char buf[448];
  ulnccl_format_error(buf, sizeof(buf), call, rc, ncclGetErrorString(rc),
                      c && c->nc ? ncclGetLastError(c->nc) : ncclGetLastError(NULL));
  ul_result_t r = ulnccl_result(rc);
  if (c && r != UL_ERR_INVALID_ARG) c->failed = 1; /* NCCL: everything else is fatal */
  return ul_backend_set_error(c ? c->core : NULL, r, "rank %d: %s", c ? c->rank : -1, buf);
}

/* The communicator cannot run anything any more (async error, timeout): remember why,
 * so later calls fail at once with the same sentence instead of hanging in NCCL. */
ul_result_t ulnccl_break(ul_backend_comm_t *c, ul_result_t rc) {
  if (!c->broken) {
    snprintf(c->broken_msg, sizeof(c->broken_msg), "%s", ul_comm_last_error(c->core));
    c->broken_rc = rc;
    __atomic_store_n(&c->broken, 1, __ATOMIC_SEQ_CST);
  }
  c->failed = 1;
  return rc;
}

ul_result_t ulnccl_fail_async(ul_backend_comm_t *c, const char *call, ncclResult_t rc) {
  return ulnccl_break(c, ulnccl_fail(c, call, rc));
}

ul_result_t ulnccl_cuda_fail(ul_backend_comm_t *c, const char *call, cudaError_t e) {
  return ulgpu_fail(c ? c->core : NULL, "nccl backend", call, e);
}

/* ------------------------------------------------- lifetime and current device */

void ulnccl_comm_release_memory(ul_backend_comm_t *c) {
  pthread_cond_destroy(&c->cond);
  pthread_mutex_destroy(&c->lock);
  free(c->idents);
  free(c);
}

void ulnccl_ref(ul_backend_comm_t *c) { __atomic_add_fetch(&c->refs, 1, __ATOMIC_SEQ_CST); }

void ulnccl_unref(ul_backend_comm_t *c) {
  if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_SEQ_CST) == 0) ulnccl_comm_release_memory(c);
}

ulnccl_guard_t ulnccl_enter(ul_backend_comm_t *c) {
  ulnccl_guard_t g = {c, -1};
  ulnccl_ref(c);
  __atomic_add_fetch(&c->users, 1, __ATOMIC_SEQ_CST);
  if (cudaGetDevice(&g.prev) != cudaSuccess) g.prev = -1;
  if (g.prev != c->device) cudaSetDevice(c->device);
  return g;
}

void ulnccl_leave(ulnccl_guard_t *g) {
  if (g->prev >= 0 && g->prev != g->c->device) cudaSetDevice(g->prev);
  __atomic_sub_fetch(&g->c->users, 1, __ATOMIC_SEQ_CST);
  ulnccl_unref(g->c);
}

/* ----------------------------------------------------------------- waiting */

int ulnccl_aborted(ul_backend_comm_t *c) {
  return __atomic_load_n(&c->dead, __ATOMIC_SEQ_CST) || (c->abort_flag && *c->abort_flag);
}

ul_result_t ulnccl_check_abort(ul_backend_comm_t *c, const char *what) {
  if (ulnccl_aborted(c))
    return ul_backend_set_error(c->core, UL_ERR_ABORTED, "rank %d: %s: communicator was aborted",
                                c->rank, what);
  return UL_OK;
}

/* Entry check of every op that reaches NCCL: aborted or broken communicators fail now. */
ul_result_t ulnccl_usable(ul_backend_comm_t *c, const char *what) {
  ul_result_t a = ulnccl_check_abort(c, what);
  if (a != UL_OK) return a;
  if (__atomic_load_n(&c->broken, __ATOMIC_SEQ_CST))
    return ul_backend_set_error(c->core, c->broken_rc,
                                "rank %d: %s refused: the communicator failed earlier (%s); "
                                "destroy or abort it",
                                c->rank, what, c->broken_msg);
  return UL_OK;
}

ul_result_t ulnccl_timeout(ul_backend_comm_t *c, const char *what, int timeout_ms) {
  ul_backend_set_error(c->core, UL_ERR_TIMEOUT,
                       "rank %d: %s did not complete within %d ms (a peer did not call the "
                       "matching operation, or did not join?); abort the communicator",
                       c->rank, what, timeout_ms);
  return ulnccl_break(c, UL_ERR_TIMEOUT);
}

static ul_result_t ulnccl_wait_check(void *arg, double elapsed_ms, const char *what) {
  (void)elapsed_ms;
  return ulnccl_check_abort(arg, what);
}

static ul_result_t ulnccl_wait_expired(void *arg, int timeout_ms, const char *what) {
  return ulnccl_timeout(arg, what, timeout_ms);
}

typedef struct ulnccl_ready_cond {
  ul_backend_comm_t *c;
  ncclComm_t nc;
  const char *call;
} ulnccl_ready_cond_t;

static ul_result_t ulnccl_ready_poll(void *arg) {
  ulnccl_ready_cond_t *x = arg;
  ncclResult_t st = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(x->nc, &st);
  if (r != ncclSuccess) return ulnccl_fail_async(x->c, "ncclCommGetAsyncError", r);
  if (st == ncclSuccess) return UL_OK;
  if (st != ncclInProgress) return ulnccl_fail_async(x->c, x->call, st);
  return UL_IN_PROGRESS;
}

/* Nonblocking NCCL: after a call returned ncclInProgress (or an init), poll the
 * communicator's state until it leaves ncclInProgress, honouring timeout and abort. */
ul_result_t ulnccl_wait_ready(ul_backend_comm_t *c, ncclComm_t nc, const char *call) {
  ulbu_waiter_t w = ulbu_gpu_waiter(c, ulnccl_wait_check, ulnccl_wait_expired, c->timeout_ms);
  ulnccl_ready_cond_t x = {c, nc, call};
  const ulbu_cond_t cond = {ulnccl_ready_poll, NULL, &x};
  return ulbu_wait(&w, &cond, call, NULL);
}

/* NCCL's asynchronous error of the comm: a fatal one breaks the communicator. */
ul_result_t ulnccl_async_check(ul_backend_comm_t *c) {
  ncclResult_t st = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(c->nc, &st);
  if (r != ncclSuccess) return ulnccl_fail_async(c, "ncclCommGetAsyncError", r);
  if (st != ncclSuccess && st != ncclInProgress) return ulnccl_fail_async(c, "NCCL (async)", st);
  return UL_OK;
}

typedef struct ulnccl_stream_cond {
  ul_backend_comm_t *c;
  cudaStream_t s;
  unsigned polls;
} ulnccl_stream_cond_t;

static ul_result_t ulnccl_stream_poll(void *arg) {
  ulnccl_stream_cond_t *x = arg;
  cudaError_t e = cudaStreamQuery(x->s);
  if (e != cudaSuccess && e != cudaErrorNotReady)
    return ulnccl_cuda_fail(x->c, "cudaStreamQuery", e);
  /* The async-error query costs more than a stream query: every 64 polls, and once at
   * the end (a failed NCCL kernel may still let the stream drain). */
  if (e == cudaSuccess || (x->polls++ & 63) == 0) {
    ul_result_t a = ulnccl_async_check(x->c);
    if (a != UL_OK || e == cudaSuccess) return a;
  }
  return UL_IN_PROGRESS;
}

/* A stream's wait says "stream synchronize" when aborted, "work on the stream" when late. */
static ul_result_t ulnccl_stream_check(void *arg, double elapsed_ms, const char *what) {
  (void)what;
  return ulnccl_wait_check(arg, elapsed_ms, "stream synchronize");
}

/* Wait for a CUDA stream: cudaStreamQuery + ncclCommGetAsyncError, with the timeout and
 * the abort flag (the documented replacement for cudaStreamSynchronize). */
ul_result_t ulnccl_stream_wait(ul_backend_comm_t *c, cudaStream_t s, int timeout_ms) {
  ulbu_waiter_t w = ulbu_gpu_waiter(c, ulnccl_stream_check, ulnccl_wait_expired, timeout_ms);
  ulnccl_stream_cond_t x = {c, s, 0};
  const ulbu_cond_t cond = {ulnccl_stream_poll, NULL, &x};
  return ulbu_wait(&w, &cond, "work on the stream", NULL);
}

__thread int ulnccl_group_depth;

/* After an enqueue: NCCL status -> ours; a NULL stream runs to completion now. */
ul_result_t ulnccl_finish(ul_backend_comm_t *c, const char *call, ncclResult_t r,
                          ul_backend_stream_t *s) {
  if (r == ncclInProgress) {
    ul_result_t w = ulnccl_wait_ready(c, c->nc, call);
    if (w != UL_OK) return w;
  } else if (r != ncclSuccess) {
    return ulnccl_fail(c, call, r);
  }
  if (!s && ulnccl_group_depth == 0) return ulnccl_stream_wait(c, c->internal, c->timeout_ms);
  return UL_OK;
}

ul_result_t ulnccl_types(ul_backend_comm_t *c, ul_dtype_t dtype, int reduce, ul_op_t op,
                         ncclDataType_t *t, ncclRedOp_t *o) {
  char why[200];
  ul_result_t rc = reduce ? ulnccl_reduction_supported(dtype, op, ulnccl_version_code, c->min_sm,
                                                       why, sizeof(why))
                          : ulnccl_dtype_supported(dtype, ulnccl_version_code, c->min_sm, why,
                                                   sizeof(why));
  if (rc != UL_OK) return ul_backend_set_error(c->core, rc, "nccl backend: %s", why);
  ulnccl_dtype(dtype, t);
  if (reduce) ulnccl_op(op, o);
  return UL_OK;
}
