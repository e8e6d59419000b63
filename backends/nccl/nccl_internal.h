/* Shared between the nccl backend's files only (nccl_backend.c, nccl_wait.c, nccl_mem.c,
 * nccl_coll.c): the backend comm, the optional NCCL entry points and the helpers every op
 * uses. Names are ulnccl_ (internal to the plugin, hidden by its visibility preset). */
#ifndef ULNCCL_INTERNAL_H
#define ULNCCL_INTERNAL_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
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

extern int ulnccl_version_code; /* ncclGetVersion at init (nccl_backend.c) */

/* ------------------------------------------------- entry points newer than 2.18.1 */

typedef ncclResult_t (*ulnccl_alltoall_fn)(const void *, void *, size_t, ncclDataType_t,
                                           ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ulnccl_rooted_fn)(const void *, void *, size_t, ncclDataType_t, int,
                                         ncclComm_t, cudaStream_t);
typedef ncclResult_t (*ulnccl_mem_alloc_fn)(void **, size_t);
typedef ncclResult_t (*ulnccl_mem_free_fn)(void *);
typedef ncclResult_t (*ulnccl_win_register_fn)(ncclComm_t, void *, size_t, void **, int);
typedef ncclResult_t (*ulnccl_win_deregister_fn)(ncclComm_t, void *);

typedef struct ulnccl_opt {
  ulnccl_alltoall_fn alltoall;            /* 2.28.3 */
  ulnccl_rooted_fn gather, scatter;       /* 2.28.3 */
  ulnccl_mem_alloc_fn mem_alloc;          /* 2.19.1 */
  ulnccl_mem_free_fn mem_free;            /* 2.19.1 */
  ulnccl_win_register_fn win_register;    /* 2.27.3 */
  ulnccl_win_deregister_fn win_deregister;/* 2.27.3 */
} ulnccl_opt_t;
extern ulnccl_opt_t ulnccl_opt; /* NULL members: this NCCL lacks them (nccl_backend.c) */

#define ULNCCL_WIN_DEFAULT 0x00 /* NCCL_WIN_DEFAULT of nccl.h >= 2.27.3 */

/* nccl_wait.c: errors, the comm's lifetime and the device guard, waiting. */
ul_result_t ulnccl_fail(ul_backend_comm_t *c, const char *call, ncclResult_t rc);
ul_result_t ulnccl_break(ul_backend_comm_t *c, ul_result_t rc);
ul_result_t ulnccl_fail_async(ul_backend_comm_t *c, const char *call, ncclResult_t rc);
ul_result_t ulnccl_cuda_fail(ul_backend_comm_t *c, const char *call, cudaError_t e);
void ulnccl_ref(ul_backend_comm_t *c);
void ulnccl_unref(ul_backend_comm_t *c);
/* Every op: hold the comm (reference + "in a call"), and make the comm's GPU current
 * for the call, restoring the caller's afterwards (a user thread or a core helper
 * thread may have any device current). */
typedef struct ulnccl_guard {
  ul_backend_comm_t *c;
  int prev;
} ulnccl_guard_t;

ulnccl_guard_t ulnccl_enter(ul_backend_comm_t *c);
void ulnccl_leave(ulnccl_guard_t *g);
#define NCCL_ENTER(c) \
  ulnccl_guard_t ul__guard __attribute__((cleanup(ulnccl_leave))) = ulnccl_enter(c)

int ulnccl_aborted(ul_backend_comm_t *c);
ul_result_t ulnccl_check_abort(ul_backend_comm_t *c, const char *what);
/* Entry check of every op that reaches NCCL: aborted or broken communicators fail now. */
ul_result_t ulnccl_usable(ul_backend_comm_t *c, const char *what);
ul_result_t ulnccl_timeout(ul_backend_comm_t *c, const char *what, int timeout_ms);
/* Poll the communicator until it leaves ncclInProgress (timeout and abort honoured). */
ul_result_t ulnccl_wait_ready(ul_backend_comm_t *c, ncclComm_t nc, const char *call);
ul_result_t ulnccl_async_check(ul_backend_comm_t *c);
ul_result_t ulnccl_stream_wait(ul_backend_comm_t *c, cudaStream_t s, int timeout_ms);
extern __thread int ulnccl_group_depth; /* ncclGroupStart depth of this thread */
/* After an enqueue: NCCL status -> ours; a NULL stream runs to completion now. */
ul_result_t ulnccl_finish(ul_backend_comm_t *c, const char *call, ncclResult_t r,
                          ul_backend_stream_t *s);
