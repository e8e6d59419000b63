/* mpi backend: lifecycle, errors, waits, communicators, topology, bootstrap exports.
 * Built as the plugin libunilink-mpi.so so that libunilink itself never links MPI. */
#define _GNU_SOURCE
#include "mpi_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

mpi_global_t mpi_g;
static pthread_mutex_t mpi_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int mpi_ready;        /* MPI usable and our ops/types created */
static char mpi_init_reason[256];
static ul_result_t mpi_init_rc = UL_ERR_UNAVAILABLE;
static int mpi_init_tried;

/* Communicator staged by ul_mpi_stage_comm() for the next comm_init on this thread
 * (ul_comm_init_mpi: build on the user's MPI_Comm instead of MPI_COMM_WORLD). */
static __thread int mpi_staged_valid;
static __thread MPI_Comm mpi_staged_comm;

/* ------------------------------------------------------------- launcher */
/* Variables a launcher sets in every process it starts: Open MPI (orterun/prterun),
 * PMIx launchers (Open MPI 5, srun --mpi=pmix), PMI-1/2 (MPICH hydra, Intel MPI,
 * srun --mpi=pmi2), MVAPICH. */
static const char *const mpi_launcher_vars[] = {
    "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_SIZE", NULL};

int mpi_launched(void) {
  for (int i = 0; mpi_launcher_vars[i]; i++)
    if (getenv(mpi_launcher_vars[i])) return 1;
  return 0;
}

/* Number of processes the launcher started, or -1 when it does not say. */
static int mpi_launcher_size(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE",
                                     NULL};
  for (int i = 0; vars[i]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      char *end;
      long n = strtol(v, &end, 10);
      if (*end == '\0' && n > 0 && n < INT_MAX) return (int)n;
    }
  }
  return -1;
}

/* Hash of the launcher's job identifier, so an id from another job is recognised
 * before any communication; 0 when the launcher does not name its job (hydra). */
