/* cuda backend: a peer-copy backend for the core's generic algorithm layer.
 *
 * Paths (UNILINK_CUDA_PATH=auto|p2p|staged, reported in props.path):
 *  - p2p: peer access (cudaDeviceEnablePeerAccess) and cudaMemcpyAsync between GPUs of
 *    one process, cudaIpcGetMemHandle/cudaIpcOpenMemHandle between processes: NVLink
 *    or PCIe P2P, whichever the machine has.
 *  - staged: no peer access. Each rank's window has a shadow in pinned host memory (a
 *    POSIX shm segment registered with cudaHostRegister in every process); put copies
 *    device -> the peer's shadow and logs the range; the peer's wait_signal copies the
 *    logged ranges shadow -> its device window. get needs peer access (unsupported).
 *
 * Signals: counters in host-mapped pinned memory (the same shm segments), one cell
 * per (index, sender) so no cross-device atomics are needed: a sender stores its own
 * running count with a one-thread kernel after a system fence (the runtime has no
 * cudaStreamWriteValue; cuStreamWriteValue64 is driver API, which this plugin must not
 * link). The reader sums the cells. Waits happen on the host (polling the mapped
 * counters with the timeout and the abort flag) rather than in a spinning kernel, so
 * a lost peer can never leave a kernel hung on the GPU.
 *
 * Bootstrap: a POSIX shm "board" named by random bytes of the unique id (0600,
 * unlinked once every rank joined) with a barrier and one slot per rank for the
 * allgathers of init and window registration. Ranks therefore share one host. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <unilink/backend.h>

#include "backend_util.h"
#include "gpu_common.h"
#include "gpu_stream.h"
#include "gpu_topo.h"
#ifdef UNILINK_CUDA_KERNELS
#include "cuda_kernels.h"
#endif

#define CUDA_ID_MAGIC 0x43554441u /* "CUDA" */
#define CUDA_SLOT_BYTES 512
#define CUDA_LOG_N 4096

/* What a rank publishes in its slot. */
typedef struct cuda_slot {
  ulgpu_ident_t ident;
  int p2p_ok;                 /* this rank reaches every peer with peer access */
  cudaIpcMemHandle_t ipc;     /* window allocation */
  uint64_t ipc_offset;        /* window base - allocation base */
  uint64_t raw_base;          /* window base in its process (same-process peers) */
  uint64_t size;
} cuda_slot_t;
_Static_assert(sizeof(cuda_slot_t) <= CUDA_SLOT_BYTES, "slot too small");

struct ul_backend_comm {
  ul_comm_t core;
  int rank, nranks, device;
  int timeout_ms;
  const volatile int *abort_flag;
  volatile int dead;
  ulgpu_path_t path;
  int same_process; /* every rank lives in this process */
  cudaStream_t internal;
  ulbu_board_t board; /* bootstrap: barrier and allgathers */
  ulgpu_ident_t *idents;
  int *peer_dev; /* local CUDA index of each peer's GPU, -1 if not visible */
  unsigned win_seq;
  ulbu_alloc_list_t allocs; /* ul_mem_alloc memory (IPC export needs the allocation) */
};

/* Layout of one rank's window segment (host, shared). */
typedef struct cuda_log_entry {
  _Atomic uint64_t seq; /* 1-based sequence once written */
  uint64_t off, bytes;
} cuda_log_entry_t;
typedef struct cuda_seg_hdr {
  _Atomic uint64_t log_head;   /* entries reserved */
  _Atomic int log_overflow;    /* too many pending puts: copy the whole shadow */
  uint64_t log_tail;           /* owner only */
  cuda_log_entry_t log[CUDA_LOG_N];
} cuda_seg_hdr_t;

typedef struct cuda_peer_win {
  void *dev;                 /* peer window in this process's address space (p2p) */
  int ipc_opened;
  char *seg;                 /* peer's segment mapped here */
  uint64_t *sig_dev;         /* device view of seg's signal cells */
  uint64_t *my_count;        /* my running count per signal index towards this peer */
} cuda_peer_win_t;

