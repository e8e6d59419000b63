/**
 * @file bench_util.h
 * @brief Pure helpers of unilink-bench: per-operation size conventions, algbw/busbw
 *        factors (nccl-tests definitions), the memory-traffic roofline, statistics,
 *        number formatting, size parsing and exactly-representable test data.
 *
 * Nothing here calls into libunilink, so unit tests link this alone.
 */
#ifndef UNILINK_BENCH_UTIL_H
#define UNILINK_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The operations unilink-bench measures (one descriptor each in bench_ops.c). */
typedef enum bench_op {
  BENCH_ALLREDUCE = 0,
  BENCH_ALLGATHER,
  BENCH_REDUCE_SCATTER,
  BENCH_BROADCAST,
  BENCH_REDUCE,
  BENCH_ALLTOALL,
  BENCH_GATHER,
  BENCH_SCATTER,
  BENCH_SENDRECV,
  BENCH_HYPERCUBE,  /* nccl-tests hypercube_perf: allgather by recursive doubling of send/recv */
  BENCH_ALLTOALLV,  /* uniform counts (alltoall's traffic) through ul_alltoallv */
  BENCH_ALLGATHERV, /* uniform counts (allgather's traffic) through ul_allgatherv */
  BENCH_OP_COUNT
} bench_op_t;

/** "allreduce", ... ; NULL for an unknown op. */
const char *bench_op_name(bench_op_t op);
/** Parse an operation name (also nccl-tests binary stems: all_reduce, all_gather,
 *  reduce_scatter, alltoall, ...). @return 0 on success, -1 if unknown. */
int bench_op_from_name(const char *name, bench_op_t *op);
/** 1 if the operation takes a reduction operator (printed in the redop column). */
int bench_op_reduces(bench_op_t op);
/** 1 if the operation takes a root (printed in the root column; else -1). */
int bench_op_rooted(bench_op_t op);
/** 1 if the operation has an in-place form in the unilink API (alltoall has none). */
int bench_op_has_inplace(bench_op_t op);

/** Element counts of one benchmark step, as nccl-tests' *GetCollByteCount computes
 *  them from the requested byte size. In-place offsets are in elements per rank. */
typedef struct bench_counts {
  size_t sendcount;        /**< elements in each rank's send buffer */
  size_t recvcount;        /**< elements in each rank's receive buffer */
  size_t paramcount;       /**< the count argument of the call (the "count" column) */
  size_t send_inplace_off; /**< in place: send = recv + rank * this (elements) */
  size_t recv_inplace_off; /**< in place: recv = send + rank * this (elements) */
} bench_counts_t;

/** Counts for a step of @p bytes with elements of @p eltsize bytes on @p nranks ranks. */
void bench_counts(bench_op_t op, size_t bytes, size_t eltsize, int nranks, bench_counts_t *out);
/** The "size" column: max(send, recv) bytes of one rank. */
size_t bench_row_bytes(const bench_counts_t *c, size_t eltsize);
/** Bytes S that algbw divides by time (per nccl-tests' *GetBw). */
double bench_alg_bytes(bench_op_t op, size_t paramcount, size_t eltsize, int nranks);
/** busbw = algbw * factor (nccl-tests, doc/PERFORMANCE.md and src/<op>.cu). */
double bench_bw_factor(bench_op_t op, int nranks);
/** algbw and busbw in GB/s (1e9 B/s) for a call that took @p sec seconds. */
void bench_bw(bench_op_t op, size_t paramcount, size_t eltsize, double sec, int nranks,
              double *algbw, double *busbw);

/** Memory-traffic lower bound of one call on one host, in units of S (the algbw
 *  bytes): every input byte read once, every output byte written once.
 *  See docs/bench.md "Roofline". */
double bench_roof_traffic(bench_op_t op, int nranks);
/** The bytes of input of one call, in units of S: the least a call keeps in the cache,
 *  since its outputs can bypass it (streaming stores). It picks the working set whose
 *  capacity bounds the call (bench_roof_at). */
double bench_roof_inputs(bench_op_t op, int nranks);
/** busbw a collective would reach if it only had to move bench_roof_traffic() bytes
 *  through memory of bandwidth @p membw_gbs (read+write GB/s). */
double bench_roof_busbw(bench_op_t op, int nranks, double membw_gbs);
/** The memory system's capacity (read + write GB/s) measured by 2 threads whose working
 *  set is bytes[i], ascending: smaller sets live in faster caches. cpus: how many distinct
 *  CPUs the measuring threads ran on (the machine's capacity needs 2 where there are). */
