/* nccl backend: every collective and send/recv forwarded to NCCL on the cudaStream_t a
 * ul_stream_t wraps. Communicators are nonblocking (config.blocking = 0) so that every
 * wait here polls with the timeout and the abort flag instead of hanging inside NCCL.
 * Links libnccl and libcudart (runtime) only: without a driver cudaGetDeviceCount
 * fails and init() reports UL_ERR_UNAVAILABLE with CUDA's sentence.
 *
 * NCCL versions: the plugin links only entry points NCCL 2.18.1 has (ULNCCL_MIN_VERSION,
 * checked by the unit.nccl_symbols test against nccl_symbols.txt); newer ones are
 * looked up at run time (nccl_opt) with fallbacks: alltoall/gather/scatter as grouped
 * ncclSend/ncclRecv, cudaMalloc for ncclMemAlloc, no window registration.
 *
 * Teardown: ncclCommAbort and ncclCommDestroy can block for long (NVIDIA/nccl#992,
 * #1777), so they run on a detached reaper thread and comm_destroy waits for it with a
 * deadline. The backend comm is reference counted: every call inside it, every stream
 * and the reaper hold a reference, so nothing frees it under a thread still polling. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unilink/backend.h>

#include "backend_util.h"
#include "gpu_common.h"
#include "gpu_stream.h"
#include "gpu_topo.h"
#include "nccl_map.h"

struct ul_backend_comm {
  ncclComm_t nc;
  ul_comm_t core;
  int rank, nranks, device, sm_major;
  int min_sm;               /* oldest GPU of the communicator (fp8 reductions) */
  int timeout_ms;
  const volatile int *abort_flag;
  volatile int dead;        /* comm_abort ran: waiters leave, the reaper aborts NCCL */
  int failed;               /* NCCL reported a fatal error: teardown must abort */
  volatile int broken;      /* async error or timeout: later calls are refused */
  ul_result_t broken_rc;
  char broken_msg[320];
  int finalized;            /* ncclCommFinalize completed: destroy skips it */
  cudaStream_t internal;    /* NULL streams; blocking, so ordered after the legacy stream */
  int *barrier_buf;         /* 1 device int: barrier = 1-element allreduce */
  ulgpu_ident_t *idents;    /* nranks: every rank's GPU (topology) */
  ulbu_alloc_list_t allocs; /* tag: ncclMemAlloc (1) or cudaMalloc fallback (0) */
  /* lifetime */
  int refs;                 /* atomic: core + streams + calls in progress + reaper */
  int users;                /* atomic: calls in progress (the reaper waits for 0) */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int reaper_started;       /* under lock */
  int reaped;               /* under lock: NCCL and CUDA resources released */
  int reap_abort;           /* the reaper runs ncclCommAbort (else ncclCommDestroy) */
};

struct ul_backend_window {
  void *win; /* ncclWindow_t; NULL when this NCCL has no window registration */
};

static int nccl_version_code;
static int nccl_min_sm = 0; /* smallest compute capability among visible devices */
static int nccl_ndev;

/* ------------------------------------------------- entry points newer than 2.18.1 */

typedef ncclResult_t (*ulnccl_alltoall_fn)(const void *, void *, size_t, ncclDataType_t,
                                           ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ulnccl_rooted_fn)(const void *, void *, size_t, ncclDataType_t, int,
                                         ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ulnccl_mem_alloc_fn)(void **, size_t);
typedef ncclResult_t (*ulnccl_mem_free_fn)(void *);
typedef ncclResult_t (*ulnccl_win_register_fn)(ncclComm_t, void *, size_t, void **, int);
typedef ncclResult_t (*ulnccl_win_deregister_fn)(ncclComm_t, void *);

static struct {
  ulnccl_alltoall_fn alltoall;            /* 2.28.3 */
  ulnccl_rooted_fn gather, scatter;       /* 2.28.3 */
  ulnccl_mem_alloc_fn mem_alloc;          /* 2.19.1 */
  ulnccl_mem_free_fn mem_free;            /* 2.19.1 */
  ulnccl_win_register_fn win_register;    /* 2.27.3 */
  ulnccl_win_deregister_fn win_deregister;/* 2.27.3 */
} nccl_opt;

#define ULNCCL_WIN_DEFAULT 0x00 /* NCCL_WIN_DEFAULT of nccl.h >= 2.27.3 */

/* The plugin is dlopen'ed RTLD_LOCAL, so libnccl is not in the global scope: look the
 * symbols up in the library that provides ncclGetVersion. */
static void *nccl_lib_handle(void) {
  Dl_info info;
  if (dladdr((void *)&ncclGetVersion, &info) && info.dli_fname) {
    void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (h) return h; /* kept open: the plugin uses it for the process lifetime */
  }
  return RTLD_DEFAULT;
}

static void nccl_resolve_optional(void) {
  memset(&nccl_opt, 0, sizeof(nccl_opt));
  if (!ul_backend_param_int("NCCL_NEW_API", 1,
                            "0: ignore NCCL entry points newer than 2.18.1 (ncclMemAlloc, "
                            "window registration, ncclAlltoAll/Gather/Scatter) and use the "
                            "fallbacks, as with an old NCCL"))
    return;
  void *h = nccl_lib_handle();
#define ULNCCL_SYM(field, name) *(void **)(&nccl_opt.field) = dlsym(h, name)
  ULNCCL_SYM(alltoall, "ncclAlltoAll");
  ULNCCL_SYM(gather, "ncclGather");
  ULNCCL_SYM(scatter, "ncclScatter");
  ULNCCL_SYM(mem_alloc, "ncclMemAlloc");
  ULNCCL_SYM(mem_free, "ncclMemFree");
  ULNCCL_SYM(win_register, "ncclCommWindowRegister");
  ULNCCL_SYM(win_deregister, "ncclCommWindowDeregister");
#undef ULNCCL_SYM
  if (!nccl_opt.mem_alloc || !nccl_opt.mem_free) nccl_opt.mem_alloc = NULL, nccl_opt.mem_free = NULL;
  if (!nccl_opt.win_register || !nccl_opt.win_deregister)
    nccl_opt.win_register = NULL, nccl_opt.win_deregister = NULL;
}

/* ------------------------------------------------------------------ errors */

static ul_result_t nccl_fail(ul_backend_comm_t *c, const char *call, ncclResult_t rc) {
  char buf[448];
  ulnccl_format_error(buf, sizeof(buf), call, rc, ncclGetErrorString(rc),
                      c && c->nc ? ncclGetLastError(c->nc) : ncclGetLastError(NULL));
  ul_result_t r = ulnccl_result(rc);
  if (c && r != UL_ERR_INVALID_ARG) c->failed = 1; /* NCCL: everything else is fatal */
  return ul_backend_set_error(c ? c->core : NULL, r, "rank %d: %s", c ? c->rank : -1, buf);
}

/* The communicator cannot run anything any more (async error, timeout): remember why,
 * so later calls fail at once with the same sentence instead of hanging in NCCL. */
static ul_result_t nccl_break(ul_backend_comm_t *c, ul_result_t rc) {
  if (!c->broken) {
    snprintf(c->broken_msg, sizeof(c->broken_msg), "%s", ul_comm_last_error(c->core));
    c->broken_rc = rc;
    __atomic_store_n(&c->broken, 1, __ATOMIC_SEQ_CST);
  }
  c->failed = 1;
  return rc;
}

static ul_result_t nccl_fail_async(ul_backend_comm_t *c, const char *call, ncclResult_t rc) {
  return nccl_break(c, nccl_fail(c, call, rc));
}

static ul_result_t nccl_cuda_fail(ul_backend_comm_t *c, const char *call, cudaError_t e) {
  return ulgpu_fail(c ? c->core : NULL, "nccl backend", call, e);
}

