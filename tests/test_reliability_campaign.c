// UNILINK_TEST_LINK_SHARED
/* SIGKILL campaign on host process ranks (issue 16): randomized, bounded trials. Each
 * trial forks 2-4 ranks that loop over one collective (allreduce, allgather, broadcast,
 * alltoall or barrier; small or 4 MiB messages), kills one at a random moment, and
 * requires every survivor to return UL_ERR_PEER_LOST naming the killed rank within the
 * communicator's timeout, to exit cleanly, and the job to leave no /dev/shm segment.
 * UNILINK_TEST_SEED replays a campaign (the seed is printed on failure). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include "reliability_util.h"

#define TRIALS 30
#define TRIAL_TIMEOUT_MS 5000
#define LOOP_LIMIT_MS 10000 /* a rank that never sees the loss stops here and fails */

enum { C_ALLREDUCE, C_ALLGATHER, C_BROADCAST, C_ALLTOALL, C_BARRIER, C_KINDS };
static const char *const coll_name[C_KINDS] = {"allreduce", "allgather", "broadcast",
                                               "alltoall", "barrier"};

static uint64_t rng_next(uint64_t *s) { /* splitmix64: reproducible from the seed */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static ul_result_t one_call(int kind, float *s, float *r, size_t count, ul_comm_t c) {
  switch (kind) {
  case C_ALLREDUCE: return ul_allreduce(s, r, count, UL_FP32, UL_SUM, c, NULL);
  case C_ALLGATHER: return ul_allgather(s, r, count, UL_FP32, c, NULL);
  case C_BROADCAST: return ul_broadcast(s, r, count, UL_FP32, 0, c, NULL);
  case C_ALLTOALL: return ul_alltoall(s, r, count, UL_FP32, c, NULL);
  default: return ul_barrier(c, NULL);
  }
}

typedef struct trial {
  int n, victim, kind, delay_ms;
  size_t count; /* per rank block, elements */
} trial_t;

/* Child: init, loop until the loss shows, report the return time, wait for the gate. */
static void rank_main(const trial_t *t, ul_unique_id_t id, int rank, int ready, int done,
                      int gate) {
  ul_comm_t c = NULL;
  ul_config_t cfg = cfg_ms(TRIAL_TIMEOUT_MS);
  ul_result_t rc = ul_comm_init_rank(&c, &cfg, t->n, id, rank);
  CHILD_CHECK(1, rc == UL_OK, "rank %d init: %s", rank, ul_last_error());
  size_t elems = t->count * (size_t)t->n;
  float *s = malloc(elems * sizeof *s), *r = malloc(elems * sizeof *r);
  CHILD_CHECK(2, s && r, "rank %d: no memory", rank);
  for (size_t k = 0; k < elems; k++) s[k] = (float)(k % 7);
  char b = 'r';
  CHILD_CHECK(3, write(ready, &b, 1) == 1, "rank %d: pipe", rank);
  double start = now_ms();
  do {
    rc = one_call(t->kind, s, r, t->count, c);
  } while (rc == UL_OK && now_ms() - start < LOOP_LIMIT_MS);
  double returned = now_ms();
  char msg[512];
  snprintf(msg, sizeof msg, "%s", ul_comm_last_error(c));
  CHILD_CHECK(8, write(done, &returned, sizeof returned) == sizeof returned, "pipe");
  while (read(gate, &b, 1) < 0 && errno == EINTR) {
  }
  CHILD_CHECK(4, rc == UL_ERR_PEER_LOST, "rank %d: %s returned %s: %s", rank,
              coll_name[t->kind], ul_result_name(rc), msg);
  CHILD_CHECK(5, names_rank(msg, t->victim), "rank %d: sentence does not name rank %d: %s",
              rank, t->victim, msg);
  CHILD_CHECK(6, ul_comm_destroy(c) == UL_OK, "rank %d: destroy", rank);
  free(s);
  free(r);
  _exit(0);
}

/* Figures of the whole campaign (docs/reliability.md quotes the printed line). */
static double lat_max, lat_sum;
static int lat_n, leaks_seen;

/* Returns 0 or prints why the trial failed. */
static int run_trial(int no, const trial_t *t, uint64_t seed) {
  ul_unique_id_t id = host_id();
  char prefix[64];
  job_prefix(&id, prefix);
  int ready[2], done[2], gate[2];
  cr_assert(pipe(ready) == 0 && pipe(done) == 0 && pipe(gate) == 0);
  pid_t pids[4];
  for (int i = 0; i < t->n; i++) {
    pids[i] = fork();
    cr_assert_neq(pids[i], -1);
    if (pids[i] == 0) {
      close(ready[0]);
      close(done[0]);
      close(gate[1]);
      rank_main(t, id, i, ready[1], done[1], gate[0]);
    }
  }
  close(ready[1]);
  close(done[1]);
  close(gate[0]);
  int bad = 0;
  for (int i = 0; i < t->n; i++) {
    char b;
    if (read(ready[0], &b, 1) != 1) bad = 1;
  }
  sleep_ms(t->delay_ms);
  double killed = now_ms();
  cr_assert_eq(kill(pids[t->victim], SIGKILL), 0);
  double worst = 0;
  for (int i = 0; i < t->n - 1; i++) {
    double ret;
    if (read(done[0], &ret, sizeof ret) != sizeof ret) { bad = 1; break; }
    if (ret - killed > worst) worst = ret - killed;
    lat_sum += ret - killed;
    lat_n++;
  }
  int st[4];
  st[t->victim] = wait_child(pids[t->victim]); /* reaped first, as a launcher would */
  close(gate[1]);
  for (int i = 0; i < t->n; i++)
    if (i != t->victim) st[i] = wait_child(pids[i]);
  close(ready[0]);
  close(done[0]);
  char list[512];
  int left = job_segments(prefix, list, sizeof list);
  if (worst > lat_max) lat_max = worst;
  leaks_seen += left;
  int failed = bad || worst > TRIAL_TIMEOUT_MS || left != 0;
  for (int i = 0; i < t->n; i++)
    if (i != t->victim && st[i] != 0) failed = 1;
  if (failed) {
    fprintf(stderr,
            "trial %d (seed %llu): %d ranks, %s of %zu floats, rank %d killed after %d ms: "
            "slowest survivor returned %.0f ms after the kill (bound %d); survivor status",
            no, (unsigned long long)seed, t->n, coll_name[t->kind], t->count, t->victim,
            t->delay_ms, worst, TRIAL_TIMEOUT_MS);
    for (int i = 0; i < t->n; i++)
      if (i != t->victim) fprintf(stderr, " r%d=%d", i, st[i]);
    fprintf(stderr, "; segments left: %s\n", left ? list : "none");
  }
  return failed;
}

Test(peer_loss, sigkill_campaign_30_trials, .timeout = 280) {
  const char *env = getenv("UNILINK_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
  uint64_t s = seed;
  int failures = 0;
  double t0 = now_ms();
  for (int no = 0; no < TRIALS; no++) {
    trial_t t;
    t.n = 2 + (int)(rng_next(&s) % 3);
    t.victim = (int)(rng_next(&s) % (uint64_t)t.n);
    t.kind = (int)(rng_next(&s) % C_KINDS);
    t.count = rng_next(&s) % 2 ? 16 : ((size_t)1 << 20) / (size_t)t.n; /* small or 4 MiB */
    t.delay_ms = (int)(rng_next(&s) % 40);
    failures += run_trial(no, &t, seed);
  }
  printf("host SIGKILL campaign: %d/%d trials passed, segments left %d; detection latency "
         "(kill to survivor's return) max %.1f ms, mean %.1f ms over %d survivors; %.1f s in "
         "all (seed %llu)\n",
         TRIALS - failures, TRIALS, leaks_seen, lat_max, lat_n ? lat_sum / lat_n : 0.0, lat_n,
         (now_ms() - t0) / 1e3, (unsigned long long)seed);
  cr_expect_eq(failures, 0, "%d of %d trials failed (UNILINK_TEST_SEED=%llu replays them)",
               failures, TRIALS, (unsigned long long)seed);
}
