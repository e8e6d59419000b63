/* mpi backend: the ops table, and the bootstrap over an MPI launcher it offers the core. Built as the plugin libunilink-mpi.so so that libunilink itself never
 * links MPI; everything else lives in the files the table names. */
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

/* ------------------------------------------------------------ bootstrap */
/* The ops table's bootstrap_bcast/bootstrap_stage: the core's ul_bootstrap_mpi and
 * ul_comm_init_mpi (api/src/bootstrap.c) run over them, for any backend. */

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
static ul_result_t mpi_bootstrap_bcast(int impl, int64_t fcomm, void *buf, size_t len, int *rank,
                                       int *nranks) {
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


/* Stage (stage=1) the application communicator for the next comm_init on this thread,
 * or drop a staged one (stage=0). */
static ul_result_t mpi_bootstrap_stage(int impl, int64_t fcomm, int stage) {
  if (!stage) {
    mpi_comm_stage(0, MPI_COMM_NULL);
    return UL_OK;
  }
  MPI_Comm mc;
  ul_result_t r = mpi_comm_from_handle(impl, fcomm, &mc);
  if (r != UL_OK) return r;
  mpi_comm_stage(1, mc);
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
    .bootstrap_bcast = mpi_bootstrap_bcast,
    .bootstrap_stage = mpi_bootstrap_stage,
};

MPI_BACKEND_VISIBLE const ul_backend_ops_t *ul_backend_entry(void) { return &mpi_backend_ops; }
