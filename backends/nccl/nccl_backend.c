/* nccl backend: every collective and send/recv forwarded to NCCL on the cudaStream_t a
 * ul_stream_t wraps. Communicators are nonblocking (config.blocking = 0) so that every
 * wait here polls with the timeout and the abort flag instead of hanging inside NCCL.
 * Links libnccl and libcudart (runtime) only: without a driver cudaGetDeviceCount
 * fails and init() reports UL_ERR_UNAVAILABLE with CUDA's sentence. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
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
  int timeout_ms;
  const volatile int *abort_flag;
  volatile int dead;        /* comm_abort ran: waiters leave, destroy aborts NCCL */
  int failed;               /* NCCL reported a fatal error: destroy must abort */
  cudaStream_t internal;    /* used for NULL streams; synchronized before returning */
  int *barrier_buf;         /* 1 device int: barrier = 1-element allreduce */
  ulgpu_ident_t *idents;    /* nranks: every rank's GPU (topology) */
  ulbu_alloc_list_t allocs; /* tag: ncclMemAlloc (1) or cudaMalloc fallback (0) */
};

struct ul_backend_window {
  ncclWindow_t win;
};

static int nccl_version_code;
static int nccl_min_sm = 0; /* smallest compute capability among visible devices */
static int nccl_ndev;

/* ------------------------------------------------------------------ errors */

static ul_result_t nccl_fail(ul_backend_comm_t *c, const char *call, ncclResult_t rc) {
  char buf[448];
  ulnccl_format_error(buf, sizeof(buf), call, rc, ncclGetErrorString(rc),
                      c && c->nc ? ncclGetLastError(c->nc) : ncclGetLastError(NULL));
  ul_result_t r = ulnccl_result(rc);
  if (c && r != UL_ERR_INVALID_ARG) c->failed = 1; /* NCCL: everything else is fatal */
  return ul_backend_set_error(c ? c->core : NULL, r, "rank %d: %s", c ? c->rank : -1, buf);
}

static ul_result_t nccl_cuda_fail(ul_backend_comm_t *c, const char *call, cudaError_t e) {
  return ulgpu_fail(c ? c->core : NULL, "nccl backend", call, e);
}

/* ----------------------------------------------------------------- waiting */

static ul_result_t nccl_check_abort(ul_backend_comm_t *c, const char *what) {
  if (c->dead || (c->abort_flag && *c->abort_flag))
    return ul_backend_set_error(c->core, UL_ERR_ABORTED, "rank %d: %s: communicator was aborted",
                                c->rank, what);
  return UL_OK;
}

/* Nonblocking NCCL: after a call returned ncclInProgress (or an init), poll the
 * communicator's state until it leaves ncclInProgress, honouring timeout and abort. */
static ul_result_t nccl_wait_ready(ul_backend_comm_t *c, ncclComm_t nc, const char *call) {
  double t0 = ulbu_now_ms();
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(nc, &st);
    if (r != ncclSuccess) return nccl_fail(c, "ncclCommGetAsyncError", r);
    if (st == ncclSuccess) return UL_OK;
    if (st != ncclInProgress) return nccl_fail(c, call, st);
    ul_result_t a = nccl_check_abort(c, call);
    if (a != UL_OK) return a;
    double now = ulbu_now_ms();
    if (c->timeout_ms > 0 && now - t0 > c->timeout_ms) {
      c->failed = 1;
      return ul_backend_set_error(c->core, UL_ERR_TIMEOUT,
                                  "rank %d: %s did not complete within %d ms (other ranks did "
                                  "not join?); abort the communicator",
                                  c->rank, call, c->timeout_ms);
    }
    ulbu_backoff(t0, now);
  }
}

/* Wait for a CUDA stream: cudaStreamQuery + ncclCommGetAsyncError, with the timeout and
 * the abort flag (the documented replacement for cudaStreamSynchronize). */
