/* The memory-and-transport floor (backend ABI 1.4 and 1.5): the host backend's
 * single-copy peer ops, streaming copy and streaming reduction, and what the generic
 * layer does for a table without them (one built against ABI 1.3: the host table cut
 * short, registered as "hostold"; it has no wait_word either, ABI 1.6). Process
 * ranks are fork()ed children reporting through their exit status (0 = ok, otherwise
 * the step that failed, with a message on stderr). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "generic/generic_internal.h" /* the layer's choices: cma, copy_stream, ... */
#include "fork_ranks.h"
#include "host_count.h"
#include "line_run_ahead.h"
#include "ul_core.h"


/* 8 MiB of floats: above UL__NT_MIN_BYTES, so outputs are stored streaming. */
#define BIG ((size_t)2 << 20)

static ul_backend_ops_t old_ops; /* the host table as an ABI 1.3 backend built it */

static void register_hostold(void) {
  ul__backend_t *host = NULL;
  cr_assert_eq(ul__registry_find("host", &host), UL_OK, "%s", ul_last_error());
  old_ops = host->ops;
  old_ops.name = "hostold";
  old_ops.description = "the host backend's table cut at ABI 1.3 (no floor ops)";
  old_ops.struct_size = offsetof(ul_backend_ops_t, peer_copy_ready);
  cr_assert_eq(ul__registry_add(&old_ops, NULL, NULL), UL_OK, "%s", ul_last_error());
}

static float val(int rank, size_t i) { return (float)((rank + 1) * 3 + (int)(i % 5)); }

static ul_call_info_t last_call(ul_comm_t c) {
  ul_call_info_t info = {.struct_size = sizeof info};
  ul_comm_last_call(c, &info);
  return info;
}

/* One large allreduce on private (malloc) buffers, checked exactly; algorithm and path
 * as the core reports them. */
static int big_allreduce(ul_comm_t c, int me, int n, ul_call_info_t *info) {
  float *s = malloc(BIG * sizeof *s), *r = malloc(BIG * sizeof *r);
  STEP(20, s && r, "out of memory");
  for (size_t i = 0; i < BIG; i++) s[i] = val(me, i), r[i] = -1;
  ul_result_t rc = ul_allreduce(s, r, BIG, UL_FP32, UL_SUM, c, NULL);
  STEP(21, rc == UL_OK, "allreduce: %s", ul_comm_last_error(c));
  *info = last_call(c);
  for (size_t i = 0; i < BIG; i++) {
    float e = 0;
    for (int p = 0; p < n; p++) e += val(p, i);
    STEP(22, r[i] == e, "allreduce[%zu] = %g, want %g", i, r[i], e);
  }
  free(s);
  free(r);
  return 0;
}

Test(floor, host_has_the_ops_an_old_table_gets_stubs, .timeout = 20) {
  ul__backend_t *host = NULL, *old = NULL;
  cr_assert_eq(ul__registry_find("host", &host), UL_OK, "%s", ul_last_error());
  cr_expect(!ul__op_is_stub((const void *)host->ops.peer_copy_ready));
  cr_expect(!ul__op_is_stub((const void *)host->ops.peer_read));
  cr_expect(!ul__op_is_stub((const void *)host->ops.peer_write));
  cr_expect(!ul__op_is_stub((const void *)host->ops.copy_stream));
  register_hostold();
  cr_assert_eq(ul__registry_find("hostold", &old), UL_OK, "%s", ul_last_error());
  cr_expect(ul__op_is_stub((const void *)old->ops.peer_copy_ready));
  cr_expect(ul__op_is_stub((const void *)old->ops.peer_read));
  cr_expect(ul__op_is_stub((const void *)old->ops.peer_write));
  cr_expect(ul__op_is_stub((const void *)old->ops.copy_stream));
  int ready = 7;
  char b = 0;
  cr_expect_eq(old->ops.peer_copy_ready(NULL, &ready), UL_ERR_UNSUPPORTED);
  cr_expect_eq(old->ops.peer_read(NULL, 0, &b, &b, 1), UL_ERR_UNSUPPORTED);
  cr_expect_eq(old->ops.peer_write(NULL, 0, &b, &b, 1), UL_ERR_UNSUPPORTED);
  cr_expect_eq(old->ops.copy_stream(NULL, &b, &b, 1, NULL), UL_ERR_UNSUPPORTED);
}