struct ul_backend_window {
  void *base;
  size_t size;
  int nsig;
  size_t seg_len, sig_off, shadow_off;
  cuda_peer_win_t *peers; /* nranks */
};

/* ----------------------------------------------------------------- helpers */

static int cuda_ndev;

static ul_result_t cuda_fail(ul_backend_comm_t *c, const char *call, cudaError_t e) {
  return ulgpu_fail(c ? c->core : NULL, "cuda backend", call, e);
}

/* UL_OK to keep waiting, else the error to return. */
static ul_result_t cuda_wait_check(ul_backend_comm_t *c, double t0, const char *what) {
  return ulbu_wait_step(c->core, c->rank, c->dead || (c->abort_flag && *c->abort_flag), t0,
                        c->timeout_ms, what);
}

static ul_result_t cuda_board_wait(void *arg, double t0, const char *what) {
  return cuda_wait_check(arg, t0, what);
}

static ul_result_t cuda_stream_wait(ul_backend_comm_t *c, cudaStream_t s, int timeout_ms) {
  double t0 = ulbu_now_ms();
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return UL_OK;
    if (e != cudaErrorNotReady) return cuda_fail(c, "cudaStreamQuery", e);
    if (c->dead || (c->abort_flag && *c->abort_flag))
      return ul_backend_set_error(c->core, UL_ERR_ABORTED,
                                  "rank %d: stream synchronize: communicator was aborted", c->rank);
    double now = ulbu_now_ms();
    if (timeout_ms > 0 && now - t0 > timeout_ms)
      return ul_backend_set_error(c->core, UL_ERR_TIMEOUT,
                                  "rank %d: work on the stream did not complete within %d ms",
                                  c->rank, timeout_ms);
    ulbu_backoff(t0, now);
  }
}

static inline cudaStream_t cuda_stream_of(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return s ? s->s : c->internal;
}

/* NULL stream: run now. */
static ul_result_t cuda_done(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return s ? UL_OK : cuda_stream_wait(c, c->internal, c->timeout_ms);
}

/* ------------------------------------------------------------------- board */

/* Rank 0 also unlinks the board name, in case its creator died before doing so. */
static const ulbu_board_conf_t cuda_board_conf = {"cuda backend", "ulcuda", CUDA_SLOT_BYTES, 1,
                                                  cuda_board_wait};

/* Publish *mine, then read every rank's slot into all[] (collective). */
static ul_result_t cuda_allgather(ul_backend_comm_t *c, const cuda_slot_t *mine, cuda_slot_t *all,
                                const char *what) {
  return ulbu_board_allgather(&c->board, mine, all, sizeof(*mine), what);
}

/* --------------------------------------------------------------- lifecycle */

static ul_result_t cuda_init(char *reason, size_t reason_len) {
  return ulgpu_device_count(reason, reason_len, &cuda_ndev);
}

static void cuda_fini(void) {}

static ul_result_t cuda_query_caps(ul_backend_caps_t *caps) {
  caps->features = UL_FEATURE_THREAD_RANKS | UL_FEATURE_PROCESS_RANKS | UL_FEATURE_STREAMS |
                   UL_FEATURE_P2P | UL_FEATURE_ONE_SIDED | UL_FEATURE_DEVICE_MEMORY |
                   UL_FEATURE_GENERIC_COLL | UL_FEATURE_SPLIT;
  caps->flags = 0; /* native CUDA streams; buffers are device memory */
  caps->native_colls = 0;
  caps->dtypes = (1u << UL_DTYPE_COUNT) - 1;
#ifdef UNILINK_CUDA_KERNELS
  caps->reduce_dtypes = (1u << UL_DTYPE_COUNT) - 1;
#else
  caps->reduce_dtypes = 0; /* built without nvcc: no device reduction kernels */
#endif
  caps->ops = (1u << UL_OP_COUNT) - 1;
  caps->max_ranks = 0;
  ulgpu_runtime_version(caps->version, sizeof(caps->version));
  return UL_OK;
}

