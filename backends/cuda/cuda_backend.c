/* cuda backend: a peer-copy backend for the core's generic algorithm layer.
 *
 * Paths (UNILINK_CUDA_PATH=auto|p2p|staged, reported in props.path):
 *  - p2p: peer access (cudaDeviceEnablePeerAccess) and cudaMemcpyAsync between GPUs of
 *    one process, cudaIpcGetMemHandle/cudaIpcOpenMemHandle between processes: NVLink
 *    or PCIe P2P, whichever the machine has.
 *  - staged: no peer access. Each rank's window has a shadow in pinned host memory (a
 *    POSIX shm segment registered with cudaHostRegister in every process); put copies
 *    device -> the peer's shadow and logs the range; the peer copies the logged ranges
 *    shadow -> its device window when it observes the signal (on the internal stream;
 *    wait_signal makes the waiting stream wait for the latest drain, read_signal
 *    completes it before it returns the count, so a count seen by either means the data
 *    is in the device window for whatever stream reads it next). get copies
 *    straight from the peer's window (the driver stages a copy between GPUs without
 *    peer access): its own pointer in this process, else its IPC export opened on the
 *    peer's GPU (which must be visible here).
 *
 * Signals: counters in host-mapped pinned memory (the same shm segments), one cell
 * per (index, sender) so no cross-device atomics are needed: a sender stores its own
 * running count with a one-thread kernel after a system fence (the runtime has no
 * cudaStreamWriteValue; cuStreamWriteValue64 is driver API, which this plugin must not
 * link). The reader sums the cells. Waits happen on the host (polling the mapped
 * counters with the timeout and the abort flag) rather than in a spinning kernel, so
 * a lost peer can never leave a kernel hung on the GPU.
 *
 * Streams: a NULL stream is the communicator's internal stream, created blocking
 * (cudaStreamDefault), so it is ordered after work the caller issued on the legacy
 * default stream (stream 0: cudaMemcpy, cudaMemset, kernels launched without a stream)
 * and later legacy-stream work waits for it. Work on the caller's other streams
 * (cudaStreamNonBlocking ones, per-thread default streams) is the caller's to order:
 * synchronize it or pass that stream (ul_stream_wrap_native).
 *
 * Current device: every op that touches CUDA sets the communicator's device first and
 * restores the calling thread's device before it returns (cuda_enter/cuda_leave), so
 * one thread may drive several GPUs' communicators (the core's group helper threads
 * start on device 0) and a program's own device choice survives unilink calls.
 *
 * Bootstrap: a POSIX shm "board" named by random bytes of the unique id (0600,
 * unlinked once every rank joined) with a barrier and one slot per rank for the
 * allgathers of init and window registration. Ranks therefore share one host. Every
 * collective step agrees on success (a status in each slot), so a rank that fails
 * makes every rank fail at once instead of leaving them to time out. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
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
  int32_t status;             /* ul_result_t of this rank's step so far (agreement) */
  int32_t p2p_ok;             /* this rank reaches every peer with peer access */
  int32_t ipc_ok;             /* ipc holds an exported handle of the window allocation */
  cudaIpcMemHandle_t ipc;     /* window allocation */
  uint64_t ipc_offset;        /* window base - allocation base */
  uint64_t raw_base;          /* window base in its process (same-process peers) */
  uint64_t size;
  char why[320];              /* status != UL_OK: this rank's error sentence */
} cuda_slot_t;
_Static_assert(sizeof(cuda_slot_t) <= CUDA_SLOT_BYTES, "slot too small");

struct ul_backend_comm {
  ul_comm_t core;
  int rank, nranks, device;
  int timeout_ms;
  const volatile int *abort_flag;
  const volatile int *init_abort; /* comm_init_all: a sibling rank failed (init only) */
  volatile int dead;
  ulgpu_path_t path;
  int same_process; /* every rank lives in this process */
  cudaStream_t internal;
  ulbu_board_t board; /* bootstrap: barrier and allgathers */
  ulgpu_ident_t *idents;
  int *peer_dev; /* local CUDA index of each peer's GPU, -1 if not visible */
  unsigned win_seq;
  ulbu_alloc_list_t allocs; /* ul_mem_alloc memory (IPC export needs the allocation) */
  pthread_mutex_t win_lock;
  struct ul_backend_window *windows; /* registered windows: freed at destroy at the latest */
  /* Signals are running counts stored by a kernel: stores from two streams could land
   * out of issue order and move a cell backwards (review M2). sig_last is the stream of
   * the latest signal; a signal on another stream first waits (sig_ev) for it. */
  pthread_mutex_t sig_lock;
  int sig_have_last;
  cudaStream_t sig_last;
  cudaEvent_t sig_ev; /* created on first use, on c->device */
};

/* Layout of one rank's window segment (host, shared). */
typedef struct cuda_log_entry {
  _Atomic uint64_t seq; /* 1-based sequence once written */
  uint64_t off, bytes;
} cuda_log_entry_t;
typedef struct cuda_seg_hdr {
  _Atomic uint64_t log_head;   /* entries reserved */
  _Atomic int log_overflow;    /* too many pending puts: copy the whole shadow */
  uint64_t log_tail;           /* owner only (under the window's drain lock) */
  cuda_log_entry_t log[CUDA_LOG_N];
} cuda_seg_hdr_t;

typedef struct cuda_peer_win {
  void *dev;                 /* peer window in this process's address space (p2p) */
  void *same_proc;           /* staged: the peer's window when it lives in this process
                                (get copies from it; the driver stages it through host) */
  void *ipc_base;            /* cudaIpcOpenMemHandle result (to close), or NULL */
  /* staged, another process: the peer's exported window, opened on first ul_get in the
   * context of the peer's GPU (no peer access needed; the copy is staged by the driver) */
  int ipc_ok;
  cudaIpcMemHandle_t ipc;
  uint64_t ipc_off;
  char *remote;
  char *seg;                 /* peer's segment mapped here */
  int registered;            /* seg is cudaHostRegister'ed */
  uint64_t *sig_dev;         /* device view of seg's signal cells */
  uint64_t *my_count;        /* my running count per signal index towards this peer */
} cuda_peer_win_t;

