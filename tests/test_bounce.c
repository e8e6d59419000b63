/* Bounce algorithms (algo_bounce.c): process ranks whose buffers peers cannot map move
 * cache-sized pieces through the shared scratch. Checked exactly on every collective
 * they serve: several pieces with a short last one, outputs large enough for streaming
 * stores, in place, averages, counts smaller than the rank count (empty slices), and
 * which algorithm and path the core reports for private, mixed and exported buffers.
 * Ranks are fork()ed children reporting through their exit status (0 = ok, otherwise
 * the step that failed, with a message on stderr). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fork_ranks.h"
#include "generic/generic_internal.h" /* piece_bytes, l2_bytes */
#include "host_count.h"
#include "ul_core.h"


/* Integers below 2^24: every sum and average of a few is exact in float. */
static float val(int rank, size_t i) { return (float)((rank + 1) * 8 + (int)(i % 7)); }

static ul_call_info_t last_call(ul_comm_t c) {
  ul_call_info_t info = {.struct_size = sizeof info};
  ul_comm_last_call(c, &info);
  return info;
}

/* The algorithm and path of the last call, when want_algo is not NULL. */
static int check_call(ul_comm_t c, int me, const char *what, const char *want_algo,
                      const char *want_path) {
  if (!want_algo) return 0;
  ul_call_info_t info = last_call(c);
  STEP(90, strcmp(info.algorithm, want_algo) == 0 && strcmp(info.path, want_path) == 0,
       "%s: algorithm %s path %s, want %s %s (%s)", what, info.algorithm, info.path, want_algo,
       want_path, info.reason);
  return 0;
}

/* A buffer of n floats from malloc, or from ul_mem_alloc when exported. */
static float *buf_new(ul_comm_t c, size_t n, int exported) {
  if (!exported) return malloc(n * sizeof(float) + 1);
  void *p = NULL;
  return ul_mem_alloc(c, n * sizeof(float) + 1, &p) == UL_OK ? (float *)p : NULL;
}

static void buf_free(ul_comm_t c, float *p, int exported) {
  if (exported) ul_mem_free(c, p);
  else free(p);
}

/* Every collective of the bounce family on `count` elements a rank (allreduce and
 * broadcast: the message), out of place and in place, checked exactly. want_algo NULL:
 * whatever the core picks. */
static int all_colls(ul_comm_t c, int me, int n, size_t count, int exported,
                     const char *want_algo, const char *want_path) {
  size_t big = count * (size_t)n;
  float *s = buf_new(c, big, exported), *r = buf_new(c, big, exported);
  STEP(10, s && r, "out of memory");
  /* allreduce, sum and avg, out of place then in place */
  for (int avg = 0; avg < 2; avg++)
    for (int inplace = 0; inplace < 2; inplace++) {
      for (size_t i = 0; i < count; i++) s[i] = val(me, i), r[i] = -1;
      float *out = inplace ? s : r;
      ul_result_t rc = ul_allreduce(s, out, count, UL_FP32, avg ? UL_AVG : UL_SUM, c, NULL);
      STEP(11, rc == UL_OK, "allreduce: %s", ul_comm_last_error(c));
      if (check_call(c, me, "allreduce", want_algo, want_path)) return 90;
      for (size_t i = 0; i < count; i++) {
        float e = 0;
        for (int p = 0; p < n; p++) e += val(p, i);
        if (avg) e /= (float)n;
        STEP(12, out[i] == e, "allreduce avg=%d in place=%d [%zu] = %g, want %g", avg, inplace,
             i, out[i], e);
      }
    }
  /* reduce_scatter: block me of every rank's n blocks */
  for (int inplace = 0; inplace < 2; inplace++) {
    for (size_t i = 0; i < big; i++) s[i] = val(me, i);
    float *out = inplace ? s + (size_t)me * count : r;
    ul_result_t rc = ul_reduce_scatter(s, out, count, UL_FP32, UL_SUM, c, NULL);
    STEP(13, rc == UL_OK, "reduce_scatter: %s", ul_comm_last_error(c));
    if (check_call(c, me, "reduce_scatter", want_algo, want_path)) return 90;
    for (size_t i = 0; i < count; i++) {
      float e = 0;
      for (int p = 0; p < n; p++) e += val(p, (size_t)me * count + i);
      STEP(14, out[i] == e, "reduce_scatter in place=%d [%zu] = %g, want %g", inplace, i,
           out[i], e);
    }
  }
  /* allgather */
  for (int inplace = 0; inplace < 2; inplace++) {
    float *in = inplace ? r + (size_t)me * count : s;
    for (size_t i = 0; i < big; i++) r[i] = -1;
    for (size_t i = 0; i < count; i++) in[i] = val(me, i);
    ul_result_t rc = ul_allgather(in, r, count, UL_FP32, c, NULL);
    STEP(15, rc == UL_OK, "allgather: %s", ul_comm_last_error(c));
    if (check_call(c, me, "allgather", want_algo, want_path)) return 90;
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++)
        STEP(16, r[(size_t)p * count + i] == val(p, i), "allgather in place=%d block %d [%zu] = %g",
             inplace, p, i, r[(size_t)p * count + i]);
  }
  /* broadcast from the last rank, out of place then in place */
  for (int inplace = 0; inplace < 2; inplace++) {
    int root = n - 1;
    for (size_t i = 0; i < count; i++) s[i] = me == root ? val(root, i + 3) : -2, r[i] = -1;
    float *out = inplace ? s : r;
    ul_result_t rc = ul_broadcast(s, out, count, UL_FP32, root, c, NULL);
    STEP(17, rc == UL_OK, "broadcast: %s", ul_comm_last_error(c));
    if (check_call(c, me, "broadcast", want_algo, want_path)) return 90;
    for (size_t i = 0; i < count; i++)
      STEP(18, out[i] == val(root, i + 3), "broadcast in place=%d [%zu] = %g", inplace, i, out[i]);
  }
  /* alltoall: block p of my input goes to rank p */
  for (size_t i = 0; i < big; i++) s[i] = val(me, i) * 16 + (float)(i / count), r[i] = -1;
  ul_result_t rc = ul_alltoall(s, r, count, UL_FP32, c, NULL);
  STEP(19, rc == UL_OK, "alltoall: %s", ul_comm_last_error(c));
  if (check_call(c, me, "alltoall", want_algo, want_path)) return 90;
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < count; i++) {
      size_t si = (size_t)me * count + i;
      STEP(20, r[(size_t)p * count + i] == val(p, si) * 16 + (float)me, "alltoall from %d [%zu] = %g",
           p, i, r[(size_t)p * count + i]);
    }
  buf_free(c, s, exported);
  buf_free(c, r, exported);
  return 0;
}