static ul_result_t cuda_get_unique_id(unsigned char *payload, size_t bytes) {
  return ulbu_token_id_make(payload, bytes, CUDA_ID_MAGIC, "cuda backend");
}

static void cuda_alloc_release(void *ptr, int tag, void *arg) {
  (void)tag, (void)arg;
  cudaFree(ptr);
}

static void cuda_comm_free(ul_backend_comm_t *c) {
  if (!c) return;
  cudaSetDevice(c->device);
  if (c->internal) cudaStreamDestroy(c->internal);
  ulbu_alloc_list_destroy(&c->allocs, cuda_alloc_release, NULL);
  ulbu_board_leave(&c->board);
  free(c->idents);
  free(c->peer_dev);
  free(c);
}

static ul_result_t cuda_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                  ul_backend_comm_props_t *props) {
  *out = NULL;
  ulbu_token_id_t p;
  ul_result_t prc = ulbu_token_id_read(a, CUDA_ID_MAGIC, "cuda backend", "cuda", &p);
  if (prc != UL_OK) return prc;
  ulgpu_path_t want;
  const char *ptxt = ul_backend_param_str("CUDA_PATH", "auto",
                                          "cuda backend data path: auto | p2p (peer access, NVLink "
                                          "or PCIe P2P) | staged (through pinned host memory)");
  if (ulgpu_parse_path(ptxt, &want) != UL_OK)
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "cuda backend: UNILINK_CUDA_PATH='%s' is not auto, p2p or staged",
                                ptxt);
  ul_backend_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  c->core = a->comm;
  c->rank = a->rank;
  c->nranks = a->nranks;
  c->timeout_ms = a->timeout_ms;
  c->abort_flag = a->abort_flag;
  c->device = a->device != UL_CONFIG_UNDEF ? a->device : (cuda_ndev ? a->rank % cuda_ndev : 0);
  ulbu_alloc_list_init(&c->allocs);
  ul_result_t rc = UL_OK;
  cuda_slot_t mine, *all = NULL;
  cudaError_t e;
  if (c->device < 0 || c->device >= cuda_ndev) {
    rc = ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                              "cuda backend: device %d out of range (%d visible)", c->device,
                              cuda_ndev);
    goto fail;
  }
  if ((e = cudaSetDevice(c->device)) != cudaSuccess) {
    rc = cuda_fail(c, "cudaSetDevice", e);
    goto fail;
  }
  if ((e = cudaStreamCreateWithFlags(&c->internal, cudaStreamNonBlocking)) != cudaSuccess) {
    rc = cuda_fail(c, "cudaStreamCreateWithFlags", e);
    goto fail;
  }
  c->idents = calloc((size_t)c->nranks, sizeof(*c->idents));
  c->peer_dev = calloc((size_t)c->nranks, sizeof(int));
  all = calloc((size_t)c->nranks, sizeof(*all));
  if (!c->idents || !c->peer_dev || !all) {
    rc = ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
    goto fail;
  }
  if ((rc = ulbu_board_join(&c->board, &cuda_board_conf, c, c->core, c->rank, c->nranks,
                           p.token)) != UL_OK)
    goto fail;
  memset(&mine, 0, sizeof(mine));
  if ((rc = ulgpu_ident_get(c->device, &mine.ident)) != UL_OK) {
    rc = ul_backend_set_error(a->comm, rc, "cuda backend: cannot read GPU %d", c->device);
    goto fail;
  }
  if ((rc = cuda_allgather(c, &mine, all, "comm init")) != UL_OK) goto fail;
  /* Which peers can this GPU reach with peer access? */
  mine.p2p_ok = 1;
  c->same_process = 1;
  for (int r = 0; r < c->nranks; r++) {
    c->idents[r] = all[r].ident;
    if (all[r].ident.pid != mine.ident.pid) c->same_process = 0;
    if (all[r].ident.host_hash != mine.ident.host_hash) {
      rc = ul_backend_set_error(a->comm, UL_ERR_UNSUPPORTED,
                                "cuda backend: rank %d is on another host; the cuda backend "
                                "connects GPUs of one host (use nccl or mpi)", r);
      goto fail;
    }
    char bus[32];
    snprintf(bus, sizeof(bus), "%04x:%02x:%02x.0", (unsigned)all[r].ident.pci_domain,
             (unsigned)all[r].ident.pci_bus, (unsigned)all[r].ident.pci_dev);
    int d = -1;
    if (cudaDeviceGetByPCIBusId(&d, bus) != cudaSuccess) d = -1;
    c->peer_dev[r] = d;
    if (r == c->rank || d == c->device) continue;
    int can = 0;
    if (d < 0 || cudaDeviceCanAccessPeer(&can, c->device, d) != cudaSuccess || !can)
      mine.p2p_ok = 0;
  }
  /* Agree on the path: p2p only if every rank reaches every peer. */
  if ((rc = cuda_allgather(c, &mine, all, "comm init")) != UL_OK) goto fail;
  int all_p2p = 1;
  for (int r = 0; r < c->nranks; r++) all_p2p &= all[r].p2p_ok;
  char why[160];
  if ((rc = ulgpu_choose_path(want, all_p2p, &c->path, why, sizeof(why))) != UL_OK) {
    rc = ul_backend_set_error(a->comm, rc, "cuda backend: %s", why);
    goto fail;
  }
  if (c->path == ULGPU_PATH_P2P) {
    for (int r = 0; r < c->nranks; r++) {
      int d = c->peer_dev[r];
      if (r == c->rank || d < 0 || d == c->device) continue;
      e = cudaDeviceEnablePeerAccess(d, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError(); /* clear, it is fine */
      else if (e != cudaSuccess) {
        rc = cuda_fail(c, "cudaDeviceEnablePeerAccess", e);
        goto fail;
      }
    }
  }
  ul_backend_log(UL_LOG_INFO, "cuda", "rank %d GPU %d: path %s (%s)", c->rank, c->device,
                 ulgpu_path_name(c->path), why);
  free(all);
  if (props) {
    /* Pointers of one rank are usable by the others only within one process, with
     * peer access (UVA); the core still moves them through copy_local/reduce_local. */
    props->load_store_peers = c->same_process && c->path == ULGPU_PATH_P2P;
    snprintf(props->path, sizeof(props->path), "%s", ulgpu_path_name(c->path));
  }
  *out = c;
  return UL_OK;
fail:
  free(all);
  cuda_comm_free(c);
  return rc;
}

