// UNILINK_TEST_LINK_SHARED
/* Host backend, process ranks: collectives on ul_mem_alloc buffers read and write peers'
 * buffers in place (path "zero-copy"), on private buffers through the kernel ("cma"),
 * and on a mix of both ("zero-copy+cma" where some peers' buffers are mapped). With a
 * core per rank, private or mixed buffers bounce through the scratch instead for the
 * collectives that can (decision 0014: algorithm "bounce", path "shm-copy"), except the
 * copy collectives while all ranks' buffers fit in the last-level cache (pinned here
 * with UNILINK_LLC_BYTES: 0, unknown, or 1 GiB, which holds them). Results
 * are checked exactly for every direct collective, and buffers freed and allocated
 * again between calls must be mapped afresh (never a stale mapping of the old ones). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unilink/unilink.h>

#include "fork_ranks.h"

#define CHECK(cond, ...) STEP(1, cond, __VA_ARGS__)

/* Large enough for the direct algorithms (above the staged one-shot limit). */
#define COUNT ((size_t)70001)

enum { MEM_UL, MEM_MALLOC, MEM_MIXED };

static int use_ul(int mode, int rank) { return mode == MEM_UL || (mode == MEM_MIXED && rank == 0); }

static void *buf_alloc(ul_comm_t c, int ul, size_t bytes) {
  void *p = NULL;
  if (ul) return ul_mem_alloc(c, bytes, &p) == UL_OK ? p : NULL;
  return malloc(bytes);
}

static void buf_free(ul_comm_t c, int ul, void *p) {
  if (ul) ul_mem_free(c, p);
  else free(p);
}

static int32_t val(int rank, size_t i) { return (int32_t)((rank + 1) * 5 + (int)(i % 7)); }

static int run_in_cache; /* UNILINK_LLC_BYTES holds every buffer; forked ranks inherit it */

/* Whether this call bounces: some buffer private, a core per rank, and a collective
 * of the bounce family (not reduce, gather, scatter), unless it only copies and the
 * cache holds every rank's buffers. */
static int bounces(int mode, int n, const char *what) {
  int copies =
      !strcmp(what, "allgather") || !strcmp(what, "alltoall") || !strcmp(what, "broadcast");
  return mode != MEM_UL && n <= sysconf(_SC_NPROCESSORS_ONLN) && strcmp(what, "reduce") != 0 &&
         strcmp(what, "gather") != 0 && strcmp(what, "scatter") != 0 && !(copies && run_in_cache);
}

/* The path this rank's last call took must be `want` (or the bounce's). */
static int path_is(ul_comm_t c, int me, int n, int mode, const char *what, const char *want) {
  ul_call_info_t info = {.struct_size = sizeof info};
  CHECK(ul_comm_last_call(c, &info) == UL_OK, "last_call");
  const char *algo = "direct";
  if (bounces(mode, n, what)) algo = "bounce", want = "shm-copy";
  CHECK(strcmp(info.algorithm, algo) == 0, "%s: algorithm %s, want %s", what, info.algorithm,
        algo);
  CHECK(strcmp(info.path, want) == 0, "%s: path '%s', want '%s' (reason: %s)", what, info.path,
        want, info.reason);
  return 0;
}

static const char *expected_path(int mode, int me, int n) {
  if (mode == MEM_UL) return "zero-copy";
  if (mode == MEM_MALLOC) return "cma";
  /* mixed: only rank 0's buffers are mapped by the others */
  if (me == 0) return "cma";
  return n == 2 ? "zero-copy" : "zero-copy+cma";
}