/* 2 ranks, private buffers, chosen by the core: several pieces (a channel chunk is
 * 256 KiB) with a short last one, then 3 MiB a rank (outputs of 6 MiB and more are
 * stored streaming). */
static int rank_private(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  int bad = all_colls(c, me, n, 3 * 65536 + 13, 0, "bounce", "shm-copy");
  if (!bad) bad = all_colls(c, me, n, (size_t)3 << 18, 0, "bounce", "shm-copy");
  if (bad) return bad;
  return fork_ranks_comm_down(c, me);
}

/* 3 ranks, forced: counts below the rank count leave slices empty. */
static int rank_forced_small(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  setenv("UNILINK_ALGO",
         "allreduce:bounce,reduce_scatter:bounce,allgather:bounce,broadcast:bounce,"
         "alltoall:bounce",
         1);
  static const size_t counts[] = {1, 2, 3, 4, 65536 + 1};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    int bad = all_colls(c, me, n, counts[k], 0, "bounce", "shm-copy");
    if (bad) return bad;
  }
  unsetenv("UNILINK_ALGO");
  return fork_ranks_comm_down(c, me);
}

/* Rank 0's buffers from ul_mem_alloc, rank 1's from malloc: peers cannot map all of
 * them, so the direct algorithms hand over to bounce on both ranks alike. */
static int rank_mixed(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  int bad = all_colls(c, me, n, 3 * 65536 + 13, me == 0, "bounce", "shm-copy");
  if (bad) return bad;
  return fork_ranks_comm_down(c, me);
}

/* Every buffer from ul_mem_alloc: the direct algorithms read and write them mapped. */
static int rank_exported(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  int bad = all_colls(c, me, n, 3 * 65536 + 13, 1, "direct", "zero-copy");
  if (bad) return bad;
  return fork_ranks_comm_down(c, me);
}

/* UNILINK_TUNING_FILE's bounce_from (1 MiB, from the test below): private buffers below
 * it keep the direct algorithm's single copies, from it on they bounce; exact either way. */