/* ------------------------------------------------- lifetime and current device */

static void nccl_comm_release_memory(ul_backend_comm_t *c) {
  pthread_cond_destroy(&c->cond);
  pthread_mutex_destroy(&c->lock);
  free(c->idents);
  free(c);
}

static void nccl_ref(ul_backend_comm_t *c) { __atomic_add_fetch(&c->refs, 1, __ATOMIC_SEQ_CST); }

static void nccl_unref(ul_backend_comm_t *c) {
  if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_SEQ_CST) == 0) nccl_comm_release_memory(c);
}

/* Every op: hold the comm (reference + "in a call"), and make the comm's GPU current
 * for the call, restoring the caller's afterwards (a user thread or a core helper
 * thread may have any device current). */
typedef struct nccl_guard {
  ul_backend_comm_t *c;
  int prev;
} nccl_guard_t;

static nccl_guard_t nccl_enter(ul_backend_comm_t *c) {
  nccl_guard_t g = {c, -1};
  nccl_ref(c);
  __atomic_add_fetch(&c->users, 1, __ATOMIC_SEQ_CST);
  if (cudaGetDevice(&g.prev) != cudaSuccess) g.prev = -1;
  if (g.prev != c->device) cudaSetDevice(c->device);
  return g;
}

static void nccl_leave(nccl_guard_t *g) {
  if (g->prev >= 0 && g->prev != g->c->device) cudaSetDevice(g->prev);
  __atomic_sub_fetch(&g->c->users, 1, __ATOMIC_SEQ_CST);
  nccl_unref(g->c);
}

#define NCCL_ENTER(c) nccl_guard_t ul__guard __attribute__((cleanup(nccl_leave))) = nccl_enter(c)

/* Same device guard without a communicator (init paths). */
typedef struct nccl_devsave {
  int prev;
} nccl_devsave_t;
static void nccl_dev_restore(nccl_devsave_t *d) {
  if (d->prev >= 0) cudaSetDevice(d->prev);
}
static nccl_devsave_t nccl_dev_save(void) {
  nccl_devsave_t d = {-1};
  if (cudaGetDevice(&d.prev) != cudaSuccess) d.prev = -1;
  return d;
}
#define NCCL_SAVE_DEVICE() \
  nccl_devsave_t ul__devsave __attribute__((cleanup(nccl_dev_restore))) = nccl_dev_save()

/* ----------------------------------------------------------------- waiting */

static int nccl_aborted(ul_backend_comm_t *c) {
  return __atomic_load_n(&c->dead, __ATOMIC_SEQ_CST) || (c->abort_flag && *c->abort_flag);
}

static ul_result_t nccl_check_abort(ul_backend_comm_t *c, const char *what) {
  if (nccl_aborted(c))
    return ul_backend_set_error(c->core, UL_ERR_ABORTED, "rank %d: %s: communicator was aborted",
                                c->rank, what);
  return UL_OK;
}

/* Entry check of every op that reaches NCCL: aborted or broken communicators fail now. */
static ul_result_t nccl_usable(ul_backend_comm_t *c, const char *what) {
  ul_result_t a = nccl_check_abort(c, what);
  if (a != UL_OK) return a;
  if (__atomic_load_n(&c->broken, __ATOMIC_SEQ_CST))
    return ul_backend_set_error(c->core, c->broken_rc,
                                "rank %d: %s refused: the communicator failed earlier (%s); "
                                "destroy or abort it",
                                c->rank, what, c->broken_msg);
  return UL_OK;
}

static ul_result_t nccl_timeout(ul_backend_comm_t *c, const char *what, int timeout_ms) {
  ul_backend_set_error(c->core, UL_ERR_TIMEOUT,
                       "rank %d: %s did not complete within %d ms (a peer did not call the "
                       "matching operation, or did not join?); abort the communicator",
                       c->rank, what, timeout_ms);
  return nccl_break(c, UL_ERR_TIMEOUT);
}

/* Nonblocking NCCL: after a call returned ncclInProgress (or an init), poll the
 * communicator's state until it leaves ncclInProgress, honouring timeout and abort. */
static ul_result_t nccl_wait_ready(ul_backend_comm_t *c, ncclComm_t nc, const char *call) {
  double t0 = ulbu_now_ms();
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(nc, &st);
    if (r != ncclSuccess) return nccl_fail_async(c, "ncclCommGetAsyncError", r);
    if (st == ncclSuccess) return UL_OK;
    if (st != ncclInProgress) return nccl_fail_async(c, call, st);
    ul_result_t a = nccl_check_abort(c, call);
    if (a != UL_OK) return a;
    double now = ulbu_now_ms();
    if (c->timeout_ms > 0 && now - t0 > c->timeout_ms) return nccl_timeout(c, call, c->timeout_ms);
    ulbu_backoff(t0, now);
  }
}

/* NCCL's asynchronous error of the comm: a fatal one breaks the communicator. */
static ul_result_t nccl_async_check(ul_backend_comm_t *c) {
  ncclResult_t st = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(c->nc, &st);
  if (r != ncclSuccess) return nccl_fail_async(c, "ncclCommGetAsyncError", r);
  if (st != ncclSuccess && st != ncclInProgress) return nccl_fail_async(c, "NCCL (async)", st);
  return UL_OK;
}

/* Wait for a CUDA stream: cudaStreamQuery + ncclCommGetAsyncError, with the timeout and
 * the abort flag (the documented replacement for cudaStreamSynchronize). */
static ul_result_t nccl_stream_wait(ul_backend_comm_t *c, cudaStream_t s, int timeout_ms) {
  double t0 = ulbu_now_ms();
  for (unsigned spins = 0;; spins++) {
    cudaError_t e = cudaStreamQuery(s);
    if (e != cudaSuccess && e != cudaErrorNotReady) return nccl_cuda_fail(c, "cudaStreamQuery", e);
    /* The async-error query costs more than a stream query: every 64 polls, and once at
     * the end (a failed NCCL kernel may still let the stream drain). */
    if (e == cudaSuccess || (spins & 63) == 0) {
      ul_result_t a = nccl_async_check(c);
      if (a != UL_OK || e == cudaSuccess) return a;
    }
    ul_result_t a = nccl_check_abort(c, "stream synchronize");
    if (a != UL_OK) return a;
    double now = ulbu_now_ms();
    if (timeout_ms > 0 && now - t0 > timeout_ms)
      return nccl_timeout(c, "work on the stream", timeout_ms);
    ulbu_backoff(t0, now);
  }
}

static inline cudaStream_t nccl_stream_of(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return s ? s->s : c->internal;
}

static __thread int nccl_group_depth;

/* After an enqueue: NCCL status -> ours; a NULL stream runs to completion now. */
static ul_result_t nccl_finish(ul_backend_comm_t *c, const char *call, ncclResult_t r,
                               ul_backend_stream_t *s) {
  if (r == ncclInProgress) {
    ul_result_t w = nccl_wait_ready(c, c->nc, call);
    if (w != UL_OK) return w;
  } else if (r != ncclSuccess) {
    return nccl_fail(c, call, r);
  }
  if (!s && nccl_group_depth == 0) return nccl_stream_wait(c, c->internal, c->timeout_ms);
  return UL_OK;
}

static ul_result_t nccl_types(ul_backend_comm_t *c, ul_dtype_t dtype, int reduce, ul_op_t op,
                              ncclDataType_t *t, ncclRedOp_t *o) {
  char why[200];
  ul_result_t rc = reduce ? ulnccl_reduction_supported(dtype, op, nccl_version_code, c->min_sm,
                                                       why, sizeof(why))
                          : ulnccl_dtype_supported(dtype, nccl_version_code, c->min_sm, why,
                                                   sizeof(why));
  if (rc != UL_OK) return ul_backend_set_error(c->core, rc, "nccl backend: %s", why);
  ulnccl_dtype(dtype, t);
  if (reduce) ulnccl_op(op, o);
  return UL_OK;
}

