/* unilink-bench: nccl-tests compatible benchmark of unilink collectives, with several
 * backends side by side, a host roofline, plots and a peer-to-peer matrix.
 * See docs/bench.md. */
#define _GNU_SOURCE
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

static void bench_usage(FILE *f, const char *prog) {
  fprintf(f,
          "USAGE: %s <op> [options]     op: allreduce allgather reduce_scatter broadcast reduce\n"
          "                                   alltoall gather scatter sendrecv hypercube | p2p\n"
          "  nccl-tests options:\n"
          "\t[-t,--nthreads <threads per process, each one rank>] (alias --ranks N; default 2)\n"
          "\t[-g,--ngpus <ranks per thread (ul_comm_init_all / streams)>]\n"
          "\t[-b,--minbytes <min size>] [-e,--maxbytes <max size>] (K/M/G suffixes; default 32M)\n"
          "\t[-i,--stepbytes <increment>] [-f,--stepfactor <factor>]\n"
          "\t[-n,--iters <iterations>] [-w,--warmup_iters <n>] [-m,--agg_iters <n>] [-N,--run_cycles <n>]\n"
          "\t[-c,--check <checked iterations, 0 = off>]\n"
          "\t[-o,--op <sum/prod/min/max/avg/all>] [-d,--datatype <type/all>] [-r,--root <root>]\n"
          "\t[-z,--blocking <0/1/2/3>] [-a,--average <0/1/2/3>] [-T,--timeout <seconds>]\n"
          "\t[-J,--output_file <file.json>] [-I,--per_iter_timing <0/1>] [-K,--per_iter_skip <n>]\n"
          "\t[-C,--report_cputime <0/1>] [-S,--report_timestamps <0/1>] [-u,--unalign <elements>]\n"
          "\t(-p -y -G -R -x -D -V -M are accepted and ignored: no CUDA graphs/streams here)\n"
          "  unilink options:\n"
          "\t[--backends a,b:opts,...|all] [--backend name] (default: $UNILINK_BACKEND or host;\n"
          "\t  a named backend that cannot run fails the run, \"all\" skips those with a # line)\n"
          "\t[--plot FILE.png] [--model-iters N (timed iterations on modeled backends, default 2)]\n"
          "\t[--extra-columns (%%roof and algorithm as data columns: breaks strict 13-field parsers)]\n"
          "\t[--sync-per-call (barrier, then one timed call, max over ranks; time = median, mean in\n"
          "\t  the per-size comments: what a latency-bound code sees; default: nccl-tests' back to back)]\n"
          "\t[--buffers ul|malloc (ul: ul_mem_alloc, may take zero-copy paths, the default; malloc:\n"
          "\t  page-aligned heap memory, as numpy arrays and CPU tensors are; host backends only)]\n"
          "\t[--verbose] [-h,--help]\n"
          "  As all_reduce_perf, all_gather_perf, ... hypercube_perf (links to unilink-bench) the\n"
          "  collective is the program name and the defaults are nccl-tests' (-t 1).\n"
          "  %s --available <backend>   exit 0 if the backend can run here\n",
          prog, prog);
}

