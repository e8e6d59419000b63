/* Pipelined algorithms over the scratch channels of generic.c (ul__ch_send/recv): ring,
 * tree, linear and pairwise patterns (pattern.c) moving chunk by chunk, so they work on
 * any backend with put/signal/wait, whatever reaches what. */
#include "generic_internal.h"

/* Elements per pipelined chunk (at least one). */
static size_t chunk_elems(algo_ctx_t *x) {
  size_t e = x->g->chunk_bytes / x->esize;
  return e ? e : 1;
}

/* One ring pass over `buf` (blocks per ul__block_range of total, or fixed blocks of
 * `blk` elements when blk != 0). reduce=1: reduce-scatter steps, else allgather steps.
 * shift relabels blocks so the rank finishing with block (r+1) ends with block r+shift. */
static ul_result_t ring_pass(algo_ctx_t *x, void *buf, size_t total, size_t blk, int reduce,
                             int shift) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  int next = ul__ring_next(me, n), prev = ul__ring_prev(me, n);
  size_t ce = chunk_elems(x);
  for (int s = 0; s < n - 1; s++) {
    int sb = reduce ? ul__ring_rs_send_block(me, s, n) : ul__ring_ag_send_block(me, s, n);
    int rb = reduce ? ul__ring_rs_send_block(prev, s, n) : ul__ring_ag_send_block(prev, s, n);
    sb = (sb + shift + n) % n;
    rb = (rb + shift + n) % n;
    size_t soff, slen, roff, rlen;
    if (blk) {
      soff = (size_t)sb * blk;
      slen = blk;
      roff = (size_t)rb * blk;
      rlen = blk;
    } else {
      ul__block_range(total, n, sb, &soff, &slen);
      ul__block_range(total, n, rb, &roff, &rlen);
    }
    size_t ns = (slen + ce - 1) / ce, nr = (rlen + ce - 1) / ce;
    size_t nk = ns > nr ? ns : nr;
    for (size_t k = 0; k < nk; k++) {
      if (k < ns) {
        size_t cnt = slen - k * ce < ce ? slen - k * ce : ce;
        UL_CHECK(ul__ch_send(g, next, at(buf, soff + k * ce, x->esize), cnt * x->esize, x->bs));
      }
      if (k < nr) {
        size_t cnt = rlen - k * ce < ce ? rlen - k * ce : ce;
        void *in;
        UL_CHECK(ul__ch_recv_begin(g, prev, &in, x->bs));
        char *dst = at(buf, roff + k * ce, x->esize);
        if (reduce) UL_CHECK(REDUCE(x, dst, dst, in, cnt));
        else UL_CHECK(COPY(x, dst, in, cnt * x->esize));
        UL_CHECK(ul__ch_recv_end(g, prev, x->bs));
      }
    }
  }
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__ring_allreduce(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  UL_CHECK(ul__copy_if_needed(x, a->recvbuf, a->sendbuf, a->count));
  if (n == 1) {
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
    return UL_OK;
  }
  UL_CHECK(ring_pass(x, a->recvbuf, a->count, 0, 1, 0));
  if (a->op == UL_AVG) {
    size_t off, len;
    ul__block_range(a->count, n, (me + 1) % n, &off, &len);
    if (len) UL_CHECK(SCALE(x, at(a->recvbuf, off, x->esize), len));
  }
  return ring_pass(x, a->recvbuf, a->count, 0, 0, 0);
}

/* Small messages: every rank sends its whole input to every peer and reduces all n in
 * rank order (identical results on every rank). Needs count*esize <= chunk. */