/* --------------------------------------------------------------- lifecycle */

static ul_result_t nccl_init(char *reason, size_t reason_len) {
  int n = 0;
  ul_result_t rc = ulgpu_device_count(reason, reason_len, &n);
  if (rc != UL_OK) return rc;
  ncclResult_t r = ncclGetVersion(&nccl_version_code);
  if (r != ncclSuccess) {
    snprintf(reason, reason_len, "ncclGetVersion: %s", ncclGetErrorString(r));
    return UL_ERR_UNAVAILABLE;
  }
  rc = ulnccl_version_supported(nccl_version_code, reason, reason_len);
  if (rc != UL_OK) return rc;
  nccl_resolve_optional();
  nccl_ndev = n;
  nccl_min_sm = 0;
  for (int d = 0; d < n; d++) {
    int maj = 0;
    if (cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess &&
        (nccl_min_sm == 0 || maj < nccl_min_sm))
      nccl_min_sm = maj;
  }
  ul_backend_log(UL_LOG_INFO, "nccl",
                 "NCCL %d; native alltoall/gather/scatter: %s; ncclMemAlloc: %s; windows: %s",
                 nccl_version_code, nccl_opt.alltoall ? "yes" : "no (grouped send/recv)",
                 nccl_opt.mem_alloc ? "yes" : "no (cudaMalloc)",
                 nccl_opt.win_register ? "yes" : "no");
  return UL_OK;
}

static void nccl_fini(void) {}

static ul_result_t nccl_query_caps(ul_backend_caps_t *caps) {
  int ver = nccl_version_code ? nccl_version_code : NCCL_VERSION_CODE;
  caps->features = UL_FEATURE_THREAD_RANKS | UL_FEATURE_PROCESS_RANKS | UL_FEATURE_MULTI_NODE |
                   UL_FEATURE_INIT_ALL | UL_FEATURE_SPLIT | UL_FEATURE_STREAMS | UL_FEATURE_P2P |
                   UL_FEATURE_DEVICE_MEMORY | UL_FEATURE_NATIVE_COLL;
  caps->flags = 0;
  caps->native_colls = (1u << UL_COLL_COUNT) - 1; /* all nine + sendrecv */
  caps->dtypes = ulnccl_dtype_mask(ver, nccl_min_sm);
  caps->reduce_dtypes = ulnccl_reduce_dtype_mask(ver, nccl_min_sm);
  caps->ops = (1u << UL_OP_COUNT) - 1;
  caps->max_ranks = 0;
  snprintf(caps->version, sizeof(caps->version), "NCCL %d.%d.%d", ver / 10000, (ver / 100) % 100,
           ver % 100);
  return UL_OK;
}

static ul_result_t nccl_get_unique_id(unsigned char *payload, size_t bytes) {
  ulnccl_id_payload_t p;
  memset(&p, 0, sizeof(p));
  p.magic = ULNCCL_ID_MAGIC;
  p.version = (unsigned)(nccl_version_code ? nccl_version_code : NCCL_VERSION_CODE);
  ncclResult_t r = ncclGetUniqueId(&p.nccl_id);
  if (r != ncclSuccess) return nccl_fail(NULL, "ncclGetUniqueId", r);
  memset(payload, 0, bytes);
  memcpy(payload, &p, sizeof(p));
  return UL_OK;
}

/* --------------------------------------------------------------- comms */

static ul_backend_comm_t *nccl_comm_new(const ul_backend_comm_args_t *a, int device) {
  ul_backend_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->core = a->comm;
  c->rank = a->rank;
  c->nranks = a->nranks;
  c->device = device;
  c->timeout_ms = a->timeout_ms;
  c->abort_flag = a->abort_flag;
  c->refs = 1; /* the core's, dropped by comm_destroy */
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->cond, NULL);
  ulbu_alloc_list_init(&c->allocs);
  cudaDeviceGetAttribute(&c->sm_major, cudaDevAttrComputeCapabilityMajor, device);
  c->min_sm = c->sm_major;
  return c;
}

/* tag 1: ncclMemAlloc, 0: the cudaMalloc fallback. */
static void nccl_alloc_release(void *ptr, int from_nccl, void *arg) {
  (void)arg;
  if (from_nccl && nccl_opt.mem_free) nccl_opt.mem_free(ptr);
  else cudaFree(ptr);
}

/* CUDA resources (after NCCL is gone): the caller made c->device current. */
static void nccl_comm_release_cuda(ul_backend_comm_t *c) {
  if (c->internal) cudaStreamDestroy(c->internal);
  c->internal = NULL;
  if (c->barrier_buf) cudaFree(c->barrier_buf);
  c->barrier_buf = NULL;
  ulbu_alloc_list_destroy(&c->allocs, nccl_alloc_release, NULL);
}

/* The reaper: waits until no call is inside the comm (dead/abort is set, so pollers
 * leave within one backoff slice; a thread blocked inside NCCL itself is only freed by
 * ncclCommAbort, so after a grace period abort anyway), then ncclCommDestroy or
 * ncclCommAbort, then the CUDA resources. Never touches c->core (it may be gone). */
static void *nccl_reaper_main(void *arg) {
  ul_backend_comm_t *c = arg;
  double t0 = ulbu_now_ms();
  while (__atomic_load_n(&c->users, __ATOMIC_SEQ_CST) > 0 && ulbu_now_ms() - t0 < 2000) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  cudaSetDevice(c->device);
  if (c->nc) {
    if (c->reap_abort) {
      ncclCommAbort(c->nc);
    } else if (ncclCommDestroy(c->nc) != ncclSuccess) {
      ncclCommAbort(c->nc);
    }
    c->nc = NULL;
  }
  if (__atomic_load_n(&c->users, __ATOMIC_SEQ_CST) == 0) nccl_comm_release_cuda(c);
  pthread_mutex_lock(&c->lock);
  c->reaped = 1;
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
  nccl_unref(c);
  return NULL;
}

/* Start the reaper once (abort_nccl: ncclCommAbort, else ncclCommDestroy). Never blocks. */
static void nccl_reaper_start(ul_backend_comm_t *c, int abort_nccl) {
  pthread_mutex_lock(&c->lock);
  int started = c->reaper_started;
  c->reaper_started = 1;
  if (!started) c->reap_abort = abort_nccl;
  pthread_mutex_unlock(&c->lock);
  if (started) return;
  nccl_ref(c);
  pthread_attr_t at;
  pthread_t th;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int e = pthread_create(&th, &at, nccl_reaper_main, c);
  pthread_attr_destroy(&at);
  if (e != 0) nccl_reaper_main(c); /* no thread: do it here (may block) */
}

/* Wait for the reaper up to wait_ms (< 0: forever). 1 when it finished. */
static int nccl_reaper_wait(ul_backend_comm_t *c, int wait_ms) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  if (wait_ms >= 0) {
    dl.tv_sec += wait_ms / 1000;
    dl.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&c->lock);
  while (!c->reaped) {
    if (wait_ms < 0) pthread_cond_wait(&c->cond, &c->lock);
    else if (pthread_cond_timedwait(&c->cond, &c->lock, &dl) == ETIMEDOUT) break;
  }
  int done = c->reaped;
  pthread_mutex_unlock(&c->lock);
  return done;
}

/* How long teardown waits for ncclCommAbort before leaving it to the reaper. */
static int nccl_abort_wait_ms(void) {
  return (int)ul_backend_param_int("NCCL_ABORT_WAIT_MS", 500,
                                   "ms ul_comm_abort/destroy wait for ncclCommAbort before "
                                   "leaving it to a background thread");
}

