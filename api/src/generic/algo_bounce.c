/* Bounce algorithms: process ranks whose user buffers peers cannot map (malloc memory:
 * numpy arrays, PyTorch tensors) exchange cache-sized pieces directly with every peer
 * through the channel slots of the shared scratch (ul__ch_send/recv). Each piece is
 * read from its user buffer once, crosses between cores in the cache, and is written to
 * its user buffer once (streaming when large), so memory traffic is what zero-copy
 * costs; the two copies through the cache are cheaper than one cross-memory-attach copy
 * (process_vm_readv pins and copies page by page in the kernel: 5 GB/s against 17 GB/s
 * for memcpy on the reference machine, decision 0014).
 *
 * The patterns are the direct algorithms' (every rank reduces or gathers its own slice
 * of every peer's data) moved over channels, piece k of every slice per step. On a
 * channel each rank sends and consumes messages in the same order, and each step's
 * sends come before its receives, so the two slots of a channel never deadlock. */
#include "generic_internal.h"

/* Elements per piece: a quarter of the level-2 cache, at most one channel chunk. */
static size_t piece_elems(const algo_ctx_t *x) {
  size_t e = x->g->piece_bytes / x->esize;
  return e ? e : 1;
}

/* Elements of piece k of a slice of len elements (0 past its end). */
static size_t piece_count(size_t len, size_t k, size_t pe) {
  return k * pe >= len ? 0 : len - k * pe < pe ? len - k * pe : pe;
}

/* Receive piece k from peer p into dst (nb bytes). */
static ul_result_t recv_into(algo_ctx_t *x, int p, void *dst, size_t nb, int nt) {
  void *in;
  UL_CHECK(ul__ch_recv_begin(x->g, p, &in, x->bs));
  UL_CHECK(ul__out_copy(x, dst, in, nb, nt));
  return ul__ch_recv_end(x->g, p, x->bs);
}

/* Slice of rank r: allreduce splits the message in n blocks, reduce_scatter gives each
 * rank its count. */
static void slice_of(const algo_ctx_t *x, int allreduce, int r, size_t *off, size_t *len) {
  if (allreduce) {
    ul__block_range(x->a->count, x->g->n, r, off, len);
  } else {
    *off = (size_t)r * x->a->count;
    *len = x->a->count;
  }
}

/* Allreduce (reduce-scatter, then every rank sends its reduced piece to every peer) and
 * reduce_scatter (the first half). Rank r reduces slice r: its own piece first (in place
 * it is where the result goes), then the peers' in rank order, as the direct algorithms
 * do; one rank computes each element, so all see the same result. */
static ul_result_t bounce_reduce(algo_ctx_t *x, int allreduce) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me;
  if (n == 1) return ul__single_rank_allreduce(x);
  size_t pe = piece_elems(x), es = x->esize, off, len, most;
  slice_of(x, allreduce, 0, &off, &most); /* slice 0 is the longest */
  int nt = x->host && a->count * es >= UL__NT_MIN_BYTES;
  void *work = (char *)g->scratch + g->work_off;
  size_t my_off, my_len;
  slice_of(x, allreduce, me, &my_off, &my_len);
  void *own_base = allreduce ? at(a->recvbuf, my_off, es) : a->recvbuf;
  /* In place the outputs overwrite inputs this rank has just read: those lines are in
   * the cache, so ordinary stores cost no read for ownership and no extra pass, where
   * streaming stores would evict them (allreduce in place np2, median of synchronized
   * calls: 16 MiB 1.8-2.2 -> 1.2-1.4 ms, 64 MiB 7.9-8.7 -> 6.3-7.1 ms). */
  int inplace = own_base == at(a->sendbuf, my_off, es);
  if (inplace) nt = 0;
  /* Large outputs out of place: the last reduction of a piece stores straight into this
   * rank's output and (allreduce) every peer's channel slot, in the pass that reads the
   * inputs, as the direct reductions do (decision 0016): no work-area copy, no separate
   * phase of output writes. Not for avg: its scaling would read the output back. */
  int fuse = nt && g->reduce_stream && a->op != UL_AVG;
  for (size_t k = 0; k * pe < most; k++) {
    /* 1. my piece of every peer's slice, to that peer */
    for (int i = 1; i < n; i++) {
      int p = (me + i) % n;
      slice_of(x, allreduce, p, &off, &len);
      size_t c = piece_count(len, k, pe);
      if (c) UL_CHECK(ul__ch_send(g, p, at(a->sendbuf, off + k * pe, es), c * es, x->bs));
    }
    /* 2. reduce every rank's piece of my slice */
    size_t c = piece_count(my_len, k, pe);
    if (c) {
      void *own = at(own_base, k * pe, es);
      void *acc = nt ? work : own;
      const void *prev = at(a->sendbuf, my_off + k * pe, es);
      int nout = 0;
      if (fuse) {
        g->outs[nout++] = own;
        for (int i = 1; allreduce && i < n; i++)
          UL_CHECK(ul__ch_send_begin(g, (me + i) % n, &g->outs[nout++], x->bs));
      }
      for (int r = 0, left = n - 1; r < n; r++) {
        if (r == me) continue;
        void *in;
        UL_CHECK(ul__ch_recv_begin(g, r, &in, x->bs));
        if (--left == 0 && fuse) UL_CHECK(REDUCE_STREAM(x, g->outs, nout, prev, in, c));
        else UL_CHECK(REDUCE(x, acc, prev, in, c));
        prev = acc;
      }
      for (int i = 1; i < n; i++) UL_CHECK(ul__ch_recv_end(g, (me + i) % n, x->bs));
      /* 3. allreduce: the reduced piece to every peer (fused: already in their slots) */
      if (fuse) {
        for (int i = 1; allreduce && i < n; i++) UL_CHECK(ul__ch_send_end(g, (me + i) % n, x->bs));
      } else {
        if (a->op == UL_AVG) UL_CHECK(SCALE(x, acc, c));
        UL_CHECK(ul__out_copy(x, own, acc, c * es, nt));
        for (int i = 1; allreduce && i < n; i++)
          UL_CHECK(ul__ch_send(g, (me + i) % n, acc, c * es, x->bs));
      }
    }
    /* 4. allreduce: every peer's reduced piece into my output */
    if (allreduce)
      for (int i = 1; i < n; i++) {
        int p = (me + n - i) % n;
        slice_of(x, allreduce, p, &off, &len);
        size_t cp = piece_count(len, k, pe);
        if (cp) UL_CHECK(recv_into(x, p, at(a->recvbuf, off + k * pe, es), cp * es, nt));
      }
  }
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__bounce_allreduce(algo_ctx_t *x) { return bounce_reduce(x, 1); }
UL__HIDDEN ul_result_t ul__bounce_reduce_scatter(algo_ctx_t *x) { return bounce_reduce(x, 0); }

