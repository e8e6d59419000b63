/* nccl backend: every collective and send/recv forwarded to NCCL on the cudaStream_t a
 * ul_stream_t wraps. Communicators are nonblocking (config.blocking = 0) so that every
 * wait here polls with the timeout and the abort flag instead of hanging inside NCCL.
 * Links libnccl and libcudart (runtime) only: without a driver cudaGetDeviceCount
 * fails and init() reports UL_ERR_UNAVAILABLE with CUDA's sentence.
 *
 * NCCL versions: the plugin links only entry points NCCL 2.18.1 has (ULNCCL_MIN_VERSION,
 * checked by the unit.nccl_symbols test against nccl_symbols.txt); newer ones are
 * looked up at run time (ulnccl_opt) with fallbacks: alltoall/gather/scatter as grouped
 * ncclSend/ncclRecv, cudaMalloc for ncclMemAlloc, no window registration.
 *
 * Teardown: ncclCommAbort and ncclCommDestroy can block for long (NVIDIA/nccl#992,
 * #1777), so they run on a detached reaper thread and comm_destroy waits for it with a
 * deadline. The backend comm is reference counted: every call inside it, every stream
 * and the reaper hold a reference, so nothing frees it under a thread still polling. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_internal.h"

static int nccl_min_sm = 0; /* smallest compute capability among visible devices */
static int nccl_ndev;

/* ------------------------------------------------- current device (init paths) */

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

/* --------------------------------------------------------------- lifecycle */

static ul_result_t nccl_init(char *reason, size_t reason_len) {
  int n = 0;
  ul_result_t rc = ulgpu_device_count(reason, reason_len, &n);
  if (rc != UL_OK) return rc;
  ncclResult_t r = ncclGetVersion(&ulnccl_version_code);
  if (r != ncclSuccess) {
    snprintf(reason, reason_len, "ncclGetVersion: %s", ncclGetErrorString(r));
    return UL_ERR_UNAVAILABLE;
  }
  rc = ulnccl_version_supported(ulnccl_version_code, reason, reason_len);
  if (rc != UL_OK) return rc;
  ulnccl_resolve_optional();
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
                 ulnccl_version_code, ulnccl_opt.alltoall ? "yes" : "no (grouped send/recv)",
                 ulnccl_opt.mem_alloc ? "yes" : "no (cudaMalloc)",
                 ulnccl_opt.win_register ? "yes" : "no");
  return UL_OK;
}

static void nccl_fini(void) {}

