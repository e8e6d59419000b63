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
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fakemem.h"
#include "fakenccl_int.h"

#define FN_API __attribute__((visibility("default")))

/* ================================================================ errors, env */

static pthread_mutex_t g_err_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_last_error[1024];

/* NCCL's WARN: the text becomes ncclGetLastError() (one string per process). */
static void fn_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fn_warn(const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&g_err_lock);
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
  va_end(ap);
  const char *dbg = getenv("NCCL_DEBUG");
  if (getenv("FAKEGPU_NCCL_DEBUG") || (dbg && strcasecmp(dbg, "VERSION") && strcasecmp(dbg, "")))
    fprintf(stderr, "fakenccl %d WARN %s\n", (int)getpid(), g_last_error);
  pthread_mutex_unlock(&g_err_lock);
}

static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end;
  long x = strtol(v, &end, 10);
  return *end ? def : (int)x;
}

static int timeout_ms(void) { return env_int("FAKEGPU_NCCL_TIMEOUT_MS", 30000); }

/* FAKEGPU_NCCL_FAULT=kind:rank[:nth][,...] */
enum { F_ASYNC = 1, F_NEVER_JOIN, F_HANG };
typedef struct {
  int kind, rank, nth;
} fn_fault_t;
static fn_fault_t g_faults[8];
static int g_nfaults;
static pthread_once_t g_fault_once = PTHREAD_ONCE_INIT;

static void parse_faults(void) {
  const char *v = getenv("FAKEGPU_NCCL_FAULT");
  if (!v) return;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", v);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t && g_nfaults < 8; t = strtok_r(NULL, ",", &save)) {
    fn_fault_t f = {0, -1, 0};
    char kind[32] = "";
    int n = sscanf(t, "%31[a-z_]:%d:%d", kind, &f.rank, &f.nth);
    if (n >= 2 && !strcmp(kind, "never_join")) f.kind = F_NEVER_JOIN;
    else if (n == 3 && !strcmp(kind, "async_error")) f.kind = F_ASYNC;
    else if (n == 3 && !strcmp(kind, "hang")) f.kind = F_HANG;
    if (f.kind) g_faults[g_nfaults++] = f;
    else fprintf(stderr, "fakenccl: ignoring FAKEGPU_NCCL_FAULT entry '%s'\n", t);
  }
}

static void comm_faults(ncclComm_t c) {
  pthread_once(&g_fault_once, parse_faults);
  for (int i = 0; i < g_nfaults; i++) {
    if (g_faults[i].rank != c->rank) continue;
    if (g_faults[i].kind == F_NEVER_JOIN) c->fault_never_join = 1;
    if (g_faults[i].kind == F_ASYNC) c->fault_async_op = g_faults[i].nth;
    if (g_faults[i].kind == F_HANG) c->fault_hang_op = g_faults[i].nth;
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Short yields first (a peer thread is usually about to arrive), then 50 us sleeps so
 * waiting ranks do not starve the ones they wait for on a small machine. */
static void backoff(unsigned *spins) {
  if (++*spins < 64) {
    sched_yield();
  } else {
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
  }
}

static const char *cuda_str(cudaError_t e) { return cudaGetErrorString(e); }

#define CUDACHECK(call)                                                                          \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      fn_warn("Cuda failure '%s'", cuda_str(e_));                                                \
      return ncclUnhandledCudaError;                                                             \
    }                                                                                            \
  } while (0)

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

static void comm_ref(ncclComm_t c) { atomic_fetch_add(&c->refs, 1); }

