/* One rank's part of the flagged-line run-ahead patterns, shared by the host suite
 * (test_host_collectives.c) and the fallback for backends without wait_word
 * (test_host_floor.c): 0 = every call exact and on the line algorithm where it should
 * be, otherwise 1 with a message on stderr (CHECK, which the host suite uses too). */
#ifndef UL_TEST_LINE_RUN_AHEAD_H
#define UL_TEST_LINE_RUN_AHEAD_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <unilink/unilink.h>

/* In a rank function returning int: fail with a message on stderr. */
#define CHECK(cond, ...)                                                                         \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                                         \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

/* The flagged-line path of the tiniest collectives has no acknowledgement: a rank may
 * rewrite the lines of epoch k+2 as soon as it has seen every peer's epoch k+1. Ranks that
 * lag (sleep) between calls, the four collectives it serves mixed back to back, in place
 * and out of place, and counts up to its 4144-byte limit and one past it: a line rewritten
 * too early, or read before its payload, shows up as a wrong value. */
static inline int line_run_ahead(ul_comm_t c, int me, int n) {
  static const size_t cnts[] = {1, 14, 15, 1036, 2, 1037, 7};
  int32_t in[8 * 1037], out[8 * 1037];
  for (int it = 0; it < 1500; it++) {
    size_t cnt = cnts[it % (sizeof cnts / sizeof cnts[0])];
    if (me == it % n && it % 11 == 0) usleep(300); /* one rank lags, the others go on */
    int inplace = (it / 7) % 2;
    int kind = it % 4;
    ul_call_info_t info = {.struct_size = sizeof info};
    if (kind == 0) { /* allreduce */
      for (size_t i = 0; i < cnt; i++) in[i] = out[i] = (int32_t)(me * 7 + it + (int)i);
      CHECK(ul_allreduce(inplace ? out : in, out, cnt, UL_INT32, UL_SUM, c, NULL) == UL_OK,
            "allreduce %d: %s", it, ul_comm_last_error(c));
      for (size_t i = 0; i < cnt; i++) {
        int32_t want = (int32_t)(7 * n * (n - 1) / 2 + n * (it + (int)i));
        CHECK(out[i] == want, "rank %d allreduce %d [%zu] = %d, expected %d", me, it, i, out[i],
              want);
      }
    } else if (kind == 1) { /* allgather */
      for (size_t i = 0; i < cnt; i++)
        out[(size_t)me * cnt + i] = in[i] = (int32_t)(me * 100000 + it * 10 + (int)i);
      CHECK(ul_allgather(inplace ? out + (size_t)me * cnt : in, out, cnt, UL_INT32, c, NULL) ==
                UL_OK, "allgather %d: %s", it, ul_comm_last_error(c));
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < cnt; i++)
          CHECK(out[(size_t)r * cnt + i] == (int32_t)(r * 100000 + it * 10 + (int)i),
                "rank %d allgather %d from %d [%zu] = %d", me, it, r, i, out[(size_t)r * cnt + i]);
    } else if (kind == 2) { /* alltoall: block p of rank r is r*1000 + p*10 + it */
      for (int p = 0; p < n; p++)
        for (size_t i = 0; i < cnt; i++)
          in[(size_t)p * cnt + i] = out[(size_t)p * cnt + i] =
              (int32_t)(me * 1000000 + p * 10000 + it + (int)i);
      CHECK(ul_alltoall(in, out, cnt, UL_INT32, c, NULL) == UL_OK, /* never in place */
            "alltoall %d: %s", it, ul_comm_last_error(c));
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < cnt; i++)
          CHECK(out[(size_t)r * cnt + i] == (int32_t)(r * 1000000 + me * 10000 + it + (int)i),
                "rank %d alltoall %d from %d [%zu] = %d", me, it, r, i, out[(size_t)r * cnt + i]);
    } else { /* reduce_scatter */
      for (int p = 0; p < n; p++)
        for (size_t i = 0; i < cnt; i++) in[(size_t)p * cnt + i] = (int32_t)(me + p * 3 + it + (int)i);
      CHECK(ul_reduce_scatter(in, out, cnt, UL_INT32, UL_SUM, c, NULL) == UL_OK,
            "reduce_scatter %d: %s", it, ul_comm_last_error(c));
      for (size_t i = 0; i < cnt; i++) {
        int32_t want = (int32_t)(n * (n - 1) / 2 + n * (me * 3 + it + (int)i));
        CHECK(out[i] == want, "rank %d reduce_scatter %d [%zu] = %d, expected %d", me, it, i,
              out[i], want);
      }
    }
    /* the path under test ran: the line algorithm up to 4144 bytes a peer, not past it */
    CHECK(ul_comm_last_call(c, &info) == UL_OK, "last_call");
    if (n > 1)
      CHECK((strcmp(info.algorithm, "line") == 0) == (cnt * sizeof(int32_t) <= 4144),
            "rank %d op %d count %zu ran '%s'", me, it, cnt, info.algorithm);
  }
  return 0;
}