static ul_result_t nccl_query_caps(ul_backend_caps_t *caps) {
  int ver = ulnccl_version_code ? ulnccl_version_code : NCCL_VERSION_CODE;
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
  p.version = (unsigned)(ulnccl_version_code ? ulnccl_version_code : NCCL_VERSION_CODE);
  ncclResult_t r = ncclGetUniqueId(&p.nccl_id);
  if (r != ncclSuccess) return ulnccl_fail(NULL, "ncclGetUniqueId", r);
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

/* CUDA resources (after NCCL is gone): the caller made c->device current. */
static void nccl_comm_release_cuda(ul_backend_comm_t *c) {
  if (c->internal) cudaStreamDestroy(c->internal);
  c->internal = NULL;
  if (c->barrier_buf) cudaFree(c->barrier_buf);
  c->barrier_buf = NULL;
  ulbu_alloc_list_destroy(&c->allocs, ulnccl_alloc_release, NULL);
}

/* The reaper: waits until no call is inside the comm (dead/abort is set, so pollers
 * leave within one backoff slice; a thread blocked inside NCCL itself is only freed by
 * ncclCommAbort, so after a grace period abort anyway), then ncclCommDestroy or
 * ncclCommAbort, then the CUDA resources. Never touches c->core (it may be gone). */
static ul_result_t nccl_idle_poll(void *arg) {
  ul_backend_comm_t *c = arg;
  return __atomic_load_n(&c->users, __ATOMIC_SEQ_CST) > 0 ? UL_IN_PROGRESS : UL_OK;
}

static void *nccl_reaper_main(void *arg) {
  ul_backend_comm_t *c = arg;
  /* No checks, no sentence: the grace period ends either way. */
  const ulbu_waiter_t grace = {.timeout_ms = 2000, .sleep_ns = 200000};
  const ulbu_cond_t idle = {nccl_idle_poll, NULL, c};
  ulbu_wait(&grace, &idle, "reaper", NULL);
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
  ulnccl_unref(c);
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
  ulnccl_ref(c);
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
  ulnccl_unref(c);
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
  if ((e = cudaSetDevice(c->device)) != cudaSuccess) return ulnccl_cuda_fail(c, "cudaSetDevice", e);
  /* A blocking stream: CUDA orders it after work on the legacy default stream, so a
   * NULL-stream call sees what cudaMemcpy/kernels on stream 0 wrote before it (H1). */
  if ((e = cudaStreamCreateWithFlags(&c->internal, cudaStreamDefault)) != cudaSuccess)
    return ulnccl_cuda_fail(c, "cudaStreamCreateWithFlags", e);
  if ((e = cudaMalloc((void **)&c->barrier_buf, sizeof(int) + c->nranks * sizeof(ulgpu_ident_t))) !=
      cudaSuccess)
    return ulnccl_cuda_fail(c, "cudaMalloc", e);
  if ((e = cudaMemsetAsync(c->barrier_buf, 0, sizeof(int), c->internal)) != cudaSuccess)
    return ulnccl_cuda_fail(c, "cudaMemsetAsync", e);
  c->idents = calloc((size_t)c->nranks, sizeof(ulgpu_ident_t));
  if (!c->idents) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  ul_result_t rc = ulgpu_ident_get(c->device, &c->idents[c->rank]);
  if (rc != UL_OK) return ul_backend_set_error(c->core, rc, "nccl backend: cannot read GPU %d", c->device);
  if (!exchange) return ulnccl_stream_wait(c, c->internal, c->timeout_ms);
  /* One small allgather at init tells every rank where the others' GPUs are (topology). */
  char *dev = (char *)c->barrier_buf + sizeof(int);
  size_t isz = sizeof(ulgpu_ident_t);
  if ((e = cudaMemcpyAsync(dev + c->rank * isz, &c->idents[c->rank], isz, cudaMemcpyHostToDevice,
                           c->internal)) != cudaSuccess)
    return ulnccl_cuda_fail(c, "cudaMemcpyAsync", e);
  ncclResult_t r = ncclAllGather(dev + c->rank * isz, dev, isz, ncclUint8, c->nc, c->internal);
  if (r == ncclInProgress) rc = ulnccl_wait_ready(c, c->nc, "ncclAllGather (init)");
  else if (r != ncclSuccess) rc = ulnccl_fail(c, "ncclAllGather (init)", r);
  if (rc != UL_OK) return rc;
  if ((e = cudaMemcpyAsync(c->idents, dev, c->nranks * isz, cudaMemcpyDeviceToHost, c->internal)) !=
      cudaSuccess)
    return ulnccl_cuda_fail(c, "cudaMemcpyAsync", e);
  return ulnccl_stream_wait(c, c->internal, c->timeout_ms);
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
    ul_result_t rc = ulnccl_cuda_fail(c, "cudaSetDevice", e);
    nccl_teardown_abort(c);
    return rc;
  }
  ncclConfig_t cfg;
  nccl_config(&cfg, a);
  ncclResult_t r = ncclCommInitRankConfig(&c->nc, a->nranks, p.nccl_id, a->rank, &cfg);
  ul_result_t rc = UL_OK;
  if (r != ncclSuccess && r != ncclInProgress) rc = ulnccl_fail(c, "ncclCommInitRankConfig", r);
  else if (c->nc) rc = ulnccl_wait_ready(c, c->nc, "ncclCommInitRankConfig");
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
  if (r != ncclSuccess) return ulnccl_fail(NULL, "ncclGetUniqueId", r);
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
    if (!grouped) rc = ulnccl_fail(out[0], "ncclGroupStart", r);
    for (int i = 0; i < ndev && rc == UL_OK; i++) {
      ncclConfig_t cfg;
      nccl_config(&cfg, &a[i]);
      cudaSetDevice(out[i]->device);
      r = ncclCommInitRankConfig(&out[i]->nc, ndev, id, i, &cfg);
      if (r != ncclSuccess && r != ncclInProgress) rc = ulnccl_fail(out[i], "ncclCommInitRankConfig", r);
    }
    if (grouped) { /* a started group is always ended */
      ncclResult_t re = ncclGroupEnd();
      if (rc == UL_OK && re != ncclSuccess && re != ncclInProgress)
        rc = ulnccl_fail(out[0], "ncclGroupEnd", re);
    }
  }
  for (int i = 0; i < ndev && rc == UL_OK; i++) {
    cudaSetDevice(out[i]->device);
    rc = out[i]->nc ? ulnccl_wait_ready(out[i], out[i]->nc, "ncclCommInitAll") : UL_ERR_INTERNAL;
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
  ul_result_t rc = ulnccl_usable(parent, "ul_comm_split");
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
    return ulnccl_fail(parent, "ncclCommSplit", r);
  }
  /* The parent reports the split's progress; only then is *slot final. */
  rc = ulnccl_wait_ready(parent, parent->nc, "ncclCommSplit");
  if (rc != UL_OK) return rc; /* slot leaked on purpose (see above) */
  ncclComm_t nc = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  free(slot);
  if (nc) rc = ulnccl_wait_ready(parent, nc, "ncclCommSplit (new communicator)");
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
  ul_result_t rc = ulnccl_stream_wait(c, c->internal, c->timeout_ms);
  if (rc != UL_OK) return rc;
  ncclResult_t r = ncclCommFinalize(c->nc);
  if (r != ncclSuccess && r != ncclInProgress) return ulnccl_fail(c, "ncclCommFinalize", r);
  rc = ulnccl_wait_ready(c, c->nc, "ncclCommFinalize");
  if (rc == UL_OK) c->finalized = 1;
  return rc;
}

