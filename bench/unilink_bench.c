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
          "                                   alltoall gather scatter sendrecv | p2p\n"
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
          "\t[--backends a,b:opts,...] [--backend name] (default: $UNILINK_BACKEND or host)\n"
          "\t[--plot FILE.png] [--model-iters N (timed iterations on modeled backends, default 2)]\n"
          "\t[--verbose] [-h,--help]\n"
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

static int bench_add_backend(bench_opts_t *o, const char *list) {
  char *copy = strdup(list);
  if (!copy) return -1;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    if (!*tok) continue;
    if (o->nbackends >= BENCH_MAX_BACKENDS) { free(copy); return -1; }
    o->backends[o->nbackends++] = strdup(tok);
  }
  free(copy);
  return 0;
}

/* Returns -1 to continue, else an exit code. */
static int bench_parse_args(int argc, char **argv, bench_opts_t *o) {
  enum { OPT_RANKS = 1000, OPT_BACKENDS, OPT_BACKEND, OPT_PLOT, OPT_MODEL_ITERS, OPT_VERBOSE };
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
      {"verbose", no_argument, 0, OPT_VERBOSE},    {0, 0, 0, 0}};
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
  if (optind >= argc) {
    fprintf(stderr, "unilink-bench: missing operation\n");
    bench_usage(stderr, prog);
    return BENCH_EXIT_BADARGS;
  }
  if (optind + 1 < argc) {
    fprintf(stderr, "unilink-bench: unexpected argument '%s'\n", argv[optind + 1]);
    return BENCH_EXIT_BADARGS;
  }
  if (strcmp(argv[optind], "p2p") == 0) {
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
      UL_COLL_SENDRECV};
  if (op == BENCH_SENDRECV) {
    if (info->features & UL_FEATURE_P2P) return 1;
  } else if (info->collectives & (1u << map[op])) {
    return 1;
  }
  snprintf(why, n, "backend %s does not support %s", info->name ? info->name : "?", bench_op_name(op));
  return 0;
}

void bench_print_preamble(const bench_opts_t *o, const bench_run_t *r) {
  printf("# unilink-bench (nccl-tests 2.19 format) unilink=%s\n", ul_version_string());
  printf("# Collective test starting: unilink-bench %s\n", bench_op_name(o->op));
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
         "agg iters: %d validation: %d graph: 0 unalign: %d\n",
         r->nthreads, r->ngpus, o->minb, o->maxb, o->stepf > 1 ? (size_t)o->stepf : o->stepb,
         o->stepf > 1 ? "factor" : "bytes", o->warmup, o->iters, o->agg, o->check, o->unalign);
  if (o->blocking == 1) printf("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (o->blocking == 2) printf("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (o->blocking == 3) printf("# Blocking Enabled: wait and barrier after each outer iteration (-n); barrier time excluded \n");
  if (o->per_iter) printf("# Per-Iteration Report: host wall-clock timing; i_* uses max over ranks \n");
  printf("#\n");
}

void bench_print_devices(const bench_run_t *r) {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  printf("# Using devices\n");
  for (int i = 0; i < r->nlocal; i++) {
    int dev = -1;
    if (r->comms && r->comms[i]) ul_comm_device(r->comms[i], &dev);
    printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", r->first_rank + i, 0,
           (int)getpid(), host, dev, r->base, r->info.description ? r->info.description : "");
  }
}

/* Footer as nccl-tests writeResultFooter, plus one line per extra backend. */
static void bench_print_footer(const bench_opts_t *o, bench_run_t **runs, int nruns, int errors,
                               double check_bw, int *bw_fail) {
  printf("# %-20s : %d %s\n", "Out of bounds values", errors, errors ? "FAILED" : "OK");
  *bw_fail = 0;
  for (int i = 0; i < nruns; i++) {
    double avg = runs[i]->bw_count ? runs[i]->bw_sum / runs[i]->bw_count : 0.0;
    const char *verdict = "";
    if (check_bw >= 0) {
      verdict = avg < check_bw * 0.9 ? "FAILED" : "OK";
      if (avg < check_bw * 0.9) *bw_fail = 1;
    }
    if (i == 0)
      printf("# %-20s : %g %s\n", "Avg bus bandwidth", avg, verdict);
    else
      printf("# Avg bus bandwidth of %s%s : %g %s\n", runs[i]->backend,
             runs[i]->modeled ? " (modeled)" : "", avg, verdict);
  }
  printf("#\n");
  printf("# Collective test concluded: unilink-bench %s\n", bench_op_name(o->op));
  printf("#\n");
}

static void bench_cell(double v, int width, int numw) {
  char b[64];
  bench_format_num(v, numw, b, sizeof b);
  printf("  %*s", width, b);
}

