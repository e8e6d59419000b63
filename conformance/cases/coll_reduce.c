/* Reductions: allreduce, reduce, reduce_scatter. */
#include "coll.h"

/* ---------------------------------------------------------------- allreduce */
static int allreduce_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  if (cf_coll_send(ctx, s, s->cnt, s->r, 1)) return -1;
  if (s->inplace) {
    s->recv_arg = s->send;
  } else {
    if (cf_coll_recv(ctx, s, s->cnt)) return -1;
  }
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
  if (cf_coll_send(ctx, s, s->cnt, s->r, 1)) return -1;
  if (s->inplace) {
    s->recv_arg = s->send;
  } else if (s->r == s->root) {
    if (cf_coll_recv(ctx, s, s->cnt)) return -1;
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
  if (cf_coll_send(ctx, s, total, s->r, 1)) return -1;
  if (s->inplace) {
    s->recv_arg = (char *)s->send + (size_t)s->r * s->cnt * s->sz;
  } else {
    if (cf_coll_recv(ctx, s, s->cnt)) return -1;
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
