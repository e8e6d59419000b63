/* One rank's part of a broadcast run-ahead pattern, shared by the host suite
 * (test_host_collectives.c) and the fallback for backends without wait_word
 * (test_host_floor.c): 0 = every broadcast exact and on the line algorithm where it
 * should be, otherwise 1 with a message on stderr. */
#ifndef UL_TEST_LINE_BROADCAST_RUN_AHEAD_H
#define UL_TEST_LINE_BROADCAST_RUN_AHEAD_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <unilink/unilink.h>

#define RUN_AHEAD_CHECK(cond, ...)                                                               \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                                         \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

/* Small broadcasts go in flagged lines through a ring of 304 per root, the smallest
 * packed several to a line, the others a 19-line slot each (laid end to end when ranks
 * outnumber cores, from 3 ranks here: those must start the ring again rather than cross
 * its end; without that 4 of 7 rank counts fail), and a root may run ahead of its readers
 * until it comes round to a line they have not returned a credit for (one every 76
 * lines). Runs of 120
 * broadcasts from one root (about 400 lines: the ring wraps and the root waits within a
 * run) while its readers lag, then roots that change every call; in place and out of
 * place; counts that share a line (4, 8 and 28 bytes), fill one exactly (56), need two
 * (60), the 19-line limit (1064 bytes) and one past it (staged). Now and then the root
 * comes late, so readers wait: polling the line for packed broadcasts, which the root
 * does not signal, and for the signal of the others, whose count skips the packed ones.
 * A line rewritten before its reader read it, a broadcast placed differently on two
 * ranks, a credit or a signal counted wrong (a hang or a wrong value) fails here. */
static inline int line_broadcast_run_ahead(ul_comm_t c, int me, int n) {
  static const size_t cnts[] = {1, 14, 15, 266, 2, 267, 7};
  int32_t in[267], out[267];
  for (int it = 0; it < 1520; it++) {
    int root = it < 720 ? (it / 120) % n : it % n;
    size_t cnt = cnts[it % (sizeof cnts / sizeof cnts[0])];
    if (me != root && it % 13 == 0) usleep(300); /* readers lag; the root goes on */
    if (me == root && it % 17 == 3) usleep(300); /* the root lags: readers wait for it */
    int inplace = (it / 5) % 2;
    for (size_t i = 0; i < cnt; i++) {
      in[i] = (int32_t)(root * 100000 + it * 10 + (int)i);
      out[i] = me == root && inplace ? in[i] : -1;
    }
    ul_call_info_t info = {.struct_size = sizeof info};
    RUN_AHEAD_CHECK(ul_broadcast(inplace ? out : in, out, cnt, UL_INT32, root, c, NULL) == UL_OK,
          "bcast %d: %s", it, ul_comm_last_error(c));
    for (size_t i = 0; i < cnt; i++)
      RUN_AHEAD_CHECK(out[i] == (int32_t)(root * 100000 + it * 10 + (int)i),
            "rank %d bcast %d (root %d, %zu) [%zu] = %d", me, it, root, cnt, i, out[i]);
    RUN_AHEAD_CHECK(ul_comm_last_call(c, &info) == UL_OK, "last_call");
    if (n > 1)
      RUN_AHEAD_CHECK((strcmp(info.algorithm, "line") == 0) == (cnt * sizeof(int32_t) <= 1064),
            "rank %d bcast %d count %zu ran '%s'", me, it, cnt, info.algorithm);
  }
  return 0;
}

#undef RUN_AHEAD_CHECK

#endif