static uint64_t mpi_job_hash(void) {
  static const char *const vars[] = {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID",
                                     NULL};
  uint64_t h = 1469598103934665603ull;
  int any = 0;
  for (int i = 0; vars[i]; i++) {
    const char *v = getenv(vars[i]);
    if (!v) continue;
    any = 1;
    for (const char *p = v; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  }
  return any ? (h ? h : 1) : 0;
}

/* ------------------------------------------------------ dtypes and ops */
MPI_Datatype mpi_dtype_of(ul_dtype_t d) {
  switch (d) {
  case UL_INT8: return MPI_INT8_T;
  case UL_UINT8: return MPI_UINT8_T;
  case UL_INT32: return MPI_INT32_T;
  case UL_UINT32: return MPI_UINT32_T;
  case UL_INT64: return MPI_INT64_T;
  case UL_UINT64: return MPI_UINT64_T;
  case UL_FP16: /* no MPI type: carried as 16-bit words, reduced by our own ops */
  case UL_BF16: return MPI_UINT16_T;
  case UL_FP32: return MPI_FLOAT;
  case UL_FP64: return MPI_DOUBLE;
  case UL_FP8_E4M3:
  case UL_FP8_E5M2: return MPI_UINT8_T;
  default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op_of(ul_dtype_t d, ul_op_t op) {
  if (mpi_g.user_ops[d][op] != MPI_OP_NULL) return mpi_g.user_ops[d][op];
  switch (op) {
  case UL_SUM:
  case UL_AVG: return MPI_SUM; /* avg: sum, then ul_scale_avg_local, as the host backend */
  case UL_PROD: return MPI_PROD;
  case UL_MIN: return MPI_MIN;
  case UL_MAX: return MPI_MAX;
  default: return MPI_OP_NULL;
  }
}

/* User-defined MPI ops for the types MPI has no arithmetic for: one function per
 * (dtype, op), so nothing depends on MPI passing a particular datatype handle.
 * MPI wants inout = in op inout; ul_reduce_local is the core's kernel, so results
 * round exactly as in the host backend. */
#define MPI_DEF_USER_OP(D, O)                                                                    \
  static void mpi_user_op_##D##_##O(void *in, void *inout, int *len, MPI_Datatype *t) {          \
    (void)t;                                                                                     \
    ul_reduce_local(inout, in, inout, (size_t)*len, D, O);                                       \
  }
#define MPI_DEF_USER_OPS(D)                                                                      \
  MPI_DEF_USER_OP(D, UL_SUM) MPI_DEF_USER_OP(D, UL_PROD) MPI_DEF_USER_OP(D, UL_MIN)              \
      MPI_DEF_USER_OP(D, UL_MAX)
MPI_DEF_USER_OPS(UL_FP16)
MPI_DEF_USER_OPS(UL_BF16)
MPI_DEF_USER_OPS(UL_FP8_E4M3)
MPI_DEF_USER_OPS(UL_FP8_E5M2)
/* MPICH 4.0.2 compares MPI_UINT8_T as signed in MPI_MIN/MPI_MAX (max(146, 96) = 96,
 * seen in the conformance suite); our kernel is right everywhere and costs nothing. */
MPI_DEF_USER_OP(UL_UINT8, UL_MIN)
MPI_DEF_USER_OP(UL_UINT8, UL_MAX)
/* One meaning on every backend (docs/reliability.md): 8-bit sums wrap as in C (Open MPI
 * 4.1's AVX op saturates them), fp32/fp64 min/max return NaN if any input is NaN and
 * order -0 below +0 (MPI_MIN/MPI_MAX depend on operand order for both). */
MPI_DEF_USER_OP(UL_INT8, UL_SUM)
MPI_DEF_USER_OP(UL_UINT8, UL_SUM)
MPI_DEF_USER_OP(UL_FP32, UL_MIN)
MPI_DEF_USER_OP(UL_FP32, UL_MAX)
MPI_DEF_USER_OP(UL_FP64, UL_MIN)
MPI_DEF_USER_OP(UL_FP64, UL_MAX)

static int mpi_create_user_ops(void) {
  for (int d = 0; d < UL_DTYPE_COUNT; d++)
    for (int o = 0; o < UL_OP_COUNT; o++) mpi_g.user_ops[d][o] = MPI_OP_NULL;
  struct {
    ul_dtype_t d;
    MPI_User_function *fn[4];
  } tab[] = {
#define MPI_USER_ROW(D)                                                                          \
  {D, {mpi_user_op_##D##_UL_SUM, mpi_user_op_##D##_UL_PROD, mpi_user_op_##D##_UL_MIN,            \
       mpi_user_op_##D##_UL_MAX}}
      MPI_USER_ROW(UL_FP16), MPI_USER_ROW(UL_BF16), MPI_USER_ROW(UL_FP8_E4M3),
      MPI_USER_ROW(UL_FP8_E5M2),
  };
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
    for (int o = 0; o < 4; o++) {
      int rc = MPI_Op_create(tab[i].fn[o], 1, &mpi_g.user_ops[tab[i].d][o]);
      if (rc != MPI_SUCCESS) return rc;
    }
    mpi_g.user_ops[tab[i].d][UL_AVG] = mpi_g.user_ops[tab[i].d][UL_SUM];
  }
  struct {
    ul_dtype_t d;
    ul_op_t o;
    MPI_User_function *fn;
  } one[] = {
      {UL_UINT8, UL_MIN, mpi_user_op_UL_UINT8_UL_MIN}, {UL_UINT8, UL_MAX, mpi_user_op_UL_UINT8_UL_MAX},
      {UL_INT8, UL_SUM, mpi_user_op_UL_INT8_UL_SUM},   {UL_UINT8, UL_SUM, mpi_user_op_UL_UINT8_UL_SUM},
      {UL_FP32, UL_MIN, mpi_user_op_UL_FP32_UL_MIN},   {UL_FP32, UL_MAX, mpi_user_op_UL_FP32_UL_MAX},
      {UL_FP64, UL_MIN, mpi_user_op_UL_FP64_UL_MIN},   {UL_FP64, UL_MAX, mpi_user_op_UL_FP64_UL_MAX},
  };
  for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
    int rc = MPI_Op_create(one[i].fn, 1, &mpi_g.user_ops[one[i].d][one[i].o]);
    if (rc != MPI_SUCCESS) return rc;
    if (one[i].o == UL_SUM) mpi_g.user_ops[one[i].d][UL_AVG] = mpi_g.user_ops[one[i].d][UL_SUM];
  }
  return MPI_SUCCESS;
}

/* ----------------------------------------------------------- lifecycle */
/* After a timeout, a lost peer or an abort, MPI_Finalize may wait forever for a peer that
 * is gone (seen with Open MPI 4.1 under mpirun --enable-recovery: 10 of 85 survivors hung
 * here). Exit without it then: the launcher reaps the job, and "no call blocks forever"
 * includes exit. UNILINK_MPI_FINALIZE_AFTER_ERROR=1 finalizes anyway. */
static void mpi_backend_atexit(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  if (mpi_g.trouble) {
    const char *v = getenv("UNILINK_MPI_FINALIZE_AFTER_ERROR");
    if (!v || strcmp(v, "1") != 0) {
      fprintf(stderr, "unilink mpi: exiting without MPI_Finalize after a communication error "
                      "(a peer may be gone; set UNILINK_MPI_FINALIZE_AFTER_ERROR=1 to finalize)\n");
      return;
    }
  }
  MPI_Finalize();
}

/* Open MPI loads its components with dlopen and they expect libmpi's symbols in the
 * global scope; a plugin loaded RTLD_LOCAL would hide them. Promote libmpi (and, via
 * its search list, its dependencies) to RTLD_GLOBAL. Also pin this plugin and libmpi
 * (RTLD_NODELETE): MPI cannot be unloaded and re-initialised, and our atexit handler
 * must stay mapped until exit. */
static void mpi_backend_pin(void) {
  Dl_info info;
  if (dladdr((void *)&MPI_Init_thread, &info) && info.dli_fname)
    (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD | RTLD_NODELETE);
  if (dladdr((void *)&mpi_backend_pin, &info) && info.dli_fname)
    (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

ul_result_t mpi_backend_ensure(char *reason, size_t reason_len) {
  pthread_mutex_lock(&mpi_init_lock);
  if (!mpi_init_tried) {
    mpi_init_tried = 1;
    mpi_backend_pin();
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (fin) {
      snprintf(mpi_init_reason, sizeof mpi_init_reason,
               "MPI was already finalised in this process");
    } else if (!inited && !mpi_launched()) {
      snprintf(mpi_init_reason, sizeof mpi_init_reason,
               "not started by mpirun/mpiexec/srun (none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, "
               "PMI_SIZE is set) and MPI is not initialised; for a singleton run call "
               "MPI_Init first");
    } else {
      int rc = MPI_SUCCESS;
      if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &mpi_g.thread_level);
        if (rc == MPI_SUCCESS) {
          mpi_g.we_initialised = 1;
          /* Our errors come back as codes; never let MPI kill the process for us. */
          MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
          MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
          atexit(mpi_backend_atexit);
        }
      } else {
        rc = MPI_Query_thread(&mpi_g.thread_level);
      }
      int wsize = 0, lsize = mpi_launcher_size();
      if (rc == MPI_SUCCESS) rc = MPI_Comm_size(MPI_COMM_WORLD, &wsize);
      if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        MPI_Error_string(rc, text, &len);
        snprintf(mpi_init_reason, sizeof mpi_init_reason, "MPI_Init_thread failed: %.200s", text);
      } else if (lsize > 0 && lsize != wsize) {
        snprintf(mpi_init_reason, sizeof mpi_init_reason,
                 "the launcher started %d processes but MPI_COMM_WORLD has %d: the mpi plugin "
                 "was built for another MPI than the mpirun that started this job",
                 lsize, wsize);
      } else if ((rc = mpi_create_user_ops()) != MPI_SUCCESS) {
        snprintf(mpi_init_reason, sizeof mpi_init_reason, "MPI_Op_create failed (%d)", rc);
      } else {
        mpi_ready = 1;
        mpi_init_rc = UL_OK;
        mpi_init_reason[0] = '\0';
      }
    }
  }
  ul_result_t rc = mpi_init_rc;
  if (rc != UL_OK && reason && reason_len) snprintf(reason, reason_len, "%s", mpi_init_reason);
  pthread_mutex_unlock(&mpi_init_lock);
  return rc;
}

static ul_result_t mpi_backend_init(char *reason, size_t reason_len) {
  return mpi_backend_ensure(reason, reason_len);
}

static void mpi_backend_fini(void) {
  /* MPI stays up until exit: it cannot be initialised twice in one process. */
}

static ul_result_t mpi_backend_query_caps(ul_backend_caps_t *caps) {
  /* Streams run on core worker threads that call MPI concurrently: only with
   * MPI_THREAD_MULTIPLE. If MPI was initialised before us with less, no streams. */
  uint32_t f = UL_FEATURE_PROCESS_RANKS | UL_FEATURE_MULTI_NODE | UL_FEATURE_SPLIT |
               UL_FEATURE_P2P | UL_FEATURE_ONE_SIDED | UL_FEATURE_NATIVE_COLL;
  if (!mpi_ready || mpi_g.thread_level >= MPI_THREAD_MULTIPLE) f |= UL_FEATURE_STREAMS;
  caps->features = f;
  caps->flags = UL_BACKEND_HOST_STREAMS | UL_BACKEND_HOST_MEMORY;
  caps->native_colls = 0;
  for (int k = 0; k <= UL_COLL_BARRIER; k++) caps->native_colls |= 1u << k;
  caps->dtypes = (1u << UL_DTYPE_COUNT) - 1;
  caps->reduce_dtypes = (1u << UL_DTYPE_COUNT) - 1;
  caps->ops = (1u << UL_OP_COUNT) - 1;
  caps->max_ranks = 0;
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
    lib[strcspn(lib, ",\n")] = '\0'; /* first phrase: "Open MPI v4.1.4" / "MPICH Version: 4.0.2" */
    snprintf(caps->version, sizeof caps->version, "%.63s", lib);
  }
  return UL_OK;
}

