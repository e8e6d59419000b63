/* Argument checks of every data-movement call, before anything reaches a backend.
 * Each failed rule returns UL_ERR_INVALID_ARG with a sentence naming the argument. */
#include <stdio.h>
#include <stdlib.h>

#include "ul_core.h"

static int mul_overflows(size_t a, size_t b, size_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

#define FAIL(...) return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, __VA_ARGS__)

ul_result_t ul__validate_coll(ul_comm_t comm, const ul__coll_args_t *a, ul_stream_t stream) {
  const char *name = ul_coll_name(a->coll);
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, name ? name : "call");
  if (stream != NULL) {
    if (stream->magic != UL__STREAM_MAGIC) FAIL("ul_%s: stream is not a live ul_stream_t", name);
    if (stream->comm != comm)
      FAIL("ul_%s: stream belongs to another communicator (streams are per communicator)", name);
  }
  int n = comm->nranks, me = comm->rank;
  if (a->coll == UL_COLL_BARRIER) return UL_OK;
  if (!ul__dtype_valid(a->dtype)) FAIL("ul_%s: dtype %d is not a ul_dtype_t", name, (int)a->dtype);
  if (ul__is_vcoll(a->coll)) return ul__validate_vcoll(comm, a);
  int reducing = a->coll == UL_COLL_ALLREDUCE || a->coll == UL_COLL_REDUCE ||
                 a->coll == UL_COLL_REDUCE_SCATTER;
  if (reducing && !ul__op_valid(a->op)) FAIL("ul_%s: op %d is not a ul_op_t", name, (int)a->op);
  int rooted = a->coll == UL_COLL_BROADCAST || a->coll == UL_COLL_REDUCE ||
               a->coll == UL_COLL_GATHER || a->coll == UL_COLL_SCATTER;
  if (rooted && (a->root < 0 || a->root >= n))
    FAIL("ul_%s: root %d is outside [0, %d)", name, a->root, n);
  if (a->coll == UL_COLL_SENDRECV && (a->peer < 0 || a->peer >= n))
    FAIL("ul_send/ul_recv: peer %d is outside [0, %d)", a->peer, n);
  size_t es = ul_dtype_size(a->dtype), b, nb;
  if (mul_overflows(a->count, es, &b))
    FAIL("ul_%s: count %zu x %zu-byte %s overflows size_t", name, a->count, es,
         ul_dtype_name(a->dtype));
  int multi = a->coll == UL_COLL_ALLGATHER || a->coll == UL_COLL_REDUCE_SCATTER ||
              a->coll == UL_COLL_ALLTOALL || a->coll == UL_COLL_GATHER ||
              a->coll == UL_COLL_SCATTER;
  if (mul_overflows(b, (size_t)n, &nb)) {
    if (multi) FAIL("ul_%s: count %zu x %d ranks x %zu bytes overflows size_t", name, a->count, n, es);
    nb = SIZE_MAX;
  }
  if (a->count == 0) return UL_OK;
  int is_root = rooted && me == a->root;
  /* Which buffers this rank uses, and their lengths. */
  int need_send = 1, need_recv = 1;
  size_t slen = b, rlen = b;
  switch (a->coll) {
    case UL_COLL_BROADCAST: need_send = is_root; break;
    case UL_COLL_REDUCE: need_recv = is_root; break;
    case UL_COLL_ALLGATHER: rlen = nb; break;
    case UL_COLL_REDUCE_SCATTER: slen = nb; break;
    case UL_COLL_ALLTOALL: slen = rlen = nb; break;
    case UL_COLL_GATHER: need_recv = is_root; rlen = nb; break;
    case UL_COLL_SCATTER: need_send = is_root; slen = nb; break;
    case UL_COLL_SENDRECV: need_recv = 0; break; /* sendbuf carries the one buffer */
    default: break;
  }
  if (need_send && a->sendbuf == NULL)
    FAIL("ul_%s: %s is NULL with count %zu", name, a->coll == UL_COLL_SENDRECV ? "buf" : "sendbuf",
         a->count);
  if (need_recv && a->recvbuf == NULL) FAIL("ul_%s: recvbuf is NULL with count %zu", name, a->count);
  if (need_send)
    UL_CHECK(ul__check_reachable(comm, name, a->coll == UL_COLL_SENDRECV ? "buf" : "sendbuf",
                                 a->sendbuf, slen));
  if (need_recv) UL_CHECK(ul__check_reachable(comm, name, "recvbuf", a->recvbuf, rlen));
  if (!need_send || !need_recv) return UL_OK;
  /* In-place rules (NCCL's pointer aliasing); any other overlap is an error. */
  const char *s = a->sendbuf, *r = a->recvbuf;
  const char *inplace_rule = NULL;
  switch (a->coll) {
    case UL_COLL_ALLREDUCE:
    case UL_COLL_BROADCAST:
    case UL_COLL_REDUCE:
      if (s == r) return UL_OK;
      inplace_rule = "in place needs sendbuf == recvbuf";
      break;
    case UL_COLL_ALLGATHER:
      if (s == r + (size_t)me * b) return UL_OK;
      inplace_rule = "in place needs sendbuf == recvbuf + rank * count * size";
      break;
    case UL_COLL_REDUCE_SCATTER:
      if (r == s + (size_t)me * b) return UL_OK;
      inplace_rule = "in place needs recvbuf == sendbuf + rank * recvcount * size";
      break;
    case UL_COLL_GATHER:
      if (s == r + (size_t)a->root * b) return UL_OK;
      inplace_rule = "in place needs sendbuf == recvbuf + root * count * size";
      break;
    case UL_COLL_SCATTER:
      if (r == s + (size_t)a->root * b) return UL_OK;
      inplace_rule = "in place needs recvbuf == sendbuf + root * count * size";
      break;
    case UL_COLL_ALLTOALL:
      if (n == 1 && s == r) return UL_OK;
      inplace_rule = "alltoall cannot run in place";
      break;
    default: break;
  }
  if (ul__overlap(s, slen, r, rlen))
    FAIL("ul_%s: sendbuf [%p, +%zu) and recvbuf [%p, +%zu) overlap (%s)", name, (const void *)s,
         slen, (const void *)r, rlen, inplace_rule ? inplace_rule : "buffers must not overlap");
  return UL_OK;
}

