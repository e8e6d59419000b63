/* Point-to-point patterns: ring shift, all-pairs, self-send and zero-byte inside groups,
 * and a ping-pong of ungrouped calls. */
#include "cases.h"

static const char *p2p_names[] = {"ring", "allpairs", "self", "zerobyte", "pingpong"};

void cf_expand_p2p(const cf_case_t *c, int n, const cf_opts_t *o, const ul_backend_info_t *info,
                   cf_emit_fn emit, void *arg) {
  int v = c->variant;
  if (v == CF_P2P_ZERO) {
    cf_inst_t in = cf_proto(c);
    in.dtype = UL_FP32;
    in.col = cf_dtype_name(UL_FP32);
    snprintf(in.name, sizeof in.name, "p2p/zerobyte/fp32/count=0");
    emit(arg, &in);
    return;
  }
  size_t full[] = {1, 7, 1023, 65537}, quick[] = {7, 1023};
  const size_t *counts = o->quick ? quick : full;
  int ncounts = o->quick ? 2 : 4;
  for (int dt = 0; dt < UL_DTYPE_COUNT; dt++) {
    /* the ring covers every dtype; the other patterns move bytes the same way for all */
    if (v != CF_P2P_RING && dt != UL_UINT8 && dt != UL_FP32 && dt != UL_FP64) continue;
    if (o->quick && v == CF_P2P_RING && dt % 3 != 2) continue;
    for (int ci = 0; ci < ncounts; ci++) {
      cf_inst_t in = cf_proto(c);
      in.dtype = dt;
      in.count = counts[ci];
      in.col = cf_dtype_name(dt);
      snprintf(in.name, sizeof in.name, "p2p/%s/%s/count=%zu", p2p_names[v], cf_dtype_name(dt),
               counts[ci]);
      emit(arg, &in);
    }
  }
}

static int p2p_rc(cf_ctx_t *ctx, ul_result_t rc, const char *call) { return cf_check_rc(ctx, rc, call); }