struct ul_backend_window {
  void *base;
  size_t size;
  int nsig;
  size_t seg_len, sig_off, shadow_off;
  cuda_peer_win_t *peers; /* nranks */
  pthread_mutex_t drain_lock; /* staged: one drainer of our log at a time; lazy IPC opens */
  cudaEvent_t drain_ev;       /* staged: recorded on the internal stream after each drain */
  int drain_marked;           /* drain_ev has been recorded */
  struct ul_backend_window *next; /* the communicator's list */
};

/* ----------------------------------------------------------------- helpers */

static int cuda_ndev;

/* ulgpu_fail also clears the thread's last error: a failed call of ours must not be
 * reported again by the next kernel launch (launchers return cudaGetLastError). */
static ul_result_t cuda_fail(ul_backend_comm_t *c, const char *call, cudaError_t e) {
  return ulgpu_fail(c ? c->core : NULL, "cuda backend", call, e);
}

/* Make c's device current for this thread; *prev gets the caller's device. */
static ul_result_t cuda_enter(ul_backend_comm_t *c, int *prev) {
  if (cudaGetDevice(prev) != cudaSuccess) {
    cudaGetLastError();
    *prev = -1;
  }
  if (*prev == c->device) return UL_OK;
  cudaError_t e = cudaSetDevice(c->device);
  return e == cudaSuccess ? UL_OK : cuda_fail(c, "cudaSetDevice", e);
}

/* Give the calling thread its own device back. */
static void cuda_leave(ul_backend_comm_t *c, int prev) {
  if (prev >= 0 && prev != c->device) cudaSetDevice(prev);
}

/* Run expr (a ul_result_t) on c's device and return its result. */
#define CUDA_ON_DEVICE(c, expr)                                                                 \
  do {                                                                                          \
    int prev_dev_;                                                                              \
    ul_result_t on_dev_rc_ = cuda_enter((c), &prev_dev_);                                       \
    if (on_dev_rc_ == UL_OK) {                                                                  \
      on_dev_rc_ = (expr);                                                                      \
      cuda_leave((c), prev_dev_);                                                               \
    }                                                                                           \
    return on_dev_rc_;                                                                          \
  } while (0)

static int cuda_aborted(ul_backend_comm_t *c) {
  return c->dead || (c->abort_flag && *c->abort_flag) || (c->init_abort && *c->init_abort);
}