static ul_result_t cuda_comm_finalize(ul_backend_comm_t *c) {
  ul_result_t rc = cuda_stream_wait(c, c->internal, c->timeout_ms);
  if (rc != UL_OK) return rc;
  return ulbu_board_barrier(&c->board, "comm finalize");
}

static ul_result_t cuda_comm_destroy(ul_backend_comm_t *c) {
  cuda_comm_free(c);
  return UL_OK;
}

static ul_result_t cuda_comm_abort(ul_backend_comm_t *c) {
  c->dead = 1;
  return UL_OK;
}

static ul_result_t cuda_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  out->peer = peer;
  ulgpu_topology(&c->idents[c->rank], &c->idents[peer], peer == c->rank, out);
  return UL_OK;
}

/* ----------------------------------------------------------------- streams */

static ul_result_t cuda_stream_create(ul_backend_comm_t *c, ul_backend_stream_t **out) {
  return ulgpu_stream_create(c, c->core, "cuda backend", c->device, out);
}

static ul_result_t cuda_stream_wrap(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out) {
  return ulgpu_stream_wrap(c, c->core, "cuda backend", native, out);
}

static ul_result_t cuda_stream_synchronize(ul_backend_stream_t *s, int timeout_ms) {
  return cuda_stream_wait(s->c, s->s, timeout_ms);
}

static ul_result_t cuda_stream_query(ul_backend_stream_t *s) {
  cudaError_t e = cudaStreamQuery(s->s);
  if (e == cudaErrorNotReady) return UL_IN_PROGRESS;
  if (e != cudaSuccess) return cuda_fail(s->c, "cudaStreamQuery", e);
  return UL_OK;
}

