/* The nccl-tests text of unilink-bench: preamble, "Using devices" (every rank), the
 * 13-field table, footers and the side-by-side comparison. The format contract is in
 * docs/bench.md ("Output format"): data rows carry exactly nccl-tests' 13 fields (17 per
 * side with -I); everything unilink adds is on '#' lines unless --extra-columns. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

static int bench_preamble_done;
static char bench_notes[4096];

void bench_note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (bench_preamble_done) {
    vprintf(fmt, ap);
  } else {
    size_t n = strlen(bench_notes);
    vsnprintf(bench_notes + n, sizeof bench_notes - n, fmt, ap);
  }
  va_end(ap);
}

void bench_flush_notes(void) {
  fputs(bench_notes, stdout);
  bench_notes[0] = 0;
}

void bench_print_preamble(const bench_opts_t *o, const bench_run_t *r) {
  if (bench_preamble_done) return;
  bench_preamble_done = 1;
  /* nccl-tests' banner; headers/library are NCCL versions, 0 here (no NCCL involved) */
  printf("# nccl-tests version 2.19.6 nccl-headers=0 nccl-library=0 (unilink-bench, unilink %s)\n",
         ul_version_string());
  printf("# Collective test starting: %s\n", o->prog);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
         "agg iters: %d validation: %d graph: 0 unalign: %d\n",
         r->nthreads, r->ngpus, o->minb, o->maxb, o->stepf > 1 ? (size_t)o->stepf : o->stepb,
         o->stepf > 1 ? "factor" : "bytes", o->warmup, o->iters, o->agg, o->check, o->unalign);
  if (o->blocking == 1) printf("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (o->blocking == 2) printf("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (o->blocking == 3)
    printf("# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n");
  if (o->sync_per_call)
    printf("# Synchronized per call: barrier, one timed call, max over ranks; time = median of %d calls \n", o->iters);
  if (o->malloc_buffers)
    printf("# Buffers: malloc (page-aligned heap memory, not ul_mem_alloc)\n");
  if (o->per_iter) {
    printf("# Per-Iteration Report: host wall-clock timing; i_* uses max over process rows");
    if (o->per_iter_skip) printf("; summary skips first %d iterations", o->per_iter_skip);
    printf(" \n");
  }
  printf("#\n");
  bench_flush_notes();
}

/* Host names travel as 6-byte chunks in doubles: integers below 2^48 survive the
 * sum-based exchange exactly (raw bytes in a double would not: -0.0 + 0.0 is +0.0). */
#define BENCH_DEV_K 16
#define BENCH_HOST_CHUNKS (BENCH_DEV_K - 3)

int bench_gather_devices(bench_run_t *r) {
  free(r->devs);
  r->devs = calloc((size_t)r->nranks, sizeof *r->devs);
  if (!r->devs) return -1;
  r->ndevs = r->nranks;
  char host[BENCH_HOST_CHUNKS * 6 + 1];
  memset(host, 0, sizeof host);
  gethostname(host, sizeof host - 1);
  if (!r->mpi) {
    for (int i = 0; i < r->nlocal; i++) {
      bench_dev_t *d = &r->devs[r->first_rank + i];
      d->rank = r->first_rank + i;
      d->group = r->color;
      d->pid = (int)getpid();
      d->device = -1;
      if (r->comms && r->comms[i]) ul_comm_device(r->comms[i], &d->device);
      snprintf(d->host, sizeof d->host, "%s", host);
    }
    return 0;
  }
  /* one rank per process: every process contributes its line's fields to rank 0 */
  double mine[BENCH_DEV_K];
  double *all = calloc((size_t)r->nranks * BENCH_DEV_K, sizeof(double));
  if (!all) return -1;
  int dev = -1;
  ul_comm_device(r->comms[0], &dev);
  mine[0] = getpid();
  mine[1] = dev;
  mine[2] = r->color;
  for (int c = 0; c < BENCH_HOST_CHUNKS; c++) {
    uint64_t v = 0;
    for (int b = 0; b < 6; b++) v |= (uint64_t)(unsigned char)host[c * 6 + b] << (8 * b);
    mine[3 + c] = (double)v;
  }
  if (bench_exchange(r, 0, mine, BENCH_DEV_K, all)) { free(all); return -1; }
  for (int q = 0; q < r->nranks; q++) {
    const double *x = all + (size_t)q * BENCH_DEV_K;
    bench_dev_t *d = &r->devs[q];
    d->rank = q;
    d->pid = (int)x[0];
    d->device = (int)x[1];
    d->group = (int)x[2];
    for (int c = 0; c < BENCH_HOST_CHUNKS; c++) {
      uint64_t v = (uint64_t)x[3 + c];
      for (int b = 0; b < 6; b++) d->host[c * 6 + b] = (char)((v >> (8 * b)) & 0xff);
    }
    d->host[sizeof d->host - 1] = '\0';
  }
  free(all);
  return 0;
}

