/* The cuda backend under the fake CUDA runtime: process ranks in forked children (exact
 * results, no leaks, one-sided get, window registration agreement). See
 * test_cuda_backend.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unilink/unilink.h>

#include "test_cuda_backend.h"

/* --------------------------------------------------------- process ranks */

/* Run body(rank, nranks, comm, arg) in n forked children, each with its initialised
 * communicator; fail on any nonzero exit. Rank 0 makes the unique id and sends it to the
 * others through pipes. */
typedef int (*proc_body_t)(int rank, int nranks, ul_comm_t comm, void *arg);

static int proc_child(int rank, int nranks, int rfd, int *wfds, proc_body_t body, void *arg) {
  ul_unique_id_t id;
  if (rank == 0) {
    if (ul_get_unique_id("cuda", &id) != UL_OK) return 90;
    for (int r = 1; r < nranks; r++)
      if (write(wfds[r], &id, sizeof id) != (ssize_t)sizeof id) return 91;
  } else if (read(rfd, &id, sizeof id) != (ssize_t)sizeof id) {
    return 92;
  }
  ul_config_t cfg = cfg_on(rank);
  ul_comm_t comm = NULL;
  ul_result_t rc = ul_comm_init_rank(&comm, &cfg, nranks, id, rank);
  if (rc != UL_OK) {
    fprintf(stderr, "rank %d: init: %s: %s\n", rank, ul_result_name(rc), ul_last_error());
    return 93;
  }
  return body(rank, nranks, comm, arg);
}

static void run_procs(int n, proc_body_t body, void *arg) {
  int fds[MAXR][2];
  pid_t pid[MAXR];
  for (int r = 0; r < n; r++) cr_assert_eq(pipe(fds[r]), 0);
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    cr_assert_neq(pid[r], -1);
    if (pid[r] == 0) {
      /* Keep only this rank's read end (and rank 0's write ends), so that a rank 0 that
       * dies before sending the id gives the others EOF, not a hang. */
      int w[MAXR];
      for (int q = 0; q < n; q++) {
        w[q] = r == 0 ? fds[q][1] : -1;
        if (r != 0) close(fds[q][1]);
        if (q != r) close(fds[q][0]);
      }
      alarm(TIMEOUT_MS / 1000 * 3); /* a hung rank ends as a failure, never an orphan */
      _exit(proc_child(r, n, fds[r][0], w, body, arg));
    }
  }
  for (int r = 0; r < n; r++) close(fds[r][0]), close(fds[r][1]);
  for (int r = 0; r < n; r++) {
    int st = 0;
    cr_assert_eq(waitpid(pid[r], &st, 0), pid[r]);
    cr_assert(WIFEXITED(st), "rank %d died (signal %d)", r, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    cr_assert_eq(WEXITSTATUS(st), 0, "rank %d exited with %d (see its stderr)", r,
                 WEXITSTATUS(st));
  }
}

/* Exact allreduce between processes (IPC on p2p, shm shadows on staged), then destroy;
 * afterwards the process holds no CUDA allocation, registration, IPC mapping or stream. */
static int proc_leak_body(int rank, int nranks, ul_comm_t comm, void *arg) {
  (void)arg;
  rank_ctx_t x;
  memset(&x, 0, sizeof x);
  x.rank = rank;
  x.nranks = nranks;
  x.device = rank;
  x.comm = comm;
  ar_arg_t a = {300001, 2, 0};
  x.arg = &a;
  ar_body(&x);
  if (x.bad) {
    fprintf(stderr, "%s\n", x.why);
    return 10;
  }
  ul_call_info_t info = {.struct_size = sizeof(ul_call_info_t)};
  if (ul_comm_last_call(comm, &info) != UL_OK) return 11;
  const char *want = getenv("UNILINK_CUDA_PATH");
  if (want && strcmp(info.path, want) != 0) {
    fprintf(stderr, "rank %d: path %s, want %s\n", rank, info.path, want);
    return 12;
  }
  if (ul_comm_destroy(comm) != UL_OK) return 13;
  counts_t zero = {0, 0, 0, 0, 0, 0};
  char buf[256];
  if (!counts_equal(zero, counts_now(), buf, sizeof buf)) {
    fprintf(stderr, "rank %d after ul_comm_destroy (%s path): %s\n", rank, info.path, buf);
    return 14;
  }
  return 0;
}

