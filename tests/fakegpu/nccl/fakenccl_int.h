/* Internals of the fake NCCL shared by its source files. */
#ifndef UNILINK_FAKENCCL_INT_H
#define UNILINK_FAKENCCL_INT_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fakenccl_reduce.h"

#define FN_ID_MAGIC 0x4c4343454b414646ull /* "FFAKECCL" */
#define FN_COMM_MAGIC 0x6e63636cu
#define FN_SHM_MAGIC 0x66616b65u
#define FN_BOOT_BYTES 64

/* One rank's identity, published at rendezvous. */
typedef struct {
  _Atomic int joined;
  int dev;
  int64_t busid;
  int pid;
  int pad;
} fn_rankinfo_t;

/* Small all-gathers on the host (split, window registration). */
typedef struct {
  _Atomic uint64_t gen, ack;
  unsigned char data[FN_BOOT_BYTES];
} fn_boot_t;

/* Per-rank step counters of the collective protocol (a line each). */
typedef struct {
  _Atomic uint64_t arrive, done;
  char pad[48];
} fn_step_t;

/* A byte ring from one rank to another (send/recv). */
typedef struct {
  _Atomic uint64_t head, tail;
  char pad[48];
} fn_ring_t;

/* The POSIX shared-memory segment of one communicator: everything ranks share. */
typedef struct {
  _Atomic uint32_t magic;
  uint32_t nranks;
  uint64_t key;
  uint64_t size, chunk, ring;
  _Atomic int njoined, nseen, nattached;
  int pad;
  uint64_t off_ranks, off_boot, off_steps, off_stage, off_rings, off_ringdata;
} fn_shm_t;

struct ncclWindow_vidmem {
  struct ncclWindow_vidmem *next;
  void *buff;
  size_t size;
  int flags;
};

typedef struct {
  int used;
  int dtype;
  int is_ptr;
  uint64_t scalar; /* bits, or the device pointer when is_ptr */
} fn_userop_t;

struct ncclComm {
  uint32_t magic0;
  int rank, nranks, dev, blocking, cc_major;
  int64_t busid;
  uint64_t key;
  _Atomic int async;       /* ncclResult_t: the communicator's state */
  _Atomic int polls;       /* InProgress reports still owed after background work */
  _Atomic int abort_flag;
  _Atomic int refs;        /* user + tasks + background job */
  _Atomic int running;     /* tasks executing on a stream worker now */
  _Atomic int outstanding; /* tasks enqueued and not finished */
  _Atomic uint64_t exec_seq; /* next task allowed to run (NCCL serializes a comm's kernels) */
  uint64_t enq_seq;
  uint64_t step;           /* collective steps done (task side) */
  uint64_t boot_gen;
  long nops;               /* operations enqueued (fault injection counts these) */
  int fault_async_op, fault_hang_op, fault_never_join;
  int finalize_called, destroyed, init_done;
  _Atomic int finalizing;
  pthread_t job;           /* background init/split */
  int job_live;
  fn_shm_t *shm;
  size_t shm_size;
  char shm_name[64];
  int unlinked;
  pthread_mutex_t lock;
  struct ncclWindow_vidmem *windows;
  fn_userop_t *userops;
  int nuserops;
  int split_count;
  uint32_t magic1;
};

/* ================================================================ shared by the source files */

#define FN_API __attribute__((visibility("default")))

/* Injected faults (FAKEGPU_NCCL_FAULT) and the outcomes of a wait. */
enum { F_ASYNC = 1, F_NEVER_JOIN, F_HANG };
enum { FW_OK = 0, FW_ABORT, FW_TIMEOUT, FW_PEER };

static inline fn_rankinfo_t *shm_rank(fn_shm_t *s, int r) {
  return (fn_rankinfo_t *)((char *)s + s->off_ranks) + r;
}
static inline fn_boot_t *shm_boot(fn_shm_t *s, int r) {
  return (fn_boot_t *)((char *)s + s->off_boot) + r;
}
static inline fn_step_t *shm_step(fn_shm_t *s, int r) {
  return (fn_step_t *)((char *)s + s->off_steps) + r;
}
static inline char *shm_stage(fn_shm_t *s, int r) {
  return (char *)s + s->off_stage + (size_t)r * s->chunk;
}
static inline fn_ring_t *shm_ring(fn_shm_t *s, int src, int dst) {
  return (fn_ring_t *)((char *)s + s->off_rings) + (size_t)src * s->nranks + dst;
}
static inline char *shm_ringdata(fn_shm_t *s, int src, int dst) {
  return (char *)s + s->off_ringdata + ((size_t)src * s->nranks + dst) * s->ring;
}