static int bench_parse_int(const char *s, long lo, long hi, long *out) {
  char *end = NULL;
  if (!s || !*s) return -1;
  long v = strtol(s, &end, 0);
  if (*end != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int bench_push_backend(bench_opts_t *o, const char *name, int discovered) {
  for (int i = 0; discovered && i < o->nbackends; i++)
    if (strcmp(o->backends[i], name) == 0) return 0; /* "all" after an explicit name */
  if (o->nbackends >= BENCH_MAX_BACKENDS) return -1;
  o->discovered[o->nbackends] = (unsigned char)discovered;
  o->backends[o->nbackends++] = strdup(name);
  return 0;
}

/* A comma list of names; "all" stands for every registered backend. A name given
 * explicitly must run (else the run fails); one that "all" found may be skipped. */
static int bench_add_backend(bench_opts_t *o, const char *list) {
  char *copy = strdup(list);
  if (!copy) return -1;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    if (!*tok) continue;
    if (strcmp(tok, "all") == 0) {
      int n = ul_backend_count();
      for (int i = 0; i < n; i++) {
        ul_backend_info_t info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        if (ul_backend_get_info(i, &info) != UL_OK || !info.name) continue;
        if (bench_push_backend(o, info.name, 1)) { free(copy); return -1; }
      }
      continue;
    }
    if (bench_push_backend(o, tok, 0)) { free(copy); return -1; }
  }
  free(copy);
  return 0;
}

/* Returns -1 to continue, else an exit code. */
static int bench_parse_args(int argc, char **argv, bench_opts_t *o) {
  enum { OPT_RANKS = 1000, OPT_BACKENDS, OPT_BACKEND, OPT_PLOT, OPT_MODEL_ITERS, OPT_VERBOSE,
         OPT_EXTRA, OPT_SYNC, OPT_BUFFERS };
  static const struct option longopts[] = {
      {"nthreads", required_argument, 0, 't'},     {"ngpus", required_argument, 0, 'g'},
      {"minbytes", required_argument, 0, 'b'},     {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'},    {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},        {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'}, {"run_cycles", required_argument, 0, 'N'},
      {"parallel_init", required_argument, 0, 'p'}, {"check", required_argument, 0, 'c'},
      {"op", required_argument, 0, 'o'},           {"datatype", required_argument, 0, 'd'},
      {"root", required_argument, 0, 'r'},         {"blocking", required_argument, 0, 'z'},
      {"stream_null", required_argument, 0, 'y'},  {"timeout", required_argument, 0, 'T'},
      {"cudagraph", required_argument, 0, 'G'},    {"report_cputime", required_argument, 0, 'C'},
      {"report_timestamps", required_argument, 0, 'S'},
      {"output_file", required_argument, 0, 'J'},  {"average", required_argument, 0, 'a'},
      {"local_register", required_argument, 0, 'R'}, {"cta_policy", required_argument, 0, 'x'},
      {"device_implementation", required_argument, 0, 'D'},
      {"device_cta_count", required_argument, 0, 'V'}, {"memory", required_argument, 0, 'M'},
      {"unalign", required_argument, 0, 'u'},      {"per_iter_timing", required_argument, 0, 'I'},
      {"per_iter_skip", required_argument, 0, 'K'}, {"help", no_argument, 0, 'h'},
      {"ranks", required_argument, 0, OPT_RANKS},  {"backends", required_argument, 0, OPT_BACKENDS},
      {"backend", required_argument, 0, OPT_BACKEND}, {"plot", required_argument, 0, OPT_PLOT},
      {"model-iters", required_argument, 0, OPT_MODEL_ITERS},
      {"verbose", no_argument, 0, OPT_VERBOSE},
      {"extra-columns", no_argument, 0, OPT_EXTRA},
      {"sync-per-call", no_argument, 0, OPT_SYNC},
      {"buffers", required_argument, 0, OPT_BUFFERS}, {0, 0, 0, 0}};
  const char *prog = "unilink-bench";
  long v;
  int have_dtype = 0, have_op = 0;
#define BENCH_INT(field, lo, hi, what)                                                            \
  do {                                                                                            \
    if (bench_parse_int(optarg, lo, hi, &v)) {                                                    \
      fprintf(stderr, "invalid value '%s' for %s\n", optarg, what);                               \
      return BENCH_EXIT_BADARGS;                                                                  \
    }                                                                                             \
    field = (int)v;                                                                               \
  } while (0)
  for (;;) {
    int c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:",
                        longopts, NULL);
    if (c == -1) break;
    switch (c) {
    case 't': case OPT_RANKS: BENCH_INT(o->nthreads, 1, 1024, "nthreads/ranks"); break;
    case 'g': BENCH_INT(o->ngpus, 1, 1024, "ngpus"); break;
    case 'b':
      if (bench_parse_size(optarg, &o->minb)) {
        fprintf(stderr, "invalid size specified for 'minbytes'\n");
        return BENCH_EXIT_BADARGS;
      }
      break;
    case 'e':
      if (bench_parse_size(optarg, &o->maxb)) {
        fprintf(stderr, "invalid size specified for 'maxbytes'\n");
        return BENCH_EXIT_BADARGS;
      }
      break;
    case 'i':
      if (bench_parse_size(optarg, &o->stepb) || o->stepb == 0) {
        fprintf(stderr, "invalid size specified for 'stepBytes'\n");
        return BENCH_EXIT_BADARGS;
      }
      break;
    case 'f':
      if (bench_parse_int(optarg, 1, 1 << 20, &v)) {
        fprintf(stderr, "invalid value '%s' for stepfactor\n", optarg);
        return BENCH_EXIT_BADARGS;
      }
      o->stepf = v;
      break;
    case 'n': BENCH_INT(o->iters, 1, 1 << 24, "iters"); break;
    case 'm': BENCH_INT(o->agg, 1, 1 << 16, "agg_iters"); break;
    case 'w': BENCH_INT(o->warmup, 0, 1 << 24, "warmup_iters"); break;
    case 'N': BENCH_INT(o->cycles, 1, 1 << 20, "run_cycles"); break;
    case 'c': BENCH_INT(o->check, 0, 1 << 20, "check"); break;
    case 'r': BENCH_INT(o->root, 0, 1 << 20, "root"); break;
    case 'z': BENCH_INT(o->blocking, 0, 3, "blocking"); break;
    case 'a': BENCH_INT(o->average, 0, 3, "average"); break;
    case 'T': BENCH_INT(o->timeout_s, 0, 1 << 20, "timeout"); break;
    case 'I': BENCH_INT(o->per_iter, 0, 1, "per_iter_timing"); break;
    case 'K': BENCH_INT(o->per_iter_skip, 0, 1 << 24, "per_iter_skip"); break;
    case 'C': BENCH_INT(o->cputime, 0, 1, "report_cputime"); break;
    case 'S': BENCH_INT(o->timestamps, 0, 1, "report_timestamps"); break;
    case 'u': BENCH_INT(o->unalign, 0, 1 << 16, "unalign"); break;
    case OPT_MODEL_ITERS: BENCH_INT(o->model_iters, 0, 1 << 24, "model-iters"); break;
    case 'o':
      if (strcmp(optarg, "all") == 0) {
        o->nredops = UL_OP_COUNT;
        for (int i = 0; i < UL_OP_COUNT; i++) o->redops[i] = (ul_op_t)i;
      } else if (ul_op_from_name(optarg, &o->redops[0]) == UL_OK) {
        o->nredops = 1;
      } else {
        fprintf(stderr, "invalid op '%s' (sum prod min max avg all; mulsum is not supported)\n", optarg);
        return BENCH_EXIT_BADARGS;
      }
      have_op = 1;
      break;
    case 'd':
      if (strcmp(optarg, "all") == 0) {
        o->ndtypes = UL_DTYPE_COUNT;
        for (int i = 0; i < UL_DTYPE_COUNT; i++) o->dtypes[i] = (ul_dtype_t)i;
      } else if (ul_dtype_from_name(optarg, &o->dtypes[0]) == UL_OK) {
        o->ndtypes = 1;
      } else {
        fprintf(stderr, "invalid datatype '%s'\n", optarg);
        return BENCH_EXIT_BADARGS;
      }
      have_dtype = 1;
      break;
    case 'J': o->json = optarg; break;
    case OPT_PLOT: o->plot = optarg; break;
    case OPT_BACKENDS: case OPT_BACKEND:
      if (bench_add_backend(o, optarg)) {
        fprintf(stderr, "too many backends (at most %d)\n", BENCH_MAX_BACKENDS);
        return BENCH_EXIT_BADARGS;
      }
      break;
    case OPT_VERBOSE: o->verbose = 1; break;
    case OPT_EXTRA: o->extra_columns = 1; break;
    case OPT_SYNC: o->sync_per_call = 1; break;
    case OPT_BUFFERS:
      if (strcmp(optarg, "malloc") == 0) o->malloc_buffers = 1;
      else if (strcmp(optarg, "ul") == 0) o->malloc_buffers = 0;
      else {
        fprintf(stderr, "%s: --buffers takes 'ul' (ul_mem_alloc) or 'malloc', not '%s'\n", prog,
                optarg);
        return BENCH_EXIT_BADARGS;
      }
      break;
    case 'p': case 'y': case 'G': case 'R': case 'x': case 'D': case 'V': case 'M':
      break; /* CUDA/NCCL-specific: accepted so nccl-tests command lines still run */
    case 'h':
      bench_usage(stdout, prog);
      return BENCH_EXIT_OK;
    default:
      bench_usage(stderr, prog);
      return BENCH_EXIT_BADARGS;
    }
  }
#undef BENCH_INT
  if (o->perf_name) {
    /* all_reduce_perf ...: the collective is the program's name, as nccl-tests */
    if (optind < argc) {
      fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
      return BENCH_EXIT_BADARGS;
    }
  } else if (optind >= argc) {
    fprintf(stderr, "unilink-bench: missing operation\n");
    bench_usage(stderr, prog);
    return BENCH_EXIT_BADARGS;
  }
  if (!o->perf_name && optind + 1 < argc) {
    fprintf(stderr, "unilink-bench: unexpected argument '%s'\n", argv[optind + 1]);
    return BENCH_EXIT_BADARGS;
  }
  if (o->perf_name) {
  } else if (strcmp(argv[optind], "p2p") == 0) {
    o->p2p = 1;
  } else if (bench_op_from_name(argv[optind], &o->op) != 0) {
    fprintf(stderr, "unilink-bench: unknown operation '%s'\n", argv[optind]);
    return BENCH_EXIT_BADARGS;
  }
  if (!have_dtype) { o->ndtypes = 1; o->dtypes[0] = UL_FP32; }
  if (!have_op) { o->nredops = 1; o->redops[0] = UL_SUM; }
  if (!o->p2p && o->minb > o->maxb) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", o->minb, o->maxb);
    return BENCH_EXIT_BADARGS;
  }
  if (o->per_iter_skip >= o->iters) {
    fprintf(stderr, "per-iteration skip (-K) must be between 0 and %d. Disabling.\n", o->iters - 1);
    o->per_iter_skip = 0;
  }
  if (o->nbackends == 0) {
    const char *env = getenv("UNILINK_BACKEND");
    bench_add_backend(o, env && *env ? env : "host");
  }
  /* nccl-tests' NCCL_TESTS_DEVICE: the first device index this process uses (-1: unset) */
  o->device0 = -1;
  const char *dev = getenv("NCCL_TESTS_DEVICE");
  if (dev && *dev && (bench_parse_int(dev, -1, 1 << 20, &v) != 0)) {
    fprintf(stderr, "unilink-bench: NCCL_TESTS_DEVICE=\"%s\" is not a device index (0, 1, ...)\n",
            dev);
    return BENCH_EXIT_BADARGS;
  }
  if (dev && *dev) o->device0 = (int)v;
  bench_a2av_init(&o->a2av);
  if (!o->p2p && o->op == BENCH_ALLTOALLV) {
    char err[640];
    if (bench_a2av_from_env(&o->a2av, err, sizeof err)) {
      fprintf(stderr, "unilink-bench: %s\n", err);
      return BENCH_EXIT_BADARGS;
    }
    if (o->a2av.matrix && o->minb != o->maxb) {
      fprintf(stderr, "unilink-bench: with NCCL_TESTS_ALLTOALLV_MATRIX_FILE the matrix gives "
              "every size: set -b and -e to the same value (e.g. -b 32M -e 32M), -e at least "
              "the largest row or column total\n");
      return BENCH_EXIT_BADARGS;
    }
  }
  return -1;
}

