/* Direct algorithms: every rank reads and writes its peers' user buffers itself, by
 * load/store (threads, or processes whose buffers are mapped: zero-copy) or the
 * backend's single-copy peer ops (peer_read/peer_write: the host backend's cross-memory
 * attach). Two barriers per call, no staging. */
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "generic_internal.h"

/* Elements per cache-sized piece in direct algorithms. Two pieces (accumulator and a
 * peer's data) live in the work area at once. Single-copy pieces are larger because
 * each costs a system call. */
static size_t piece_elems(algo_ctx_t *x) {
  size_t b = x->cma && !x->zc ? x->g->chunk_bytes / 2 : (size_t)(64 * 1024);
  if (b > x->g->chunk_bytes / 2) b = x->g->chunk_bytes / 2;
  size_t e = b / x->esize;
  return e ? e : 1;
}

/* Single copy with a peer process through the backend (peer_read/peer_write). Its
 * sentence (lost ranks named, or the system error) gets the operation in front. */
static ul_result_t peer_copy(algo_ctx_t *x, int peer, void *local, void *remote, size_t bytes,
                             int write) {
  ul_result_t rc = write ? x->o->peer_write(BC(x), peer, remote, local, bytes)
                         : x->o->peer_read(BC(x), peer, local, remote, bytes);
  if (rc == UL_OK) return UL_OK;
  char prev[512];
  snprintf(prev, sizeof prev, "%s", x->c->last_error);
  return ul__comm_set_error(x->c, rc, "%s #%llu: %s", x->g->opname ? x->g->opname : "operation",
                            (unsigned long long)x->g->seq, prev);
}

/* Peer r's send (recv) buffer at `remote`, an address of r's, as an address of this
 * process (ul__publish's zsend/zrecv: same address for threads, a mapping of r's
 * ul_mem_alloc segment between processes), or NULL when only single-copy reaches it. */
static const void *local_send(algo_ctx_t *x, int r, const void *remote) {
  ul__generic_t *g = x->g;
  if (r == g->me) return remote;
  const char *v = g->zsend[r];
  return v ? v + ((const char *)remote - (const char *)ul__mailbox(g, r)->send) : NULL;
}

static void *local_recv(algo_ctx_t *x, int r, void *remote) {
  ul__generic_t *g = x->g;
  if (r == g->me) return remote;
  char *v = g->zrecv[r];
  return v ? v + ((char *)remote - (char *)ul__mailbox(g, r)->recv) : NULL;
}

/* Copy bytes from peer r's send buffer (its own address remote) to local dst. Addresses
 * of another process may equal ours by chance (forked ranks): they are translated,
 * never compared across address spaces. */
static ul_result_t pull(algo_ctx_t *x, int r, void *dst, const void *remote, size_t bytes) {
  if (bytes == 0) return UL_OK;
  const void *src = local_send(x, r, remote);
  if (!src) return peer_copy(x, r, dst, (void *)remote, bytes, 0);
  if (dst == src) return UL_OK;
  return ul__out_copy(x, dst, src, bytes, x->nt_pull);
}

/* Copy local src to peer r's recv buffer at remote (its own address). */
static ul_result_t push(algo_ctx_t *x, int r, void *remote, const void *src, size_t bytes,
                        int nt) {
  if (bytes == 0) return UL_OK;
  void *dst = local_recv(x, r, remote);
  if (!dst) return peer_copy(x, r, (void *)src, remote, bytes, 1);
  return ul__out_copy(x, dst, src, bytes, nt);
}

/* Bytes of the send and receive buffers a collective touches on this rank. */
static void coll_buffer_bytes(const algo_ctx_t *x, size_t *sb, size_t *rb) {
  size_t b = x->a->count * x->esize, nb = b * (size_t)x->g->n;
  switch (x->a->coll) {
  case UL_COLL_REDUCE_SCATTER: *sb = nb, *rb = b; break;
  case UL_COLL_ALLGATHER:
  case UL_COLL_GATHER: *sb = b, *rb = nb; break;
  case UL_COLL_SCATTER: *sb = nb, *rb = b; break;
  case UL_COLL_ALLTOALL: *sb = nb, *rb = nb; break;
  default: *sb = b, *rb = b; break;
  }
}