UL__HIDDEN ul_result_t ul__oneshot_allreduce(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me;
  size_t bytes = a->count * x->esize;
  if (n == 1) return ul__single_rank_allreduce(x);
  for (int i = 1; i < n; i++) UL_CHECK(ul__ch_send(g, (me + i) % n, a->sendbuf, bytes, x->bs));
  void *work = (char *)g->scratch + g->work_off;
  const void *p0 = a->sendbuf, *p1 = a->sendbuf;
  void *in;
  if (me != 0) {
    UL_CHECK(ul__ch_recv_begin(g, 0, &in, x->bs));
    p0 = in;
  }
  if (me != 1) {
    UL_CHECK(ul__ch_recv_begin(g, 1, &in, x->bs));
    p1 = in;
  }
  if (bytes) UL_CHECK(REDUCE(x, work, p0, p1, a->count));
  for (int r = 2; r < n; r++) {
    const void *pr = a->sendbuf;
    if (r != me) {
      UL_CHECK(ul__ch_recv_begin(g, r, &in, x->bs));
      pr = in;
    }
    if (bytes) UL_CHECK(REDUCE(x, work, work, pr, a->count));
  }
  for (int r = 0; r < n; r++)
    if (r != me) UL_CHECK(ul__ch_recv_end(g, r, x->bs));
  if (a->op == UL_AVG && bytes) UL_CHECK(SCALE(x, work, a->count));
  if (bytes) UL_CHECK(COPY(x, a->recvbuf, work, bytes));
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__ring_reduce_scatter(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  size_t rc = a->count;
  /* Work in place on a copy: the receive buffer is one block only, so reduce blocks in
   * the send buffer would modify user input. Use chunks through the work area instead:
   * ring over blocks of the (read-only) send buffer, accumulating in flight. */
  if (n == 1) {
    UL_CHECK(ul__copy_if_needed(x, a->recvbuf, a->sendbuf, rc));
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, rc));
    return UL_OK;
  }
  ul__generic_t *g = x->g;
  int next = ul__ring_next(me, n), prev = ul__ring_prev(me, n);
  size_t ce = chunk_elems(x);
  void *work = (char *)g->scratch + g->work_off;
  /* Pipelined per chunk index: for chunk k of every block, run the n-1 ring steps.
   * Step s: send partial of block sb (own input at s==0, else received partial + own).
   * Blocks are shifted so rank r ends with block r. */
  for (size_t k = 0; k * ce < rc || (rc == 0 && k == 0); k++) {
    if (rc == 0) break;
    size_t cnt = rc - k * ce < ce ? rc - k * ce : ce;
    for (int s = 0; s < n - 1; s++) {
      int sb = (ul__ring_rs_send_block(me, s, n) + n - 1) % n;
      int rb = (ul__ring_rs_send_block(prev, s, n) + n - 1) % n;
      const void *src = at(a->sendbuf, (size_t)sb * rc + k * ce, x->esize);
      if (s > 0) src = work; /* partial accumulated at the previous step */
      UL_CHECK(ul__ch_send(g, next, src, cnt * x->esize, x->bs));
      void *in;
      UL_CHECK(ul__ch_recv_begin(g, prev, &in, x->bs));
      const void *mine = at(a->sendbuf, (size_t)rb * rc + k * ce, x->esize);
      void *dst = (s == n - 2) ? at(a->recvbuf, k * ce, x->esize) : work;
      /* In place: recvbuf aliases block `me` of sendbuf, read as `mine` at the last step
       * only, element by element (reduce_local allows dst aliasing an input). */
      UL_CHECK(REDUCE(x, dst, in, mine, cnt));
      UL_CHECK(ul__ch_recv_end(g, prev, x->bs));
    }
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, at(a->recvbuf, k * ce, x->esize), cnt));
  }
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__ring_allgather(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  UL_CHECK(ul__copy_if_needed(x, at(a->recvbuf, (size_t)me * a->count, x->esize), a->sendbuf, a->count));
  if (n == 1 || a->count == 0) return UL_OK;
  /* Allgather steps start from block (r+1); shift by -1 so rank r starts from its own. */
  return ring_pass(x, a->recvbuf, 0, a->count, 0, -1);
}