/* UL_OK to keep waiting, else the error to return. */
static ul_result_t cuda_wait_check(ul_backend_comm_t *c, double t0, const char *what) {
  return ulbu_wait_step(c->core, c->rank, cuda_aborted(c), t0, c->timeout_ms, what);
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
    if (cuda_aborted(c))
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

/* Before an allgather: this rank's status (and, on failure, its sentence) into mine. */
static void cuda_status(ul_backend_comm_t *c, cuda_slot_t *mine, ul_result_t st) {
  mine->status = st;
  mine->why[0] = '\0';
  if (st != UL_OK) snprintf(mine->why, sizeof(mine->why), "%s", ul_comm_last_error(c->core));
}

/* After an allgather: UL_OK if every rank's status is UL_OK, else the first failing
 * rank's code; ranks other than the failing one record why, with its sentence (the
 * failing rank keeps its own). */
static ul_result_t cuda_agree(ul_backend_comm_t *c, const cuda_slot_t *all, const char *what) {
  if (all[c->rank].status != UL_OK) return (ul_result_t)all[c->rank].status;
  for (int r = 0; r < c->nranks; r++) {
    if (all[r].status == UL_OK) continue;
    return ul_backend_set_error(c->core, (ul_result_t)all[r].status,
                                "cuda backend: rank %d: %s failed on rank %d: %.*s", c->rank, what,
                                r, (int)sizeof(all[r].why), all[r].why);
  }
  return UL_OK;
}

/* --------------------------------------------------------------- windows */

/* Release everything a window holds in this process: IPC mappings of peers' memory,
 * the registration and mapping of every segment (shadows included). */
static void cuda_window_free(ul_backend_comm_t *c, ul_backend_window_t *w) {
  if (!w) return;
  for (int r = 0; w->peers && r < c->nranks; r++) {
    cuda_peer_win_t *pw = &w->peers[r];
    /* Close the base cudaIpcOpenMemHandle returned, not base + offset. */
    if (pw->ipc_base) cudaIpcCloseMemHandle(pw->ipc_base);
    if (pw->seg) {
      if (pw->registered) cudaHostUnregister(pw->seg);
      munmap(pw->seg, w->seg_len);
    }
    free(pw->my_count);
  }
  if (w->drain_ev) cudaEventDestroy(w->drain_ev);
  pthread_mutex_destroy(&w->drain_lock);
  free(w->peers);
  free(w);
}

static void cuda_window_unlist(ul_backend_comm_t *c, ul_backend_window_t *w) {
  pthread_mutex_lock(&c->win_lock);
  for (ul_backend_window_t **pp = &c->windows; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  pthread_mutex_unlock(&c->win_lock);
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

/* Local teardown: every window still registered (the generic layer never deregisters
 * its scratch window), every allocation, the stream and the board. */
static void cuda_comm_free(ul_backend_comm_t *c) {
  if (!c) return;
  int prev = -1;
  int entered = c->device >= 0 && c->device < cuda_ndev && cuda_enter(c, &prev) == UL_OK;
  if (c->internal) {
    /* Our queued work never waits for a peer (waits are host polls), so it ends; let
     * it finish before the segments and windows it copies into go away. */
    cudaStreamSynchronize(c->internal);
    cudaStreamDestroy(c->internal);
  }
  pthread_mutex_lock(&c->win_lock);
  ul_backend_window_t *w = c->windows;
  c->windows = NULL;
  pthread_mutex_unlock(&c->win_lock);
  while (w) {
    ul_backend_window_t *next = w->next;
    cuda_window_free(c, w);
    w = next;
  }
  if (c->sig_ev) cudaEventDestroy(c->sig_ev);
  ulbu_alloc_list_destroy(&c->allocs, cuda_alloc_release, NULL);
  ulbu_board_leave(&c->board);
  if (entered) cuda_leave(c, prev);
  pthread_mutex_destroy(&c->win_lock);
  pthread_mutex_destroy(&c->sig_lock);
  free(c->idents);
  free(c->peer_dev);
  free(c);
}

/* One rank's init. init_abort (comm_init_all: set when a sibling rank failed) makes the
 * board waits give up early; NULL for ul_comm_init_rank. */
static ul_result_t cuda_comm_init_on(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                     ul_backend_comm_props_t *props,
                                     const volatile int *init_abort) {
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
  c->init_abort = init_abort;
  /* The caller's device exactly (ul_comm_split passes the parent's); only an unset
   * device falls back to rank % visible devices. */
  c->device = a->device != UL_CONFIG_UNDEF ? a->device : (cuda_ndev ? a->rank % cuda_ndev : 0);
  ulbu_alloc_list_init(&c->allocs);
  pthread_mutex_init(&c->win_lock, NULL);
  pthread_mutex_init(&c->sig_lock, NULL);
  ul_result_t rc = UL_OK, st = UL_OK;
  cuda_slot_t mine, *all = NULL;
  cudaError_t e;
  int prev = -1, entered = 0;
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
  /* Local setup; its status goes into the first allgather so that every rank fails
   * together when one cannot start. */
  memset(&mine, 0, sizeof(mine));
  if (c->device < 0 || c->device >= cuda_ndev) {
    st = ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                              "cuda backend: device %d out of range (%d visible)", c->device,
                              cuda_ndev);
  } else if ((st = cuda_enter(c, &prev)) == UL_OK) {
    entered = 1;
    /* Blocking stream: ordered after the caller's legacy default stream (header). */
    if ((e = cudaStreamCreateWithFlags(&c->internal, cudaStreamDefault)) != cudaSuccess)
      st = cuda_fail(c, "cudaStreamCreateWithFlags", e);
    else if ((st = ulgpu_ident_get(c->device, &mine.ident)) != UL_OK)
      st = ul_backend_set_error(a->comm, st, "cuda backend: cannot read GPU %d", c->device);
  }
  cuda_status(c, &mine, st);
  if ((rc = cuda_allgather(c, &mine, all, "comm init")) != UL_OK) goto fail;
  if ((rc = cuda_agree(c, all, "comm init")) != UL_OK) goto fail;
  /* Which peers can this GPU reach with peer access? Peer access is enabled here,
   * before the path is agreed, so that a GPU pair that claims access but cannot enable
   * it (too many peers on PCIe) makes the communicator staged instead of failing. */
  mine.p2p_ok = 1;
  c->same_process = 1;
  for (int r = 0; r < c->nranks; r++) {
    c->idents[r] = all[r].ident;
    if (all[r].ident.pid != mine.ident.pid) c->same_process = 0;
    if (all[r].ident.host_hash != mine.ident.host_hash && st == UL_OK)
      st = ul_backend_set_error(a->comm, UL_ERR_UNSUPPORTED,
                                "cuda backend: rank %d is on another host; the cuda backend "
                                "connects GPUs of one host (use nccl or mpi)", r);
    char bus[32];
    snprintf(bus, sizeof(bus), "%04x:%02x:%02x.0", (unsigned)all[r].ident.pci_domain,
             (unsigned)all[r].ident.pci_bus, (unsigned)all[r].ident.pci_dev);
    int d = -1;
    if (cudaDeviceGetByPCIBusId(&d, bus) != cudaSuccess) {
      cudaGetLastError();
      d = -1;
    }
    c->peer_dev[r] = d;
    if (r == c->rank || d == c->device) continue;
    int can = 0;
    if (d < 0 || cudaDeviceCanAccessPeer(&can, c->device, d) != cudaSuccess || !can) {
      cudaGetLastError();
      mine.p2p_ok = 0;
      continue;
    }
    if (want == ULGPU_PATH_STAGED) continue;
    e = cudaDeviceEnablePeerAccess(d, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError(); /* clear, it is fine */
    } else if (e != cudaSuccess) {
      cudaGetLastError();
      ul_backend_log(UL_LOG_INFO, "cuda", "rank %d GPU %d: cudaDeviceEnablePeerAccess(%d): %s",
                     c->rank, c->device, d, cudaGetErrorString(e));
      mine.p2p_ok = 0;
    }
  }
  /* Agree on the path: p2p only if every rank reaches every peer. */
  cuda_status(c, &mine, st);
  if ((rc = cuda_allgather(c, &mine, all, "comm init")) != UL_OK) goto fail;
  if ((rc = cuda_agree(c, all, "comm init")) != UL_OK) goto fail;
  int all_p2p = 1;
  for (int r = 0; r < c->nranks; r++) all_p2p &= all[r].p2p_ok;
  char why[160];
  /* Same inputs on every rank: the same answer, no agreement needed. */
  if ((rc = ulgpu_choose_path(want, all_p2p, &c->path, why, sizeof(why))) != UL_OK) {
    rc = ul_backend_set_error(a->comm, rc, "cuda backend: %s", why);
    goto fail;
  }
  ul_backend_log(UL_LOG_INFO, "cuda", "rank %d GPU %d: path %s (%s)", c->rank, c->device,
                 ulgpu_path_name(c->path), why);
  free(all);
  if (props) {
    /* Pointers of one rank are usable by the others only within one process, with
     * peer access (UVA); the core still moves them through copy_local/reduce_local. */
    props->load_store_peers = c->same_process && c->path == ULGPU_PATH_P2P;
    snprintf(props->path, sizeof(props->path), "%s", ulgpu_path_name(c->path));
    /* The device actually used (ul_comm_device; ul_comm_split keeps the child on it). */
    if (props->struct_size >= offsetof(ul_backend_comm_props_t, device) + sizeof(props->device))
      props->device = c->device;
  }
  c->init_abort = NULL; /* points into comm_init_all's frame */
  if (entered) cuda_leave(c, prev);
  *out = c;
  return UL_OK;
fail:
  free(all);
  if (entered) cuda_leave(c, prev);
  cuda_comm_free(c);
  return rc;
}

static ul_result_t cuda_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                  ul_backend_comm_props_t *props) {
  return cuda_comm_init_on(a, out, props, NULL);
}

/* comm_init_all: one process drives every rank (rank i on args[i].device). The ranks
 * join one board of a fresh token, each from its own thread (init is collective); a
 * rank that fails sets `failed`, which ends its siblings' waits at once. */
typedef struct cuda_init_job {
  ul_backend_comm_args_t a;
  ul_backend_comm_t *out;
  ul_backend_comm_props_t *props;
  volatile int *failed;
  ul_result_t rc;
} cuda_init_job_t;

static void *cuda_init_thread(void *arg) {
  cuda_init_job_t *j = arg;
  j->rc = cuda_comm_init_on(&j->a, &j->out, j->props, j->failed);
  if (j->rc != UL_OK) __atomic_store_n(j->failed, 1, __ATOMIC_RELEASE);
  return NULL;
}

static ul_result_t cuda_comm_init_all(const ul_backend_comm_args_t *args, int ndev,
                                      ul_backend_comm_t **out, ul_backend_comm_props_t *props) {
  for (int i = 0; i < ndev; i++) out[i] = NULL;
  unsigned char payload[UL_BACKEND_ID_PAYLOAD_BYTES];
  ul_result_t rc = cuda_get_unique_id(payload, sizeof(payload));
  if (rc != UL_OK)
    return ul_backend_set_error(args[0].comm, rc, "cuda backend: ul_comm_init_all: %s",
                                ul_last_error());
  cuda_init_job_t *jobs = calloc((size_t)ndev, sizeof(*jobs));
  pthread_t *th = calloc((size_t)ndev, sizeof(*th));
  int *started = calloc((size_t)ndev, sizeof(int));
  if (!jobs || !th || !started) {
    free(jobs), free(th), free(started);
    return ul_backend_set_error(args[0].comm, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  }
  volatile int failed = 0;
  for (int i = 0; i < ndev; i++) {
    jobs[i].a = args[i];
    jobs[i].a.id_payload = payload;
    jobs[i].a.id_payload_bytes = sizeof(payload);
    jobs[i].props = props ? &props[i] : NULL;
    jobs[i].failed = &failed;
    jobs[i].rc = UL_OK;
  }
  for (int i = 0; i < ndev; i++) {
    started[i] = pthread_create(&th[i], NULL, cuda_init_thread, &jobs[i]) == 0;
    if (!started[i]) {
      jobs[i].rc = ul_backend_set_error(args[i].comm, UL_ERR_SYSTEM,
                                        "cuda backend: ul_comm_init_all: cannot start a thread "
                                        "for rank %d",
                                        i);
      __atomic_store_n(&failed, 1, __ATOMIC_RELEASE);
    }
  }
  for (int i = 0; i < ndev; i++)
    if (started[i]) pthread_join(th[i], NULL);
  /* Report the rank that failed first: prefer a real cause over "aborted" siblings. */
  int first = -1;
  for (int i = 0; i < ndev; i++)
    if (jobs[i].rc != UL_OK && (first < 0 || (jobs[first].rc == UL_ERR_ABORTED &&
                                               jobs[i].rc != UL_ERR_ABORTED)))
      first = i;
  if (first >= 0) {
    rc = jobs[first].rc;
    for (int i = 0; i < ndev; i++) cuda_comm_free(jobs[i].out);
    if (first != 0) {
      char msg[512];
      snprintf(msg, sizeof(msg), "%s", ul_comm_last_error(args[first].comm));
      ul_backend_set_error(args[0].comm, rc, "%s", msg);
    }
  } else {
    for (int i = 0; i < ndev; i++) out[i] = jobs[i].out;
  }
  free(jobs), free(th), free(started);
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
  CUDA_ON_DEVICE(c, ulgpu_stream_create(c, c->core, "cuda backend", c->device, out));
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

static ul_result_t cuda_stream_destroy_on(ul_backend_stream_t *s) {
  ul_result_t rc = s->c->dead ? UL_OK : cuda_stream_wait(s->c, s->s, s->c->timeout_ms);
  pthread_mutex_lock(&s->c->sig_lock);
  if (s->c->sig_have_last && s->c->sig_last == s->s) s->c->sig_have_last = 0; /* drained */
  pthread_mutex_unlock(&s->c->sig_lock);
  if (s->owned) cudaStreamDestroy(s->s);
  free(s);
  return rc;
}

static ul_result_t cuda_stream_destroy(ul_backend_stream_t *s) {
  ul_backend_comm_t *c = s->c;
  CUDA_ON_DEVICE(c, cuda_stream_destroy_on(s));
}

/* ------------------------------------------------------------------ memory */

static ul_result_t cuda_mem_alloc_on(ul_backend_comm_t *c, size_t size, void **ptr) {
  void *p = NULL;
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

static ul_result_t cuda_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  CUDA_ON_DEVICE(c, cuda_mem_alloc_on(c, size, ptr));
}

static ul_result_t cuda_mem_free_on(ul_backend_comm_t *c, void *ptr) {
  ul_result_t rc = ulbu_alloc_remove(&c->allocs, c->core, "cuda backend", ptr, NULL);
  if (rc != UL_OK) return rc;
  cudaError_t e = cudaFree(ptr);
  return e == cudaSuccess ? UL_OK : cuda_fail(c, "cudaFree", e);
}

static ul_result_t cuda_mem_free(ul_backend_comm_t *c, void *ptr) {
  CUDA_ON_DEVICE(c, cuda_mem_free_on(c, ptr));
}

/* Collective. Two agreement points (each rank's status travels in its slot): after the
 * local preparation (segment, IPC handle) and after mapping the peers, so that a rank
 * that fails makes every rank fail at the same step instead of leaving them to time out
 * in their first collective. */
static ul_result_t cuda_window_register_on(ul_backend_comm_t *c, void *base, size_t size,
                                           int extra_signals, ul_backend_window_t **out,
                                           void **peer_bases) {
  ul_result_t rc = UL_OK, st = UL_OK;
  cudaError_t e;
  cuda_slot_t mine, *all = calloc((size_t)c->nranks, sizeof(cuda_slot_t));
  ul_backend_window_t *w = calloc(1, sizeof(*w));
  if (w) w->peers = calloc((size_t)c->nranks, sizeof(cuda_peer_win_t));
  if (!w || !all || !w->peers) {
    free(all);
    if (w) free(w->peers);
    free(w);
    return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  }
  pthread_mutex_init(&w->drain_lock, NULL);
  unsigned seq = c->win_seq++;
  w->base = base;
  w->size = size;
  w->nsig = UL_WINDOW_SIGNALS + (extra_signals > 0 ? extra_signals : 0);
  /* Segment: [log header][signal cells nsig x nranks][shadow (staged only)]. */
  w->sig_off = (sizeof(cuda_seg_hdr_t) + 4095) & ~(size_t)4095;
  size_t sig_bytes = (size_t)w->nsig * (size_t)c->nranks * sizeof(uint64_t);
  w->shadow_off = (w->sig_off + sig_bytes + 4095) & ~(size_t)4095;
  w->seg_len = w->shadow_off + (c->path == ULGPU_PATH_STAGED ? ((size + 4095) & ~(size_t)4095) : 0);
  char name[96];
  ulbu_board_name(&c->board, name, sizeof(name), "w", (int)seq, c->rank);
  int created = 0;
  memset(&mine, 0, sizeof(mine));
  mine.ident = c->idents[c->rank];
  mine.raw_base = (uint64_t)(uintptr_t)base;
  mine.size = size;
  if ((st = ulbu_shm_create(c->core, "cuda backend", name, w->seg_len)) == UL_OK) created = 1;
  if (st == UL_OK && !c->same_process && base && size) {
    mine.ipc_offset = ulbu_alloc_offset(&c->allocs, base);
    e = cudaIpcGetMemHandle(&mine.ipc, (char *)base - mine.ipc_offset);
    mine.ipc_ok = e == cudaSuccess;
    if (e != cudaSuccess && c->path == ULGPU_PATH_P2P)
      st = cuda_fail(c, "cudaIpcGetMemHandle (window memory must come from ul_mem_alloc)", e);
    else if (e != cudaSuccess)
      cudaGetLastError(); /* staged: only ul_get from this window is lost */
  }
  cuda_status(c, &mine, st);
  if ((rc = cuda_allgather(c, &mine, all, "window register")) != UL_OK) goto out;
  if ((rc = cuda_agree(c, all, "window register")) != UL_OK) goto out;
  for (int r = 0; st == UL_OK && r < c->nranks; r++) {
    cuda_peer_win_t *pw = &w->peers[r];
    char pname[96];
    void *m = NULL;
    ulbu_board_name(&c->board, pname, sizeof(pname), "w", (int)seq, r);
    if ((st = ulbu_shm_map(c->core, "cuda backend", pname, w->seg_len, &m)) != UL_OK) break;
    pw->seg = m;
    /* Pinned and mapped: kernels store signals into it, copies to the shadow run at
     * full PCIe speed. */
    if ((e = cudaHostRegister(m, w->seg_len, cudaHostRegisterMapped | cudaHostRegisterPortable)) !=
        cudaSuccess) {
      st = cuda_fail(c, "cudaHostRegister", e);
      break;
    }
    pw->registered = 1;
    void *dptr = NULL;
    if ((e = cudaHostGetDevicePointer(&dptr, (char *)m + w->sig_off, 0)) != cudaSuccess) {
      st = cuda_fail(c, "cudaHostGetDevicePointer", e);
      break;
    }
    pw->sig_dev = dptr;
    if (!(pw->my_count = calloc((size_t)w->nsig, sizeof(uint64_t)))) {
      st = ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
      break;
    }
    if (c->path == ULGPU_PATH_P2P) {
      if (r == c->rank || all[r].ident.pid == c->idents[c->rank].pid) {
        pw->dev = (void *)(uintptr_t)all[r].raw_base;
      } else if (all[r].size) {
        void *opened = NULL;
        e = cudaIpcOpenMemHandle(&opened, all[r].ipc, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
          st = cuda_fail(c, "cudaIpcOpenMemHandle", e);
          break;
        }
        pw->ipc_base = opened;
        pw->dev = (char *)opened + all[r].ipc_offset;
      }
    } else {
      if (r == c->rank) pw->dev = base;
      if (all[r].ident.pid == c->idents[c->rank].pid) {
        pw->same_proc = (void *)(uintptr_t)all[r].raw_base;
      } else if (all[r].ipc_ok) {
        pw->ipc_ok = 1;
        pw->ipc = all[r].ipc;
        pw->ipc_off = all[r].ipc_offset;
      }
    }
  }
  cuda_status(c, &mine, st);
  rc = cuda_allgather(c, &mine, all, "window register");
  if (rc == UL_OK) rc = cuda_agree(c, all, "window register");
out:
  /* Every rank has mapped our segment (or given up): no name left behind. */
  if (created) shm_unlink(name);
  free(all);
  if (rc != UL_OK) {
    cuda_window_free(c, w);
    return rc;
  }
  for (int r = 0; r < c->nranks; r++) peer_bases[r] = w->peers[r].dev;
  pthread_mutex_lock(&c->win_lock);
  w->next = c->windows;
  c->windows = w;
  pthread_mutex_unlock(&c->win_lock);
  *out = w;
  return UL_OK;
}

static ul_result_t cuda_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                        int extra_signals, ul_backend_window_t **out,
                                        void **peer_bases) {
  CUDA_ON_DEVICE(c, cuda_window_register_on(c, base, size, extra_signals, out, peer_bases));
}

static ul_result_t cuda_window_deregister_on(ul_backend_comm_t *c, ul_backend_window_t *w) {
  /* Peers may still be copying into our window/segment until everyone is here. */
  ul_result_t rc = cuda_stream_wait(c, c->internal, c->timeout_ms);
  ul_result_t b = ulbu_board_barrier(&c->board, "window deregister");
  cuda_window_unlist(c, w);
  cuda_window_free(c, w);
  return rc != UL_OK ? rc : b;
}

static ul_result_t cuda_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  CUDA_ON_DEVICE(c, cuda_window_deregister_on(c, w));
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

static ul_result_t cuda_put_on(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                               const void *src, size_t bytes, ul_backend_stream_t *s) {
  cudaStream_t st = cuda_stream_of(c, s);
  cuda_peer_win_t *pw = &w->peers[peer];
  cudaError_t e;
  if (pw->dev) { /* p2p, or our own window */
    if ((e = cudaMemcpyAsync((char *)pw->dev + off, src, bytes, cudaMemcpyDefault, st)) != cudaSuccess)
      return cuda_fail(c, "cudaMemcpyAsync (put)", e);
    return cuda_done(c, s);
  }
  /* staged: src -> the peer's pinned shadow, then log the range for the peer. Default
   * direction: src may be device or (core metadata) host memory. */
  if ((e = cudaMemcpyAsync(pw->seg + w->shadow_off + off, src, bytes, cudaMemcpyDefault, st)) !=
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

static ul_result_t cuda_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                            const void *src, size_t bytes, ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  CUDA_ON_DEVICE(c, cuda_put_on(c, w, peer, off, src, bytes, s));
}

/* staged, peer in another process: open its window once, in the context of its GPU
 * (visible here), so no peer access between the two GPUs is needed. */
static ul_result_t cuda_open_remote(ul_backend_comm_t *c, ul_backend_window_t *w, int peer) {
  cuda_peer_win_t *pw = &w->peers[peer];
  ul_result_t rc = UL_OK;
  pthread_mutex_lock(&w->drain_lock);
  if (!pw->remote) {
    void *opened = NULL;
    cudaError_t e = cudaSetDevice(c->peer_dev[peer]);
    if (e == cudaSuccess) e = cudaIpcOpenMemHandle(&opened, pw->ipc, cudaIpcMemLazyEnablePeerAccess);
    cudaSetDevice(c->device);
    if (e != cudaSuccess) {
      rc = cuda_fail(c, "cudaIpcOpenMemHandle (staged ul_get)", e);
    } else {
      pw->ipc_base = opened;
      pw->remote = (char *)opened + pw->ipc_off;
    }
  }
  pthread_mutex_unlock(&w->drain_lock);
  return rc;
}

static ul_result_t cuda_get_on(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                               void *dst, size_t bytes, ul_backend_stream_t *s) {
  cuda_peer_win_t *pw = &w->peers[peer];
  if (!pw->dev && !pw->same_proc && !pw->remote) {
    ul_result_t rc = cuda_open_remote(c, w, peer);
    if (rc != UL_OK) return rc;
  }
  char *src = pw->dev ? (char *)pw->dev : pw->same_proc ? (char *)pw->same_proc : pw->remote;
  cudaError_t e = cudaMemcpyAsync(dst, src + off, bytes, cudaMemcpyDefault, cuda_stream_of(c, s));
  if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync (get)", e);
  return cuda_done(c, s);
}

static ul_result_t cuda_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                            void *dst, size_t bytes, ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  const cuda_peer_win_t *pw = &w->peers[peer];
  if (!pw->dev && !pw->same_proc && !(pw->ipc_ok && c->peer_dev[peer] >= 0))
    return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                                "cuda backend: ul_get from rank %d needs its GPU visible in this "
                                "process and its window from ul_mem_alloc (staged path)",
                                peer);
  CUDA_ON_DEVICE(c, cuda_get_on(c, w, peer, off, dst, bytes, s));
}

#ifndef UNILINK_CUDA_KERNELS
typedef struct cuda_store_job {
  _Atomic uint64_t *cell;
  uint64_t value;
} cuda_store_job_t;

/* Host callback (no kernels): after earlier work on the stream completed, raise the
 * host cell to value (store-max, so two streams' signals cannot move it backwards). */
static void CUDART_CB cuda_store_cell(void *arg) {
  cuda_store_job_t *j = arg;
  uint64_t cur = atomic_load(j->cell);
  while (cur < j->value && !atomic_compare_exchange_weak(j->cell, &cur, j->value)) {
  }
  free(j);
}
#endif

/* Under sig_lock: order a signal on st after the latest signal of another stream, so
 * that the running counts reach every cell in issue order (one comm's streams then
 * serialise at signals, as NCCL serialises one communicator's operations). */
static ul_result_t cuda_signal_order(ul_backend_comm_t *c, cudaStream_t st) {
  if (!c->sig_have_last || c->sig_last == st) return UL_OK;
  cudaError_t e;
  if (!c->sig_ev && (e = cudaEventCreateWithFlags(&c->sig_ev, cudaEventDisableTiming)) != cudaSuccess)
    return cuda_fail(c, "cudaEventCreateWithFlags (signal order)", e);
  if ((e = cudaEventRecord(c->sig_ev, c->sig_last)) == cudaSuccess &&
      (e = cudaStreamWaitEvent(st, c->sig_ev, 0)) == cudaSuccess)
    return UL_OK;
  /* e.g. the previous stream belongs to another device (a wrapped stream): wait here. */
  cudaGetLastError();
  return cuda_stream_wait(c, c->sig_last, c->timeout_ms);
}

static ul_result_t cuda_signal_on(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                                  int index, ul_backend_stream_t *s) {
  cuda_peer_win_t *pw = &w->peers[peer];
  cudaStream_t st = cuda_stream_of(c, s);
  pthread_mutex_lock(&c->sig_lock);
  ul_result_t rc = cuda_signal_order(c, st);
  if (rc != UL_OK) {
    pthread_mutex_unlock(&c->sig_lock);
    return rc;
  }
  uint64_t v = ++pw->my_count[index];
  size_t cell_no = (size_t)index * c->nranks + c->rank;
#ifdef UNILINK_CUDA_KERNELS
  int e = ulcuda_launch_store64(pw->sig_dev + cell_no, v, st);
  if (e != 0) {
    --pw->my_count[index];
    pthread_mutex_unlock(&c->sig_lock);
    return cuda_fail(c, "signal kernel launch", (cudaError_t)e);
  }
#else
  /* No kernels: a host callback on the stream stores the count into the mapped cell
   * (ordered after the stream's earlier copies, and never an unbounded host wait). */
  cuda_store_job_t *j = malloc(sizeof(*j));
  cudaError_t e = cudaErrorMemoryAllocation;
  if (j) {
    j->cell = (_Atomic uint64_t *)(pw->seg + w->sig_off) + cell_no;
    j->value = v;
    e = cudaLaunchHostFunc(st, cuda_store_cell, j);
  }
  if (e != cudaSuccess) {
    free(j);
    --pw->my_count[index];
    pthread_mutex_unlock(&c->sig_lock);
    return cuda_fail(c, "cudaLaunchHostFunc (signal)", e);
  }
#endif
  c->sig_last = st;
  c->sig_have_last = 1;
  pthread_mutex_unlock(&c->sig_lock);
  return cuda_done(c, s);
}

static ul_result_t cuda_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                               ul_backend_stream_t *s) {
  CUDA_ON_DEVICE(c, cuda_signal_on(c, w, peer, index, s));
}