/* ------------------------------------------------------- vector collectives */

typedef struct vblk {
  size_t lo, hi; /* byte range [lo, hi) relative to the buffer */
  int rank;
} vblk_t;

static int vblk_cmp(const void *x, const void *y) {
  const vblk_t *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo ? 1 : a->rank - b->rank;
}

/* Byte ranges of the nonzero blocks counts[j] at displs[j] (elements of es bytes) into
 * out[0..*nb), and the extent [*lo, *hi) they span (0, 0 when none). */
static ul_result_t vblocks(ul_comm_t comm, const char *name, const char *cname,
                           const char *dname, const size_t *counts, const size_t *displs,
                           size_t es, vblk_t *out, int *nb, size_t *lo, size_t *hi) {
  *nb = 0, *lo = SIZE_MAX, *hi = 0;
  for (int j = 0; j < comm->nranks; j++) {
    size_t end, b0, b1;
    if (counts[j] == 0) continue;
    if (__builtin_add_overflow(displs[j], counts[j], &end) || mul_overflows(end, es, &b1) ||
        mul_overflows(displs[j], es, &b0))
      FAIL("ul_%s: %s[%d] %zu + %s[%d] %zu elements of %zu bytes overflow size_t", name, dname, j,
           displs[j], cname, j, counts[j], es);
    out[(*nb)++] = (vblk_t){b0, b1, j};
    if (b0 < *lo) *lo = b0;
    if (b1 > *hi) *hi = b1;
  }
  if (*nb == 0) *lo = 0;
  return UL_OK;
}

/* Receive blocks must not overlap: two peers would write the same bytes. */
static ul_result_t vblocks_disjoint(ul_comm_t comm, const char *name, const char *cname,
                                    const char *dname, vblk_t *b, int nb) {
  qsort(b, (size_t)nb, sizeof *b, vblk_cmp);
  for (int i = 1; i < nb; i++)
    if (b[i].lo < b[i - 1].hi)
      FAIL("ul_%s: receive blocks of ranks %d and %d overlap (%s/%s give bytes [%zu, %zu) and "
           "[%zu, %zu) of recvbuf)",
           name, b[i - 1].rank, b[i].rank, cname, dname, b[i - 1].lo, b[i - 1].hi, b[i].lo,
           b[i].hi);
  return UL_OK;
}