static void bench_base_name(const char *full, char *out, size_t n) {
  snprintf(out, n, "%s", full);
  char *colon = strchr(out, ':');
  if (colon) *colon = '\0';
}

static int bench_op_supported(const ul_backend_info_t *info, bench_op_t op, char *why, size_t n) {
  static const ul_coll_t map[BENCH_OP_COUNT] = {
      UL_COLL_ALLREDUCE, UL_COLL_ALLGATHER, UL_COLL_REDUCE_SCATTER, UL_COLL_BROADCAST,
      UL_COLL_REDUCE,    UL_COLL_ALLTOALL,  UL_COLL_GATHER,         UL_COLL_SCATTER,
      UL_COLL_SENDRECV,  UL_COLL_SENDRECV,  UL_COLL_ALLTOALLV,      UL_COLL_ALLGATHERV};
  if (op == BENCH_SENDRECV || op == BENCH_HYPERCUBE) {
    if (info->features & UL_FEATURE_P2P) return 1;
  } else if (info->collectives & (1u << map[op])) {
    return 1;
  }
  snprintf(why, n, "backend %s does not support %s", info->name ? info->name : "?", bench_op_name(op));
  return 0;
}

/* nccl-tests program names: the collective comes from argv[0] (all_reduce_perf ...). */
static const struct { const char *prog; bench_op_t op; } bench_perf_names[] = {
    {"all_reduce_perf", BENCH_ALLREDUCE}, {"all_gather_perf", BENCH_ALLGATHER},
    {"reduce_scatter_perf", BENCH_REDUCE_SCATTER}, {"broadcast_perf", BENCH_BROADCAST},
    {"reduce_perf", BENCH_REDUCE}, {"alltoall_perf", BENCH_ALLTOALL},
    {"gather_perf", BENCH_GATHER}, {"scatter_perf", BENCH_SCATTER},
    {"sendrecv_perf", BENCH_SENDRECV}, {"hypercube_perf", BENCH_HYPERCUBE},
    {"alltoallv_perf", BENCH_ALLTOALLV}, {"allgatherv_perf", BENCH_ALLGATHERV},
};

