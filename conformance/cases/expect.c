/* Expected values for cf_verify and the capability check every case family shares: the
 * lowest layer of the cases, over the harness's data functions only. */
#include "cases.h"

void cf_exp_reduce(void *arg, size_t i, void *elem) {
  cf_exp_t *x = arg;
  ul_value_store(x->g->dtype, elem, cf_ref_reduce(x->g, x->base + i));
}
void cf_exp_reduce_scaled(void *arg, size_t i, void *elem) {
  cf_exp_t *x = arg;
  ul_value_store(x->g->dtype, elem, x->scale * cf_ref_reduce(x->g, x->base + i));
}
void cf_exp_input(void *arg, size_t i, void *elem) {
  cf_exp_t *x = arg;
  cf_gen_elem(x->g, x->rank, x->base + i, elem);
}
void cf_exp_blocks(void *arg, size_t i, void *elem) {
  cf_exp_t *x = arg;
  cf_gen_elem(x->g, (int)(i / x->blk), x->base + i % x->blk, elem);
}
void cf_exp_alltoall(void *arg, size_t i, void *elem) {
  cf_exp_t *x = arg;
  cf_gen_elem(x->g, (int)(i / x->blk), (size_t)x->rank * x->blk + i % x->blk, elem);
}

int cf_need(cf_ctx_t *ctx, int coll, int dtype, int op) {
  const ul_backend_info_t *b = ctx->info;
  if (coll >= 0 && !(b->collectives & (1u << coll))) {
    cf_skip(ctx, "this case also uses %s, which the backend does not declare", cf_coll_name(coll));
    return -1;
  }
  if (dtype >= 0 && !(b->dtypes & (1u << dtype))) {
    cf_skip(ctx, "this case also uses dtype %s, which the backend does not declare",
            cf_dtype_name(dtype));
    return -1;
  }
  if (op >= 0 && (!(b->ops & (1u << op)) || !(b->reduce_dtypes & (1u << dtype)))) {
    cf_skip(ctx, "this case also uses %s on %s, which the backend does not declare",
            cf_op_name(op), cf_dtype_name(dtype));
    return -1;
  }
  return 0;
}
