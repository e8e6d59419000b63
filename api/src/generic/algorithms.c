/* Generic collective algorithms over the channels and direct access of generic.c.
 * Each algorithm is written once, as rank arithmetic (pattern.c) plus calls to the
 * backend's put/signal/wait/reduce/copy; the selection table at the end picks one. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "generic_internal.h"

#define REDUCE(x, dst, p, q, cnt) \
  (x)->o->reduce_local(BC(x), (dst), (p), (q), (cnt), (x)->a->dtype, (x)->rop, (x)->bs)
#define SCALE(x, buf, cnt) \
  (x)->o->scale_avg(BC(x), (buf), (cnt), (x)->a->dtype, (x)->g->n, (x)->bs)

/* Elements per pipelined chunk (at least one). */
static size_t chunk_elems(algo_ctx_t *x) {
  size_t e = x->g->chunk_bytes / x->esize;
  return e ? e : 1;
}

/* Elements per cache-sized piece in direct algorithms. Two pieces (accumulator and a
 * peer's data) live in the work area at once. Single-copy pieces are larger because
 * each costs a system call. */
static size_t piece_elems(algo_ctx_t *x) {
  size_t b = x->cma && !x->zc ? x->g->chunk_bytes / 2 : (size_t)(64 * 1024);
  if (b > x->g->chunk_bytes / 2) b = x->g->chunk_bytes / 2;
  size_t e = b / x->esize;
  return e ? e : 1;
}

/* Outputs at least this large bypass the cache (streaming stores): the caller will not
 * read them soon and they would evict the inputs still to be read. Below it the result
 * stays in the shared cache, where the next iteration or consumer finds it. */
#define UL__NT_MIN_BYTES ((size_t)4 << 20)

/* memcpy with non-temporal stores: no read-for-ownership of the destination lines. */
static void nt_copy(void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
  char *d = dst;
  const char *s = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15;
  if (head > bytes) head = bytes;
  if (head) {
    memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
  }
  size_t body = bytes & ~(size_t)63;
  for (size_t i = 0; i < body; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
    _mm_stream_si128((__m128i *)(d + i), a);
    _mm_stream_si128((__m128i *)(d + i + 16), b);
    _mm_stream_si128((__m128i *)(d + i + 32), c);
    _mm_stream_si128((__m128i *)(d + i + 48), e);
  }
  if (bytes > body) memcpy(d + body, s + body, bytes - body);
  _mm_sfence(); /* order the streaming stores before the signal that publishes them */
#else
  memcpy(dst, src, bytes);
#endif
}

/* Local copy of an output piece: streaming when large and host memory. */
static ul_result_t out_copy(algo_ctx_t *x, void *dst, const void *src, size_t bytes, int nt) {
  if (dst == src || bytes == 0) return UL_OK;
  if (nt && x->host) {
    nt_copy(dst, src, bytes);
    return UL_OK;
  }
  return COPY(x, dst, src, bytes);
}

/* Single-copy transfers with a peer process (cross-memory attach). The kernel may move
 * fewer bytes than asked (it stops at a fault or a page limit): loop on the rest. */
static ul_result_t cma_xfer(algo_ctx_t *x, int peer, void *local, void *remote, size_t bytes,
                            int write) {
  pid_t pid = (pid_t)ul__mailbox(x->g, peer)->pid;
  char *l = local, *r = remote;
  while (bytes) {
    struct iovec li = {l, bytes}, ri = {r, bytes};
    ssize_t got = write ? process_vm_writev(pid, &li, 1, &ri, 1, 0)
                        : process_vm_readv(pid, &li, 1, &ri, 1, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      int err = got < 0 ? errno : EIO;
      if (err == EFAULT) {
        /* A live peer's buffer vanished mid-copy: it left the operation, typically
         * because it saw another rank die first. Name the dead rank if one is gone. */
        for (int p = 0; p < x->g->n; p++) {
          pid_t pp = (pid_t)ul__mailbox(x->g, p)->pid;
          if (p != x->g->me && pp > 0 && kill(pp, 0) != 0 && errno == ESRCH)
            return ul__comm_set_error(
                x->c, UL_ERR_PEER_LOST,
                "%s #%llu: peer rank %d (pid %d) was lost: rank %d left the operation and "
                "freed the buffer being copied (%s: Bad address)",
                x->g->opname ? x->g->opname : "operation", (unsigned long long)x->g->seq, p,
                (int)pp, peer, write ? "process_vm_writev" : "process_vm_readv");
        }
      }
      return ul__comm_set_error(x->c, err == ESRCH ? UL_ERR_PEER_LOST : UL_ERR_SYSTEM,
                                "%s #%llu: %s of %zu bytes %s rank %d (pid %d) failed: %s",
                                x->g->opname ? x->g->opname : "operation",
                                (unsigned long long)x->g->seq,
                                write ? "process_vm_writev" : "process_vm_readv", bytes,
                                write ? "to" : "from", peer, (int)pid, strerror(err));
    }
    l += got;
    r += got;
    bytes -= (size_t)got;
  }
  return UL_OK;
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
  if (!src) return cma_xfer(x, r, dst, (void *)remote, bytes, 0);
  if (dst == src) return UL_OK;
  return out_copy(x, dst, src, bytes, x->nt_pull);
}

