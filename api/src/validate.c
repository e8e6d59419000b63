/* Argument checks of every data-movement call, before anything reaches a backend.
 * Each failed rule returns UL_ERR_INVALID_ARG with a sentence naming the argument. */
#include <stdio.h>

#include "ul_core.h"

static int mul_overflows(size_t a, size_t b, size_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

#define FAIL(...) return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, __VA_ARGS__)

ul_result_t ul__validate_coll(ul_comm_t comm, const ul__coll_args_t *a, ul_stream_t stream) {
  const char *name = ul_coll_name(a->coll);
  if (!ul__comm_valid(comm))
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_%s: comm is NULL or not a live communicator",
                                name ? name : "call");
  if (stream != NULL) {
    if (stream->magic != UL__STREAM_MAGIC) FAIL("ul_%s: stream is not a live ul_stream_t", name);
    if (stream->comm != comm)
      FAIL("ul_%s: stream belongs to another communicator (streams are per communicator)", name);
  }
  int n = comm->nranks, me = comm->rank;
  if (a->coll == UL_COLL_BARRIER) return UL_OK;
  if (!ul__dtype_valid(a->dtype)) FAIL("ul_%s: dtype %d is not a ul_dtype_t", name, (int)a->dtype);
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
