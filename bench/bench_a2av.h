/**
 * @file bench_a2av.h
 * @brief nccl-tests' alltoallv traffic patterns (src/alltoallv.cu): a distance-weighted
 *        spread (NCCL_TESTS_ALLTOALLV_SPREAD, default 1.0) or a matrix file
 *        (NCCL_TESTS_ALLTOALLV_MATRIX_FILE, _MATRIX_SCALE), and the per-rank summary
 *        (NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY). Pure: no libunilink, unit-tested alone.
 */
#ifndef UNILINK_BENCH_A2AV_H
#define UNILINK_BENCH_A2AV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bench_a2av {
  int matrix;          /**< 1: bytes from the matrix file; 0: generated from the size */
  double spread;       /**< generated: 0 uniform .. 1 fully distance-weighted */
  double scale;        /**< matrix: factor applied to every cell */
  int print_summary;   /**< NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY != 0 */
  int dim;             /**< matrix: rows == columns */
  size_t *bytes;       /**< matrix: dim x dim, bytes rank i sends to j, 16-byte aligned */
  char file[512];      /**< matrix: the file's path */
} bench_a2av_t;

/** Defaults: generated, spread 1.0, scale 1.0, no summary. */
void bench_a2av_init(bench_a2av_t *p);

/** Read the NCCL_TESTS_ALLTOALLV_* variables (and the matrix file) into @p p. Values are
 *  clamped as nccl-tests does (spread to [0, 1], scale to >= 0); a value that is not a
 *  number, or a matrix file that cannot be read or is not a square of non-negative
 *  numbers, is refused: @return -1 with the reason in @p err (and @p p left at its
 *  defaults), else 0. */
int bench_a2av_from_env(bench_a2av_t *p, char *err, size_t errsz);

/** Parse matrix @p text (whitespace-separated, one row per line) scaled by p->scale.
 *  @return 0, or -1 with the reason in @p err. */
int bench_a2av_parse_matrix(bench_a2av_t *p, const char *text, const char *name, char *err,
                            size_t errsz);

void bench_a2av_free(bench_a2av_t *p);

/** Bytes rank @p i sends to rank @p j for a step whose ranks each send @p total bytes in
 *  all (generated mode; the matrix cell otherwise), rounded down to 16 bytes. */
size_t bench_a2av_peer_bytes(const bench_a2av_t *p, int i, int j, int nranks, size_t total);

/** Largest per-rank send and receive element counts of a step (what the buffers and the
 *  "size" column need). */
void bench_a2av_max_counts(const bench_a2av_t *p, size_t eltsize, int nranks, size_t total,
                           size_t *maxsend, size_t *maxrecv);

/** Per-peer counts and displacements of rank @p me (elements): sendcounts, sdispls,
 *  recvcounts, rdispls and srcoffs (where, in source j's send buffer, the block for @p me
 *  starts), nranks each, in @p v (5 * nranks entries). */
void bench_a2av_rank_counts(const bench_a2av_t *p, size_t eltsize, int nranks, int me,
                            size_t total, size_t *v);

#ifdef __cplusplus
}
#endif
#endif