static void bench_print_side_by_side(const bench_opts_t *o, bench_run_t **runs, int nruns) {
  int widths[BENCH_MAX_BACKENDS * 3];
  char labels[BENCH_MAX_BACKENDS * 3][160];
  int ncol = 0;
  for (int b = 0; b < nruns; b++) {
    const char *m = runs[b]->modeled ? "(modeled)" : "";
    snprintf(labels[ncol], sizeof labels[0], "time[%s]%s", runs[b]->backend, m);
    ncol++;
    snprintf(labels[ncol], sizeof labels[0], "busbw[%s]%s", runs[b]->backend, m);
    ncol++;
  }
  for (int b = 1; b < nruns; b++) {
    snprintf(labels[ncol], sizeof labels[0], "ratio[%s]", runs[b]->backend);
    ncol++;
  }
  int roof_run = -1;
  for (int b = 0; b < nruns && roof_run < 0; b++)
    if (runs[b]->membw > 0) roof_run = b;
  if (roof_run >= 0) {
    snprintf(labels[ncol], sizeof labels[0], "%%roof[%s]", runs[roof_run]->backend);
    ncol++;
  }
  for (int c = 0; c < ncol; c++) {
    int l = (int)strlen(labels[c]);
    widths[c] = l > 8 ? l : 8;
  }
  printf("#\n# Side by side: %s, %d ranks, out-of-place; time in us, busbw in GB/s; "
         "ratio = busbw / busbw[%s]\n",
         bench_op_name(o->op), runs[0]->nranks, runs[0]->backend);
  printf("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  for (int c = 0; c < ncol; c++) printf("  %*s", widths[c], labels[c]);
  printf("\n");
  printf("# %10s  %12s  %8s  %6s  %6s\n", "(B)", "(elements)", "", "", "");
  int nrows = runs[0]->nrows;
  for (int b = 1; b < nruns; b++) nrows = runs[b]->nrows < nrows ? runs[b]->nrows : nrows;
  for (int i = 0; i < nrows; i++) {
    const bench_row_t *row = &runs[0]->rows[i];
    const char *redop = bench_op_reduces(o->op) || o->op == BENCH_SENDRECV ? ul_op_name(row->redop)
                                                                            : "none";
    printf("%12zu  %12zu  %8s  %6s  %6d", row->bytes, row->count, bench_dtype_nccl_name(row->dtype),
           redop, row->root);
    int c = 0;
    for (int b = 0; b < nruns; b++) {
      const bench_side_t *S = &runs[b]->rows[i].side[0];
      bench_cell(S->time_us, widths[c++], 7);
      bench_cell(S->busbw, widths[c++], 6);
    }
    double base = row->side[0].busbw;
    for (int b = 1; b < nruns; b++) {
      double x = runs[b]->rows[i].side[0].busbw;
      if (base > 0) {
        char buf[32];
        snprintf(buf, sizeof buf, "%.2fx", x / base);
        printf("  %*s", widths[c++], buf);
      } else {
        printf("  %*s", widths[c++], "n/a");
      }
    }
    if (roof_run >= 0) {
      double pct = runs[roof_run]->rows[i].roof_pct;
      char buf[32];
      if (pct >= 0) snprintf(buf, sizeof buf, "%.1f", pct);
      else snprintf(buf, sizeof buf, "n/a");
      printf("  %*s", widths[c++], buf);
    }
    printf("\n");
  }
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
  if (argc == 3 && strcmp(argv[1], "--available") == 0) {
    /* for scripts: exit 0 if the backend can run here, else say why (exit 2) */
    char base[64];
    bench_base_name(argv[2], base, sizeof base);
    ul_backend_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    ul_result_t rc = ul_backend_query(base, &info);
    if (rc == UL_OK && info.available) { printf("%s: available\n", base); return BENCH_EXIT_OK; }
    printf("%s: %s\n", base, rc != UL_OK ? ul_last_error() : info.reason);
    return BENCH_EXIT_UNAVAILABLE;
  }
  int code = bench_parse_args(argc, argv, op);
  if (code >= 0) return code;
  if (op->p2p) return bench_p2p_main(op);

  int mpi = ul_launched_by_mpi();
  if (mpi && (op->nthreads != 2 || op->ngpus != 1))
    fprintf(stderr, "unilink-bench: under mpirun each process is one rank; -t/-g ignored\n");
  const char *envmin = getenv("NCCL_TESTS_MIN_BW");
  double check_bw = envmin ? atof(envmin) : -1.0;

  bench_run_t *runs[BENCH_MAX_BACKENDS];
  int nruns = 0, printed_preamble = 0, exit_code = BENCH_EXIT_OK, any_printing = !mpi;
  static double membw_cache = -1.0;
  for (int b = 0; b < op->nbackends; b++) {
    bench_run_t *r = calloc(1, sizeof *r);
    if (!r) return BENCH_EXIT_INTERNAL;
    r->o = op;
    r->backend = op->backends[b];
    bench_base_name(r->backend, r->base, sizeof r->base);
    r->info.struct_size = sizeof r->info;
    ul_result_t rc = ul_backend_query(r->base, &r->info);
    char why[300] = "";
    if (rc != UL_OK) {
      snprintf(why, sizeof why, "%s (%s)", ul_result_string(rc), ul_last_error());
    } else if (!r->info.available) {
      snprintf(why, sizeof why, "unavailable: %s", r->info.reason);
    } else {
      bench_op_supported(&r->info, op->op, why, sizeof why);
    }
    if (why[0]) {
      if (!mpi || getenv("OMPI_COMM_WORLD_RANK") == NULL ||
          strcmp(getenv("OMPI_COMM_WORLD_RANK"), "0") == 0)
        printf("# skipped backend %s: %s\n", r->backend, why);
      if (op->nbackends == 1) exit_code = rc == UL_OK && r->info.available ? BENCH_EXIT_UNSUPPORTED
                                                                           : BENCH_EXIT_UNAVAILABLE;
      free(r);
      continue;
    }
    r->modeled = (r->info.features & UL_FEATURE_MODELED) != 0;
    r->mpi = mpi;
    r->nthreads = mpi ? 1 : op->nthreads;
    r->ngpus = mpi ? 1 : op->ngpus;
    r->nlocal = r->nthreads * r->ngpus;
    r->nranks = r->nlocal;
    r->first_rank = 0;
    r->nprocs = 1;
    if (!mpi && (r->info.features & UL_FEATURE_THREAD_RANKS) == 0 && r->nlocal > 1) {
      printf("# skipped backend %s: it cannot run several ranks in one process "
             "(launch under mpirun)\n", r->backend);
      free(r);
      continue;
    }
    /* roofline on the host backend: memory bandwidth once per process */
    if (strcmp(r->base, "host") == 0 && (!mpi || getenv("OMPI_COMM_WORLD_RANK") == NULL ||
                                         strcmp(getenv("OMPI_COMM_WORLD_RANK"), "0") == 0)) {
      if (membw_cache < 0) membw_cache = bench_measure_membw();
      r->membw = membw_cache;
    }
    /* the preamble needs the rank layout, which mpirun only gives after bootstrap;
     * single-process runs print it first so a hang during init is visible */
    if (!mpi && !printed_preamble) {
      bench_print_preamble(op, r);
      printed_preamble = 1;
    }
    if (!mpi && (op->verbose || op->nbackends == 1)) {
      printf("# Backend: %s (%s%s)\n", r->backend, r->info.plugin ? "plugin " : "built-in",
             r->modeled ? ", modeled time" : "");
      if (r->membw > 0)
        printf("# Memory bandwidth: %.1f GB/s (read+write, 2-thread copy of 256 MiB); %%roof = "
               "busbw / roofline busbw (docs/bench.md)\n", r->membw);
    }
    code = bench_run_sweep(r);
    if (r->mpi && r->proc != 0) any_printing = 0;
    if (r->mpi && r->proc == 0) any_printing = 1;
    if (code != BENCH_EXIT_OK) {
      exit_code = exit_code ? exit_code : code;
      if (code == BENCH_EXIT_UNAVAILABLE && op->nbackends > 1) {
        printf("# skipped backend %s: unavailable\n", r->backend);
        exit_code = BENCH_EXIT_OK;
      }
      free(r->rows);
      free(r);
      continue;
    }
    runs[nruns++] = r;
  }
  if (nruns == 0) return exit_code ? exit_code : BENCH_EXIT_UNAVAILABLE;

  int errors = 0;
  for (int i = 0; i < nruns; i++) errors += runs[i]->errors;
  int bw_fail = 0;
  if (any_printing) {
    if (nruns > 1 || (op->nbackends > 1 && !op->verbose)) bench_print_side_by_side(op, runs, nruns);
    bench_print_footer(op, runs, nruns, errors, check_bw, &bw_fail);
    if (op->json) bench_write_json(op, runs, nruns);
    if (op->plot && bench_write_plot(op, runs, nruns) == 0) printf("# Plot written to %s\n", op->plot);
    printf("\n");
  }
  for (int i = 0; i < nruns; i++) {
    for (int k = 0; k < runs[i]->nrows; k++)
      for (int s = 0; s < 2; s++) free(runs[i]->rows[k].side[s].iter_us);
    free(runs[i]->rows);
    free(runs[i]);
  }
  if (exit_code) return exit_code;
  if (errors || bw_fail) {
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    printf(" .. %s pid %d: Test failure (%d results wrong%s)\n", host, (int)getpid(), errors,
           bw_fail ? ", average bus bandwidth below NCCL_TESTS_MIN_BW" : "");
    return BENCH_EXIT_RESULTS;
  }
  return BENCH_EXIT_OK;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  bench_opts_t o;
  memset(&o, 0, sizeof o);
  int code = bench_main(argc, argv, &o);
  for (int i = 0; i < o.nbackends; i++) free(o.backends[i]);
  return code;
}
