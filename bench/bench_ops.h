/* Per-operation descriptors of unilink-bench: which buffers a call uses, how to issue
 * it through the public API, how to seed its inputs and count wrong outputs. */
#ifndef UNILINK_BENCH_OPS_H
#define UNILINK_BENCH_OPS_H

#include <stdint.h>

#include "bench_util.h"
#include "unilink/unilink.h"

/** One rank's view of one benchmark step. */
typedef struct bench_call {
  bench_op_t op;
  ul_dtype_t dtype;
  ul_op_t redop;
  int root;
  int rank, nranks;
  bench_counts_t counts;
  size_t es;      /* element size */
  int in_place;
  char *sbuf;     /* send buffer base (out of place) */
  char *rbuf;     /* receive buffer base; in place uses only this one */
  /* host staging memory of this rank (as large as a buffer): sbuf/rbuf may be device
   * memory the CPU must not touch, so inputs are built here and copied in with
   * ul_mem_copy, and results are copied back here to be checked */
  char *shadow;
  /* v-forms: sendcounts, sdispls, recvcounts, rdispls and the senders' offsets (nranks
   * each, bench_a2av_rank_counts), built before the timed calls: alltoallv's follow
   * nccl-tests' pattern; allgatherv's are uniform and use the first two as recvcounts,
   * displs */
  const size_t *vcounts;
  ul_comm_t comm;
  ul_stream_t stream;
} bench_call_t;

/** A descriptor: what nccl-tests calls a test engine, in three functions. */
typedef struct bench_op_desc {
  bench_op_t op;
  /* send/recv pointers of this call (NULL where the API allows it off root) */
  void (*ptrs)(const bench_call_t *c, const void **send, void **recv);
  /* issue the call */
  ul_result_t (*run)(const bench_call_t *c, const void *send, void *recv);
  /* expected value of element i of this rank's result; returns 0 when this rank has
   * no result to check (e.g. reduce off root) */
  int (*expect)(const bench_call_t *c, const bench_gen_t *g, size_t i, double *value);
  /* number of result elements on this rank */
  size_t (*result_count)(const bench_call_t *c);
  /* 1: the in-place form is timed but not checked (its result is a race: in-place
   * sendrecv sends from the buffer it receives into; nccl-tests prints N/A there too) */
  int in_place_unchecked;
} bench_op_desc_t;

const bench_op_desc_t *bench_op_desc(bench_op_t op);

/** Issue the call of @p c. */
ul_result_t bench_call_run(const bench_call_t *c);
/** Poison the result area (ul_mem_set) and write seeded inputs for this rank (built in
 *  the shadow, then ul_mem_copy). NULL stream: complete on return. */
ul_result_t bench_call_fill(const bench_call_t *c, uint64_t seed);
/** Copy the result back into the shadow and count the elements in @p wrong that differ
 *  from the exact expectation. */
ul_result_t bench_call_check(const bench_call_t *c, uint64_t seed, int64_t *wrong);

/** nccl-tests' type name for a dtype ("float", "half", "bfloat16", "f8e4m3" ...). */
const char *bench_dtype_nccl_name(ul_dtype_t dtype);

#endif