void bench_print_devices(const bench_run_t *r) {
  printf("# Using devices\n");
  for (int q = 0; r->devs && q < r->ndevs; q++) {
    const bench_dev_t *d = &r->devs[q];
    printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", d->rank, d->group, d->pid,
           d->host, d->device, r->base, r->info.description ? r->info.description : "");
  }
}

/* "# <what> (GB/s, method): 64K 95.1 256K ..." */
static void bench_print_roof(const char *what, const bench_roof_t *roof) {
  printf("# %s (GB/s, " BENCH_ROOF_METHOD "):", what);
  for (int i = 0; i < roof->n; i++) {
    size_t b = roof->bytes[i];
    printf(" %zu%s %.1f", b >= (1u << 20) ? b >> 20 : b >> 10, b >= (1u << 20) ? "M" : "K",
           roof->gbs[i]);
  }
  printf("\n");
}

void bench_print_block_start(const bench_run_t *r) {
  static int blocks;
  if (blocks++) printf("#\n"); /* between one backend's block and the next */
  printf("# Backend: %s (%s%s)\n", r->backend, r->info.plugin ? "plugin" : "built-in",
         r->modeled ? ", modeled time: not a measurement" : "");
  /* A modeled figure carries its link, topology and confidence (ul_comm_topology), and a
   * low-confidence one a warning, in '#' lines strict parsers skip. */
  if (r->modeled && r->comms && r->comms[0] && r->nranks > 1) {
    ul_link_info_t *links = calloc((size_t)r->nranks, sizeof *links);
    if (links && ul_comm_topology(r->comms[0], links, r->nranks) == UL_OK) {
      int far = r->nranks - 1; /* the farthest peer: another node when there is one */
      printf("# Modeled links of rank 0: peer 1 over %s", links[1].description);
      if (far > 1 && strcmp(links[far].description, links[1].description))
        printf(", peer %d over %s", far, links[far].description);
      printf("\n");
      if (strstr(links[1].description, "confidence low") ||
          strstr(links[far].description, "confidence low"))
        printf("# WARNING: low confidence: these modeled figures rest on a single unverified "
               "vendor claim (unilink-model links shows the sources)\n");
    }
    free(links);
  }
  if (r->membw > 0)
    printf("# Memory bandwidth: %.1f GB/s (" BENCH_MEMBW_METHOD "); %%roof below: docs/bench.md\n",
           r->membw);
  if (r->membw > 0) bench_print_roof("Roofline capacity by working set", &r->roof);
  if (r->line_floor.rtt_ns > 0) {
    printf("# Cache-line round trip between CPUs 0 and 1: %.0f ns (one line each way, in "
           "turn)\n", r->line_floor.rtt_ns);
    printf("# 2-rank exchange floor, flags only: %.0f ns a call (both store a line, both wait "
           "for the other's; the least a 2-rank 8 B allreduce takes in either timing "
           "method)\n", r->line_floor.exchange_ns);
  }
  if (r->piece_gbs > 0)
    printf("# 2-rank piece exchange through shared memory: %.1f GB/s each way ("
           BENCH_PIECE_METHOD "; what bounds a private-buffer collective between 2 ranks: "
           "docs/bench.md)\n", r->piece_gbs);
}

void bench_print_header(const bench_run_t *r) {
  const bench_opts_t *o = r->o;
  const char *tl = o->cputime ? "cputime" : "time";
  const char *ts = o->timestamps ? "timestamp" : "";
  const char *tail = o->extra_columns ? (r->membw > 0 ? "   %roof  algorithm" : "  algorithm") : "";
  printf("#\n");
  if (o->per_iter) {
    printf("# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                                in-place (+ per-iteration)\n",
           "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %s%s\n",
           "size", "count", "type", "redop", "root", tl, "algbw", "busbw", "#wrong", "i_min",
           "i_max", "i_p99", "i_cv%", tl, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
           "i_cv%", ts, tail);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s\n",
           "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)",
           "(%)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)");
  } else {
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
           "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s%s\n", "size",
           "count", "type", "redop", "root", tl, "algbw", "busbw", "#wrong", tl, "algbw", "busbw",
           "#wrong", ts, tail);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  fflush(stdout);
}