size_t ul__largest_buffer_bytes(const algo_ctx_t *x) {
  size_t sb, rb;
  coll_buffer_bytes(x, &sb, &rb);
  return sb > rb ? sb : rb;
}

/* Bytes of buffers all ranks' copy collective touches, from their mailboxes (the same
 * sum on every rank, though ranks may differ in what runs in place). A send buffer
 * inside the receive buffer (in place) is not counted again; a broadcast's receivers
 * read no send buffer. */
static size_t all_ranks_buffer_bytes(algo_ctx_t *x, size_t sb, size_t rb) {
  size_t sum = 0;
  for (int p = 0; p < x->g->n; p++) {
    const ul__mailbox_t *mb = ul__mailbox(x->g, p);
    uintptr_t s = (uintptr_t)mb->send, r = (uintptr_t)mb->recv;
    int reads_send = x->a->coll != UL_COLL_BROADCAST || p == x->a->root;
    sum += rb + (reads_send && !(s >= r && s - r < rb) ? sb : 0);
  }
  return sum;
}

/* Whether every buffer peers would reach in this call lies in memory they map (an
 * exported ul_mem_alloc segment), from every rank's mailbox: the same on every rank. */
static int all_exported(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  ul_coll_t coll = x->a->coll;
  int peers_write = coll == UL_COLL_ALLREDUCE || coll == UL_COLL_REDUCE_SCATTER;
  for (int p = 0; p < g->n; p++) {
    const ul__mailbox_t *mb = ul__mailbox(g, p);
    if ((coll != UL_COLL_BROADCAST || p == x->a->root) && !mb->send_handle) return 0;
    if (peers_write && !mb->recv_handle) return 0;
  }
  return 1;
}

/* Every direct algorithm starts here: publish buffers, learn how peers' are reached.
 * @bounce is the collective's bounce algorithm (NULL: none); x->bounce is set to it when
 * the call should run it instead (the caller then returns bounce_instead(x)). */
static ul_result_t publish(algo_ctx_t *x, ul_result_t (*bounce)(algo_ctx_t *)) {
  size_t sb, rb;
  coll_buffer_bytes(x, &sb, &rb);
  UL_CHECK(ul__publish(x->g, x->a->sendbuf, sb, x->a->recvbuf, rb, x->bs));
  x->zc = x->cma && x->g->zpeers == x->g->n - 1;
  /* Process ranks with private buffers: two copies through the shared cache beat one
   * cross-memory-attach copy (decision 0014). Reduce, gather and scatter have no bounce
   * algorithm: one rank moves all the data, and a channel would serialise it. Below a
   * size measured on the machine (UNILINK_TUNING_FILE) single copies stay: while the
   * buffers fit in the cache one copy beats two (alltoall np2 1-4 MiB). Ranks
   * outnumbering cores bounce only where the machine measured it: every piece waits for
   * a peer to be scheduled, which lost once (4 ranks on 2 cores, allreduce 64 MiB 41.6 ms
   * bounced, 30.6 ms single-copy) and wins now (22-27 ms against 32-40, stop 34). */
  size_t from = x->g->bounce_from[x->a->coll];
  int measured = from != UL__UNTUNED;
  int would_bounce = bounce && !x->forced && x->cma && x->g->shared_scratch &&
                     !x->g->load_store && !all_exported(x);
  int hand_over = would_bounce && (measured || !x->g->oversubscribed);
  x->unmeasured = would_bounce && !hand_over;
  if (!measured) from = 0;
  size_t largest = ul__largest_buffer_bytes(x);
  x->single_below = hand_over && largest < from ? from : 0;
  /* Not measured here: the copy collectives keep single copies while every rank's
   * buffers fit in the last-level cache. There one copy in cache beats two; past it both
   * are bound by memory, where the bounce's pieces keep both CPUs copying (np2, medians
   * of 3 interleaved rounds: allgather 8 MiB single 285 us, bounced 374; 16 MiB 872 and
   * 808; alltoall 8 MiB 295 and 378; broadcast in place 16 MiB 442 and 548). The
   * reductions always bounce: the single copy's reduction waits for each piece
   * (allreduce 1 MiB 112 us single, 75 bounced). Allgather and alltoall messages within
   * one bounce piece bounce too: both ranks copy at once even then, and a system call's
   * fixed cost is not spread over pages (128 KiB, 3 rounds of 1000 calls: allgather 9.5
   * us single, 6.1 bounced; alltoall 7.7 and 6.8; 256 KiB: 12.0 and 11.8, 11.1 and 12.6).
   * A broadcast's bounce with one piece is two copies one after the other: it keeps the
   * single copies (in place, 128 KiB: 8.2 and 12.3 us). */
  int copies = x->a->coll == UL_COLL_BROADCAST ||
               ((x->a->coll == UL_COLL_ALLGATHER || x->a->coll == UL_COLL_ALLTOALL) &&
                largest >= x->g->piece_bytes);
  x->single_in_cache = hand_over && !measured && copies && x->g->llc_bytes &&
                       all_ranks_buffer_bytes(x, sb, rb) <= x->g->llc_bytes;
  x->bounce = hand_over && !x->single_below && !x->single_in_cache ? bounce : NULL;
  /* Pulled outputs (allgather, alltoall, broadcast, gather) as large as the allreduce's
   * streaming threshold are stored streaming too: allgather np=2 32 MiB went from 5.5 to
   * 3.0 ms (no read-for-ownership of 32 MiB of output), 4 MiB unchanged. */
  x->nt_pull = rb >= UL__NT_MIN_BYTES;
  return UL_OK;
}

