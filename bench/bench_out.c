/* unilink-bench outputs: JSON in nccl-tests' v3 shape, and gnuplot plots. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

extern char **environ;

/* ---- JSON ------------------------------------------------------------------- */

static void bench_jstr(FILE *f, const char *s) {
  char buf[2048];
  bench_json_escape(s ? s : "", buf, sizeof buf);
  fprintf(f, "\"%s\"", buf);
}

static void bench_jnum(FILE *f, double v) {
  if (v != v) fprintf(f, "\"nan\"");
  else fprintf(f, "%.6f", v);
}

static void bench_jnow(FILE *f) {
  char buf[64];
  time_t now = time(NULL);
  struct tm tmv;
  localtime_r(&now, &tmv);
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tmv);
  bench_jstr(f, buf);
}

static void bench_jside(FILE *f, const bench_opts_t *o, const bench_side_t *S) {
  if (!S->valid) { fprintf(f, "null"); return; }
  fprintf(f, "{\"%s\":", o->cputime ? "cpu_time" : "time");
  bench_jnum(f, S->time_us);
  fprintf(f, ",\"alg_bw\":");
  bench_jnum(f, S->algbw);
  fprintf(f, ",\"bus_bw\":");
  bench_jnum(f, S->busbw);
  fprintf(f, ",\"nwrong\":");
  if (S->wrong >= 0) bench_jnum(f, (double)S->wrong);
  else fprintf(f, "null");
  fprintf(f, "}");
}

static void bench_jiter(FILE *f, const bench_side_t *S, int iters, int skipped) {
  const bench_stats_t *st = &S->stats;
  /* nccl-tests 2.19 writePerIterReport: summary over iterations after the skipped ones,
   * times_us all of them, per_process_max_times_us one row per process when > 1 */
  fprintf(f, "{\"skipped_iterations\":%d,\"min_us\":%.6f,\"max_us\":%.6f,\"avg_us\":%.6f,"
             "\"p50_us\":%.6f,\"p95_us\":%.6f,\"p99_us\":%.6f,\"stdev_us\":%.6f,\"cv_pct\":%.6f,"
             "\"times_us\":[",
          skipped, st->min, st->max, st->mean, st->median, st->p95, st->p99, st->stdev, st->cv_pct);
  for (int i = 0; i < iters; i++) fprintf(f, "%s%.6f", i ? "," : "", S->iter_us[i]);
  fprintf(f, "]");
  if (S->proc_us && S->nproc_rows > 1) {
    fprintf(f, ",\"per_process_max_times_us\":[");
    for (int p = 0; p < S->nproc_rows; p++) {
      fprintf(f, "%s[", p ? "," : "");
      for (int i = 0; i < iters; i++)
        fprintf(f, "%s%.6f", i ? "," : "", S->proc_us[(size_t)p * iters + i]);
      fprintf(f, "]");
    }
    fprintf(f, "]");
  }
  fprintf(f, "}");
}

static FILE *bench_open_exclusive(const char *path, char *used, size_t n) {
  /* nccl-tests never overwrites: it tries path, path.0, path.1, ... */
  snprintf(used, n, "%s", path);
  for (int i = -1; i < 1000; i++) {
    if (i >= 0) snprintf(used, n, "%s.%d", path, i);
    int fd = open(used, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) return fdopen(fd, "w");
    if (errno != EEXIST) return NULL;
  }
  return NULL;
}

