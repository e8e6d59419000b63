/* raw_mpi_bench: the collectives straight on MPI, no unilink, so the report and
 * scripts/compare.sh can put the host and mpi backends beside raw Open MPI (or MPICH) on the
 * same machine with the same sizes. Links MPI only.
 *
 *   mpirun -np N raw_mpi_bench COLL [-b 8] [-e 64M] [-f 2] [-n 20] [-w 1] [-c 1] [--sync-per-call]
 *   COLL: allreduce | allgather | reduce_scatter | broadcast | alltoall | reduce | gather |
 *         scatter (float, sum, root 0)
 *
 * Output: nccl-tests' table (13 fields a row, out-of-place then in-place; in-place uses
 * MPI_IN_PLACE; MPI_Bcast has one buffer, so both broadcast columns time the same call;
 * alltoall prints "0 0 0 N/A" in place, as unilink-bench does), the "# Out of bounds
 * values" and "# Avg bus bandwidth" footer. In place, the root of reduce and gather passes
 * MPI_IN_PLACE as its input and the root of scatter as its output. Sizes follow
 * nccl-tests: allgather, alltoall, reduce_scatter, gather and scatter round each rank's
 * block down to whole 16 bytes (4 floats) and print the count per rank; busbw = algbw * 2(N-1)/N
 * (allreduce), (N-1)/N (allgather, reduce_scatter, alltoall, gather, scatter), 1
 * (broadcast, reduce). Reduce and gather results are checked on the root only.
 *
 * Timing: by default nccl-tests' method, a barrier, n calls back to back, time / n, the
 * maximum over ranks. --sync-per-call: a barrier before each call, each call timed alone,
 * the maximum over ranks per call, the median of the n calls.
 * Check (-c 1): inputs are small integers from a fixed seed (exact in float, and so are
 * their sums), one fresh call per column, every element compared exactly; #wrong is the
 * count over all ranks. Exit: 0 all right, 1 wrong results, 2 bad arguments or MPI error. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum {
  C_ALLREDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_BROADCAST, C_ALLTOALL, C_REDUCE, C_GATHER,
  C_SCATTER, C_N
};
static const char *k_coll[C_N] = {"allreduce", "allgather", "reduce_scatter", "broadcast",
                                  "alltoall",  "reduce",    "gather",         "scatter"};

static int g_rank, g_n;
static float *g_send, *g_recv;

/* Pages of [p, p + bytes) resident in memory (mincore), with their total in *all. */
static long resident_pages(const void *p, size_t bytes, long *all) {
  long page = sysconf(_SC_PAGESIZE), n = 0, i;
  char *start = (char *)((uintptr_t)p & ~(uintptr_t)(page - 1));
  size_t len = (size_t)((char *)p + bytes - start);
  long npages = (long)((len + (size_t)page - 1) / (size_t)page);
  unsigned char *v = malloc((size_t)npages);
  *all = npages;
  if (!v || mincore(start, len, v) != 0) {
    free(v);
    return -1;
  }
  for (i = 0; i < npages; i++) n += v[i] & 1;
  free(v);
  return n;
}

static void usage(void) {
  fprintf(stderr, "usage: mpirun -np N raw_mpi_bench allreduce|allgather|reduce_scatter|"
                  "broadcast|alltoall|reduce|gather|scatter [-b MIN] [-e MAX] [-f FACTOR] "
                  "[-n ITERS] [-w WARMUP] [-c 0|1] [--sync-per-call]\n");
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0) return 1;
  switch (*end) {
  case 'K': case 'k': v *= 1024; end++; break;
  case 'M': case 'm': v *= 1024.0 * 1024; end++; break;
  case 'G': case 'g': v *= 1024.0 * 1024 * 1024; end++; break;
  default: break;
  }
  if (*end) return 1;
  *out = (size_t)v;
  return 0;
}