static ul_result_t nccl_stream_wait(ul_backend_comm_t *c, cudaStream_t s, int timeout_ms) {
  double t0 = ulbu_now_ms();
  for (unsigned spins = 0;; spins++) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return UL_OK;
    if (e != cudaErrorNotReady) return nccl_cuda_fail(c, "cudaStreamQuery", e);
    if ((spins & 63) == 0) { /* the async-error query costs more than a stream query */
      ncclResult_t st = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(c->nc, &st);
      if (r != ncclSuccess) return nccl_fail(c, "ncclCommGetAsyncError", r);
      if (st != ncclSuccess && st != ncclInProgress) return nccl_fail(c, "NCCL (async)", st);
    }
    ul_result_t a = nccl_check_abort(c, "stream synchronize");
    if (a != UL_OK) return a;
    double now = ulbu_now_ms();
    if (timeout_ms > 0 && now - t0 > timeout_ms) {
      c->failed = 1;
      return ul_backend_set_error(c->core, UL_ERR_TIMEOUT,
                                  "rank %d: work on the stream did not complete within %d ms "
                                  "(a peer did not call the matching operation?); abort the "
                                  "communicator",
                                  c->rank, timeout_ms);
    }
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
  char why[160];
  ul_result_t rc = reduce ? ulnccl_reduction_supported(dtype, op, nccl_version_code, c->sm_major,
                                                       why, sizeof(why))
                          : ulnccl_dtype_supported(dtype, nccl_version_code, c->sm_major, why,
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
  nccl_ndev = n;
  nccl_min_sm = 0;
  for (int d = 0; d < n; d++) {
    int maj = 0;
    if (cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess &&
        (nccl_min_sm == 0 || maj < nccl_min_sm))
      nccl_min_sm = maj;
  }
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
  caps->reduce_dtypes = caps->dtypes;
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
  p.version = NCCL_VERSION_CODE;
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
  ulbu_alloc_list_init(&c->allocs);
  cudaDeviceGetAttribute(&c->sm_major, cudaDevAttrComputeCapabilityMajor, device);
  return c;
}

/* tag 1: ncclMemAlloc, 0: the cudaMalloc fallback. */
static void nccl_alloc_release(void *ptr, int from_nccl, void *arg) {
  (void)arg;
  if (from_nccl) ncclMemFree(ptr);
  else cudaFree(ptr);
}

static void nccl_comm_free(ul_backend_comm_t *c) {
  if (!c) return;
  cudaSetDevice(c->device);
  if (c->internal) cudaStreamDestroy(c->internal);
  if (c->barrier_buf) cudaFree(c->barrier_buf);
  ulbu_alloc_list_destroy(&c->allocs, nccl_alloc_release, NULL);
  free(c->idents);
  free(c);
}

static void nccl_config(ncclConfig_t *cfg, const ul_backend_comm_args_t *a) {
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  *cfg = init;
  /* UNILINK_NCCL_BLOCKING=1 restores NCCL's blocking mode (debugging only: then a
   * missing peer can hang init without a timeout). */
  cfg->blocking = (int)ul_backend_param_int(
      "NCCL_BLOCKING", 0, "1: create NCCL communicators in blocking mode (no timeouts)");
  if (a && a->name && *a->name) cfg->commName = a->name;
}

/* Stream, barrier buffer and (optionally) the identity exchange. */
static ul_result_t nccl_comm_setup(ul_backend_comm_t *c, int exchange) {
  cudaError_t e;
  if ((e = cudaSetDevice(c->device)) != cudaSuccess) return nccl_cuda_fail(c, "cudaSetDevice", e);
  if ((e = cudaStreamCreateWithFlags(&c->internal, cudaStreamNonBlocking)) != cudaSuccess)
    return nccl_cuda_fail(c, "cudaStreamCreateWithFlags", e);
  if ((e = cudaMalloc((void **)&c->barrier_buf, sizeof(int) + c->nranks * sizeof(ulgpu_ident_t))) !=
      cudaSuccess)
    return nccl_cuda_fail(c, "cudaMalloc", e);
  cudaMemsetAsync(c->barrier_buf, 0, sizeof(int), c->internal);
  c->idents = calloc((size_t)c->nranks, sizeof(ulgpu_ident_t));
  if (!c->idents) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  ul_result_t rc = ulgpu_ident_get(c->device, &c->idents[c->rank]);
  if (rc != UL_OK) return ul_backend_set_error(c->core, rc, "nccl backend: cannot read GPU %d", c->device);
  if (!exchange) return UL_OK;
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

static void nccl_props(ul_backend_comm_props_t *props) {
  if (!props) return;
  props->load_store_peers = 0;
  snprintf(props->path, sizeof(props->path), "nccl");
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
  ul_backend_comm_t *c = nccl_comm_new(a, dev);
  if (!c) return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess) {
    ul_result_t rc = nccl_cuda_fail(c, "cudaSetDevice", e);
    nccl_comm_free(c);
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
    if (c->nc) ncclCommAbort(c->nc);
    c->nc = NULL;
    nccl_comm_free(c);
    return rc;
  }
  nccl_props(props);
  *out = c;
  return UL_OK;
}

/* One process, several GPUs: the grouped ncclCommInitRankConfig form of ncclCommInitAll,
 * so the communicators are nonblocking like every other one here. */
static ul_result_t nccl_comm_init_all(const ul_backend_comm_args_t *a, int ndev,
                                      ul_backend_comm_t **out, ul_backend_comm_props_t *props) {
  for (int i = 0; i < ndev; i++) out[i] = NULL;
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
    ncclGroupStart();
    for (int i = 0; i < ndev; i++) {
      ncclConfig_t cfg;
      nccl_config(&cfg, &a[i]);
      cudaSetDevice(out[i]->device);
      r = ncclCommInitRankConfig(&out[i]->nc, ndev, id, i, &cfg);
      if (r != ncclSuccess && r != ncclInProgress) {
        rc = nccl_fail(out[i], "ncclCommInitRankConfig", r);
        break;
      }
    }
    r = ncclGroupEnd();
    if (rc == UL_OK && r != ncclSuccess && r != ncclInProgress) rc = nccl_fail(out[0], "ncclGroupEnd", r);
  }
  for (int i = 0; i < ndev && rc == UL_OK; i++)
    rc = out[i]->nc ? nccl_wait_ready(out[i], out[i]->nc, "ncclCommInitAll") : UL_ERR_INTERNAL;
  for (int i = 0; i < ndev && rc == UL_OK; i++) rc = nccl_comm_setup(out[i], 0);
  if (rc == UL_OK) {
    /* Same process: every rank's identity is known without an exchange. */
    for (int i = 0; i < ndev; i++)
      for (int j = 0; j < ndev; j++) out[i]->idents[j] = out[j]->idents[j];
    for (int i = 0; i < ndev; i++) nccl_props(&props[i]);
    return UL_OK;
  }
  for (int i = 0; i < ndev; i++) {
    if (out[i] && out[i]->nc) ncclCommAbort(out[i]->nc);
    if (out[i]) out[i]->nc = NULL;
    nccl_comm_free(out[i]);
    out[i] = NULL;
  }
  return rc;
}