/* Copy local src to peer r's recv buffer at remote (its own address). */
static ul_result_t push(algo_ctx_t *x, int r, void *remote, const void *src, size_t bytes,
                        int nt) {
  if (bytes == 0) return UL_OK;
  void *dst = local_recv(x, r, remote);
  if (!dst) return cma_xfer(x, r, (void *)src, remote, bytes, 1);
  return out_copy(x, dst, src, bytes, nt);
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

/* Every direct algorithm starts here: publish buffers, learn how peers' are reached. */
static ul_result_t publish(algo_ctx_t *x) {
  size_t sb, rb;
  coll_buffer_bytes(x, &sb, &rb);
  UL_CHECK(ul__publish(x->g, x->a->sendbuf, sb, x->a->recvbuf, rb, x->bs));
  x->zc = x->cma && x->g->zpeers == x->g->n - 1;
  /* Pulled outputs (allgather, alltoall, broadcast, gather) as large as the allreduce's
   * streaming threshold are stored streaming too: allgather np=2 32 MiB went from 5.5 to
   * 3.0 ms (no read-for-ownership of 32 MiB of output), 4 MiB unchanged. */
  x->nt_pull = rb >= UL__NT_MIN_BYTES;
  return UL_OK;
}

static ul_result_t copy_if_needed(algo_ctx_t *x, void *dst, const void *src, size_t cnt) {
  if (dst == src || cnt == 0) return UL_OK;
  return COPY(x, dst, src, cnt * x->esize);
}

/* ============================ direct (load/store peers) ============================ */

/* The pieces of every rank's send buffer at element e0 reduced into acc, in the order
 * first, second, then the others ascending. first is the rank whose send buffer may
 * alias the output (in place): all inputs of a piece are read before any output of it
 * is written. Each element is computed by one rank only, so every rank sees one result.
 * Peers' pieces come straight from their buffers (threads) or are read into the work
 * area with one system call each (processes). */
static ul_result_t reduce_piece(algo_ctx_t *x, void *acc, size_t e0, size_t cnt, int first) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  void *t0 = (char *)g->scratch + g->work_off;
  void *t1 = (char *)t0 + piece_elems(x) * x->esize;
  size_t nb = cnt * x->esize;
  const void *src[2];
  int order[2] = {first, first == 0 ? 1 : 0};
  if (n == 1) return copy_if_needed(x, acc, at(x->a->sendbuf, e0, x->esize), cnt);
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
  UL_CHECK(REDUCE(x, acc, src[0], src[1], cnt));
  for (int r = 0; r < n; r++) {
    if (r == order[0] || r == order[1]) continue;
    const void *remote = at(r == me ? x->a->sendbuf : ul__mailbox(g, r)->send, e0, x->esize);
    const void *p = local_send(x, r, remote);
    if (!p) {
      UL_CHECK(pull(x, r, t1, remote, nb));
      p = t1;
    }
    UL_CHECK(REDUCE(x, acc, acc, p, cnt));
  }
  return UL_OK;
}

enum { DR_ALLREDUCE, DR_REDUCE_SCATTER, DR_REDUCE };

/* Direct reductions: each rank reduces its slice of every rank's input and writes the
 * result where it belongs (every rank's output, its own, or the root's). Two barriers:
 * after publishing the buffers, and before returning (peers done with ours). */