static ul_result_t cuda_stream_destroy(ul_backend_stream_t *s) {
  ul_result_t rc = s->c->dead ? UL_OK : cuda_stream_wait(s->c, s->s, s->c->timeout_ms);
  if (s->owned) cudaStreamDestroy(s->s);
  free(s);
  return rc;
}

/* ------------------------------------------------------------------ memory */

static ul_result_t cuda_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  void *p = NULL;
  cudaSetDevice(c->device);
  cudaError_t e = cudaMalloc(&p, size); /* cudaMalloc memory can be IPC-exported */
  if (e != cudaSuccess) return cuda_fail(c, "cudaMalloc", e);
  ul_result_t rc = ulbu_alloc_add(&c->allocs, c->core, "cuda backend", p, size, 0);
  if (rc != UL_OK) {
    cudaFree(p);
    return rc;
  }
  *ptr = p;
  return UL_OK;
}

static ul_result_t cuda_mem_free(ul_backend_comm_t *c, void *ptr) {
  ul_result_t rc = ulbu_alloc_remove(&c->allocs, c->core, "cuda backend", ptr, NULL);
  if (rc != UL_OK) return rc;
  cudaSetDevice(c->device);
  cudaFree(ptr);
  return UL_OK;
}

static void cuda_window_free(ul_backend_comm_t *c, ul_backend_window_t *w) {
  if (!w) return;
  for (int r = 0; w->peers && r < c->nranks; r++) {
    cuda_peer_win_t *pw = &w->peers[r];
    if (pw->ipc_opened) cudaIpcCloseMemHandle(pw->dev);
    if (pw->seg) {
      cudaHostUnregister(pw->seg);
      munmap(pw->seg, w->seg_len);
    }
    free(pw->my_count);
  }
  free(w->peers);
  free(w);
}

