/* Bootstrap over an MPI launcher, for every backend, without linking MPI: the core asks
 * the backend whose ops table has bootstrap_bcast/bootstrap_stage (the mpi plugin's) to
 * carry rank 0's unique id to every process. */
#define _GNU_SOURCE
#include "ul_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Environment a launcher puts into every process it starts: Open MPI (orterun),
 * PMIx launchers (prterun, srun --mpi=pmix), PMI-1/2 (MPICH hydra, Intel MPI,
 * srun --mpi=pmi2), MVAPICH, and Slurm's srun with an MPI plugin. */
static const char *const ul__mpi_launcher_vars[] = {
    "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_SIZE", NULL};

UL_API int ul_launched_by_mpi(void) {
  for (int i = 0; ul__mpi_launcher_vars[i]; i++) {
    const char *v = getenv(ul__mpi_launcher_vars[i]);
    if (v && *v) return 1;
  }
  return 0;
}

/* Rank 0's answer, broadcast to everyone, so a failure on rank 0 fails every rank
 * with the same sentence instead of leaving them waiting. */
typedef struct ul__bootstrap_msg {
  int32_t rc;
  char error[220];
  ul_unique_id_t id;
} ul__bootstrap_msg_t;

typedef ul_result_t (*ul__bootstrap_bcast_fn)(int impl, int64_t fcomm, void *buf, size_t len,
                                              int *rank, int *nranks);

static ul_result_t ul__bootstrap_backend(const char *caller, const ul_backend_ops_t **ops) {
  ul__backend_t *be = NULL;
  ul_result_t rc = ul__registry_find_bootstrap(&be);
  if (rc != UL_OK) {
    char why[400];
    snprintf(why, sizeof why, "%s", ul_last_error());
    return ul__set_thread_error(UL_ERR_UNAVAILABLE, "%s: %s", caller, why);
  }
  *ops = &be->ops;
  return UL_OK;
}

/* Rank 0 of the communicator makes an id for `backend`; everyone gets it. */
static ul_result_t ul__bootstrap_share_id(const char *caller, ul__bootstrap_bcast_fn bcast, int impl,
                                          int64_t fcomm, const char *backend,
                                          ul_unique_id_t *id, int *rank, int *nranks) {
  int r = -1, n = 0;
  UL_CHECK(bcast(impl, fcomm, NULL, 0, &r, &n));
  ul__bootstrap_msg_t msg;
  memset(&msg, 0, sizeof msg);
  if (r == 0) {
    msg.rc = ul_get_unique_id(backend, &msg.id);
    if (msg.rc != UL_OK) snprintf(msg.error, sizeof msg.error, "%s", ul_last_error());
  }
  UL_CHECK(bcast(impl, fcomm, &msg, sizeof msg, &r, &n));
  if (msg.rc != UL_OK)
    return ul__set_thread_error((ul_result_t)msg.rc,
                                "%s: rank 0 could not create a unique id for backend '%s': %s",
                                caller, backend ? backend : "auto",
                                msg.error[0] ? msg.error : ul_result_string(msg.rc));
  *id = msg.id;
  *rank = r;
  *nranks = n;
  return UL_OK;
}

UL_API ul_result_t ul_bootstrap_mpi(const char *backend, ul_unique_id_t *id, int *rank,
                                    int *nranks) {
  if (!id || !rank || !nranks)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_bootstrap_mpi: %s is NULL",
                                !id ? "id" : !rank ? "rank" : "nranks");
  const ul_backend_ops_t *o = NULL;
  UL_CHECK(ul__bootstrap_backend("ul_bootstrap_mpi", &o));
  ul_unique_id_t tmp;
  int r = 0, n = 0;
  UL_CHECK(ul__bootstrap_share_id("ul_bootstrap_mpi", o->bootstrap_bcast, 0, 0, backend, &tmp, &r, &n));
  UL_INFO("BOOTSTRAP", "ul_bootstrap_mpi: rank %d of %d received the unique id for %s", r, n,
          backend ? backend : "auto");
  *id = tmp;
  *rank = r;
  *nranks = n;
  return UL_OK;
}

/* Declared in unilink/mpi.h (which needs <mpi.h>, so it is not included here). */
UL_API ul_result_t ul_comm_init_mpi_handle(ul_comm_t *comm, const ul_config_t *config, int impl,
                                           int64_t mpi_fortran_handle);

UL_API ul_result_t ul_comm_init_mpi_handle(ul_comm_t *comm, const ul_config_t *config, int impl,
                                           int64_t mpi_fortran_handle) {
  if (!comm) return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_comm_init_mpi: comm is NULL");
  *comm = NULL;
  if (impl <= 0)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_comm_init_mpi: bad MPI implementation tag %d", impl);
  if (config && config->struct_size >= offsetof(ul_config_t, backend) + sizeof(char *) &&
      config->backend && strcmp(config->backend, "mpi") != 0 &&
      strcmp(config->backend, "auto") != 0)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_comm_init_mpi: config->backend is '%s'; an MPI communicator "
                                "needs the mpi backend",
                                config->backend);
  const ul_backend_ops_t *o = NULL;
  UL_CHECK(ul__bootstrap_backend("ul_comm_init_mpi", &o));
  ul_unique_id_t id;
  int r = 0, n = 0;
  UL_CHECK(ul__bootstrap_share_id("ul_comm_init_mpi", o->bootstrap_bcast, impl, mpi_fortran_handle,
                                  o->name, &id, &r, &n));
  /* The backend builds the next communicator of this thread on the staged MPI_Comm. */
  UL_CHECK(o->bootstrap_stage(impl, mpi_fortran_handle, 1));
  ul_result_t rc = ul_comm_init_rank(comm, config, n, id, r);
  o->bootstrap_stage(impl, mpi_fortran_handle, 0);
  return rc;
}