static uint64_t cuda_signal_sum(ul_backend_comm_t *c, ul_backend_window_t *w, int index) {
  volatile uint64_t *cells =
      (volatile uint64_t *)(w->peers[c->rank].seg + w->sig_off) + (size_t)index * c->nranks;
  uint64_t sum = 0;
  for (int r = 0; r < c->nranks; r++) sum += cells[r];
  /* A sender's log entry is published (host callback) before its signal store runs, so
   * every entry behind the counts read above is visible to the log reads that follow. */
  atomic_thread_fence(memory_order_acquire);
  return sum;
}

/* staged: is there a logged range not yet copied into the device window? */
static int cuda_log_pending(ul_backend_window_t *w, int rank) {
  cuda_seg_hdr_t *h = (cuda_seg_hdr_t *)w->peers[rank].seg;
  if (atomic_load(&h->log_overflow)) return 1;
  uint64_t tail = __atomic_load_n(&h->log_tail, __ATOMIC_ACQUIRE);
  return atomic_load(&h->log[tail % CUDA_LOG_N].seq) == tail + 1;
}

/* staged: copy every logged range shadow -> device window, on the internal stream, and
 * mark the drain with drain_ev. A drain started by one stream's waiter also carries the
 * ranges that other streams' waiters need, so every waiter's stream waits for the latest
 * mark (cuda_drain_order), whoever drained. */