ul_result_t ulnccl_types(ul_backend_comm_t *c, ul_dtype_t dtype, int reduce, ul_op_t op,
                         ncclDataType_t *t, ncclRedOp_t *o);

static inline cudaStream_t ulnccl_stream_of(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return s ? s->s : c->internal;
}

/* nccl_backend.c: free an allocation (ncclMemFree or cudaFree by its tag). */
void ulnccl_alloc_release(void *ptr, int from_nccl, void *arg); /* nccl_lib.c */
/* nccl_lib.c: fill ulnccl_opt (UNILINK_NCCL_NEW_API=0 leaves it empty) */
void ulnccl_resolve_optional(void);

/* nccl_mem.c: memory, windows, the one-sided ops NCCL has not. */
ul_result_t ulnccl_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr);
ul_result_t ulnccl_mem_free(ul_backend_comm_t *c, void *ptr);
ul_result_t ulnccl_mem_kind(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                            ul_backend_mem_kind_t *kind);
ul_result_t ulnccl_mem_copy(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                            ul_backend_stream_t *s);
ul_result_t ulnccl_mem_set(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                           ul_backend_stream_t *s);
ul_result_t ulnccl_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                   int extra_signals, ul_backend_window_t **out,
                                   void **peer_bases);
ul_result_t ulnccl_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w);
ul_result_t ulnccl_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                       const void *src, size_t bytes, ul_backend_stream_t *s);
ul_result_t ulnccl_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                       void *dst, size_t bytes, ul_backend_stream_t *s);
ul_result_t ulnccl_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                          ul_backend_stream_t *s);
ul_result_t ulnccl_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                               uint64_t value, ul_backend_stream_t *s);

/* nccl_coll.c: collectives and point to point. */
ul_result_t ulnccl_allreduce(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                             ul_dtype_t dtype, ul_op_t op, ul_backend_stream_t *s);
ul_result_t ulnccl_broadcast(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                             ul_dtype_t dtype, int root, ul_backend_stream_t *s);
ul_result_t ulnccl_reduce(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                          ul_dtype_t dtype, ul_op_t op, int root, ul_backend_stream_t *s);
ul_result_t ulnccl_allgather(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                             ul_dtype_t dtype, ul_backend_stream_t *s);
ul_result_t ulnccl_reduce_scatter(ul_backend_comm_t *c, const void *sb, void *rb,
                                  size_t count, ul_dtype_t dtype, ul_op_t op,
                                  ul_backend_stream_t *s);
ul_result_t ulnccl_alltoall(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                            ul_dtype_t dtype, ul_backend_stream_t *s);
ul_result_t ulnccl_alltoallv(ul_backend_comm_t *c, const void *sb, const size_t *scounts,
                             const size_t *sdispls, void *rb, const size_t *rcounts,
                             const size_t *rdispls, ul_dtype_t dtype,
                             ul_backend_stream_t *s);
ul_result_t ulnccl_allgatherv(ul_backend_comm_t *c, const void *sb, size_t sendcount,
                              void *rb, const size_t *rcounts, const size_t *displs,
                              ul_dtype_t dtype, ul_backend_stream_t *s);
ul_result_t ulnccl_gather(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                          ul_dtype_t dtype, int root, ul_backend_stream_t *s);
ul_result_t ulnccl_scatter(ul_backend_comm_t *c, const void *sb, void *rb, size_t count,
                           ul_dtype_t dtype, int root, ul_backend_stream_t *s);
ul_result_t ulnccl_barrier(ul_backend_comm_t *c, ul_backend_stream_t *s);
ul_result_t ulnccl_send(ul_backend_comm_t *c, const void *buf, size_t count,
                        ul_dtype_t dtype, int peer, ul_backend_stream_t *s);
ul_result_t ulnccl_recv(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                        int peer, ul_backend_stream_t *s);
ul_result_t ulnccl_group_start(ul_backend_comm_t *c);
ul_result_t ulnccl_group_end(ul_backend_comm_t *c, ul_backend_stream_t *s);

#endif