/* Abort NCCL and free everything (failed init paths, destroy after an error). Drops the
 * caller's reference. */
static void nccl_teardown_abort(ul_backend_comm_t *c) {
  if (!c) return;
  __atomic_store_n(&c->dead, 1, __ATOMIC_SEQ_CST);
  nccl_reaper_start(c, 1);
  int wait_ms = nccl_abort_wait_ms();
  if (!nccl_reaper_wait(c, wait_ms))
    ul_backend_log(UL_LOG_WARN, "nccl",
                   "rank %d: ncclCommAbort did not return within %d ms; left to a background "
                   "thread (its GPU resources stay allocated until it returns)",
                   c->rank, wait_ms);
  nccl_unref(c);
}

static void nccl_config(ncclConfig_t *cfg, const ul_backend_comm_args_t *a) {
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  *cfg = init;
  /* UNILINK_NCCL_BLOCKING=1 restores NCCL's blocking mode (debugging only: then a
   * missing peer can hang init without a timeout). */
  cfg->blocking = (int)ul_backend_param_int(
      "NCCL_BLOCKING", 0, "1: create NCCL communicators in blocking mode (no timeouts)");
#if NCCL_VERSION_CODE >= 22703
  /* commName (nccl.h >= 2.27.3) is read only by NCCL >= 2.27.3; older ones copy the
   * config only up to their own size. */
  if (a && a->name && *a->name) cfg->commName = a->name;
#else
  (void)a;
#endif
}

/* Stream, barrier buffer and (optionally) the identity exchange. The caller made
 * c->device current. */
static ul_result_t nccl_comm_setup(ul_backend_comm_t *c, int exchange) {
  cudaError_t e;
  if ((e = cudaSetDevice(c->device)) != cudaSuccess) return nccl_cuda_fail(c, "cudaSetDevice", e);
  /* A blocking stream: CUDA orders it after work on the legacy default stream, so a
   * NULL-stream call sees what cudaMemcpy/kernels on stream 0 wrote before it (H1). */
  if ((e = cudaStreamCreateWithFlags(&c->internal, cudaStreamDefault)) != cudaSuccess)
    return nccl_cuda_fail(c, "cudaStreamCreateWithFlags", e);
  if ((e = cudaMalloc((void **)&c->barrier_buf, sizeof(int) + c->nranks * sizeof(ulgpu_ident_t))) !=
      cudaSuccess)
    return nccl_cuda_fail(c, "cudaMalloc", e);
  if ((e = cudaMemsetAsync(c->barrier_buf, 0, sizeof(int), c->internal)) != cudaSuccess)
    return nccl_cuda_fail(c, "cudaMemsetAsync", e);
  c->idents = calloc((size_t)c->nranks, sizeof(ulgpu_ident_t));
  if (!c->idents) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  ul_result_t rc = ulgpu_ident_get(c->device, &c->idents[c->rank]);
  if (rc != UL_OK) return ul_backend_set_error(c->core, rc, "nccl backend: cannot read GPU %d", c->device);
  if (!exchange) return nccl_stream_wait(c, c->internal, c->timeout_ms);
  /* One small allgather at init tells every rank where the others' GPUs are (topology). */
  char *dev = (char *)c->barrier_buf + sizeof(int);
  size_t isz = sizeof(ulgpu_ident_t);
  if ((e = cudaMemcpyAsync(dev + c->rank * isz, &c->idents[c->rank], isz, cudaMemcpyHostToDevice,
                           c->internal)) != cudaSuccess)
    return nccl_cuda_fail(c, "cudaMemcpyAsync", e);
  ncclResult_t r = ncclAllGather(dev + c->rank * isz, dev, isz, ncclUint8, c->nc, c->internal);
  if (r == ncclInProgress) rc = nccl_wait_ready(c, c->nc, "ncclAllGather (init)");
  else if (r != ncclSuccess) rc = nccl_fail(c, "ncclAllGather (init)", r);
  if (rc != UL_OK) return rc;
  if ((e = cudaMemcpyAsync(c->idents, dev, c->nranks * isz, cudaMemcpyDeviceToHost, c->internal)) !=
      cudaSuccess)
    return nccl_cuda_fail(c, "cudaMemcpyAsync", e);
  return nccl_stream_wait(c, c->internal, c->timeout_ms);
}

/* fp8 reductions: NCCL checks the oldest GPU of the communicator. */
static void nccl_set_min_sm(ul_backend_comm_t *c) {
  c->min_sm = c->sm_major;
  for (int i = 0; i < c->nranks; i++)
    if (c->idents[i].sm_major > 0 && c->idents[i].sm_major < c->min_sm) c->min_sm = c->idents[i].sm_major;
}

static void nccl_props(ul_backend_comm_props_t *props, int device) {
  if (!props) return;
  props->load_store_peers = 0;
  snprintf(props->path, sizeof(props->path), "nccl");
  if (props->struct_size >= offsetof(ul_backend_comm_props_t, device) + sizeof(props->device))
    props->device = device; /* ul_comm_device reports the GPU NCCL runs on */
}

static int nccl_pick_device(const ul_backend_comm_args_t *a) {
  if (a->device != UL_CONFIG_UNDEF) return a->device;
  return nccl_ndev > 0 ? a->rank % nccl_ndev : 0;
}

static ul_result_t nccl_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                  ul_backend_comm_props_t *props) {
  *out = NULL;
  ulnccl_id_payload_t p;
  if (!a->id_payload || a->id_payload_bytes < sizeof(p))
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG, "nccl backend: id payload too small");
  memcpy(&p, a->id_payload, sizeof(p));
  if (p.magic != ULNCCL_ID_MAGIC)
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "nccl backend: the unique id does not carry an NCCL id "
                                "(corrupted, or made for another backend)");
  int dev = nccl_pick_device(a);
  if (dev < 0 || dev >= nccl_ndev)
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "nccl backend: device %d out of range (%d visible)", dev, nccl_ndev);
  NCCL_SAVE_DEVICE();
  ul_backend_comm_t *c = nccl_comm_new(a, dev);
  if (!c) return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess) {
    ul_result_t rc = nccl_cuda_fail(c, "cudaSetDevice", e);
    nccl_teardown_abort(c);
    return rc;
  }
  ncclConfig_t cfg;
  nccl_config(&cfg, a);
  ncclResult_t r = ncclCommInitRankConfig(&c->nc, a->nranks, p.nccl_id, a->rank, &cfg);
  ul_result_t rc = UL_OK;
  if (r != ncclSuccess && r != ncclInProgress) rc = nccl_fail(c, "ncclCommInitRankConfig", r);
  else if (c->nc) rc = nccl_wait_ready(c, c->nc, "ncclCommInitRankConfig");
  if (rc == UL_OK) rc = nccl_comm_setup(c, 1);
  if (rc != UL_OK) {
    nccl_teardown_abort(c); /* bounded: a failed init never hangs in ncclCommAbort */
    return rc;
  }
  nccl_set_min_sm(c);
  nccl_props(props, c->device);
  *out = c;
  return UL_OK;
}

/* One process, several GPUs: the grouped ncclCommInitRankConfig form of ncclCommInitAll,
 * so the communicators are nonblocking like every other one here. */