static ul_result_t nccl_comm_finalize(ul_backend_comm_t *c) {
  NCCL_ENTER(c);
  ul_result_t rc = ulnccl_usable(c, "ul_comm_finalize");
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
    if (c->nc && !c->failed && !ulnccl_aborted(c)) {
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
  ulnccl_unref(c);
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
  if (rc == UL_OK) ulnccl_ref(c);
  return rc;
}

static ul_result_t nccl_stream_wrap(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out) {
  ul_result_t rc = ulgpu_stream_wrap(c, c->core, "nccl backend", native, out);
  if (rc == UL_OK) ulnccl_ref(c);
  return rc;
}

static ul_result_t nccl_stream_synchronize(ul_backend_stream_t *s, int timeout_ms) {
  ul_backend_comm_t *c = s->c;
  NCCL_ENTER(c);
  ul_result_t rc = ulnccl_usable(c, "ul_stream_synchronize");
  if (rc != UL_OK) return rc;
  return ulnccl_stream_wait(c, s->s, timeout_ms);
}

static ul_result_t nccl_stream_query(ul_backend_stream_t *s) {
  ul_backend_comm_t *c = s->c;
  NCCL_ENTER(c);
  ul_result_t rc = ulnccl_usable(c, "ul_stream_query");
  if (rc != UL_OK) return rc;
  cudaError_t e = cudaStreamQuery(s->s);
  if (e != cudaSuccess && e != cudaErrorNotReady) return ulnccl_cuda_fail(c, "cudaStreamQuery", e);
  rc = ulnccl_async_check(c);
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
    if (!gone && !ulnccl_aborted(c) && !c->failed) rc = ulnccl_stream_wait(c, s->s, c->timeout_ms);
    if (s->owned) cudaStreamDestroy(s->s); /* returns at once; CUDA frees it when idle */
  }
  free(s);
  ulnccl_unref(c);
  return rc;
}

/* ------------------------------------------------------------------- table */

static const ul_backend_coll_ops_t nccl_coll = {
    .struct_size = sizeof(ul_backend_coll_ops_t),
    .allreduce = ulnccl_allreduce,
    .broadcast = ulnccl_broadcast,
    .reduce = ulnccl_reduce,
    .allgather = ulnccl_allgather,
    .reduce_scatter = ulnccl_reduce_scatter,
    .alltoall = ulnccl_alltoall,
    .gather = ulnccl_gather,
    .scatter = ulnccl_scatter,
    .barrier = ulnccl_barrier,
    .alltoallv = ulnccl_alltoallv,
    .allgatherv = ulnccl_allgatherv,
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
    .mem_alloc = ulnccl_mem_alloc,
    .mem_free = ulnccl_mem_free,
    .window_register = ulnccl_window_register,
    .window_deregister = ulnccl_window_deregister,
    .put = ulnccl_put,
    .get = ulnccl_get,
    .signal = ulnccl_signal,
    .wait_signal = ulnccl_wait_signal,
    .send = ulnccl_send,
    .recv = ulnccl_recv,
    .group_start = ulnccl_group_start,
    .group_end = ulnccl_group_end,
    .coll = &nccl_coll,
    .mem_kind = ulnccl_mem_kind,
    .mem_copy = ulnccl_mem_copy,
    .mem_set = ulnccl_mem_set,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &nccl_ops;
}