static ul_result_t cuda_drain_log(ul_backend_comm_t *c, ul_backend_window_t *w) {
  char *seg = w->peers[c->rank].seg;
  cuda_seg_hdr_t *h = (cuda_seg_hdr_t *)seg;
  cudaStream_t st = c->internal;
  cudaError_t e = cudaSuccess;
  ul_result_t rc = UL_OK;
  int copied = 0;
  pthread_mutex_lock(&w->drain_lock);
  if (atomic_exchange(&h->log_overflow, 0)) {
    __atomic_store_n(&h->log_tail, atomic_load(&h->log_head), __ATOMIC_RELEASE);
    e = cudaMemcpyAsync(w->base, seg + w->shadow_off, w->size, cudaMemcpyDefault, st);
    if (e != cudaSuccess) rc = cuda_fail(c, "cudaMemcpyAsync (staged window)", e);
    copied = 1;
  } else {
    for (;;) {
      cuda_log_entry_t *en = &h->log[h->log_tail % CUDA_LOG_N];
      if (atomic_load(&en->seq) != h->log_tail + 1) break; /* not written (yet) */
      e = cudaMemcpyAsync((char *)w->base + en->off, seg + w->shadow_off + en->off, en->bytes,
                          cudaMemcpyDefault, st);
      if (e != cudaSuccess) {
        rc = cuda_fail(c, "cudaMemcpyAsync (staged window)", e);
        break;
      }
      copied = 1;
      __atomic_store_n(&h->log_tail, h->log_tail + 1, __ATOMIC_RELEASE);
    }
  }
  if (rc == UL_OK && copied) {
    if (!w->drain_ev && (e = cudaEventCreateWithFlags(&w->drain_ev, cudaEventDisableTiming)) != cudaSuccess)
      rc = cuda_fail(c, "cudaEventCreateWithFlags (staged window)", e);
    else if ((e = cudaEventRecord(w->drain_ev, st)) != cudaSuccess)
      rc = cuda_fail(c, "cudaEventRecord (staged window)", e);
    else
      w->drain_marked = 1;
  }
  pthread_mutex_unlock(&w->drain_lock);
  return rc;
}

