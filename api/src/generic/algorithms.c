/* Generic collective algorithms over the channels and direct access of generic.c.
 * Each algorithm is written once, as rank arithmetic (pattern.c) plus calls to the
 * backend's put/signal/wait/reduce/copy; the selection table at the end picks one. */
#include <stdio.h>
#include <string.h>

#include "generic_internal.h"

typedef struct algo_ctx {
  ul__generic_t *g;
  ul_comm_t c;
  const ul_backend_ops_t *o;
  const ul__coll_args_t *a;
  ul_backend_stream_t *bs;
  size_t esize;
  ul_op_t rop; /* op used for the reduction itself (avg -> sum) */
} algo_ctx_t;

#define BC(x) ((x)->c->bcomm)
#define REDUCE(x, dst, p, q, cnt) \
  (x)->o->reduce_local(BC(x), (dst), (p), (q), (cnt), (x)->a->dtype, (x)->rop, (x)->bs)
#define COPY(x, dst, src, nbytes) (x)->o->copy_local(BC(x), (dst), (src), (nbytes), (x)->bs)
#define SCALE(x, buf, cnt) \
  (x)->o->scale_avg(BC(x), (buf), (cnt), (x)->a->dtype, (x)->g->n, (x)->bs)

static char *at(const void *base, size_t elems, size_t esize) {
  return (char *)base + elems * esize;
}

/* Elements per pipelined chunk (at least one). */
static size_t chunk_elems(algo_ctx_t *x) {
  size_t e = x->g->chunk_bytes / x->esize;
  return e ? e : 1;
}

/* Elements per cache-sized piece in direct algorithms. */
static size_t piece_elems(algo_ctx_t *x) {
  size_t e = (size_t)(64 * 1024) / x->esize;
  return e ? e : 1;
}

static ul_result_t copy_if_needed(algo_ctx_t *x, void *dst, const void *src, size_t cnt) {
  if (dst == src || cnt == 0) return UL_OK;
  return COPY(x, dst, src, cnt * x->esize);
}

/* ============================ direct (load/store peers) ============================ */

/* dst = op over every rank's send buffer at element e0. The rank whose send buffer may
 * alias dst (in place) is read first, before dst is written; then the others in rank
 * order. Each element is computed by one rank only, so all ranks see one result. */
static ul_result_t reduce_all_sends(algo_ctx_t *x, void *dst, size_t e0, size_t cnt, int first) {
  ul__generic_t *g = x->g;
  int n = g->n;
  if (n == 1) return copy_if_needed(x, dst, at(ul__mailbox(g, 0)->send, e0, x->esize), cnt);
  int second = first == 0 ? 1 : 0;
  UL_CHECK(REDUCE(x, dst, at(ul__mailbox(g, first)->send, e0, x->esize),
                  at(ul__mailbox(g, second)->send, e0, x->esize), cnt));
  for (int r = 0; r < n; r++)
    if (r != first && r != second)
      UL_CHECK(REDUCE(x, dst, dst, at(ul__mailbox(g, r)->send, e0, x->esize), cnt));
  return UL_OK;
}

static ul_result_t direct_allreduce_like(algo_ctx_t *x, int scatter) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  const ul__coll_args_t *a = x->a;
  size_t total = scatter ? a->count * (size_t)n : a->count;
  UL_CHECK(ul__publish(g, a->sendbuf, a->recvbuf, x->bs));
  size_t off, len;
  if (scatter) {
    off = (size_t)me * a->count;
    len = a->count;
  } else {
    ul__block_range(total, n, me, &off, &len);
  }
  size_t pe = piece_elems(x);
  int first = me;
  for (size_t p = 0; p < len; p += pe) {
    size_t cnt = len - p < pe ? len - p : pe;
    size_t e0 = off + p;
    /* Destination: own receive buffer (for reduce_scatter, at block offset 0). */
    void *dst = scatter ? at(a->recvbuf, p, x->esize) : at(a->recvbuf, e0, x->esize);
    UL_CHECK(reduce_all_sends(x, dst, e0, cnt, first));
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, dst, cnt));
    if (!scatter)
      for (int r = 0; r < n; r++)
        if (r != me) UL_CHECK(COPY(x, at(ul__mailbox(g, r)->recv, e0, x->esize), dst, cnt * x->esize));
  }
  return ul__generic_barrier(x->c, x->bs, NULL);
}