static ul_result_t nccl_comm_init_all(const ul_backend_comm_args_t *a, int ndev,
                                      ul_backend_comm_t **out, ul_backend_comm_props_t *props) {
  for (int i = 0; i < ndev; i++) out[i] = NULL;
  NCCL_SAVE_DEVICE();
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return nccl_fail(NULL, "ncclGetUniqueId", r);
  ul_result_t rc = UL_OK;
  for (int i = 0; i < ndev && rc == UL_OK; i++) {
    int dev = a[i].device != UL_CONFIG_UNDEF ? a[i].device : i;
    if (dev < 0 || dev >= nccl_ndev)
      rc = ul_backend_set_error(a[i].comm, UL_ERR_INVALID_ARG,
                                "nccl backend: device %d out of range (%d visible)", dev, nccl_ndev);
    else if (!(out[i] = nccl_comm_new(&a[i], dev)))
      rc = ul_backend_set_error(a[i].comm, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  }
  if (rc == UL_OK) {
    r = ncclGroupStart();
    int grouped = r == ncclSuccess;
    if (!grouped) rc = nccl_fail(out[0], "ncclGroupStart", r);
    for (int i = 0; i < ndev && rc == UL_OK; i++) {
      ncclConfig_t cfg;
      nccl_config(&cfg, &a[i]);
      cudaSetDevice(out[i]->device);
      r = ncclCommInitRankConfig(&out[i]->nc, ndev, id, i, &cfg);
      if (r != ncclSuccess && r != ncclInProgress) rc = nccl_fail(out[i], "ncclCommInitRankConfig", r);
    }
    if (grouped) { /* a started group is always ended */
      ncclResult_t re = ncclGroupEnd();
      if (rc == UL_OK && re != ncclSuccess && re != ncclInProgress)
        rc = nccl_fail(out[0], "ncclGroupEnd", re);
    }
  }
  for (int i = 0; i < ndev && rc == UL_OK; i++) {
    cudaSetDevice(out[i]->device);
    rc = out[i]->nc ? nccl_wait_ready(out[i], out[i]->nc, "ncclCommInitAll") : UL_ERR_INTERNAL;
  }
  for (int i = 0; i < ndev && rc == UL_OK; i++) rc = nccl_comm_setup(out[i], 0);
  if (rc == UL_OK) {
    /* Same process: every rank's identity is known without an exchange. */
    for (int i = 0; i < ndev; i++)
      for (int j = 0; j < ndev; j++) out[i]->idents[j] = out[j]->idents[j];
    for (int i = 0; i < ndev; i++) nccl_set_min_sm(out[i]);
    for (int i = 0; i < ndev; i++) nccl_props(&props[i], out[i]->device);
    return UL_OK;
  }
  /* Abort all first (they may wait for each other), then wait for each. */
  for (int i = 0; i < ndev; i++)
    if (out[i]) {
      __atomic_store_n(&out[i]->dead, 1, __ATOMIC_SEQ_CST);
      nccl_reaper_start(out[i], 1);
    }
  for (int i = 0; i < ndev; i++) {
    nccl_teardown_abort(out[i]);
    out[i] = NULL;
  }
  return rc;
}

static ul_result_t nccl_comm_split(ul_backend_comm_t *parent, int color, int key,
                                   const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                   ul_backend_comm_props_t *props) {
  *out = NULL;
  NCCL_ENTER(parent);
  ul_result_t rc = nccl_usable(parent, "ul_comm_split");
  if (rc != UL_OK) return rc;
  ncclConfig_t cfg;
  nccl_config(&cfg, a);
  /* NCCL writes the child handle from its split job, when the split completes (it stays
   * NULL until then): the slot is on the heap so that a late write after a timeout here
   * lands in memory we leak, not in a dead stack frame. */
  ncclComm_t *slot = calloc(1, sizeof(*slot));
  if (!slot) return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  ncclResult_t r = ncclCommSplit(parent->nc, color == UL_SPLIT_NOCOLOR ? NCCL_SPLIT_NOCOLOR : color,
                                 key, slot, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    free(slot);
    return nccl_fail(parent, "ncclCommSplit", r);
  }
  /* The parent reports the split's progress; only then is *slot final. */
  rc = nccl_wait_ready(parent, parent->nc, "ncclCommSplit");
  if (rc != UL_OK) return rc; /* slot leaked on purpose (see above) */
  ncclComm_t nc = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  free(slot);
  if (nc) rc = nccl_wait_ready(parent, nc, "ncclCommSplit (new communicator)");
  ul_backend_comm_args_t args = *a;
  if (rc == UL_OK && nc) {
    ncclCommUserRank(nc, &args.rank);
    ncclCommCount(nc, &args.nranks);
  }
  ul_backend_comm_t *c = nc ? nccl_comm_new(&args, parent->device) : NULL;
  if (nc && !c) {
    ncclCommAbort(nc);
    return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  }
  if (c) c->nc = nc;
  if (rc != UL_OK || !nc) {
    nccl_teardown_abort(c);
    return rc;
  }
  rc = nccl_comm_setup(c, 1);
  if (rc != UL_OK) {
    nccl_teardown_abort(c);
    return rc;
  }
  nccl_set_min_sm(c);
  nccl_props(props, c->device);
  *out = c;
  return UL_OK;
}

/* ncclCommFinalize polled with the timeout (nonblocking communicators finish it in the
 * background); UL_OK when every operation of the comm completed. */
static ul_result_t nccl_finalize_now(ul_backend_comm_t *c) {
  ul_result_t rc = nccl_stream_wait(c, c->internal, c->timeout_ms);
  if (rc != UL_OK) return rc;
  ncclResult_t r = ncclCommFinalize(c->nc);
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(c, "ncclCommFinalize", r);
  rc = nccl_wait_ready(c, c->nc, "ncclCommFinalize");
  if (rc == UL_OK) c->finalized = 1;
  return rc;
}

static ul_result_t nccl_comm_finalize(ul_backend_comm_t *c) {
  NCCL_ENTER(c);
  ul_result_t rc = nccl_usable(c, "ul_comm_finalize");
  if (rc != UL_OK || c->finalized) return rc;
  return nccl_finalize_now(c);
}

/* Destroy = finalize with the communicator timeout, then ncclCommDestroy; on a timeout
 * or an error (or after abort) ncclCommAbort instead. Both on the reaper, waited for
 * with a deadline, so a dead peer or a stuck NCCL cannot hang the caller (H5, H6). */
static ul_result_t nccl_comm_destroy(ul_backend_comm_t *c) {
  int abort_nccl = 1, wait_ms = nccl_abort_wait_ms();
  pthread_mutex_lock(&c->lock);
  int started = c->reaper_started;
  pthread_mutex_unlock(&c->lock);
  if (!started) {
    if (c->nc && !c->failed && !nccl_aborted(c)) {
      NCCL_SAVE_DEVICE();
      cudaSetDevice(c->device);
      if (c->finalized || nccl_finalize_now(c) == UL_OK) abort_nccl = 0;
    }
    if (!abort_nccl) wait_ms = c->timeout_ms > 0 ? (c->timeout_ms < 1000 ? 1000 : c->timeout_ms) : -1;
    if (abort_nccl) __atomic_store_n(&c->dead, 1, __ATOMIC_SEQ_CST);
    nccl_reaper_start(c, abort_nccl);
  }
  if (!nccl_reaper_wait(c, wait_ms))
    ul_backend_log(UL_LOG_WARN, "nccl",
                   "rank %d: %s did not return within %d ms; left to a background thread",
                   c->rank, abort_nccl ? "ncclCommAbort" : "ncclCommDestroy", wait_ms);
  nccl_unref(c);
  return UL_OK;
}

/* Must not block and must not free: mark dead (every poller leaves within one backoff
 * slice) and start the reaper, which runs ncclCommAbort once no call is inside. */
static ul_result_t nccl_comm_abort(ul_backend_comm_t *c) {
  __atomic_store_n(&c->dead, 1, __ATOMIC_SEQ_CST);
  nccl_reaper_start(c, 1);
  return UL_OK;
}

static ul_result_t nccl_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  out->peer = peer;
  ulgpu_topology(&c->idents[c->rank], &c->idents[peer], peer == c->rank, out);
  return UL_OK;
}