/* ------------------------------------------------------------ unique id */
#define MPI_ID_MAGIC "ULMPIID1"
typedef struct mpi_id_payload {
  char magic[8];
  uint32_t impl;       /* UL_MPI_IMPL_SELF of the creator */
  uint32_t world_size; /* informational */
  uint64_t job_hash;   /* mpi_job_hash() of the creator; 0 unknown */
  unsigned char token[32];
} mpi_id_payload_t;
_Static_assert(sizeof(mpi_id_payload_t) <= UL_BACKEND_ID_PAYLOAD_BYTES, "payload too large");

static ul_result_t mpi_backend_get_unique_id(unsigned char *payload, size_t payload_bytes) {
  /* MPI itself is the bootstrap: the id only carries a job token, so that ranks
   * given different ids (or an id from another job) are detected at init. */
  mpi_id_payload_t p;
  memset(&p, 0, sizeof p);
  memcpy(p.magic, MPI_ID_MAGIC, 8);
  p.impl = UL_MPI_IMPL_SELF;
  int ws = 0;
  if (mpi_ready) MPI_Comm_size(MPI_COMM_WORLD, &ws);
  p.world_size = (uint32_t)ws;
  p.job_hash = mpi_job_hash();
  size_t got = 0;
  while (got < sizeof p.token) {
    ssize_t n = getrandom(p.token + got, sizeof p.token - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ul_backend_set_error(NULL, UL_ERR_SYSTEM, "mpi: getrandom failed: %s",
                                  strerror(errno));
    }
    got += (size_t)n;
  }
  memset(payload, 0, payload_bytes);
  memcpy(payload, &p, sizeof p);
  return UL_OK;
}

