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
/* This file: communicators and their bootstrap (the shared segment, init, split,
 * finalize, destroy, abort). */
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

/* ================================================================ shared segment */

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void shm_layout(fn_shm_t *h, int n) {
  size_t off = align_up(sizeof(fn_shm_t), 64);
  h->nranks = (uint32_t)n;
  h->chunk = 1u << 20;
  h->ring = n <= 16 ? 256u << 10 : 64u << 10;
  h->off_ranks = off;
  off = align_up(off + n * sizeof(fn_rankinfo_t), 64);
  h->off_boot = off;
  off = align_up(off + n * sizeof(fn_boot_t), 64);
  h->off_steps = off;
  off = align_up(off + n * sizeof(fn_step_t), 4096);
  h->off_stage = off;
  off += (size_t)n * h->chunk;
  h->off_rings = off;
  off = align_up(off + (size_t)n * n * sizeof(fn_ring_t), 4096);
  h->off_ringdata = off;
  off += (size_t)n * n * h->ring;
  h->size = off;
}

static void shm_name_of(uint64_t key, char *out, size_t len) {
  snprintf(out, len, "/fakegpu-nccl-%016llx", (unsigned long long)key);
}

static void comm_unlink(ncclComm_t c) {
  pthread_mutex_lock(&c->lock);
  if (!c->unlinked && c->shm_name[0]) {
    shm_unlink(c->shm_name);
    c->unlinked = 1;
  }
  pthread_mutex_unlock(&c->lock);
}

/* ================================================================ comm lifetime */

void comm_ref(ncclComm_t c) { atomic_fetch_add(&c->refs, 1); }

void comm_unref(ncclComm_t c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  if (c->shm) {
    /* The name is normally gone once every rank joined; a failed or aborted init
     * leaves it to the last rank that detaches. */
    if (atomic_fetch_sub(&c->shm->nattached, 1) == 1) comm_unlink(c);
    munmap(c->shm, c->shm_size);
  }
  while (c->windows) {
    struct ncclWindow_vidmem *w = c->windows;
    c->windows = w->next;
    free(w);
  }
  free(c->userops);
  pthread_mutex_destroy(&c->lock);
  c->magic0 = c->magic1 = 0;
  free(c);
}

static int comm_ok(const struct ncclComm *c) {
  return c && c->magic0 == FN_COMM_MAGIC && c->magic1 == FN_COMM_MAGIC;
}