/* ----------------------------------------------------------------- streams */

/* Streams hold a reference: a stream may be destroyed after its communicator. */
static ul_result_t nccl_stream_create(ul_backend_comm_t *c, ul_backend_stream_t **out) {
  NCCL_ENTER(c);
  ul_result_t rc = ulgpu_stream_create(c, c->core, "nccl backend", c->device, out);
  if (rc == UL_OK) nccl_ref(c);
  return rc;
}

static ul_result_t nccl_stream_wrap(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out) {
  ul_result_t rc = ulgpu_stream_wrap(c, c->core, "nccl backend", native, out);
  if (rc == UL_OK) nccl_ref(c);
  return rc;
}

static ul_result_t nccl_stream_synchronize(ul_backend_stream_t *s, int timeout_ms) {
  ul_backend_comm_t *c = s->c;
  NCCL_ENTER(c);
  ul_result_t rc = nccl_usable(c, "ul_stream_synchronize");
  if (rc != UL_OK) return rc;
  return nccl_stream_wait(c, s->s, timeout_ms);
}

static ul_result_t nccl_stream_query(ul_backend_stream_t *s) {
  ul_backend_comm_t *c = s->c;
  NCCL_ENTER(c);
  ul_result_t rc = nccl_usable(c, "ul_stream_query");
  if (rc != UL_OK) return rc;
  cudaError_t e = cudaStreamQuery(s->s);
  if (e != cudaSuccess && e != cudaErrorNotReady) return nccl_cuda_fail(c, "cudaStreamQuery", e);
  rc = nccl_async_check(c);
  if (rc != UL_OK) return rc;
  return e == cudaErrorNotReady ? UL_IN_PROGRESS : UL_OK;
}

static ul_result_t nccl_stream_destroy(ul_backend_stream_t *s) {
  ul_backend_comm_t *c = s->c;
  ul_result_t rc = UL_OK;
  {
    NCCL_ENTER(c);
    pthread_mutex_lock(&c->lock);
    int gone = c->reaper_started;
    pthread_mutex_unlock(&c->lock);
    if (!gone && !nccl_aborted(c) && !c->failed) rc = nccl_stream_wait(c, s->s, c->timeout_ms);
    if (s->owned) cudaStreamDestroy(s->s); /* returns at once; CUDA frees it when idle */
  }
  free(s);
  nccl_unref(c);
  return rc;
}

/* ------------------------------------------------------------------ memory */

static ul_result_t nccl_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  NCCL_ENTER(c);
  ul_result_t rc = nccl_check_abort(c, "ul_mem_alloc"); /* the reaper owns the list now */
  if (rc != UL_OK) return rc;
  void *p = NULL;
  int from_nccl = 0;
  /* ncclMemAlloc (>= 2.19) gives memory every NCCL optimisation (and windows) accepts;
   * cudaMalloc where it is absent or VMM is not available. Both are device memory. */
  if (nccl_opt.mem_alloc && nccl_opt.mem_alloc(&p, size) == ncclSuccess) {
    from_nccl = 1;
  } else {
    cudaError_t e = cudaMalloc(&p, size);
    if (e != cudaSuccess) return nccl_cuda_fail(c, "cudaMalloc", e);
  }
  rc = ulbu_alloc_add(&c->allocs, c->core, "nccl backend", p, size, from_nccl);
  if (rc != UL_OK) {
    nccl_alloc_release(p, from_nccl, NULL);
    return rc;
  }
  *ptr = p;
  return UL_OK;
}

static ul_result_t nccl_mem_free(ul_backend_comm_t *c, void *ptr) {
  NCCL_ENTER(c);
  if (nccl_aborted(c)) return UL_OK; /* the reaper frees every allocation with the comm */
  int from_nccl = 0;
  ul_result_t rc = ulbu_alloc_remove(&c->allocs, c->core, "nccl backend", ptr, &from_nccl);
  if (rc != UL_OK) return rc;
  nccl_alloc_release(ptr, from_nccl, NULL);
  return UL_OK;
}

/* 1 when [p, p+bytes) lies inside one of this comm's ul_mem_alloc allocations. */
static int nccl_in_allocs(ul_backend_comm_t *c, const void *p, size_t bytes) {
  uintptr_t a = (uintptr_t)p;
  int in = 0;
  pthread_mutex_lock(&c->allocs.lock);
  for (ulbu_alloc_t *x = c->allocs.head; x && !in; x = x->next) {
    uintptr_t b = (uintptr_t)x->ptr;
    in = a >= b && a - b <= x->size && bytes <= x->size - (a - b);
  }
  pthread_mutex_unlock(&c->allocs.lock);
  return in;
}

/* One address as CUDA sees it. */
static ul_backend_mem_kind_t nccl_kind_of(ul_backend_comm_t *c, const void *p) {
  struct cudaPointerAttributes at;
  memset(&at, 0, sizeof(at));
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    cudaGetLastError(); /* not sticky, but keep CUDA's last error clean */
    return UL_BACKEND_MEM_UNKNOWN;
  }
  switch (at.type) {
  case cudaMemoryTypeUnregistered: return UL_BACKEND_MEM_HOST;
  case cudaMemoryTypeHost: return UL_BACKEND_MEM_HOST_MAPPED;
  case cudaMemoryTypeManaged: /* addressable by every device and the host */
    return UL_BACKEND_MEM_HOST_MAPPED;
  case cudaMemoryTypeDevice:
    return at.device == c->device ? UL_BACKEND_MEM_DEVICE : UL_BACKEND_MEM_PEER_DEVICE;
  default: return UL_BACKEND_MEM_UNKNOWN;
  }
}

static ul_result_t nccl_mem_kind(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                                 ul_backend_mem_kind_t *kind) {
  NCCL_ENTER(c);
  if (!nccl_aborted(c) && nccl_in_allocs(c, ptr, bytes)) { /* ncclMemAlloc (VMM) memory included */
    *kind = UL_BACKEND_MEM_DEVICE;
    return UL_OK;
  }
  ul_backend_mem_kind_t k = nccl_kind_of(c, ptr);
  if (bytes > 1 && k != UL_BACKEND_MEM_UNKNOWN) {
    /* The whole range: both ends must be the same kind of memory. */
    ul_backend_mem_kind_t k2 = nccl_kind_of(c, (const char *)ptr + bytes - 1);
    if (k2 != k) k = (k == UL_BACKEND_MEM_HOST || k2 == UL_BACKEND_MEM_HOST) ? UL_BACKEND_MEM_HOST
                                                                              : UL_BACKEND_MEM_UNKNOWN;
  }
  *kind = k;
  return UL_OK;
}

/* NULL stream: the internal (blocking) stream, waited for with the timeout. */
static ul_result_t nccl_mem_done(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  if (s) return UL_OK;
  return nccl_stream_wait(c, c->internal, c->timeout_ms);
}

static ul_result_t nccl_mem_copy(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                                 ul_backend_stream_t *s) {
  NCCL_ENTER(c);
  ul_result_t rc = nccl_usable(c, "ul_mem_copy");
  if (rc != UL_OK || bytes == 0) return rc;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, nccl_stream_of(c, s));
  if (e != cudaSuccess) return nccl_cuda_fail(c, "cudaMemcpyAsync", e);
  return nccl_mem_done(c, s);
}

