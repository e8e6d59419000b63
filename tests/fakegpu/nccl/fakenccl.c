/* A faithful fake of NCCL 2.28 (libnccl.so.2) for tests without a GPU.
 *
 * Communicators rendezvous by their unique id in a POSIX shared-memory segment (threads
 * and processes alike). Every collective and send/recv is enqueued with
 * cudaLaunchHostFunc on the caller's stream of the fake CUDA runtime, so it is stream
 * ordered and asynchronous exactly like an NCCL kernel, and it blocks its stream until
 * the peers arrive. The task copies its input out of fake device memory (fakemem_view)
 * into the segment, waits for the peers, computes the result with NCCL's arithmetic and
 * writes it back. Argument checking follows src/misc/argcheck.cc with
 * NCCL_CHECK_POINTERS=1; init, groups, finalize, destroy, abort and split follow
 * src/init.cc and src/group.cc (read for semantics only). README.md says what differs. */
/* This file: the public init, finalize, destroy, abort and split (on top of the
 * communicator objects of fakenccl_comm.c and the groups of fakenccl_group.c). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakemem.h"
#include "fakenccl_int.h"


/* ================================================================ init */

static void *init_job(void *arg) {
  ncclComm_t c = arg;
  ncclResult_t r = comm_join(c, NULL);
  c->init_done = 1;
  if (r == ncclSuccess && !c->blocking)
    atomic_store(&c->polls, env_int("FAKEGPU_NCCL_INIT_POLLS", 3));
  atomic_store(&c->async, r);
  comm_unref(c);
  return NULL;
}

FN_API ncclResult_t ncclGetUniqueId(ncclUniqueId *out) {
  if (ptr_check(out, "GetUniqueId", "out") != ncclSuccess) return ncclInvalidArgument;
  uint64_t w[3] = {FN_ID_MAGIC, 0, 0};
  if (getrandom(&w[1], sizeof w[1], 0) != sizeof w[1]) w[1] = (uint64_t)now_ms() * 2654435761u;
  w[1] ^= (uint64_t)getpid() << 32;
  static _Atomic uint64_t counter;
  w[2] = atomic_fetch_add(&counter, 1);
  w[1] ^= w[2] * 0x9e3779b97f4a7c15ull;
  memset(out, 0, sizeof *out);
  memcpy(out->internal, w, sizeof w);
  return ncclSuccess;
}

static ncclResult_t parse_config(const ncclConfig_t *cfg, int *blocking) {
  *blocking = 1;
  if (!cfg) return ncclSuccess;
  if (cfg->magic != 0xcafebeef) {
    fn_warn("ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  if (cfg->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (cfg->blocking != 0 && cfg->blocking != 1) {
      fn_warn("Invalid config blocking attribute value %d", cfg->blocking);
      return ncclInvalidArgument;
    }
    *blocking = cfg->blocking;
  }
  return ncclSuccess;
}

/* ncclCommInitRankDev + the group around it in ncclCommInitRankConfig. */
static ncclResult_t init_rank(ncclComm_t *newcomm, int nranks, const ncclUniqueId *id, int rank,
                              int dev, int blocking) {
  uint64_t w[3];
  memcpy(w, id->internal, sizeof w);
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    fn_warn("Invalid rank requested : %d/%d", rank, nranks);
    return ncclInvalidArgument;
  }
  if (w[0] != FN_ID_MAGIC) {
    fn_warn("Bootstrap : the unique id was not made by ncclGetUniqueId");
    return ncclInvalidArgument;
  }
  ncclComm_t c = comm_new(nranks, rank, dev, blocking, w[1]);
  if (!c) return ncclSystemError;
  *newcomm = c;
  fn_job_t *j = calloc(1, sizeof *j);
  if (!j) return ncclSystemError;
  j->comm = c;
  j->fn = init_job;
  j->arg = c;
  j->next = g_jobs;
  g_jobs = j;
  ncclResult_t err = ncclSuccess;
  group_join_comm(c, &err);
  return group_err_check(err);
}

FN_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *newcomm, int nranks, ncclUniqueId commId,
                                           int myrank, ncclConfig_t *config) {
  int dev, blocking;
  ncclResult_t r;
  CUDACHECK(cudaGetDevice(&dev));
  g_depth++;
  if ((r = ptr_check(newcomm, "CommInitRank", "newcomm")) == ncclSuccess &&
      (r = parse_config(config, &blocking)) == ncclSuccess)
    r = init_rank(newcomm, nranks, &commId, myrank, dev, blocking);
  if (r != ncclSuccess && newcomm) *newcomm = NULL;
  group_err_check(r);
  ncclResult_t g = group_end_internal();
  if (r != ncclSuccess) return r;
  if (*newcomm && !(*newcomm)->blocking) {
    /* ncclCommGetAsyncError: owed polls included. */
    return comm_state(*newcomm);
  }
  return g;
}