static ul_result_t direct_reduce_family(algo_ctx_t *x, int kind) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x));
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
  void *t0 = (char *)g->scratch + g->work_off;
  size_t pe = piece_elems(x);
  for (size_t p = 0; p < len; p += pe) {
    size_t cnt = len - p < pe ? len - p : pe;
    size_t e0 = off + p, nb = cnt * x->esize;
    void *own = NULL; /* this rank's output of the piece, if it has one */
    if (kind == DR_REDUCE_SCATTER) own = at(a->recvbuf, p, x->esize);
    else if (kind == DR_ALLREDUCE) own = at(a->recvbuf, e0, x->esize);
    else if (a->root == me) own = at(a->recvbuf, e0, x->esize);
    /* Accumulate in the cache-resident work area when the output is written with
     * streaming stores or sent elsewhere; else straight into our own output. */
    void *acc = (own && !nt && !(x->cma && !x->zc && kind == DR_ALLREDUCE)) ? own : t0;
    UL_CHECK(reduce_piece(x, acc, e0, cnt, first));
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, acc, cnt));
    if (own) UL_CHECK(out_copy(x, own, acc, nb, nt));
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

static ul_result_t direct_reduce(algo_ctx_t *x) { return direct_reduce_family(x, DR_REDUCE); }

static ul_result_t direct_allgather(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x));
  size_t bytes = a->count * x->esize;
  /* Pull every peer's block: reads are spread over all ranks. */
  for (int i = 0; i < g->n && bytes; i++) {
    int r = (g->me + i) % g->n;
    void *dst = at(a->recvbuf, (size_t)r * a->count, x->esize);
    const void *src = r == g->me ? a->sendbuf : ul__mailbox(g, r)->send;
    UL_CHECK(pull(x, r, dst, src, bytes));
  }
  return ul__generic_barrier(x->c, x->bs, NULL);
}

static ul_result_t direct_broadcast(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x));
  const void *src = g->me == a->root ? a->sendbuf : ul__mailbox(g, a->root)->send;
  UL_CHECK(pull(x, a->root, a->recvbuf, src, a->count * x->esize));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

static ul_result_t direct_alltoall(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x));
  size_t bytes = a->count * x->esize;
  for (int i = 0; i < g->n && bytes; i++) {
    int r = (g->me + i) % g->n;
    const void *sb = r == g->me ? a->sendbuf : ul__mailbox(g, r)->send;
    UL_CHECK(pull(x, r, at(a->recvbuf, (size_t)r * a->count, x->esize),
                  at(sb, (size_t)g->me * a->count, x->esize), bytes));
  }
  return ul__generic_barrier(x->c, x->bs, NULL);
}

static ul_result_t direct_gather(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x));
  void *rr = g->me == a->root ? a->recvbuf : ul__mailbox(g, a->root)->recv;
  void *dst = at(rr, (size_t)g->me * a->count, x->esize);
  UL_CHECK(push(x, a->root, dst, a->sendbuf, a->count * x->esize, 0));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

static ul_result_t direct_scatter(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x));
  const void *sb = g->me == a->root ? a->sendbuf : ul__mailbox(g, a->root)->send;
  UL_CHECK(pull(x, a->root, a->recvbuf, at(sb, (size_t)g->me * a->count, x->esize),
                a->count * x->esize));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

/* ================================ channel algorithms ================================ */

/* One ring pass over `buf` (blocks per ul__block_range of total, or fixed blocks of
 * `blk` elements when blk != 0). reduce=1: reduce-scatter steps, else allgather steps.
 * shift relabels blocks so the rank finishing with block (r+1) ends with block r+shift. */
/* Allreduce on one rank: a copy, and the avg scaling (by 1). */
static ul_result_t single_rank_allreduce(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  UL_CHECK(copy_if_needed(x, a->recvbuf, a->sendbuf, a->count));
  if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
  return UL_OK;
}

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
  if (n == 1) return single_rank_allreduce(x);
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

/* Small messages with one synchronisation, when every rank's scratch is load/store
 * reachable (threads, or processes over shared memory): each rank stages its input in
 * its own scratch (a slot chosen by epoch), announces the epoch to every peer, waits
 * for theirs and reduces all n inputs straight from the peers' scratch, in rank order
 * (identical results everywhere). Staging makes the input private to the operation, so
 * there is no closing barrier: a rank rewrites a slot only once every peer has
 * acknowledged (DONE) the epoch that last used it. */