typedef struct fn_job {
  struct fn_job *next;
  ncclComm_t comm;          /* whose state the job sets */
  void *(*fn)(void *);
  void *arg;
  int started;
} fn_job_t;

typedef enum {
  K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCESCATTER, K_ALLTOALL, K_GATHER,
  K_SCATTER, K_SEND, K_RECV
} fn_kind_t;

typedef struct fn_op {
  struct fn_op *next;
  ncclComm_t comm;
  cudaStream_t stream;
  fn_kind_t kind;
  const char *name;
  const void *sbuf;
  void *rbuf;
  size_t count;
  int dtype, root; /* root, or the peer of send/recv */
  fn_redop_t op;
  const void *scalar_ptr; /* PreMulSum with a device scalar */
  int fault;              /* F_ASYNC, F_HANG */
  int s_host, r_host;     /* host memory the device reaches: used directly */
  /* progress of send/recv */
  size_t done;
  int hdr_done, finished;
} fn_op_t;

typedef struct {
  ncclComm_t comm;
  uint64_t seq;
  fn_op_t *ops;
} fn_task_t;

/* The calling thread's group (fakenccl_group.c). */
extern __thread int g_depth;
extern __thread fn_op_t *g_ops, **g_ops_tail; /* NULL tail: the list is empty */
extern __thread fn_job_t *g_jobs;

#define CUDACHECK(call)                                                                          \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      fn_warn("Cuda failure '%s'", cuda_str(e_));                                                \
      return ncclUnhandledCudaError;                                                             \
    }                                                                                            \
  } while (0)

/* The files form layers; each calls only those listed before it.
 * fakenccl_errors.c: errors, environment, faults, time */
void fn_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int env_int(const char *name, int def);
int timeout_ms(void);
void comm_faults(ncclComm_t c);
double now_ms(void);
void backoff(unsigned *spins);
const char *cuda_str(cudaError_t e);

/* fakenccl_view.c: what a task may touch; the pointer checks */
void *dev_view(const void *p, size_t n);
int host_reachable(const void *p);
ncclResult_t cuda_ptr_check(const void *p, ncclComm_t c, const char *what, const char *opname);

/* fakenccl_comm.c: communicator objects, waits, rendezvous */
void comm_ref(ncclComm_t c);
void comm_unref(ncclComm_t c);
ncclResult_t comm_check(ncclComm_t c, const char *opname);
ncclResult_t ptr_check(const void *p, const char *opname, const char *what);
ncclResult_t comm_state(ncclComm_t c);
ncclResult_t comm_ensure_ready(ncclComm_t c);
int peer_died(ncclComm_t c);
int wait_all_ge(ncclComm_t c, _Atomic uint64_t *first, size_t stride, uint64_t v, int tmo_ms,
                ncclComm_t also);
ncclResult_t boot_allgather(ncclComm_t c, const void *mine, size_t len, void *all,
                            ncclComm_t also);
int comm_ok(const struct ncclComm *c);
void comm_unlink(ncclComm_t c);
ncclComm_t comm_new(int nranks, int rank, int dev, int blocking, uint64_t key);
ncclResult_t comm_join(ncclComm_t c, ncclComm_t also);

/* fakenccl_kernel.c: what a collective task runs, and the errors a kernel reports */
void task_error(ncclComm_t c, ncclResult_t r);
int illegal_address(ncclComm_t c, const fn_op_t *o, const char *which);
int wait_result(ncclComm_t c, int w);
int run_coll(ncclComm_t c, fn_op_t *o);

/* fakenccl_p2p.c: what a send/recv task runs */
int run_p2p(ncclComm_t c, fn_op_t **ops, int nops);

/* fakenccl_group.c: groups, background jobs and stream tasks */
void group_join_comm(ncclComm_t c, ncclResult_t *err);
ncclResult_t group_err_check(ncclResult_t r);
ncclResult_t group_end_internal(void);

/* fakenccl_coll.c: enqueueing (the entry points of fakenccl_coll.c, fakenccl_mem.c and
 * fakenccl.c sit on top and are called by no other file) */
ncclResult_t enqueue(fn_op_t tmpl, ncclRedOp_t op);
fn_op_t op_tmpl(fn_kind_t k, const char *name, const void *s, void *r, size_t count,
                ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t st);

#endif