/* ------------------------------------------------------- communicators */
static void mpi_comm_free_struct(ul_backend_comm_t *c) {
  if (!c) return;
  free(c->node_of);
  free(c->host_of);
  if (c->pidfd_of)
    for (int r = 0; r < c->nranks; r++)
      if (c->pidfd_of[r] >= 0) close(c->pidfd_of[r]);
  free(c->pidfd_of);
  free(c->pid_of);
  free(c->ctl_buf);
  free(c->reqs);
  free(c->req_count);
  free(c->req_dt);
  free(c->allocs);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

ul_backend_comm_t *mpi_comm_new(const ul_backend_comm_args_t *args) {
  ul_backend_comm_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->ucomm = args->comm;
  c->timeout_ms = args->timeout_ms;
  c->abort_flag = args->abort_flag;
  c->comm = MPI_COMM_NULL;
  c->ctl = MPI_COMM_NULL;
  c->lost_rank = -1;
  pthread_mutex_init(&c->lock, NULL);
  return c;
}

/* Node map: ranks that share memory (MPI_COMM_TYPE_SHARED) get the same node id, the
 * comm rank of their node's first rank; host names go along for the descriptions. */
static ul_result_t mpi_comm_topology_setup(ul_backend_comm_t *c) {
  int n = c->nranks;
  c->node_of = calloc((size_t)n, sizeof *c->node_of);
  c->host_of = calloc((size_t)n, sizeof *c->host_of);
  if (!c->node_of || !c->host_of)
    return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: out of memory", c->rank);
  MPI_Comm node = MPI_COMM_NULL;
  int rc = MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Comm_split_type");
  int leader = c->rank;
  MPI_Request req;
  rc = MPI_Ibcast(&leader, 1, MPI_INT, 0, node, &req);
  ul_result_t r = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Ibcast", c->timeout_ms)
                                    : mpi_error_set(c, rc, "MPI_Ibcast");
  MPI_Comm_free(&node);
  if (r != UL_OK) return r;
  char me[MPI_MAX_PROCESSOR_NAME] = "";
  int len = 0;
  MPI_Get_processor_name(me, &len);
  MPI_Request reqs[2];
  rc = MPI_Iallgather(&leader, 1, MPI_INT, c->node_of, 1, MPI_INT, c->comm, &reqs[0]);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Iallgather");
  rc = MPI_Iallgather(me, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, c->host_of, MPI_MAX_PROCESSOR_NAME,
                      MPI_CHAR, c->comm, &reqs[1]);
  if (rc != MPI_SUCCESS) {
    mpi_waitall(c, 1, reqs, "MPI_Iallgather", c->timeout_ms);
    return mpi_error_set(c, rc, "MPI_Iallgather");
  }
  r = mpi_waitall(c, 2, reqs, "MPI_Iallgather", c->timeout_ms);
  for (int i = 0; i < n; i++) c->host_of[i][MPI_MAX_PROCESSOR_NAME - 1] = '\0';
  return r == UL_OK ? mpi_comm_liveness_setup(c) : r;
}

/* Common tail of comm_init and comm_split: c->comm is ours. */
ul_result_t mpi_comm_setup(ul_backend_comm_t *c, ul_backend_comm_props_t *props) {
  int rc = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(c->comm, &c->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(c->comm, &c->nranks);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Comm_set_errhandler");
  mpi_g.blocking = (int)ul_backend_param_int(
      "MPI_BLOCKING", 0,
      "mpi backend: 1 = use blocking MPI collectives (MPI's tuned algorithms) instead of "
      "nonblocking ones polled with the timeout and abort flag; waits then ignore both");
  mpi_g.chunk = ul_backend_param_int(
      "MPI_CHUNK", INT_MAX,
      "mpi backend: largest element count per MPI call; longer allreduce/broadcast/reduce, "
      "send/recv and put/get are split (MPI counts are int)");
  if (mpi_g.chunk < 1 || mpi_g.chunk > INT_MAX) mpi_g.chunk = INT_MAX;
  ul_result_t r = mpi_comm_topology_setup(c);
  if (r == UL_OK) r = mpi_comm_ctl_setup(c);
  if (r != UL_OK) return r;
  if (props) {
    props->load_store_peers = 0;
    snprintf(props->path, sizeof props->path, "mpi");
  }
  return UL_OK;
}

/* comm_init: the ranks are the processes of MPI_COMM_WORLD (or of the communicator
 * staged by ul_comm_init_mpi). Every rank takes part in the agreement below even when
 * its own arguments are wrong, so all ranks fail together instead of some hanging. */
static ul_result_t mpi_backend_comm_init(const ul_backend_comm_args_t *args,
                                         ul_backend_comm_t **out, ul_backend_comm_props_t *props) {
  *out = NULL;
  MPI_Comm base = MPI_COMM_WORLD;
  const char *base_name = "MPI_COMM_WORLD";
  if (mpi_staged_valid) {
    base = mpi_staged_comm;
    base_name = "the MPI communicator given to ul_comm_init_mpi";
    mpi_staged_valid = 0;
  }
  ul_backend_comm_t *c = mpi_comm_new(args);
  if (!c) return ul_backend_set_error(args->comm, UL_ERR_NO_MEMORY, "mpi: out of memory");
  int brank = 0, bsize = 0;
  MPI_Comm_rank(base, &brank);
  MPI_Comm_size(base, &bsize);
  c->rank = brank;
  c->nranks = bsize;

  /* Local checks first; they become a vote. */
  char why[320] = "";
  mpi_id_payload_t p;
  memcpy(&p, args->id_payload, sizeof p);
  uint64_t myjob = mpi_job_hash();
  if (memcmp(p.magic, MPI_ID_MAGIC, 8) != 0)
    snprintf(why, sizeof why, "the unique id was not made by the mpi backend (corrupted id)");
  else if (p.impl != UL_MPI_IMPL_SELF)
    snprintf(why, sizeof why, "the unique id was made by a plugin built for another MPI");
  else if (p.job_hash && myjob && p.job_hash != myjob)
    snprintf(why, sizeof why, "the unique id was made in another MPI job");
  else if (args->nranks != bsize || args->rank != brank)
    snprintf(why, sizeof why,
             "rank %d of %d does not match this process (rank %d of %d in %s): with the mpi "
             "backend the ranks are the MPI processes; use ul_comm_split for subsets",
             args->rank, args->nranks, brank, bsize, base_name);

  MPI_Request req;
  int rc = MPI_Comm_idup(base, &c->comm, &req);
  ul_result_t r = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Comm_idup", c->timeout_ms)
                                    : mpi_error_set(c, rc, "MPI_Comm_idup");
  if (r != UL_OK) goto fail;
  rc = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    r = mpi_error_set(c, rc, "MPI_Comm_set_errhandler");
    goto fail;
  }
  /* Compare every rank's token with rank 0's and vote (MINLOC names the first bad rank). */
  unsigned char root_token[sizeof p.token];
  memcpy(root_token, p.token, sizeof root_token);
  rc = MPI_Ibcast(root_token, (int)sizeof root_token, MPI_BYTE, 0, c->comm, &req);
  r = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Ibcast", c->timeout_ms)
                        : mpi_error_set(c, rc, "MPI_Ibcast");
  if (r != UL_OK) goto fail;
  if (!why[0] && memcmp(root_token, p.token, sizeof root_token) != 0)
    snprintf(why, sizeof why,
             "the unique id differs from rank 0's (another ul_get_unique_id call's id)");
  struct {
    int ok, rank;
  } vote = {why[0] ? 0 : 1, brank}, result;
  rc = MPI_Iallreduce(&vote, &result, 1, MPI_2INT, MPI_MINLOC, c->comm, &req);
  r = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Iallreduce", c->timeout_ms)
                        : mpi_error_set(c, rc, "MPI_Iallreduce");
  if (r != UL_OK) goto fail;
  if (why[0]) {
    r = ul_backend_set_error(args->comm, UL_ERR_INVALID_ARG, "rank %d: mpi comm_init: %s",
                             brank, why);
    goto fail;
  }
  if (!result.ok) {
    r = ul_backend_set_error(args->comm, UL_ERR_INVALID_ARG,
                             "rank %d: mpi comm_init failed on rank %d (its unique id or "
                             "rank/nranks did not match; see that rank's error)",
                             brank, result.rank);
    goto fail;
  }
  r = mpi_comm_setup(c, props);
  if (r != UL_OK) goto fail;
  *out = c;
  return UL_OK;
fail:
  if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  mpi_comm_free_struct(c);
  return r;
}

static ul_result_t mpi_backend_comm_split(ul_backend_comm_t *parent, int color, int key,
                                          const ul_backend_comm_args_t *args,
                                          ul_backend_comm_t **out,
                                          ul_backend_comm_props_t *props) {
  *out = NULL;
  MPI_Comm nc = MPI_COMM_NULL;
  int rc = MPI_Comm_split(parent->comm, color == UL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key,
                          &nc);
  if (rc != MPI_SUCCESS) return mpi_error_set(parent, rc, "MPI_Comm_split");
  if (nc == MPI_COMM_NULL) return UL_OK;
  ul_backend_comm_t *c = mpi_comm_new(args);
  if (!c) {
    MPI_Comm_free(&nc);
    return ul_backend_set_error(args->comm, UL_ERR_NO_MEMORY, "mpi: out of memory");
  }
  c->comm = nc;
  ul_result_t r = mpi_comm_setup(c, props);
  if (r == UL_OK && args->nranks > 0 && (args->rank != c->rank || args->nranks != c->nranks))
    r = ul_backend_set_error(args->comm, UL_ERR_INTERNAL,
                             "mpi: MPI_Comm_split made rank %d of %d, the core expected %d of %d",
                             c->rank, c->nranks, args->rank, args->nranks);
  if (r != UL_OK) {
    MPI_Comm_free(&c->comm);
    mpi_comm_free_struct(c);
    return r;
  }
  *out = c;
  return UL_OK;
}

static ul_result_t mpi_backend_comm_finalize(ul_backend_comm_t *c) {
  /* Every operation completes before it returns; finalize only waits for the peers. */
  MPI_Request req;
  int rc = MPI_Ibarrier(c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Ibarrier");
  return mpi_waitall(c, 1, &req, "MPI_Ibarrier (comm_finalize)", c->timeout_ms);
}

ul_result_t mpi_backend_comm_destroy(ul_backend_comm_t *c) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) {
    for (int i = 0; i < c->nallocs; i++) MPI_Free_mem(c->allocs[i]);
    /* After an abort or a timeout, operations may still be pending: MPI frees the
     * communicator once they finish; our struct no longer matters to them except for
     * requests left in an open group, which we release here. */
    for (int i = 0; i < c->nreqs; i++)
      if (c->reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&c->reqs[i]);
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    if (c->ctl != MPI_COMM_NULL) MPI_Comm_free(&c->ctl);
  }
  mpi_comm_free_struct(c);
  return UL_OK;
}