static ul_result_t direct_reduce(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(ul__publish(g, a->sendbuf, a->recvbuf, x->bs));
  size_t off, len;
  ul__block_range(a->count, n, me, &off, &len);
  void *rootrecv = ul__mailbox(g, a->root)->recv;
  size_t pe = piece_elems(x);
  int first = a->root;
  for (size_t p = 0; p < len; p += pe) {
    size_t cnt = len - p < pe ? len - p : pe, e0 = off + p;
    void *dst = at(rootrecv, e0, x->esize);
    UL_CHECK(reduce_all_sends(x, dst, e0, cnt, first));
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, dst, cnt));
  }
  return ul__generic_barrier(x->c, x->bs, NULL);
}

static ul_result_t direct_allgather(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(ul__publish(g, a->sendbuf, a->recvbuf, x->bs));
  size_t bytes = a->count * x->esize;
  /* Pull every peer's block: reads are spread over all ranks. */
  for (int i = 0; i < g->n && bytes; i++) {
    int r = (g->me + i) % g->n;
    void *dst = at(a->recvbuf, (size_t)r * a->count, x->esize);
    const void *src = ul__mailbox(g, r)->send;
    if (dst != src) UL_CHECK(COPY(x, dst, src, bytes));
  }
  return ul__generic_barrier(x->c, x->bs, NULL);
}

