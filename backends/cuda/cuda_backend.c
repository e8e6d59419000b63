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

#include "gpu_common.h"
#include "gpu_topo.h"
#ifdef UNILINK_CUDA_KERNELS
#include "cuda_kernels.h"
#endif

#define CUDA_ID_MAGIC 0x43554441u /* "CUDA" */
#define CUDA_SLOT_BYTES 512
#define CUDA_LOG_N 4096

typedef struct cuda_id_payload {
  unsigned magic;
  unsigned char token[16]; /* random: names the board segment */
} cuda_id_payload_t;

typedef struct cuda_board_hdr {
  _Atomic unsigned ready;
  _Atomic int joined;
  _Atomic unsigned bar_count;
  _Atomic unsigned bar_gen;
  int nranks;
} cuda_board_hdr_t;

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

struct cuda_alloc {
  void *ptr;
  size_t size;
  struct cuda_alloc *next;
};

struct ul_backend_comm {
  ul_comm_t core;
  int rank, nranks, device;
  int timeout_ms;
  const volatile int *abort_flag;
  volatile int dead;
  ulgpu_path_t path;
  int same_process; /* every rank lives in this process */
  cudaStream_t internal;
  char token_hex[33];
  cuda_board_hdr_t *board;
  size_t board_len;
  ulgpu_ident_t *idents;
  int *peer_dev; /* local CUDA index of each peer's GPU, -1 if not visible */
  unsigned win_seq;
  pthread_mutex_t lock;
  struct cuda_alloc *allocs;
};

struct ul_backend_stream {
  ul_backend_comm_t *c;
  cudaStream_t s;
  int owned;
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
  char buf[320];
  ulgpu_format_cuda_error(buf, sizeof(buf), call, (int)e, cudaGetErrorString(e));
  return ul_backend_set_error(c ? c->core : NULL, ulgpu_cuda_result((int)e), "cuda backend: %s",
                              buf);
}