static ul_result_t mpi_backend_comm_abort(ul_backend_comm_t *c) {
  c->dead = 1; /* pollers see it and return UL_ERR_ABORTED; nothing here blocks */
  mpi_g.trouble = 1;
  return UL_OK;
}

static ul_result_t mpi_backend_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  memset(out, 0, sizeof *out);
  out->peer = peer;
  out->source = UL_SOURCE_NONE;
  if (peer == c->rank) {
    out->kind = UL_LINK_SELF;
    snprintf(out->description, sizeof out->description, "self");
  } else if (c->node_of[peer] == c->node_of[c->rank]) {
    out->kind = UL_LINK_SHM;
    snprintf(out->description, sizeof out->description, "shm (same host %.60s, MPI)",
             c->host_of[peer]);
  } else {
    out->kind = UL_LINK_NETWORK;
    snprintf(out->description, sizeof out->description, "network (host %.60s, MPI)",
             c->host_of[peer]);
  }
  return UL_OK;
}

/* ---------------------------------------------------------- ops table */
static const ul_backend_ops_t mpi_backend_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "mpi",
    .description = "MPI (Open MPI / MPICH) native collectives, point to point and RMA: the "
                   "multi-node path",
    .priority = 30,
    .init = mpi_backend_init,
    .fini = mpi_backend_fini,
    .query_caps = mpi_backend_query_caps,
    .get_unique_id = mpi_backend_get_unique_id,
    .comm_init = mpi_backend_comm_init,
    .comm_split = mpi_backend_comm_split,
    .comm_finalize = mpi_backend_comm_finalize,
    .comm_destroy = mpi_backend_comm_destroy,
    .comm_abort = mpi_backend_comm_abort,
    .comm_revoke = mpi_comm_revoke,
    .comm_shrink = mpi_comm_shrink,
    .comm_failed_ranks = mpi_comm_failed_ranks,
    .comm_topology = mpi_backend_comm_topology,
    .mem_alloc = mpi_mem_alloc,
    .mem_free = mpi_mem_free,
    .window_register = mpi_win_register,
    .window_deregister = mpi_win_deregister,
    .put = mpi_rma_put,
    .get = mpi_rma_get,
    .signal = mpi_rma_signal,
    .wait_signal = mpi_rma_wait_signal,
    .read_signal = mpi_rma_read_signal,
    .send = mpi_p2p_send,
    .recv = mpi_p2p_recv,
    .group_start = mpi_p2p_group_start,
    .group_end = mpi_p2p_group_end,
    .coll = &mpi_coll_ops,
};