static int rank_tuned_bounce_from(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  /* 256 KiB + 52 B a rank: every collective's largest buffer is below 1 MiB */
  int bad = all_colls(c, me, n, 65536 + 13, 0, "direct", "cma");
  if (bad) return bad;
  ul_call_info_t info = last_call(c);
  STEP(40, strstr(info.reason, "bounce_from 1048576") != NULL, "reason: %s", info.reason);
  /* 1 MiB + 52 B a rank: every one at or above it */
  bad = all_colls(c, me, n, ((size_t)1 << 18) + 13, 0, "bounce", "shm-copy");
  if (bad) return bad;
  return fork_ranks_comm_down(c, me);
}

/* UNILINK_ALGO with a bare algorithm name applies to every collective that has it (as
 * NCCL_ALGO=Ring does); one no collective has is refused by the call, naming it. */
static int rank_bare_name(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  setenv("UNILINK_ALGO", "bounce", 1);
  int bad = all_colls(c, me, n, 100, 0, "bounce", "shm-copy");
  if (bad) return bad;
  STEP(30, ul_barrier(c, NULL) == UL_OK, "barrier (has no bounce): %s", ul_comm_last_error(c));
  setenv("UNILINK_ALGO", "allreduce:direct,bounce", 1); /* the named collective wins */
  float x = 1, y = 0;
  STEP(31, ul_allreduce(&x, &y, 1, UL_FP32, UL_SUM, c, NULL) == UL_OK, "allreduce: %s",
       ul_comm_last_error(c));
  if (check_call(c, me, "allreduce:direct", "direct", "cma")) return 90;
  setenv("UNILINK_ALGO", "bouncy", 1);
  ul_result_t rc = ul_allreduce(&x, &y, 1, UL_FP32, UL_SUM, c, NULL);
  STEP(32, rc == UL_ERR_INVALID_ARG && strstr(ul_comm_last_error(c), "'bouncy'"),
       "unknown bare name: %s: %s", ul_result_name(rc), ul_comm_last_error(c));
  unsetenv("UNILINK_ALGO");
  return fork_ranks_comm_down(c, me);
}

/* Which path private buffers take needs single copy to be possible at all (else the
 * direct algorithms are never chosen and bounce is picked directly; same result). */
/* Cache size unknown (UNILINK_LLC_BYTES=0): the copy collectives bounce too; the cache
 * rule is tested below. */
Test(bounce, private_buffers_every_collective_exact, .timeout = 180) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one CPU: 2 ranks keep single copies");
  setenv("UNILINK_LLC_BYTES", "0", 1);
  fork_ranks_run("host", 2, rank_private);
  unsetenv("UNILINK_LLC_BYTES");
}

Test(bounce, forced_counts_below_rank_count, .timeout = 180) {
  fork_ranks_run("host", 3, rank_forced_small);
}

Test(bounce, mixed_buffers_bounce_on_every_rank, .timeout = 180) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one CPU: 2 ranks keep single copies");
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids single copy: no direct algorithm");
  setenv("UNILINK_LLC_BYTES", "0", 1);
  fork_ranks_run("host", 2, rank_mixed);
  unsetenv("UNILINK_LLC_BYTES");
}

Test(bounce, exported_buffers_stay_zero_copy, .timeout = 180) {
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids single copy: no direct algorithm");
  fork_ranks_run("host", 2, rank_exported);
}

Test(bounce, bare_algorithm_name_applies_to_every_collective, .timeout = 120) {
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids single copy: no direct algorithm");
  fork_ranks_run("host", 2, rank_bare_name);
}

/* Run n ranks of fn with UNILINK_TUNING_FILE holding bounce_from 1 MiB for every
 * collective at n ranks, and 0 at n + 1 (another rank count: ignored). */
static void run_with_bounce_from_1mib(int n, int (*fn)(ul_unique_id_t, int, int)) {
  char path[] = "/tmp/ul_tuning_bounce_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  cr_assert(f);
  fprintf(f, "# the five collectives, %d process ranks: bounce from 1 MiB\n", n);
  static const char *colls[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                "alltoall"};
  for (int i = 0; i < 5; i++) fprintf(f, "%s %d process bounce_from 1048576\n", colls[i], n);
  fprintf(f, "alltoall %d process bounce_from 0   # another rank count: ignored\n", n + 1);
  fclose(f);
  setenv("UNILINK_TUNING_FILE", path, 1);
  fork_ranks_run("host", n, fn);
  unsetenv("UNILINK_TUNING_FILE");
  unlink(path);
}

Test(bounce, tuning_file_keeps_single_copies_below_bounce_from, .timeout = 180) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one CPU: 2 ranks keep single copies");
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids single copy: no direct algorithm");
  run_with_bounce_from_1mib(2, rank_tuned_bounce_from);
}