static ul_result_t nccl_mem_set(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                                ul_backend_stream_t *s) {
  NCCL_ENTER(c);
  ul_result_t rc = nccl_usable(c, "ul_mem_set");
  if (rc != UL_OK || bytes == 0) return rc;
  if (nccl_kind_of(c, dst) == UL_BACKEND_MEM_HOST) {
    /* Pageable host memory: cudaMemsetAsync cannot reach it. Order after the stream's
     * earlier work by waiting for it (rare: host buffers are set with memset). */
    rc = nccl_stream_wait(c, nccl_stream_of(c, s), c->timeout_ms);
    if (rc == UL_OK) memset(dst, value, bytes);
    return rc;
  }
  cudaError_t e = cudaMemsetAsync(dst, value, bytes, nccl_stream_of(c, s));
  if (e != cudaSuccess) return nccl_cuda_fail(c, "cudaMemsetAsync", e);
  return nccl_mem_done(c, s);
}

/* Windows register the buffer with NCCL (ncclCommWindowRegister, >= 2.27) so collectives
 * on it can use NCCL's symmetric-memory kernels; with an older NCCL nothing is
 * registered (only a performance difference). One-sided put/get/signal are not offered. */
static ul_result_t nccl_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                        int extra_signals, ul_backend_window_t **out,
                                        void **peer_bases) {
  (void)extra_signals;
  NCCL_ENTER(c);
  ul_result_t rc = nccl_usable(c, "ul_window_register");
  if (rc != UL_OK) return rc;
  ul_backend_window_t *w = calloc(1, sizeof(*w));
  if (!w) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  for (int i = 0; i < c->nranks; i++) peer_bases[i] = NULL;
  if (nccl_opt.win_register) {
    ncclResult_t r = nccl_opt.win_register(c->nc, base, size, &w->win, ULNCCL_WIN_DEFAULT);
    if (r == ncclInProgress) rc = nccl_wait_ready(c, c->nc, "ncclCommWindowRegister");
    else if (r != ncclSuccess) rc = nccl_fail(c, "ncclCommWindowRegister (buffers must come from "
                                                 "ul_mem_alloc)", r);
  }
  if (rc != UL_OK) {
    free(w);
    return rc;
  }
  *out = w;
  return UL_OK;
}

static ul_result_t nccl_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  NCCL_ENTER(c);
  ul_result_t rc = UL_OK;
  if (w->win && nccl_opt.win_deregister && !nccl_aborted(c)) {
    ncclResult_t r = nccl_opt.win_deregister(c->nc, w->win);
    if (r == ncclInProgress) rc = nccl_wait_ready(c, c->nc, "ncclCommWindowDeregister");
    else if (r != ncclSuccess) rc = nccl_fail(c, "ncclCommWindowDeregister", r);
  }
  free(w);
  return rc;
}

static ul_result_t nccl_no_one_sided(ul_backend_comm_t *c, const char *what) {
  return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                              "nccl backend: %s is not available: NCCL 2.28 has no host-side "
                              "one-sided API (ncclPutSignal/ncclSignal arrive in 2.29); use the "
                              "cuda backend for put/get/signal",
                              what);
}
static ul_result_t nccl_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                            const void *src, size_t bytes, ul_backend_stream_t *s) {
  (void)w, (void)peer, (void)off, (void)src, (void)bytes, (void)s;
  return nccl_no_one_sided(c, "ul_put");
}
static ul_result_t nccl_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                            void *dst, size_t bytes, ul_backend_stream_t *s) {
  (void)w, (void)peer, (void)off, (void)dst, (void)bytes, (void)s;
  return nccl_no_one_sided(c, "ul_get");
}
static ul_result_t nccl_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                               ul_backend_stream_t *s) {
  (void)w, (void)peer, (void)index, (void)s;
  return nccl_no_one_sided(c, "ul_signal");
}
static ul_result_t nccl_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                    uint64_t value, ul_backend_stream_t *s) {
  (void)w, (void)index, (void)value, (void)s;
  return nccl_no_one_sided(c, "ul_wait_signal");
}

/* ------------------------------------------------------------- collectives */

/* Every collective: hold the comm, make its GPU current, refuse when aborted/broken,
 * map dtype (and op); count 0 is a no-op. */
#define NCCL_COLL_BEGIN(c, what, dtype, reduce, op)                      \
  NCCL_ENTER(c);                                                         \
  ncclDataType_t t;                                                      \
  ncclRedOp_t o = ncclSum;                                               \
  ul_result_t rc = nccl_usable(c, what);                                 \
  if (rc == UL_OK) rc = nccl_types(c, dtype, reduce, op, &t, &o);        \
  if (rc != UL_OK || count == 0) return rc;                              \
  (void)o