/* The bounce algorithm publish chose, then the direct algorithms' closing barrier: a
 * rank leaving early would rewrite its mailbox while a peer still reads it in publish. */
static ul_result_t bounce_instead(algo_ctx_t *x) {
  UL_CHECK(x->bounce(x));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

/* ============================ direct (load/store peers) ============================ */

/* The last reduction of a piece: into acc, or (nout > 0) straight into the nout
 * outputs with streaming stores. */
static ul_result_t reduce_last(algo_ctx_t *x, void *acc, void *const *out, int nout,
                               const void *p, const void *q, size_t cnt) {
  if (!nout) return REDUCE(x, acc, p, q, cnt);
  return REDUCE_STREAM(x, out, nout, p, q, cnt);
}

/* The pieces of every rank's send buffer at element e0 reduced into acc, in the order
 * first, second, then the others ascending; with nout > 0 the last step writes the
 * result to out[0..nout) instead (acc then only holds partial sums). first is the rank
 * whose send buffer may alias the output (in place): all inputs of a piece are read
 * before any output of it is written. Each element is computed by one rank only, so
 * every rank sees one result. Peers' pieces come straight from their buffers (threads)
 * or are read into the work area with one system call each (processes). */
static ul_result_t reduce_piece(algo_ctx_t *x, void *acc, void *const *out, int nout, size_t e0,
                                size_t cnt, int first) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  void *t0 = (char *)g->scratch + g->work_off;
  void *t1 = (char *)t0 + piece_elems(x) * x->esize;
  size_t nb = cnt * x->esize;
  const void *src[2];
  int order[2] = {first, first == 0 ? 1 : 0};
  if (n == 1) return ul__copy_if_needed(x, acc, at(x->a->sendbuf, e0, x->esize), cnt);
  for (int i = 0; i < 2; i++) {
    int r = order[i];
    const void *remote = at(r == me ? x->a->sendbuf : ul__mailbox(g, r)->send, e0, x->esize);
    src[i] = local_send(x, r, remote);
    if (!src[i]) {
      /* t0 is either the accumulator (reduced onto itself) or unused */
      void *tmp = i == 0 ? t0 : t1;
      UL_CHECK(pull(x, r, tmp, remote, nb));
      src[i] = tmp;
    }
  }
  if (n == 2) return reduce_last(x, acc, out, nout, src[0], src[1], cnt);
  UL_CHECK(REDUCE(x, acc, src[0], src[1], cnt));
  int left = n - 2;
  for (int r = 0; r < n; r++) {
    if (r == order[0] || r == order[1]) continue;
    const void *remote = at(r == me ? x->a->sendbuf : ul__mailbox(g, r)->send, e0, x->esize);
    const void *p = local_send(x, r, remote);
    if (!p) {
      UL_CHECK(pull(x, r, t1, remote, nb));
      p = t1;
    }
    if (--left == 0) return reduce_last(x, acc, out, nout, acc, p, cnt);
    UL_CHECK(REDUCE(x, acc, acc, p, cnt));
  }
  return UL_OK;
}