/* Ranks outnumbering CPUs keep single copies at 1 MiB without a measurement. */
static int rank_oversubscribed_untuned(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  int bad = all_colls(c, me, n, ((size_t)1 << 18) + 13, 0, "direct", "cma");
  if (bad) return bad;
  ul_call_info_t info = last_call(c);
  STEP(41, strstr(info.reason, "not measured") && strstr(info.reason, "calibrate-host.sh"),
       "reason: %s", info.reason);
  return fork_ranks_comm_down(c, me);
}

/* ... and bounce where the tuning file measured that bouncing pays (decision 0014,
 * amended in stop 34): 3 ranks, which outnumber the CPUs of a 2-CPU machine. */
Test(bounce, oversubscribed_ranks_bounce_only_where_measured, .timeout = 300) {
  if (sysconf(_SC_NPROCESSORS_ONLN) > 2) cr_skip_test("3 ranks outnumber the CPUs of 1-2 CPU machines only");
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids single copy: no direct algorithm");
  unsetenv("UNILINK_TUNING_FILE");
  fork_ranks_run("host", 3, rank_oversubscribed_untuned);
  run_with_bounce_from_1mib(3, rank_tuned_bounce_from);
}

/* Large reductions out of place store straight into their outputs (allreduce: and into
 * every peer's channel slot) in the pass that reads the inputs: reduce_stream is called,
 * exactly once per piece of this rank's slice. In place and avg keep the work area (no
 * call). 4 MiB + 52 B a rank: outputs over UL__NT_MIN_BYTES with an odd tail. Forced to
 * bounce so that 3 ranks on 2 cores take it too. */
#define FUSE_COUNT (((size_t)1 << 20) + 13)
static int fused_phases(ul_comm_t c, int me, int n) {
  setenv("UNILINK_ALGO", "allreduce:bounce,reduce_scatter:bounce", 1);
  size_t cnt = FUSE_COUNT, all = cnt * (size_t)n, pe = c->generic->piece_bytes / sizeof(float);
  float *s = malloc(all * sizeof *s), *r = malloc(all * sizeof *r);
  STEP(2, s && r, "out of memory");
  for (int phase = 0; phase < 5; phase++) {
    /* allreduce sum, in place, avg; reduce_scatter, in place */
    int rs = phase >= 3, inplace = phase == 1 || phase == 4, avg = phase == 2;
    size_t off = 0, len = cnt, msg = rs ? all : cnt;
    if (!rs) ul__block_range(cnt, n, me, &off, &len);
    for (size_t i = 0; i < msg; i++) s[i] = val(me, i), r[i] = -1;
    float *out = inplace ? (rs ? s + (size_t)me * cnt : s) : r;
    long before = stream_calls;
    ul_result_t rc = rs ? ul_reduce_scatter(s, out, cnt, UL_FP32, UL_SUM, c, NULL)
                        : ul_allreduce(s, out, cnt, UL_FP32, avg ? UL_AVG : UL_SUM, c, NULL);
    STEP(3, rc == UL_OK, "phase %d: %s", phase, ul_comm_last_error(c));
    STEP(4, strcmp(last_call(c).algorithm, "bounce") == 0, "phase %d ran %s", phase,
         last_call(c).algorithm);
    for (size_t i = 0; i < cnt; i++) {
      size_t gi = rs ? (size_t)me * cnt + i : i;
      float e = 0;
      for (int p = 0; p < n; p++) e += val(p, gi);
      if (avg) e /= (float)n;
      STEP(5, out[i] == e, "phase %d [%zu] = %g, want %g", phase, i, out[i], e);
    }
    long calls = stream_calls - before, want = inplace || avg ? 0 : (long)((len + pe - 1) / pe);
    STEP(6, calls == want, "phase %d: %ld streaming reductions, want %ld (slice of %zu)", phase,
         calls, want, len);
  }
  free(s);
  free(r);
  unsetenv("UNILINK_ALGO");
  return 0;
}

static int hostcount_up(ul_unique_id_t id, int n, int me, ul_comm_t *c) {
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "hostcount";
  cfg.timeout_ms = 60000;
  STEP(1, ul_comm_init_rank(c, &cfg, n, id, me) == UL_OK, "init: %s", ul_last_error());
  return 0;
}

static int rank_fused(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (hostcount_up(id, n, me, &c)) return 1;
  int bad = fused_phases(c, me, n);
  return bad ? bad : fork_ranks_comm_down(c, me);
}

