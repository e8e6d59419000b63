/* Internals of the fake NCCL shared by its source files. */
#ifndef UNILINK_FAKENCCL_INT_H
#define UNILINK_FAKENCCL_INT_H

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

#endif
