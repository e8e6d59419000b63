/* Data movement: broadcast, allgather, alltoall, gather, scatter (inputs are random bit
 * patterns, so a misplaced block shows). */
#include "coll.h"

/* ---------------------------------------------------------------- broadcast */
static int broadcast_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  if (cf_coll_recv(ctx, s, s->cnt)) return -1;
  if (s->r == s->root) {
    if (s->inplace) {
      if (cf_fill(ctx, &s->g, s->root, 0, s->cnt, s->recv)) return -1;
      s->send_arg = s->recv;
    } else {
      /* not an "unchanged input" check: verified below against the root's input */
      if (cf_coll_send(ctx, s, s->cnt, s->root, 0)) return -1;
    }
  } else {
    /* sendbuf is read on root only: NULL elsewhere out of place, aliased in place */
    s->send_arg = s->inplace ? s->recv : NULL;
  }
  s->result = s->recv;
  s->result_elems = s->cnt;
  return 0;
}
static ul_result_t broadcast_call(cf_ctx_t *ctx, cf_coll_state_t *s) {
  return ul_broadcast(s->send_arg, s->recv_arg, s->cnt, s->dt, s->root, ctx->comm, NULL);
}
static void broadcast_verify(cf_ctx_t *ctx, cf_coll_state_t *s) {
  cf_exp_t x = {.g = &s->g, .rank = s->root};
  cf_verify(ctx, "recvbuf", s->result, s->cnt, s->dt, cf_exp_input, &x, 0);
  if (s->send && s->cnt <= ((size_t)1 << 18))
    cf_verify(ctx, "root sendbuf (must stay unchanged)", s->send, s->cnt, s->dt, cf_exp_input, &x, 0);
}
const cf_coll_desc_t cf_coll_broadcast = {UL_COLL_BROADCAST, 0, 1, 1, broadcast_setup,
                                          broadcast_call, broadcast_verify};

/* ---------------------------------------------------------------- allgather */
static int allgather_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  size_t total = s->cnt * (size_t)s->n;
  if (cf_coll_recv(ctx, s, total)) return -1;
  if (s->inplace) {
    char *slot = (char *)s->recv + (size_t)s->r * s->cnt * s->sz;
    if (cf_fill(ctx, &s->g, s->r, 0, s->cnt, slot)) return -1;
    s->send_arg = slot;
  } else {
    if (cf_coll_send(ctx, s, s->cnt, s->r, 1)) return -1;
  }
  s->result = s->recv;
  s->result_elems = total;
  return 0;
}
static ul_result_t allgather_call(cf_ctx_t *ctx, cf_coll_state_t *s) {
  return ul_allgather(s->send_arg, s->recv_arg, s->cnt, s->dt, ctx->comm, NULL);
}
static void allgather_verify(cf_ctx_t *ctx, cf_coll_state_t *s) {
  cf_exp_t x = {.g = &s->g, .blk = s->cnt ? s->cnt : 1};
  cf_verify(ctx, "recvbuf", s->result, s->result_elems, s->dt, cf_exp_blocks, &x, 0);
}
const cf_coll_desc_t cf_coll_allgather = {UL_COLL_ALLGATHER, 0, 0, 1, allgather_setup,
                                          allgather_call, allgather_verify};

/* ---------------------------------------------------------------- alltoall */
static int alltoall_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  size_t total = s->cnt * (size_t)s->n;
  if (cf_coll_send(ctx, s, total, s->r, 1) || cf_coll_recv(ctx, s, total)) return -1;
  s->result = s->recv;
  s->result_elems = total;
  return 0;
}
static ul_result_t alltoall_call(cf_ctx_t *ctx, cf_coll_state_t *s) {
  return ul_alltoall(s->send_arg, s->recv_arg, s->cnt, s->dt, ctx->comm, NULL);
}
static void alltoall_verify(cf_ctx_t *ctx, cf_coll_state_t *s) {
  cf_exp_t x = {.g = &s->g, .rank = s->r, .blk = s->cnt ? s->cnt : 1};
  cf_verify(ctx, "recvbuf", s->result, s->result_elems, s->dt, cf_exp_alltoall, &x, 0);
}
const cf_coll_desc_t cf_coll_alltoall = {UL_COLL_ALLTOALL, 0, 0, 0, alltoall_setup, alltoall_call,
                                         alltoall_verify};

/* ---------------------------------------------------------------- gather */
static int gather_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  size_t total = s->cnt * (size_t)s->n;
  int root = s->r == s->root;
  if (root) {
    if (cf_coll_recv(ctx, s, total)) return -1;
    s->result = s->recv;
    s->result_elems = total;
  } else {
    s->recv_arg = NULL; /* documented: recvbuf may be NULL off root */
  }
  if (root && s->inplace) {
    char *slot = (char *)s->recv + (size_t)s->root * s->cnt * s->sz;
    if (cf_fill(ctx, &s->g, s->r, 0, s->cnt, slot)) return -1;
    s->send_arg = slot;
  } else {
    if (cf_coll_send(ctx, s, s->cnt, s->r, 1)) return -1;
  }
  return 0;
}
static ul_result_t gather_call(cf_ctx_t *ctx, cf_coll_state_t *s) {
  return ul_gather(s->send_arg, s->recv_arg, s->cnt, s->dt, s->root, ctx->comm, NULL);
}
static void gather_verify(cf_ctx_t *ctx, cf_coll_state_t *s) {
  if (!s->result) return;
  cf_exp_t x = {.g = &s->g, .blk = s->cnt ? s->cnt : 1};
  cf_verify(ctx, "root recvbuf", s->result, s->result_elems, s->dt, cf_exp_blocks, &x, 0);
}
const cf_coll_desc_t cf_coll_gather = {UL_COLL_GATHER, 0, 1, 1, gather_setup, gather_call,
                                       gather_verify};

/* ---------------------------------------------------------------- scatter */
static int scatter_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  size_t total = s->cnt * (size_t)s->n;
  int root = s->r == s->root;
  if (root) {
    if (cf_coll_send(ctx, s, total, s->root, 0)) return -1;
  } else {
    s->send_arg = NULL; /* documented: sendbuf may be NULL off root */
  }
  if (root && s->inplace) {
    s->recv_arg = (char *)s->send + (size_t)s->root * s->cnt * s->sz;
  } else {
    if (cf_coll_recv(ctx, s, s->cnt)) return -1;
  }
  s->result = s->recv_arg;
  s->result_elems = s->cnt;
  return 0;
}
static ul_result_t scatter_call(cf_ctx_t *ctx, cf_coll_state_t *s) {
  return ul_scatter(s->send_arg, s->recv_arg, s->cnt, s->dt, s->root, ctx->comm, NULL);
}
static void scatter_verify(cf_ctx_t *ctx, cf_coll_state_t *s) {
  cf_exp_t x = {.g = &s->g, .rank = s->root, .base = (size_t)s->r * s->cnt};
  cf_verify(ctx, "recvbuf", s->result, s->cnt, s->dt, cf_exp_input, &x, 0);
  if (s->send && !s->inplace && s->send_elems <= ((size_t)1 << 18)) {
    cf_exp_t y = {.g = &s->g, .rank = s->root};
    cf_verify(ctx, "root sendbuf (must stay unchanged)", s->send, s->send_elems, s->dt,
              cf_exp_input, &y, 0);
  }
}
const cf_coll_desc_t cf_coll_scatter = {UL_COLL_SCATTER, 0, 1, 1, scatter_setup, scatter_call,
                                        scatter_verify};