Test(bounce, large_reductions_store_in_one_pass, .timeout = 180) {
  register_hostcount();
  fork_ranks_run("hostcount", 2, rank_fused);
  fork_ranks_run("hostcount", 3, rank_fused);
}

/* 2 ranks, private buffers, a channel chunk of 2 MiB (UNILINK_CHUNK_BYTES): pieces are
 * a quarter of the level-2 cache, smaller than the chunk on any machine with less than
 * 8 MiB of it. The reductions stream once per piece of that size (not per chunk), and
 * every collective is exact with several pieces in flight. */
static int rank_l2_pieces(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (hostcount_up(id, n, me, &c)) return 1;
  const ul__generic_t *g = c->generic;
  STEP(50, g && g->chunk_bytes == ((size_t)2 << 20), "chunk %zu, want 2 MiB",
       g ? g->chunk_bytes : 0);
  STEP(51, g->l2_bytes > 0, "no level-2 cache size from sysfs or sysconf");
  STEP(52, g->piece_bytes == ul__piece_bytes(g->chunk_bytes, g->l2_bytes) &&
               g->piece_bytes <= g->l2_bytes / 4 && g->piece_bytes >= 16384,
       "piece %zu for L2 %zu", g->piece_bytes, g->l2_bytes);
  int bad = fused_phases(c, me, n);
  if (!bad) bad = all_colls(c, me, n, (size_t)3 << 18, 0, "bounce", "shm-copy");
  return bad ? bad : fork_ranks_comm_down(c, me);
}

Test(bounce, pieces_follow_the_level2_cache, .timeout = 180) {
  /* a quarter of L2, rounded down to 4 KiB, within [16 KiB, chunk]; 0: unknown */
  cr_assert_eq(ul__piece_bytes(262144, (size_t)1 << 20), 262144);
  cr_assert_eq(ul__piece_bytes(262144, 256 << 10), 65536);
  cr_assert_eq(ul__piece_bytes(262144, (size_t)2 << 20), 262144);
  cr_assert_eq(ul__piece_bytes((size_t)2 << 20, (size_t)2 << 20), 524288);
  cr_assert_eq(ul__piece_bytes((size_t)2 << 20, 1280 << 10), 327680);
  cr_assert_eq(ul__piece_bytes(262144, (1 << 20) + 1000), 262144);
  cr_assert_eq(ul__piece_bytes(262144, 0), 262144);
  cr_assert_eq(ul__piece_bytes(262144, 48 << 10), 16384);
  cr_assert_eq(ul__piece_bytes(8192, 48 << 10), 8192);
  cr_assert_eq(ul__piece_bytes((size_t)2 << 20, (3 << 20) + 5000), 786432);
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one CPU: 2 ranks keep single copies");
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids single copy: no direct algorithm");
  register_hostcount();
  setenv("UNILINK_CHUNK_BYTES", "2097152", 1);
  setenv("UNILINK_LLC_BYTES", "0", 1);
  fork_ranks_run("hostcount", 2, rank_l2_pieces);
  unsetenv("UNILINK_LLC_BYTES");
  unsetenv("UNILINK_CHUNK_BYTES");
}

/* The bounced allgather and alltoall store their outputs streaming only when both ranks'
 * inputs and outputs together overflow the last-level cache (set to 8 MiB here; 0:
 * unknown, then from 4 MiB of output). Allgather of c floats a rank touches 12c bytes a
 * rank (4c in, 8c out), alltoall 16c (8c in, 8c out): 24c and 32c bytes in all. The
 * streamed cases have 3 MiB of output, below the 4 MiB from which every output streamed
 * before the cache counted. */
static int stream_calls_for(ul_comm_t c, int me, int n, int alltoall, size_t cnt,
                            const char *want_algo, long *calls) {
  size_t all = cnt * (size_t)n, in = alltoall ? all : cnt;
  float *s = malloc(in * sizeof *s), *r = malloc(all * sizeof *r);
  STEP(60, s && r, "out of memory");
  for (size_t i = 0; i < in; i++) s[i] = val(me, i);
  long before = copy_stream_calls;
  ul_result_t rc = alltoall ? ul_alltoall(s, r, cnt, UL_FP32, c, NULL)
                            : ul_allgather(s, r, cnt, UL_FP32, c, NULL);
  *calls = copy_stream_calls - before;
  STEP(61, rc == UL_OK, "%s of %zu: %s", alltoall ? "alltoall" : "allgather", cnt,
       ul_comm_last_error(c));
  STEP(62, strcmp(last_call(c).algorithm, want_algo) == 0, "%s of %zu ran %s, want %s (%s)",
       alltoall ? "alltoall" : "allgather", cnt, last_call(c).algorithm, want_algo,
       last_call(c).reason);
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < cnt; i++) {
      float e = val(p, alltoall ? (size_t)me * cnt + i : i);
      STEP(63, r[(size_t)p * cnt + i] == e, "[%d][%zu] = %g, want %g", p, i,
           r[(size_t)p * cnt + i], e);
    }
  free(s);
  free(r);
  return 0;
}

