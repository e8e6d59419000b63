/* Streams: several operations in flight on two streams, and issue order on one stream. */
#include "cases.h"

static void streams_two(cf_ctx_t *ctx) {
  int n = ctx->nranks, r = ctx->rank;
  if (cf_need(ctx, UL_COLL_ALLREDUCE, UL_INT32, UL_SUM) ||
      cf_need(ctx, UL_COLL_ALLREDUCE, UL_FP32, UL_SUM) ||
      cf_need(ctx, UL_COLL_BROADCAST, UL_UINT8, -1) || cf_need(ctx, UL_COLL_ALLGATHER, UL_INT32, -1))
    return;
  ul_stream_t s1 = NULL, s2 = NULL;
  if (cf_check_rc(ctx, ul_stream_create(ctx->comm, &s1), "ul_stream_create")) return;
  if (cf_check_rc(ctx, ul_stream_create(ctx->comm, &s2), "ul_stream_create")) {
    ul_stream_destroy(s1);
    return;
  }
  size_t ca = 1023, cb = 65537, cc = 1023, cd = 7;
  cf_gen_t ga, gb, gc, gd;
  cf_gen_init(&ga, UL_INT32, UL_SUM, n, ctx->seed ^ 1);
  cf_gen_init(&gb, UL_FP32, UL_SUM, n, ctx->seed ^ 2);
  cf_gen_init(&gc, UL_UINT8, -1, n, ctx->seed ^ 3);
  cf_gen_init(&gd, UL_INT32, -1, n, ctx->seed ^ 4);
  void *a_in = cf_alloc(ctx, ca * 4), *a_out = cf_alloc(ctx, ca * 4);
  void *b_in = cf_alloc(ctx, cb * 4), *b_out = cf_alloc(ctx, cb * 4);
  void *c_buf = cf_alloc(ctx, cc), *d_in = cf_alloc(ctx, cd * 4);
  void *d_out = cf_alloc(ctx, cd * 4 * (size_t)n);
  if (a_in && a_out && b_in && b_out && c_buf && d_in && d_out) {
    /* staged with NULL-stream copies: complete before anything is enqueued */
    int root = n - 1;
    int ok = !cf_fill(ctx, &ga, r, 0, ca, a_in) && !cf_fill(ctx, &gb, r, 0, cb, b_in) &&
             !cf_fill(ctx, &gd, r, 0, cd, d_in) && !cf_poison(ctx, a_out, ca * 4) &&
             !cf_poison(ctx, b_out, cb * 4) && !cf_poison(ctx, d_out, cd * 4 * (size_t)n) &&
             !(r == root ? cf_fill(ctx, &gc, root, 0, cc, c_buf) : cf_poison(ctx, c_buf, cc));
    /* enqueue everything before waiting for anything */
    ok = ok &&
         !cf_check_rc(ctx, ul_allreduce(a_in, a_out, ca, UL_INT32, UL_SUM, ctx->comm, s1),
                      "ul_allreduce on stream 1") &&
         !cf_check_rc(ctx, ul_broadcast(c_buf, c_buf, cc, UL_UINT8, root, ctx->comm, s2),
                      "ul_broadcast on stream 2") &&
         !cf_check_rc(ctx, ul_allreduce(b_in, b_out, cb, UL_FP32, UL_SUM, ctx->comm, s1),
                      "second ul_allreduce on stream 1") &&
         !cf_check_rc(ctx, ul_allgather(d_in, d_out, cd, UL_INT32, ctx->comm, s2),
                      "ul_allgather on stream 2");
    ul_result_t r1 = ul_stream_synchronize(s1), r2 = ul_stream_synchronize(s2);
    if (ok && !cf_check_rc(ctx, r1, "ul_stream_synchronize(1)") &&
        !cf_check_rc(ctx, r2, "ul_stream_synchronize(2)")) {
      ul_result_t q1 = ul_stream_query(s1), q2 = ul_stream_query(s2);
      if (q1 != UL_OK || q2 != UL_OK)
        cf_fail(ctx, "rank %d: ul_stream_query after synchronize returned %s / %s", r,
                ul_result_name(q1), ul_result_name(q2));
      /* results are copied back only now, after both streams are synchronized */
      cf_exp_t xa = {.g = &ga}, xb = {.g = &gb}, xc = {.g = &gc, .rank = root},
               xd = {.g = &gd, .blk = cd};
      cf_verify(ctx, "stream 1 allreduce int32 recvbuf", a_out, ca, UL_INT32, cf_exp_reduce, &xa, 0);
      cf_verify(ctx, "stream 1 allreduce fp32 recvbuf", b_out, cb, UL_FP32, cf_exp_reduce, &xb, 0);
      cf_verify(ctx, "stream 2 broadcast buffer", c_buf, cc, UL_UINT8, cf_exp_input, &xc, 0);
      cf_verify(ctx, "stream 2 allgather recvbuf", d_out, cd * (size_t)n, UL_INT32, cf_exp_blocks,
                &xd, 0);
    }
  }
  if (s1) cf_check_rc(ctx, ul_stream_destroy(s1), "ul_stream_destroy");
  if (s2) cf_check_rc(ctx, ul_stream_destroy(s2), "ul_stream_destroy");
}

/* Three in-place sums on one stream: the result is n^2 * sum only if they ran in issue
 * order on the same data (no copy of the input taken at enqueue time). */
static void streams_ordered(cf_ctx_t *ctx) {
  int n = ctx->nranks, r = ctx->rank;
  if (cf_need(ctx, UL_COLL_ALLREDUCE, UL_INT32, UL_SUM)) return;
  ul_stream_t s = NULL;
  if (cf_check_rc(ctx, ul_stream_create(ctx->comm, &s), "ul_stream_create")) return;
  size_t cnt = 1023;
  cf_gen_t g;
  cf_gen_init(&g, UL_INT32, UL_SUM, n, ctx->seed);
  /* keep n^2 * |sum| inside int32 */
  g.lo = -1000;
  g.hi = 1000;
  void *buf = cf_alloc(ctx, cnt * 4);
  if (buf) {
    int ok = !cf_fill(ctx, &g, r, 0, cnt, buf);
    for (int k = 0; k < 3 && ok; k++)
      ok = !cf_check_rc(ctx, ul_allreduce(buf, buf, cnt, UL_INT32, UL_SUM, ctx->comm, s),
                        "ul_allreduce (in place, on a stream)");
    ul_result_t rc = ul_stream_synchronize(s);
    if (ok && !cf_check_rc(ctx, rc, "ul_stream_synchronize")) {
      cf_exp_t x = {.g = &g, .scale = (double)n * n};
      cf_verify(ctx, "buffer after three chained in-place allreduces", buf, cnt, UL_INT32,
                cf_exp_reduce_scaled, &x, 0);
    }
  }
  cf_check_rc(ctx, ul_stream_destroy(s), "ul_stream_destroy");
}

void cf_case_streams(cf_ctx_t *ctx) {
  if (ctx->inst->variant == CF_STREAMS_TWO) streams_two(ctx);
  else streams_ordered(ctx);
}