static const char *bench_perf_name(bench_op_t op) {
  for (size_t i = 0; i < sizeof bench_perf_names / sizeof bench_perf_names[0]; i++)
    if (bench_perf_names[i].op == op) return bench_perf_names[i].prog;
  return bench_op_name(op);
}

static void bench_free_run(bench_run_t *r) {
  for (int k = 0; k < r->nrows; k++)
    for (int s = 0; s < 2; s++) {
      free(r->rows[k].side[s].iter_us);
      free(r->rows[k].side[s].proc_us);
    }
  free(r->rows);
  free(r->devs);
  free(r);
}

static int bench_rank0_env(void) {
  /* before bootstrap: only the first process prints skip notes */
  const char *v = getenv("OMPI_COMM_WORLD_RANK");
  if (!v) v = getenv("PMI_RANK");
  if (!v) v = getenv("PMIX_RANK");
  return !v || strcmp(v, "0") == 0;
}

static int bench_main(int argc, char **argv, bench_opts_t *op) {
  op->minb = op->maxb = (size_t)32 << 20;
  op->stepb = (size_t)1 << 20;
  op->stepf = 1;
  op->iters = 20;
  op->warmup = 1;
  op->agg = 1;
  op->cycles = 1;
  op->check = 1;
  op->average = 1;
  op->nthreads = 2; /* unilink default: 2 ranks (nccl-tests: 1 thread, 1 GPU) */
  op->ngpus = 1;
  op->model_iters = 2;
  op->argc = argc;
  op->argv = argv;
  const char *base = strrchr(argv[0], '/');
  base = base ? base + 1 : argv[0];
  for (size_t i = 0; i < sizeof bench_perf_names / sizeof bench_perf_names[0]; i++)
    if (strcmp(base, bench_perf_names[i].prog) == 0) {
      op->perf_name = 1;
      op->op = bench_perf_names[i].op;
      op->nthreads = 1; /* nccl-tests' defaults: one thread, one GPU */
    }
  if (argc == 3 && strcmp(argv[1], "--available") == 0) {
    /* for scripts: exit 0 if the backend can run here, else say why (exit 2) */
    char bn[64];
    bench_base_name(argv[2], bn, sizeof bn);
    ul_backend_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    ul_result_t rc = ul_backend_query(bn, &info);
    if (rc == UL_OK && info.available) { printf("%s: available\n", bn); return BENCH_EXIT_OK; }
    printf("%s: %s\n", bn, rc != UL_OK ? ul_last_error() : info.reason);
    return BENCH_EXIT_UNAVAILABLE;
  }
  int code = bench_parse_args(argc, argv, op);
  if (code >= 0) return code;
  if (op->p2p) return bench_p2p_main(op);
  op->prog = op->perf_name ? base : bench_perf_name(op->op);

  int mpi = ul_launched_by_mpi();
  if (mpi && (op->nthreads != (op->perf_name ? 1 : 2) || op->ngpus != 1))
    fprintf(stderr, "unilink-bench: under mpirun each process is one rank; -t/-g ignored\n");
  const char *envmin = getenv("NCCL_TESTS_MIN_BW");
  double check_bw = envmin ? atof(envmin) : -1.0;
  int rank0 = !mpi || bench_rank0_env();

  /* query every backend first: measured ones run (and print) before modeled ones */
  bench_run_t *todo[BENCH_MAX_BACKENDS];
  int ntodo = 0, exit_code = BENCH_EXIT_OK, failed = 0;
  char failed_names[512] = "";
  for (int pass = 0; pass < 2; pass++) {
    for (int b = 0; b < op->nbackends; b++) {
      char bn[64];
      bench_base_name(op->backends[b], bn, sizeof bn);
      ul_backend_info_t info;
      memset(&info, 0, sizeof info);
      info.struct_size = sizeof info;
      ul_result_t rc = ul_backend_query(bn, &info);
      int modeled = rc == UL_OK && (info.features & UL_FEATURE_MODELED) != 0;
      if (modeled != pass) continue;
      char why[300] = "";
      if (rc != UL_OK) snprintf(why, sizeof why, "%s (%s)", ul_result_string(rc), ul_last_error());
      else if (!info.available) snprintf(why, sizeof why, "unavailable: %s", info.reason);
      else bench_op_supported(&info, op->op, why, sizeof why);
      if (!why[0] && op->device0 >= 0 && (info.features & UL_FEATURE_DEVICE_MEMORY) == 0)
        snprintf(why, sizeof why, "NCCL_TESTS_DEVICE=%d selects devices from index %d, and "
                 "backend %s has none to select (its ranks run on the CPU); unset "
                 "NCCL_TESTS_DEVICE to run it", op->device0, op->device0, bn);
      if (!why[0] && !mpi && (info.features & UL_FEATURE_THREAD_RANKS) == 0 &&
          op->nthreads * op->ngpus > 1)
        snprintf(why, sizeof why, "it cannot run several ranks in one process (launch under mpirun)");
      if (why[0]) {
        if (op->discovered[b]) {
          /* found by "all": a backend this machine lacks is no failure */
          if (rank0) bench_note("# skipped backend %s: %s\n", op->backends[b], why);
          continue;
        }
        /* asked for by name: not running it fails the run, as nccl-tests fails when a
         * device it was told to use is missing */
        int code = rc != UL_OK ? (op->nbackends == 1 ? BENCH_EXIT_UNAVAILABLE : BENCH_EXIT_USAGE)
                 : !info.available ? BENCH_EXIT_UNAVAILABLE : BENCH_EXIT_UNSUPPORTED;
        if (rank0) bench_note("# backend %s failed: %s\n", op->backends[b], why);
        failed++;
        exit_code = exit_code ? exit_code : code;
        snprintf(failed_names + strlen(failed_names), sizeof failed_names - strlen(failed_names),
                 "%s%s", failed_names[0] ? "," : "", op->backends[b]);
        continue;
      }
      bench_run_t *r = calloc(1, sizeof *r);
      if (!r) return BENCH_EXIT_INTERNAL;
      r->o = op;
      r->backend = op->backends[b];
      r->discovered = op->discovered[b];
      snprintf(r->base, sizeof r->base, "%s", bn);
      r->info = info;
      r->modeled = modeled;
      todo[ntodo++] = r;
    }
  }

  bench_run_t *runs[BENCH_MAX_BACKENDS];
  int nruns = 0, any_printing = !mpi;
  for (int b = 0; b < ntodo; b++) {
    bench_run_t *r = todo[b];
    r->mpi = mpi;
    r->nthreads = mpi ? 1 : op->nthreads;
    r->ngpus = mpi ? 1 : op->ngpus;
    r->nlocal = r->nthreads * r->ngpus;
    r->nranks = r->nlocal;
    r->first_rank = 0;
    r->nprocs = 1;
    /* roofline on the host backend, measured once per process. Under mpirun the sweep
     * measures it once the other processes wait in a (sleeping) barrier: measured while
     * they spin in the launcher's bootstrap, the roof came out about half as high. */
    r->want_roof = strcmp(r->base, "host") == 0;
    if (r->want_roof && rank0 && !mpi) bench_roof_set(r);
    /* single-process runs print the preamble first so a hang during init is visible;
     * under mpirun the first sweep prints it on rank 0 */
    if (!mpi) bench_print_preamble(op, r);
    code = bench_run_sweep(r);
    if (r->mpi && r->proc != 0) any_printing = 0;
    if (r->mpi && r->proc == 0) any_printing = 1;
    if (code != BENCH_EXIT_OK) {
      if (code == BENCH_EXIT_UNAVAILABLE && r->discovered) {
        if (rank0) bench_note("# skipped backend %s: %s\n", r->backend,
                              r->fail_msg[0] ? r->fail_msg : "unavailable");
      } else {
        exit_code = exit_code ? exit_code : code;
        failed++;
        snprintf(failed_names + strlen(failed_names), sizeof failed_names - strlen(failed_names),
                 "%s%s", failed_names[0] ? "," : "", r->backend);
        if (rank0) bench_note("# backend %s failed: %s\n", r->backend, r->fail_msg);
      }
      bench_free_run(r);
      continue;
    }
    /* every block but the primary (first, measured) ends with a gate-proof summary */
    if (r->printing && (nruns > 0 || r->modeled)) bench_print_secondary_footer(r);
    runs[nruns++] = r;
  }
  if (nruns == 0) {
    if (rank0) bench_flush_notes();
    if (failed && rank0) {
      char host[256] = "localhost";
      gethostname(host, sizeof host - 1);
      printf(" .. %s pid %d: Test failure (backend(s) failed: %s)\n", host, (int)getpid(),
             failed_names);
    }
    return exit_code ? exit_code : BENCH_EXIT_UNAVAILABLE;
  }

  /* the primary run gets nccl-tests' footer: the first measured one (they ran first) */
  int primary = runs[0]->modeled ? -1 : 0;
  int errors = 0;
  for (int i = 0; i < nruns; i++) errors += runs[i]->errors;
  int bw_fail = 0;
  if (primary >= 0 && check_bw >= 0 && bench_avg_busbw(runs[primary]) < check_bw * 0.9) bw_fail = 1;
  if (any_printing) {
    if (nruns > 1) bench_print_side_by_side(op, runs, nruns);
    if (nruns > 1 || primary < 0) printf("#\n");
    bench_print_footer(op, primary >= 0 ? runs[primary] : NULL, check_bw);
    if (op->json) bench_write_json(op, runs, nruns, primary, check_bw);
    if (op->plot && bench_write_plot(op, runs, nruns) == 0) printf("# Plot written to %s\n", op->plot);
    printf("\n");
  }
  for (int i = 0; i < nruns; i++) bench_free_run(runs[i]);
  if (errors || bw_fail || failed) {
    if (any_printing) {
      char host[256] = "localhost";
      gethostname(host, sizeof host - 1);
      char what[700] = "";
      if (errors) snprintf(what, sizeof what, "%d results wrong", errors);
      if (bw_fail)
        snprintf(what + strlen(what), sizeof what - strlen(what), "%saverage bus bandwidth below "
                 "NCCL_TESTS_MIN_BW", what[0] ? ", " : "");
      if (failed)
        snprintf(what + strlen(what), sizeof what - strlen(what), "%sbackend(s) failed: %s",
                 what[0] ? ", " : "", failed_names);
      printf(" .. %s pid %d: Test failure (%s)\n", host, (int)getpid(), what);
    }
    if (exit_code) return exit_code;
    return BENCH_EXIT_RESULTS;
  }
  return exit_code;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  bench_opts_t o;
  memset(&o, 0, sizeof o);
  int code = bench_main(argc, argv, &o);
  for (int i = 0; i < o.nbackends; i++) free(o.backends[i]);
  bench_a2av_free(&o.a2av);
  return code;
}