/* Where epoch k stages sb bytes, in every rank's scratch (a pure function of k and sb,
 * which all ranks share). Tiny operations rotate over UL__STAGE_SLOTS slots, so a rank
 * (a broadcast root, say) may run up to 16 operations ahead of its readers, which then
 * catch up without a context switch per operation when ranks outnumber cores; larger
 * ones alternate between the two halves by epoch parity. */
static void staging_slots(const ul__generic_t *g, uint64_t k, size_t sb, int *first, int *count) {
  if (sb <= g->oneshot_bytes * 2 / UL__STAGE_SLOTS) {
    *first = (int)(k % UL__STAGE_SLOTS);
    *count = 1;
  } else {
    *first = (int)(k & 1) * (UL__STAGE_SLOTS / 2);
    *count = UL__STAGE_SLOTS / 2;
  }
}

static size_t staging_offset(const ul__generic_t *g, uint64_t k, size_t sb) {
  int first, count;
  staging_slots(g, k, sb, &first, &count);
  return g->oneshot_off + (size_t)first * (g->oneshot_bytes * 2 / UL__STAGE_SLOTS);
}

/* Does rank r read rank q's staging in this small operation? A broadcast reads only the
 * root's; the others read every peer's. Signals go only where a read needs them: READY
 * from q to each reader, DONE from each reader back to q. Every rank knows the whole
 * pattern, so it counts how many signals each peer owes it (ready_expect, done_expect)
 * instead of numbering epochs: a broadcast costs the root n-1 signals and the others
 * one, not 2(n-1) each. */
static int staged_reads(const ul__coll_args_t *a, int r, int q) {
  return r != q && (a->coll != UL_COLL_BROADCAST || q == a->root);
}

/* Before this rank writes its staging for epoch k: every reader must have finished
 * reading whatever was staged last in those slots (its DONE count reached what it was
 * owed then). Usually already true (one load per peer); it bounds how far a rank runs
 * ahead of its readers. Then record what this operation's readers will owe. */
static ul_result_t staging_reusable(algo_ctx_t *x, uint64_t k, size_t sb) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me, first, count;
  staging_slots(g, k, sb, &first, &count);
  for (int i = 1; i < n; i++) {
    int p = (me + i) % n;
    uint64_t need = 0;
    for (int s = first; s < first + count; s++)
      if (g->slot_need[s * n + p] > need) need = g->slot_need[s * n + p];
    if (need) UL_CHECK(ul__gwait(g, UL__SIG_DONE(g, p), need, p, x->bs));
  }
  for (int p = 0; p < n; p++) {
    if (staged_reads(x->a, p, me)) g->done_expect[p]++;
    for (int s = first; s < first + count; s++) g->slot_need[s * n + p] = g->done_expect[p];
  }
  return UL_OK;
}

/* Signal idx to every peer that reads this rank's staging (readers = 1) or whose
 * staging this rank reads (readers = 0). */
static ul_result_t staged_signal(algo_ctx_t *x, int readers, int idx) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  for (int i = 1; i < n; i++) {
    int p = (me + i) % n;
    if (readers ? staged_reads(x->a, p, me) : staged_reads(x->a, me, p))
      UL_CHECK(x->o->signal(BC(x), g->win, p, idx, x->bs));
  }
  return UL_OK;
}

/* Tell this rank's readers its staging is written, and wait until the ranks it reads
 * from have written theirs. */
static ul_result_t staged_ready(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  UL_CHECK(staged_signal(x, 1, UL__SIG_READY(g, me)));
  for (int i = 1; i < n; i++) {
    int q = (me + n - i) % n;
    if (staged_reads(x->a, me, q))
      UL_CHECK(ul__gwait(g, UL__SIG_READY(g, q), ++g->ready_expect[q], q, x->bs));
  }
  return UL_OK;
}

/* Done reading: each rank read from may reuse its staging. */
static ul_result_t staged_done(algo_ctx_t *x) { return staged_signal(x, 0, UL__SIG_DONE(x->g, x->g->me)); }