static void comm_unref(ncclComm_t c) {
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

static ncclResult_t comm_check(ncclComm_t c, const char *opname) {
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

static ncclResult_t ptr_check(const void *p, const char *opname, const char *what) {
  if (!p) {
    fn_warn("%s : %s argument is NULL", opname, what);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* The state without consuming an owed InProgress report. */
static ncclResult_t comm_state(ncclComm_t c) {
  int st = atomic_load(&c->async);
  if (st == ncclSuccess && atomic_load(&c->finalizing) && atomic_load(&c->outstanding) > 0)
    return ncclInProgress;
  if (st == ncclSuccess && atomic_load(&c->polls) > 0) return ncclInProgress;
  return (ncclResult_t)st;
}

/* ncclCommEnsureReady: a communicator whose last call has not reached ncclSuccess (or
 * that failed) cannot be used. */
static ncclResult_t comm_ensure_ready(ncclComm_t c) {
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

enum { FW_OK = 0, FW_ABORT, FW_TIMEOUT, FW_PEER };

/* Is any peer in another process gone? (NCCL: "remote process exited".) */
static int peer_died(ncclComm_t c) {
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
static int wait_all_ge(ncclComm_t c, _Atomic uint64_t *first, size_t stride, uint64_t v,
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

/* ================================================================ groups, jobs */

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

static __thread int g_depth;
static __thread ncclResult_t g_group_err;
static __thread int g_group_blocking = -1;
static __thread fn_op_t *g_ops, **g_ops_tail; /* NULL tail: the list is empty */
static __thread fn_job_t *g_jobs;

static void group_join_comm(ncclComm_t c, ncclResult_t *err) {
  if (g_group_blocking == -1) g_group_blocking = c->blocking;
  else if (g_group_blocking != c->blocking && *err == ncclSuccess) {
    fn_warn("Blocking and nonblocking communicators are not allowed in the same group.");
    *err = ncclInvalidArgument;
  }
}

static ncclResult_t group_err_check(ncclResult_t r) {
  if (g_depth > 0 && r != ncclSuccess && r != ncclInProgress && g_group_err == ncclSuccess)
    g_group_err = r;
  return r;
}

static void free_ops(fn_op_t *o) {
  while (o) {
    fn_op_t *n = o->next;
    free(o);
    o = n;
  }
}

static ncclResult_t launch_ops(void);

/* Runs a queued job on its own thread (NCCL's ncclAsyncLaunch). */
static void start_job(fn_job_t *j) {
  pthread_t th;
  comm_ref(j->comm);
  if (pthread_create(&th, NULL, j->fn, j->arg) != 0) {
    fn_warn("pthread_create failed");
    atomic_store(&j->comm->async, ncclSystemError);
    comm_unref(j->comm);
    return;
  }
  j->comm->job = th;
  j->comm->job_live = 1;
  j->started = 1;
}

static ncclResult_t group_end_internal(void) {
  if (g_depth == 0) {
    fn_warn("ncclGroupEnd: not in a group call.");
    return ncclInvalidUsage;
  }
  if (--g_depth > 0) return ncclSuccess;
  ncclResult_t ret = g_group_err;
  fn_op_t *ops = g_ops;
  fn_job_t *jobs = g_jobs;
  int blocking = g_group_blocking;
  g_ops = NULL;
  g_ops_tail = NULL;
  g_jobs = NULL;
  g_group_err = ncclSuccess;
  g_group_blocking = -1;
  if (ret != ncclSuccess) {
    /* groupCleanup: nothing of the group runs; init jobs leave their comm failed. */
    for (fn_job_t *j = jobs; j;) {
      fn_job_t *n = j->next;
      atomic_store(&j->comm->async, ret);
      free(j->arg == j->comm ? NULL : j->arg);
      free(j);
      j = n;
    }
    free_ops(ops);
    return ret;
  }
  for (fn_job_t *j = jobs; j; j = j->next) start_job(j);
  if (blocking == 1) {
    for (fn_job_t *j = jobs; j; j = j->next) {
      if (!j->started) continue;
      pthread_join(j->comm->job, NULL);
      j->comm->job_live = 0;
      ncclResult_t st = (ncclResult_t)atomic_load(&j->comm->async);
      if (st != ncclSuccess && ret == ncclSuccess) ret = st;
    }
  } else if (jobs) {
    ret = ncclInProgress;
  }
  while (jobs) {
    fn_job_t *n = jobs->next;
    free(jobs);
    jobs = n;
  }
  g_ops = ops; /* launch_ops consumes the list */
  ncclResult_t r = launch_ops();
  if (r != ncclSuccess) return r;
  if (blocking == 0 && ops) ret = ncclInProgress;
  return ret;
}

FN_API ncclResult_t ncclGroupStart(void) {
  g_depth++;
  return ncclSuccess;
}

FN_API ncclResult_t ncclGroupEnd(void) { return group_end_internal(); }

FN_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  if (simInfo) simInfo->estimatedTime = 0.0f;
  return group_end_internal();
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

FN_API ncclResult_t ncclGetVersion(int *version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
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

FN_API const char *ncclGetErrorString(ncclResult_t code) {
  switch (code) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}

FN_API const char *ncclGetLastError(ncclComm_t comm) {
  /* NCCL: one string per process, comm unused. A per-thread copy taken under the lock,
   * so a reader never sees a message half rewritten by another thread. */
  static __thread char copy[sizeof g_last_error];
  (void)comm;
  pthread_mutex_lock(&g_err_lock);
  memcpy(copy, g_last_error, sizeof copy);
  pthread_mutex_unlock(&g_err_lock);
  return copy;
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
static ncclResult_t boot_allgather(ncclComm_t c, const void *mine, size_t len, void *all,
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

/* ================================================================ argument checks */

/* CudaPtrCheck: cudaPointerGetAttributes must know the pointer and, for device memory,
 * place it on the communicator's device. */
static ncclResult_t cuda_ptr_check(const void *p, ncclComm_t c, const char *what, const char *opname) {
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof attr);
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess || attr.devicePointer == NULL) {
    (void)cudaGetLastError();
    fn_warn("%s : %s %p is not a valid pointer", opname, what, p);
    return ncclInvalidArgument;
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != c->dev) {
    fn_warn("%s : %s allocated on device %d mismatchs with NCCL device %d", opname, what,
            attr.device, c->dev);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static int check_pointers(void) { return env_int("FAKEGPU_NCCL_CHECK_POINTERS", 1) != 0; }

static int is_reduction(fn_kind_t k) {
  return k == K_ALLREDUCE || k == K_REDUCE || k == K_REDUCESCATTER;
}

/* ncclRedOp_t -> the device op (hostToDevRedOp). */
static ncclResult_t dev_redop(ncclComm_t c, ncclRedOp_t op, int dtype, fn_op_t *o) {
  o->op.scalar = 0;
  o->scalar_ptr = NULL;
  switch ((int)op) {
  case ncclSum: o->op.op = FN_OP_SUM; return ncclSuccess;
  case ncclProd: o->op.op = FN_OP_PROD; return ncclSuccess;
  case ncclMin: o->op.op = FN_OP_MIN; return ncclSuccess;
  case ncclMax: o->op.op = FN_OP_MAX; return ncclSuccess;
  case ncclAvg:
    if (dtype <= ncclUint64) {
      o->op.op = FN_OP_SUMPOSTDIV;
      o->op.scalar = (uint64_t)c->nranks;
    } else {
      o->op.op = FN_OP_PREMULSUM;
      o->op.scalar = fn_avg_scalar(dtype, c->nranks);
    }
    return ncclSuccess;
  default: break;
  }
  int ix = (int)op - (int)ncclNumOps;
  if (ix < 0 || ix >= c->nuserops || !c->userops[ix].used) return ncclInvalidArgument;
  o->op.op = FN_OP_PREMULSUM;
  if (c->userops[ix].is_ptr) o->scalar_ptr = (const void *)(uintptr_t)c->userops[ix].scalar;
  else o->op.scalar = c->userops[ix].scalar;
  return ncclSuccess;
}

/* ArgsCheck with checkPointers = 1. */
static ncclResult_t args_check(fn_op_t *o, ncclRedOp_t op) {
  ncclComm_t c = o->comm;
  int p2p = o->kind == K_SEND || o->kind == K_RECV;
  if (!p2p && (o->root < 0 || o->root >= c->nranks)) {
    fn_warn("%s : invalid root %d (root should be in the 0..%d range)", o->name, o->root, c->nranks);
    return ncclInvalidArgument;
  }
  if (p2p && (o->root < 0 || o->root >= c->nranks)) {
    fn_warn("%s : invalid peer %d (peer should be in the 0..%d range)", o->name, o->root,
            c->nranks);
    return ncclInvalidArgument;
  }
  if (o->dtype < 0 || o->dtype >= ncclNumTypes) {
    fn_warn("%s : invalid type %d", o->name, o->dtype);
    return ncclInvalidArgument;
  }
  if ((int)op < 0) {
    fn_warn("%s : invalid reduction operation %d", o->name, (int)op);
    return ncclInvalidArgument;
  }
  if (dev_redop(c, op, o->dtype, o) != ncclSuccess) {
    fn_warn("%s : reduction operation %d unknown to this communicator", o->name, (int)op);
    return ncclInvalidArgument;
  }
  if (check_pointers()) {
    ncclResult_t r = ncclSuccess;
    if (p2p) {
      if (o->count > 0) r = cuda_ptr_check(o->kind == K_SEND ? o->sbuf : o->rbuf, c, "buff", o->name);
    } else {
      if (o->kind != K_BROADCAST || c->rank == o->root)
        r = cuda_ptr_check(o->sbuf, c, "sendbuff", o->name);
      if (r == ncclSuccess && (o->kind != K_REDUCE || c->rank == o->root))
        r = cuda_ptr_check(o->rbuf, c, "recvbuff", o->name);
    }
    if (r != ncclSuccess) return r;
  }
  if ((o->dtype == ncclFloat8e4m3 || o->dtype == ncclFloat8e5m2) && is_reduction(o->kind) &&
      o->count > 0 && c->cc_major < 9) {
    fn_warn("FP8 reduction support begins with sm90 capable devices.");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t one_rank(fn_op_t *o);

/* ncclEnqueueCheck: check, then append to the thread's group (an implicit one when the
 * caller is not in a group). */
static ncclResult_t enqueue(fn_op_t tmpl, ncclRedOp_t op) {
  ncclComm_t c = tmpl.comm;
  ncclResult_t ret = comm_check(c, tmpl.name);
  if (ret != ncclSuccess) return group_err_check(ret);
  g_depth++;
  int old = -1;
  fn_op_t *o = NULL;
  if ((ret = comm_ensure_ready(c)) != ncclSuccess) goto fail;
  if (atomic_load(&c->abort_flag)) {
    fn_warn("%s : communicator was aborted", tmpl.name);
    ret = ncclInvalidUsage;
    goto fail;
  }
  if (cudaGetDevice(&old) != cudaSuccess || cudaSetDevice(c->dev) != cudaSuccess) {
    fn_warn("Cuda failure '%s'", cuda_str(cudaErrorInvalidDevice));
    ret = ncclUnhandledCudaError;
    goto fail;
  }
  if ((ret = args_check(&tmpl, op)) != ncclSuccess) goto fail;
  group_join_comm(c, &ret);
  if (ret != ncclSuccess) goto fail;
  if (tmpl.kind != K_SEND && tmpl.kind != K_RECV) {
    if (tmpl.count == 0) goto out; /* empty collectives are discarded */
    if (c->nranks == 1) {
      ret = one_rank(&tmpl);
      if (ret != ncclSuccess) goto fail;
      goto out;
    }
  }
  o = malloc(sizeof *o);
  if (!o) {
    ret = ncclSystemError;
    goto fail;
  }
  *o = tmpl;
  o->next = NULL;
  if (!g_ops_tail) g_ops_tail = &g_ops;
  *g_ops_tail = o;
  g_ops_tail = &o->next;
out:
  if (old >= 0) cudaSetDevice(old);
  group_err_check(ret);
  ret = group_end_internal();
  if (ret == ncclSuccess && !c->blocking) ret = comm_state(c);
  return ret;
fail:
  if (!c->blocking) atomic_store(&c->async, ret);
  if (old >= 0) cudaSetDevice(old);
  group_err_check(ret);
  group_end_internal();
  return ret;
}

/* ================================================================ device memory access */

/* The runtime's view of [p, p+n): fake device memory through its private alias; other
 * memory the device can reach (pinned, managed, registered host memory) directly.
 * NULL: an illegal address, as a kernel would fault. Called from stream tasks, so it
 * uses no CUDA API. */
static void *dev_view(const void *p, size_t n) {
  if (n == 0) return (void *)p;
  void *v = fakemem_view(p, n, NULL);
  return v;
}

/* Whether a buffer the arg check accepted is host memory the device can reach. */
static int host_reachable(const void *p) {
  if (!p || fakemem_find(p, 1, NULL) == 0) return 0;
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof attr);
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return attr.type == cudaMemoryTypeHost || attr.type == cudaMemoryTypeManaged;
}

/* ================================================================ one rank */

typedef struct {
  void *dst;
  const void *src;
  size_t n;
  int dtype, dst_host, src_host;
  fn_redop_t op;
  const void *scalar_ptr;
} fn_onerank_t;

static void CUDART_CB onerank_fn(void *arg) {
  fn_onerank_t *t = arg;
  size_t es = fn_type_size(t->dtype);
  void *d = t->dst_host ? t->dst : dev_view(t->dst, t->n * es);
  const void *s = t->src_host ? t->src : dev_view(t->src, t->n * es);
  fn_redop_t op = t->op;
  if (t->scalar_ptr) {
    const void *sv = dev_view(t->scalar_ptr, es);
    if (!sv) sv = NULL;
    if (sv) memcpy(&op.scalar, sv, es);
    else d = NULL;
  }
  if (d && s) {
    const void *srcs[1] = {s};
    fn_reduce(t->dtype, op, srcs, 1, d, t->n);
  } else {
    fprintf(stderr, "fakenccl: one-rank PreMulSum kernel: illegal address (host memory?)\n");
  }
  free(t);
}

/* ncclLaunchOneRank: a copy, or a PreMulSum kernel for avg of floats and user ops. */
static ncclResult_t one_rank(fn_op_t *o) {
  size_t es = fn_type_size(o->dtype);
  size_t n = o->count;
  if (o->op.op != FN_OP_PREMULSUM) {
    if (o->rbuf != o->sbuf)
      CUDACHECK(cudaMemcpyAsync(o->rbuf, o->sbuf, n * es, cudaMemcpyDefault, o->stream));
    return ncclSuccess;
  }
  fn_onerank_t *t = calloc(1, sizeof *t);
  if (!t) return ncclSystemError;
  t->dst = o->rbuf;
  t->src = o->sbuf;
  t->n = n;
  t->dtype = o->dtype;
  t->op = o->op;
  t->scalar_ptr = o->scalar_ptr;
  t->dst_host = host_reachable(o->rbuf);
  t->src_host = host_reachable(o->sbuf);
  cudaError_t e = cudaLaunchHostFunc(o->stream, onerank_fn, t);
  if (e != cudaSuccess) {
    free(t);
    fn_warn("Cuda failure '%s'", cuda_str(e));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* ================================================================ stream tasks */

static void task_error(ncclComm_t c, ncclResult_t r) {
  int expect = ncclSuccess;
  atomic_compare_exchange_strong(&c->async, &expect, r);
}

static int illegal_address(ncclComm_t c, const fn_op_t *o, const char *which) {
  char msg[256];
  snprintf(msg, sizeof msg,
           "Cuda failure 'an illegal memory access was encountered' (%s rank %d: %s is not "
           "memory of device %d)", o->name, c->rank, which, c->dev);
  fn_warn("%s", msg);
  fprintf(stderr, "fakenccl: %s\n", msg); /* a kernel fault is loud on a real GPU too */
  task_error(c, ncclUnhandledCudaError);
  return -1;
}

static int wait_result(ncclComm_t c, int w) {
  if (w == FW_OK) return 0;
  if (w == FW_PEER) {
    fn_warn("NCCL : remote process exited (rank %d)", c->rank);
    task_error(c, ncclRemoteError);
  }
  return -1;
}

/* Sizes in elements a rank contributes/receives per peer, and the bytes of its buffers. */
static int multi_segment(fn_kind_t k) {
  return k == K_REDUCESCATTER || k == K_ALLTOALL || k == K_SCATTER;
}

/* One collective over the segment, in steps of at most one staging chunk per rank. */
static int run_coll(ncclComm_t c, fn_op_t *o) {
  fn_shm_t *s = c->shm;
  int n = c->nranks, me = c->rank, root = o->root;
  size_t es = fn_type_size(o->dtype), count = o->count;
  size_t sbytes = multi_segment(o->kind) ? n * count * es : count * es;
  size_t rbytes = (o->kind == K_ALLGATHER || o->kind == K_ALLTOALL || o->kind == K_GATHER)
                      ? n * count * es : count * es;
  int need_s = !((o->kind == K_BROADCAST || o->kind == K_SCATTER) && me != root);
  int need_r = !((o->kind == K_REDUCE || o->kind == K_GATHER) && me != root);
  char *sv = NULL, *rv = NULL;
  if (need_s && !(sv = o->s_host ? (char *)o->sbuf : dev_view(o->sbuf, sbytes)))
    return illegal_address(c, o, "sendbuff");
  if (need_r && !(rv = o->r_host ? (char *)o->rbuf : dev_view(o->rbuf, rbytes)))
    return illegal_address(c, o, "recvbuff");
  fn_redop_t op = o->op;
  if (o->scalar_ptr) {
    const void *p = dev_view(o->scalar_ptr, es);
    if (!p) return illegal_address(c, o, "the PreMulSum scalar");
    memcpy(&op.scalar, p, es);
  }
  size_t per = multi_segment(o->kind) ? s->chunk / (n * es) : s->chunk / es;
  const void *srcs[1024];
  const void **sp = n <= 1024 ? srcs : malloc(n * sizeof *sp);
  if (!sp) return -1;
  int rc = 0;
  for (size_t e0 = 0; e0 < count && rc == 0; e0 += per) {
    size_t m = count - e0 < per ? count - e0 : per, mb = m * es;
    uint64_t step = ++c->step;
    /* 1. peers have read my slot of the previous step */
    rc = wait_result(c, wait_all_ge(c, &shm_step(s, 0)->done, sizeof(fn_step_t), step - 1, 0, NULL));
    if (rc) break;
    /* 2. stage my contribution */
    char *slot = shm_stage(s, me);
    if (need_s) {
      if (multi_segment(o->kind)) {
        for (int i = 0; i < n; i++) memcpy(slot + i * mb, sv + (i * count + e0) * es, mb);
      } else {
        memcpy(slot, sv + e0 * es, mb);
      }
    }
    atomic_store_explicit(&shm_step(s, me)->arrive, step, memory_order_release);
    /* 3. everybody has staged */
    rc = wait_result(c, wait_all_ge(c, &shm_step(s, 0)->arrive, sizeof(fn_step_t), step, 0, NULL));
    if (rc) break;
    /* 4. my result */
    if (need_r) {
      switch (o->kind) {
      case K_ALLREDUCE: case K_REDUCE:
        for (int j = 0; j < n; j++) sp[j] = shm_stage(s, j);
        fn_reduce(o->dtype, op, sp, n, rv + e0 * es, m);
        break;
      case K_REDUCESCATTER:
        for (int j = 0; j < n; j++) sp[j] = shm_stage(s, j) + me * mb;
        fn_reduce(o->dtype, op, sp, n, rv + e0 * es, m);
        break;
      case K_BROADCAST: memcpy(rv + e0 * es, shm_stage(s, root), mb); break;
      case K_ALLGATHER: case K_GATHER:
        for (int j = 0; j < n; j++) memcpy(rv + (j * count + e0) * es, shm_stage(s, j), mb);
        break;
      case K_ALLTOALL:
        for (int j = 0; j < n; j++) memcpy(rv + (j * count + e0) * es, shm_stage(s, j) + me * mb, mb);
        break;
      case K_SCATTER: memcpy(rv + e0 * es, shm_stage(s, root) + me * mb, mb); break;
      default: break;
      }
    }
    atomic_store_explicit(&shm_step(s, me)->done, step, memory_order_release);
  }
  if (sp != srcs) free(sp);
  return rc;
}

static void ring_copy_in(char *ring, size_t R, uint64_t pos, const void *src, size_t len) {
  size_t off = pos % R, first = len < R - off ? len : R - off;
  memcpy(ring + off, src, first);
  if (len > first) memcpy(ring, (const char *)src + first, len - first);
}
static void ring_copy_out(const char *ring, size_t R, uint64_t pos, void *dst, size_t len) {
  size_t off = pos % R, first = len < R - off ? len : R - off;
  memcpy(dst, ring + off, first);
  if (len > first) memcpy((char *)dst + first, ring, len - first);
}

/* All sends and receives of one group together: each peer's messages in order, all
 * peers at once (a ring pattern would deadlock one at a time). */
static int run_p2p(ncclComm_t c, fn_op_t **ops, int nops) {
  fn_shm_t *s = c->shm;
  size_t R = s->ring;
  char **views = calloc((size_t)nops, sizeof *views);
  if (!views) return -1;
  for (int i = 0; i < nops; i++) {
    fn_op_t *o = ops[i];
    size_t bytes = o->count * fn_type_size(o->dtype);
    const void *b = o->kind == K_SEND ? o->sbuf : o->rbuf;
    int host = o->kind == K_SEND ? o->s_host : o->r_host;
    views[i] = host ? (char *)b : dev_view(b, bytes);
    if (bytes && !views[i]) {
      free(views);
      return illegal_address(c, o, "buff");
    }
  }
  unsigned spins = 0;
  int rc = 0;
  for (;;) {
    int pending = 0, progressed = 0;
    for (int i = 0; i < nops && rc == 0; i++) {
      fn_op_t *o = ops[i];
      if (o->finished) continue;
      pending++;
      int first = 1;
      for (int k = 0; k < i; k++)
        if (!ops[k]->finished && ops[k]->kind == o->kind && ops[k]->root == o->root) first = 0;
      if (!first) continue;
      uint64_t bytes = o->count * fn_type_size(o->dtype);
      int src = o->kind == K_SEND ? c->rank : o->root, dst = o->kind == K_SEND ? o->root : c->rank;
      fn_ring_t *r = shm_ring(s, src, dst);
      char *data = shm_ringdata(s, src, dst);
      if (o->kind == K_SEND) {
        uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
        uint64_t space = R - (head - atomic_load_explicit(&r->tail, memory_order_acquire));
        if (!o->hdr_done) {
          if (space < 8) continue;
          ring_copy_in(data, R, head, &bytes, 8);
          head += 8;
          space -= 8;
          o->hdr_done = 1;
          progressed = 1;
        }
        uint64_t k = bytes - o->done < space ? bytes - o->done : space;
        if (k) {
          ring_copy_in(data, R, head, views[i] + o->done, k);
          head += k;
          o->done += k;
          progressed = 1;
        }
        atomic_store_explicit(&r->head, head, memory_order_release);
      } else {
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        uint64_t avail = atomic_load_explicit(&r->head, memory_order_acquire) - tail;
        if (!o->hdr_done) {
          if (avail < 8) continue;
          uint64_t len;
          ring_copy_out(data, R, tail, &len, 8);
          if (len != bytes) {
            fn_warn("%s : rank %d receives %llu bytes from rank %d, which sent %llu", o->name,
                    c->rank, (unsigned long long)bytes, o->root, (unsigned long long)len);
            task_error(c, ncclInvalidUsage);
            rc = -1;
            break;
          }
          tail += 8;
          avail -= 8;
          o->hdr_done = 1;
          progressed = 1;
        }
        uint64_t k = bytes - o->done < avail ? bytes - o->done : avail;
        if (k) {
          ring_copy_out(data, R, tail, views[i] + o->done, k);
          tail += k;
          o->done += k;
          progressed = 1;
        }
        atomic_store_explicit(&r->tail, tail, memory_order_release);
      }
      if (o->hdr_done && o->done == bytes) o->finished = 1;
    }
    if (rc || pending == 0) break;
    if (progressed) {
      spins = 0;
      continue;
    }
    if (atomic_load(&c->abort_flag)) {
      rc = -1;
      break;
    }
    if ((spins & 1023) == 1023 && peer_died(c)) {
      rc = wait_result(c, FW_PEER);
      break;
    }
    backoff(&spins);
  }
  free(views);
  return rc;
}

static void CUDART_CB task_fn(void *arg) {
  fn_task_t *t = arg;
  ncclComm_t c = t->comm;
  atomic_fetch_add(&c->running, 1);
  unsigned spins = 0;
  int rc = 0;
  /* NCCL serializes a communicator's kernels across streams. */
  while (atomic_load_explicit(&c->exec_seq, memory_order_acquire) != t->seq) {
    if (atomic_load(&c->abort_flag)) {
      rc = -1;
      break;
    }
    backoff(&spins);
  }
  int turn = rc == 0;
  /* A failed communicator runs nothing more (owed InProgress reports are not errors). */
  int st = atomic_load(&c->async);
  if (atomic_load(&c->abort_flag) || (st != ncclSuccess && st != ncclInProgress)) rc = -1;
  fn_op_t *p2p[256];
  int np = 0;
  for (fn_op_t *o = t->ops; o && rc == 0; o = o->next) {
    if (o->fault == F_HANG) {
      /* FAKEGPU_NCCL_FAULT hang: this kernel never finishes until ncclCommAbort. */
      while (!atomic_load(&c->abort_flag)) backoff(&spins);
      rc = -1;
      break;
    }
    if (o->fault == F_ASYNC) {
      fn_warn("NCCL : rank %d: injected remote error at operation %s (FAKEGPU_NCCL_FAULT)",
              c->rank, o->name);
      task_error(c, ncclRemoteError);
      rc = -1;
      break;
    }
    if (o->kind == K_SEND || o->kind == K_RECV) {
      if (np < 256) p2p[np++] = o;
      continue;
    }
    rc = run_coll(c, o);
  }
  if (rc == 0 && np) rc = run_p2p(c, p2p, np);
  if (turn) atomic_store_explicit(&c->exec_seq, t->seq + 1, memory_order_release);
  free_ops(t->ops);
  free(t);
  atomic_fetch_sub(&c->running, 1);
  atomic_fetch_sub(&c->outstanding, 1);
  comm_unref(c);
}

typedef cudaError_t (*stream_get_device_fn)(cudaStream_t, int *);

/* The device a stream belongs to, where the runtime can say (CUDA 12.8+). */
static int stream_device(cudaStream_t s, int *dev) {
  static stream_get_device_fn fn;
  static int looked;
  if (!looked) {
    fn = (stream_get_device_fn)dlsym(RTLD_DEFAULT, "cudaStreamGetDevice");
    looked = 1;
  }
  if (!fn || s == 0 || s == cudaStreamLegacy || s == cudaStreamPerThread) return 0;
  if (fn(s, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return 1;
}

/* Launch one communicator's part of a group: one task on its first stream, joined with
 * the other streams it used by events (NCCL's strong-stream join). */
static ncclResult_t launch_comm(ncclComm_t c, fn_op_t *ops) {
  cudaStream_t st = ops->stream;
  int sd;
  for (fn_op_t *o = ops; o; o = o->next) {
    if (stream_device(o->stream, &sd) && sd != c->dev) {
      fn_warn("Cuda failure '%s'", cuda_str(cudaErrorInvalidResourceHandle));
      free_ops(ops);
      return ncclUnhandledCudaError;
    }
    o->s_host = host_reachable(o->sbuf);
    o->r_host = host_reachable(o->rbuf);
    long nth = ++c->nops;
    if (c->fault_async_op && nth == c->fault_async_op) o->fault = F_ASYNC;
    if (c->fault_hang_op && nth == c->fault_hang_op) o->fault = F_HANG;
  }
  /* Other streams of this group (the task frees the ops once it ran). */
  cudaStream_t others[64];
  int nothers = 0;
  for (fn_op_t *o = ops->next; o; o = o->next) {
    int seen = o->stream == st;
    for (int k = 0; k < nothers && !seen; k++) seen = others[k] == o->stream;
    if (!seen && nothers < 64) others[nothers++] = o->stream;
  }
  for (int k = 0; k < nothers; k++) {
    cudaEvent_t ev;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess) {
      cudaEventRecord(ev, others[k]);
      cudaStreamWaitEvent(st, ev, 0);
      cudaEventDestroy(ev);
    }
  }
  fn_task_t *t = calloc(1, sizeof *t);
  if (!t) {
    free_ops(ops);
    return ncclSystemError;
  }
  t->comm = c;
  t->ops = ops;
  t->seq = c->enq_seq++;
  comm_ref(c);
  atomic_fetch_add(&c->outstanding, 1);
  cudaError_t e = cudaLaunchHostFunc(st, task_fn, t);
  if (e != cudaSuccess) {
    c->enq_seq--;
    atomic_fetch_sub(&c->outstanding, 1);
    comm_unref(c);
    free_ops(ops);
    free(t);
    fn_warn("Cuda failure '%s'", cuda_str(e));
    return ncclUnhandledCudaError;
  }
  for (int k = 0; k < nothers; k++) {
    cudaEvent_t ev;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess) {
      cudaEventRecord(ev, st);
      cudaStreamWaitEvent(others[k], ev, 0);
      cudaEventDestroy(ev);
    }
  }
  if (!c->blocking) atomic_store(&c->polls, env_int("FAKEGPU_NCCL_OP_POLLS", 1));
  return ncclSuccess;
}

/* doLaunches: every communicator of the group, each on its device. */
static ncclResult_t launch_ops(void) {
  fn_op_t *all = g_ops;
  g_ops = NULL;
  g_ops_tail = NULL;
  if (!all) return ncclSuccess;
  int old = 0;
  cudaGetDevice(&old);
  ncclResult_t ret = ncclSuccess;
  while (all) {
    ncclComm_t c = all->comm;
    fn_op_t *mine = NULL, **mt = &mine, *rest = NULL, **rt = &rest;
    for (fn_op_t *o = all, *n; o; o = n) {
      n = o->next;
      o->next = NULL;
      if (o->comm == c) {
        *mt = o;
        mt = &o->next;
      } else {
        *rt = o;
        rt = &o->next;
      }
    }
    all = rest;
    if (ret != ncclSuccess) {
      free_ops(mine);
      continue;
    }
    if (cudaSetDevice(c->dev) != cudaSuccess) {
      fn_warn("Cuda failure '%s'", cuda_str(cudaErrorInvalidDevice));
      ret = ncclUnhandledCudaError;
      free_ops(mine);
      continue;
    }
    ret = launch_comm(c, mine);
    if (ret != ncclSuccess && !c->blocking) atomic_store(&c->async, ret);
  }
  cudaSetDevice(old);
  return ret;
}

/* ================================================================ collectives API */

static fn_op_t op_tmpl(fn_kind_t k, const char *name, const void *s, void *r, size_t count,
                       ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t st) {
  fn_op_t o;
  memset(&o, 0, sizeof o);
  o.kind = k;
  o.name = name;
  o.sbuf = s;
  o.rbuf = r;
  o.count = count;
  o.dtype = (int)dt;
  o.root = root;
  o.comm = comm;
  o.stream = st;
  return o;
}

FN_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream) {
  return enqueue(op_tmpl(K_ALLREDUCE, "AllReduce", sendbuff, recvbuff, count, datatype, 0, comm,
                         stream), op);
}

FN_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  return enqueue(op_tmpl(K_BROADCAST, "Broadcast", sendbuff, recvbuff, count, datatype, root,
                         comm, stream), ncclSum);
}

FN_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                              ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

FN_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  return enqueue(op_tmpl(K_REDUCE, "Reduce", sendbuff, recvbuff, count, datatype, root, comm,
                         stream), op);
}

FN_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(op_tmpl(K_ALLGATHER, "AllGather", sendbuff, recvbuff, sendcount, datatype, 0,
                         comm, stream), ncclSum);
}

FN_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  return enqueue(op_tmpl(K_REDUCESCATTER, "ReduceScatter", sendbuff, recvbuff, recvcount,
                         datatype, 0, comm, stream), op);
}

FN_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(op_tmpl(K_ALLTOALL, "AlltoAll", sendbuff, recvbuff, count, datatype, 0, comm,
                         stream), ncclSum);
}

FN_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  return enqueue(op_tmpl(K_GATHER, "Gather", sendbuff, recvbuff, count, datatype, root, comm,
                         stream), ncclSum);
}

FN_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
  return enqueue(op_tmpl(K_SCATTER, "Scatter", sendbuff, recvbuff, count, datatype, root, comm,
                         stream), ncclSum);
}

FN_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  return enqueue(op_tmpl(K_SEND, "Send", sendbuff, NULL, count, datatype, peer, comm, stream),
                 ncclSum);
}

FN_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  return enqueue(op_tmpl(K_RECV, "Recv", NULL, recvbuff, count, datatype, peer, comm, stream),
                 ncclSum);
}

/* ================================================================ user reduction ops */

FN_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, ncclComm_t comm) {
  ncclResult_t r;
  if ((r = comm_check(comm, "ncclRedOpCreatePreMulSum")) != ncclSuccess) return r;
  if ((r = comm_ensure_ready(comm)) != ncclSuccess) return r;
  if (!op || !scalar) return ncclInvalidArgument;
  size_t es = fn_type_size(datatype);
  if (!es) return ncclInvalidArgument;
  int ix = 0;
  while (ix < comm->nuserops && comm->userops[ix].used) ix++;
  if (ix == comm->nuserops) {
    int cap = comm->nuserops ? 2 * comm->nuserops : 4;
    fn_userop_t *n = realloc(comm->userops, (size_t)cap * sizeof *n);
    if (!n) return ncclSystemError;
    memset(n + comm->nuserops, 0, (size_t)(cap - comm->nuserops) * sizeof *n);
    comm->userops = n;
    comm->nuserops = cap;
  }
  fn_userop_t *u = &comm->userops[ix];
  memset(u, 0, sizeof *u);
  u->used = 1;
  u->dtype = datatype;
  if (residence == ncclScalarHostImmediate) {
    memcpy(&u->scalar, scalar, es);
  } else {
    u->is_ptr = 1;
    u->scalar = (uint64_t)(uintptr_t)scalar;
  }
  *op = (ncclRedOp_t)((int)ncclNumOps + ix);
  return ncclSuccess;
}

FN_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if ((int)op >= 0 && (int)op < (int)ncclNumOps) {
    fn_warn("ncclRedOpDestroy : operator is a NCCL builtin.");
    return ncclInvalidArgument;
  }
  if ((int)op < 0) {
    fn_warn("ncclRedOpDestroy :  operator is garbage.");
    return ncclInvalidArgument;
  }
  if (!comm) {
    fn_warn("ncclRedOpDestroy : invalid communicator passed.");
    return ncclInvalidArgument;
  }
  int ix = (int)op - (int)ncclNumOps;
  if (ix >= comm->nuserops || !comm->userops[ix].used) {
    fn_warn("ncclRedOpDestroy : operator unknown to this communicator.");
    return ncclInvalidArgument;
  }
  comm->userops[ix].used = 0;
  return ncclSuccess;
}

/* ================================================================ memory, windows */

FN_API ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  if (!ptr) {
    fn_warn("ncclMemAlloc : ptr argument is NULL");
    return ncclInvalidArgument;
  }
  *ptr = NULL;
  if (size == 0) return ncclSuccess;
  CUDACHECK(cudaMalloc(ptr, size));
  return ncclSuccess;
}