/* The input of rank r at element i: a small integer, so any sum over ranks is exact. */
static float input(int r, size_t i) { return (float)((int)((i * 13 + (size_t)r * 7 + 5) % 61) - 30); }

/* Element counts for one size (nccl-tests' rounding): what each call sends, receives, and the
 * count column. */
typedef struct { size_t send, recv, shown, bytes; } counts_t;

static counts_t counts_for(int coll, size_t bytes) {
  size_t n = (size_t)g_n, c = bytes / sizeof(float);
  size_t block = c / n & ~(size_t)(16 / sizeof(float) - 1); /* whole 16 bytes, as nccl-tests */
  counts_t k;
  switch (coll) {
  case C_ALLGATHER: case C_GATHER: k.send = block; k.recv = block * n; k.shown = block; break;
  case C_REDUCE_SCATTER: case C_SCATTER:
    k.recv = block; k.send = block * n; k.shown = block; break;
  case C_ALLTOALL: k.send = block * n; k.recv = k.send; k.shown = block; break;
  default: k.send = c; k.recv = c; k.shown = c; break;
  }
  k.bytes = (coll == C_ALLGATHER || coll == C_GATHER ? k.recv : k.send) * sizeof(float);
  return k;
}

static double bus_factor(int coll) {
  double n = g_n;
  if (coll == C_ALLREDUCE) return 2 * (n - 1) / n;
  if (coll == C_BROADCAST || coll == C_REDUCE) return 1;
  return (n - 1) / n;
}