static void bench_print_side(const bench_run_t *r, const bench_side_t *S) {
  char t[16], a[16], b[16];
  if (S->skipped || !S->valid) {
    /* no in-place alltoall in the unilink API: numbers keep strict parsers working
     * (nccl-tests prints numbers there too); #wrong says N/A, as unchecked */
    printf("  %7s  %6s  %6s    N/A", "0", "0", "0");
    if (r->o->per_iter) printf("  %7s  %7s  %7s  %7s", "0", "0", "0", "0");
    return;
  }
  bench_format_num(S->time_us, 7, t, sizeof t);
  bench_format_num(S->algbw, 6, a, sizeof a);
  bench_format_num(S->busbw, 6, b, sizeof b);
  if (S->wrong >= 0)
    printf("  %7s  %6s  %6s  %6g", t, a, b, (double)S->wrong);
  else
    printf("  %7s  %6s  %6s    N/A", t, a, b);
  if (r->o->per_iter) {
    char m1[16], m2[16], m3[16], m4[16];
    if (S->have_stats) {
      bench_format_num(S->stats.min, 7, m1, sizeof m1);
      bench_format_num(S->stats.max, 7, m2, sizeof m2);
      bench_format_num(S->stats.p99, 7, m3, sizeof m3);
      bench_format_num(S->stats.cv_pct, 7, m4, sizeof m4);
      printf("  %7s  %7s  %7s  %7s", m1, m2, m3, m4);
    } else {
      printf("  %7s  %7s  %7s  %7s", "0", "0", "0", "0");
    }
  }
}

/* %roof as measured: the roof is the measured capacity, so a value past 100 is printed as
 * it is -- it would mean the roof is wrong for that size, which must show. */
static void bench_roof_str(double pct, char *buf, size_t n) {
  if (pct < 0) snprintf(buf, n, "n/a");
  else snprintf(buf, n, "%.1f", pct);
}

static const char *bench_redop_str(const bench_opts_t *o, const bench_row_t *row) {
  return bench_op_reduces(o->op) || o->op == BENCH_SENDRECV ? ul_op_name(row->redop) : "none";
}

void bench_print_row(const bench_run_t *r, const bench_row_t *row) {
  const bench_opts_t *o = r->o;
  printf("%12zu  %12zu  %8s  %6s  %6d", row->bytes, row->count, bench_dtype_nccl_name(row->dtype),
         bench_redop_str(o, row), row->root);
  bench_print_side(r, &row->side[0]);
  bench_print_side(r, &row->side[1]);
  if (o->timestamps) {
    char buf[64];
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tmv);
    printf("  %s", buf);
  }
  if (o->extra_columns) {
    char roof[16];
    bench_roof_str(row->roof_pct, roof, sizeof roof);
    if (r->membw > 0) printf("  %6s", roof);
    printf("  %s%s", row->algorithm[0] ? row->algorithm : "-", row->fallback ? "(fallback)" : "");
  }
  printf("\n");
  fflush(stdout);
}

/* What the library chose per size (and %roof), as comments after the table. */
void bench_print_extras(const bench_run_t *r) {
  if (r->o->extra_columns || r->nrows == 0) return;
  if (r->roof_after.n > 0) {
    printf("#\n");
    bench_print_roof("Roofline capacity again after the sweep", &r->roof_after);
    bench_print_roof("Roofline for %roof below: the larger of the two", &r->roof);
  }
  if (r->piece_after > 0)
    printf("# 2-rank piece exchange again after the sweep: %.1f GB/s each way; the larger of "
           "the two: %.1f\n", r->piece_after, r->piece_gbs);
  printf("#\n# unilink per size [%s]: size, algorithm (out-of-place)%s%s\n", r->backend,
         r->membw > 0 ? ", %roof (out-of-place busbw / roofline busbw)" : "",
         r->o->sync_per_call ? ", mean time (us, out-of-place)" : "");
  for (int i = 0; i < r->nrows; i++) {
    const bench_row_t *row = &r->rows[i];
    char roof[16] = "";
    if (r->membw > 0) bench_roof_str(row->roof_pct, roof, sizeof roof);
    char mean[24] = "";
    if (r->o->sync_per_call && row->side[0].have_stats)
      snprintf(mean, sizeof mean, "  %.2f", row->side[0].stats.mean);
    printf("# %10zu  %-24s%s  %s%s\n", row->bytes, row->algorithm[0] ? row->algorithm : "-",
           row->fallback ? "(fallback)" : "", roof, mean);
  }
}

double bench_avg_busbw(const bench_run_t *r) {
  return r->bw_count ? r->bw_sum / r->bw_count : 0.0;
}

/* Footer of a backend other than the primary one: no line a bandwidth gate
 * ("Avg bus bandwidth", "Out of bounds values") can match. */
void bench_print_secondary_footer(const bench_run_t *r) {
  printf("#\n# [%s] wrong values %d %s\n", r->backend, r->errors, r->errors ? "FAILED" : "OK");
  printf("# [%s] mean busbw%s %g GB/s\n", r->backend, r->modeled ? " (modeled, not measured)" : "",
         bench_avg_busbw(r));
}