static ul_result_t cuda_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                        int extra_signals, ul_backend_window_t **out,
                                        void **peer_bases) {
  ul_result_t rc = UL_OK;
  cudaError_t e;
  cuda_slot_t mine, *all = calloc((size_t)c->nranks, sizeof(cuda_slot_t));
  ul_backend_window_t *w = calloc(1, sizeof(*w));
  if (!w || !all) {
    free(all);
    free(w);
    return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  }
  cudaSetDevice(c->device);
  unsigned seq = c->win_seq++;
  w->base = base;
  w->size = size;
  w->nsig = UL_WINDOW_SIGNALS + (extra_signals > 0 ? extra_signals : 0);
  w->peers = calloc((size_t)c->nranks, sizeof(cuda_peer_win_t));
  /* Segment: [log header][signal cells nsig x nranks][shadow (staged only)]. */
  w->sig_off = (sizeof(cuda_seg_hdr_t) + 4095) & ~(size_t)4095;
  size_t sig_bytes = (size_t)w->nsig * (size_t)c->nranks * sizeof(uint64_t);
  w->shadow_off = (w->sig_off + sig_bytes + 4095) & ~(size_t)4095;
  w->seg_len = w->shadow_off + (c->path == ULGPU_PATH_STAGED ? ((size + 4095) & ~(size_t)4095) : 0);
  char name[96];
  ulbu_board_name(&c->board, name, sizeof(name), "w", (int)seq, c->rank);
  if ((rc = ulbu_shm_create(c->core, "cuda backend", name, w->seg_len)) != UL_OK) goto fail_early;
  memset(&mine, 0, sizeof(mine));
  mine.ident = c->idents[c->rank];
  mine.raw_base = (uint64_t)(uintptr_t)base;
  mine.size = size;
  if (c->path == ULGPU_PATH_P2P && !c->same_process && base && size) {
    mine.ipc_offset = ulbu_alloc_offset(&c->allocs, base);
    if ((e = cudaIpcGetMemHandle(&mine.ipc, (char *)base - mine.ipc_offset)) != cudaSuccess) {
      rc = cuda_fail(c, "cudaIpcGetMemHandle (window memory must come from ul_mem_alloc)", e);
      /* still take part in the allgather so peers do not wait for the timeout */
    }
  }
  ul_result_t grc = cuda_allgather(c, &mine, all, "window register");
  if (rc == UL_OK) rc = grc;
  for (int r = 0; rc == UL_OK && r < c->nranks; r++) {
    cuda_peer_win_t *pw = &w->peers[r];
    char pname[96];
    void *m = NULL;
    ulbu_board_name(&c->board, pname, sizeof(pname), "w", (int)seq, r);
    if ((rc = ulbu_shm_map(c->core, "cuda backend", pname, w->seg_len, &m)) != UL_OK) break;
    pw->seg = m;
    /* Pinned and mapped: kernels store signals into it, copies to the shadow run at
     * full PCIe speed. */
    if ((e = cudaHostRegister(m, w->seg_len, cudaHostRegisterMapped | cudaHostRegisterPortable)) !=
        cudaSuccess) {
      munmap(m, w->seg_len);
      pw->seg = NULL;
      rc = cuda_fail(c, "cudaHostRegister", e);
      break;
    }
    void *dptr = NULL;
    if ((e = cudaHostGetDevicePointer(&dptr, (char *)m + w->sig_off, 0)) != cudaSuccess) {
      rc = cuda_fail(c, "cudaHostGetDevicePointer", e);
      break;
    }
    pw->sig_dev = dptr;
    pw->my_count = calloc((size_t)w->nsig, sizeof(uint64_t));
    if (c->path == ULGPU_PATH_P2P) {
      if (r == c->rank || all[r].ident.pid == c->idents[c->rank].pid) {
        pw->dev = (void *)(uintptr_t)all[r].raw_base;
      } else if (all[r].size) {
        void *opened = NULL;
        e = cudaIpcOpenMemHandle(&opened, all[r].ipc, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
          rc = cuda_fail(c, "cudaIpcOpenMemHandle", e);
          break;
        }
        pw->ipc_opened = 1;
        pw->dev = (char *)opened + all[r].ipc_offset;
      }
      peer_bases[r] = pw->dev;
    } else {
      peer_bases[r] = r == c->rank ? base : NULL;
      if (r == c->rank) pw->dev = base;
    }
  }
  grc = ulbu_board_barrier(&c->board, "window register");
  shm_unlink(name); /* every rank has mapped it (or failed): no name left behind */
  if (rc == UL_OK) rc = grc;
  free(all);
  if (rc != UL_OK) {
    cuda_window_free(c, w);
    return rc;
  }
  *out = w;
  return UL_OK;
fail_early:
  free(all);
  cuda_window_free(c, w);
  return rc;
}

static ul_result_t cuda_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  /* Peers may still be copying into our window/segment until everyone is here. */
  ul_result_t rc = cuda_stream_wait(c, c->internal, c->timeout_ms);
  ul_result_t b = ulbu_board_barrier(&c->board, "window deregister");
  cuda_window_free(c, w);
  return rc != UL_OK ? rc : b;
}

/* ----------------------------------------------------------- data movement */

typedef struct cuda_log_job {
  cuda_seg_hdr_t *hdr;
  uint64_t off, bytes;
} cuda_log_job_t;

/* Host callback, runs after the device->shadow copy completed: record the range. It
 * only touches host memory (no CUDA calls are allowed in callbacks). */
static void CUDART_CB cuda_log_append(void *arg) {
  cuda_log_job_t *j = arg;
  cuda_seg_hdr_t *h = j->hdr;
  uint64_t n = atomic_fetch_add(&h->log_head, 1);
  cuda_log_entry_t *en = &h->log[n % CUDA_LOG_N];
  if (n - h->log_tail >= CUDA_LOG_N) atomic_store(&h->log_overflow, 1);
  en->off = j->off;
  en->bytes = j->bytes;
  atomic_store(&en->seq, n + 1);
  free(j);
}

