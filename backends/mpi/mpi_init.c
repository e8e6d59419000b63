/* mpi backend, process-wide: the launcher's environment, MPI's initialisation and exit,
 * our datatypes and operations, capabilities and the unique id. The lowest file of the
 * plugin besides the waits (mpi_wait.c). */
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
uint64_t mpi_job_hash(void) {
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
 * includes exit. The failure may have been seen by this backend (trouble) or by any other
 * communicator of the process, e.g. host ranks bootstrapped with ul_bootstrap_mpi
 * (ul_backend_failure_seen). UNILINK_MPI_FINALIZE_AFTER_ERROR=1 finalizes anyway. */
static void mpi_backend_atexit(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  if (mpi_g.trouble || ul_backend_failure_seen()) {
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

ul_result_t mpi_backend_init(char *reason, size_t reason_len) {
  return mpi_backend_ensure(reason, reason_len);
}

void mpi_backend_fini(void) {
  /* MPI stays up until exit: it cannot be initialised twice in one process. */
}

ul_result_t mpi_backend_query_caps(ul_backend_caps_t *caps) {
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


ul_result_t mpi_backend_get_unique_id(unsigned char *payload, size_t payload_bytes) {
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