static int rank_llc_streams(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (hostcount_up(id, n, me, &c)) return 1;
  setenv("UNILINK_ALGO", "allgather:bounce,alltoall:bounce", 1);
  ul__generic_t *g = c->generic;
  static const struct {
    size_t llc;
    int alltoall;
    size_t cnt;
    int streams;
  } cases[] = {
      {(size_t)8 << 20, 0, 262144, 0}, /* 24c = 6 MiB: fits */
      {(size_t)8 << 20, 0, 393216, 1}, /* 9 MiB */
      {(size_t)8 << 20, 1, 262144, 0}, /* 32c = 8 MiB: fits */
      {(size_t)8 << 20, 1, 393216, 1}, /* 12 MiB */
      {0, 0, 393216, 0},               /* unknown cache: 3 MiB of output */
      {0, 0, 524288, 1},               /* 4 MiB of output */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    g->llc_bytes = cases[k].llc;
    long calls = 0;
    int bad = stream_calls_for(c, me, n, cases[k].alltoall, cases[k].cnt, "bounce", &calls);
    if (bad) return bad;
    STEP(64, (calls > 0) == cases[k].streams, "case %zu (%s of %zu, cache %zu): %ld "
         "streaming copies", k, cases[k].alltoall ? "alltoall" : "allgather", cases[k].cnt,
         cases[k].llc, calls);
  }
  unsetenv("UNILINK_ALGO");
  return fork_ranks_comm_down(c, me);
}

Test(bounce, copy_outputs_stream_past_the_last_level_cache, .timeout = 180) {
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids single copy: no direct algorithm");
  register_hostcount();
  fork_ranks_run("hostcount", 2, rank_llc_streams);
}

/* One broadcast of count floats from root, in place or not, checked exactly, reporting
 * want_algo (and its path with private buffers); NULL: whatever the core picks. */
static int broadcast_from_buffers(ul_comm_t c, int me, size_t count, int root, int inplace,
                                  int exported, const char *want_algo) {
  float *s = buf_new(c, count, exported), *r = buf_new(c, count, exported);
  STEP(70, s && r, "out of memory");
  for (size_t i = 0; i < count; i++) s[i] = me == root ? val(root, i + 5) : -2, r[i] = -1;
  float *out = inplace ? s : r;
  ul_result_t rc = ul_broadcast(s, out, count, UL_FP32, root, c, NULL);
  STEP(71, rc == UL_OK, "broadcast: %s", ul_comm_last_error(c));
  const char *path = want_algo && !strcmp(want_algo, "bounce") ? "shm-copy"
                     : exported                                 ? "zero-copy"
                                                                : "cma";
  if (check_call(c, me, "broadcast", want_algo, path)) return 90;
  for (size_t i = 0; i < count; i++)
    STEP(72, out[i] == val(root, i + 5), "broadcast of %zu from %d in place=%d [%zu] = %g",
         count, root, inplace, i, out[i]);
  buf_free(c, s, exported);
  buf_free(c, r, exported);
  return 0;
}

static int broadcast_from(ul_comm_t c, int me, size_t count, int root, int inplace,
                          const char *want_algo) {
  return broadcast_from_buffers(c, me, count, root, inplace, 0, want_algo);
}

/* Without a tuning file the copy collectives keep single copies while all ranks' buffers
 * fit in the last-level cache (UNILINK_LLC_BYTES, 8 MiB here), allgather and alltoall
 * from one bounce piece of message on; the reductions bounce.
 * For c floats a rank, all ranks' buffers come to: allgather 2 x 12c bytes (4c in, 8c
 * out), alltoall 2 x 16c, broadcast 8c + 4c out of place and 4c + 4c in place. */