static ul_result_t staged_oneshot_allreduce(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n;
  size_t bytes = a->count * x->esize;
  if (n == 1) return single_rank_allreduce(x);
  uint64_t k = ++g->oneshot_epoch;
  size_t boff = staging_offset(g, k, bytes);
  UL_CHECK(staging_reusable(x, k, bytes));
  UL_CHECK(COPY(x, (char *)g->scratch + boff, a->sendbuf, bytes));
  UL_CHECK(staged_ready(x));
  /* Our own input is read from the staged copy too: recvbuf may alias sendbuf. */
  UL_CHECK(REDUCE(x, a->recvbuf, (char *)g->peer_bases[0] + boff, (char *)g->peer_bases[1] + boff,
                  a->count));
  for (int r = 2; r < n; r++)
    UL_CHECK(REDUCE(x, a->recvbuf, a->recvbuf, (char *)g->peer_bases[r] + boff, a->count));
  UL_CHECK(staged_done(x));
  if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
  return UL_OK;
}

/* Bytes each rank stages for a small collective (what peers read from it). */
static size_t staged_bytes(const algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  size_t b = a->count * x->esize;
  if (a->coll == UL_COLL_ALLTOALL || a->coll == UL_COLL_REDUCE_SCATTER) b *= (size_t)x->g->n;
  return b;
}

/* The other small collectives on the same single-synchronisation staging as the
 * one-shot allreduce: stage the input, exchange epochs, read what we need from the
 * peers' staging buffers. */