static ul_result_t validate_vcoll(ul_comm_t comm, const ul__coll_args_t *a, vblk_t *blk) {
  const char *name = ul_coll_name(a->coll);
  int me = comm->rank, nb;
  size_t es = ul_dtype_size(a->dtype), slo = 0, shi = 0, rlo, rhi;
  const char *rc_name = "recvcounts";
  const char *rd_name = a->coll == UL_COLL_ALLTOALLV ? "rdispls" : "displs";
  if (a->coll == UL_COLL_ALLTOALLV) {
    if (!a->scounts) FAIL("ul_%s: sendcounts is NULL", name);
    if (!a->sdispls) FAIL("ul_%s: sdispls is NULL", name);
  }
  if (!a->rcounts) FAIL("ul_%s: recvcounts is NULL", name);
  if (!a->rdispls) FAIL("ul_%s: %s is NULL", name, rd_name);
  if (a->coll == UL_COLL_ALLTOALLV) {
    if (a->scounts[me] != a->rcounts[me])
      FAIL("ul_%s: sendcounts[%d] is %zu but recvcounts[%d] is %zu (the block a rank sends "
           "itself)",
           name, me, a->scounts[me], me, a->rcounts[me]);
    UL_CHECK(vblocks(comm, name, "sendcounts", "sdispls", a->scounts, a->sdispls, es, blk, &nb,
                     &slo, &shi));
  } else {
    if (a->rcounts[me] != a->count)
      FAIL("ul_%s: recvcounts[%d] is %zu but this rank's sendcount is %zu", name, me,
           a->rcounts[me], a->count);
    if (mul_overflows(a->count, es, &shi))
      FAIL("ul_%s: sendcount %zu x %zu bytes overflows size_t", name, a->count, es);
  }
  UL_CHECK(vblocks(comm, name, rc_name, rd_name, a->rcounts, a->rdispls, es, blk, &nb, &rlo, &rhi));
  UL_CHECK(vblocks_disjoint(comm, name, rc_name, rd_name, blk, nb));
  int need_send = shi > slo, need_recv = rhi > rlo;
  if (need_send && a->sendbuf == NULL) FAIL("ul_%s: sendbuf is NULL with data to send", name);
  if (need_recv && a->recvbuf == NULL) FAIL("ul_%s: recvbuf is NULL with data to receive", name);
  const char *s = need_send ? (const char *)a->sendbuf + slo : NULL;
  char *r = need_recv ? (char *)a->recvbuf + rlo : NULL;
  if (need_send) UL_CHECK(ul__check_reachable(comm, name, "sendbuf", s, shi - slo));
  if (need_recv) UL_CHECK(ul__check_reachable(comm, name, "recvbuf", r, rhi - rlo));
  if (!need_send || !need_recv) return UL_OK;
  if (a->coll == UL_COLL_ALLGATHERV &&
      (const char *)a->sendbuf == (char *)a->recvbuf + a->rdispls[me] * es)
    return UL_OK;
  if (ul__overlap(s, shi - slo, r, rhi - rlo))
    FAIL("ul_%s: the send range [%p, +%zu) and the receive range [%p, +%zu) overlap (%s)", name,
         (const void *)s, shi - slo, (const void *)r, rhi - rlo,
         a->coll == UL_COLL_ALLTOALLV
             ? "alltoallv cannot run in place"
             : "in place needs sendbuf == recvbuf + displs[rank] * size");
  return UL_OK;
}

ul_result_t ul__validate_vcoll(ul_comm_t comm, const ul__coll_args_t *a) {
  vblk_t small[64];
  vblk_t *blk = comm->nranks <= 64 ? small : malloc((size_t)comm->nranks * sizeof *blk);
  if (!blk)
    return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_%s: out of memory checking the counts",
                              ul_coll_name(a->coll));
  ul_result_t rc = validate_vcoll(comm, a, blk);
  if (blk != small) free(blk);
  return rc;
}