/* nccl-tests' writeResultFooter + finalizeFooter; primary == NULL: nothing measured. */
void bench_print_footer(const bench_opts_t *o, const bench_run_t *primary, double check_bw) {
  if (primary) {
    double avg = bench_avg_busbw(primary);
    const char *verdict = check_bw < 0 ? "" : (avg < check_bw * 0.9 ? "FAILED" : "OK");
    printf("# %-20s : %d %s\n", "Out of bounds values", primary->errors,
           primary->errors ? "FAILED" : "OK");
    printf("# %-20s : %g %s\n", "Avg bus bandwidth", avg, verdict);
  } else {
    printf("# no measured backend: no bus bandwidth summary (modeled figures are above)\n");
  }
  printf("#\n");
  printf("# Collective test concluded: %s\n", o->prog);
  printf("#\n");
}

static void bench_cell(double v, int width, int numw) {
  char b[64];
  bench_format_num(v, numw, b, sizeof b);
  printf("  %*s", width, b);
}

void bench_print_side_by_side(const bench_opts_t *o, bench_run_t **runs, int nruns) {
  int widths[BENCH_MAX_BACKENDS * 3];
  char labels[BENCH_MAX_BACKENDS * 3][160];
  int ncol = 0;
  for (int b = 0; b < nruns; b++) {
    const char *m = runs[b]->modeled ? "(modeled)" : "";
    snprintf(labels[ncol++], sizeof labels[0], "time[%s]%s", runs[b]->backend, m);
    snprintf(labels[ncol++], sizeof labels[0], "busbw[%s]%s", runs[b]->backend, m);
  }
  for (int b = 1; b < nruns; b++)
    snprintf(labels[ncol++], sizeof labels[0], "ratio[%s]", runs[b]->backend);
  for (int c = 0; c < ncol; c++) {
    int l = (int)strlen(labels[c]);
    widths[c] = l > 8 ? l : 8;
  }
  printf("#\n# Side by side: %s, %d ranks, out-of-place; time in us, busbw in GB/s; "
         "ratio = busbw / busbw[%s]\n",
         bench_op_name(o->op), runs[0]->nranks, runs[0]->backend);
  printf("# %10s  %12s", "size", "count");
  for (int c = 0; c < ncol; c++) printf("  %*s", widths[c], labels[c]);
  printf("\n");
  int nrows = runs[0]->nrows;
  for (int b = 1; b < nruns; b++) nrows = runs[b]->nrows < nrows ? runs[b]->nrows : nrows;
  for (int i = 0; i < nrows; i++) {
    const bench_row_t *row = &runs[0]->rows[i];
    printf("# %10zu  %12zu", row->bytes, row->count);
    int c = 0;
    for (int b = 0; b < nruns; b++) {
      const bench_side_t *S = &runs[b]->rows[i].side[0];
      bench_cell(S->time_us, widths[c++], 7);
      bench_cell(S->busbw, widths[c++], 6);
    }
    double base = row->side[0].busbw;
    for (int b = 1; b < nruns; b++) {
      char buf[32];
      if (base > 0) snprintf(buf, sizeof buf, "%.2fx", runs[b]->rows[i].side[0].busbw / base);
      else snprintf(buf, sizeof buf, "n/a");
      printf("  %*s", widths[c++], buf);
    }
    printf("\n");
  }
}

/* nccl-tests' NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY lines for one row (out-of-place time):
 * every rank's send and receive bytes and its own bandwidths, as '#' lines so strict
 * parsers still see 13-field rows only. */
void bench_print_a2av_summary(const bench_run_t *r, const bench_row_t *row) {
  const bench_a2av_t *p = &r->o->a2av;
  const bench_side_t *S = &row->side[0];
  if (!S->valid || S->time_us <= 0) return;
  double sec = S->time_us * 1e-6;
  int n = r->nranks;
  size_t es = ul_dtype_size(row->dtype), total = row->count * (size_t)n * es;
  if (p->matrix)
    printf("# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=matrix nranks=%d matrix_dim=%d scale=%.3f "
           "time_usec=%.2f\n", n, p->dim, p->scale, S->time_us);
  else
    printf("# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=generated nranks=%d total_bytes=%zu "
           "spread=%.3f time_usec=%.2f\n", n, total, p->spread, S->time_us);
  for (int q = 0; q < n; q++) {
    size_t sb = 0, rb = 0;
    for (int j = 0; j < n; j++) {
      sb += bench_a2av_peer_bytes(p, q, j, n, total);
      rb += bench_a2av_peer_bytes(p, j, q, n, total);
    }
    double alg = (double)(sb > rb ? sb : rb) / 1.0e9 / sec;
    printf("#   rank=%d send_bytes=%zu recv_bytes=%zu alg_bw=%.2f bus_bw=%.2f\n", q, sb, rb, alg,
           alg * bench_bw_factor(BENCH_ALLTOALLV, n));
  }
}
