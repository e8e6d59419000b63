/* Regression test, run under mpirun -np 2: communicator setup while the control
 * duplicate (MPI_Comm_idup) is still incomplete. Rank 1 enters MPI_Comm_idup 50 ms late
 * (this program interposes it through MPI's profiling interface), so rank 0 waits in its
 * polling loop well past the 5 ms liveness period and looks for revoke notices. Before the
 * fix it probed the half-built control communicator and crashed inside MPI_Iprobe (seen in
 * 2 of 3 side-by-side bench runs on a loaded machine). Exits 0 when every rank created,
 * used and destroyed its communicators. */
#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <unilink/mpi.h>
#include <unilink/unilink.h>

int MPI_Comm_idup(MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request) {
  int world = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &world);
  if (world == 1) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return PMPI_Comm_idup(comm, newcomm, request);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, fails = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int round = 0; round < 3; round++) {
    ul_config_t cfg = UL_CONFIG_INIT;
    cfg.backend = "mpi";
    cfg.timeout_ms = 60000;
    ul_comm_t comm = NULL;
    ul_result_t rc = ul_comm_init_mpi(&comm, &cfg, MPI_COMM_WORLD);
    if (rc != UL_OK) {
      fprintf(stderr, "[rank %d] round %d: init: %s: %s\n", rank, round, ul_result_name(rc),
              ul_last_error());
      fails++;
      break;
    }
    int v = rank + 1;
    rc = ul_allreduce(&v, &v, 1, UL_INT32, UL_SUM, comm, NULL);
    if (rc != UL_OK || v != 3) {
      fprintf(stderr, "[rank %d] round %d: allreduce %s, got %d (want 3)\n", rank, round,
              ul_result_name(rc), v);
      fails++;
    }
    ul_comm_destroy(comm);
  }
  int all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_idup_race: %s\n", all ? "FAILED" : "3 rounds passed on every rank");
  MPI_Finalize();
  return all ? 1 : 0;
}