ncclResult_t comm_check(ncclComm_t c, const char *opname) {
  if (!c) {
    fn_warn("%s : comm argument is NULL", opname);
    return ncclInvalidArgument;
  }
  if (!comm_ok(c)) {
    fn_warn("Error: corrupted comm object detected");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t ptr_check(const void *p, const char *opname, const char *what) {
  if (!p) {
    fn_warn("%s : %s argument is NULL", opname, what);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* The state without consuming an owed InProgress report. */
ncclResult_t comm_state(ncclComm_t c) {
  int st = atomic_load(&c->async);
  if (st == ncclSuccess && atomic_load(&c->finalizing) && atomic_load(&c->outstanding) > 0)
    return ncclInProgress;
  if (st == ncclSuccess && atomic_load(&c->polls) > 0) return ncclInProgress;
  return (ncclResult_t)st;
}

/* ncclCommEnsureReady: a communicator whose last call has not reached ncclSuccess (or
 * that failed) cannot be used. */
ncclResult_t comm_ensure_ready(ncclComm_t c) {
  if (atomic_load(&c->abort_flag)) return ncclSuccess;
  ncclResult_t st = comm_state(c);
  if (st == ncclInProgress) {
    fn_warn("Attempt to use communicator before the previous operation returned ncclSuccess");
    return ncclInvalidArgument;
  }
  return st;
}

static ncclComm_t comm_new(int nranks, int rank, int dev, int blocking, uint64_t key) {
  ncclComm_t c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->magic0 = c->magic1 = FN_COMM_MAGIC;
  c->nranks = nranks;
  c->rank = rank;
  c->dev = dev;
  c->blocking = blocking;
  c->key = key;
  c->busid = dev;
  atomic_init(&c->async, ncclInProgress);
  atomic_init(&c->refs, 1);
  pthread_mutex_init(&c->lock, NULL);
  char bus[64];
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) == cudaSuccess) {
    /* NCCL's busIdToInt64: the hex digits of "dddd:bb:dd.f". */
    int64_t id = 0;
    for (const char *p = bus; *p; p++) {
      int v = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
              : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10 : -1;
      if (*p == ':' || *p == '.') continue;
      if (v < 0) break;
      id = id * 16 + v;
    }
    c->busid = id;
  }
  if (cudaDeviceGetAttribute(&c->cc_major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    c->cc_major = 9;
  comm_faults(c);
  return c;
}

/* ================================================================ waiting */

/* Is any peer in another process gone? (NCCL: "remote process exited".) */
int peer_died(ncclComm_t c) {
  int me = getpid();
  for (int j = 0; j < c->nranks; j++) {
    int pid = shm_rank(c->shm, j)->pid;
    if (pid > 0 && pid != me && kill(pid, 0) != 0 && errno == ESRCH) return 1;
  }
  return 0;
}

typedef struct {
  ncclComm_t also; /* another communicator whose abort also releases the wait */
} fn_waitctx_t;

/* Wait until every rank's counter at @first + j*@stride reaches @v. */
int wait_all_ge(ncclComm_t c, _Atomic uint64_t *first, size_t stride, uint64_t v,
                       int tmo_ms, ncclComm_t also) {
  unsigned spins = 0;
  double t0 = tmo_ms > 0 ? now_ms() : 0;
  for (int j = 0; j < c->nranks;) {
    _Atomic uint64_t *p = (_Atomic uint64_t *)((char *)first + (size_t)j * stride);
    if (atomic_load_explicit(p, memory_order_acquire) >= v) {
      j++;
      continue;
    }
    if (atomic_load(&c->abort_flag) || (also && atomic_load(&also->abort_flag))) return FW_ABORT;
    if ((spins & 1023) == 1023) {
      if (peer_died(c)) return FW_PEER;
      if (tmo_ms > 0 && now_ms() - t0 > tmo_ms) return FW_TIMEOUT;
    }
    backoff(&spins);
  }
  return FW_OK;
}

/* ================================================================ rendezvous */

/* Join the segment named after @c->key; wait for all ranks (the bootstrap). */
static ncclResult_t comm_join(ncclComm_t c, ncclComm_t also) {
  int tmo = c->blocking ? timeout_ms() : 0;
  double t0 = now_ms();
  unsigned spins = 0;
  if (c->fault_never_join) {
    /* This rank never reaches the bootstrap: its peers wait for it. */
    while (!atomic_load(&c->abort_flag) && !(also && atomic_load(&also->abort_flag))) {
      if (tmo > 0 && now_ms() - t0 > tmo) {
        fn_warn("Bootstrap : rank %d did not join within %d ms (FAKEGPU_NCCL_FAULT never_join)",
                c->rank, tmo);
        return ncclSystemError;
      }
      backoff(&spins);
    }
    return ncclSystemError;
  }
  fn_shm_t want;
  memset(&want, 0, sizeof want);
  shm_layout(&want, c->nranks);
  shm_name_of(c->key, c->shm_name, sizeof c->shm_name);
  int creator = 1;
  int fd = shm_open(c->shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 && errno == EEXIST) {
    creator = 0;
    fd = shm_open(c->shm_name, O_RDWR, 0600);
  }
  if (fd < 0) {
    fn_warn("Bootstrap : shm_open %s failed : %s", c->shm_name, strerror(errno));
    return ncclSystemError;
  }
  if (creator && ftruncate(fd, (off_t)want.size) != 0) {
    fn_warn("Bootstrap : ftruncate %s failed : %s", c->shm_name, strerror(errno));
    close(fd);
    shm_unlink(c->shm_name);
    return ncclSystemError;
  }
  if (!creator) {
    /* The creator may not have sized it yet. */
    struct stat st;
    while (fstat(fd, &st) == 0 && (size_t)st.st_size < sizeof(fn_shm_t)) backoff(&spins);
    if ((size_t)st.st_size != want.size) {
      close(fd);
      fn_warn("Bootstrap : rank %d: the ranks disagree on the communicator size (%d here)",
              c->rank, c->nranks);
      return ncclInvalidUsage;
    }
  }
  fn_shm_t *s = mmap(NULL, want.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (s == MAP_FAILED) {
    fn_warn("Bootstrap : mmap failed : %s", strerror(errno));
    return ncclSystemError;
  }
  if (creator) {
    uint32_t magic = FN_SHM_MAGIC;
    fn_shm_t *h = s;
    h->nranks = want.nranks;
    h->key = c->key;
    h->size = want.size;
    h->chunk = want.chunk;
    h->ring = want.ring;
    h->off_ranks = want.off_ranks;
    h->off_boot = want.off_boot;
    h->off_steps = want.off_steps;
    h->off_stage = want.off_stage;
    h->off_rings = want.off_rings;
    h->off_ringdata = want.off_ringdata;
    atomic_store_explicit(&h->magic, magic, memory_order_release);
  } else {
    while (atomic_load_explicit(&s->magic, memory_order_acquire) != FN_SHM_MAGIC) backoff(&spins);
  }
  pthread_mutex_lock(&c->lock);
  c->shm = s;
  c->shm_size = want.size;
  pthread_mutex_unlock(&c->lock);
  atomic_fetch_add(&s->nattached, 1);
  fn_rankinfo_t *me = shm_rank(s, c->rank);
  me->dev = c->dev;
  me->busid = c->busid;
  me->pid = getpid();
  int expect = 0;
  if (!atomic_compare_exchange_strong(&me->joined, &expect, 1)) {
    fn_warn("Bootstrap : rank %d of %d joined twice", c->rank, c->nranks);
    return ncclInvalidUsage;
  }
  atomic_fetch_add(&s->njoined, 1);
  spins = 0;
  while (atomic_load(&s->njoined) < c->nranks) {
    if (atomic_load(&c->abort_flag) || (also && atomic_load(&also->abort_flag)))
      return ncclSystemError;
    if (tmo > 0 && now_ms() - t0 > tmo) {
      fn_warn("Bootstrap : timed out after %d ms: %d of %d ranks joined "
              "(FAKEGPU_NCCL_TIMEOUT_MS)", tmo, atomic_load(&s->njoined), c->nranks);
      comm_unlink(c);
      return ncclSystemError;
    }
    backoff(&spins);
  }
  /* AllGather1 of initTransportsRank: the same GPU twice is an error on every rank. */
  for (int i = 0; i < c->nranks; i++) {
    if (i != c->rank && shm_rank(s, i)->busid == c->busid) {
      fn_warn("Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx", c->rank, i,
              (long)c->busid);
      if (atomic_fetch_add(&s->nseen, 1) + 1 == c->nranks) comm_unlink(c);
      return ncclInvalidUsage;
    }
  }
  /* Everybody has it mapped: the name is no longer needed. */
  if (atomic_fetch_add(&s->nseen, 1) + 1 == c->nranks) comm_unlink(c);
  return ncclSuccess;
}

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

/* ================================================================ bootstrap all-gather */

/* Host all-gather of @len (<= 64) bytes per rank over the segment; @all gets
 * nranks records. Used where NCCL uses bootstrapAllGather from the calling thread. */
ncclResult_t boot_allgather(ncclComm_t c, const void *mine, size_t len, void *all,
                                   ncclComm_t also) {
  fn_shm_t *s = c->shm;
  uint64_t g = ++c->boot_gen;
  int tmo = c->blocking ? timeout_ms() : 0;
  /* Every rank must have read generation g-1 before this rank's record changes. */
  int w = wait_all_ge(c, &shm_boot(s, 0)->ack, sizeof(fn_boot_t), g - 1, tmo, also);
  if (w == FW_OK) {
    fn_boot_t *b = shm_boot(s, c->rank);
    memcpy(b->data, mine, len);
    atomic_store_explicit(&b->gen, g, memory_order_release);
    w = wait_all_ge(c, &shm_boot(s, 0)->gen, sizeof(fn_boot_t), g, tmo, also);
  }
  if (w != FW_OK) {
    if (w == FW_TIMEOUT) fn_warn("Bootstrap : allgather timed out (FAKEGPU_NCCL_TIMEOUT_MS)");
    if (w == FW_PEER) fn_warn("Bootstrap : remote process exited");
    return w == FW_PEER ? ncclRemoteError : ncclSystemError;
  }
  for (int j = 0; j < c->nranks; j++) memcpy((char *)all + (size_t)j * len, shm_boot(s, j)->data, len);
  atomic_store_explicit(&shm_boot(s, c->rank)->ack, g, memory_order_release);
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
