/* Buffers of the collective engine (coll.h): what every collective descriptor sets up
 * its send and receive buffers with. Under the descriptors and the driver. */
#include "coll.h"

void *cf_coll_buf(cf_ctx_t *ctx, cf_coll_state_t *s, size_t elems, int poison) {
  size_t bytes = elems * s->sz;
  void *p = cf_alloc(ctx, bytes);
  if (p && poison && cf_poison(ctx, p, bytes)) return NULL;
  return p;
}

int cf_coll_send(cf_ctx_t *ctx, cf_coll_state_t *s, size_t elems, int fill_rank, int is_input) {
  s->send_elems = elems;
  s->send = cf_coll_buf(ctx, s, elems, 0);
  if (!s->send) return -1;
  if (cf_fill(ctx, &s->g, fill_rank, 0, elems, s->send)) return -1;
  s->send_is_input = is_input;
  s->send_arg = s->send;
  return 0;
}

int cf_coll_recv(cf_ctx_t *ctx, cf_coll_state_t *s, size_t elems) {
  s->recv_elems = elems;
  s->recv = cf_coll_buf(ctx, s, elems, 1);
  if (!s->recv) return -1;
  s->recv_arg = s->recv;
  return 0;
}