/* Whether this rank reaches every rank's output by load/store (threads, or mapped
 * ul_mem_alloc buffers), so large reductions can store straight into every
 * output and the large copy collectives can split their work by source. */
static int outputs_local(algo_ctx_t *x) {
  for (int r = 0; r < x->g->n; r++)
    if (!local_recv(x, r, ul__mailbox(x->g, r)->recv)) return 0;
  return 1;
}

/* Large copy collectives split by source (spread) when every output is reachable. */
static int spreads(algo_ctx_t *x) { return x->nt_pull && x->host && outputs_local(x); }

enum { DR_ALLREDUCE, DR_REDUCE_SCATTER, DR_REDUCE };

/* Direct reductions: each rank reduces its slice of every rank's input and writes the
 * result where it belongs (every rank's output, its own, or the root's). Two barriers:
 * after publishing the buffers, and before returning (peers done with ours). */
static ul_result_t direct_reduce_family(algo_ctx_t *x, int kind) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x, kind == DR_ALLREDUCE        ? ul__bounce_allreduce
                      : kind == DR_REDUCE_SCATTER ? ul__bounce_reduce_scatter
                                                  : NULL));
  if (x->bounce) return bounce_instead(x);
  size_t off, len, total = kind == DR_REDUCE_SCATTER ? a->count * (size_t)n : a->count;
  if (kind == DR_REDUCE_SCATTER) {
    off = (size_t)me * a->count;
    len = a->count;
  } else {
    ul__block_range(total, n, me, &off, &len);
  }
  size_t out_bytes = (kind == DR_ALLREDUCE ? total : len) * x->esize;
  int nt = x->host && out_bytes >= UL__NT_MIN_BYTES;
  int first = kind == DR_REDUCE ? a->root : me;
  /* Large outputs reached by load/store are written in the same pass that reads the
   * inputs, straight from the reduction with streaming stores (the backend's
   * reduce_stream): reducing into the work area and copying it out afterwards alternates
   * a read phase and a write phase per piece, and the memory system then does one at a
   * time (allreduce np2 64 MiB out of place, 2 thread ranks, median of interleaved
   * rounds: 7.0 -> 4.1 ms on the 2-core EPYC VM, docs/performance.md; in place, 16 MiB:
   * 0.67-0.82 -> 0.48-0.56 ms). In place an output is exactly the input it is computed
   * from (the core refuses any other overlap), and each line is read before it is
   * written. A single output in place (reduce_scatter, reduce) is better written with
   * ordinary stores into the lines just read, which are in the cache (reduce_scatter
   * np2 in place, process ranks, medians of 9: 16 MiB 398 us ordinary, 512 streaming;
   * 64 MiB 3.1 and 3.6 ms). Not for avg: its scaling would read the outputs back. */
  /* The output is the input it is computed from: this rank's (allreduce, reduce_scatter)
   * or the root's (reduce; its mailbox is its own on the root). */
  int inplace = kind == DR_ALLREDUCE        ? a->recvbuf == a->sendbuf
                : kind == DR_REDUCE_SCATTER ? a->recvbuf == at(a->sendbuf, off, x->esize)
                                            : ul__mailbox(g, a->root)->recv ==
                                                  ul__mailbox(g, a->root)->send;
  int stream = nt && n > 1 && g->reduce_stream && a->op != UL_AVG;
  if (kind != DR_ALLREDUCE) stream &= !inplace;
  if (stream && kind == DR_ALLREDUCE) stream = outputs_local(x);
  if (stream && kind == DR_REDUCE && a->root != me)
    stream = local_recv(x, a->root, ul__mailbox(g, a->root)->recv) != NULL;
  void *t0 = (char *)g->scratch + g->work_off;
  size_t pe = piece_elems(x);
  for (size_t p = 0; p < len; p += pe) {
    size_t cnt = len - p < pe ? len - p : pe;
    size_t e0 = off + p, nb = cnt * x->esize;
    void *own = NULL; /* this rank's output of the piece, if it has one */
    if (kind == DR_REDUCE_SCATTER) own = at(a->recvbuf, p, x->esize);
    else if (kind == DR_ALLREDUCE) own = at(a->recvbuf, e0, x->esize);
    else if (a->root == me) own = at(a->recvbuf, e0, x->esize);
    if (stream) {
      int nout = 0;
      if (own) g->outs[nout++] = own;
      for (int i = 1; kind == DR_ALLREDUCE && i < n; i++) {
        int r = (me + i) % n;
        g->outs[nout++] = local_recv(x, r, at(ul__mailbox(g, r)->recv, e0, x->esize));
      }
      if (kind == DR_REDUCE && a->root != me) {
        void *root_out = at(ul__mailbox(g, a->root)->recv, e0, x->esize);
        g->outs[nout++] = local_recv(x, a->root, root_out);
      }
      UL_CHECK(reduce_piece(x, t0, g->outs, nout, e0, cnt, first));
      continue;
    }
    /* Accumulate in the cache-resident work area when the output is written with
     * streaming stores or sent elsewhere; else straight into our own output. In place
     * the output is the input just read, in the cache: ordinary stores cost nothing
     * extra there, streaming ones evict it (allreduce 64 MiB np2 in place, median of
     * synchronized calls: zero-copy 4.2-6.1 -> 3.0-3.8 ms, threads 6.0 -> 5.0 ms). */
    void *acc = (own && (inplace || (!nt && !(x->cma && !x->zc && kind == DR_ALLREDUCE)))) ? own : t0;
    UL_CHECK(reduce_piece(x, acc, NULL, 0, e0, cnt, first));
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, acc, cnt));
    if (own) UL_CHECK(ul__out_copy(x, own, acc, nb, nt));
    if (kind == DR_ALLREDUCE) {
      for (int i = 1; i < n; i++) {
        int r = (me + i) % n;
        UL_CHECK(push(x, r, at(ul__mailbox(g, r)->recv, e0, x->esize), acc, nb, nt));
      }
    } else if (kind == DR_REDUCE && a->root != me) {
      UL_CHECK(push(x, a->root, at(ul__mailbox(g, a->root)->recv, e0, x->esize), acc, nb, nt));
    }
  }
  return ul__generic_barrier(x->c, x->bs, NULL);
}