FN_API ncclResult_t ncclMemFree(void *ptr) {
  if (!ptr) return ncclSuccess;
  CUDACHECK(cudaFree(ptr));
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                           ncclWindow_t *win, int winFlags) {
  ncclResult_t r;
  if ((r = comm_check(comm, "ncclCommWindowRegister")) != ncclSuccess) return r;
  if ((r = ptr_check(win, "ncclCommWindowRegister", "win")) != ncclSuccess) return r;
  if ((r = comm_ensure_ready(comm)) != ncclSuccess) return r;
  *win = NULL;
  fakemem_region_t reg;
  if (!buff || size == 0 || fakemem_find(buff, size, &reg) != 0) {
    fn_warn("ncclCommWindowRegister : buffer %p (%zu bytes) is not device memory", buff, size);
    return ncclInvalidArgument;
  }
  if (reg.device != comm->dev) {
    fn_warn("ncclCommWindowRegister : buffer allocated on device %d mismatchs with NCCL device %d",
            reg.device, comm->dev);
    return ncclInvalidArgument;
  }
  /* Collective: every rank registers its window (NCCL exchanges them). */
  uint64_t mine[2] = {(uint64_t)size, (uint64_t)winFlags}, *all = calloc((size_t)comm->nranks, 16);
  if (!all) return ncclSystemError;
  r = boot_allgather(comm, mine, sizeof mine, all, NULL);
  free(all);
  if (r != ncclSuccess) return r;
  struct ncclWindow_vidmem *w = calloc(1, sizeof *w);
  if (!w) return ncclSystemError;
  w->buff = buff;
  w->size = size;
  w->flags = winFlags;
  pthread_mutex_lock(&comm->lock);
  w->next = comm->windows;
  comm->windows = w;
  pthread_mutex_unlock(&comm->lock);
  *win = w;
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  ncclResult_t r;
  if ((r = comm_check(comm, "ncclCommWindowDeregister")) != ncclSuccess) return r;
  pthread_mutex_lock(&comm->lock);
  for (struct ncclWindow_vidmem **p = &comm->windows; *p; p = &(*p)->next) {
    if (*p == win) {
      *p = win->next;
      pthread_mutex_unlock(&comm->lock);
      free(win);
      return ncclSuccess;
    }
  }
  pthread_mutex_unlock(&comm->lock);
  fn_warn("ncclCommWindowDeregister : window %p is not registered with this communicator",
          (void *)win);
  return ncclInvalidArgument;
}

FN_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
  ncclResult_t r;
  if ((r = comm_check(comm, "ncclCommRegister")) != ncclSuccess) return r;
  if (!handle) return ncclInvalidArgument;
  if ((r = cuda_ptr_check(buff, comm, "buff", "ncclCommRegister")) != ncclSuccess) return r;
  *handle = buff;
  (void)size;
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  (void)handle;
  return comm_check(comm, "ncclCommDeregister");
}