/* staged: work issued on s from now on sees every range drained so far. NULL stream:
 * the drains complete before returning (cuda_done). */
static ul_result_t cuda_drain_order(ul_backend_comm_t *c, ul_backend_window_t *w,
                                    ul_backend_stream_t *s) {
  if (!s) return cuda_done(c, s);
  ul_result_t rc = UL_OK;
  pthread_mutex_lock(&w->drain_lock);
  if (w->drain_marked && s->s != c->internal) {
    cudaError_t e = cudaStreamWaitEvent(s->s, w->drain_ev, 0);
    if (e != cudaSuccess) rc = cuda_fail(c, "cudaStreamWaitEvent (staged window)", e);
  }
  pthread_mutex_unlock(&w->drain_lock);
  return rc;
}

static ul_result_t cuda_wait_signal_on(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
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
  if (c->path != ULGPU_PATH_STAGED) return UL_OK; /* nothing was enqueued */
  ul_result_t rc = cuda_drain_log(c, w);
  if (rc != UL_OK) return rc;
  return cuda_drain_order(c, w, s);
}

static ul_result_t cuda_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                    uint64_t value, ul_backend_stream_t *s) {
  if (c->path != ULGPU_PATH_STAGED) return cuda_wait_signal_on(c, w, index, value, s);
  CUDA_ON_DEVICE(c, cuda_wait_signal_on(c, w, index, value, s));
}