/* copy_stream equals memcpy for every head/tail alignment and does not write past. */
Test(floor, host_copy_stream_is_memcpy, .timeout = 20) {
  ul__backend_t *host = NULL;
  cr_assert_eq(ul__registry_find("host", &host), UL_OK, "%s", ul_last_error());
  enum { N = 4096 + 200 };
  unsigned char *src = malloc(N), *dst = malloc(N + 64);
  cr_assert(src && dst);
  for (int i = 0; i < N; i++) src[i] = (unsigned char)(i * 7 + 3);
  size_t sizes[] = {0, 1, 15, 16, 63, 64, 65, 130, 4096, 4096 + 77};
  for (int da = 0; da < 17; da += 5)
    for (int sa = 0; sa < 17; sa += 3)
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        memset(dst, 0xEE, N + 64);
        cr_assert_eq(host->ops.copy_stream(NULL, dst + da, src + sa, sizes[k], NULL), UL_OK);
        cr_assert_eq(memcmp(dst + da, src + sa, sizes[k]), 0, "size %zu, offsets %d/%d",
                     sizes[k], da, sa);
        cr_assert_eq(dst[da + sizes[k]], 0xEE, "wrote past the end (size %zu)", sizes[k]);
        if (da) cr_assert_eq(dst[da - 1], 0xEE, "wrote before the start");
      }
  free(src);
  free(dst);
}

/* Thread ranks on a table without copy_stream: the direct allreduce still runs (its
 * streaming outputs fall back to copy_local) and is exact. */
typedef struct thread_job {
  ul_comm_t c;
  int me, rc;
  ul_call_info_t info;
} thread_job_t;

static void *thread_rank(void *arg) {
  thread_job_t *j = arg;
  j->rc = big_allreduce(j->c, j->me, 2, &j->info);
  return NULL;
}

Test(floor, threads_without_copy_stream_run_direct, .timeout = 60) {
  register_hostold();
  ul_comm_t comms[2];
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "hostold";
  cfg.timeout_ms = 30000;
  cr_assert_eq(ul_comm_init_all(comms, &cfg, 2, NULL), UL_OK, "%s", ul_last_error());
  cr_assert_not_null(comms[0]->generic);
  cr_assert_eq(comms[0]->generic->copy_stream, 0);
  thread_job_t jobs[2];
  pthread_t th[2];
  for (int k = 0; k < 2; k++) {
    jobs[k] = (thread_job_t){.c = comms[k], .me = k};
    cr_assert_eq(pthread_create(&th[k], NULL, thread_rank, &jobs[k]), 0);
  }
  for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
  for (int k = 0; k < 2; k++) {
    cr_expect_eq(jobs[k].rc, 0, "rank %d failed at step %d (message above)", k, jobs[k].rc);
    cr_expect_str_eq(jobs[k].info.algorithm, "direct");
    cr_expect_str_eq(jobs[k].info.path, "threads");
    ul_comm_destroy(comms[k]);
  }
}

/* ------------------------------------------- streaming reduction (ABI 1.5) */

enum { PH_ALLREDUCE, PH_ALLREDUCE_INPLACE, PH_REDUCE_SCATTER, PH_REDUCE_SCATTER_INPLACE,
       PH_REDUCE, PH_REDUCE_INPLACE, PH_ALLREDUCE_AVG, PH_BROADCAST, PH_BROADCAST_INPLACE,
       PH_ALLGATHER, PH_ALLGATHER_INPLACE, PH_COUNT };
static const char *const phase_name[PH_COUNT] = {
    "allreduce", "allreduce in place", "reduce_scatter", "reduce_scatter in place",
    "reduce to rank 1", "reduce to rank 1 in place", "allreduce avg", "broadcast from rank 1",
    "broadcast from rank 1 in place", "allgather", "allgather in place"};
/* Whether the phase streams a reduction: not avg (its scaling would read the outputs
 * back), not a single output in place (ordinary stores into the lines just read). */
static const int phase_streams[PH_COUNT] = {1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0};
/* Whether every rank copies into other ranks' outputs (the copy collectives spread
 * their input by source). */
static const int phase_spreads[PH_COUNT] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};

/* One large collective of the phase, checked exactly. BIG + 3 elements per block: an
 * odd tail after the whole lines. A reduce streams each rank's 1/n of the output, so it
 * gets twice as many (still over UL__NT_MIN_BYTES with 3 ranks). */