MPI_BACKEND_VISIBLE const ul_backend_ops_t *ul_backend_entry(void) { return &mpi_backend_ops; }

/* --------------------------------------------------- bootstrap exports */
/* Reached by the core through dlsym on the plugin handle (api/src/bootstrap.c). */

static ul_result_t mpi_comm_from_handle(int impl, int64_t fcomm, MPI_Comm *out) {
  if (impl == 0) {
    *out = MPI_COMM_WORLD;
    return UL_OK;
  }
  if (impl != UL_MPI_IMPL_SELF)
    return ul_backend_set_error(NULL, UL_ERR_VERSION,
                                "mpi: the application was compiled with another MPI (%s) than "
                                "the mpi plugin (%s); rebuild one of them",
                                impl == 1 ? "Open MPI" : impl == 2 ? "MPICH" : "unknown",
                                UL_MPI_IMPL_SELF == 1 ? "Open MPI" : "MPICH");
  if (fcomm < INT_MIN || fcomm > INT_MAX)
    return ul_backend_set_error(NULL, UL_ERR_INVALID_ARG, "mpi: invalid MPI communicator handle");
  MPI_Comm mc = MPI_Comm_f2c((MPI_Fint)fcomm);
  if (mc == MPI_COMM_NULL)
    return ul_backend_set_error(NULL, UL_ERR_INVALID_ARG,
                                "mpi: mpicomm is MPI_COMM_NULL (this process is not in it)");
  int inter = 0;
  if (MPI_Comm_test_inter(mc, &inter) != MPI_SUCCESS || inter)
    return ul_backend_set_error(NULL, UL_ERR_INVALID_ARG,
                                "mpi: mpicomm is an intercommunicator; an intracommunicator "
                                "is needed");
  *out = mc;
  return UL_OK;
}