static int rank_in_cache(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  enum { AG, A2A, BC, BC_IN_PLACE };
  static const struct {
    int coll;
    size_t cnt;
    const char *algo;
  } cases[] = {
      {AG, 65549, "direct"},           {A2A, 65549, "direct"},
      {BC, 65549, "direct"},           {BC_IN_PLACE, 65549, "direct"},
      {A2A, 262144, "direct"},         /* 8 MiB: fits exactly */
      {A2A, 262145, "bounce"},         {AG, 786432, "bounce"}, /* 18 MiB */
      {BC, 786432, "bounce"},          /* 9 MiB */
      {BC_IN_PLACE, 786432, "direct"}, /* 6 MiB */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    long calls;
    int bc = cases[k].coll == BC || cases[k].coll == BC_IN_PLACE;
    int bad = bc ? broadcast_from(c, me, cases[k].cnt, 1, cases[k].coll == BC_IN_PLACE,
                                  cases[k].algo)
                 : stream_calls_for(c, me, n, cases[k].coll == A2A, cases[k].cnt,
                                    cases[k].algo, &calls);
    if (bad) return bad;
    ul_call_info_t info = last_call(c);
    if (!strcmp(cases[k].algo, "direct"))
      STEP(74,
           strcmp(info.path, "cma") == 0 && strstr(info.reason, "8388608-byte last-level cache"),
           "case %zu: path %s, reason %s", k, info.path, info.reason);
  }
  /* allgather and alltoall messages (the receive buffer) within one bounce piece bounce;
   * from one piece on they copy once (pieces below 256 KiB: the staged algorithms'
   * sizes come close, so checked where a block is above 64 KiB) */
  size_t edge = c->generic->piece_bytes / (sizeof(float) * (size_t)n);
  for (int a2a = 0; a2a < 2 && (edge - 1) * sizeof(float) > 65536; a2a++) {
    long calls;
    int bad = stream_calls_for(c, me, n, a2a, edge - 1, "bounce", &calls);
    if (!bad) bad = stream_calls_for(c, me, n, a2a, edge, "direct", &calls);
    if (bad) return bad;
  }
  /* the reductions bounce at any size, and every collective stays exact */
  int bad = all_colls(c, me, n, 65549, 0, NULL, NULL);
  if (bad) return bad;
  float *s = malloc(65549 * sizeof *s), *r = malloc(65549 * sizeof *r);
  STEP(77, s && r, "out of memory");
  for (size_t i = 0; i < 65549; i++) s[i] = val(me, i);
  STEP(78, ul_allreduce(s, r, 65549, UL_FP32, UL_SUM, c, NULL) == UL_OK, "allreduce: %s",
       ul_comm_last_error(c));
  ul_call_info_t info = last_call(c);
  STEP(79, strcmp(info.algorithm, "bounce") == 0, "allreduce ran %s (%s)", info.algorithm,
       info.reason);
  free(s);
  free(r);
  return fork_ranks_comm_down(c, me);
}

Test(bounce, copies_keep_single_copies_within_the_last_level_cache, .timeout = 180) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one CPU: 2 ranks keep single copies");
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids single copy: no direct algorithm");
  unsetenv("UNILINK_TUNING_FILE");
  setenv("UNILINK_LLC_BYTES", "8388608", 1);
  fork_ranks_run("host", 2, rank_in_cache);
  unsetenv("UNILINK_LLC_BYTES");
}

/* A single-copy broadcast in place from a private buffer: the root writes its block (one
 * n-th: the root's of ul__block_range) into every receiver, which reads the rest. Every
 * root, so the root's block is first, in the middle and last, with counts that do not
 * divide by 3 (the first blocks one element longer) and smaller than 3 (empty blocks).
 * Out of place (the root copies its own output) and with ranks outnumbering CPUs (set on
 * every rank alike, whatever this machine has) the receivers read it whole. */
static int rank_split_broadcast(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (hostcount_up(id, n, me, &c)) return 1;
  setenv("UNILINK_ALGO", "broadcast:direct", 1);
  static const size_t counts[] = {1, 2, 100003};
  for (int over = 0; over < 2; over++) {
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
      for (int root = 0; root < n; root++)
        for (int inplace = 0; inplace < 2; inplace++) {
          c->generic->oversubscribed = over;
          long read0 = peer_read_bytes, write0 = peer_write_bytes;
          int bad = broadcast_from(c, me, counts[k], root, inplace, "direct");
          if (bad) return bad;
          int split = !over && inplace;
          size_t block = split ? counts[k] / 3 + ((size_t)root < counts[k] % 3) : 0;
          long want_read = me == root ? 0 : (long)((counts[k] - block) * sizeof(float));
          long want_write = me == root ? (long)(2 * block * sizeof(float)) : 0;
          long got_read = peer_read_bytes - read0, got_write = peer_write_bytes - write0;
          STEP(80, got_read == want_read && got_write == want_write,
               "%zu from %d, in place %d, oversubscribed %d: read %ld B, wrote %ld B; want %ld "
               "and %ld",
               counts[k], root, inplace, over, got_read, got_write, want_read, want_write);
        }
  }
  unsetenv("UNILINK_ALGO");
  return fork_ranks_comm_down(c, me);
}