UL__HIDDEN ul_result_t ul__direct_reduce(algo_ctx_t *x) {
  return direct_reduce_family(x, DR_REDUCE);
}

/* Bytes at src (an address of this process) to offset off of every rank's output, one
 * piece the size of the direct algorithms' work area at a time, with streaming stores:
 * each piece is read from memory once and stays in the cache for its other copies, so
 * every input byte is read once in all where pulling reads it once per rank (broadcast
 * np2 64 MiB out of place, 2 thread ranks, median of interleaved rounds: each rank
 * pulling the whole message 4.7-6.1 ms, each spreading its half 2.4-5.4 ms). */
static ul_result_t spread(algo_ctx_t *x, const void *src, size_t off, size_t bytes) {
  ul__generic_t *g = x->g;
  size_t piece = piece_elems(x) * x->esize;
  for (size_t p = 0; p < bytes; p += piece) {
    size_t nb = bytes - p < piece ? bytes - p : piece;
    for (int i = 0; i < g->n; i++) {
      int r = (g->me + i) % g->n;
      char *out = local_recv(x, r, ul__mailbox(g, r)->recv);
      UL_CHECK(ul__out_copy(x, out + off + p, (const char *)src + p, nb, 1));
    }
  }
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__direct_allgather(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x, ul__bounce_allgather));
  if (x->bounce) return bounce_instead(x);
  size_t bytes = a->count * x->esize;
  /* Large outputs all reachable: every rank spreads its own block. */
  if (spreads(x)) {
    UL_CHECK(spread(x, a->sendbuf, (size_t)g->me * bytes, bytes));
    return ul__generic_barrier(x->c, x->bs, NULL);
  }
  /* Pull every peer's block: reads are spread over all ranks. */
  for (int i = 0; i < g->n && bytes; i++) {
    int r = (g->me + i) % g->n;
    void *dst = at(a->recvbuf, (size_t)r * a->count, x->esize);
    const void *src = r == g->me ? a->sendbuf : ul__mailbox(g, r)->send;
    UL_CHECK(pull(x, r, dst, src, bytes));
  }
  return ul__generic_barrier(x->c, x->bs, NULL);
}