static int stream_phase(ul_comm_t c, int me, int n, int phase) {
  int reduce = phase == PH_REDUCE || phase == PH_REDUCE_INPLACE;
  size_t cnt = (reduce ? 2 * BIG : BIG) + 3, all = cnt * (size_t)n;
  int scatter = phase == PH_REDUCE_SCATTER || phase == PH_REDUCE_SCATTER_INPLACE;
  int gather = phase == PH_ALLGATHER || phase == PH_ALLGATHER_INPLACE;
  size_t in = scatter || gather ? all : cnt, outn = gather ? all : cnt;
  float *s = malloc(in * sizeof *s), *r = malloc(outn * sizeof *r);
  STEP(30, s && r, "out of memory");
  for (size_t i = 0; i < in; i++) s[i] = val(me, i);
  for (size_t i = 0; i < outn; i++) r[i] = -1;
  /* the outputs by rank, for counted_copy_stream (every rank's before any copies) */
  my_rank = me;
  out_of_rank[me] = (char *)(phase == PH_BROADCAST_INPLACE && me == 1 ? s
                             : phase == PH_ALLGATHER_INPLACE            ? s
                                                                        : r);
  out_bytes = outn * sizeof *r;
  STEP(34, ul_barrier(c, NULL) == UL_OK, "barrier: %s", ul_comm_last_error(c));
  ul_result_t rc = UL_OK;
  float *res = r;
  switch (phase) {
  case PH_ALLREDUCE: rc = ul_allreduce(s, r, cnt, UL_FP32, UL_SUM, c, NULL); break;
  case PH_ALLREDUCE_INPLACE:
    rc = ul_allreduce(s, s, cnt, UL_FP32, UL_SUM, c, NULL), res = s;
    break;
  case PH_REDUCE_SCATTER: rc = ul_reduce_scatter(s, r, cnt, UL_FP32, UL_SUM, c, NULL); break;
  case PH_REDUCE_SCATTER_INPLACE:
    res = s + (size_t)me * cnt;
    rc = ul_reduce_scatter(s, res, cnt, UL_FP32, UL_SUM, c, NULL);
    break;
  case PH_REDUCE: rc = ul_reduce(s, r, cnt, UL_FP32, UL_SUM, 1, c, NULL); break;
  case PH_REDUCE_INPLACE:
    res = me == 1 ? s : r;
    rc = ul_reduce(s, res, cnt, UL_FP32, UL_SUM, 1, c, NULL);
    break;
  case PH_ALLREDUCE_AVG: rc = ul_allreduce(s, r, cnt, UL_FP32, UL_AVG, c, NULL); break;
  case PH_BROADCAST: rc = ul_broadcast(s, r, cnt, UL_FP32, 1, c, NULL); break;
  case PH_BROADCAST_INPLACE:
    res = me == 1 ? s : r;
    rc = ul_broadcast(s, res, cnt, UL_FP32, 1, c, NULL);
    break;
  case PH_ALLGATHER: rc = ul_allgather(s, r, cnt, UL_FP32, c, NULL); break;
  default: /* allgather in place: this rank's block already where it goes */
    res = s;
    rc = ul_allgather(s + (size_t)me * cnt, s, cnt, UL_FP32, c, NULL);
    break;
  }
  STEP(31, rc == UL_OK, "%s: %s", phase_name[phase], ul_comm_last_error(c));
  ul_call_info_t info = last_call(c);
  STEP(32, strcmp(info.algorithm, "direct") == 0, "%s: algorithm %s", phase_name[phase],
       info.algorithm);
  if (gather)
    for (size_t i = 0; i < all; i++) {
      /* block p holds rank p's input (in place: its elements at block p) */
      size_t p = i / cnt, e = phase == PH_ALLGATHER ? i % cnt : i;
      STEP(35, res[i] == val((int)p, e), "%s n=%d [%zu] = %g, want %g", phase_name[phase], n,
           i, res[i], val((int)p, e));
    }
  else if (phase == PH_BROADCAST || phase == PH_BROADCAST_INPLACE)
    for (size_t i = 0; i < cnt; i++)
      STEP(36, res[i] == val(1, i), "%s n=%d [%zu] = %g, want %g", phase_name[phase], n, i,
           res[i], val(1, i));
  else if (!reduce || me == 1)
    for (size_t i = 0; i < cnt; i++) {
      size_t e = scatter ? (size_t)me * cnt + i : i;
      float want = 0;
      for (int p = 0; p < n; p++) want += val(p, e);
      if (phase == PH_ALLREDUCE_AVG) want /= (float)n;
      STEP(33, res[i] == want, "%s n=%d [%zu] = %g, want %g", phase_name[phase], n, i, res[i],
           want);
    }
  STEP(37, ul_barrier(c, NULL) == UL_OK, "barrier: %s", ul_comm_last_error(c));
  out_of_rank[me] = NULL;
  free(s);
  free(r);
  return 0;
}