static void bench_jresults(FILE *f, const bench_opts_t *o, const bench_run_t *r) {
  int iters = r->modeled && o->model_iters > 0 && o->model_iters < o->iters ? o->model_iters
                                                                           : o->iters;
  int skip = o->per_iter_skip < iters ? o->per_iter_skip : 0;
  fprintf(f, "[");
  for (int i = 0; i < r->nrows; i++) {
    const bench_row_t *row = &r->rows[i];
    const char *redop = bench_op_reduces(o->op) || o->op == BENCH_SENDRECV
                            ? ul_op_name(row->redop) : "none";
    char root[16];
    snprintf(root, sizeof root, "%6d", row->root);
    fprintf(f, "%s{\"size\":%zu,\"count\":%zu,\"type\":", i ? "," : "", row->bytes, row->count);
    bench_jstr(f, bench_dtype_nccl_name(row->dtype));
    fprintf(f, ",\"redop\":");
    bench_jstr(f, redop);
    fprintf(f, ",\"root\":");
    bench_jstr(f, root);
    fprintf(f, ",\"out_of_place\":");
    bench_jside(f, o, &row->side[0]);
    fprintf(f, ",\"in_place\":");
    bench_jside(f, o, &row->side[1]);
    for (int s = 0; s < 2; s++) {
      if (!o->per_iter || !row->side[s].have_stats || !row->side[s].iter_us) continue;
      fprintf(f, ",\"%s_per_iter\":", s ? "in_place" : "out_of_place");
      bench_jiter(f, &row->side[s], iters, skip);
    }
    fprintf(f, ",\"actual_iterations\":%d,\"experiment_name\":\"\",\"backend\":", iters);
    bench_jstr(f, r->backend);
    fprintf(f, ",\"algorithm\":");
    bench_jstr(f, row->algorithm);
    fprintf(f, ",\"path\":");
    bench_jstr(f, row->path);
    fprintf(f, ",\"fallback\":%s,\"time_source\":\"%s\",\"measured_us\":",
            row->fallback ? "true" : "false", r->modeled ? "modeled" : "measured");
    bench_jnum(f, row->side[0].measured_us);
    fprintf(f, ",\"modeled_us\":");
    if (r->modeled) bench_jnum(f, row->side[0].modeled_us);
    else fprintf(f, "null");
    fprintf(f, ",\"roof_pct\":");
    if (row->roof_pct >= 0) bench_jnum(f, row->roof_pct);
    else fprintf(f, "null");
    fprintf(f, "}");
  }
  fprintf(f, "]");
}

static void bench_jdevices(FILE *f, const bench_run_t *r) {
  fprintf(f, "[");
  for (int q = 0; r->devs && q < r->ndevs; q++) {
    const bench_dev_t *d = &r->devs[q];
    fprintf(f, "%s{\"rank\":%d,\"group\":%d,\"pid\":%d,\"hostname\":", q ? "," : "", d->rank,
            d->group, d->pid);
    bench_jstr(f, d->host);
    fprintf(f, ",\"device\":%d,\"device_hex\":", d->device);
    bench_jstr(f, r->base);
    fprintf(f, ",\"device_info\":");
    bench_jstr(f, r->info.description);
    fprintf(f, "}");
  }
  fprintf(f, "]");
}

/* nccl-tests 2.19 JSON (src/util.cu): config with devices, results of one sweep (the
 * primary backend's), out_of_bounds, average_bus_bandwidth with the NCCL_TESTS_MIN_BW
 * verdict, errors. unilink adds keys only: "unilink_version", per-row "backend" and
 * friends, and "backends" (every backend; the others' rows in their own "results"). */
