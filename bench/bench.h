/* Shared declarations of the unilink-bench driver files. */
#ifndef UNILINK_BENCH_H
#define UNILINK_BENCH_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_a2av.h"
#include "bench_membw.h"
#include "bench_ops.h"
#include "bench_util.h"
#include "unilink/unilink.h"

/* Exit codes (nccl-tests' testResult_t where one exists). */
#define BENCH_EXIT_OK 0
#define BENCH_EXIT_INTERNAL 1
#define BENCH_EXIT_UNAVAILABLE 2 /* backend / launcher cannot run here */
#define BENCH_EXIT_LIBRARY 3     /* a unilink call failed (nccl-tests: testNcclError) */
#define BENCH_EXIT_TIMEOUT 4
#define BENCH_EXIT_UNSUPPORTED 5
#define BENCH_EXIT_USAGE 6
#define BENCH_EXIT_RESULTS 7     /* wrong results or avg busbw below the minimum */
#define BENCH_EXIT_BADARGS 255   /* nccl-tests returns -1 for bad sizes */

#define BENCH_MAX_BACKENDS 16

typedef struct bench_opts {
  int p2p;                 /* `unilink-bench p2p` */
  bench_op_t op;
  size_t minb, maxb, stepb;
  long stepf;              /* > 1: multiplicative */
  int iters, warmup, agg, cycles, check;
  int ndtypes;
  ul_dtype_t dtypes[UL_DTYPE_COUNT];
  int nredops;
  ul_op_t redops[UL_OP_COUNT];
  int root;
  int blocking, average, nthreads, ngpus, timeout_s, per_iter, per_iter_skip;
  int cputime, timestamps, unalign, model_iters, verbose;
  int perf_name;            /* started as all_reduce_perf etc. */
  int sync_per_call;        /* --sync-per-call: barrier, one timed call; time = median of max over ranks */
  int extra_columns;        /* --extra-columns: %roof/algorithm in data rows (not strict) */
  int malloc_buffers;       /* --buffers malloc: user buffers from the C heap, not ul_mem_alloc */
  const char *prog;         /* nccl-tests program name printed in the banner/footer */
  int device0;              /* NCCL_TESTS_DEVICE: first device index of this process; -1 unset */
  bench_a2av_t a2av;        /* alltoallv: nccl-tests' NCCL_TESTS_ALLTOALLV_* pattern */
  const char *json, *plot;
  int nbackends;
  char *backends[BENCH_MAX_BACKENDS];
  unsigned char discovered[BENCH_MAX_BACKENDS]; /* 1: found by "all" (skip if it cannot run) */
  int argc;
  char **argv;
} bench_opts_t;

/* One side (out-of-place or in-place) of one row. */
typedef struct bench_side {
  int valid;        /* measured */
  int skipped;      /* no such form (alltoall in place) */
  double time_us, algbw, busbw;
  double measured_us, modeled_us;
  int64_t wrong;    /* -1: not checked */
  int have_stats;
  bench_stats_t stats; /* microseconds */
  double *iter_us;     /* per-iteration (max over ranks), iters entries */
  double *proc_us;     /* under mpirun: nranks x iters (each process's own times) */
  int nproc_rows;
} bench_side_t;

typedef struct bench_row {
  size_t bytes, count;
  ul_dtype_t dtype;
  ul_op_t redop;
  int root;
  bench_side_t side[2];
  char algorithm[32], path[32];
  int fallback;
  double roof_pct; /* < 0: none */
} bench_row_t;

/* One line of "# Using devices". */
typedef struct bench_dev {
  int rank, group, pid, device;
  char host[79];
} bench_dev_t;