typedef struct stream_job {
  ul_comm_t c;
  int me, n, phase, rc;
} stream_job_t;

static void *stream_rank(void *arg) {
  stream_job_t *j = arg;
  j->rc = stream_phase(j->c, j->me, j->n, j->phase);
  return NULL;
}

/* Thread ranks (2 and 3: the n > 2 chain ends in the streaming step too): large
 * reductions go straight from the reduction into every output (reduce_stream called)
 * where phase_streams says so, and large broadcasts and allgathers spread by source
 * (copies into other ranks' outputs), exact to the last odd element; the others are
 * exact too. */
Test(floor, threads_stream_and_spread_large_outputs, .timeout = 120) {
  register_hostcount();
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "hostcount";
  cfg.timeout_ms = 30000;
  for (int n = 2; n <= 3; n++) {
    ul_comm_t comms[3];
    cr_assert_eq(ul_comm_init_all(comms, &cfg, n, NULL), UL_OK, "%s", ul_last_error());
    cr_assert_eq(comms[0]->generic->reduce_stream, 1);
    for (int phase = 0; phase < PH_COUNT; phase++) {
      long before = stream_calls, cross_before = cross_copies;
      stream_job_t jobs[3];
      pthread_t th[3];
      for (int k = 0; k < n; k++) {
        jobs[k] = (stream_job_t){.c = comms[k], .me = k, .n = n, .phase = phase};
        cr_assert_eq(pthread_create(&th[k], NULL, stream_rank, &jobs[k]), 0);
      }
      for (int k = 0; k < n; k++) pthread_join(th[k], NULL);
      for (int k = 0; k < n; k++)
        cr_assert_eq(jobs[k].rc, 0, "n=%d %s: rank %d failed at step %d (message above)", n,
                     phase_name[phase], k, jobs[k].rc);
      if (phase_streams[phase])
        cr_expect_gt(stream_calls, before, "n=%d %s did not stream", n, phase_name[phase]);
      else
        cr_expect_eq(stream_calls, before, "n=%d %s streamed", n, phase_name[phase]);
      if (phase_spreads[phase])
        cr_expect_gt(cross_copies, cross_before, "n=%d %s did not spread", n,
                     phase_name[phase]);
    }
    for (int k = 0; k < n; k++) ul_comm_destroy(comms[k]);
  }
}

/* ------------------------------------------------------------- process ranks */

/* Without peer ops: no single-copy path, so the direct algorithms are not chosen and
 * not forceable; a large allreduce runs through the shared scratch, exact. */

static int rank_old(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  STEP(2, c->generic && c->generic->cma == 0, "single-copy reported without the ops");
  ul_call_info_t info;
  int bad = big_allreduce(c, me, n, &info);
  if (bad) return bad;
  STEP(3, strcmp(info.algorithm, "direct") != 0, "direct chosen without single copy");
  STEP(4, strcmp(info.path, "shm-copy") == 0, "path %s, want shm-copy", info.path);
  setenv("UNILINK_ALGO", "allreduce:direct", 1);
  float x = 1, y = 0;
  ul_result_t rc = ul_allreduce(&x, &y, 1, UL_FP32, UL_SUM, c, NULL);
  unsetenv("UNILINK_ALGO");
  STEP(5, rc == UL_ERR_UNSUPPORTED, "forced direct: %s", ul_result_name(rc));
  STEP(6, strstr(ul_comm_last_error(c), "reach each other's buffers") != NULL, "sentence: %s",
       ul_comm_last_error(c));
  return fork_ranks_comm_down(c, me);
}