/* Broadcast len bytes of buf from rank 0 of the communicator (impl 0: MPI_COMM_WORLD,
 * else the Fortran handle fcomm of an application communicator) and return this
 * process's rank and the size. buf NULL or len 0: only rank and size. MPI is
 * initialised if needed. */
MPI_BACKEND_VISIBLE ul_result_t ul_mpi_bootstrap_bcast_comm(int impl, int64_t fcomm, void *buf,
                                                            size_t len, int *rank, int *nranks) {
  char reason[256] = "";
  if (mpi_backend_ensure(reason, sizeof reason) != UL_OK)
    return ul_backend_set_error(NULL, UL_ERR_UNAVAILABLE, "mpi: %s", reason);
  MPI_Comm mc;
  ul_result_t r = mpi_comm_from_handle(impl, fcomm, &mc);
  if (r != UL_OK) return r;
  if (len > INT_MAX)
    return ul_backend_set_error(NULL, UL_ERR_INVALID_ARG, "mpi: bootstrap message too large");
  int rc = MPI_Comm_rank(mc, rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(mc, nranks);
  if (rc != MPI_SUCCESS) return mpi_error_set(NULL, rc, "MPI_Comm_rank");
  if (!buf || !len) return UL_OK;
  MPI_Request req;
  rc = MPI_Ibcast(buf, (int)len, MPI_BYTE, 0, mc, &req);
  if (rc != MPI_SUCCESS) return mpi_error_set(NULL, rc, "MPI_Ibcast (bootstrap)");
  int timeout = (int)ul_backend_param_int("TIMEOUT_MS", 300000,
                                          "wait limit for any blocking wait, in ms (0: forever)");
  return mpi_waitall(NULL, 1, &req, "MPI_Ibcast (bootstrap)", timeout);
}

MPI_BACKEND_VISIBLE ul_result_t ul_mpi_bootstrap_bcast(void *buf, size_t len, int *rank,
                                                       int *nranks) {
  return ul_mpi_bootstrap_bcast_comm(0, 0, buf, len, rank, nranks);
}

/* Stage (stage=1) the application communicator for the next comm_init on this thread,
 * or drop a staged one (stage=0). */
MPI_BACKEND_VISIBLE ul_result_t ul_mpi_stage_comm(int impl, int64_t fcomm, int stage) {
  if (!stage) {
    mpi_staged_valid = 0;
    return UL_OK;
  }
  MPI_Comm mc;
  ul_result_t r = mpi_comm_from_handle(impl, fcomm, &mc);
  if (r != UL_OK) return r;
  mpi_staged_comm = mc;
  mpi_staged_valid = 1;
  return UL_OK;
}
