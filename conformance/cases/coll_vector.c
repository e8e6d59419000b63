/* The vector collectives: alltoallv and allgatherv with irregular seeded per-peer counts
 * (zeros included, never above the instance count) and displacements that are out of
 * rank order and leave poisoned gaps, so a block landing at the wrong displacement, a
 * count taken from the wrong peer or a write into a gap shows. Every rank derives every
 * rank's layout from the seed, so each can compute what it must receive. */
#include "coll.h"

/* Elements rank src sends rank dst (alltoallv). */
static size_t a2av_blk(const cf_coll_state_t *s, int src, int dst) {
  if (s->cnt == 0 || (src + 2 * dst) % 4 == 1) return 0;
  return 1 + (size_t)(cf_hash64(s->g.seed ^ ((uint64_t)src * 131 + (uint64_t)dst * 7919 + 1)) %
                      s->cnt);
}

/* Elements rank j contributes (allgatherv). */
static size_t agv_blk(const cf_coll_state_t *s, int j) {
  if (s->cnt == 0 || j % 3 == 1) return 0;
  return 1 + (size_t)(cf_hash64(s->g.seed ^ ((uint64_t)j * 977 + 5)) % s->cnt);
}

/* Send side: blocks in rank order, dst % 3 gap elements before each. Returns the
 * buffer length. */
static size_t send_layout(const cf_coll_state_t *s, int src, size_t *counts, size_t *displs) {
  size_t off = 0;
  for (int d = 0; d < s->n; d++) {
    off += (size_t)(d % 3);
    counts[d] = a2av_blk(s, src, d);
    displs[d] = off;
    off += counts[d];
  }
  return off + 1;
}

/* Receive side: blocks in reverse rank order, 1 or 2 gap elements before each. */
static size_t recv_layout(const cf_coll_state_t *s, const size_t *counts, size_t *displs) {
  size_t off = 0;
  for (int j = s->n - 1; j >= 0; j--) {
    off += 1 + (size_t)(j % 2);
    displs[j] = off;
    off += counts[j];
  }
  return off + 2;
}

/* Expected receive buffer: block j holds rank j's input from vsrc[j]; gaps stay poison. */
static void exp_vrecv(void *arg, size_t i, void *elem) {
  const cf_coll_state_t *s = arg;
  for (int j = 0; j < s->n; j++)
    if (i >= s->vrd[j] && i < s->vrd[j] + s->vrc[j]) {
      cf_gen_elem(&s->g, j, s->vsrc[j] + (i - s->vrd[j]), elem);
      return;
    }
  memset(elem, CF_POISON, s->sz);
}

/* ---------------------------------------------------------------- alltoallv */
static int alltoallv_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  size_t sd[CF_MAX_RANKS], sc[CF_MAX_RANKS];
  size_t slen = send_layout(s, s->r, s->vsc, s->vsd);
  for (int j = 0; j < s->n; j++) {
    s->vrc[j] = a2av_blk(s, j, s->r);
    send_layout(s, j, sc, sd);
    s->vsrc[j] = sd[s->r];
  }
  size_t rlen = recv_layout(s, s->vrc, s->vrd);
  if (cf_coll_send(ctx, s, slen, s->r, 1) || cf_coll_recv(ctx, s, rlen)) return -1;
  s->result = s->recv;
  s->result_elems = rlen;
  return 0;
}
static ul_result_t alltoallv_call(cf_ctx_t *ctx, cf_coll_state_t *s) {
  return ul_alltoallv(s->send_arg, s->vsc, s->vsd, s->recv_arg, s->vrc, s->vrd, s->dt, ctx->comm,
                      NULL);
}
static void alltoallv_verify(cf_ctx_t *ctx, cf_coll_state_t *s) {
  cf_verify(ctx, "recvbuf", s->result, s->result_elems, s->dt, exp_vrecv, s, 0);
}
const cf_coll_desc_t cf_coll_alltoallv = {UL_COLL_ALLTOALLV, 0, 0, 0, alltoallv_setup,
                                          alltoallv_call, alltoallv_verify};

/* ---------------------------------------------------------------- allgatherv */
static int allgatherv_setup(cf_ctx_t *ctx, cf_coll_state_t *s) {
  for (int j = 0; j < s->n; j++) {
    s->vrc[j] = agv_blk(s, j);
    s->vsrc[j] = 0;
  }
  size_t rlen = recv_layout(s, s->vrc, s->vrd);
  if (cf_coll_recv(ctx, s, rlen)) return -1;
  size_t mine = s->vrc[s->r];
  if (s->inplace) {
    char *slot = (char *)s->recv + s->vrd[s->r] * s->sz;
    if (cf_fill(ctx, &s->g, s->r, 0, mine, slot)) return -1;
    s->send_arg = slot;
  } else {
    if (cf_coll_send(ctx, s, mine, s->r, 1)) return -1;
  }
  s->result = s->recv;
  s->result_elems = rlen;
  return 0;
}
static ul_result_t allgatherv_call(cf_ctx_t *ctx, cf_coll_state_t *s) {
  return ul_allgatherv(s->send_arg, s->vrc[s->r], s->recv_arg, s->vrc, s->vrd, s->dt, ctx->comm,
                       NULL);
}
static void allgatherv_verify(cf_ctx_t *ctx, cf_coll_state_t *s) {
  cf_verify(ctx, "recvbuf", s->result, s->result_elems, s->dt, exp_vrecv, s, 0);
}
const cf_coll_desc_t cf_coll_allgatherv = {UL_COLL_ALLGATHERV, 0, 0, 1, allgatherv_setup,
                                           allgatherv_call, allgatherv_verify};