/* With them: the direct allreduce over single copies, exact; then the ops themselves. */
static int rank_new(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  const ul_backend_ops_t *o = &c->backend->ops;
  int ready = 0;
  STEP(2, o->peer_copy_ready(c->bcomm, &ready) == UL_OK && ready == 1, "peer_copy_ready %d",
       ready);
  STEP(3, c->generic && c->generic->cma == 1, "generic layer did not take single copy");
  ul_call_info_t info;
  /* forced: with a core per rank the core would bounce private buffers (test_bounce.c) */
  setenv("UNILINK_ALGO", "allreduce:direct", 1);
  int bad = big_allreduce(c, me, n, &info);
  unsetenv("UNILINK_ALGO");
  if (bad) return bad;
  STEP(4, strcmp(info.algorithm, "direct") == 0 && strcmp(info.path, "cma") == 0,
       "algorithm %s path %s", info.algorithm, info.path);
  /* Every rank publishes the address of a private buffer; rank 0 reads and writes its
   * peers' through the ops. */
  uint64_t mine[4] = {0x1111 * (uint64_t)(me + 1), 0x2222 * (uint64_t)(me + 1), 0, 0};
  uint64_t addr = (uint64_t)(uintptr_t)mine, addrs[8] = {0};
  STEP(5, ul_allgather(&addr, addrs, 1, UL_UINT64, c, NULL) == UL_OK, "allgather: %s",
       ul_comm_last_error(c));
  if (me == 0)
    for (int p = 1; p < n; p++) {
      void *remote = (void *)(uintptr_t)addrs[p];
      uint64_t got[2] = {0, 0}, put[2] = {0xabc0 + (uint64_t)p, 0xdef0 + (uint64_t)p};
      STEP(6, o->peer_read(c->bcomm, p, got, remote, sizeof got) == UL_OK, "peer_read: %s",
           ul_comm_last_error(c));
      STEP(7, got[0] == 0x1111 * (uint64_t)(p + 1) && got[1] == 0x2222 * (uint64_t)(p + 1),
           "peer_read from %d got %llx %llx", p, (unsigned long long)got[0],
           (unsigned long long)got[1]);
      STEP(8, o->peer_write(c->bcomm, p, (uint64_t *)remote + 2, put, sizeof put) == UL_OK,
           "peer_write: %s", ul_comm_last_error(c));
      /* a bad address of a live peer: a system error naming the peer, not a lost rank */
      ul_result_t rc = o->peer_read(c->bcomm, p, got, (void *)(uintptr_t)64, sizeof got);
      STEP(9, rc == UL_ERR_SYSTEM, "bad address: %s", ul_result_name(rc));
      char want[32];
      snprintf(want, sizeof want, "from rank %d", p);
      STEP(10, strstr(ul_comm_last_error(c), "process_vm_readv") &&
                   strstr(ul_comm_last_error(c), want),
           "sentence: %s", ul_comm_last_error(c));
      rc = o->peer_write(c->bcomm, n, (void *)remote, put, sizeof put);
      STEP(11, rc == UL_ERR_INVALID_ARG, "peer %d of %d: %s", n, n, ul_result_name(rc));
    }
  STEP(12, ul_barrier(c, NULL) == UL_OK, "barrier: %s", ul_comm_last_error(c));
  if (me != 0)
    STEP(13, mine[2] == 0xabc0 + (uint64_t)me && mine[3] == 0xdef0 + (uint64_t)me,
         "peer_write did not land: %llx %llx", (unsigned long long)mine[2],
         (unsigned long long)mine[3]);
  return fork_ranks_comm_down(c, me);
}


Test(floor, processes_without_peer_ops_fall_back_to_scratch, .timeout = 120) {
  register_hostold();
  fork_ranks_run("hostold", 2, rank_old);
}

Test(floor, processes_with_peer_ops_take_single_copy, .timeout = 120) {
  if (!fork_ranks_cma_allowed()) cr_skip_test("Yama ptrace_scope forbids process_vm_readv between ranks");
  fork_ranks_run("host", 3, rank_new);
}

/* Without wait_word (ABI 1.6) every rank signals each epoch of the flagged-line
 * collectives, the root every line broadcast and each writer every line gather or
 * reduce, packed ones too, and a reader whose
 * line is not there yet waits for that signal: the host suite's run-ahead patterns, late
 * ranks and roots included, exact on the old table. 3 ranks outnumber 2 CPUs, so
 * broadcasts are laid end to end there. */
static int rank_old_lines(ul_unique_id_t id, int n, int me) {
  ul_comm_t c;
  if (fork_ranks_comm_up(id, n, me, &c)) return 1;
  STEP(2, c->generic && c->generic->wait_word == 0, "wait_word reported without the op");
  STEP(3, line_run_ahead(c, me, n) == 0, "line run ahead failed (message above)");
  STEP(4, line_broadcast_run_ahead(c, me, n) == 0, "broadcast run ahead failed (message above)");
  STEP(5, line_gather_run_ahead(c, me, n) == 0, "gather run ahead failed (message above)");
  STEP(6, line_reduce_run_ahead(c, me, n) == 0, "reduce run ahead failed (message above)");
  return fork_ranks_comm_down(c, me);
}

Test(floor, processes_without_wait_word_signal_flagged_lines, .timeout = 200) {
  register_hostold();
  fork_ranks_run("hostold", 2, rank_old_lines);
  fork_ranks_run("hostold", 3, rank_old_lines);
}