static ul_result_t nccl_comm_split(ul_backend_comm_t *parent, int color, int key,
                                   const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                   ul_backend_comm_props_t *props) {
  *out = NULL;
  ncclConfig_t cfg;
  nccl_config(&cfg, a);
  ncclComm_t nc = NULL;
  cudaSetDevice(parent->device);
  ncclResult_t r = ncclCommSplit(parent->nc, color == UL_SPLIT_NOCOLOR ? NCCL_SPLIT_NOCOLOR : color,
                                 key, &nc, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(parent, "ncclCommSplit", r);
  ul_result_t rc = nccl_wait_ready(parent, nc ? nc : parent->nc, "ncclCommSplit");
  if (rc != UL_OK || !nc) {
    if (nc) ncclCommAbort(nc);
    return rc;
  }
  ul_backend_comm_args_t args = *a;
  ncclCommUserRank(nc, &args.rank);
  ncclCommCount(nc, &args.nranks);
  ul_backend_comm_t *c = nccl_comm_new(&args, parent->device);
  if (!c) {
    ncclCommAbort(nc);
    return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  }
  c->nc = nc;
  rc = nccl_comm_setup(c, 1);
  if (rc != UL_OK) {
    ncclCommAbort(c->nc);
    c->nc = NULL;
    nccl_comm_free(c);
    return rc;
  }
  nccl_props(props);
  *out = c;
  return UL_OK;
}

static ul_result_t nccl_comm_finalize(ul_backend_comm_t *c) {
  ul_result_t rc = nccl_stream_wait(c, c->internal, c->timeout_ms);
  if (rc != UL_OK) return rc;
  ncclResult_t r = ncclCommFinalize(c->nc);
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(c, "ncclCommFinalize", r);
  return nccl_wait_ready(c, c->nc, "ncclCommFinalize");
}

static ul_result_t nccl_comm_destroy(ul_backend_comm_t *c) {
  if (c->nc) {
    /* After an abort, a timeout or a fatal error, only ncclCommAbort is safe: it does
     * not wait for peers and stops kernels that wait for them. */
    if (c->dead || c->failed) ncclCommAbort(c->nc);
    else if (ncclCommDestroy(c->nc) != ncclSuccess) ncclCommAbort(c->nc);
    c->nc = NULL;
  }
  nccl_comm_free(c);
  return UL_OK;
}

static ul_result_t nccl_comm_abort(ul_backend_comm_t *c) {
  c->dead = 1; /* waiters poll this; destroy runs ncclCommAbort once they have left */
  return UL_OK;
}

static ul_result_t nccl_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  out->peer = peer;
  ulgpu_topology(&c->idents[c->rank], &c->idents[peer], peer == c->rank, out);
  return UL_OK;
}