Test(bounce, broadcast_splits_single_copies_with_the_root, .timeout = 180) {
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids single copy: no direct algorithm");
  register_hostcount();
  fork_ranks_run("hostcount", 3, rank_split_broadcast);
}

/* An alltoall or reduce_scatter of cnt floats a block from buffers of either kind, which
 * must have run want (bounce: for ranks outnumbering CPUs); exactness is all_colls'. */
static int block_coll_ran(ul_comm_t c, int me, int n, int alltoall, size_t cnt, int exported,
                          const char *want) {
  size_t all = cnt * (size_t)n;
  float *s = buf_new(c, all, exported), *r = buf_new(c, all, exported);
  STEP(63, s && r, "out of memory");
  for (size_t i = 0; i < all; i++) s[i] = val(me, i);
  ul_result_t rc = alltoall ? ul_alltoall(s, r, cnt, UL_FP32, c, NULL)
                            : ul_reduce_scatter(s, r, cnt, UL_FP32, UL_SUM, c, NULL);
  STEP(64, rc == UL_OK, "%s: %s", alltoall ? "alltoall" : "reduce_scatter", ul_comm_last_error(c));
  ul_call_info_t info = last_call(c);
  STEP(65, !strcmp(info.algorithm, want) &&
               (strcmp(want, "bounce") || strstr(info.reason, "ranks outnumber CPUs")),
       "%s of %zu a block (exported %d) ran %s (%s), want %s",
       alltoall ? "alltoall" : "reduce_scatter", cnt, exported, info.algorithm, info.reason,
       want);
  buf_free(c, s, exported);
  buf_free(c, r, exported);
  return 0;
}

/* Process ranks outnumbering CPUs (set on every rank alike, whatever this machine has)
 * broadcast, alltoall and reduce_scatter buffers smaller than one bounce piece through
 * scratch without publishing, for private and exported buffers alike; from one piece on
 * the direct algorithm runs, as it does for those sizes when the CPUs suffice. Every
 * result exact: broadcast from every root, in place and not, and all_colls. */
static int rank_oversubscribed_small(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  size_t piece = c->generic->piece_bytes / sizeof(float);
  size_t below = (piece - 1) / (size_t)n, at = (piece + (size_t)n - 1) / (size_t)n; /* a block */
  STEP(60, below * (size_t)n * sizeof(float) > c->generic->oneshot_bytes,
       "piece of %zu floats is within the staged limit", piece);
  c->generic->oversubscribed = 1;
  for (int exported = 0; exported < 2; exported++) {
    for (int root = 0; root < n; root++)
      for (int inplace = 0; inplace < 2; inplace++) {
        int bad = broadcast_from_buffers(c, me, piece - 1, root, inplace, exported, "bounce");
        if (bad) return bad;
        ul_call_info_t info = last_call(c);
        STEP(61, strstr(info.reason, "ranks outnumber CPUs") != NULL, "reason: %s", info.reason);
        bad = broadcast_from_buffers(c, me, piece, root, inplace, exported, "direct");
        if (bad) return bad;
      }
    for (int alltoall = 0; alltoall < 2; alltoall++) {
      int bad = block_coll_ran(c, me, n, alltoall, below, exported, "bounce");
      if (!bad) bad = block_coll_ran(c, me, n, alltoall, at, exported, "direct");
      if (bad) return bad;
    }
    int bad = all_colls(c, me, n, below, exported, NULL, NULL);
    if (bad) return bad;
  }
  /* with the CPUs sufficing, the same rule does not apply (sizes not run above: the
   * selection is kept per size) */
  c->generic->oversubscribed = 0;
  int bad = broadcast_from_buffers(c, me, piece - 2, 0, 1, 0, NULL);
  if (bad) return bad;
  ul_call_info_t info = last_call(c);
  STEP(62, strstr(info.reason, "ranks outnumber CPUs") == NULL, "%s: %s", info.algorithm,
       info.reason);
  return fork_ranks_comm_down(c, me);
}

Test(bounce, oversubscribed_small_buffers_bounce_unpublished, .timeout = 180) {
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids single copy: no direct algorithm");
  unsetenv("UNILINK_TUNING_FILE");
  fork_ranks_run("host", 3, rank_oversubscribed_small);
}