static int run_collectives(ul_comm_t c, int me, int n, int mode) {
  int ul = use_ul(mode, me);
  size_t big = COUNT * (size_t)n;
  const char *want = expected_path(mode, me, n);
  for (int round = 0; round < 2; round++) {
    /* round 1 allocates anew: the peers must map the new segments, not reuse old ones */
    int32_t *s = buf_alloc(c, ul, big * 4), *r = buf_alloc(c, ul, big * 4);
    CHECK(s && r, "allocation");
    for (size_t i = 0; i < big; i++) s[i] = val(me, i) + round, r[i] = -1;

    CHECK(ul_allreduce(s, r, COUNT, UL_INT32, UL_SUM, c, NULL) == UL_OK, "allreduce: %s",
          ul_comm_last_error(c));
    if (path_is(c, me, n, mode, "allreduce", want)) return 1;
    for (size_t i = 0; i < COUNT; i++) {
      int32_t e = 0;
      for (int p = 0; p < n; p++) e += val(p, i) + round;
      CHECK(r[i] == e, "allreduce[%zu] = %d, want %d", i, r[i], e);
    }
    /* in place */
    CHECK(ul_allreduce(s, s, COUNT, UL_INT32, UL_MAX, c, NULL) == UL_OK, "allreduce in place");
    for (size_t i = 0; i < COUNT; i++)
      CHECK(s[i] == val(n - 1, i) + round, "max[%zu] = %d", i, s[i]);

    for (size_t i = 0; i < big; i++) s[i] = val(me, i) + round;
    CHECK(ul_reduce_scatter(s, r, COUNT, UL_INT32, UL_SUM, c, NULL) == UL_OK, "reduce_scatter");
    if (path_is(c, me, n, mode, "reduce_scatter", want)) return 1;
    for (size_t i = 0; i < COUNT; i++) {
      int32_t e = 0;
      for (int p = 0; p < n; p++) e += val(p, (size_t)me * COUNT + i) + round;
      CHECK(r[i] == e, "reduce_scatter[%zu] = %d, want %d", i, r[i], e);
    }

    CHECK(ul_allgather(s, r, COUNT, UL_INT32, c, NULL) == UL_OK, "allgather");
    if (path_is(c, me, n, mode, "allgather", want)) return 1;
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < COUNT; i++)
        CHECK(r[(size_t)p * COUNT + i] == val(p, i) + round, "allgather block %d [%zu]", p, i);

    CHECK(ul_alltoall(s, r, COUNT, UL_INT32, c, NULL) == UL_OK, "alltoall");
    if (path_is(c, me, n, mode, "alltoall", want)) return 1;
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < COUNT; i++)
        CHECK(r[(size_t)p * COUNT + i] == val(p, (size_t)me * COUNT + i) + round,
              "alltoall block %d [%zu]", p, i);

    int root = n - 1;
    CHECK(ul_broadcast(s, r, COUNT, UL_INT32, root, c, NULL) == UL_OK, "broadcast");
    if (path_is(c, me, n, mode, "broadcast", want)) return 1;
    for (size_t i = 0; i < COUNT; i++)
      CHECK(r[i] == val(root, i) + round, "broadcast[%zu]", i);

    for (size_t i = 0; i < big; i++) r[i] = -1;
    CHECK(ul_reduce(s, r, COUNT, UL_INT32, UL_SUM, root, c, NULL) == UL_OK, "reduce");
    if (path_is(c, me, n, mode, "reduce", want)) return 1;
    if (me == root)
      for (size_t i = 0; i < COUNT; i++) {
        int32_t e = 0;
        for (int p = 0; p < n; p++) e += val(p, i) + round;
        CHECK(r[i] == e, "reduce[%zu] = %d, want %d", i, r[i], e);
      }

    CHECK(ul_gather(s, r, COUNT, UL_INT32, root, c, NULL) == UL_OK, "gather");
    if (path_is(c, me, n, mode, "gather", want)) return 1;
    if (me == root)
      for (int p = 0; p < n; p++)
        for (size_t i = 0; i < COUNT; i++)
          CHECK(r[(size_t)p * COUNT + i] == val(p, i) + round, "gather block %d [%zu]", p, i);

    CHECK(ul_scatter(s, r, COUNT, UL_INT32, root, c, NULL) == UL_OK, "scatter");
    if (path_is(c, me, n, mode, "scatter", want)) return 1;
    for (size_t i = 0; i < COUNT; i++)
      CHECK(r[i] == val(root, (size_t)me * COUNT + i) + round, "scatter[%zu]", i);

    /* peers must be done with our buffers before we free them */
    CHECK(ul_barrier(c, NULL) == UL_OK, "barrier");
    buf_free(c, ul, s);
    buf_free(c, ul, r);
  }
  return 0;
}

static int rank_main(ul_unique_id_t id, int n, int me, int mode) {
  ul_comm_t c;
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = 30000;
  if (ul_comm_init_rank(&c, &cfg, n, id, me) != UL_OK) {
    fprintf(stderr, "rank %d: init: %s\n", me, ul_last_error());
    return 1;
  }
  int bad = run_collectives(c, me, n, mode);
  ul_comm_destroy(c);
  return bad;
}

static int run_mode; /* the forked ranks inherit it */
static int rank_entry(ul_unique_id_t id, int n, int me) { return rank_main(id, n, me, run_mode); }

static void run_processes(int n, int mode, int in_cache) {
  run_mode = mode;
  run_in_cache = in_cache;
  setenv("UNILINK_LLC_BYTES", in_cache ? "1073741824" : "0", 1);
  fork_ranks_run("host", n, rank_entry);
  unsetenv("UNILINK_LLC_BYTES");
}

static void need_cma(void) {
  /* The direct algorithms between processes need process_vm_readv (ptrace scope). */
  if (!fork_ranks_cma_allowed())
    cr_skip_test("kernel.yama.ptrace_scope forbids process_vm_readv between sibling ranks");
}

Test(host_zero_copy, ul_mem_2, .timeout = 120) { need_cma(); run_processes(2, MEM_UL, 0); }
Test(host_zero_copy, ul_mem_3, .timeout = 120) { need_cma(); run_processes(3, MEM_UL, 0); }
Test(host_zero_copy, malloc_2, .timeout = 120) { need_cma(); run_processes(2, MEM_MALLOC, 0); }
Test(host_zero_copy, mixed_2, .timeout = 120) { need_cma(); run_processes(2, MEM_MIXED, 0); }
Test(host_zero_copy, mixed_3, .timeout = 120) { need_cma(); run_processes(3, MEM_MIXED, 0); }
/* The copy collectives keep single copies; broadcast splits the copying with the root. */
Test(host_zero_copy, malloc_2_in_cache, .timeout = 120) {
  need_cma();
  run_processes(2, MEM_MALLOC, 1);
}
Test(host_zero_copy, mixed_2_in_cache, .timeout = 120) {
  need_cma();
  run_processes(2, MEM_MIXED, 1);
}
Test(host_zero_copy, mixed_3_in_cache, .timeout = 120) {
  need_cma();
  run_processes(3, MEM_MIXED, 1);
}