Test(cuda_backend, processes_p2p_exact_and_no_leaks) {
  setenv("UNILINK_CUDA_PATH", "p2p", 1);
  run_procs(2, proc_leak_body, NULL);
}

Test(cuda_backend, processes_staged_exact_and_no_leaks) {
  setenv("UNILINK_CUDA_PATH", "staged", 1);
  run_procs(2, proc_leak_body, NULL);
}

/* ul_get between processes on the staged path (no peer access): the peer's export is
 * opened on the peer's GPU; destroy closes it. */
static int proc_get_body(int rank, int nranks, ul_comm_t comm, void *arg) {
  (void)arg;
  rank_ctx_t x;
  memset(&x, 0, sizeof x);
  x.rank = rank;
  x.nranks = nranks;
  x.device = rank;
  x.comm = comm;
  staged_get_body(&x);
  if (x.bad) {
    fprintf(stderr, "%s\n", x.why);
    return 30;
  }
  if (ul_comm_destroy(comm) != UL_OK) return 31;
  counts_t zero = {0, 0, 0, 0, 0, 0};
  char buf[256];
  if (!counts_equal(zero, counts_now(), buf, sizeof buf)) {
    fprintf(stderr, "rank %d after ul_comm_destroy: %s\n", rank, buf);
    return 32;
  }
  return 0;
}

Test(cuda_backend, processes_staged_get) {
  setenv("FAKEGPU_P2P", "no", 1);
  run_procs(2, proc_get_body, NULL);
}

/* ------------------- M6: window registration fails on every rank at once */

/* Rank 1's window is pinned host memory, which CUDA IPC cannot export: every rank must
 * get an error promptly (not rank 1 alone while rank 0 waits for its first collective),
 * and the communicator stays usable. */
static int proc_window_agree_body(int rank, int nranks, ul_comm_t comm, void *arg) {
  (void)arg;
  void *mem = NULL;
  if (rank == 0) {
    if (ul_mem_alloc(comm, 65536, &mem) != UL_OK) return 20;
  } else if (cudaSetDevice(rank) != cudaSuccess || cudaMallocHost(&mem, 65536) != cudaSuccess) {
    return 21;
  }
  ul_window_t win = NULL;
  double t0 = now_ms();
  ul_result_t rc = ul_window_register(comm, mem, 65536, &win);
  double dt = now_ms() - t0;
  if (rc == UL_OK) {
    fprintf(stderr, "rank %d: ul_window_register succeeded though rank 1 cannot export\n", rank);
    return 22;
  }
  if (dt > TIMEOUT_MS / 4) {
    fprintf(stderr, "rank %d: the failure took %.0f ms\n", rank, dt);
    return 23;
  }
  if (rank == 0 && !strstr(ul_comm_last_error(comm), "rank 1")) {
    fprintf(stderr, "rank 0: the error does not name rank 1: %s\n", ul_comm_last_error(comm));
    return 24;
  }
  /* Still in step: a collective works. */
  rank_ctx_t x;
  memset(&x, 0, sizeof x);
  x.rank = rank;
  x.nranks = nranks;
  x.device = rank;
  x.comm = comm;
  ar_arg_t a = {1000, 1, 0};
  x.arg = &a;
  ar_body(&x);
  if (x.bad) {
    fprintf(stderr, "%s\n", x.why);
    return 25;
  }
  if (rank == 0) ul_mem_free(comm, mem);
  else cudaFreeHost(mem);
  return ul_comm_destroy(comm) == UL_OK ? 0 : 26;
}

Test(cuda_backend, window_register_failure_agreed) {
  setenv("UNILINK_CUDA_PATH", "p2p", 1);
  run_procs(2, proc_window_agree_body, NULL);
}