/* staged: the data behind the count must be in the device window when the caller sees
 * the count (the generic layer polls read_signal and then copies from the window on
 * its own stream), so drain the log and complete the drain before returning. */
static ul_result_t cuda_read_drain(ul_backend_comm_t *c, ul_backend_window_t *w) {
  ul_result_t rc = cuda_drain_log(c, w);
  if (rc != UL_OK) return rc;
  return cuda_stream_wait(c, c->internal, c->timeout_ms);
}

static ul_result_t cuda_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                    uint64_t *value) {
  uint64_t v = cuda_signal_sum(c, w, index);
  if (c->path == ULGPU_PATH_STAGED && cuda_log_pending(w, c->rank)) {
    int prev;
    ul_result_t rc = cuda_enter(c, &prev);
    if (rc == UL_OK) {
      rc = cuda_read_drain(c, w);
      cuda_leave(c, prev);
    }
    if (rc != UL_OK) return rc;
  }
  *value = v;
  return UL_OK;
}

/* ------------------------------------------------------------- local math */

#ifdef UNILINK_CUDA_KERNELS
static ul_result_t cuda_reduce_on(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                                  size_t count, ul_dtype_t dtype, ul_op_t op,
                                  ul_backend_stream_t *s) {
  int e = ulcuda_launch_reduce(dst, a, b, count, (int)dtype, (int)(op == UL_AVG ? UL_SUM : op),
                               cuda_stream_of(c, s));
  if (e != 0) return cuda_fail(c, "reduce kernel launch", (cudaError_t)e);
  return cuda_done(c, s);
}