static ul_result_t staged_small(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me;
  size_t sb = staged_bytes(x), cb = a->count * x->esize;
  uint64_t k = ++g->oneshot_epoch;
  size_t boff = staging_offset(g, k, sb);
  /* A broadcast reads only the root's staging: the root waits for nobody, the others
   * for the root alone (a root runs ahead as far as staging_reusable lets it). */
  if (a->coll != UL_COLL_BROADCAST || me == a->root) {
    UL_CHECK(staging_reusable(x, k, sb));
    UL_CHECK(COPY(x, (char *)g->scratch + boff, a->sendbuf, sb));
  }
  UL_CHECK(staged_ready(x));
#define STAGED(r) ((char *)g->peer_bases[r] + boff)
  switch (a->coll) {
  case UL_COLL_BROADCAST:
    UL_CHECK(COPY(x, a->recvbuf, STAGED(a->root), cb));
    break;
  case UL_COLL_ALLGATHER:
    for (int r = 0; r < n; r++) UL_CHECK(COPY(x, at(a->recvbuf, (size_t)r * a->count, x->esize), STAGED(r), cb));
    break;
  case UL_COLL_ALLTOALL:
    for (int r = 0; r < n; r++)
      UL_CHECK(COPY(x, at(a->recvbuf, (size_t)r * a->count, x->esize),
                    STAGED(r) + (size_t)me * cb, cb));
    break;
  case UL_COLL_REDUCE_SCATTER: {
    size_t o = (size_t)me * cb;
    if (n == 1) UL_CHECK(COPY(x, a->recvbuf, STAGED(0) + o, cb));
    else UL_CHECK(REDUCE(x, a->recvbuf, STAGED(0) + o, STAGED(1) + o, a->count));
    for (int r = 2; r < n; r++) UL_CHECK(REDUCE(x, a->recvbuf, a->recvbuf, STAGED(r) + o, a->count));
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
    break;
  }
  default:
    return ul__comm_set_error(x->c, UL_ERR_INTERNAL, "staged: unexpected collective");
  }
#undef STAGED
  return staged_done(x);
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

static ul_result_t direct_allreduce(algo_ctx_t *x) { return direct_reduce_family(x, DR_ALLREDUCE); }
static ul_result_t direct_reduce_scatter(algo_ctx_t *x) {
  return direct_reduce_family(x, DR_REDUCE_SCATTER);
}

/* ================================== selection ================================== */

/* What an algorithm needs of the communicator. */
enum {
  NEED_NONE = 0,
  NEED_DIRECT = 1, /* peers' user buffers reachable: load/store (threads) or single-copy */
  NEED_SHARED = 2, /* peers' scratch load/store reachable (shared memory) */
  NEED_LOAD_STORE = 3 /* peers' user buffers load/store reachable (threads) */
};

typedef struct algo_entry {
  ul_coll_t coll;
  const char *name;
  int needs;
  ul_result_t (*run)(algo_ctx_t *x);
} algo_entry_t;

/* In order of preference; the first one whose needs and size limits fit runs. */
static const algo_entry_t algorithms[] = {
    {UL_COLL_ALLREDUCE, "oneshot", NEED_SHARED, staged_oneshot_allreduce},
    {UL_COLL_ALLREDUCE, "direct", NEED_DIRECT, direct_allreduce},
    {UL_COLL_ALLREDUCE, "oneshot-channel", NEED_NONE, oneshot_allreduce},
    {UL_COLL_ALLREDUCE, "ring", NEED_NONE, ring_allreduce},
    {UL_COLL_REDUCE_SCATTER, "staged", NEED_SHARED, staged_small},
    {UL_COLL_REDUCE_SCATTER, "direct", NEED_DIRECT, direct_reduce_scatter},
    {UL_COLL_REDUCE_SCATTER, "ring", NEED_NONE, ring_reduce_scatter},
    {UL_COLL_ALLGATHER, "staged", NEED_SHARED, staged_small},
    {UL_COLL_ALLGATHER, "direct", NEED_DIRECT, direct_allgather},
    {UL_COLL_ALLGATHER, "ring", NEED_NONE, ring_allgather},
    {UL_COLL_BROADCAST, "staged", NEED_SHARED, staged_small},
    {UL_COLL_BROADCAST, "direct", NEED_DIRECT, direct_broadcast},
    {UL_COLL_BROADCAST, "tree", NEED_NONE, tree_broadcast},
    {UL_COLL_REDUCE, "direct", NEED_DIRECT, direct_reduce},
    {UL_COLL_REDUCE, "tree", NEED_NONE, tree_reduce},
    {UL_COLL_ALLTOALL, "staged", NEED_SHARED, staged_small},
    {UL_COLL_ALLTOALL, "direct", NEED_DIRECT, direct_alltoall},
    {UL_COLL_ALLTOALL, "pairwise", NEED_NONE, pairwise_alltoall},
    {UL_COLL_GATHER, "direct", NEED_DIRECT, direct_gather},
    {UL_COLL_GATHER, "linear", NEED_NONE, linear_gather},
    {UL_COLL_SCATTER, "direct", NEED_DIRECT, direct_scatter},
    {UL_COLL_SCATTER, "linear", NEED_NONE, linear_scatter},
    {UL_COLL_BARRIER, "signal", NEED_NONE, signal_barrier},
    {UL_COLL_ALLTOALLV, "direct", NEED_LOAD_STORE, ul__direct_alltoallv},
    {UL_COLL_ALLTOALLV, "pairwise", NEED_NONE, ul__pairwise_alltoallv},
    {UL_COLL_ALLGATHERV, "direct", NEED_LOAD_STORE, ul__direct_allgatherv},
    {UL_COLL_ALLGATHERV, "pairwise", NEED_NONE, ul__pairwise_allgatherv},
};
#define NALGOS (sizeof algorithms / sizeof algorithms[0])

int ul__generic_algo_known(ul_coll_t coll, const char *name) {
  for (size_t i = 0; i < NALGOS; i++)
    if (algorithms[i].coll == coll && strcmp(algorithms[i].name, name) == 0) return 1;
  return 0;
}

static int is_oneshot(const algo_entry_t *e) {
  return e->run == oneshot_allreduce || e->run == staged_oneshot_allreduce ||
         e->run == staged_small;
}

/* Aliases the ring/tree vocabulary users know from NCCL: a request for "ring" on a
 * collective whose channel algorithm has another name maps to it. */
static const algo_entry_t *find_algo(ul_coll_t coll, const char *name) {
  for (size_t i = 0; i < NALGOS; i++)
    if (algorithms[i].coll == coll && strcmp(algorithms[i].name, name) == 0) return &algorithms[i];
  if (strcmp(name, "ring") == 0 || strcmp(name, "generic") == 0)
    for (size_t i = 0; i < NALGOS; i++)
      if (algorithms[i].coll == coll && algorithms[i].needs == NEED_NONE &&
          !is_oneshot(&algorithms[i]))
        return &algorithms[i];
  return NULL;
}

static int needs_met(const ul__generic_t *g, int needs) {
  if (needs == NEED_DIRECT) return g->load_store || g->cma;
  if (needs == NEED_SHARED) return g->shared_scratch;
  if (needs == NEED_LOAD_STORE) return g->load_store;
  return 1;
}

/* Largest message each one-shot handles (staged_small: counted in staged bytes). The
 * one-shot allreduce has every rank reduce all n inputs: n^2 x bytes of reads in all,
 * against n x bytes for direct. With a core per rank that runs in parallel; with ranks
 * outnumbering cores it runs in turn, so the limit shrinks by (cores/ranks)^2 (4 ranks
 * on 2 cores: 8 KiB; measured in docs/performance.md). */
static size_t oneshot_capacity(const ul__generic_t *g, const algo_entry_t *e) {
  if (e->run == staged_oneshot_allreduce || e->run == staged_small) return g->oneshot_bytes;
  return g->chunk_bytes < 64 * 1024 ? g->chunk_bytes : 64 * 1024;
}

static size_t oneshot_limit(const ul__generic_t *g, const algo_entry_t *e) {
  if (e->run == staged_oneshot_allreduce && g->n > g->ncpu) {
    double f = (double)g->ncpu / g->n;
    return (size_t)((double)g->oneshot_bytes * f * f) & ~(size_t)63;
  }
  return oneshot_capacity(g, e);
}

/* Every rank passes the same zero count: nothing to move and nothing to wait for (as
 * NCCL and MPI do). */
static ul_result_t zero_count_call(ul_call_info_t *info) {
  ul__copy_str(info->algorithm, sizeof info->algorithm, "none");
  ul__copy_str(info->reason, sizeof info->reason, "zero elements: no data, no synchronisation");
  return UL_OK;
}

/* Why the selection loop picked @p al for @p bytes, kept in g->reason until either
 * changes. */
static void selection_reason(algo_ctx_t *x, const algo_entry_t *al, size_t bytes) {
  ul__generic_t *g = x->g;
  char *r = g->reason;
  size_t rl = sizeof g->reason;
  char over[64] = ""; /* why not the one-shot allreduce */
  if (x->a->coll == UL_COLL_ALLREDUCE && g->shared_scratch && g->oneshot_bytes)
    snprintf(over, sizeof over, "%zu bytes > %zu one-shot limit; ", bytes,
             oneshot_limit(g, find_algo(UL_COLL_ALLREDUCE, "oneshot")));
  if (al->run == staged_oneshot_allreduce || al->run == staged_small)
    snprintf(r, rl,
             "%zu bytes <= %zu (UNILINK_ONESHOT_BYTES%s): staged in shared scratch, one "
             "synchronisation",
             al->run == staged_small ? staged_bytes(x) : bytes, oneshot_limit(g, al),
             oneshot_limit(g, al) < g->oneshot_bytes ? " x (cores/ranks)^2" : "");
  else if ((al->needs == NEED_DIRECT || al->needs == NEED_LOAD_STORE) && g->load_store)
    snprintf(r, rl, "%sranks share an address space: direct reads/writes of peers' buffers%s",
             over, x->host && bytes >= UL__NT_MIN_BYTES ? ", streaming stores" : "");
  else if (al->needs == NEED_DIRECT)
    snprintf(r, rl,
             "%sprocess ranks: single-copy reads/writes of peers' buffers with "
             "process_vm_readv/writev",
             over);
  else if (x->a->coll == UL_COLL_BARRIER)
    snprintf(r, rl, "barrier: one signal to every peer, then wait for theirs (the only "
                    "barrier of the generic layer)");
  else if (x->a->coll == UL_COLL_ALLREDUCE)
    snprintf(r, rl, "%zu bytes %s %zu through scratch channels", bytes,
             is_oneshot(al) ? "<=" : ">",
             oneshot_limit(g, find_algo(UL_COLL_ALLREDUCE, "oneshot-channel")));
  else
    snprintf(r, rl, "peers not load/store reachable (path %s)", x->c->props.path);
  g->reason_algo = al;
  g->reason_bytes = bytes;
}

static ul_result_t generic_collective(ul_comm_t comm, const ul__coll_args_t *a, const char *forced,
                                      ul_backend_stream_t *bs, ul_call_info_t *info) {
  ul__generic_t *g = comm->generic;
  algo_ctx_t x = {g, comm, &comm->backend->ops, a, bs, ul_dtype_size(a->dtype),
                  a->op == UL_AVG ? UL_SUM : a->op,
                  (comm->backend->caps.flags & UL_BACKEND_HOST_MEMORY) != 0, 0, 0, 0};
  if (a->coll == UL_COLL_BARRIER) x.esize = 1;
  g->seq = comm->seq;
  g->opname = ul_coll_name(a->coll);
  size_t bytes = a->count * x.esize;
  /* alike on every rank */
  int zero = ul__is_vcoll(a->coll) ? ul__vcoll_zero(a, comm->nranks)
                                   : a->coll != UL_COLL_BARRIER && a->count == 0;
  const algo_entry_t *al = NULL;
  if (forced) {
    al = find_algo(a->coll, forced);
    if (!al)
      return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                                "UNILINK_ALGO asks for algorithm '%s' for %s, which the generic "
                                "layer does not have",
                                forced, ul_coll_name(a->coll));
    if (!needs_met(g, al->needs))
      return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                                "UNILINK_ALGO asks for '%s' for %s, but ranks of this "
                                "communicator cannot %s (path %s)",
                                forced, ul_coll_name(a->coll),
                                al->needs == NEED_SHARED
                                    ? "load/store each other's scratch memory"
                                : al->needs == NEED_LOAD_STORE
                                    ? "load/store each other's buffers (thread ranks only)"
                                    : "reach each other's buffers (no shared address space, no "
                                      "process_vm_readv)",
                                comm->props.path);
    if (is_oneshot(al) && (al->run == staged_small ? staged_bytes(&x) : bytes) > oneshot_capacity(g, al))
      return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                                "UNILINK_ALGO asks for '%s' allreduce of %zu bytes; it "
                                "handles at most %zu",
                                al->name, bytes, oneshot_capacity(g, al));
    if (zero) return zero_count_call(info);
    ul__copy_str(info->reason, sizeof info->reason, "forced by UNILINK_ALGO");
  } else {
    if (zero) return zero_count_call(info); /* no selection: this is all such a call costs */
    for (size_t i = 0; i < NALGOS && !al; i++) {
      const algo_entry_t *e = &algorithms[i];
      if (e->coll != a->coll) continue;
      if (!needs_met(g, e->needs)) continue;
      if (is_oneshot(e) && (e->run == staged_small ? staged_bytes(&x) : bytes) > oneshot_limit(g, e))
        continue;
      al = e;
    }
    if (!al) return ul__comm_set_error(comm, UL_ERR_INTERNAL, "no generic algorithm for %s",
                                       ul_coll_name(a->coll));
    if (g->reason_algo != al || g->reason_bytes != bytes) selection_reason(&x, al, bytes);
    ul__copy_str(info->reason, sizeof info->reason, g->reason);
  }
  /* Which data path this call took. */
  if (al->needs == NEED_DIRECT && !g->load_store) {
    x.cma = 1;
    ul__copy_str(info->path, sizeof info->path, "cma");
  } else if (!g->load_store && g->shared_scratch && a->coll != UL_COLL_BARRIER) {
    ul__copy_str(info->path, sizeof info->path, "shm-copy");
  }
  ul__copy_str(info->algorithm, sizeof info->algorithm, al->name);
  ul_result_t rc = al->run(&x);
  if (x.cma && g->zpeers > 0) {
    ul__copy_str(info->path, sizeof info->path, x.zc ? "zero-copy" : "zero-copy+cma");
    if (!forced)
      ul__copy_str(info->reason, sizeof info->reason,
                   x.zc ? "process ranks: all peers' buffers from ul_mem_alloc mapped and "
                          "read/written in place"
                        : "process ranks: some peers' buffers from ul_mem_alloc mapped and "
                          "read/written in place, the others single-copy "
                          "(process_vm_readv/writev)");
  }
  return rc;
}

ul_result_t ul__generic_collective(ul_comm_t comm, const ul__coll_args_t *a, const char *forced,
                                   ul_backend_stream_t *bs, ul_call_info_t *info) {
  ul__generic_t *g = comm->generic;
  if (!g)
    return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                              "%s: backend %s has neither a native implementation nor the "
                              "primitives of the generic layer",
                              ul_coll_name(a->coll), comm->backend->ops.name);
  /* Every rank calls every collective in order: the count is the same everywhere. */
  g->coll_seq++;
  if (g->shared_scratch)
    __atomic_store_n(&((ul__mailbox_t *)g->scratch)->entered, g->coll_seq, __ATOMIC_RELEASE);
  g->in_coll = 1;
  ul_result_t rc = generic_collective(comm, a, forced, bs, info);
  g->in_coll = 0;
  return rc;
}