static double cuda_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void cuda_backoff(double t0, double now) {
  if (now - t0 < 1.0) sched_yield();
  else {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

/* UL_OK to keep waiting, else the error to return. */
static ul_result_t cuda_wait_check(ul_backend_comm_t *c, double t0, const char *what) {
  if (c->dead || (c->abort_flag && *c->abort_flag))
    return ul_backend_set_error(c->core, UL_ERR_ABORTED, "rank %d: %s: communicator was aborted",
                                c->rank, what);
  double now = cuda_now_ms();
  if (c->timeout_ms > 0 && now - t0 > c->timeout_ms)
    return ul_backend_set_error(c->core, UL_ERR_TIMEOUT,
                                "rank %d: %s did not complete within %d ms", c->rank, what,
                                c->timeout_ms);
  cuda_backoff(t0, now);
  return UL_OK;
}

static ul_result_t cuda_stream_wait(ul_backend_comm_t *c, cudaStream_t s, int timeout_ms) {
  double t0 = cuda_now_ms();
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return UL_OK;
    if (e != cudaErrorNotReady) return cuda_fail(c, "cudaStreamQuery", e);
    if (c->dead || (c->abort_flag && *c->abort_flag))
      return ul_backend_set_error(c->core, UL_ERR_ABORTED,
                                  "rank %d: stream synchronize: communicator was aborted", c->rank);
    double now = cuda_now_ms();
    if (timeout_ms > 0 && now - t0 > timeout_ms)
      return ul_backend_set_error(c->core, UL_ERR_TIMEOUT,
                                  "rank %d: work on the stream did not complete within %d ms",
                                  c->rank, timeout_ms);
    cuda_backoff(t0, now);
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

static void cuda_seg_name(char *buf, size_t len, const char *token_hex, const char *what, int a,
                          int b) {
  snprintf(buf, len, "/ulcuda-%s-%s%d-%d", token_hex, what, a, b);
}

static ul_result_t cuda_board_barrier(ul_backend_comm_t *c, const char *what) {
  cuda_board_hdr_t *h = c->board;
  unsigned gen = atomic_load(&h->bar_gen);
  if (atomic_fetch_add(&h->bar_count, 1) == (unsigned)c->nranks - 1) {
    atomic_store(&h->bar_count, 0);
    atomic_fetch_add(&h->bar_gen, 1);
    return UL_OK;
  }
  double t0 = cuda_now_ms();
  while (atomic_load(&h->bar_gen) == gen) {
    ul_result_t rc = cuda_wait_check(c, t0, what);
    if (rc != UL_OK) return rc;
  }
  return UL_OK;
}

static cuda_slot_t *cuda_slot(ul_backend_comm_t *c, int r) {
  return (cuda_slot_t *)((char *)c->board + 4096 + (size_t)r * CUDA_SLOT_BYTES);
}

/* Publish *mine, then read every rank's slot into all[] (collective). */
static ul_result_t cuda_allgather(ul_backend_comm_t *c, const cuda_slot_t *mine, cuda_slot_t *all,
                                  const char *what) {
  memcpy(cuda_slot(c, c->rank), mine, sizeof(*mine));
  ul_result_t rc = cuda_board_barrier(c, what);
  if (rc != UL_OK) return rc;
  for (int r = 0; r < c->nranks; r++) memcpy(&all[r], cuda_slot(c, r), sizeof(cuda_slot_t));
  return cuda_board_barrier(c, what); /* slots may be reused after everyone read them */
}

static ul_result_t cuda_board_join(ul_backend_comm_t *c, const cuda_id_payload_t *p) {
  for (int i = 0; i < 16; i++) snprintf(c->token_hex + 2 * i, 3, "%02x", p->token[i]);
  char name[96];
  cuda_seg_name(name, sizeof(name), c->token_hex, "board", 0, 0);
  c->board_len = 4096 + (size_t)c->nranks * CUDA_SLOT_BYTES;
  int creator = 0;
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd >= 0) {
    creator = 1;
    if (ftruncate(fd, (off_t)c->board_len) != 0) {
      int err = errno;
      close(fd);
      shm_unlink(name);
      return ul_backend_set_error(c->core, UL_ERR_SYSTEM, "cuda backend: ftruncate(%s): %s", name,
                                  strerror(err));
    }
  } else {
    double t0 = cuda_now_ms();
    for (;;) { /* the creator may not have made it yet */
      fd = shm_open(name, O_RDWR, 0600);
      if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0 && (size_t)st.st_size >= c->board_len) break;
        close(fd);
      }
      ul_result_t rc = cuda_wait_check(c, t0, "joining the communicator");
      if (rc != UL_OK) return rc;
    }
  }
  void *m = mmap(NULL, c->board_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    if (creator) shm_unlink(name);
    return ul_backend_set_error(c->core, UL_ERR_SYSTEM, "cuda backend: mmap(%s): %s", name,
                                strerror(errno));
  }
  c->board = m;
  if (creator) {
    c->board->nranks = c->nranks;
    atomic_store(&c->board->ready, 1);
  } else {
    double t0 = cuda_now_ms();
    while (!atomic_load(&c->board->ready)) {
      ul_result_t rc = cuda_wait_check(c, t0, "joining the communicator");
      if (rc != UL_OK) return rc;
    }
    if (c->board->nranks != c->nranks)
      return ul_backend_set_error(c->core, UL_ERR_INVALID_ARG,
                                  "cuda backend: rank %d joined with nranks %d but the "
                                  "communicator has %d",
                                  c->rank, c->nranks, c->board->nranks);
  }
  atomic_fetch_add(&c->board->joined, 1);
  ul_result_t rc = cuda_board_barrier(c, "joining the communicator");
  if (c->rank == 0 || creator) shm_unlink(name); /* everyone has it mapped (or timed out) */
  return rc;
}

/* --------------------------------------------------------------- lifecycle */

static ul_result_t cuda_init(char *reason, size_t reason_len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    ulgpu_format_cuda_error(reason, reason_len, "cudaGetDeviceCount", (int)e, cudaGetErrorString(e));
    return UL_ERR_UNAVAILABLE;
  }
  if (n <= 0) {
    snprintf(reason, reason_len, "cudaGetDeviceCount: no CUDA device visible");
    return UL_ERR_UNAVAILABLE;
  }
  cuda_ndev = n;
  return UL_OK;
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
  cuda_id_payload_t p;
  memset(&p, 0, sizeof(p));
  p.magic = CUDA_ID_MAGIC;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, p.token, sizeof(p.token)) != (ssize_t)sizeof(p.token)) {
    if (fd >= 0) close(fd);
    return ul_backend_set_error(NULL, UL_ERR_SYSTEM, "cuda backend: cannot read /dev/urandom");
  }
  close(fd);
  memset(payload, 0, bytes);
  memcpy(payload, &p, sizeof(p));
  return UL_OK;
}

static void cuda_comm_free(ul_backend_comm_t *c) {
  if (!c) return;
  cudaSetDevice(c->device);
  if (c->internal) cudaStreamDestroy(c->internal);
  for (struct cuda_alloc *a = c->allocs, *n; a; a = n) {
    n = a->next;
    cudaFree(a->ptr);
    free(a);
  }
  if (c->board) munmap(c->board, c->board_len);
  free(c->idents);
  free(c->peer_dev);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

static ul_result_t cuda_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                  ul_backend_comm_props_t *props) {
  *out = NULL;
  cuda_id_payload_t p;
  if (!a->id_payload || a->id_payload_bytes < sizeof(p))
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG, "cuda backend: id payload too small");
  memcpy(&p, a->id_payload, sizeof(p));
  if (p.magic != CUDA_ID_MAGIC)
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "cuda backend: the unique id was not made by the cuda backend");
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
  pthread_mutex_init(&c->lock, NULL);
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
  if ((rc = cuda_board_join(c, &p)) != UL_OK) goto fail;
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
  return cuda_board_barrier(c, "comm finalize");
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
  ul_backend_stream_t *s = calloc(1, sizeof(*s));
  if (!s) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  cudaSetDevice(c->device);
  cudaError_t e = cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    free(s);
    return cuda_fail(c, "cudaStreamCreateWithFlags", e);
  }
  s->c = c;
  s->owned = 1;
  *out = s;
  return UL_OK;
}

