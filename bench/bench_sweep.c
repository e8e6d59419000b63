/* The measurement loop of unilink-bench: communicators, threads, timing, checking,
 * and the nccl-tests table rows. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* ---------------------------------------------------------------------------- */
/* the sweep                                                                      */
/* ---------------------------------------------------------------------------- */

typedef struct bench_thread {
  bench_run_t *r;
  int t;
  bench_call_t *calls; /* ngpus */
  size_t *vcounts;     /* per local rank 5 * nranks: the v-forms' counts (bench_a2av_rank_counts) */
  double *mine, *all;  /* exchange scratch */
} bench_thread_t;

/* Issue one operation on all ranks of this thread; with streams, optionally wait. */
static int bench_issue(bench_thread_t *T, int wait) {
  bench_run_t *r = T->r;
  /* Several ranks per thread (-g): one group, as nccl-tests does, so a backend whose
   * calls wait on the host (the generic layer on device streams) progresses them
   * together instead of blocking in the first rank's call. */
  if (r->ngpus > 1) ul_group_start();
  for (int g = 0; g < r->ngpus; g++) {
    ul_result_t rc = bench_call_run(&T->calls[g]);
    if (rc != UL_OK) {
      if (r->ngpus > 1) ul_group_end();
      bench_fail(r, rc, "%s on rank %d (%s): %s: %s", bench_op_name(T->calls[g].op),
                 T->calls[g].rank, r->backend, ul_result_name(rc),
                 ul_comm_last_error(T->calls[g].comm));
      return -1;
    }
  }
  if (r->ngpus > 1) {
    ul_result_t rc = ul_group_end();
    if (rc != UL_OK) {
      bench_fail(r, rc, "%s group of %d ranks (%s): %s: %s", bench_op_name(T->calls[0].op),
                 r->ngpus, r->backend, ul_result_name(rc), ul_last_error());
      return -1;
    }
  }
  if (wait) {
    for (int g = 0; g < r->ngpus; g++) {
      if (!T->calls[g].stream) continue;
      ul_result_t rc = ul_stream_synchronize(T->calls[g].stream);
      if (rc != UL_OK) {
        bench_fail(r, rc, "ul_stream_synchronize on rank %d (%s): %s: %s", T->calls[g].rank,
                   r->backend, ul_result_name(rc), ul_comm_last_error(T->calls[g].comm));
        return -1;
      }
    }
  }
  return 0;
}

static int bench_complete(bench_thread_t *T) {
  bench_run_t *r = T->r;
  for (int g = 0; g < r->ngpus; g++) {
    if (!T->calls[g].stream) continue;
    ul_result_t rc = ul_stream_synchronize(T->calls[g].stream);
    if (rc != UL_OK) {
      bench_fail(r, rc, "ul_stream_synchronize on rank %d: %s", T->calls[g].rank,
                 ul_comm_last_error(T->calls[g].comm));
      return -1;
    }
  }
  return 0;
}

static double bench_modeled_last(bench_thread_t *T) {
  /* the slowest local rank's modeled duration of its last call */
  double m = 0;
  for (int g = 0; g < T->r->ngpus; g++) {
    ul_call_info_t ci;
    memset(&ci, 0, sizeof ci);
    ci.struct_size = sizeof ci;
    if (ul_comm_last_call(T->calls[g].comm, &ci) == UL_OK && ci.modeled_us > m) m = ci.modeled_us;
  }
  return m;
}

