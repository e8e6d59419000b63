/* Process ranks for Criterion tests: fork()ed children, each running one rank and
 * reporting through its exit status (0 = ok, otherwise the step that failed, with a
 * message on stderr). Shared by the tests that need ranks in separate address spaces
 * (single copy, zero copy, bounce). */
#ifndef UL_TEST_FORK_RANKS_H
#define UL_TEST_FORK_RANKS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unilink/unilink.h>

/* In a rank function with `me` in scope: fail step k with a message. */
#define STEP(k, cond, ...)                                       \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "rank %d step %d: ", me, k);               \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);         \
      return k;                                                  \
    }                                                            \
  } while (0)

/* Whether sibling processes may use process_vm_readv on each other (Yama ptrace scope:
 * 1 allows it only to ancestors or with CAP_SYS_PTRACE, 2 and 3 never). */
static inline int fork_ranks_cma_allowed(void) {
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  int scope = 0;
  if (f) {
    if (fscanf(f, "%d", &scope) != 1) scope = 0;
    fclose(f);
  }
  return !(scope >= 2 || (scope == 1 && geteuid() != 0));
}

/* Run fn(id, n, rank) in n forked processes on one unique id of `backend`; the test
 * fails naming a rank whose process did not exit with 0. */
static inline void fork_ranks_run(const char *backend, int n,
                                  int (*fn)(ul_unique_id_t, int, int)) {
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id(backend, &id), UL_OK, "%s", ul_last_error());
  pid_t pids[8];
  cr_assert(n <= 8, "at most 8 ranks");
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    cr_assert_neq(pids[r], -1);
    if (pids[r] == 0) _exit(fn(id, n, r));
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = r + 1;
  }
  cr_assert_eq(bad, 0, "rank %d failed (its message is above)", bad - 1);
}

/* A rank's communicator on the default backend (60 s timeout), step 1 on failure. */
static inline int fork_ranks_comm_up(ul_unique_id_t id, int n, int me, ul_comm_t *c) {
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = 60000;
  STEP(1, ul_comm_init_rank(c, &cfg, n, id, me) == UL_OK, "init: %s", ul_last_error());
  return 0;
}

/* The closing barrier (step 2 on failure), then the communicator goes. */
static inline int fork_ranks_comm_down(ul_comm_t c, int me) {
  STEP(2, ul_barrier(c, NULL) == UL_OK, "barrier: %s", ul_comm_last_error(c));
  ul_comm_destroy(c);
  return 0;
}

#endif