/* ----------------------------------------------------------------- streams */

static ul_result_t nccl_stream_create(ul_backend_comm_t *c, ul_backend_stream_t **out) {
  return ulgpu_stream_create(c, c->core, "nccl backend", c->device, out);
}

static ul_result_t nccl_stream_wrap(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out) {
  return ulgpu_stream_wrap(c, c->core, "nccl backend", native, out);
}

static ul_result_t nccl_stream_synchronize(ul_backend_stream_t *s, int timeout_ms) {
  return nccl_stream_wait(s->c, s->s, timeout_ms);
}

static ul_result_t nccl_stream_query(ul_backend_stream_t *s) {
  cudaError_t e = cudaStreamQuery(s->s);
  if (e == cudaErrorNotReady) {
    ncclResult_t st = ncclSuccess;
    if (ncclCommGetAsyncError(s->c->nc, &st) == ncclSuccess && st != ncclSuccess &&
        st != ncclInProgress)
      return nccl_fail(s->c, "NCCL (async)", st);
    return UL_IN_PROGRESS;
  }
  if (e != cudaSuccess) return nccl_cuda_fail(s->c, "cudaStreamQuery", e);
  return UL_OK;
}

static ul_result_t nccl_stream_destroy(ul_backend_stream_t *s) {
  ul_result_t rc = UL_OK;
  if (!s->c->dead && !s->c->failed) rc = nccl_stream_wait(s->c, s->s, s->c->timeout_ms);
  if (s->owned) cudaStreamDestroy(s->s); /* returns at once; CUDA frees it when idle */
  free(s);
  return rc;
}

/* ------------------------------------------------------------------ memory */