/* Small broadcasts go in flagged lines through a ring of 304 per root, small gathers and
 * reduces through a ring of 304 per writer in the root's scratch, the smallest packed
 * several to a line, the others a slot each of 19 lines, 38 for gathers and reduces
 * (laid end to end when ranks outnumber cores, from 3 ranks here: those must start the
 * ring again rather than cross its end; without that 4 of 7 rank counts fail), and a
 * writer may run ahead of its readers until it comes round to a line they have not
 * returned a credit for (one every 76 lines). Runs of 120 calls to one root (about 400
 * lines: the ring wraps and the writers wait within a run) while the readers lag, then
 * roots that change every call; in place and out of place; counts that share a line (4,
 * 8 and 28 bytes), fill one exactly (56), need two (60), the limit (a broadcast's 19
 * lines, 1064 bytes; a gather's or reduce's 38, 2128 bytes) and one past it (staged).
 * Now and then the writers come late, so readers wait: polling the line for packed
 * calls, which are not signalled, and for the signal of the others, whose count skips
 * the packed ones. A line rewritten before its reader read it, a call placed differently
 * on two ranks, a credit or a signal counted wrong (a hang or a wrong value) fails here.
 * coll: UL_COLL_BROADCAST, UL_COLL_GATHER or UL_COLL_REDUCE. */
static inline int line_rooted_run_ahead(ul_comm_t c, int me, int n, ul_coll_t coll) {
  size_t limit = coll == UL_COLL_BROADCAST ? 1064 : 2128; /* bytes a rank in lines */
  size_t top = limit / sizeof(int32_t);
  const size_t cnts[] = {1, 14, 15, top, 2, top + 1, 7};
  int32_t in[2128 / sizeof(int32_t) + 1], out[8 * (2128 / sizeof(int32_t) + 1)];
  const char *name = ul_coll_name(coll);
  CHECK(n <= 8, "out holds the blocks of 8 ranks, not %d", n);
  for (int it = 0; it < 1520; it++) {
    int root = it < 720 ? (it / 120) % n : it % n;
    size_t cnt = cnts[it % (sizeof cnts / sizeof cnts[0])];
    /* readers lag while writers go on; now and then the writers lag */
    int reader = coll == UL_COLL_BROADCAST ? me != root : me == root;
    if (reader && it % 13 == 0) usleep(300);
    if (!reader && it % 17 == 3) usleep(300);
    int inplace = (it / 5) % 2 && me == root;
    size_t mine = coll == UL_COLL_GATHER ? (size_t)root * cnt : 0; /* in-place input */
    for (size_t i = 0; i < (size_t)n * cnt; i++) out[i] = -1;
    for (size_t i = 0; i < cnt; i++) {
      int src = coll == UL_COLL_BROADCAST ? root : me;
      in[i] = (int32_t)(src * 100000 + it * 10 + (int)i);
      if (inplace) out[mine + i] = in[i];
    }
    const void *send = inplace ? (const void *)(out + mine) : (const void *)in;
    ul_result_t rc = coll == UL_COLL_BROADCAST
                         ? ul_broadcast(send, out, cnt, UL_INT32, root, c, NULL)
                     : coll == UL_COLL_GATHER
                         ? ul_gather(send, me == root ? out : NULL, cnt, UL_INT32, root, c, NULL)
                         : ul_reduce(send, me == root ? out : NULL, cnt, UL_INT32, UL_SUM, root,
                                     c, NULL);
    CHECK(rc == UL_OK, "%s %d: %s", name, it, ul_comm_last_error(c));
    for (size_t i = 0; i < cnt && (coll == UL_COLL_BROADCAST || me == root); i++) {
      for (int r = 0; r < (coll == UL_COLL_GATHER ? n : 1); r++) {
        int32_t want = coll == UL_COLL_BROADCAST ? (int32_t)(root * 100000 + it * 10 + (int)i)
                       : coll == UL_COLL_GATHER  ? (int32_t)(r * 100000 + it * 10 + (int)i)
                                                 : (int32_t)(100000 * n * (n - 1) / 2 +
                                                             n * (it * 10 + (int)i));
        CHECK(out[(size_t)r * cnt + i] == want, "rank %d %s %d (root %d, %zu) from %d [%zu] = %d",
              me, name, it, root, cnt, r, i, out[(size_t)r * cnt + i]);
      }
    }
    ul_call_info_t info = {.struct_size = sizeof info};
    CHECK(ul_comm_last_call(c, &info) == UL_OK, "last_call");
    if (n > 1)
      CHECK((strcmp(info.algorithm, "line") == 0) == (cnt * sizeof(int32_t) <= limit),
            "rank %d %s %d count %zu ran '%s'", me, name, it, cnt, info.algorithm);
  }
  return 0;
}

static inline int line_broadcast_run_ahead(ul_comm_t c, int me, int n) {
  return line_rooted_run_ahead(c, me, n, UL_COLL_BROADCAST);
}

static inline int line_gather_run_ahead(ul_comm_t c, int me, int n) {
  return line_rooted_run_ahead(c, me, n, UL_COLL_GATHER);
}

static inline int line_reduce_run_ahead(ul_comm_t c, int me, int n) {
  return line_rooted_run_ahead(c, me, n, UL_COLL_REDUCE);
}

#undef RUN_AHEAD_CHECK

#endif