static void bench_setup(bench_thread_t *T, size_t bytes, ul_dtype_t dt, ul_op_t redop, int root,
                        int in_place) {
  bench_run_t *r = T->r;
  size_t es = ul_dtype_size(dt);
  for (int g = 0; g < r->ngpus; g++) {
    int local = T->t * r->ngpus + g;
    bench_call_t *c = &T->calls[g];
    c->op = r->o->op;
    c->dtype = dt;
    c->redop = redop;
    c->root = root;
    c->rank = r->first_rank + local;
    c->nranks = r->nranks;
    c->es = es;
    bench_counts(c->op, bytes, es, r->nranks, &c->counts);
    c->in_place = in_place;
    c->sbuf = r->sbuf[local] + (size_t)r->o->unalign * es;
    c->rbuf = r->rbuf[local] + (size_t)r->o->unalign * es;
    c->shadow = r->shadow[local];
    c->comm = r->comms[local];
    c->stream = r->streams[local];
    size_t n = (size_t)r->nranks, *v = T->vcounts + (size_t)g * 5 * n;
    c->vcounts = v;
    if (c->op == BENCH_ALLTOALLV) {
      /* nccl-tests' pattern: every rank sends paramcount x nranks elements in all, split
       * by the spread (or the matrix, where paramcount is 0 as there) */
      const bench_a2av_t *pat = &r->o->a2av;
      if (pat->matrix) c->counts.paramcount = 0;
      size_t total = c->counts.paramcount * n * es;
      bench_a2av_max_counts(pat, es, r->nranks, total, &c->counts.sendcount, &c->counts.recvcount);
      bench_a2av_rank_counts(pat, es, r->nranks, c->rank, total, v);
    } else {
      size_t per = c->counts.paramcount;
      for (size_t j = 0; j < n; j++) {
        v[j] = v[2 * n + j] = per;
        v[n + j] = v[3 * n + j] = v[4 * n + j] = j * per;
      }
    }
  }
}

/* One side's time and its algbw/busbw (nccl-tests' *GetBw; alltoallv's bytes are the
 * busiest rank's, the size column, as src/alltoallv.cu), each kept as the JSON writes
 * it so that the table and the JSON show one number. */
static void bench_side_time(const bench_run_t *r, const bench_call_t *c, double us,
                            bench_side_t *S) {
  S->time_us = bench_json_value(us);
  if (c->op != BENCH_ALLTOALLV) {
    bench_bw(c->op, c->counts.paramcount, c->es, us * 1e-6, r->nranks, &S->algbw, &S->busbw);
  } else {
    double bytes = (double)bench_row_bytes(&c->counts, c->es);
    S->algbw = us > 0 ? bytes / 1.0e9 / (us * 1e-6) : 0.0;
    S->busbw = S->algbw * bench_bw_factor(c->op, r->nranks);
  }
  S->algbw = bench_json_value(S->algbw);
  S->busbw = bench_json_value(S->busbw);
}