UL__HIDDEN ul_result_t ul__tree_broadcast(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me;
  int children[64];
  int nc = ul__tree_children(me, a->root, n, children, 64);
  int parent = ul__tree_parent(me, a->root, n);
  const void *src = me == a->root ? a->sendbuf : a->recvbuf;
  if (me == a->root) UL_CHECK(ul__copy_if_needed(x, a->recvbuf, a->sendbuf, a->count));
  size_t ce = chunk_elems(x);
  for (size_t off = 0; off < a->count; off += ce) {
    size_t cnt = a->count - off < ce ? a->count - off : ce;
    if (parent >= 0) {
      void *in;
      UL_CHECK(ul__ch_recv_begin(g, parent, &in, x->bs));
      UL_CHECK(COPY(x, at(a->recvbuf, off, x->esize), in, cnt * x->esize));
      UL_CHECK(ul__ch_recv_end(g, parent, x->bs));
    }
    for (int i = 0; i < nc; i++)
      UL_CHECK(ul__ch_send(g, children[i], at(src, off, x->esize), cnt * x->esize, x->bs));
  }
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__tree_reduce(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me;
  int children[64];
  int nc = ul__tree_children(me, a->root, n, children, 64);
  int parent = ul__tree_parent(me, a->root, n);
  size_t ce = chunk_elems(x);
  void *work = (char *)g->scratch + g->work_off;
  for (size_t off = 0; off < a->count; off += ce) {
    size_t cnt = a->count - off < ce ? a->count - off : ce;
    const void *mine = at(a->sendbuf, off, x->esize);
    void *acc = me == a->root ? at(a->recvbuf, off, x->esize) : work;
    if (nc == 0) {
      if (me == a->root) UL_CHECK(ul__copy_if_needed(x, acc, mine, cnt));
      else acc = (void *)mine;
    }
    for (int i = 0; i < nc; i++) {
      void *in;
      UL_CHECK(ul__ch_recv_begin(g, children[i], &in, x->bs));
      UL_CHECK(REDUCE(x, acc, i == 0 ? mine : acc, in, cnt));
      UL_CHECK(ul__ch_recv_end(g, children[i], x->bs));
    }
    if (parent >= 0) UL_CHECK(ul__ch_send(g, parent, acc, cnt * x->esize, x->bs));
    else if (a->op == UL_AVG) UL_CHECK(SCALE(x, acc, cnt));
  }
  return UL_OK;
}

/* Chunked transfer of one block between two ranks over the channel. */
static ul_result_t send_block(algo_ctx_t *x, int peer, const void *src, size_t cnt) {
  size_t ce = chunk_elems(x);
  for (size_t off = 0; off < cnt; off += ce) {
    size_t c = cnt - off < ce ? cnt - off : ce;
    UL_CHECK(ul__ch_send(x->g, peer, at(src, off, x->esize), c * x->esize, x->bs));
  }
  return UL_OK;
}

static ul_result_t recv_block(algo_ctx_t *x, int peer, void *dst, size_t cnt) {
  size_t ce = chunk_elems(x);
  for (size_t off = 0; off < cnt; off += ce) {
    size_t c = cnt - off < ce ? cnt - off : ce;
    void *in;
    UL_CHECK(ul__ch_recv_begin(x->g, peer, &in, x->bs));
    UL_CHECK(COPY(x, at(dst, off, x->esize), in, c * x->esize));
    UL_CHECK(ul__ch_recv_end(x->g, peer, x->bs));
  }
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__linear_gather(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  if (me != a->root) return send_block(x, a->root, a->sendbuf, a->count);
  for (int r = 0; r < n; r++) {
    void *dst = at(a->recvbuf, (size_t)r * a->count, x->esize);
    if (r == me) UL_CHECK(ul__copy_if_needed(x, dst, a->sendbuf, a->count));
    else UL_CHECK(recv_block(x, r, dst, a->count));
  }
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__linear_scatter(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  if (me != a->root) return recv_block(x, a->root, a->recvbuf, a->count);
  for (int r = 0; r < n; r++) {
    const void *src = at(a->sendbuf, (size_t)r * a->count, x->esize);
    if (r == me) UL_CHECK(ul__copy_if_needed(x, a->recvbuf, src, a->count));
    else UL_CHECK(send_block(x, r, src, a->count));
  }
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__pairwise_alltoall(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  UL_CHECK(ul__copy_if_needed(x, at(a->recvbuf, (size_t)me * a->count, x->esize),
                          at(a->sendbuf, (size_t)me * a->count, x->esize), a->count));
  size_t ce = chunk_elems(x);
  for (int s = 1; s < n; s++) {
    int dst = (me + s) % n, src = (me - s + n) % n;
    for (size_t off = 0; off < a->count; off += ce) {
      size_t c = a->count - off < ce ? a->count - off : ce;
      UL_CHECK(ul__ch_send(x->g, dst, at(a->sendbuf, (size_t)dst * a->count + off, x->esize),
                           c * x->esize, x->bs));
      void *in;
      UL_CHECK(ul__ch_recv_begin(x->g, src, &in, x->bs));
      UL_CHECK(COPY(x, at(a->recvbuf, (size_t)src * a->count + off, x->esize), in, c * x->esize));
      UL_CHECK(ul__ch_recv_end(x->g, src, x->bs));
    }
  }
  return UL_OK;
}