static ul_result_t cuda_stream_wrap(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out) {
  ul_backend_stream_t *s = calloc(1, sizeof(*s));
  if (!s) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  s->c = c;
  s->s = (cudaStream_t)native;
  *out = s;
  return UL_OK;
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
  struct cuda_alloc *a = calloc(1, sizeof(*a));
  if (!a) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  cudaSetDevice(c->device);
  cudaError_t e = cudaMalloc(&a->ptr, size); /* cudaMalloc memory can be IPC-exported */
  if (e != cudaSuccess) {
    free(a);
    return cuda_fail(c, "cudaMalloc", e);
  }
  a->size = size;
  pthread_mutex_lock(&c->lock);
  a->next = c->allocs;
  c->allocs = a;
  pthread_mutex_unlock(&c->lock);
  *ptr = a->ptr;
  return UL_OK;
}

static ul_result_t cuda_mem_free(ul_backend_comm_t *c, void *ptr) {
  pthread_mutex_lock(&c->lock);
  struct cuda_alloc **pp = &c->allocs, *a = NULL;
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->ptr == ptr) {
      a = *pp;
      *pp = a->next;
      break;
    }
  pthread_mutex_unlock(&c->lock);
  if (!a)
    return ul_backend_set_error(c->core, UL_ERR_INVALID_ARG,
                                "cuda backend: ul_mem_free: %p was not allocated by ul_mem_alloc on "
                                "this communicator", ptr);
  cudaSetDevice(c->device);
  cudaFree(a->ptr);
  free(a);
  return UL_OK;
}

/* Offset of ptr inside the ul_mem_alloc allocation holding it (IPC handles name the
 * allocation, not the pointer); 0 when ptr is not from ul_mem_alloc. */
static uint64_t cuda_alloc_offset(ul_backend_comm_t *c, void *ptr) {
  uint64_t off = 0;
  pthread_mutex_lock(&c->lock);
  for (struct cuda_alloc *a = c->allocs; a; a = a->next)
    if ((char *)ptr >= (char *)a->ptr && (char *)ptr < (char *)a->ptr + a->size) {
      off = (uint64_t)((char *)ptr - (char *)a->ptr);
      break;
    }
  pthread_mutex_unlock(&c->lock);
  return off;
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
  cuda_seg_name(name, sizeof(name), c->token_hex, "w", (int)seq, c->rank);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)w->seg_len) != 0) {
    rc = ul_backend_set_error(c->core, UL_ERR_SYSTEM, "cuda backend: shm segment %s: %s", name,
                              strerror(errno));
    if (fd >= 0) close(fd);
    shm_unlink(name);
    goto fail_early;
  }
  close(fd);
  memset(&mine, 0, sizeof(mine));
  mine.ident = c->idents[c->rank];
  mine.raw_base = (uint64_t)(uintptr_t)base;
  mine.size = size;
  if (c->path == ULGPU_PATH_P2P && !c->same_process && base && size) {
    mine.ipc_offset = cuda_alloc_offset(c, base);
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
    cuda_seg_name(pname, sizeof(pname), c->token_hex, "w", (int)seq, r);
    int pfd = shm_open(pname, O_RDWR, 0600);
    if (pfd < 0) {
      rc = ul_backend_set_error(c->core, UL_ERR_SYSTEM, "cuda backend: open %s: %s", pname,
                                strerror(errno));
      break;
    }
    void *m = mmap(NULL, w->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
    close(pfd);
    if (m == MAP_FAILED) {
      rc = ul_backend_set_error(c->core, UL_ERR_SYSTEM, "cuda backend: mmap %s: %s", pname,
                                strerror(errno));
      break;
    }
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
  grc = cuda_board_barrier(c, "window register");
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
  ul_result_t b = cuda_board_barrier(c, "window deregister");
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
  double t0 = cuda_now_ms();
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

static ul_result_t cuda_annotate(ul_backend_comm_t *c, ul_call_info_t *info) {
  snprintf(info->path, sizeof(info->path), "%s", ulgpu_path_name(c->path));
  return UL_OK;
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
    .annotate_call = cuda_annotate,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &cuda_ops;
}
