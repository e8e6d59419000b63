/* The collective engine's driver: matrix expansion, and the one case function that runs
 * every collective descriptor (coll_move.c, coll_reduce.c, coll_vector.c) with the same
 * checks. Above the descriptors and the helpers they share (coll_buf.c, expect.c). */
#include <stdlib.h>

#include "coll.h"

static const cf_coll_desc_t *cf_coll_desc(int coll) {
  switch (coll) {
  case UL_COLL_ALLREDUCE: return &cf_coll_allreduce;
  case UL_COLL_REDUCE: return &cf_coll_reduce;
  case UL_COLL_REDUCE_SCATTER: return &cf_coll_reduce_scatter;
  case UL_COLL_BROADCAST: return &cf_coll_broadcast;
  case UL_COLL_ALLGATHER: return &cf_coll_allgather;
  case UL_COLL_ALLTOALL: return &cf_coll_alltoall;
  case UL_COLL_GATHER: return &cf_coll_gather;
  case UL_COLL_SCATTER: return &cf_coll_scatter;
  case UL_COLL_ALLTOALLV: return &cf_coll_alltoallv;
  case UL_COLL_ALLGATHERV: return &cf_coll_allgatherv;
  default: return NULL;
  }
}

/* 64 MiB of fp32 per rank buffer: the large count is sized so the largest buffer a rank
 * holds is 64 MiB (allreduce: count; allgather/reduce_scatter: nranks * count). */
#define CF_LARGE_ELEMS ((size_t)16 * 1024 * 1024)

void cf_expand_coll(const cf_case_t *c, int n, const cf_opts_t *o, const ul_backend_info_t *info,
                    cf_emit_fn emit, void *arg) {
  const cf_coll_desc_t *d = cf_coll_desc(c->coll);
  if (!d) return;
  size_t counts[8];
  int ncounts = cf_counts(n, o->quick, counts, 8);
  int roots[3] = {-1};
  int nroots = d->rooted ? cf_roots(n, o->quick, roots) : 1;
  int both = (info->features & UL_FEATURE_NATIVE_COLL) && (info->features & UL_FEATURE_GENERIC_COLL);
  for (int dt = 0; dt < UL_DTYPE_COUNT; dt++) {
    for (int op = d->reduction ? 0 : -1; op < (d->reduction ? UL_OP_COUNT : 0); op++) {
      /* --quick keeps every dtype and every op, but not every pair */
      if (o->quick && dt != UL_FP32 && (dt + op + 1 + c->coll) % 3 != 0) continue;
      for (int ci = 0; ci < ncounts + 1; ci++) {
        size_t count;
        if (ci < ncounts) {
          count = counts[ci];
        } else {
          /* the large count: fp32 allreduce/allgather/reduce_scatter on 2 and 4 ranks */
          if (o->quick || dt != UL_FP32 || (n != 2 && n != 4)) continue;
          if (d->reduction && op != UL_SUM) continue;
          if (c->coll == UL_COLL_ALLREDUCE) count = CF_LARGE_ELEMS;
          else if (c->coll == UL_COLL_ALLGATHER || c->coll == UL_COLL_REDUCE_SCATTER)
            count = CF_LARGE_ELEMS / (size_t)n;
          else continue;
        }
        for (int ri = 0; ri < nroots; ri++) {
          for (int ip = 0; ip < (d->inplace_ok ? 2 : 1); ip++) {
            if (o->quick && d->inplace_ok && (ip + ci + dt) % 2) continue;
            for (int fg = 0; fg < (both && ci < ncounts ? 2 : 1); fg++) {
              cf_inst_t in = cf_proto(c);
              in.dtype = dt;
              in.op = op;
              in.count = count;
              in.root = d->rooted ? roots[ri] : -1;
              in.inplace = ip;
              in.force_generic = fg;
              in.col = cf_dtype_name(dt);
              size_t k = (size_t)snprintf(in.name, sizeof in.name, "%s/%s", cf_coll_name(c->coll),
                                          cf_dtype_name(dt));
              if (op >= 0) k += (size_t)snprintf(in.name + k, sizeof in.name - k, "/%s", cf_op_name(op));
              if (d->rooted) k += (size_t)snprintf(in.name + k, sizeof in.name - k, "/root=%d", in.root);
              k += (size_t)snprintf(in.name + k, sizeof in.name - k, "/count=%zu/%s", count,
                                    ip ? "inplace" : "outofplace");
              if (fg) snprintf(in.name + k, sizeof in.name - k, "/algo=ring");
              emit(arg, &in);
            }
          }
        }
      }
    }
  }
}

