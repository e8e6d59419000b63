/* Communicator objects of the fake NCCL: the shared segment, reference counts and
 * checks, waits, the rendezvous and the bootstrap all-gather, and the state queries
 * (ncclCommCount, ncclCommGetAsyncError, ...). Below the groups and the public init,
 * split and teardown (fakenccl.c), which build on it. */
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

void comm_unlink(ncclComm_t c) {
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

int comm_ok(const struct ncclComm *c) {
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

ncclComm_t comm_new(int nranks, int rank, int dev, int blocking, uint64_t key) {
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
ncclResult_t comm_join(ncclComm_t c, ncclComm_t also) {
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

/* ================================================================ state queries */

FN_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  ncclResult_t r = comm_check(comm, "ncclGetAsyncError");
  if (r != ncclSuccess) return r;
  if (ptr_check(asyncError, "ncclGetAsyncError", "asyncError") != ncclSuccess)
    return ncclInvalidArgument;
  int st = atomic_load(&comm->async);
  if (st == ncclSuccess && atomic_load(&comm->finalizing) && atomic_load(&comm->outstanding) > 0)
    st = ncclInProgress;
  if (st == ncclSuccess) {
    /* Background work finished: still report InProgress as many times as configured,
     * as a slow NCCL would. */
    int p = atomic_load(&comm->polls);
    while (p > 0 && !atomic_compare_exchange_weak(&comm->polls, &p, p - 1)) {
    }
    if (p > 0) st = ncclInProgress;
  }
  *asyncError = (ncclResult_t)st;
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  ncclResult_t r;
  if ((r = comm_check(comm, "CommCount")) != ncclSuccess) return r;
  if ((r = ptr_check(count, "CommCount", "count")) != ncclSuccess) return r;
  if ((r = comm_ensure_ready(comm)) != ncclSuccess) return r;
  *count = comm->nranks;
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  ncclResult_t r;
  if ((r = comm_check(comm, "CommCuDevice")) != ncclSuccess) return r;
  if ((r = ptr_check(device, "CommCuDevice", "devid")) != ncclSuccess) return r;
  if ((r = comm_ensure_ready(comm)) != ncclSuccess) return r;
  *device = comm->dev;
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  ncclResult_t r;
  if ((r = comm_check(comm, "CommUserRank")) != ncclSuccess) return r;
  if ((r = ptr_check(rank, "CommUserRank", "rank")) != ncclSuccess) return r;
  if ((r = comm_ensure_ready(comm)) != ncclSuccess) return r;
  *rank = comm->rank;
  return ncclSuccess;
}
