/* ul_comm_split: even/odd colors, reversed keys, and UL_SPLIT_NOCOLOR. The new
 * communicator is checked by its rank/size and by an allgather of the old ranks, which
 * shows the order, and an allreduce, which shows membership. */
#include <stdlib.h>

#include "cases.h"

void cf_case_split(cf_ctx_t *ctx) {
  int n = ctx->nranks, r = ctx->rank;
  if (cf_need(ctx, UL_COLL_ALLGATHER, UL_INT32, -1) ||
      cf_need(ctx, UL_COLL_ALLREDUCE, UL_INT32, UL_SUM))
    return;
  int color, key;
  int members[CF_MAX_RANKS], nm = 0;
  switch (ctx->inst->variant) {
  case CF_SPLIT_EVENODD:
    color = r % 2;
    key = r;
    for (int k = 0; k < n; k++)
      if (k % 2 == color) members[nm++] = k;
    break;
  case CF_SPLIT_REVERSED:
    color = 0;
    key = n - 1 - r;
    for (int k = n - 1; k >= 0; k--) members[nm++] = k;
    break;
  default: /* every third rank (from rank 1) opts out */
    color = (r % 3 == 1) ? UL_SPLIT_NOCOLOR : 7;
    key = 0; /* equal keys: old rank order decides */
    for (int k = 0; k < n; k++)
      if (k % 3 != 1) members[nm++] = k;
    break;
  }
  ul_comm_t nc = (ul_comm_t)(uintptr_t)0x1; /* must be overwritten */
  if (cf_check_rc(ctx, ul_comm_split(ctx->comm, color, key, &nc, NULL), "ul_comm_split")) return;
  if (color == UL_SPLIT_NOCOLOR) {
    if (nc != NULL) cf_fail(ctx, "rank %d: UL_SPLIT_NOCOLOR must give a NULL communicator", r);
    return;
  }
  if (!nc || nc == (ul_comm_t)(uintptr_t)0x1) {
    cf_fail(ctx, "rank %d: ul_comm_split returned UL_OK without a communicator", r);
    return;
  }
  int want = -1;
  for (int k = 0; k < nm; k++)
    if (members[k] == r) want = k;
  int nr = -1, ns = -1;
  ul_comm_rank(nc, &nr);
  ul_comm_size(nc, &ns);
  if (nr != want || ns != nm) {
    cf_fail(ctx, "rank %d (color %d, key %d): new communicator says rank %d of %d, expected %d of %d",
            r, color, key, nr, ns, want, nm);
  } else {
    /* buffers from cf_alloc (device memory on device-memory backends), staged through
     * their host shadows; staging copies go through ctx->comm, the buffers' owner */
    int32_t *all = cf_alloc(ctx, sizeof(int32_t) * (size_t)nm), *v = cf_alloc(ctx, 8);
    int32_t mine[2] = {r, 0}, got[CF_MAX_RANKS];
    if (all && v && !cf_poison(ctx, all, sizeof(int32_t) * (size_t)nm) &&
        !cf_write(ctx, v, mine, sizeof mine)) {
      ul_result_t rc = ul_allgather(&v[0], all, 1, UL_INT32, nc, NULL);
      if (rc != UL_OK) {
        cf_fail(ctx, "rank %d: ul_allgather on the split communicator returned %s: %s", r,
                ul_result_name(rc), ul_comm_last_error(nc));
      } else if (!cf_load(ctx, got, all, sizeof(int32_t) * (size_t)nm)) {
        for (int k = 0; k < nm; k++)
          if (got[k] != members[k]) {
            cf_fail(ctx, "rank %d: split communicator rank %d is old rank %d, expected old rank %d",
                    r, k, (int)got[k], members[k]);
            break;
          }
      }
      int32_t exp = 0;
      for (int k = 0; k < nm; k++) exp += members[k] + 1;
      mine[0] = r + 1;
      mine[1] = 0;
      if (!cf_write(ctx, v, mine, sizeof mine)) {
        rc = ul_allreduce(&v[0], &v[1], 1, UL_INT32, UL_SUM, nc, NULL);
        if (rc != UL_OK)
          cf_fail(ctx, "rank %d: ul_allreduce on the split communicator returned %s: %s", r,
                  ul_result_name(rc), ul_comm_last_error(nc));
        else if (!cf_load(ctx, &mine[1], &v[1], sizeof mine[1]) && mine[1] != exp)
          cf_fail(ctx, "rank %d: allreduce over the split communicator gave %d, expected %d", r,
                  (int)mine[1], (int)exp);
      }
    }
  }
  if (ul_comm_finalize(nc) != UL_OK) {
    ul_comm_abort(nc);
    return;
  }
  ul_comm_destroy(nc);
}
