/* Direct algorithms: every rank reads and writes its peers' user buffers itself, by
 * load/store (threads, or processes whose buffers are mapped: zero-copy) or single-copy
 * system calls (process_vm_readv/writev). Two barriers per call, no staging. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

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

/* A copy with peer `peer` failed with EFAULT (its buffer vanished: it left the operation,
 * typically because it saw another rank die first) or ESRCH (it is gone). Ask the
 * backend which ranks are lost -- its liveness check (pidfd on host and mpi) sees an
 * exited rank even while it is an unreaped zombie, which kill(pid, 0) does not -- and
 * name them: UL_ERR_PEER_LOST. UL_OK when none is known lost (the caller reports the
 * system error). */
static ul_result_t cma_lost_peer(algo_ctx_t *x, int peer, int write, int err) {
  const ul_backend_ops_t *o = &x->c->backend->ops;
  int lost[64], nlost = 0;
  if (ul__op_is_stub((const void *)o->comm_failed_ranks) ||
      o->comm_failed_ranks(x->c->bcomm, lost, 64, &nlost) != UL_OK || nlost <= 0) {
    if (err != ESRCH) return UL_OK;
    lost[0] = peer; /* the kernel says the peer's process is gone */
    nlost = 1;
  }
  char names[160] = "";
  size_t used = 0;
  for (int k = 0; k < nlost && k < 64 && used + 16 < sizeof names; k++)
    used += (size_t)snprintf(names + used, sizeof names - used, "%srank %d (pid %d)",
                             k ? ", " : "", lost[k], (int)ul__mailbox(x->g, lost[k])->pid);
  return ul__comm_set_error(
      x->c, UL_ERR_PEER_LOST,
      "%s #%llu: peer %s lost (aborted, destroyed its communicator or exited); %s rank %d "
      "failed: %s",
      x->g->opname ? x->g->opname : "operation", (unsigned long long)x->g->seq, names,
      write ? "process_vm_writev to" : "process_vm_readv from", peer, strerror(err));
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
      if (err == EFAULT || err == ESRCH) {
        ul_result_t lost = cma_lost_peer(x, peer, write, err);
        if (lost != UL_OK) return lost;
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

UL__HIDDEN ul_result_t ul__direct_reduce(algo_ctx_t *x) {
  return direct_reduce_family(x, DR_REDUCE);
}

UL__HIDDEN ul_result_t ul__direct_allgather(algo_ctx_t *x) {
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

UL__HIDDEN ul_result_t ul__direct_broadcast(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x));
  const void *src = g->me == a->root ? a->sendbuf : ul__mailbox(g, a->root)->send;
  UL_CHECK(pull(x, a->root, a->recvbuf, src, a->count * x->esize));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

UL__HIDDEN ul_result_t ul__direct_alltoall(algo_ctx_t *x) {
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

UL__HIDDEN ul_result_t ul__direct_gather(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x));
  void *rr = g->me == a->root ? a->recvbuf : ul__mailbox(g, a->root)->recv;
  void *dst = at(rr, (size_t)g->me * a->count, x->esize);
  UL_CHECK(push(x, a->root, dst, a->sendbuf, a->count * x->esize, 0));
  return ul__generic_barrier(x->c, x->bs, NULL);
}

UL__HIDDEN ul_result_t ul__direct_scatter(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  UL_CHECK(publish(x));
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