/* One call; in_place uses MPI_IN_PLACE (alltoall never comes here in place). */
static int call(int coll, const counts_t *k, int in_place) {
  const void *sb = in_place ? MPI_IN_PLACE : (const void *)g_send;
  int c = (int)k->send, root = g_rank == 0;
  /* Off the root, in place is the receive buffer holding the input (as nccl-tests): MPI
   * allows MPI_IN_PLACE at the root only. */
  const void *rooted = !in_place ? (const void *)g_send
                       : root    ? MPI_IN_PLACE
                       : coll == C_GATHER ? (const void *)(g_recv + (size_t)g_rank * k->send)
                                          : (const void *)g_recv;
  switch (coll) {
  case C_ALLREDUCE: return MPI_Allreduce(sb, g_recv, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  case C_ALLGATHER:
    return MPI_Allgather(sb, in_place ? 0 : c, in_place ? MPI_DATATYPE_NULL : MPI_FLOAT, g_recv,
                         c, MPI_FLOAT, MPI_COMM_WORLD);
  case C_REDUCE_SCATTER:
    /* in place: the whole input sits in the receive buffer, the result in its first block */
    return MPI_Reduce_scatter_block(sb, g_recv, (int)k->recv, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  case C_BROADCAST: return MPI_Bcast(g_recv, c, MPI_FLOAT, 0, MPI_COMM_WORLD);
  case C_REDUCE: return MPI_Reduce(rooted, g_recv, c, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  case C_GATHER:
    return MPI_Gather(rooted, c, MPI_FLOAT, g_recv, c, MPI_FLOAT, 0, MPI_COMM_WORLD);
  case C_SCATTER:
    if (in_place && root)
      return MPI_Scatter(g_recv, (int)k->recv, MPI_FLOAT, MPI_IN_PLACE, (int)k->recv, MPI_FLOAT,
                         0, MPI_COMM_WORLD);
    return MPI_Scatter(g_send, (int)k->recv, MPI_FLOAT, g_recv, (int)k->recv, MPI_FLOAT, 0,
                       MPI_COMM_WORLD);
  default:
    return MPI_Alltoall(g_send, c / g_n, MPI_FLOAT, g_recv, c / g_n, MPI_FLOAT, MPI_COMM_WORLD);
  }
}

/* Inputs for one call: the send buffer, or the receive buffer where the call reads it. */
static void fill(int coll, const counts_t *k, int in_place) {
  size_t i;
  for (i = 0; i < k->send; i++) g_send[i] = input(g_rank, i);
  for (i = 0; i < k->recv; i++) g_recv[i] = -1000.0f; /* never a right answer */
  if (coll == C_BROADCAST) {
    if (g_rank == 0) memcpy(g_recv, g_send, k->send * sizeof(float));
  } else if (in_place && (coll == C_ALLGATHER || coll == C_GATHER)) {
    memcpy(g_recv + (size_t)g_rank * k->send, g_send, k->send * sizeof(float));
  } else if (in_place) {
    memcpy(g_recv, g_send, k->send * sizeof(float));
  }
}

static float expected(int coll, const counts_t *k, size_t i) {
  float s = 0;
  int r;
  switch (coll) {
  case C_ALLREDUCE:
    for (r = 0; r < g_n; r++) s += input(r, i);
    return s;
  case C_ALLGATHER: return input((int)(i / k->send), i % k->send);
  case C_REDUCE_SCATTER:
    for (r = 0; r < g_n; r++) s += input(r, (size_t)g_rank * k->recv + i);
    return s;
  case C_BROADCAST: return input(0, i);
  case C_REDUCE:
    for (r = 0; r < g_n; r++) s += input(r, i);
    return s;
  case C_GATHER: return input((int)(i / k->send), i % k->send);
  case C_SCATTER: return input(0, (size_t)g_rank * k->recv + i);
  default: {
    size_t per = k->send / (size_t)g_n; /* block p of the result: rank p's block for me */
    return input((int)(i / per), (size_t)g_rank * per + i % per);
  }
  }
}

/* Wrong elements over all ranks after one fresh call, or -1 on an MPI error. */
static long check(int coll, const counts_t *k, int in_place) {
  long bad = 0, all = 0;
  size_t i, m = coll == C_REDUCE_SCATTER || coll == C_ALLGATHER || coll == C_SCATTER ? k->recv
               : coll == C_GATHER ? (g_rank == 0 ? k->recv : 0)
               : coll == C_REDUCE ? (g_rank == 0 ? k->send : 0)
                                  : k->send;
  fill(coll, k, in_place);
  if (call(coll, k, in_place) != MPI_SUCCESS) return -1;
  for (i = 0; i < m; i++) bad += g_recv[i] != expected(coll, k, i);
  MPI_Allreduce(&bad, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return all;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Microseconds per call, the same on every rank; < 0 on an MPI error. */
static double time_call(int coll, const counts_t *k, int in_place, int iters, int warmup,
                        int per_call, double *scratch) {
  int i, rc = MPI_SUCCESS;
  double t, mx;
  if (in_place) fill(coll, k, in_place); /* the receive buffer must hold a whole input */
  for (i = 0; i < warmup && rc == MPI_SUCCESS; i++) rc = call(coll, k, in_place);
  if (rc != MPI_SUCCESS) return -1;
  if (!per_call) {
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    for (i = 0; i < iters && rc == MPI_SUCCESS; i++) rc = call(coll, k, in_place);
    t = (MPI_Wtime() - t) / iters;
    if (rc != MPI_SUCCESS) return -1;
    MPI_Allreduce(&t, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return mx * 1e6;
  }
  for (i = 0; i < iters; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    rc = call(coll, k, in_place);
    scratch[i] = MPI_Wtime() - t;
    if (rc != MPI_SUCCESS) return -1;
  }
  MPI_Allreduce(MPI_IN_PLACE, scratch, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  qsort(scratch, (size_t)iters, sizeof(double), cmp_double);
  t = iters % 2 ? scratch[iters / 2] : (scratch[iters / 2 - 1] + scratch[iters / 2]) / 2;
  return t * 1e6;
}

/* nccl-tests' time column: 7 wide, fewer decimals as it grows */
static void time_str(char *buf, size_t len, double us) {
  snprintf(buf, len, us < 1e4 ? (us < 1e3 ? "%7.2f" : "%7.1f") : "%7.0f", us);
}

static void print_header(int coll, size_t minb, size_t maxb, size_t factor, int iters,
                         int warmup, int chk, int per_call) {
  char lib[MPI_MAX_LIBRARY_VERSION_STRING], host[256] = "?", *nl;
  int len = 0, r;
  long pages = 0, spages = 0, rpages = 0;
  long mine = resident_pages(g_send, maxb + sizeof(float), &spages);
  long rmine = resident_pages(g_recv, maxb + sizeof(float), &rpages), resident = 0;
  mine = mine < 0 || rmine < 0 ? -1 : mine + rmine;
  pages = spages + rpages;
  MPI_Reduce(&mine, &resident, 1, MPI_LONG, MPI_MIN, 0, MPI_COMM_WORLD);
  long pid = (long)getpid();
  long *pids = g_rank == 0 ? malloc(sizeof(long) * (size_t)g_n) : NULL;
  char *hosts = g_rank == 0 ? malloc(sizeof(host) * (size_t)g_n) : NULL;
  gethostname(host, sizeof(host) - 1);
  MPI_Gather(&pid, 1, MPI_LONG, pids, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  MPI_Gather(host, (int)sizeof(host), MPI_CHAR, hosts, (int)sizeof(host), MPI_CHAR, 0,
             MPI_COMM_WORLD);
  if (g_rank == 0) {
    MPI_Get_library_version(lib, &len);
    if ((nl = strchr(lib, '\n')) != NULL) *nl = 0;
    if ((nl = strchr(lib, ',')) != NULL) *nl = 0;
    printf("# raw_mpi_bench: MPI only, no unilink (%s)\n", lib);
    printf("# Collective test starting: raw_mpi_bench %s\n", k_coll[coll]);
    printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d "
           "iters: %d agg iters: 1 validation: %d graph: 0\n", minb, maxb, factor, warmup, iters,
           chk);
    printf("# Buffers: send and receive of %zu bytes a rank from malloc, written before "
           "timing: %ld of %ld pages resident (fewest over ranks)\n",
           maxb + sizeof(float), resident, pages);
    printf("#\n# Timing: %s\n", per_call ? "barrier, one call, max over ranks, median of the calls"
                                         : "calls back to back, time / iters, max over ranks");
    printf("# Using devices\n");
    for (r = 0; r < g_n; r++)
      printf("#  Rank %2d Group  0 Pid %6ld on %10s device -1 [host] MPI process\n", r, pids[r],
             hosts + (size_t)r * sizeof(host));
    printf("#\n");
    printf("# %70s %34s\n", "out-of-place", "in-place");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size",
           "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
           "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "");
  }
  free(pids);
  free(hosts);
}

int main(int argc, char **argv) {
  size_t minb = 8, maxb = 64u << 20, factor = 2, size;
  int iters = 20, warmup = 1, chk = 1, per_call = 0, coll = -1, i, a;
  long wrong_total = 0;
  double bw_sum = 0;
  int bw_count = 0, err = 0;
  double *scratch;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_n);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); /* report, then exit 2 */
  for (a = 1; a < argc && !err; a++) {
    const char *v = a + 1 < argc ? argv[a + 1] : NULL;
    if (!strcmp(argv[a], "--sync-per-call")) {
      per_call = 1;
    } else if (argv[a][0] != '-' && coll < 0) {
      for (i = 0; i < C_N; i++)
        if (!strcmp(argv[a], k_coll[i])) coll = i;
      err = coll < 0;
    } else if (v && !strcmp(argv[a], "-b")) {
      err = parse_size(v, &minb), a++;
    } else if (v && !strcmp(argv[a], "-e")) {
      err = parse_size(v, &maxb), a++;
    } else if (v && !strcmp(argv[a], "-f")) {
      err = parse_size(v, &factor) || factor < 2, a++;
    } else if (v && (!strcmp(argv[a], "-n") || !strcmp(argv[a], "-w") || !strcmp(argv[a], "-c"))) {
      char *end;
      long x = strtol(v, &end, 10);
      err = *end || x < 0 || x > 1000000 || (argv[a][1] == 'n' && x < 1);
      if (argv[a][1] == 'n') iters = (int)x;
      else if (argv[a][1] == 'w') warmup = (int)x;
      else chk = x != 0;
      a++;
    } else {
      err = 1;
    }
  }
  if (err || coll < 0 || minb > maxb || maxb / sizeof(float) > (size_t)0x7fffffff) {
    if (g_rank == 0) usage();
    MPI_Finalize();
    return 2;
  }
  g_send = malloc(maxb + sizeof(float));
  g_recv = malloc(maxb + sizeof(float));
  scratch = malloc(sizeof(double) * (size_t)iters);
  if (!g_send || !g_recv || !scratch) {
    fprintf(stderr, "raw_mpi_bench: out of memory for %zu bytes\n", maxb);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  /* Written once, as unilink-bench's buffers are: a page never written reads as the
   * kernel's shared zero page, which stays in the cache and costs no memory traffic, and
   * out-of-place calls read sizes no fill() has reached yet. */
  memset(g_send, 0, maxb + sizeof(float));
  memset(g_recv, 0, maxb + sizeof(float));
  print_header(coll, minb, maxb, factor, iters, warmup, chk, per_call);
  for (size = minb; size <= maxb && !err; size *= factor) {
    counts_t k = counts_for(coll, size);
    int side, has_ip = coll != C_ALLTOALL;
    char cols[2][64];
    for (side = 0; side < 2; side++) {
      double us, alg;
      long wrong = 0;
      char t[16], w[24];
      if (side == 1 && !has_ip) {
        snprintf(cols[1], sizeof(cols[1]), "  %7s  %6s  %6s  %6s", "0", "0", "0", "N/A");
        break;
      }
      us = time_call(coll, &k, side, iters, warmup, per_call, scratch);
      if (us >= 0 && chk) wrong = check(coll, &k, side);
      if (us < 0 || wrong < 0) {
        if (g_rank == 0) fprintf(stderr, "raw_mpi_bench: MPI error in %s\n", k_coll[coll]);
        err = 2;
        break;
      }
      alg = us > 0 ? (double)k.bytes / (us * 1e3) : 0; /* bytes / us / 1e3 = GB/s */
      bw_sum += alg * bus_factor(coll);
      bw_count++;
      wrong_total += wrong;
      time_str(t, sizeof(t), us);
      if (chk) snprintf(w, sizeof(w), "%ld", wrong);
      else snprintf(w, sizeof(w), "N/A");
      snprintf(cols[side], sizeof(cols[side]), "  %7s  %6.2f  %6.2f  %6s", t, alg,
               alg * bus_factor(coll), w);
    }
    if (!err && g_rank == 0)
      printf("%12zu  %12zu  %8s  %6s  %6d%s%s\n", k.bytes, k.shown, "float",
             coll == C_ALLREDUCE || coll == C_REDUCE_SCATTER || coll == C_REDUCE ? "sum" : "none",
             coll >= C_BROADCAST && coll != C_ALLTOALL ? 0 : -1, cols[0], cols[1]);
    if (size == 0) break; /* -b 0 would loop forever */
  }
  if (g_rank == 0 && !err) {
    printf("#\n# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g\n#\n", bw_count ? bw_sum / bw_count : 0.0);
    printf("# Collective test concluded: raw_mpi_bench %s\n#\n", k_coll[coll]);
  }
  fflush(stdout);
  free(g_send);
  free(g_recv);
  free(scratch);
  MPI_Finalize();
  return err ? 2 : (wrong_total ? 1 : 0);
}