static double bench_reduce_time(const bench_run_t *r, const double *all, int k, int j) {
  /* -a: 0 rank 0, 1 average, 2 min, 3 max over ranks */
  double acc = all[j];
  for (int q = 1; q < r->nranks; q++) {
    double v = all[(size_t)q * k + j];
    switch (r->o->average) {
    case 0: break;
    case 2: acc = v < acc ? v : acc; break;
    case 3: acc = v > acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  if (r->o->average == 1) acc /= r->nranks;
  return acc;
}


/* A failed staging copy (ul_mem_copy/ul_mem_set around a checked call) ends the run. */
static int bench_stage_rc(bench_run_t *r, const bench_call_t *c, ul_result_t rc, const char *what) {
  if (rc == UL_OK) return 0;
  bench_fail(r, rc, "%s for %s on rank %d (%s): %s: %s", what, bench_op_name(c->op), c->rank,
             r->backend, ul_result_name(rc), ul_comm_last_error(c->comm));
  return -1;
}

/* Per-thread seed counter: every thread draws the same sequence, so all ranks of a
 * check use the same seed. */
typedef struct bench_side_ctx {
  uint64_t rep;
} bench_side_ctx_t;

static int bench_one_side(bench_thread_t *T, bench_side_ctx_t *sc, size_t req_bytes,
                          bench_row_t *row, int side) {
  bench_run_t *r = T->r;
  const bench_opts_t *o = r->o;
  int report = T->t == 0;
  bench_side_t *S = &row->side[side];
  if (side == 1 && !bench_op_has_inplace(o->op)) {
    if (report) S->skipped = 1;
    return 0;
  }
  int iters = o->iters;
  if (r->modeled && o->model_iters > 0 && o->model_iters < iters) iters = o->model_iters;
  int agg = o->agg < 1 ? 1 : o->agg;
  bench_setup(T, req_bytes, row->dtype, row->redop, row->root, side);
  /* timed calls run on zeros: cheap to write, and no denormals or NaNs from leftover
   * data can slow the reduction down (checked calls below use seeded data). ul_mem_set
   * with a NULL stream is complete on return, before the untimed call and the barrier. */
  if (bench_barrier(r, T->t)) return -1;
  for (int g = 0; g < r->ngpus; g++) {
    const bench_call_t *c = &T->calls[g];
    size_t n = c->counts.sendcount > c->counts.recvcount ? c->counts.sendcount : c->counts.recvcount;
    ul_result_t rc = UL_OK;
    if (n) rc = ul_mem_set(c->sbuf, 0, n * c->es, c->comm, NULL);
    if (n && rc == UL_OK) rc = ul_mem_set(c->rbuf, 0, n * c->es, c->comm, NULL);
    if (rc != UL_OK) {
      bench_fail(r, rc, "ul_mem_set (zeroing buffers) on rank %d (%s): %s: %s", c->rank,
                 r->backend, ul_result_name(rc), ul_comm_last_error(c->comm));
      return -1;
    }
  }
  /* one untimed call so every rank starts the timed loop in step */
  if (bench_barrier(r, T->t) || bench_issue(T, 1) || bench_barrier(r, T->t)) return -1;

  int sync = o->sync_per_call && !r->modeled; /* a modeled call has no skew to synchronize */
  int per_iter = o->per_iter || sync;
  double *it_us = T->mine + 3; /* mine = [time, measured, modeled, iters...] per rank */
  int k = 3 + (per_iter ? iters : 0);
  double modeled_sum = 0.0, excluded = 0.0;
  int wait_each = per_iter || o->blocking != 0 || r->modeled;
  double t0 = bench_now();
  for (int it = 0; it < iters; it++) {
    if (sync) {
      double tb = bench_now();
      if (bench_barrier(r, T->t)) return -1;
      excluded += bench_now() - tb; /* only the call is timed */
    }
    /* the clock only where a call is timed alone: in the loop it would add a clock read
     * (27 ns here) to every back-to-back call, which raw_mpi_bench's loop does not */
    double ti = per_iter ? bench_now() : 0.0;
    double mod_it = 0.0;
    for (int a = 0; a < agg; a++) {
      if (bench_issue(T, wait_each)) return -1;
      if (r->modeled && wait_each) mod_it += bench_modeled_last(T);
    }
    if (per_iter) {
      if (bench_complete(T)) return -1;
      double us = (bench_now() - ti) * 1e6 / agg;
      it_us[it] = r->modeled ? mod_it / agg : us;
    }
    modeled_sum += mod_it;
    if (o->blocking == 1) {
      if (bench_barrier(r, T->t)) return -1;
    } else if (o->blocking == 3) {
      double tb = bench_now();
      if (bench_barrier(r, T->t)) return -1;
      excluded += bench_now() - tb; /* -z 3 reports time without the barrier */
    }
  }
  if (bench_complete(T)) return -1;
  double elapsed = bench_now() - t0 - excluded;
  double measured_us = elapsed * 1e6 / ((double)iters * agg);
  double modeled_us = r->modeled ? modeled_sum / ((double)iters * agg) : 0.0;

  /* what the library chose for this size (out of place only) */
  if (report && side == 0) {
    ul_call_info_t ci;
    memset(&ci, 0, sizeof ci);
    ci.struct_size = sizeof ci;
    if (ul_comm_last_call(T->calls[0].comm, &ci) == UL_OK) {
      snprintf(row->algorithm, sizeof row->algorithm, "%s", ci.algorithm[0] ? ci.algorithm : "-");
      snprintf(row->path, sizeof row->path, "%s", ci.path[0] ? ci.path : "-");
      row->fallback = ci.fallback;
    } else {
      snprintf(row->algorithm, sizeof row->algorithm, "-");
      snprintf(row->path, sizeof row->path, "-");
    }
  }

  for (int g = 0; g < r->ngpus; g++) {
    double *m = T->mine + (size_t)g * k;
    if (g > 0 && per_iter) memcpy(m + 3, it_us, sizeof(double) * (size_t)iters);
    m[0] = r->modeled ? modeled_us : measured_us;
    m[1] = measured_us;
    m[2] = modeled_us;
  }
  if (bench_exchange(r, T->t, T->mine, k, T->all)) return -1;
  if (report) {
    S->valid = 1;
    bench_side_time(r, &T->calls[0], bench_reduce_time(r, T->all, k, 0), S);
    S->measured_us = bench_reduce_time(r, T->all, k, 1);
    S->modeled_us = r->modeled ? bench_reduce_time(r, T->all, k, 2) : 0.0;
    if (per_iter) {
      /* per iteration, the slowest rank (as nccl-tests: max over processes) */
      S->iter_us = calloc((size_t)iters, sizeof(double));
      if (S->iter_us) {
        for (int it = 0; it < iters; it++) {
          double mx = 0;
          for (int q = 0; q < r->nranks; q++) {
            double v = T->all[(size_t)q * k + 3 + it];
            mx = v > mx ? v : mx;
          }
          S->iter_us[it] = mx;
        }
        if (r->mpi && r->nranks > 1) {
          /* straggler data (nccl-tests per_process_max_times_us): each process's own row */
          S->proc_us = calloc((size_t)r->nranks * (size_t)iters, sizeof(double));
          if (S->proc_us) {
            S->nproc_rows = r->nranks;
            for (int q = 0; q < r->nranks; q++)
              memcpy(S->proc_us + (size_t)q * iters, T->all + (size_t)q * k + 3,
                     sizeof(double) * (size_t)iters);
          }
        }
        int skip = o->per_iter_skip < iters ? o->per_iter_skip : 0;
        S->have_stats = bench_stats(S->iter_us + skip, iters - skip, &S->stats) == 0;
        if (S->have_stats) bench_stats_json_values(&S->stats);
        if (sync && S->have_stats) {
          /* each call's time is its slowest rank's; the median resists preemption */
          bench_side_time(r, &T->calls[0], S->stats.median, S);
        }
      }
    }
  }

  /* correctness: -c checked calls with fresh seeds. Staging (inputs in, results out,
   * with ul_mem_copy) is outside the timed region, as nccl-tests initialises and checks
   * outside its timing. */
  int64_t wrong_total = 0;
  int checks = T->calls[0].in_place && bench_op_desc(o->op)->in_place_unchecked ? 0 : o->check;
  for (int c = 0; c < checks; c++) {
    uint64_t seed = ++sc->rep;
    if (bench_barrier(r, T->t)) return -1;
    for (int g = 0; g < r->ngpus; g++)
      if (bench_stage_rc(r, &T->calls[g], bench_call_fill(&T->calls[g], seed), "staging inputs"))
        return -1;
    if (bench_barrier(r, T->t) || bench_issue(T, 1)) return -1;
    if (r->fault_wrong) {
      /* test hook (UNILINK_BENCH_FAULT=wrong): corrupt one result element of rank 0 so
       * the #wrong path and exit code can be tested (through a staged byte: the result
       * may be device memory) */
      for (int g = 0; g < r->ngpus; g++) {
        const bench_call_t *fc = &T->calls[g];
        const void *fs;
        void *fr;
        bench_op_desc(fc->op)->ptrs(fc, &fs, &fr);
        if (fc->rank == 0 && fr && bench_op_desc(fc->op)->result_count(fc)) {
          unsigned char b = 0;
          ul_result_t rc = ul_mem_copy(&b, fr, 1, fc->comm, NULL);
          b ^= 0x5a;
          if (rc == UL_OK) rc = ul_mem_copy(fr, &b, 1, fc->comm, NULL);
          if (bench_stage_rc(r, fc, rc, "fault hook")) return -1;
        }
      }
    }
    double *w = T->mine;
    for (int g = 0; g < r->ngpus; g++) {
      int64_t wrong = 0;
      if (bench_stage_rc(r, &T->calls[g], bench_call_check(&T->calls[g], seed, &wrong),
                         "copying results back"))
        return -1;
      w[g] = (double)wrong;
    }
    if (bench_exchange(r, T->t, w, 1, T->all)) return -1;
    wrong_total = 0;
    for (int q = 0; q < r->nranks; q++) wrong_total += (int64_t)T->all[q];
    if (wrong_total) break;
  }
  if (report) S->wrong = checks ? wrong_total : -1;
  return 0;
}

static int bench_count_sizes(const bench_opts_t *o) {
  int n = 0;
  for (size_t s = o->minb; s <= o->maxb; s = o->stepf > 1 ? s * (size_t)o->stepf : s + o->stepb) {
    n++;
    if (s == 0 && o->stepf > 1) break;
  }
  return n;
}

static void bench_progress(bench_run_t *r, int done, int total, size_t bytes) {
  if (!r->printing || !isatty(2)) return;
  double el = bench_now() - r->t_start;
  if (el < 1.0 && !r->progress_shown) return; /* quiet for short sweeps */
  fprintf(stderr, "\r# %s %s: %d/%d sizes, %zu B, %.0f s   ", r->backend, bench_op_name(r->o->op),
          done, total, bytes, el);
  fflush(stderr);
  r->progress_shown = 1;
}

static void bench_progress_clear(bench_run_t *r) {
  if (r->progress_shown) {
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    r->progress_shown = 0;
  }
}

static int bench_add_row(bench_run_t *r, const bench_row_t *row) {
  if (r->nrows == r->caprows) {
    int cap = r->caprows ? r->caprows * 2 : 32;
    bench_row_t *n = realloc(r->rows, sizeof *n * (size_t)cap);
    if (!n) return -1;
    r->rows = n;
    r->caprows = cap;
  }
  r->rows[r->nrows++] = *row;
  return 0;
}

static void *bench_thread_main(void *p) {
  bench_thread_t *T = p;
  bench_run_t *r = T->r;
  const bench_opts_t *o = r->o;
  bench_side_ctx_t sc = {0};
  int total = bench_count_sizes(o);
  int nroots = 1;
  int op_roots = bench_op_rooted(o->op);
  for (int di = 0; di < o->ndtypes; di++) {
    ul_dtype_t dt = o->dtypes[di];
    int nred = bench_op_reduces(o->op) || o->op == BENCH_SENDRECV ? o->nredops : 1;
    for (int oi = 0; oi < nred; oi++) {
      ul_op_t redop = o->redops[oi];
      for (int ri = 0; ri < nroots; ri++) {
        int root = op_roots ? o->root : -1;
        /* warm-up over all sizes with factor 2, as nccl-tests */
        for (size_t s = o->minb; s <= o->maxb && o->warmup > 0; s = s ? s * 2 : 1) {
          bench_setup(T, s, dt, redop, root < 0 ? 0 : root, 0);
          for (int w = 0; w < o->warmup; w++)
            if (bench_issue(T, 1)) return NULL;
        }
        for (int cyc = 0; cyc < (o->cycles < 1 ? 1 : o->cycles); cyc++) {
          int done = 0;
          for (size_t s = o->minb; s <= o->maxb;
               s = o->stepf > 1 ? s * (size_t)o->stepf : s + o->stepb) {
            bench_row_t row;
            memset(&row, 0, sizeof row);
            row.dtype = dt;
            row.redop = redop;
            row.root = root;
            row.roof_pct = -1;
            for (int side = 0; side < 2; side++)
              if (bench_one_side(T, &sc, s, &row, side)) return NULL;
            if (T->t == 0) {
              row.bytes = bench_row_bytes(&T->calls[0].counts, T->calls[0].es);
              row.count = T->calls[0].counts.paramcount;
              /* rows printed with their %roof get it now, from the first roof; the
               * others after the sweep, from the larger of the two (bench_roof_again) */
              if (r->printing && o->extra_columns && r->membw > 0 && row.side[0].valid)
                row.roof_pct = bench_roof_pct(&r->roof, o->op, r->nranks, row.bytes,
                                              row.side[0].busbw);
              for (int side = 0; side < 2; side++) {
                bench_side_t *S = &row.side[side];
                if (!S->valid) continue;
                r->bw_sum += S->busbw;
                r->bw_count++;
                if (S->wrong > 0) r->errors++;
              }
              if (r->printing) {
                bench_progress_clear(r);
                bench_print_row(r, &row);
                if (o->op == BENCH_ALLTOALLV && o->a2av.print_summary)
                  bench_print_a2av_summary(r, &row);
              }
              if (bench_add_row(r, &row)) {
                bench_fail(r, UL_ERR_NO_MEMORY, "out of memory for result rows");
                return NULL;
              }
              bench_progress(r, ++done, total, s);
            }
            if (s == 0 && o->stepf > 1) break;
          }
        }
      }
    }
  }
  return NULL;
}

/* One roof per process, shared by its blocks: measured before the first sweep and
 * raised by every later measurement (bench_roof_again). */
static bench_roof_t roof_cached = {.n = -1};
static bench_line_floor_t line_floor_cached;
static double piece_gbs_cached;

static void roof_use(bench_run_t *r) {
  r->roof = roof_cached;
  r->line_floor = line_floor_cached;
  r->piece_gbs = piece_gbs_cached;
  r->membw = roof_cached.n > 0 ? roof_cached.gbs[roof_cached.n - 1] : 0.0;
}

void bench_roof_set(bench_run_t *r) {
  if (roof_cached.n < 0) {
    bench_measure_roof(&roof_cached);
    bench_measure_line_floor(&line_floor_cached);
    piece_gbs_cached = bench_measure_piece_exchange();
  }
  roof_use(r);
}

/* The roof again after the sweep, and every row's %roof against the larger of the two.
 * This machine's memory capacity moves by about a third from minute to minute (the
 * 256 MiB point: 39-58 GB/s within ten minutes); a roof measured once, at a busy minute,
 * let a collective measured at a quiet one show 130-177% (docs/bench.md). Under mpirun
 * the others wait in a barrier while rank 0 measures, as before the sweep. */
static int bench_roof_again(bench_run_t *r) {
  if (r->mpi ? !r->want_roof : r->roof.n <= 0) return 0;
  if (r->roof.n > 0) {
    bench_measure_roof(&r->roof_after);
    bench_roof_merge(&roof_cached, &r->roof_after);
    r->piece_after = bench_measure_piece_exchange(); /* as noisy as the roof: same rule */
    if (r->piece_after > piece_gbs_cached) piece_gbs_cached = r->piece_after;
    roof_use(r);
    for (int i = 0; i < r->nrows; i++) {
      bench_row_t *row = &r->rows[i];
      if (r->membw > 0 && row->side[0].valid)
        row->roof_pct = bench_roof_pct(&r->roof, r->o->op, r->nranks, row->bytes,
                                       row->side[0].busbw);
    }
  }
  return r->mpi ? bench_barrier(r, 0) : 0;
}

int bench_run_sweep(bench_run_t *r) {
  const bench_opts_t *o = r->o;
  bench_sync_init(r);
  int code = bench_comms_create(r);
  if (code != BENCH_EXIT_OK) {
    bench_comms_destroy(r);
    return code;
  }
  r->printing = !r->mpi || r->proc == 0;
  if (o->op == BENCH_ALLTOALLV && o->a2av.matrix) {
    /* the matrix must cover every rank, and -e every rank's total (nccl-tests' checks,
     * made once the number of ranks is known) */
    const bench_a2av_t *pat = &o->a2av;
    size_t ms = 0, mr = 0;
    if (r->nranks <= pat->dim) bench_a2av_max_counts(pat, 1, r->nranks, 0, &ms, &mr);
    if (r->nranks > pat->dim)
      bench_fail(r, UL_ERR_INVALID_USAGE, "alltoallv traffic matrix %s is %d x %d, smaller than "
                 "the %d ranks of this run", pat->file, pat->dim, pat->dim, r->nranks);
    else if ((ms > mr ? ms : mr) > o->maxb)
      bench_fail(r, UL_ERR_INVALID_USAGE, "maxBytes (-e) must be at least %zu bytes, the largest "
                 "row or column total of the alltoallv traffic matrix %s (got %zu)",
                 ms > mr ? ms : mr, pat->file, o->maxb);
    if (r->fail_rc != UL_OK) {
      if (r->printing) fprintf(stderr, "unilink-bench: %s\n", r->fail_msg);
      bench_comms_destroy(r);
      return BENCH_EXIT_USAGE;
    }
  }
  const char *fault = getenv("UNILINK_BENCH_FAULT");
  r->fault_wrong = fault && strcmp(fault, "wrong") == 0;
  if (!r->mpi && bench_gather_devices(r) != 0) return BENCH_EXIT_INTERNAL;
  if (r->mpi && r->want_roof) {
    /* the others wait in the barrier (it sleeps after a short spin) while we measure */
    if (r->proc == 0) bench_roof_set(r);
    if (bench_barrier(r, 0)) {
      bench_comms_destroy(r);
      return bench_exit_for(r->fail_rc);
    }
  }
  if (r->printing) {
    bench_print_preamble(o, r);
    bench_print_block_start(r);
    bench_print_devices(r);
  }
  /* buffers: the largest step fits in maxbytes (+ misalignment) for every operation */
  r->bufbytes = o->maxb + (size_t)o->unalign * 8 + 64;
  r->sbuf = calloc((size_t)r->nlocal, sizeof(char *));
  r->rbuf = calloc((size_t)r->nlocal, sizeof(char *));
  r->shadow = calloc((size_t)r->nlocal, sizeof(char *));
  int *from_ul = calloc((size_t)r->nlocal * 2, sizeof(int));
  if (!r->sbuf || !r->rbuf || !r->shadow || !from_ul) return BENCH_EXIT_INTERNAL;
  for (int i = 0; i < r->nlocal; i++) {
    char **bufs[2] = {&r->sbuf[i], &r->rbuf[i]};
    for (int b = 0; b < 2; b++) {
      void *p = NULL;
      /* memory from the backend may take zero-copy paths, as ncclMemAlloc in nccl-tests;
       * --buffers malloc measures what ordinary user memory gets */
      if (!r->o->malloc_buffers && ul_mem_alloc(r->comms[i], r->bufbytes, &p) == UL_OK && p) {
        from_ul[i * 2 + b] = 1;
      } else if (posix_memalign(&p, 4096, r->bufbytes) != 0) {
        p = NULL;
      }
      if (!p) {
        fprintf(stderr, "unilink-bench: cannot allocate %zu bytes for rank %d\n", r->bufbytes,
                r->first_rank + i);
        return BENCH_EXIT_INTERNAL;
      }
      *bufs[b] = p;
      /* p may be device memory: never touched by the CPU, only through the library */
      ul_result_t rc = ul_mem_set(p, 0, r->bufbytes, r->comms[i], NULL);
      if (rc != UL_OK) {
        fprintf(stderr, "unilink-bench: ul_mem_set of a %zu-byte buffer for rank %d: %s: %s\n",
                r->bufbytes, r->first_rank + i, ul_result_name(rc),
                ul_comm_last_error(r->comms[i]));
        return bench_exit_for(rc);
      }
    }
    r->shadow[i] = malloc(r->bufbytes);
    if (!r->shadow[i]) {
      fprintf(stderr, "unilink-bench: cannot allocate %zu bytes for rank %d\n", r->bufbytes,
              r->first_rank + i);
      return BENCH_EXIT_INTERNAL;
    }
  }
  int kmax = 3 + o->iters < 16 ? 16 : 3 + o->iters;
  r->xch_per_rank = (size_t)kmax;
  r->xch = calloc((size_t)r->nranks * (size_t)kmax, sizeof(double));
  bench_thread_t *th = calloc((size_t)r->nthreads, sizeof *th);
  pthread_t *tid = calloc((size_t)r->nthreads, sizeof *tid);
  if (!r->xch || !th || !tid) return BENCH_EXIT_INTERNAL;
  for (int t = 0; t < r->nthreads; t++) {
    th[t].r = r;
    th[t].t = t;
    th[t].calls = calloc((size_t)r->ngpus, sizeof(bench_call_t));
    th[t].mine = calloc((size_t)r->ngpus * (size_t)kmax, sizeof(double));
    th[t].all = calloc((size_t)r->nranks * (size_t)kmax, sizeof(double));
    th[t].vcounts = calloc(5 * (size_t)r->nranks * (size_t)r->ngpus, sizeof(size_t));
    if (!th[t].calls || !th[t].mine || !th[t].all || !th[t].vcounts) return BENCH_EXIT_INTERNAL;
  }
  if (r->printing) bench_print_header(r);
  r->t_start = bench_now();
  for (int t = 1; t < r->nthreads; t++)
    if (pthread_create(&tid[t], NULL, bench_thread_main, &th[t]) != 0) {
      bench_fail(r, UL_ERR_SYSTEM, "pthread_create: %s", strerror(errno));
      tid[t] = 0;
    }
  bench_thread_main(&th[0]);
  for (int t = 1; t < r->nthreads; t++)
    if (tid[t]) pthread_join(tid[t], NULL);
  if (r->fail_rc == UL_OK) bench_roof_again(r);
  if (r->printing) {
    bench_progress_clear(r);
    if (r->fail_rc == UL_OK) bench_print_extras(r);
  }
  if (r->fail_rc != UL_OK) {
    if (r->fail_rc == UL_ERR_TIMEOUT && o->timeout_s > 0) {
      char host[256] = "localhost";
      gethostname(host, sizeof host - 1);
      printf("%s: Test timeout (%ds) %s\n", host, o->timeout_s, r->fail_msg);
    }
    fprintf(stderr, "unilink-bench: %s\n", r->fail_msg);
  }
  for (int t = 0; t < r->nthreads; t++) {
    free(th[t].calls);
    free(th[t].mine);
    free(th[t].all);
    free(th[t].vcounts);
  }
  free(th);
  free(tid);
  for (int i = 0; i < r->nlocal; i++) {
    char *bufs[2] = {r->sbuf[i], r->rbuf[i]};
    for (int b = 0; b < 2; b++) {
      if (!bufs[b]) continue;
      if (from_ul[i * 2 + b] && r->comms[i]) ul_mem_free(r->comms[i], bufs[b]);
      else if (!from_ul[i * 2 + b]) free(bufs[b]);
    }
    free(r->shadow[i]);
  }
  free(from_ul);
  free(r->sbuf);
  free(r->rbuf);
  free(r->shadow);
  free(r->xch);
  bench_exchange_free(r);
  r->sbuf = r->rbuf = r->shadow = NULL;
  r->xch = NULL;
  bench_comms_destroy(r);
  return r->fail_rc == UL_OK ? BENCH_EXIT_OK : bench_exit_for(r->fail_rc);
}
