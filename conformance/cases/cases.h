/* Declarations shared by the case files and the registration table. */
#ifndef CF_CASES_H
#define CF_CASES_H

#include <stdio.h>
#include <string.h>

#include "../harness/cf.h"

/* Expected-value providers for cf_verify. */
typedef struct cf_exp {
  const cf_gen_t *g;
  size_t base;  /* index offset */
  int rank;     /* whose input (exp_input) or this rank (exp_alltoall) */
  size_t blk;   /* block length (exp_blocks, exp_alltoall) */
  double scale; /* exp_reduce_scaled */
} cf_exp_t;

/* op over ranks of element base+i */
void cf_exp_reduce(void *arg, size_t i, void *elem);
/* reference reduction multiplied by scale (chained in-place sums) */
void cf_exp_reduce_scaled(void *arg, size_t i, void *elem);
/* rank `rank`'s input element base+i */
void cf_exp_input(void *arg, size_t i, void *elem);
/* concatenation: element i is input (rank i/blk, index base + i%blk) */
void cf_exp_blocks(void *arg, size_t i, void *elem);
/* alltoall/all-pairs receive: element i is input (rank i/blk, index rank*blk + i%blk) */
void cf_exp_alltoall(void *arg, size_t i, void *elem);

/* SKIP (returns -1) unless the backend declares what a case uses besides its own
 * subject (e.g. split checks its result with an allgather). */
int cf_need(cf_ctx_t *ctx, int coll, int dtype, int op);

/* Instance prototype with the case's fixed fields filled in. */
static inline cf_inst_t cf_proto(const cf_case_t *c) {
  cf_inst_t in;
  memset(&in, 0, sizeof in);
  in.c = c;
  in.coll = c->coll;
  in.dtype = -1;
  in.op = -1;
  in.root = -1;
  in.row = c->row;
  in.col = "-";
  in.variant = c->variant;
  return in;
}

/* Case functions and expanders. */
void cf_case_coll(cf_ctx_t *ctx);
void cf_expand_coll(const cf_case_t *c, int n, const cf_opts_t *o, const ul_backend_info_t *info,
                    cf_emit_fn emit, void *arg);
void cf_case_barrier(cf_ctx_t *ctx);
void cf_expand_single(const cf_case_t *c, int n, const cf_opts_t *o,
                      const ul_backend_info_t *info, cf_emit_fn emit, void *arg);

void cf_case_p2p(cf_ctx_t *ctx);
void cf_expand_p2p(const cf_case_t *c, int n, const cf_opts_t *o, const ul_backend_info_t *info,
                   cf_emit_fn emit, void *arg);

void cf_case_onesided(cf_ctx_t *ctx);
void cf_expand_onesided(const cf_case_t *c, int n, const cf_opts_t *o,
                        const ul_backend_info_t *info, cf_emit_fn emit, void *arg);

void cf_case_split(cf_ctx_t *ctx);
void cf_case_streams(cf_ctx_t *ctx);

void cf_case_errors(cf_ctx_t *ctx);
void cf_expand_errors(const cf_case_t *c, int n, const cf_opts_t *o,
                      const ul_backend_info_t *info, cf_emit_fn emit, void *arg);

/* Variants. */
enum { CF_P2P_RING, CF_P2P_ALLPAIRS, CF_P2P_SELF, CF_P2P_ZERO, CF_P2P_PINGPONG };
enum { CF_OS_PUT, CF_OS_GET, CF_OS_SIGNAL };
enum { CF_SPLIT_EVENODD, CF_SPLIT_REVERSED, CF_SPLIT_NOCOLOR };
enum { CF_STREAMS_TWO, CF_STREAMS_ORDERED };
enum { CF_ERR_COLL, CF_ERR_P2P, CF_ERR_ONESIDED, CF_ERR_SPLIT, CF_ERR_VCOLL };
/* errors_v.c: the vector collectives' invalid arguments (variant: index from 0). */
#define CF_NVERR 12
extern const char *const cf_verr_names[CF_NVERR];
extern const int cf_verr_min_ranks[CF_NVERR];
void cf_errors_vcoll(cf_ctx_t *ctx, int e);

#endif
