/* Reductions: allreduce, reduce, reduce_scatter. */
#include "coll.h"

/* ---------------------------------------------------------------- allreduce */
static int allreduce_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  s->send_elems = s->cnt;
  s->send = cf_coll_buf(ctx, s, s->cnt, 0);
  if (!s->send) return -1;
  cf_fill(&s->g, s->r, 0, s->cnt, s->send);
  s->send_is_input = 1;
  if (s->inplace) {
    s->recv_arg = s->send;
  } else {
    s->recv_elems = s->cnt;
    s->recv = cf_coll_buf(ctx, s, s->cnt, 1);
    if (!s->recv) return -1;
    s->recv_arg = s->recv;
  }
  s->send_arg = s->send;
  s->result = s->recv_arg;
  s->result_elems = s->cnt;
  return 0;
}
static ul_result_t allreduce_call(cf_ctx_t *ctx, cf_coll_state_t *s) {
  return ul_allreduce(s->send_arg, s->recv_arg, s->cnt, s->dt, s->op, ctx->comm, NULL);
}
static void allreduce_verify(cf_ctx_t *ctx, cf_coll_state_t *s) {
  cf_exp_t x = {.g = &s->g};
  cf_verify(ctx, "recvbuf", s->result, s->cnt, s->dt, cf_exp_reduce, &x, cf_avg_tolerance(&s->g));
}
const cf_coll_desc_t cf_coll_allreduce = {UL_COLL_ALLREDUCE, 1, 0, 1, allreduce_setup,
                                          allreduce_call, allreduce_verify};

/* ---------------------------------------------------------------- reduce */
static int reduce_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  s->send_elems = s->cnt;
  s->send = cf_coll_buf(ctx, s, s->cnt, 0);
  if (!s->send) return -1;
  cf_fill(&s->g, s->r, 0, s->cnt, s->send);
  s->send_is_input = 1;
  s->send_arg = s->send;
  if (s->inplace) {
    s->recv_arg = s->send;
  } else if (s->r == s->root) {
    s->recv_elems = s->cnt;
    s->recv = cf_coll_buf(ctx, s, s->cnt, 1);
    if (!s->recv) return -1;
    s->recv_arg = s->recv;
  } else {
    s->recv_arg = NULL; /* documented: recvbuf may be NULL off root */
  }
  if (s->r == s->root) {
    s->result = s->recv_arg;
    s->result_elems = s->cnt;
  }
  return 0;
}
static ul_result_t reduce_call(cf_ctx_t *ctx, cf_coll_state_t *s) {
  return ul_reduce(s->send_arg, s->recv_arg, s->cnt, s->dt, s->op, s->root, ctx->comm, NULL);
}
static void reduce_verify(cf_ctx_t *ctx, cf_coll_state_t *s) {
  if (!s->result) return;
  cf_exp_t x = {.g = &s->g};
  cf_verify(ctx, "root recvbuf", s->result, s->cnt, s->dt, cf_exp_reduce, &x,
            cf_avg_tolerance(&s->g));
}
const cf_coll_desc_t cf_coll_reduce = {UL_COLL_REDUCE, 1, 1, 1, reduce_setup, reduce_call,
                                       reduce_verify};

/* ---------------------------------------------------------------- reduce_scatter */
static int reduce_scatter_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  size_t total = s->cnt * (size_t)s->n;
  s->send_elems = total;
  s->send = cf_coll_buf(ctx, s, total, 0);
  if (!s->send) return -1;
  cf_fill(&s->g, s->r, 0, total, s->send);
  s->send_is_input = 1;
  s->send_arg = s->send;
  if (s->inplace) {
    s->recv_arg = (char *)s->send + (size_t)s->r * s->cnt * s->sz;
  } else {
    s->recv_elems = s->cnt;
    s->recv = cf_coll_buf(ctx, s, s->cnt, 1);
    if (!s->recv) return -1;
    s->recv_arg = s->recv;
  }
  s->result = s->recv_arg;
  s->result_elems = s->cnt;
  return 0;
}
static ul_result_t reduce_scatter_call(cf_ctx_t *ctx, cf_coll_state_t *s) {
  return ul_reduce_scatter(s->send_arg, s->recv_arg, s->cnt, s->dt, s->op, ctx->comm, NULL);
}
static void reduce_scatter_verify(cf_ctx_t *ctx, cf_coll_state_t *s) {
  cf_exp_t x = {.g = &s->g, .base = (size_t)s->r * s->cnt};
  cf_verify(ctx, "recvbuf", s->result, s->cnt, s->dt, cf_exp_reduce, &x, cf_avg_tolerance(&s->g));
}
const cf_coll_desc_t cf_coll_reduce_scatter = {UL_COLL_REDUCE_SCATTER, 1, 0, 1,
                                               reduce_scatter_setup, reduce_scatter_call,
                                               reduce_scatter_verify};