/* A sweep of one backend. */
typedef struct bench_run {
  const bench_opts_t *o;
  const char *backend;      /* as given, with ":options" */
  int discovered;           /* found by "all": may be skipped when it cannot run here */
  char base[64];            /* name before ':' */
  ul_backend_info_t info;
  int modeled;
  int mpi, proc, nprocs;    /* launched by mpirun: one rank per process */
  int nranks, nlocal, first_rank;
  int nthreads, ngpus;
  int color;                /* NCCL_TESTS_SPLIT group of this process */
  bench_dev_t *devs;        /* ndevs (every rank of the world), bench_gather_devices */
  int ndevs;
  ul_comm_t *comms;
  ul_comm_t world;          /* NCCL_TESTS_SPLIT: the whole-world comm behind comms[0] */
  ul_stream_t *streams;
  char **sbuf, **rbuf;
  char **shadow;            /* per local rank: host staging memory of bufbytes */
  size_t bufbytes;
  /* thread sync */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int bar_count, bar_gen, bar_broken;
  int bar_spin;             /* pause loops a barrier waiter spins before it sleeps */
  double *xch;
  size_t xch_per_rank;
  void *xch_dev;            /* mpi: the exchange's buffer from ul_mem_alloc (see bench_exchange) */
  /* results (written by the reporting thread) */
  bench_row_t *rows;
  int nrows, caprows;
  int errors;               /* rows x sides with wrong elements */
  double bw_sum;
  int bw_count;
  double membw;             /* host memory capacity, GB/s (largest roof point); 0 if none */
  bench_roof_t roof;        /* host capacity per working-set size (roof.n 0: none); after
                               the sweep, the larger of it and roof_after per size */
  bench_roof_t roof_after;  /* measured again after the sweep (roof_after.n 0: not) */
  bench_line_floor_t line_floor; /* 2-rank exchange floors between CPUs 0 and 1; 0 if none */
  double piece_gbs;         /* 2-rank piece exchange through shared memory, GB/s each way
                               (bench_measure_piece_exchange); 0 if none. After the
                               sweep, the larger of it and piece_after */
  double piece_after;       /* measured again after the sweep (0: not) */
  int want_roof;            /* host backend: measure the roof (bench_roof_set) */
  int printing;             /* this process prints the nccl-tests table */
  int fault_wrong;          /* UNILINK_BENCH_FAULT=wrong test hook */
  /* failure */
  ul_result_t fail_rc;
  char fail_msg[512];
  double t_start;
  int progress_shown;
} bench_run_t;

double bench_now(void);
/* Barrier of the local threads of a run (and of all processes when mpi). Returns -1
 * when the run failed on another thread. */
int bench_barrier(bench_run_t *r, int thread);
/** The lock, condition and spin of bench_barrier (after nthreads is set). */
void bench_sync_init(bench_run_t *r);
/* Every rank contributes k doubles; all[rank*k + j] receives everyone's. */
int bench_exchange(bench_run_t *r, int thread, const double *mine, int k, double *all);
/* Release what bench_exchange allocated (before the communicators go). */
void bench_exchange_free(bench_run_t *r);
void bench_fail(bench_run_t *r, ul_result_t rc, const char *fmt, ...);

/* main sweep */
/* Measure the host roofline once per process (cached) into r->roof and r->membw. */
void bench_roof_set(bench_run_t *r);
int bench_run_sweep(bench_run_t *r);
/* p2p matrices */
int bench_p2p_main(const bench_opts_t *o);
/* JSON and plot */
int bench_write_plot(const bench_opts_t *o, bench_run_t **runs, int nruns);
/* communicator setup shared with p2p */
int bench_comms_create(bench_run_t *r);
void bench_comms_destroy(bench_run_t *r);
int bench_exit_for(ul_result_t rc);
/* text output (bench_table.c) */
void bench_print_preamble(const bench_opts_t *o, const bench_run_t *r);
/** A "# skipped backend ..." line: printed after the banner (strict parsers expect the
 *  banner first), held until the banner is out, or until bench_flush_notes. */
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bench_flush_notes(void);
int bench_gather_devices(bench_run_t *r);
void bench_print_devices(const bench_run_t *r);
void bench_print_block_start(const bench_run_t *r);
void bench_print_header(const bench_run_t *r);
void bench_print_row(const bench_run_t *r, const bench_row_t *row);
void bench_print_extras(const bench_run_t *r);
double bench_avg_busbw(const bench_run_t *r);
void bench_print_secondary_footer(const bench_run_t *r);
void bench_print_footer(const bench_opts_t *o, const bench_run_t *primary, double check_bw);
void bench_print_side_by_side(const bench_opts_t *o, bench_run_t **runs, int nruns);
/* JSON: primary = index of the run whose rows are the top-level results (-1: none) */
int bench_write_json(const bench_opts_t *o, bench_run_t **runs, int nruns, int primary,
                     double check_bw);
/* NCCL_TESTS_SPLIT / _SPLIT_MASK colour of process @p proc (0 when unset) */
int bench_split_color(int proc);
/* NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: nccl-tests' per-rank lines of one row (as '#' lines) */
void bench_print_a2av_summary(const bench_run_t *r, const bench_row_t *row);

#endif
