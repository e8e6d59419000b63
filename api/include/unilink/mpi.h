/**
 * @file mpi.h
 * @brief unilink on an application's own MPI communicator (mpi backend).
 *
 * Include this header only in code that already uses MPI. libunilink itself never
 * links MPI: the mpi backend is the plugin libunilink-mpi.so, and the communicator
 * travels to it as its Fortran handle (MPI_Comm_c2f), which is an integer in every
 * MPI implementation. The application and the plugin must use the same MPI
 * (Open MPI or MPICH); a mismatch is reported as ::UL_ERR_VERSION.
 *
 * For jobs that do not otherwise use MPI, ul_bootstrap_mpi() in unilink.h needs no
 * MPI header at all.
 */
#ifndef UNILINK_MPI_H
#define UNILINK_MPI_H

#include <mpi.h>
#include <stdint.h>
#include <unilink/unilink.h>

#ifdef __cplusplus
extern "C" {
#endif

/** MPI implementation this header was compiled against: 1 Open MPI, 2 MPICH
 *  (and derivatives defining MPICH_VERSION), 3 other. */
#if defined(OPEN_MPI) && OPEN_MPI
#define UL_MPI_IMPL 1
#elif defined(MPICH_VERSION)
#define UL_MPI_IMPL 2
#else
#define UL_MPI_IMPL 3
#endif

/** Implementation of ul_comm_init_mpi(); call that instead.
 *  @p impl is UL_MPI_IMPL, @p mpi_fortran_handle is MPI_Comm_c2f(mpicomm). */
UL_API ul_result_t ul_comm_init_mpi_handle(ul_comm_t *comm, const ul_config_t *config, int impl,
                                           int64_t mpi_fortran_handle);

/**
 * Create a unilink communicator on the mpi backend over the ranks of @p mpicomm
 * (collective over @p mpicomm; rank and size are those of @p mpicomm). unilink
 * duplicates @p mpicomm, so the application's traffic and unilink's never mix and
 * @p mpicomm may be freed afterwards. MPI must be initialised (MPI_Init_thread with
 * MPI_THREAD_MULTIPLE if unilink streams will be used).
 * @p config may be NULL; its backend, if set, must be "mpi" or "auto".
 * @return UL_OK; UL_ERR_INVALID_ARG (NULL comm, MPI_COMM_NULL, an intercommunicator,
 *         a backend other than mpi in config); UL_ERR_UNAVAILABLE (no mpi plugin);
 *         UL_ERR_VERSION (plugin built for another MPI); UL_ERR_TIMEOUT; the errors
 *         of ul_comm_init_rank. On error *comm is NULL.
 */
static inline ul_result_t ul_comm_init_mpi(ul_comm_t *comm, const ul_config_t *config,
                                           MPI_Comm mpicomm) {
  return ul_comm_init_mpi_handle(comm, config, UL_MPI_IMPL, (int64_t)MPI_Comm_c2f(mpicomm));
}

#ifdef __cplusplus
}
#endif
#endif /* UNILINK_MPI_H */