int bench_write_json(const bench_opts_t *o, bench_run_t **runs, int nruns, int primary,
                     double check_bw) {
  char used[4096];
  FILE *f = bench_open_exclusive(o->json, used, sizeof used);
  if (!f) {
    printf("# skipping json output; %s not accessible\n", o->json);
    return -1;
  }
  printf("# Writing JSON output to %s\n", used);
  fprintf(f, "{\"version\":3,\"start_time\":");
  bench_jnow(f);
  fprintf(f, ",\"args\":[");
  for (int i = 0; i < o->argc; i++) {
    if (i) fputc(',', f);
    bench_jstr(f, o->argv[i]);
  }
  /* only our own variables: the environment may hold secrets */
  fprintf(f, "],\"env\":[");
  int first = 1;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "UNILINK_", 8) != 0 && strncmp(*e, "NCCL_TESTS_", 11) != 0) continue;
    if (!first) fputc(',', f);
    first = 0;
    bench_jstr(f, *e);
  }
  fprintf(f, "],\"nccl_version\":0,\"unilink_version\":");
  bench_jstr(f, ul_version_string());
  const bench_run_t *r0 = runs[primary >= 0 ? primary : 0];
  fprintf(f, ",\"config\":{\"nthreads\":%d,\"ngpus\":%d,\"minimum_bytes\":%zu,\"maximum_bytes\":%zu,",
          r0->nthreads, r0->ngpus, o->minb, o->maxb);
  if (o->stepf > 1) fprintf(f, "\"step_factor\":%ld,", o->stepf);
  else fprintf(f, "\"step_bytes\":%zu,", o->stepb);
  fprintf(f, "\"warmup_iters\":%d,\"iterations\":%d,\"aggregated_iterations\":%d,\"validation\":%d,"
             "\"graph\":0,\"blocking_collectives\":\"%s\",\"per_iter_timing\":\"%s\","
             "\"per_iter_skip\":%d,\"parallel_init\":\"false\",\"devices\":",
          o->warmup, o->iters, o->agg, o->check, o->blocking ? "true" : "false",
          o->per_iter ? "true" : "false", o->per_iter_skip);
  bench_jdevices(f, r0);
  fprintf(f, ",\"operation\":");
  bench_jstr(f, bench_op_name(o->op));
  fprintf(f, ",\"ranks\":%d,\"model_iters\":%d},\"results\":", r0->nranks, o->model_iters);
  if (primary >= 0) bench_jresults(f, o, runs[primary]);
  else fprintf(f, "[]");
  fprintf(f, ",\"backends\":[");
  for (int b = 0; b < nruns; b++) {
    const bench_run_t *r = runs[b];
    fprintf(f, "%s{\"backend\":", b ? "," : "");
    bench_jstr(f, r->backend);
    fprintf(f, ",\"base\":");
    bench_jstr(f, r->base);
    fprintf(f, ",\"description\":");
    bench_jstr(f, r->info.description);
    fprintf(f, ",\"version\":");
    bench_jstr(f, r->info.version);
    fprintf(f, ",\"plugin\":%s,\"time_source\":\"%s\",\"primary\":%s,\"memory_bandwidth_gbs\":",
            r->info.plugin ? "true" : "false", r->modeled ? "modeled" : "measured",
            b == primary ? "true" : "false");
    if (r->membw > 0) bench_jnum(f, r->membw);
    else fprintf(f, "null");
    fprintf(f, ",\"roofline_gbs\":");
    if (r->membw > 0) {
      fprintf(f, "{");
      for (int i = 0; i < r->roof.n; i++) {
        fprintf(f, "%s\"%zu\":", i ? "," : "", r->roof.bytes[i]);
        bench_jnum(f, r->roof.gbs[i]);
      }
      fprintf(f, "}");
    } else {
      fprintf(f, "null");
    }
    const double floors[] = {r->line_floor.rtt_ns, r->line_floor.exchange_ns, r->piece_gbs};
    static const char *const floor_keys[] = {"line_round_trip_ns", "line_exchange_ns",
                                             "piece_exchange_gbs"};
    for (int i = 0; i < 3; i++) {
      fprintf(f, ",\"%s\":", floor_keys[i]);
      if (floors[i] > 0) bench_jnum(f, floors[i]);
      else fprintf(f, "null");
    }
    fprintf(f, ",\"out_of_bounds\":{\"count\":%d,\"okay\":\"%s\"},\"mean_bus_bandwidth\":",
            r->errors, r->errors ? "false" : "true");
    bench_jnum(f, bench_avg_busbw(r));
    if (b != primary) {
      /* the primary's rows are the top-level "results" only (no row appears twice) */
      fprintf(f, ",\"results\":");
      bench_jresults(f, o, r);
    }
    fprintf(f, "}");
  }
  fprintf(f, "]");
  int errors = primary >= 0 ? runs[primary]->errors : 0;
  double avg = primary >= 0 ? bench_avg_busbw(runs[primary]) : 0.0;
  fprintf(f, ",\"out_of_bounds\":{\"count\":%d,\"okay\":\"%s\"},"
             "\"average_bus_bandwidth\":{\"bandwidth\":",
          errors, errors ? "false" : "true");
  bench_jnum(f, avg);
  if (check_bw < 0 || primary < 0) fprintf(f, ",\"okay\":\"unchecked\"}");
  else fprintf(f, ",\"okay\":\"%s\"}", avg >= check_bw * 0.9 ? "true" : "false");
  fprintf(f, ",\"errors\":[],\"end_time\":");
  bench_jnow(f);
  fprintf(f, "}\n");
  return fclose(f) == 0 ? 0 : -1;
}

