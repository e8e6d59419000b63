/* The vector collectives of the generic layer (alltoallv, allgatherv): per-peer counts
 * and displacements. Every rank must run the same algorithm, so selection never looks at
 * this rank's counts (they differ between ranks); see algorithms.c for the table.
 *   direct:   threads of one process read each peer's send buffer in place (pull);
 *             alltoallv finds a peer's displacement for us through its mailbox.
 *   pairwise: step s = 1..n-1 sends to rank me+s and receives from rank me-s over the
 *             flow-controlled channels, chunk by chunk; any memory the backend copies. */
#include <string.h>

#include "generic_internal.h"

int ul__vcoll_zero(const ul__coll_args_t *a, int nranks) {
  if (a->coll != UL_COLL_ALLGATHERV) return 0;
  for (int j = 0; j < nranks; j++)
    if (a->rcounts[j]) return 0;
  return 1;
}

/* Bytes from the buffer start to the end of its last nonzero block. */
static size_t extent(const size_t *counts, const size_t *displs, int n, size_t es) {
  size_t e = 0;
  for (int j = 0; j < n; j++)
    if (counts[j] && (displs[j] + counts[j]) * es > e) e = (displs[j] + counts[j]) * es;
  return e;
}

/* ---------------------------------------------------------------- direct */

ul_result_t ul__direct_alltoallv(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  size_t es = x->esize;
  /* Published with the buffers (ul__publish's barrier orders it): a peer pulling its
   * block from our send buffer needs our sdispls[peer]. */
  ((ul__mailbox_t *)g->scratch)->vec = a->sdispls;
  UL_CHECK(ul__publish(g, a->sendbuf, extent(a->scounts, a->sdispls, g->n, es), a->recvbuf,
                       extent(a->rcounts, a->rdispls, g->n, es), x->bs));
  /* Start at a different peer on every rank: reads spread over all ranks' buffers. */
  for (int i = 0; i < g->n; i++) {
    int r = (g->me + i) % g->n;
    size_t cnt = a->rcounts[r];
    if (cnt == 0) continue;
    const void *src;
    if (r == g->me) src = at(a->sendbuf, a->sdispls[r], es);
    else {
      const ul__mailbox_t *pm = ul__mailbox(g, r);
      src = at(pm->send, pm->vec[g->me], es);
    }
    UL_CHECK(COPY(x, at(a->recvbuf, a->rdispls[r], es), src, cnt * es));
  }
  /* Peers read our send buffer and mailbox until they pass this barrier. */
  return ul__generic_barrier(x->c, x->bs, NULL);
}

ul_result_t ul__direct_allgatherv(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  size_t es = x->esize;
  UL_CHECK(ul__publish(g, a->sendbuf, a->count * es, a->recvbuf,
                       extent(a->rcounts, a->rdispls, g->n, es), x->bs));
  for (int i = 0; i < g->n; i++) {
    int r = (g->me + i) % g->n;
    size_t cnt = a->rcounts[r];
    if (cnt == 0) continue;
    const void *src = r == g->me ? a->sendbuf : ul__mailbox(g, r)->send;
    void *dst = at(a->recvbuf, a->rdispls[r], es);
    if (dst != src) UL_CHECK(COPY(x, dst, src, cnt * es)); /* in place: already there */
  }
  return ul__generic_barrier(x->c, x->bs, NULL);
}

/* -------------------------------------------------------------- pairwise */

/* One step: scnt elements of sp to rank dst while rcnt elements from rank src land at
 * rp, alternating one chunk each way. A rank blocked sending waits for a receiver that
 * is at an earlier chunk, one blocked receiving for a sender that has not yet sent that
 * chunk, so the waits cannot form a cycle (no deadlock with unequal counts). */
static ul_result_t exchange(algo_ctx_t *x, int dst, const void *sp, size_t scnt, int src,
                            void *rp, size_t rcnt) {
  size_t ce = x->g->chunk_bytes / x->esize;
  if (ce == 0) ce = 1;
  for (size_t so = 0, ro = 0; so < scnt || ro < rcnt;) {
    if (so < scnt) {
      size_t c = scnt - so < ce ? scnt - so : ce;
      UL_CHECK(ul__ch_send(x->g, dst, at(sp, so, x->esize), c * x->esize, x->bs));
      so += c;
    }
    if (ro < rcnt) {
      size_t c = rcnt - ro < ce ? rcnt - ro : ce;
      void *in;
      UL_CHECK(ul__ch_recv_begin(x->g, src, &in, x->bs));
      UL_CHECK(COPY(x, at(rp, ro, x->esize), in, c * x->esize));
      UL_CHECK(ul__ch_recv_end(x->g, src, x->bs));
      ro += c;
    }
  }
  return UL_OK;
}

ul_result_t ul__pairwise_alltoallv(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  size_t es = x->esize;
  if (a->scounts[me])
    UL_CHECK(COPY(x, at(a->recvbuf, a->rdispls[me], es), at(a->sendbuf, a->sdispls[me], es),
                  a->scounts[me] * es));
  for (int s = 1; s < n; s++) {
    int dst = (me + s) % n, src = (me - s + n) % n;
    UL_CHECK(exchange(x, dst, at(a->sendbuf, a->sdispls[dst], es), a->scounts[dst], src,
                      at(a->recvbuf, a->rdispls[src], es), a->rcounts[src]));
  }
  return UL_OK;
}

ul_result_t ul__pairwise_allgatherv(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  size_t es = x->esize;
  void *mine = at(a->recvbuf, a->rdispls[me], es);
  if (a->count && mine != a->sendbuf) UL_CHECK(COPY(x, mine, a->sendbuf, a->count * es));
  for (int s = 1; s < n; s++) {
    int dst = (me + s) % n, src = (me - s + n) % n;
    UL_CHECK(exchange(x, dst, a->sendbuf, a->count, src, at(a->recvbuf, a->rdispls[src], es),
                      a->rcounts[src]));
  }
  return UL_OK;
}