static ul_result_t nccl_allreduce(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                                  ul_dtype_t dtype, ul_op_t op, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_allreduce", dtype, 1, op);
  return nccl_finish(c, "ncclAllReduce",
                     ncclAllReduce(sb, rb, count, t, o, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_broadcast(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                                  ul_dtype_t dtype, int root, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_broadcast", dtype, 0, UL_SUM);
  ulnccl_coll_buffers(UL_COLL_BROADCAST, c->rank, root, &sb, &rb);
  return nccl_finish(c, "ncclBroadcast",
                     ncclBroadcast(sb, rb, count, t, root, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_reduce(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                               ul_dtype_t dtype, ul_op_t op, int root, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_reduce", dtype, 1, op);
  ulnccl_coll_buffers(UL_COLL_REDUCE, c->rank, root, &sb, &rb);
  return nccl_finish(c, "ncclReduce",
                     ncclReduce(sb, rb, count, t, o, root, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_allgather(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                                  ul_dtype_t dtype, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_allgather", dtype, 0, UL_SUM);
  return nccl_finish(c, "ncclAllGather",
                     ncclAllGather(sb, rb, count, t, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_reduce_scatter(ul_backend_comm_t *c, const void *sb, void *rb,
                                       size_t count, ul_dtype_t dtype, ul_op_t op,
                                       ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_reduce_scatter", dtype, 1, op);
  return nccl_finish(c, "ncclReduceScatter",
                     ncclReduceScatter(sb, rb, count, t, o, c->nc, nccl_stream_of(c, s)), s);
}

/* NCCL < 2.28.3: alltoall/gather/scatter as ncclSend/ncclRecv in one group (what
 * nccl-tests does for those versions). */
static ul_result_t nccl_p2p_fallback(ul_backend_comm_t *c, ul_coll_t coll, const char *call,
                                     const void *sb, void *rb, size_t count, ul_dtype_t dtype,
                                     ncclDataType_t t, int root, ul_backend_stream_t *s) {
  ulnccl_p2p_t *plan = malloc(2 * (size_t)c->nranks * sizeof(*plan));
  if (!plan) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  int n = ulnccl_p2p_plan(coll, c->rank, c->nranks, root, count * ul_dtype_size(dtype), sb, rb, plan);
  cudaStream_t st = nccl_stream_of(c, s);
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    free(plan);
    return nccl_fail(c, "ncclGroupStart", r);
  }
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n && (first == ncclSuccess || first == ncclInProgress); i++)
    first = plan[i].is_send ? ncclSend(plan[i].buf, count, t, plan[i].peer, c->nc, st)
                            : ncclRecv(plan[i].buf, count, t, plan[i].peer, c->nc, st);
  free(plan);
  r = ncclGroupEnd(); /* a started group is always ended */
  if (first != ncclSuccess && first != ncclInProgress) return nccl_fail(c, call, first);
  return nccl_finish(c, call, r, s);
}

static ul_result_t nccl_alltoall(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                                 ul_dtype_t dtype, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_alltoall", dtype, 0, UL_SUM);
  if (!nccl_opt.alltoall)
    return nccl_p2p_fallback(c, UL_COLL_ALLTOALL, "ncclSend/ncclRecv (alltoall)", sb, rb, count,
                             dtype, t, 0, s);
  return nccl_finish(c, "ncclAlltoAll",
                     nccl_opt.alltoall(sb, rb, count, t, c->nc, nccl_stream_of(c, s)), s);
}

/* The vector collectives: grouped ncclSend/ncclRecv of per-peer counts (NCCL has no
 * alltoallv or allgatherv; this is what NCCL users write by hand). */
static ul_result_t nccl_vgroup(ul_backend_comm_t *c, const char *call, const void *sb,
                               const size_t *scounts, const size_t *sdispls, void *rb,
                               const size_t *rcounts, const size_t *rdispls, ul_dtype_t dtype,
                               ul_backend_stream_t *s) {
  size_t count = 1; /* NCCL_COLL_BEGIN's no-op test: empty blocks are left out below */
  NCCL_COLL_BEGIN(c, call, dtype, 0, UL_SUM);
  ulnccl_vp2p_t *plan = malloc(2 * (size_t)c->nranks * sizeof(*plan));
  if (!plan) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  int n = ulnccl_vplan(c->rank, c->nranks, ul_dtype_size(dtype), sb, scounts, sdispls, rb,
                       rcounts, rdispls, plan);
  cudaStream_t st = nccl_stream_of(c, s);
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    free(plan);
    return nccl_fail(c, "ncclGroupStart", r);
  }
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n && (first == ncclSuccess || first == ncclInProgress); i++)
    first = plan[i].is_send ? ncclSend(plan[i].buf, plan[i].count, t, plan[i].peer, c->nc, st)
                            : ncclRecv(plan[i].buf, plan[i].count, t, plan[i].peer, c->nc, st);
  free(plan);
  r = ncclGroupEnd(); /* a started group is always ended */
  if (first != ncclSuccess && first != ncclInProgress) return nccl_fail(c, call, first);
  return nccl_finish(c, call, r, s);
}

static ul_result_t nccl_alltoallv(ul_backend_comm_t *c, const void *sb, const size_t *scounts,
                                  const size_t *sdispls, void *rb, const size_t *rcounts,
                                  const size_t *rdispls, ul_dtype_t dtype,
                                  ul_backend_stream_t *s) {
  return nccl_vgroup(c, "ncclSend/ncclRecv (alltoallv)", sb, scounts, sdispls, rb, rcounts,
                     rdispls, dtype, s);
}

static ul_result_t nccl_allgatherv(ul_backend_comm_t *c, const void *sb, size_t sendcount,
                                   void *rb, const size_t *rcounts, const size_t *displs,
                                   ul_dtype_t dtype, ul_backend_stream_t *s) {
  return nccl_vgroup(c, "ncclSend/ncclRecv (allgatherv)", sb, &sendcount, NULL, rb, rcounts,
                     displs, dtype, s);
}

static ul_result_t nccl_gather(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                               ul_dtype_t dtype, int root, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_gather", dtype, 0, UL_SUM);
  ulnccl_coll_buffers(UL_COLL_GATHER, c->rank, root, &sb, &rb);
  if (!nccl_opt.gather)
    return nccl_p2p_fallback(c, UL_COLL_GATHER, "ncclSend/ncclRecv (gather)", sb, rb, count,
                             dtype, t, root, s);
  return nccl_finish(c, "ncclGather",
                     nccl_opt.gather(sb, rb, count, t, root, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_scatter(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                                ul_dtype_t dtype, int root, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_scatter", dtype, 0, UL_SUM);
  ulnccl_coll_buffers(UL_COLL_SCATTER, c->rank, root, &sb, &rb);
  if (!nccl_opt.scatter)
    return nccl_p2p_fallback(c, UL_COLL_SCATTER, "ncclSend/ncclRecv (scatter)", sb, rb, count,
                             dtype, t, root, s);
  return nccl_finish(c, "ncclScatter",
                     nccl_opt.scatter(sb, rb, count, t, root, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_barrier(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  NCCL_ENTER(c);
  ul_result_t rc = nccl_usable(c, "ul_barrier");
  if (rc != UL_OK) return rc;
  /* NCCL has no barrier: a 1-element in-place allreduce of a zero int completes on every
   * rank only after all ranks entered it. */
  return nccl_finish(c, "ncclAllReduce (barrier)",
                     ncclAllReduce(c->barrier_buf, c->barrier_buf, 1, ncclInt32, ncclSum, c->nc,
                                   nccl_stream_of(c, s)),
                     s);
}

/* ---------------------------------------------------------- point to point */

static ul_result_t nccl_send(ul_backend_comm_t *c, const void *buf, size_t count,
                             ul_dtype_t dtype, int peer, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_send", dtype, 0, UL_SUM);
  return nccl_finish(c, "ncclSend", ncclSend(buf, count, t, peer, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_recv(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                             int peer, ul_backend_stream_t *s) {
  NCCL_COLL_BEGIN(c, "ul_recv", dtype, 0, UL_SUM);
  return nccl_finish(c, "ncclRecv", ncclRecv(buf, count, t, peer, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_group_start(ul_backend_comm_t *c) {
  NCCL_ENTER(c);
  ul_result_t rc = nccl_usable(c, "ul_group_start");
  if (rc != UL_OK) return rc;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return nccl_fail(c, "ncclGroupStart", r);
  nccl_group_depth++;
  return UL_OK;
}

static ul_result_t nccl_group_end(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  NCCL_ENTER(c);
  if (nccl_group_depth > 0) nccl_group_depth--;
  /* Always end NCCL's group (even aborted: the thread's group state must unwind). */
  ncclResult_t r = ncclGroupEnd();
  ul_result_t rc = nccl_usable(c, "ul_group_end");
  if (rc != UL_OK) return rc;
  return nccl_finish(c, "ncclGroupEnd", r, s);
}

/* ------------------------------------------------------------------- table */

static const ul_backend_coll_ops_t nccl_coll = {
    .struct_size = sizeof(ul_backend_coll_ops_t),
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .reduce = nccl_reduce,
    .allgather = nccl_allgather,
    .reduce_scatter = nccl_reduce_scatter,
    .alltoall = nccl_alltoall,
    .gather = nccl_gather,
    .scatter = nccl_scatter,
    .barrier = nccl_barrier,
    .alltoallv = nccl_alltoallv,
    .allgatherv = nccl_allgatherv,
};

static const ul_backend_ops_t nccl_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "nccl",
    .description = "NVIDIA NCCL on CUDA devices (NVLink, PCIe, network): native collectives",
    .priority = 100,
    .init = nccl_init,
    .fini = nccl_fini,
    .query_caps = nccl_query_caps,
    .get_unique_id = nccl_get_unique_id,
    .comm_init = nccl_comm_init,
    .comm_init_all = nccl_comm_init_all,
    .comm_split = nccl_comm_split,
    .comm_finalize = nccl_comm_finalize,
    .comm_destroy = nccl_comm_destroy,
    .comm_abort = nccl_comm_abort,
    .comm_topology = nccl_comm_topology,
    .stream_create = nccl_stream_create,
    .stream_wrap = nccl_stream_wrap,
    .stream_destroy = nccl_stream_destroy,
    .stream_synchronize = nccl_stream_synchronize,
    .stream_query = nccl_stream_query,
    .mem_alloc = nccl_mem_alloc,
    .mem_free = nccl_mem_free,
    .window_register = nccl_window_register,
    .window_deregister = nccl_window_deregister,
    .put = nccl_put,
    .get = nccl_get,
    .signal = nccl_signal,
    .wait_signal = nccl_wait_signal,
    .send = nccl_send,
    .recv = nccl_recv,
    .group_start = nccl_group_start,
    .group_end = nccl_group_end,
    .coll = &nccl_coll,
    .mem_kind = nccl_mem_kind,
    .mem_copy = nccl_mem_copy,
    .mem_set = nccl_mem_set,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &nccl_ops;
}
