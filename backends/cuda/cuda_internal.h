/* Shared between the cuda backend's files only (cuda_backend.c, cuda_wait.c, cuda_comm.c,
 * cuda_mem.c, cuda_p2p.c): the comm and window types, the device guard and the helpers
 * more than one file uses. Hidden by the plugin's visibility preset. */
#ifndef ULCUDA_INTERNAL_H
#define ULCUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unilink/backend.h>

#include "backend_util.h"
#include "gpu_common.h"
#include "gpu_stream.h"
#include "gpu_topo.h"

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
  ulbu_waiter_t waiter; /* every wait: abort flags, timeout, backoff (cuda_wait.c) */
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

static inline cudaStream_t cuda_stream_of(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return s ? s->s : c->internal;
}

extern int cuda_ndev; /* CUDA devices visible to this process (cuda_init) */
extern const ulbu_board_conf_t cuda_board_conf;

ul_result_t cuda_fail(ul_backend_comm_t *c, const char *call, cudaError_t e);
ul_result_t cuda_enter(ul_backend_comm_t *c, int *prev);
void cuda_leave(ul_backend_comm_t *c, int prev);
/* c->waiter: the GPU backoff, c's timeout, abort (c's flags) and sentences. */
void cuda_waiter_init(ul_backend_comm_t *c);
ul_result_t cuda_stream_wait(ul_backend_comm_t *c, cudaStream_t s, int timeout_ms);
ul_result_t cuda_done(ul_backend_comm_t *c, ul_backend_stream_t *s);
ul_result_t cuda_allgather(ul_backend_comm_t *c, const cuda_slot_t *mine, cuda_slot_t *all,
                         const char *what);
void cuda_status(ul_backend_comm_t *c, cuda_slot_t *mine, ul_result_t st);
ul_result_t cuda_agree(ul_backend_comm_t *c, const cuda_slot_t *all, const char *what);
ul_result_t cuda_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                           ul_backend_comm_props_t *props);
ul_result_t cuda_comm_init_all(const ul_backend_comm_args_t *args, int ndev,
                               ul_backend_comm_t **out, ul_backend_comm_props_t *props);
ul_result_t cuda_comm_finalize(ul_backend_comm_t *c);
ul_result_t cuda_comm_destroy(ul_backend_comm_t *c);
ul_result_t cuda_comm_abort(ul_backend_comm_t *c);
ul_result_t cuda_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out);
ul_result_t cuda_stream_create(ul_backend_comm_t *c, ul_backend_stream_t **out);
ul_result_t cuda_stream_wrap(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out);
ul_result_t cuda_stream_synchronize(ul_backend_stream_t *s, int timeout_ms);
ul_result_t cuda_stream_query(ul_backend_stream_t *s);
ul_result_t cuda_stream_destroy(ul_backend_stream_t *s);
void cuda_window_free(ul_backend_comm_t *c, ul_backend_window_t *w);
ul_result_t cuda_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr);
ul_result_t cuda_mem_free(ul_backend_comm_t *c, void *ptr);
ul_result_t cuda_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                 int extra_signals, ul_backend_window_t **out,
                                 void **peer_bases);
ul_result_t cuda_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w);
ul_result_t cuda_reduce_local(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                              size_t count, ul_dtype_t dtype, ul_op_t op,
                              ul_backend_stream_t *s);
ul_result_t cuda_scale_avg(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                           int nranks, ul_backend_stream_t *s);
ul_result_t cuda_copy_local(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                            ul_backend_stream_t *s);
ul_result_t cuda_mem_kind(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                          ul_backend_mem_kind_t *kind);
ul_result_t cuda_mem_copy(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                          ul_backend_stream_t *s);
ul_result_t cuda_mem_set(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                         ul_backend_stream_t *s);
ul_result_t cuda_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                     const void *src, size_t bytes, ul_backend_stream_t *s);
ul_result_t cuda_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                     void *dst, size_t bytes, ul_backend_stream_t *s);
ul_result_t cuda_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                        ul_backend_stream_t *s);
ul_result_t cuda_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                             uint64_t value, ul_backend_stream_t *s);
ul_result_t cuda_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                             uint64_t *value);
ul_result_t cuda_get_unique_id(unsigned char *payload, size_t bytes);

#endif