static void cf_coll_state_init(cf_ctx_t *ctx, cf_coll_state_t *s) {
  const cf_inst_t *in = ctx->inst;
  memset(s, 0, sizeof *s);
  s->dt = (ul_dtype_t)in->dtype;
  s->op = (ul_op_t)(in->op < 0 ? 0 : in->op);
  s->sz = ul_dtype_size(s->dt);
  s->cnt = in->count;
  s->n = ctx->nranks;
  s->r = ctx->rank;
  s->root = in->root;
  s->inplace = in->inplace;
  cf_gen_init(&s->g, s->dt, in->op, s->n, ctx->seed);
}

/* Checks every collective shares: guards intact, out-of-place input unchanged. */
static void cf_coll_common_checks(cf_ctx_t *ctx, cf_coll_state_t *s) {
  if (s->send) cf_check_guard(ctx, "sendbuf", s->send, s->send_elems * s->sz);
  if (s->recv) cf_check_guard(ctx, "recvbuf", s->recv, s->recv_elems * s->sz);
  if (s->send_is_input && !s->inplace && s->send_elems <= ((size_t)1 << 18)) {
    cf_exp_t x = {.g = &s->g, .rank = s->r};
    cf_verify(ctx, "sendbuf (must stay unchanged)", s->send, s->send_elems, s->dt, cf_exp_input,
              &x, 0);
  }
}

void cf_case_coll(cf_ctx_t *ctx) {
  const cf_coll_desc_t *d = cf_coll_desc(ctx->inst->coll);
  cf_coll_state_t s;
  cf_coll_state_init(ctx, &s);
  if (!ctx->inst->force_generic) {
    if (d->setup(ctx, &s)) return;
    if (cf_check_rc(ctx, d->call(ctx, &s), cf_coll_name(d->coll))) return;
    d->verify(ctx, &s);
    cf_coll_common_checks(ctx, &s);
    return;
  }
  /* Native first, then the generic layer forced to ring: both must match the reference
   * and each other bit for bit (this is where an avg tolerance could hide a disagreement). */
  if (d->setup(ctx, &s)) return;
  if (cf_check_rc(ctx, d->call(ctx, &s), cf_coll_name(d->coll))) return;
  /* the native result, copied back before the second setup reuses the shadow memory */
  void *keep = NULL;
  if (s.result) {
    keep = malloc(s.result_elems * s.sz + 1);
    if (keep && cf_load(ctx, keep, s.result, s.result_elems * s.sz)) {
      free(keep);
      return;
    }
  }
  cf_coll_state_t s2;
  cf_coll_state_init(ctx, &s2);
  if (d->setup(ctx, &s2)) {
    free(keep);
    return;
  }
  char env[64];
  snprintf(env, sizeof env, "%s:ring", cf_coll_name(d->coll));
  cf_algo_env_set(ctx, env);
  ul_result_t rc = d->call(ctx, &s2);
  cf_algo_env_clear(ctx);
  if (cf_check_rc(ctx, rc, "generic (UNILINK_ALGO=ring) call")) {
    free(keep);
    return;
  }
  d->verify(ctx, &s2);
  cf_coll_common_checks(ctx, &s2);
  const unsigned char *b = keep && s2.result ? cf_read(ctx, s2.result, s2.result_elems * s.sz) : NULL;
  if (b) {
    const unsigned char *a = keep;
    for (size_t i = 0; i < s2.result_elems; i++)
      if (memcmp(a + i * s.sz, b + i * s.sz, s.sz)) {
        cf_fail(ctx, "rank %d: native and generic (ring) results differ at index %zu: native "
                "%.17g, generic %.17g", ctx->rank, i, ul_value_load(s.dt, a + i * s.sz),
                ul_value_load(s.dt, b + i * s.sz));
        break;
      }
  }
  free(keep);
}

void cf_expand_single(const cf_case_t *c, int n, const cf_opts_t *o,
                      const ul_backend_info_t *info, cf_emit_fn emit, void *arg) {
  cf_inst_t in = cf_proto(c);
  snprintf(in.name, sizeof in.name, "%s", c->pattern);
  emit(arg, &in);
}

void cf_case_barrier(cf_ctx_t *ctx) {
  for (int i = 0; i < 3; i++)
    if (cf_check_rc(ctx, ul_barrier(ctx->comm, NULL), "ul_barrier")) return;
}