FN_API ncclResult_t ncclCommInitRank(ncclComm_t *newcomm, int nranks, ncclUniqueId commId, int myrank) {
  return ncclCommInitRankConfig(newcomm, nranks, commId, myrank, NULL);
}

FN_API ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                             ncclUniqueId *commIds, ncclConfig_t *config) {
  if (nId <= 0 || nId > nranks || !commIds) {
    fn_warn("improper usage of ncclCommInitRank: nId = %d, nranks=%d", nId, nranks);
    return ncclInvalidArgument;
  }
  return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

FN_API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  int old = 0, total = 0;
  ncclResult_t r = ncclSuccess;
  CUDACHECK(cudaGetDevice(&old));
  if (ptr_check(comms, "CommInitAll", "comms") != ncclSuccess) return ncclInvalidArgument;
  if (ndev < 0) {
    fn_warn("Invalid device count requested : %d", ndev);
    return ncclInvalidArgument;
  }
  CUDACHECK(cudaGetDeviceCount(&total));
  if (devlist) {
    for (int i = 0; i < ndev; i++) {
      if (devlist[i] < 0 || devlist[i] >= total) {
        fn_warn("Invalid device %d (totalnDev=%d)", devlist[i], total);
        return ncclInvalidArgument;
      }
      for (int k = 0; k < i; k++)
        if (devlist[k] == devlist[i]) return ncclInvalidUsage;
    }
  }
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  g_depth++;
  for (int i = 0; i < ndev; i++) {
    int dev = devlist ? devlist[i] : i;
    if (cudaSetDevice(dev) != cudaSuccess) {
      fn_warn("Cuda failure '%s'", cuda_str(cudaErrorInvalidDevice));
      group_err_check(ncclUnhandledCudaError);
      break;
    }
    init_rank(comms + i, ndev, &id, i, dev, 1);
  }
  r = group_end_internal();
  cudaSetDevice(old);
  return r;
}

/* ================================================================ teardown */

/* Wait until no task of @c is outstanding; 0, or FW_ABORT. */
static int wait_drained(ncclComm_t c) {
  unsigned spins = 0;
  while (atomic_load(&c->outstanding) > 0) {
    if (atomic_load(&c->abort_flag)) return FW_ABORT;
    backoff(&spins);
  }
  return FW_OK;
}

static void join_job(ncclComm_t c) {
  if (c->job_live) {
    pthread_join(c->job, NULL);
    c->job_live = 0;
  }
}

FN_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  ncclResult_t r;
  if (!comm) return ncclSuccess;
  if ((r = comm_check(comm, "ncclCommFinalize")) != ncclSuccess) return r;
  if ((r = comm_ensure_ready(comm)) != ncclSuccess) return r;
  if (comm->finalize_called) {
    fn_warn("ncclCommFinalize: comm %p rank %d already finalized", (void *)comm, comm->rank);
    if (!comm->blocking) atomic_store(&comm->async, ncclInvalidArgument);
    return ncclInvalidArgument;
  }
  comm->finalize_called = 1;
  atomic_store(&comm->finalizing, 1);
  if (!comm->blocking) return comm_state(comm);
  /* Blocking: flush every outstanding operation of this communicator. */
  return wait_drained(comm) == FW_OK ? ncclSuccess : ncclSystemError;
}

FN_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ncclResult_t r;
  if (!comm) return ncclSuccess;
  if (!comm_ok(comm) || comm->destroyed) {
    fn_warn("comm %p has already been destroyed", (void *)comm);
    return ncclInvalidArgument;
  }
  /* The init thread must be done, and a comm in error can only be aborted. */
  if ((r = comm_ensure_ready(comm)) != ncclSuccess) return r;
  join_job(comm);
  /* Without ncclCommFinalize the destroy flushes the outstanding work itself: it blocks
   * until the communicator's operations finish, forever if a peer never comes. */
  if (wait_drained(comm) != FW_OK) return ncclSystemError;
  comm->destroyed = 1;
  comm_unref(comm);
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (!comm_ok(comm) || comm->destroyed) {
    fn_warn("comm %p has already been destroyed", (void *)comm);
    return ncclInvalidArgument;
  }
  /* Everything waiting for peers polls this flag and leaves. */
  atomic_store(&comm->abort_flag, 1);
  join_job(comm);
  if (!comm->init_done) comm_unlink(comm);
  int st = atomic_load(&comm->async);
  if (st == ncclSuccess || st == ncclInProgress) atomic_store(&comm->async, ncclSystemError);
  /* Tasks running now leave within a backoff; queued ones see the flag when their
   * stream reaches them (they hold a reference, so the memory stays valid). */
  double t0 = now_ms();
  unsigned spins = 0;
  while (atomic_load(&comm->running) > 0 && now_ms() - t0 < 2000) backoff(&spins);
  comm->destroyed = 1;
  comm_unref(comm);
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (!comm) return ncclSuccess;
  if (revokeFlags != NCCL_REVOKE_DEFAULT) return ncclInvalidArgument;
  atomic_store(&comm->abort_flag, 1);
  return ncclSuccess;
}