void cf_case_p2p(cf_ctx_t *ctx) {
  const cf_inst_t *in = ctx->inst;
  int n = ctx->nranks, r = ctx->rank;
  ul_dtype_t dt = (ul_dtype_t)in->dtype;
  size_t sz = ul_dtype_size(dt), cnt = in->count;
  cf_gen_t g;
  cf_gen_init(&g, dt, -1, n, ctx->seed);
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  switch (in->variant) {
  case CF_P2P_RING:
  case CF_P2P_SELF: {
    int to = in->variant == CF_P2P_RING ? next : r, from = in->variant == CF_P2P_RING ? prev : r;
    void *s = cf_alloc(ctx, cnt * sz), *d = cf_alloc(ctx, cnt * sz);
    if (!s || !d) return;
    if (cf_fill(ctx, &g, r, 0, cnt, s) || cf_poison(ctx, d, cnt * sz)) return;
    if (p2p_rc(ctx, ul_group_start(), "ul_group_start")) return;
    ul_result_t rs = ul_send(s, cnt, dt, to, ctx->comm, NULL);
    ul_result_t rr = ul_recv(d, cnt, dt, from, ctx->comm, NULL);
    ul_result_t re = ul_group_end();
    if (p2p_rc(ctx, rs, "ul_send") || p2p_rc(ctx, rr, "ul_recv") || p2p_rc(ctx, re, "ul_group_end"))
      return;
    cf_exp_t x = {.g = &g, .rank = from};
    cf_verify(ctx, "recv buffer", d, cnt, dt, cf_exp_input, &x, 0);
    cf_exp_t y = {.g = &g, .rank = r};
    cf_verify(ctx, "send buffer (must stay unchanged)", s, cnt, dt, cf_exp_input, &y, 0);
    cf_check_guard(ctx, "recv buffer", d, cnt * sz);
    return;
  }
  case CF_P2P_ALLPAIRS: {
    size_t total = cnt * (size_t)n;
    void *s = cf_alloc(ctx, total * sz), *d = cf_alloc(ctx, total * sz);
    if (!s || !d) return;
    if (cf_fill(ctx, &g, r, 0, total, s) || cf_poison(ctx, d, total * sz)) return;
    if (p2p_rc(ctx, ul_group_start(), "ul_group_start")) return;
    ul_result_t rc = UL_OK;
    /* peers in a rank-dependent order: matching must not depend on issue order across peers */
    for (int k = 0; k < n && rc == UL_OK; k++) {
      int p = (r + k) % n;
      rc = ul_send((char *)s + (size_t)p * cnt * sz, cnt, dt, p, ctx->comm, NULL);
      if (rc == UL_OK) rc = ul_recv((char *)d + (size_t)p * cnt * sz, cnt, dt, p, ctx->comm, NULL);
    }
    ul_result_t re = ul_group_end();
    if (p2p_rc(ctx, rc, "ul_send/ul_recv") || p2p_rc(ctx, re, "ul_group_end")) return;
    cf_exp_t x = {.g = &g, .rank = r, .blk = cnt};
    cf_verify(ctx, "recv buffer", d, total, dt, cf_exp_alltoall, &x, 0);
    cf_check_guard(ctx, "recv buffer", d, total * sz);
    return;
  }
  case CF_P2P_ZERO: {
    /* zero elements with NULL buffers is valid; so are zero elements from real buffers,
     * which must stay untouched */
    void *d = cf_alloc(ctx, 16);
    if (!d) return;
    if (cf_poison(ctx, d, 16)) return;
    if (p2p_rc(ctx, ul_group_start(), "ul_group_start")) return;
    ul_result_t r1 = ul_send(NULL, 0, dt, next, ctx->comm, NULL);
    ul_result_t r2 = ul_recv(NULL, 0, dt, prev, ctx->comm, NULL);
    ul_result_t r3 = ul_send(d, 0, dt, r, ctx->comm, NULL);
    ul_result_t r4 = ul_recv(d, 0, dt, r, ctx->comm, NULL);
    ul_result_t re = ul_group_end();
    if (p2p_rc(ctx, r1, "ul_send(NULL, 0)") || p2p_rc(ctx, r2, "ul_recv(NULL, 0)") ||
        p2p_rc(ctx, r3, "ul_send(count 0, self)") || p2p_rc(ctx, r4, "ul_recv(count 0, self)") ||
        p2p_rc(ctx, re, "ul_group_end"))
      return;
    cf_check_poison(ctx, "zero-count recv buffer", d, 16);
    return;
  }
  case CF_P2P_PINGPONG: {
    /* ungrouped: each call is its own group; rank 1 echoes what rank 0 sent */
    void *s = cf_alloc(ctx, cnt * sz), *d = cf_alloc(ctx, cnt * sz);
    if (!s || !d) return;
    if (cf_fill(ctx, &g, 0, 0, cnt, s) || cf_poison(ctx, d, cnt * sz)) return;
    if (r == 0) {
      if (p2p_rc(ctx, ul_send(s, cnt, dt, 1, ctx->comm, NULL), "ul_send") ||
          p2p_rc(ctx, ul_recv(d, cnt, dt, 1, ctx->comm, NULL), "ul_recv"))
        return;
      cf_exp_t x = {.g = &g, .rank = 0};
      cf_verify(ctx, "echoed buffer", d, cnt, dt, cf_exp_input, &x, 0);
    } else if (r == 1) {
      if (p2p_rc(ctx, ul_recv(d, cnt, dt, 0, ctx->comm, NULL), "ul_recv") ||
          p2p_rc(ctx, ul_send(d, cnt, dt, 0, ctx->comm, NULL), "ul_send"))
        return;
      cf_exp_t x = {.g = &g, .rank = 0};
      cf_verify(ctx, "received buffer", d, cnt, dt, cf_exp_input, &x, 0);
    }
    return;
  }
  }
}