static ul_result_t cuda_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                            const void *src, size_t bytes, ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  cudaStream_t st = cuda_stream_of(c, s);
  cuda_peer_win_t *pw = &w->peers[peer];
  cudaError_t e;
  if (pw->dev) { /* p2p, or our own window */
    if ((e = cudaMemcpyAsync((char *)pw->dev + off, src, bytes, cudaMemcpyDefault, st)) != cudaSuccess)
      return cuda_fail(c, "cudaMemcpyAsync (put)", e);
    return cuda_done(c, s);
  }
  /* staged: device -> the peer's pinned shadow, then log the range for the peer. */
  if ((e = cudaMemcpyAsync(pw->seg + w->shadow_off + off, src, bytes, cudaMemcpyDeviceToHost, st)) !=
      cudaSuccess)
    return cuda_fail(c, "cudaMemcpyAsync (staged put)", e);
  cuda_log_job_t *j = malloc(sizeof(*j));
  if (!j) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  j->hdr = (cuda_seg_hdr_t *)pw->seg;
  j->off = off;
  j->bytes = bytes;
  if ((e = cudaLaunchHostFunc(st, cuda_log_append, j)) != cudaSuccess) {
    free(j);
    return cuda_fail(c, "cudaLaunchHostFunc", e);
  }
  return cuda_done(c, s);
}

static ul_result_t cuda_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                            void *dst, size_t bytes, ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  cuda_peer_win_t *pw = &w->peers[peer];
  if (!pw->dev)
    return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                                "cuda backend: ul_get needs peer access; the staged path (no P2P "
                                "between these GPUs) supports put + signal only");
  cudaError_t e = cudaMemcpyAsync(dst, (char *)pw->dev + off, bytes, cudaMemcpyDefault,
                                  cuda_stream_of(c, s));
  if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync (get)", e);
  return cuda_done(c, s);
}

static ul_result_t cuda_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                               ul_backend_stream_t *s) {
  cuda_peer_win_t *pw = &w->peers[peer];
  uint64_t v = ++pw->my_count[index];
  uint64_t *cell = pw->sig_dev + (size_t)index * c->nranks + c->rank;
#ifdef UNILINK_CUDA_KERNELS
  int e = ulcuda_launch_store64(cell, v, cuda_stream_of(c, s));
  if (e != 0) return cuda_fail(c, "signal kernel launch", (cudaError_t)e);
#else
  /* No kernels: a host-to-mapped-memory copy of the new count, ordered on the stream. */
  static __thread uint64_t staging;
  staging = v;
  cudaError_t e = cudaMemcpyAsync(cell, &staging, sizeof(v), cudaMemcpyHostToDevice,
                                  cuda_stream_of(c, s));
  if (e == cudaSuccess) e = cudaStreamSynchronize(cuda_stream_of(c, s));
  if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync (signal)", e);
#endif
  return cuda_done(c, s);
}

static uint64_t cuda_signal_sum(ul_backend_comm_t *c, ul_backend_window_t *w, int index) {
  volatile uint64_t *cells =
      (volatile uint64_t *)(w->peers[c->rank].seg + w->sig_off) + (size_t)index * c->nranks;
  uint64_t sum = 0;
  for (int r = 0; r < c->nranks; r++) sum += cells[r];
  return sum;
}

/* staged: copy every logged range shadow -> device window, on stream st. */
static ul_result_t cuda_drain_log(ul_backend_comm_t *c, ul_backend_window_t *w, cudaStream_t st) {
  char *seg = w->peers[c->rank].seg;
  cuda_seg_hdr_t *h = (cuda_seg_hdr_t *)seg;
  cudaError_t e;
  if (atomic_exchange(&h->log_overflow, 0)) {
    h->log_tail = atomic_load(&h->log_head);
    e = cudaMemcpyAsync(w->base, seg + w->shadow_off, w->size, cudaMemcpyHostToDevice, st);
    return e == cudaSuccess ? UL_OK : cuda_fail(c, "cudaMemcpyAsync (staged window)", e);
  }
  for (;;) {
    cuda_log_entry_t *en = &h->log[h->log_tail % CUDA_LOG_N];
    if (atomic_load(&en->seq) != h->log_tail + 1) break; /* not written (yet) */
    e = cudaMemcpyAsync((char *)w->base + en->off, seg + w->shadow_off + en->off, en->bytes,
                        cudaMemcpyHostToDevice, st);
    if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync (staged window)", e);
    h->log_tail++;
  }
  return UL_OK;
}