/* ---- plot --------------------------------------------------------------------- */

static int bench_run_gnuplot(const char *script) {
  pid_t pid;
  char *argv[] = {"gnuplot", (char *)script, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  /* gnuplot warnings (e.g. empty log-scale ranges) are not ours to show */
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  int rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static int bench_plot_with(const bench_opts_t *o, bench_run_t **runs, int nruns, const char *dat,
                           const char *terminal) {
  char script[] = "/tmp/unilink-bench-plot-XXXXXX";
  int fd = mkstemp(script);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "w");
  if (!f) { close(fd); unlink(script); return -1; }
  const bench_run_t *r0 = runs[0];
  const bench_row_t *row0 = r0->nrows ? &r0->rows[0] : NULL;
  fprintf(f, "set terminal %s size 1000,900\n", terminal);
  fprintf(f, "set output '%s'\n", o->plot);
  fprintf(f, "set multiplot layout 2,1 title \"unilink-bench %s: %d ranks, %s%s%s, out-of-place\"\n",
          bench_op_name(o->op), r0->nranks,
          row0 ? bench_dtype_nccl_name(row0->dtype) : "",
          bench_op_reduces(o->op) && row0 ? " " : "",
          bench_op_reduces(o->op) && row0 ? ul_op_name(row0->redop) : "");
  fprintf(f, "set logscale x 2\nset logscale y 10\nset format x \"%%.0b %%BB\"\nset format y \"%%g\"\n"
             "set xlabel \"message size (bytes)\"\nset grid\nset key left top\n");
  for (int panel = 0; panel < 2; panel++) {
    fprintf(f, "set ylabel \"%s\"\n", panel == 0 ? "busbw (GB/s)" : "time (us)");
    if (panel == 1) fprintf(f, "set key left top\n");
    fprintf(f, "plot ");
    for (int b = 0; b < nruns; b++) {
      /* measured: solid lines; modeled: dashed, and said so in the key */
      fprintf(f, "%s'%s' index %d using 1:%d with linespoints lw 2 dt %d pt %d title \"%s (%s)\"",
              b ? ", \\\n     " : "", dat, b, panel == 0 ? 3 : 2, runs[b]->modeled ? 2 : 1,
              (b % 6) + 5, runs[b]->backend, runs[b]->modeled ? "modeled" : "measured");
    }
    fprintf(f, "\n");
  }
  fprintf(f, "unset multiplot\n");
  fclose(f);
  int rc = bench_run_gnuplot(script);
  unlink(script);
  return rc;
}

int bench_write_plot(const bench_opts_t *o, bench_run_t **runs, int nruns) {
  if (strchr(o->plot, '\'') || strchr(o->plot, '\n')) {
    fprintf(stderr, "unilink-bench: --plot path must not contain quotes or newlines\n");
    return -1;
  }
  char dat[] = "/tmp/unilink-bench-data-XXXXXX";
  int fd = mkstemp(dat);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "w");
  if (!f) { close(fd); unlink(dat); return -1; }
  for (int b = 0; b < nruns; b++) {
    fprintf(f, "# %s\n", runs[b]->backend);
    int any = 0;
    for (int i = 0; i < runs[b]->nrows; i++) {
      const bench_row_t *row = &runs[b]->rows[i];
      const bench_side_t *S = &row->side[0];
      /* log axes cannot show zero sizes or zero bandwidth */
      if (!S->valid || row->bytes == 0 || S->busbw <= 0 || S->time_us <= 0) continue;
      fprintf(f, "%zu %.6g %.6g\n", row->bytes, S->time_us, S->busbw);
      any = 1;
    }
    if (!any) fprintf(f, "1 NaN NaN\n"); /* keep the index numbering */
    fprintf(f, "\n\n");
  }
  fclose(f);
  int rc = bench_plot_with(o, runs, nruns, dat, "pngcairo");
  if (rc != 0) rc = bench_plot_with(o, runs, nruns, dat, "png");
  unlink(dat);
  if (rc != 0) fprintf(stderr, "unilink-bench: gnuplot failed; is gnuplot-nox installed?\n");
  return rc;
}