static ul_result_t direct_broadcast(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(ul__publish(g, a->sendbuf, a->recvbuf, x->bs));
  const void *src = ul__mailbox(g, a->root)->send;
  if (a->count && a->recvbuf != src) UL_CHECK(COPY(x, a->recvbuf, src, a->count * x->esize));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

static ul_result_t direct_alltoall(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(ul__publish(g, a->sendbuf, a->recvbuf, x->bs));
  size_t bytes = a->count * x->esize;
  for (int i = 0; i < g->n && bytes; i++) {
    int r = (g->me + i) % g->n;
    UL_CHECK(COPY(x, at(a->recvbuf, (size_t)r * a->count, x->esize),
                  at(ul__mailbox(g, r)->send, (size_t)g->me * a->count, x->esize), bytes));
  }
  return ul__generic_barrier(x->c, x->bs, NULL);
}

static ul_result_t direct_gather(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(ul__publish(g, a->sendbuf, a->recvbuf, x->bs));
  void *dst = at(ul__mailbox(g, a->root)->recv, (size_t)g->me * a->count, x->esize);
  if (a->count && dst != a->sendbuf) UL_CHECK(COPY(x, dst, a->sendbuf, a->count * x->esize));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

static ul_result_t direct_scatter(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(ul__publish(g, a->sendbuf, a->recvbuf, x->bs));
  const void *src = at(ul__mailbox(g, a->root)->send, (size_t)g->me * a->count, x->esize);
  if (a->count && a->recvbuf != src) UL_CHECK(COPY(x, a->recvbuf, src, a->count * x->esize));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

/* ================================ channel algorithms ================================ */

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

static ul_result_t ring_allreduce(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  UL_CHECK(copy_if_needed(x, a->recvbuf, a->sendbuf, a->count));
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
static ul_result_t oneshot_allreduce(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me;
  size_t bytes = a->count * x->esize;
  if (n == 1) {
    UL_CHECK(copy_if_needed(x, a->recvbuf, a->sendbuf, a->count));
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
    return UL_OK;
  }
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

static ul_result_t ring_reduce_scatter(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  size_t rc = a->count;
  /* Work in place on a copy: the receive buffer is one block only, so reduce blocks in
   * the send buffer would modify user input. Use chunks through the work area instead:
   * ring over blocks of the (read-only) send buffer, accumulating in flight. */
  if (n == 1) {
    UL_CHECK(copy_if_needed(x, a->recvbuf, a->sendbuf, rc));
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

static ul_result_t ring_allgather(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  UL_CHECK(copy_if_needed(x, at(a->recvbuf, (size_t)me * a->count, x->esize), a->sendbuf, a->count));
  if (n == 1 || a->count == 0) return UL_OK;
  /* Allgather steps start from block (r+1); shift by -1 so rank r starts from its own. */
  return ring_pass(x, a->recvbuf, 0, a->count, 0, -1);
}

static ul_result_t tree_broadcast(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me;
  int children[64];
  int nc = ul__tree_children(me, a->root, n, children, 64);
  int parent = ul__tree_parent(me, a->root, n);
  const void *src = me == a->root ? a->sendbuf : a->recvbuf;
  if (me == a->root) UL_CHECK(copy_if_needed(x, a->recvbuf, a->sendbuf, a->count));
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

static ul_result_t tree_reduce(algo_ctx_t *x) {
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
      if (me == a->root) UL_CHECK(copy_if_needed(x, acc, mine, cnt));
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

static ul_result_t linear_gather(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  if (me != a->root) return send_block(x, a->root, a->sendbuf, a->count);
  for (int r = 0; r < n; r++) {
    void *dst = at(a->recvbuf, (size_t)r * a->count, x->esize);
    if (r == me) UL_CHECK(copy_if_needed(x, dst, a->sendbuf, a->count));
    else UL_CHECK(recv_block(x, r, dst, a->count));
  }
  return UL_OK;
}

static ul_result_t linear_scatter(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  if (me != a->root) return recv_block(x, a->root, a->recvbuf, a->count);
  for (int r = 0; r < n; r++) {
    const void *src = at(a->sendbuf, (size_t)r * a->count, x->esize);
    if (r == me) UL_CHECK(copy_if_needed(x, a->recvbuf, src, a->count));
    else UL_CHECK(send_block(x, r, src, a->count));
  }
  return UL_OK;
}

static ul_result_t pairwise_alltoall(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  int n = x->g->n, me = x->g->me;
  UL_CHECK(copy_if_needed(x, at(a->recvbuf, (size_t)me * a->count, x->esize),
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

static ul_result_t signal_barrier(algo_ctx_t *x) { return ul__generic_barrier(x->c, x->bs, NULL); }

static ul_result_t direct_allreduce(algo_ctx_t *x) { return direct_allreduce_like(x, 0); }
static ul_result_t direct_reduce_scatter(algo_ctx_t *x) { return direct_allreduce_like(x, 1); }

/* ================================== selection ================================== */

typedef struct algo_entry {
  ul_coll_t coll;
  const char *name;
  int needs_load_store;
  ul_result_t (*run)(algo_ctx_t *x);
} algo_entry_t;

static const algo_entry_t algorithms[] = {
    {UL_COLL_ALLREDUCE, "direct", 1, direct_allreduce},
    {UL_COLL_ALLREDUCE, "ring", 0, ring_allreduce},
    {UL_COLL_ALLREDUCE, "oneshot", 0, oneshot_allreduce},
    {UL_COLL_REDUCE_SCATTER, "direct", 1, direct_reduce_scatter},
    {UL_COLL_REDUCE_SCATTER, "ring", 0, ring_reduce_scatter},
    {UL_COLL_ALLGATHER, "direct", 1, direct_allgather},
    {UL_COLL_ALLGATHER, "ring", 0, ring_allgather},
    {UL_COLL_BROADCAST, "direct", 1, direct_broadcast},
    {UL_COLL_BROADCAST, "tree", 0, tree_broadcast},
    {UL_COLL_REDUCE, "direct", 1, direct_reduce},
    {UL_COLL_REDUCE, "tree", 0, tree_reduce},
    {UL_COLL_ALLTOALL, "direct", 1, direct_alltoall},
    {UL_COLL_ALLTOALL, "pairwise", 0, pairwise_alltoall},
    {UL_COLL_GATHER, "direct", 1, direct_gather},
    {UL_COLL_GATHER, "linear", 0, linear_gather},
    {UL_COLL_SCATTER, "direct", 1, direct_scatter},
    {UL_COLL_SCATTER, "linear", 0, linear_scatter},
    {UL_COLL_BARRIER, "signal", 0, signal_barrier},
};
#define NALGOS (sizeof algorithms / sizeof algorithms[0])

int ul__generic_algo_known(ul_coll_t coll, const char *name) {
  for (size_t i = 0; i < NALGOS; i++)
    if (algorithms[i].coll == coll && strcmp(algorithms[i].name, name) == 0) return 1;
  return 0;
}

/* Aliases the ring/tree vocabulary users know from NCCL: a request for "ring" on a
 * collective whose channel algorithm has another name maps to it. */
static const algo_entry_t *find_algo(ul_coll_t coll, const char *name) {
  for (size_t i = 0; i < NALGOS; i++)
    if (algorithms[i].coll == coll && strcmp(algorithms[i].name, name) == 0) return &algorithms[i];
  if (strcmp(name, "ring") == 0 || strcmp(name, "generic") == 0)
    for (size_t i = 0; i < NALGOS; i++)
      if (algorithms[i].coll == coll && !algorithms[i].needs_load_store &&
          strcmp(algorithms[i].name, "oneshot") != 0)
        return &algorithms[i];
  return NULL;
}

ul_result_t ul__generic_collective(ul_comm_t comm, const ul__coll_args_t *a, const char *forced,
                                   ul_backend_stream_t *bs, ul_call_info_t *info) {
  ul__generic_t *g = comm->generic;
  if (!g)
    return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                              "%s: backend %s has neither a native implementation nor the "
                              "primitives of the generic layer",
                              ul_coll_name(a->coll), comm->backend->ops.name);
  algo_ctx_t x = {g, comm, &comm->backend->ops, a, bs, ul_dtype_size(a->dtype),
                  a->op == UL_AVG ? UL_SUM : a->op};
  if (a->coll == UL_COLL_BARRIER) x.esize = 1;
  g->seq = comm->seq;
  g->opname = ul_coll_name(a->coll);
  size_t bytes = a->count * x.esize;
  const algo_entry_t *al = NULL;
  if (forced) {
    al = find_algo(a->coll, forced);
    if (!al)
      return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                                "UNILINK_ALGO asks for algorithm '%s' for %s, which the generic "
                                "layer does not have",
                                forced, ul_coll_name(a->coll));
    if (al->needs_load_store && !g->load_store)
      return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                                "UNILINK_ALGO asks for '%s' for %s, but ranks of this "
                                "communicator cannot load/store each other's buffers (path %s)",
                                forced, ul_coll_name(a->coll), comm->props.path);
    if (al->run == oneshot_allreduce && bytes > g->chunk_bytes)
      return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                                "UNILINK_ALGO asks for 'oneshot' allreduce of %zu bytes; it "
                                "handles at most %zu (one chunk)",
                                bytes, g->chunk_bytes);
    snprintf(info->reason, sizeof info->reason, "forced by UNILINK_ALGO");
  } else {
    for (size_t i = 0; i < NALGOS && !al; i++) {
      const algo_entry_t *e = &algorithms[i];
      if (e->coll != a->coll) continue;
      if (e->needs_load_store && !g->load_store) continue;
      if (e->run == oneshot_allreduce && (bytes > g->chunk_bytes || bytes > 64 * 1024)) continue;
      if (e->run == ring_allreduce && bytes <= 64 * 1024 && bytes <= g->chunk_bytes) continue;
      al = e;
    }
    if (!al) return ul__comm_set_error(comm, UL_ERR_INTERNAL, "no generic algorithm for %s",
                                       ul_coll_name(a->coll));
    if (al->needs_load_store)
      snprintf(info->reason, sizeof info->reason,
               "ranks share an address space: direct reads/writes of peers' buffers");
    else if (a->coll == UL_COLL_ALLREDUCE)
      snprintf(info->reason, sizeof info->reason, "%zu bytes %s 64 KiB through scratch channels",
               bytes, al->run == oneshot_allreduce ? "<=" : ">");
    else
      snprintf(info->reason, sizeof info->reason, "peers not load/store reachable (path %s)",
               comm->props.path);
  }
  snprintf(info->algorithm, sizeof info->algorithm, "%s", al->name);
  return al->run(&x);
}
