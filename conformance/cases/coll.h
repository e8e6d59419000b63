/* The collective engine: each collective is a setup/call/verify triple run by one driver,
 * so every collective gets the same poisoning, guard, input-unchanged and native-vs-
 * generic checks. */
#ifndef CF_COLL_H
#define CF_COLL_H

#include "cases.h"

typedef struct cf_coll_state {
  cf_gen_t g;
  ul_dtype_t dt;
  ul_op_t op;
  size_t sz, cnt;
  int n, r, root, inplace;
  void *send, *recv;           /* allocations (NULL when not allocated on this rank) */
  size_t send_elems, recv_elems;
  const void *send_arg;        /* what the call receives */
  void *recv_arg;
  void *result;                /* region this rank verifies; NULL: nothing to verify */
  size_t result_elems;
  int send_is_input;           /* send holds this rank's input to check unchanged */
  /* v-collectives (coll_vector.c): this rank's counts/displacements in elements, and
   * vsrc[j] = where in rank j's send buffer the block for this rank starts */
  size_t vsc[CF_MAX_RANKS], vsd[CF_MAX_RANKS], vrc[CF_MAX_RANKS], vrd[CF_MAX_RANKS];
  size_t vsrc[CF_MAX_RANKS];
} cf_coll_state_t;

typedef struct cf_coll_desc {
  int coll;
  int reduction;
  int rooted;
  int inplace_ok;
  int (*setup)(cf_ctx_t *ctx, cf_coll_state_t *s);
  ul_result_t (*call)(cf_ctx_t *ctx, cf_coll_state_t *s);
  void (*verify)(cf_ctx_t *ctx, cf_coll_state_t *s);
} cf_coll_desc_t;

extern const cf_coll_desc_t cf_coll_allreduce, cf_coll_reduce, cf_coll_reduce_scatter;
extern const cf_coll_desc_t cf_coll_broadcast, cf_coll_allgather, cf_coll_alltoall,
    cf_coll_gather, cf_coll_scatter;
extern const cf_coll_desc_t cf_coll_alltoallv, cf_coll_allgatherv;

/* Allocate `elems` elements (guarded); poison when `poison`. */
void *cf_coll_buf(cf_ctx_t *ctx, cf_coll_state_t *s, size_t elems, int poison);
/* The send buffer: `elems` elements holding rank `fill_rank`'s input (from element 0);
 * send_arg points at it; `is_input`: checked unchanged after the call. -1 when the
 * allocation failed. */
int cf_coll_send(cf_ctx_t *ctx, cf_coll_state_t *s, size_t elems, int fill_rank, int is_input);
/* The receive buffer: `elems` poisoned elements; recv_arg points at it. -1 on failure. */
int cf_coll_recv(cf_ctx_t *ctx, cf_coll_state_t *s, size_t elems);

#endif