static ul_result_t cuda_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                    uint64_t value, ul_backend_stream_t *s) {
  double t0 = ulbu_now_ms();
  while (cuda_signal_sum(c, w, index) < value) {
    ul_result_t rc = cuda_wait_check(c, t0, "ul_wait_signal");
    if (rc != UL_OK)
      return rc == UL_ERR_TIMEOUT
                 ? ul_backend_set_error(c->core, rc,
                                        "rank %d: signal %d of the window stayed at %llu < %llu "
                                        "for %d ms",
                                        c->rank, index,
                                        (unsigned long long)cuda_signal_sum(c, w, index),
                                        (unsigned long long)value, c->timeout_ms)
                 : rc;
  }
  if (c->path == ULGPU_PATH_STAGED) {
    ul_result_t rc = cuda_drain_log(c, w, cuda_stream_of(c, s));
    if (rc != UL_OK) return rc;
  }
  return cuda_done(c, s);
}

static ul_result_t cuda_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                    uint64_t *value) {
  *value = cuda_signal_sum(c, w, index);
  return UL_OK;
}

/* ------------------------------------------------------------- local math */

static ul_result_t cuda_reduce_local(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                                     size_t count, ul_dtype_t dtype, ul_op_t op,
                                     ul_backend_stream_t *s) {
  if (count == 0) return UL_OK;
#ifdef UNILINK_CUDA_KERNELS
  int e = ulcuda_launch_reduce(dst, a, b, count, (int)dtype, (int)(op == UL_AVG ? UL_SUM : op),
                               cuda_stream_of(c, s));
  if (e != 0) return cuda_fail(c, "reduce kernel launch", (cudaError_t)e);
  return cuda_done(c, s);
#else
  return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                              "cuda backend: built without nvcc, so it has no device reduction "
                              "kernels; rebuild with the CUDA compiler");
#endif
}

static ul_result_t cuda_scale_avg(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                                  int nranks, ul_backend_stream_t *s) {
  if (count == 0) return UL_OK;
#ifdef UNILINK_CUDA_KERNELS
  int e = ulcuda_launch_scale(buf, count, (int)dtype, nranks, cuda_stream_of(c, s));
  if (e != 0) return cuda_fail(c, "scale kernel launch", (cudaError_t)e);
  return cuda_done(c, s);
#else
  return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                              "cuda backend: built without nvcc (no device kernels)");
#endif
}

static ul_result_t cuda_copy_local(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                                   ul_backend_stream_t *s) {
  if (bytes == 0 || dst == src) return UL_OK;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream_of(c, s));
  if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync (copy)", e);
  return cuda_done(c, s);
}

static const ul_backend_ops_t cuda_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "cuda",
    .description = "CUDA peer copies (p2p: NVLink/PCIe peer access; staged: pinned host memory) "
                   "under the generic collective layer",
    .priority = 50,
    .init = cuda_init,
    .fini = cuda_fini,
    .query_caps = cuda_query_caps,
    .get_unique_id = cuda_get_unique_id,
    .comm_init = cuda_comm_init,
    .comm_finalize = cuda_comm_finalize,
    .comm_destroy = cuda_comm_destroy,
    .comm_abort = cuda_comm_abort,
    .comm_topology = cuda_comm_topology,
    .stream_create = cuda_stream_create,
    .stream_wrap = cuda_stream_wrap,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_query = cuda_stream_query,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .window_register = cuda_window_register,
    .window_deregister = cuda_window_deregister,
    .put = cuda_put,
    .get = cuda_get,
    .signal = cuda_signal,
    .wait_signal = cuda_wait_signal,
    .read_signal = cuda_read_signal,
    .reduce_local = cuda_reduce_local,
    .scale_avg = cuda_scale_avg,
    .copy_local = cuda_copy_local,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &cuda_ops;
}