static ul_result_t nccl_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  void *p = NULL;
  int from_nccl = 0;
  cudaSetDevice(c->device);
  /* ncclMemAlloc gives VMM memory every NCCL optimisation (and windows) accepts; fall
   * back to cudaMalloc where VMM is not available. */
  ncclResult_t r = ncclMemAlloc(&p, size);
  if (r == ncclSuccess) {
    from_nccl = 1;
  } else {
    cudaError_t e = cudaMalloc(&p, size);
    if (e != cudaSuccess) return nccl_cuda_fail(c, "cudaMalloc", e);
  }
  ul_result_t rc = ulbu_alloc_add(&c->allocs, c->core, "nccl backend", p, size, from_nccl);
  if (rc != UL_OK) {
    nccl_alloc_release(p, from_nccl, NULL);
    return rc;
  }
  *ptr = p;
  return UL_OK;
}

static ul_result_t nccl_mem_free(ul_backend_comm_t *c, void *ptr) {
  int from_nccl = 0;
  ul_result_t rc = ulbu_alloc_remove(&c->allocs, c->core, "nccl backend", ptr, &from_nccl);
  if (rc != UL_OK) return rc;
  cudaSetDevice(c->device);
  nccl_alloc_release(ptr, from_nccl, NULL);
  return UL_OK;
}

/* Windows register the buffer with NCCL (ncclCommWindowRegister) so collectives on it
 * can use NCCL's symmetric-memory kernels; one-sided put/get/signal are not offered. */
static ul_result_t nccl_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                        int extra_signals, ul_backend_window_t **out,
                                        void **peer_bases) {
  ul_backend_window_t *w = calloc(1, sizeof(*w));
  if (!w) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  for (int i = 0; i < c->nranks; i++) peer_bases[i] = NULL;
  cudaSetDevice(c->device);
  ncclResult_t r = ncclCommWindowRegister(c->nc, base, size, &w->win, NCCL_WIN_DEFAULT);
  ul_result_t rc = UL_OK;
  if (r == ncclInProgress) rc = nccl_wait_ready(c, c->nc, "ncclCommWindowRegister");
  else if (r != ncclSuccess) rc = nccl_fail(c, "ncclCommWindowRegister (buffers must come from "
                                               "ul_mem_alloc)", r);
  if (rc != UL_OK) {
    free(w);
    return rc;
  }
  *out = w;
  return UL_OK;
}

static ul_result_t nccl_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  ul_result_t rc = UL_OK;
  if (w->win) {
    ncclResult_t r = ncclCommWindowDeregister(c->nc, w->win);
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
  return nccl_no_one_sided(c, "ul_put");
}
static ul_result_t nccl_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                            void *dst, size_t bytes, ul_backend_stream_t *s) {
  return nccl_no_one_sided(c, "ul_get");
}
static ul_result_t nccl_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                               ul_backend_stream_t *s) {
  return nccl_no_one_sided(c, "ul_signal");
}
static ul_result_t nccl_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                    uint64_t value, ul_backend_stream_t *s) {
  return nccl_no_one_sided(c, "ul_wait_signal");
}

/* ------------------------------------------------------------- collectives */