static ul_result_t cuda_scale_on(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                                 int nranks, ul_backend_stream_t *s) {
  int e = ulcuda_launch_scale(buf, count, (int)dtype, nranks, cuda_stream_of(c, s));
  if (e != 0) return cuda_fail(c, "scale kernel launch", (cudaError_t)e);
  return cuda_done(c, s);
}
#endif

static ul_result_t cuda_reduce_local(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                                     size_t count, ul_dtype_t dtype, ul_op_t op,
                                     ul_backend_stream_t *s) {
  if (count == 0) return UL_OK;
#ifdef UNILINK_CUDA_KERNELS
  CUDA_ON_DEVICE(c, cuda_reduce_on(c, dst, a, b, count, dtype, op, s));
#else
  (void)dst, (void)a, (void)b, (void)dtype, (void)op, (void)s;
  return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                              "cuda backend: built without nvcc, so it has no device reduction "
                              "kernels; rebuild with the CUDA compiler");
#endif
}

static ul_result_t cuda_scale_avg(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                                  int nranks, ul_backend_stream_t *s) {
  if (count == 0) return UL_OK;
#ifdef UNILINK_CUDA_KERNELS
  CUDA_ON_DEVICE(c, cuda_scale_on(c, buf, count, dtype, nranks, s));
#else
  (void)buf, (void)dtype, (void)nranks, (void)s;
  return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                              "cuda backend: built without nvcc (no device kernels)");
#endif
}

static ul_result_t cuda_copy_on(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                                ul_backend_stream_t *s, const char *what) {
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream_of(c, s));
  if (e != cudaSuccess) return cuda_fail(c, what, e);
  return cuda_done(c, s);
}

static ul_result_t cuda_copy_local(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                                   ul_backend_stream_t *s) {
  if (bytes == 0 || dst == src) return UL_OK;
  CUDA_ON_DEVICE(c, cuda_copy_on(c, dst, src, bytes, s, "cudaMemcpyAsync (copy)"));
}

/* ------------------------------------------------- memory kinds and movement */

/* One address: what cudaPointerGetAttributes says it is. */
static ul_backend_mem_kind_t cuda_kind_of(ul_backend_comm_t *c, const void *p) {
  struct cudaPointerAttributes at;
  memset(&at, 0, sizeof(at));
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    cudaGetLastError(); /* not sticky, but do not leave it for the caller's next check */
    return UL_BACKEND_MEM_UNKNOWN;
  }
  switch (at.type) {
  case cudaMemoryTypeUnregistered: return UL_BACKEND_MEM_HOST;
  case cudaMemoryTypeHost: return UL_BACKEND_MEM_HOST_MAPPED;
  /* Managed memory counts as device memory of its device: the device addresses it,
   * and the core must not assume a CPU touch is cheap or coherent. */
  case cudaMemoryTypeDevice:
  case cudaMemoryTypeManaged:
    return at.device == c->device ? UL_BACKEND_MEM_DEVICE : UL_BACKEND_MEM_PEER_DEVICE;
  default: return UL_BACKEND_MEM_UNKNOWN;
  }
}

static ul_result_t cuda_mem_kind(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                                 ul_backend_mem_kind_t *kind) {
  ul_backend_mem_kind_t k = cuda_kind_of(c, ptr);
  /* The whole range: its last byte must be of the same kind (a host buffer only partly
   * registered, or a device range running past its allocation, is not one kind). */
  if (k != UL_BACKEND_MEM_UNKNOWN && bytes > 1 && cuda_kind_of(c, (const char *)ptr + bytes - 1) != k)
    k = UL_BACKEND_MEM_UNKNOWN;
  *kind = k;
  return UL_OK;
}

static ul_result_t cuda_mem_copy(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                                 ul_backend_stream_t *s) {
  if (bytes == 0 || dst == src) return UL_OK;
  /* NULL stream: the blocking internal stream (after the caller's legacy-stream work),
   * completed within the communicator's timeout before returning. */
  CUDA_ON_DEVICE(c, cuda_copy_on(c, dst, src, bytes, s, "cudaMemcpyAsync (ul_mem_copy)"));
}

typedef struct cuda_memset_job {
  void *dst;
  int value;
  size_t bytes;
} cuda_memset_job_t;

/* Host callback: a host-memory memset at its place in the stream. */
static void CUDART_CB cuda_memset_host(void *arg) {
  cuda_memset_job_t *j = arg;
  memset(j->dst, j->value, j->bytes);
  free(j);
}

static ul_result_t cuda_mem_set_on(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                                   ul_backend_stream_t *s) {
  ul_backend_mem_kind_t k = cuda_kind_of(c, dst);
  cudaError_t e;
  if (k == UL_BACKEND_MEM_HOST || k == UL_BACKEND_MEM_HOST_MAPPED) {
    /* cudaMemsetAsync wants device-addressable memory; host memory is set by the CPU,
     * in stream order, from a host callback. */
    cuda_memset_job_t *j = malloc(sizeof(*j));
    if (!j) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
    j->dst = dst;
    j->value = value;
    j->bytes = bytes;
    if ((e = cudaLaunchHostFunc(cuda_stream_of(c, s), cuda_memset_host, j)) != cudaSuccess) {
      free(j);
      return cuda_fail(c, "cudaLaunchHostFunc (ul_mem_set)", e);
    }
  } else if ((e = cudaMemsetAsync(dst, value, bytes, cuda_stream_of(c, s))) != cudaSuccess) {
    return cuda_fail(c, "cudaMemsetAsync (ul_mem_set)", e);
  }
  return cuda_done(c, s);
}

static ul_result_t cuda_mem_set(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                                ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  CUDA_ON_DEVICE(c, cuda_mem_set_on(c, dst, value, bytes, s));
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
    .comm_init_all = cuda_comm_init_all,
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
    .mem_kind = cuda_mem_kind,
    .mem_copy = cuda_mem_copy,
    .mem_set = cuda_mem_set,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &cuda_ops;
}