/* Broadcast in place by single copies when receivers cannot map the root's buffer: the
 * root writes one n-th of the message (its block) into every receiver's output while
 * each receiver reads the rest, so the root's CPU copies too instead of waiting (np2,
 * medians of 3 interleaved rounds: 1 MiB pulled whole 46 us, split 27). Receivers write
 * their output where the root does not: the parts are disjoint. */
static ul_result_t split_broadcast(algo_ctx_t *x, const void *src) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  size_t es = x->esize, off, len;
  ul__block_range(a->count, g->n, a->root, &off, &len);
  if (g->me != a->root) {
    UL_CHECK(pull(x, a->root, a->recvbuf, src, off * es));
    size_t end = off + len;
    return pull(x, a->root, at(a->recvbuf, end, es), at(src, end, es), (a->count - end) * es);
  }
  for (int i = 1; i < g->n; i++) {
    int r = (g->me + i) % g->n;
    UL_CHECK(push(x, r, at(ul__mailbox(g, r)->recv, off, es), at(a->sendbuf, off, es), len * es,
                  x->nt_pull));
  }
  return UL_OK;
}

UL__HIDDEN ul_result_t ul__direct_broadcast(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x, ul__bounce_broadcast));
  if (x->bounce) return bounce_instead(x);
  const void *src = g->me == a->root ? a->sendbuf : ul__mailbox(g, a->root)->send;
  /* No rank maps the root's input (the same on every rank: from its mailbox), and the
   * root has a CPU of its own to copy with: one that neither waits for a CPU (ranks
   * outnumbering CPUs pull it whole: np4 on 2 cores, in place, medians of 3 rounds, 8 MiB
   * split 1314 us, whole 973) nor copies its own output (np2 out of place, 2 MiB: split
   * 119 us, whole 86). */
  const ul__mailbox_t *rm = ul__mailbox(g, a->root);
  if (!g->load_store && !rm->send_handle && !g->oversubscribed && rm->send == rm->recv) {
    UL_CHECK(split_broadcast(x, src));
    return ul__generic_barrier(x->c, x->bs, NULL);
  }
  const void *here = local_send(x, a->root, src);
  /* Large outputs all reachable, the root's input too: every rank spreads its slice. */
  if (here && spreads(x)) {
    size_t off, len;
    ul__block_range(a->count, g->n, g->me, &off, &len);
    UL_CHECK(spread(x, at(here, off, x->esize), off * x->esize, len * x->esize));
    return ul__generic_barrier(x->c, x->bs, NULL);
  }
  UL_CHECK(pull(x, a->root, a->recvbuf, src, a->count * x->esize));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

UL__HIDDEN ul_result_t ul__direct_alltoall(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x, ul__bounce_alltoall));
  if (x->bounce) return bounce_instead(x);
  size_t bytes = a->count * x->esize;
  for (int i = 0; i < g->n && bytes; i++) {
    int r = (g->me + i) % g->n;
    const void *sb = r == g->me ? a->sendbuf : ul__mailbox(g, r)->send;
    UL_CHECK(pull(x, r, at(a->recvbuf, (size_t)r * a->count, x->esize),
                  at(sb, (size_t)g->me * a->count, x->esize), bytes));
  }
  return ul__generic_barrier(x->c, x->bs, NULL);
}

UL__HIDDEN ul_result_t ul__direct_gather(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x, NULL));
  void *rr = g->me == a->root ? a->recvbuf : ul__mailbox(g, a->root)->recv;
  void *dst = at(rr, (size_t)g->me * a->count, x->esize);
  UL_CHECK(push(x, a->root, dst, a->sendbuf, a->count * x->esize, 0));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

UL__HIDDEN ul_result_t ul__direct_scatter(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x, NULL));
  const void *sb = g->me == a->root ? a->sendbuf : ul__mailbox(g, a->root)->send;
  UL_CHECK(pull(x, a->root, a->recvbuf, at(sb, (size_t)g->me * a->count, x->esize),
                a->count * x->esize));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

UL__HIDDEN ul_result_t ul__direct_allreduce(algo_ctx_t *x) {
  return direct_reduce_family(x, DR_ALLREDUCE);
}
UL__HIDDEN ul_result_t ul__direct_reduce_scatter(algo_ctx_t *x) {
  return direct_reduce_family(x, DR_REDUCE_SCATTER);
}
