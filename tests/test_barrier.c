/* The generic layer's barrier (ul__generic_barrier, run by ul_barrier and inside the
 * direct algorithms). With a CPU per rank every rank signals every peer and waits for
 * theirs (decision 0019); with ranks outnumbering CPUs the ranks gather at rank 0, which
 * releases them, so that rank 0 leaves first. What tells the two apart without timing:
 * whether rank 0's signals to its peers come before or after every peer's arrival.
 * Ranks are fork()ed children on the "hostcount" backend, whose signal op records that. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fork_ranks.h"
#include "generic/generic_internal.h" /* UL__SIG_SYNC, oversubscribed */
#include "host_count.h"
#include "ul_core.h"

/* Rank 0's barrier signals (index sync_index[0]) sent while some peer's arrival signal
 * had not yet reached it, and those sent in all, counted per process. */
static int sync_index[3];
static long early_releases, releases;
static uint64_t sent_to[3];

static void rank0_release_seen(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                               int index) {
  if (my_rank != 0 || index != sync_index[0] || peer < 1 || peer > 2) return;
  uint64_t epoch = ++sent_to[peer]; /* the barrier this signal belongs to */
  releases++;
  for (int q = 1; q < 3; q++) {
    uint64_t v = 0;
    if (count_ops.read_signal(c, w, sync_index[q], &v) == UL_OK && v < epoch) {
      early_releases++;
      return;
    }
  }
}

/* Six barriers, ranks 1 and 2 arriving 20 ms after rank 0, the barrier's form switched
 * between them as the test says (the signal counters must stay consistent across both
 * forms), then one more collective to check the communicator still works. */
static int gathered_by(ul_unique_id_t id, int n, int me, const int *over) {
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "hostcount";
  cfg.timeout_ms = 60000;
  ul_comm_t c;
  STEP(1, ul_comm_init_rank(&c, &cfg, n, id, me) == UL_OK, "init: %s", ul_last_error());
  my_rank = me;
  for (int q = 0; q < n; q++) {
    sync_index[q] = UL__SIG_SYNC(c->generic, q);
    sent_to[q] = c->generic->sync_epoch; /* the barriers of init went before */
  }
  for (int b = 0; b < 6; b++) {
    c->generic->oversubscribed = over[b];
    c->generic->reason[UL_COLL_BARRIER].algo = NULL; /* its cached reason: comms never switch */
    long early0 = early_releases, sent0 = releases;
    if (me != 0) usleep(20000);
    STEP(2, ul_barrier(c, NULL) == UL_OK, "barrier %d: %s", b, ul_comm_last_error(c));
    ul_call_info_t info = {.struct_size = sizeof info};
    STEP(6, ul_comm_last_call(c, &info) == UL_OK &&
                (strstr(info.reason, "releases them") != NULL) == over[b],
         "barrier %d (ranks outnumber CPUs: %d): reason %s", b, over[b], info.reason);
    if (me == 0) {
      STEP(3, releases - sent0 == n - 1, "barrier %d: rank 0 signalled %ld peers", b,
           releases - sent0);
      long early = early_releases - early0;
      STEP(4, over[b] ? early == 0 : early > 0,
           "barrier %d (ranks outnumber CPUs: %d): %ld of rank 0's signals went before every "
           "peer had arrived",
           b, over[b], early);
    }
  }
  int32_t x = me + 1, sum = 0;
  STEP(5, ul_allreduce(&x, &sum, 1, UL_INT32, UL_SUM, c, NULL) == UL_OK && sum == 6,
       "allreduce after the barriers: %d", sum);
  return fork_ranks_comm_down(c, me);
}

static int rank_barriers(ul_unique_id_t id, int n, int me) {
  static const int over[6] = {1, 1, 0, 1, 0, 0};
  return gathered_by(id, n, me, over);
}

Test(barrier, ranks_outnumbering_cpus_gather_at_rank_0, .timeout = 60) {
  register_hostcount();
  signal_seen = rank0_release_seen;
  fork_ranks_run("hostcount", 3, rank_barriers);
}