#define BENCH_ROOF_POINTS 8
typedef struct bench_roof {
  int n;
  size_t bytes[BENCH_ROOF_POINTS];
  double gbs[BENCH_ROOF_POINTS];
  int cpus;
} bench_roof_t;
/** The capacity that bounds a collective with @p inputs bytes of input
 *  (bench_roof_inputs() x size): the rate of the largest measured working set not above
 *  it (a smaller set is faster, so this is an upper bound), or of the smallest set; 0
 *  when nothing measured. */
double bench_roof_at(const bench_roof_t *roof, double inputs);
/** Fold a second measurement into @p into: per working set, the larger rate (a roof is
 *  an upper bound, and a shared machine's capacity moves between measurements). A
 *  measurement that failed (n 0) changes nothing; into empty takes @p other. */
void bench_roof_merge(bench_roof_t *into, const bench_roof_t *other);
/** %roof of a row: busbw against the roofline busbw of a @p bytes call of @p op on
 *  @p nranks ranks; -1 when there is no roof. */
double bench_roof_pct(const bench_roof_t *roof, bench_op_t op, int nranks, size_t bytes,
                      double busbw);

/** Parse a size with optional K/M/G suffix (binary units, as nccl-tests: "8", "64M",
 *  "1.5K"). @return 0, or -1 for a malformed, negative or overflowing value. */
int bench_parse_size(const char *text, size_t *out);

/** Format @p value into @p width characters the way nccl-tests' columns do: two
 *  decimals when they fit, then one, then none, then an exponent (1 decimal when
 *  width >= 7). */
void bench_format_num(double value, int width, char *out, size_t outsz);

/** Per-iteration statistics (times in any unit). */
typedef struct bench_stats {
  int n;
  double min, max, mean, median, p95, p99, stdev, cv_pct;
} bench_stats_t;

/** median = sorted[n/2]; pXX = nearest rank (sorted[ceil(n*XX/100)-1]); stdev is the
 *  population deviation; cv = stdev/mean*100. @return 0, -1 when n < 1 or NULL. */
int bench_stats(const double *x, int n, bench_stats_t *out);

/* ---------------------------------------------------------------------------- */
/* Exactly representable test data                                               */
/* ---------------------------------------------------------------------------- */

/** Largest integer M such that 0..M are all exact in @p dtype (a ul_dtype_t value),
 *  capped at 1e6 for wide types (small values keep products and sums exact). */
double bench_dtype_exact_max(int dtype);

/** Generator of seeded inputs whose reduction is exact in every dtype: values are small
 *  non-negative integers chosen so that every partial sum / product stays <= M, and
 *  avg inputs sum to a multiple of nranks. */
typedef struct bench_gen {
  int dtype, op, nranks, reducing;
  uint64_t seed;
  double maxv;      /**< M of the dtype */
  double sum_k;     /**< sum: each input in [0, sum_k] */
  double avg_base;  /**< avg: base in [0, avg_base]; -1: inputs rank-independent */
  double avg_same;  /**< avg with rank-independent inputs: value in [0, avg_same] */
  int prod_twos;    /**< prod: at most this many ranks contribute a 2 per element */
  double any_k;     /**< non-reducing / min / max: values in [0, any_k] */
} bench_gen_t;

/** @p op is a ul_op_t value; @p reducing 0 for data-movement operations. */
void bench_gen_init(bench_gen_t *g, int dtype, int op, int nranks, uint64_t seed, int reducing);
/** Input element @p idx of rank @p rank. */
double bench_gen_value(const bench_gen_t *g, int rank, size_t idx);
/** Reduction over all ranks of element @p idx (exact; avg divided by nranks). */
double bench_gen_reduced(const bench_gen_t *g, size_t idx);

/** splitmix64 step, exposed for tests. */
uint64_t bench_mix64(uint64_t x);

/** Escape @p in as a JSON string body into @p out (always NUL-terminated; non-ASCII and
 *  control characters become \\u00XX). @return 0, or -1 if truncated. */
int bench_json_escape(const char *in, char *out, size_t outsz);

/** @p v as the JSON holds it: nccl-tests writes doubles with "%lf" (6 decimals), so the
 *  table prints this value too and anything rendered from the JSON rounds the same
 *  number. */
double bench_json_value(double v);
/** Every field of @p s as the JSON writes it (bench_json_value): the per-iteration
 *  columns then print the numbers the JSON's per-iteration report holds. */
void bench_stats_json_values(bench_stats_t *s);

#ifdef __cplusplus
}
#endif
#endif /* UNILINK_BENCH_UTIL_H */