/* Allgather (block of rank r to every peer) and alltoall (block p of rank r's input to
 * peer p, landing at block r of p's output), piece by piece. */
static ul_result_t bounce_exchange(algo_ctx_t *x, int alltoall) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me;
  size_t pe = piece_elems(x), es = x->esize, cnt = a->count;
  size_t out = cnt * es * (size_t)n; /* alltoall's input too; allgather's is one block */
  int nt = ul__copy_outputs_stream(x, out, out + (alltoall ? out : cnt * es));
  const char *mine = alltoall ? at(a->sendbuf, (size_t)me * cnt, es) : a->sendbuf;
  for (size_t k = 0; k * pe < cnt; k++) {
    size_t c = piece_count(cnt, k, pe), nb = c * es;
    for (int i = 1; i < n; i++) {
      int p = (me + i) % n;
      const char *src = alltoall ? at(a->sendbuf, (size_t)p * cnt, es) : a->sendbuf;
      UL_CHECK(ul__ch_send(g, p, at(src, k * pe, es), nb, x->bs));
    }
    UL_CHECK(ul__out_copy(x, at(a->recvbuf, (size_t)me * cnt + k * pe, es), at(mine, k * pe, es),
                      nb, nt));
    for (int i = 1; i < n; i++) {
      int p = (me + n - i) % n;
      UL_CHECK(recv_into(x, p, at(a->recvbuf, (size_t)p * cnt + k * pe, es), nb, nt));
    }
  }
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__bounce_allgather(algo_ctx_t *x) { return bounce_exchange(x, 0); }
UL__HIDDEN ul_result_t ul__bounce_alltoall(algo_ctx_t *x) { return bounce_exchange(x, 1); }

/* Broadcast: the root sends each piece to every peer (a chain would relieve the root
 * for many ranks; with a core per rank the root's reads come from its cache). */
UL__HIDDEN ul_result_t ul__bounce_broadcast(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me, root = a->root;
  size_t pe = piece_elems(x), es = x->esize, cnt = a->count;
  int nt = x->host && cnt * es >= UL__NT_MIN_BYTES;
  for (size_t k = 0; k * pe < cnt; k++) {
    size_t nb = piece_count(cnt, k, pe) * es;
    if (me == root) {
      for (int i = 1; i < n; i++)
        UL_CHECK(ul__ch_send(g, (me + i) % n, at(a->sendbuf, k * pe, es), nb, x->bs));
      UL_CHECK(ul__out_copy(x, at(a->recvbuf, k * pe, es), at(a->sendbuf, k * pe, es), nb, nt));
    } else {
      UL_CHECK(recv_into(x, root, at(a->recvbuf, k * pe, es), nb, nt));
    }
  }
  return UL_OK;
}
