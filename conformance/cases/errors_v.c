/* Invalid arguments of ul_alltoallv / ul_allgatherv: each must return
 * UL_ERR_INVALID_ARG with a sentence and leave every buffer as it was (errors.c checks
 * the communicator still works afterwards). */
#include <stdint.h>

#include "cases.h"

enum {
  V_A2A_NULL_SENDCOUNTS, V_A2A_NULL_RDISPLS, V_A2A_RECV_OVERLAP, V_A2A_OVERFLOW, V_A2A_INPLACE,
  V_A2A_SELF_MISMATCH, V_AGV_NULL_RECVCOUNTS, V_AGV_NULL_DISPLS, V_AGV_RECV_OVERLAP,
  V_AGV_SENDCOUNT_MISMATCH, V_AGV_PARTIAL_OVERLAP, V_AGV_OVERFLOW
};

const char *const cf_verr_names[CF_NVERR] = {
    "alltoallv-null-sendcounts",     "alltoallv-null-rdispls",
    "alltoallv-overlapping-blocks",  "alltoallv-displacement-overflow",
    "alltoallv-inplace",             "alltoallv-self-count-mismatch",
    "allgatherv-null-recvcounts",    "allgatherv-null-displs",
    "allgatherv-overlapping-blocks", "allgatherv-sendcount-mismatch",
    "allgatherv-partial-overlap",    "allgatherv-displacement-overflow",
};
const int cf_verr_min_ranks[CF_NVERR] = {1, 1, 2, 1, 1, 1, 1, 1, 2, 1, 1, 1};

static void expect_invalid(cf_ctx_t *ctx, ul_result_t rc, const char *call) {
  if (rc != UL_ERR_INVALID_ARG) {
    cf_fail(ctx, "rank %d: %s returned %s, expected UL_ERR_INVALID_ARG", ctx->rank, call,
            ul_result_name(rc));
    if (rc != UL_ERR_UNSUPPORTED) ctx->broken = 1;
    return;
  }
  const char *m = ul_comm_last_error(ctx->comm);
  if (!m || !*m)
    cf_fail(ctx, "rank %d: %s returned UL_ERR_INVALID_ARG but ul_comm_last_error is empty",
            ctx->rank, call);
}

void cf_errors_vcoll(cf_ctx_t *ctx, int e) {
  int n = ctx->nranks, r = ctx->rank;
  if (cf_need(ctx, e < V_AGV_NULL_RECVCOUNTS ? UL_COLL_ALLTOALLV : UL_COLL_ALLGATHERV, UL_INT32,
              -1))
    return;
  const size_t blk = 4, es = 4;
  size_t arena_bytes = blk * es * 4 * (size_t)n;
  unsigned char *arena = cf_alloc(ctx, arena_bytes);
  if (!arena || cf_poison(ctx, arena, arena_bytes)) return;
  unsigned char *a = arena, *b = arena + arena_bytes / 2; /* 2n blocks each */
  size_t sc[CF_MAX_RANKS], sd[CF_MAX_RANKS], rc[CF_MAX_RANKS], rd[CF_MAX_RANKS];
  for (int j = 0; j < n; j++) sc[j] = rc[j] = blk, sd[j] = rd[j] = (size_t)j * blk;
  ul_comm_t c = ctx->comm;
  switch (e) {
  case V_A2A_NULL_SENDCOUNTS:
    expect_invalid(ctx, ul_alltoallv(a, NULL, sd, b, rc, rd, UL_INT32, c, NULL),
                   "ul_alltoallv(sendcounts NULL)");
    break;
  case V_A2A_NULL_RDISPLS:
    expect_invalid(ctx, ul_alltoallv(a, sc, sd, b, rc, NULL, UL_INT32, c, NULL),
                   "ul_alltoallv(rdispls NULL)");
    break;
  case V_A2A_RECV_OVERLAP:
    rd[1] = rd[0] + blk - 1; /* ranks 0 and 1 would both write one element */
    expect_invalid(ctx, ul_alltoallv(a, sc, sd, b, rc, rd, UL_INT32, c, NULL),
                   "ul_alltoallv(receive blocks 0 and 1 overlap)");
    break;
  case V_A2A_OVERFLOW:
    rd[n - 1] = SIZE_MAX / es; /* (displacement + count) * size overflows */
    expect_invalid(ctx, ul_alltoallv(a, sc, sd, b, rc, rd, UL_INT32, c, NULL),
                   "ul_alltoallv(rdispls*size overflows)");
    break;
  case V_A2A_INPLACE:
    expect_invalid(ctx, ul_alltoallv(a, sc, sd, a, rc, rd, UL_INT32, c, NULL),
                   "ul_alltoallv(sendbuf == recvbuf)");
    break;
  case V_A2A_SELF_MISMATCH:
    sc[r] = blk - 1;
    expect_invalid(ctx, ul_alltoallv(a, sc, sd, b, rc, rd, UL_INT32, c, NULL),
                   "ul_alltoallv(sendcounts[rank] != recvcounts[rank])");
    break;
  case V_AGV_NULL_RECVCOUNTS:
    expect_invalid(ctx, ul_allgatherv(a, blk, b, NULL, rd, UL_INT32, c, NULL),
                   "ul_allgatherv(recvcounts NULL)");
    break;
  case V_AGV_NULL_DISPLS:
    expect_invalid(ctx, ul_allgatherv(a, blk, b, rc, NULL, UL_INT32, c, NULL),
                   "ul_allgatherv(displs NULL)");
    break;
  case V_AGV_RECV_OVERLAP:
    rd[0] = rd[1] + 1;
    expect_invalid(ctx, ul_allgatherv(a, blk, b, rc, rd, UL_INT32, c, NULL),
                   "ul_allgatherv(receive blocks 0 and 1 overlap)");
    break;
  case V_AGV_SENDCOUNT_MISMATCH:
    expect_invalid(ctx, ul_allgatherv(a, blk + 1, b, rc, rd, UL_INT32, c, NULL),
                   "ul_allgatherv(sendcount != recvcounts[rank])");
    break;
  case V_AGV_PARTIAL_OVERLAP:
    /* the in-place slot is recvbuf + displs[rank]; one element past it is not */
    expect_invalid(ctx, ul_allgatherv(b + (rd[r] + 1) * es, blk, b, rc, rd, UL_INT32, c, NULL),
                   "ul_allgatherv(sendbuf = in-place slot + 1 element)");
    break;
  case V_AGV_OVERFLOW:
    rd[0] = SIZE_MAX - 1; /* displacement + count overflows */
    expect_invalid(ctx, ul_allgatherv(a, blk, b, rc, rd, UL_INT32, c, NULL),
                   "ul_allgatherv(displs + count overflows)");
    break;
  }
  cf_check_poison(ctx, "buffers passed to the rejected call", arena, arena_bytes);
}