static ul_result_t nccl_allreduce(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                                  ul_dtype_t dtype, ul_op_t op, ul_backend_stream_t *s) {
  ncclDataType_t t;
  ncclRedOp_t o;
  ul_result_t rc = nccl_types(c, dtype, 1, op, &t, &o);
  if (rc != UL_OK || count == 0) return rc;
  return nccl_finish(c, "ncclAllReduce",
                     ncclAllReduce(sb, rb, count, t, o, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_broadcast(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                                  ul_dtype_t dtype, int root, ul_backend_stream_t *s) {
  ncclDataType_t t;
  ul_result_t rc = nccl_types(c, dtype, 0, UL_SUM, &t, NULL);
  if (rc != UL_OK || count == 0) return rc;
  ulnccl_coll_buffers(UL_COLL_BROADCAST, c->rank, root, &sb, &rb);
  return nccl_finish(c, "ncclBroadcast",
                     ncclBroadcast(sb, rb, count, t, root, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_reduce(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                               ul_dtype_t dtype, ul_op_t op, int root, ul_backend_stream_t *s) {
  ncclDataType_t t;
  ncclRedOp_t o;
  ul_result_t rc = nccl_types(c, dtype, 1, op, &t, &o);
  if (rc != UL_OK || count == 0) return rc;
  ulnccl_coll_buffers(UL_COLL_REDUCE, c->rank, root, &sb, &rb);
  return nccl_finish(c, "ncclReduce",
                     ncclReduce(sb, rb, count, t, o, root, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_allgather(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                                  ul_dtype_t dtype, ul_backend_stream_t *s) {
  ncclDataType_t t;
  ul_result_t rc = nccl_types(c, dtype, 0, UL_SUM, &t, NULL);
  if (rc != UL_OK || count == 0) return rc;
  return nccl_finish(c, "ncclAllGather",
                     ncclAllGather(sb, rb, count, t, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_reduce_scatter(ul_backend_comm_t *c, const void *sb, void *rb,
                                       size_t count, ul_dtype_t dtype, ul_op_t op,
                                       ul_backend_stream_t *s) {
  ncclDataType_t t;
  ncclRedOp_t o;
  ul_result_t rc = nccl_types(c, dtype, 1, op, &t, &o);
  if (rc != UL_OK || count == 0) return rc;
  return nccl_finish(c, "ncclReduceScatter",
                     ncclReduceScatter(sb, rb, count, t, o, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_alltoall(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                                 ul_dtype_t dtype, ul_backend_stream_t *s) {
  ncclDataType_t t;
  ul_result_t rc = nccl_types(c, dtype, 0, UL_SUM, &t, NULL);
  if (rc != UL_OK || count == 0) return rc;
  return nccl_finish(c, "ncclAlltoAll",
                     ncclAlltoAll(sb, rb, count, t, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_gather(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                               ul_dtype_t dtype, int root, ul_backend_stream_t *s) {
  ncclDataType_t t;
  ul_result_t rc = nccl_types(c, dtype, 0, UL_SUM, &t, NULL);
  if (rc != UL_OK || count == 0) return rc;
  ulnccl_coll_buffers(UL_COLL_GATHER, c->rank, root, &sb, &rb);
  return nccl_finish(c, "ncclGather",
                     ncclGather(sb, rb, count, t, root, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_scatter(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                                ul_dtype_t dtype, int root, ul_backend_stream_t *s) {
  ncclDataType_t t;
  ul_result_t rc = nccl_types(c, dtype, 0, UL_SUM, &t, NULL);
  if (rc != UL_OK || count == 0) return rc;
  ulnccl_coll_buffers(UL_COLL_SCATTER, c->rank, root, &sb, &rb);
  return nccl_finish(c, "ncclScatter",
                     ncclScatter(sb, rb, count, t, root, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_barrier(ul_backend_comm_t *c, ul_backend_stream_t *s) {
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
  ncclDataType_t t;
  ul_result_t rc = nccl_types(c, dtype, 0, UL_SUM, &t, NULL);
  if (rc != UL_OK || count == 0) return rc;
  return nccl_finish(c, "ncclSend", ncclSend(buf, count, t, peer, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_recv(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                             int peer, ul_backend_stream_t *s) {
  ncclDataType_t t;
  ul_result_t rc = nccl_types(c, dtype, 0, UL_SUM, &t, NULL);
  if (rc != UL_OK || count == 0) return rc;
  return nccl_finish(c, "ncclRecv", ncclRecv(buf, count, t, peer, c->nc, nccl_stream_of(c, s)), s);
}

static ul_result_t nccl_group_start(ul_backend_comm_t *c) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return nccl_fail(c, "ncclGroupStart", r);
  nccl_group_depth++;
  return UL_OK;
}

static ul_result_t nccl_group_end(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  if (nccl_group_depth > 0) nccl_group_depth--;
  return nccl_finish(c, "ncclGroupEnd", ncclGroupEnd(), s);
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
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &nccl_ops;
}
