/* One process-wide fact, read by launcher plugins at exit: has any communicator of this
 * process, on any backend, seen a peer lost, a timeout, a revoke or an abort? A job
 * bootstrapped through MPI (ul_bootstrap_mpi, even with the host backend doing the
 * work) must then not call MPI_Finalize from the mpi plugin's exit handler: it waits for
 * every process of the job, and one is gone (issue 16, D7). */
#include "failure_seen.h"

#include <unilink/backend.h>

static int failure_seen;

void ul__failure_note(ul_result_t rc) {
  if (rc == UL_ERR_TIMEOUT || rc == UL_ERR_PEER_LOST || rc == UL_ERR_ABORTED ||
      rc == UL_ERR_REVOKED)
    __atomic_store_n(&failure_seen, 1, __ATOMIC_RELEASE);
}

UL_API int ul_backend_failure_seen(void) {
  return __atomic_load_n(&failure_seen, __ATOMIC_ACQUIRE);
}