/* ================================================================ split */

typedef struct {
  ncclComm_t parent;
  int color, key, blocking;
  ncclComm_t *newcomm;
  int split_no;
} fn_split_t;

typedef struct {
  int color, key, dev, pad;
} fn_split_rec_t;

static ncclResult_t do_split(fn_split_t *sp) {
  ncclComm_t p = sp->parent;
  fn_split_rec_t mine = {sp->color, sp->key, p->dev, 0};
  fn_split_rec_t *all = calloc((size_t)p->nranks, sizeof *all);
  if (!all) return ncclSystemError;
  ncclResult_t r = boot_allgather(p, &mine, sizeof mine, all, NULL);
  if (r != ncclSuccess || sp->color == NCCL_SPLIT_NOCOLOR) {
    free(all);
    return r;
  }
  /* New rank: order by (key, parent rank) among the same color. */
  int n = 0, me = 0;
  for (int j = 0; j < p->nranks; j++) {
    if (all[j].color != sp->color) continue;
    n++;
    if (all[j].key < sp->key || (all[j].key == sp->key && j < p->rank)) me++;
  }
  free(all);
  uint64_t key = p->key ^ (0x9e3779b97f4a7c15ull * (uint64_t)(sp->split_no + 1)) ^
                 ((uint64_t)(uint32_t)sp->color << 17) ^ 0x5bd1e995ull;
  ncclComm_t c = comm_new(n, me, p->dev, sp->blocking, key);
  if (!c) return ncclSystemError;
  r = comm_join(c, p);
  c->init_done = 1;
  atomic_store(&c->async, r);
  if (r != ncclSuccess) {
    c->destroyed = 1;
    atomic_store(&c->abort_flag, 1);
    comm_unref(c);
    return r;
  }
  *sp->newcomm = c; /* NCCL writes *newcomm when the split completes */
  return ncclSuccess;
}

static void *split_job(void *arg) {
  fn_split_t *sp = arg;
  ncclComm_t p = sp->parent;
  ncclResult_t r = do_split(sp);
  free(sp);
  if (r == ncclSuccess && !p->blocking) atomic_store(&p->polls, env_int("FAKEGPU_NCCL_INIT_POLLS", 3));
  atomic_store(&p->async, r);
  comm_unref(p);
  return NULL;
}

FN_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                  ncclConfig_t *config) {
  ncclResult_t r;
  if ((r = comm_check(comm, "ncclCommSplit")) != ncclSuccess) return r;
  if ((r = ptr_check(newcomm, "ncclCommSplit", "newcomm")) != ncclSuccess) return r;
  if ((r = comm_ensure_ready(comm)) != ncclSuccess) return r;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    fn_warn("ncclCommSplit : invalid color %d", color);
    return ncclInvalidArgument;
  }
  int blocking = comm->blocking;
  if (config && (r = parse_config(config, &blocking)) != ncclSuccess) return r;
  *newcomm = NULL;
  fn_split_t *sp = calloc(1, sizeof *sp);
  if (!sp) return ncclSystemError;
  sp->parent = comm;
  sp->color = color;
  sp->key = key;
  sp->blocking = blocking;
  sp->newcomm = newcomm;
  sp->split_no = ++comm->split_count;
  join_job(comm); /* a finished init thread */
  atomic_store(&comm->async, ncclInProgress);
  fn_job_t *j = calloc(1, sizeof *j);
  if (!j) return ncclSystemError;
  j->comm = comm;
  j->fn = split_job;
  j->arg = sp;
  j->next = g_jobs;
  g_jobs = j;
  g_depth++;
  ncclResult_t err = ncclSuccess;
  group_join_comm(comm, &err);
  group_err_check(err);
  r = group_end_internal();
  if (r != ncclSuccess && r != ncclInProgress) return r;
  return comm->blocking ? (ncclResult_t)atomic_load(&comm->async) : comm_state(comm);
}
