/* Data movement of the host backend: put/get are memcpy through the peer's mapping
 * (glibc picks non-temporal stores for large copies; the seq_cst add of the following
 * signal orders them), signals are atomic adds on the peer's counter, local ops call
 * the core's kernels. Every call completes before it returns (stream is always NULL:
 * the core runs host streams on worker threads). */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "host.h"

static ul_result_t host_p2p_range(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                                  size_t offset, size_t bytes, const char *op) {
  if (peer < 0 || peer >= w->nranks)
    return ul_backend_set_error(c->handle, UL_ERR_INVALID_ARG, "host: %s to peer %d of %d ranks",
                                op, peer, w->nranks);
  size_t size = w->peer_sizes[peer];
  if (offset > size || bytes > size - offset)
    return ul_backend_set_error(c->handle, UL_ERR_INVALID_ARG,
                                "host: %s of %zu bytes at offset %zu is outside peer %d's window "
                                "of %zu bytes",
                                op, bytes, offset, peer, size);
  return UL_OK;
}

ul_result_t host_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t offset,
                     const void *src, size_t bytes, ul_backend_stream_t *s) {
  (void)s;
  UL_CHECK(host_p2p_range(c, w, peer, offset, bytes, "put"));
  if (bytes) memcpy((char *)w->peer_bases[peer] + offset, src, bytes);
  return UL_OK;
}

ul_result_t host_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t offset,
                     void *dst, size_t bytes, ul_backend_stream_t *s) {
  (void)s;
  UL_CHECK(host_p2p_range(c, w, peer, offset, bytes, "get"));
  if (bytes) memcpy(dst, (const char *)w->peer_bases[peer] + offset, bytes);
  return UL_OK;
}

static ul_result_t host_p2p_index(ul_backend_comm_t *c, ul_backend_window_t *w, int index) {
  if (index < 0 || index >= w->nsig)
    return ul_backend_set_error(c->handle, UL_ERR_INVALID_ARG,
                                "host: signal index %d outside the window's %d signals", index,
                                w->nsig);
  return UL_OK;
}

ul_result_t host_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                        ul_backend_stream_t *s) {
  (void)s;
  if (peer < 0 || peer >= w->nranks)
    return ul_backend_set_error(c->handle, UL_ERR_INVALID_ARG,
                                "host: signal to peer %d of %d ranks", peer, w->nranks);
  UL_CHECK(host_p2p_index(c, w, index));
  host_slot_add(&w->sig[(size_t)peer * (size_t)w->nsig + (size_t)index], 1, w->futex_shared);
  return UL_OK;
}

ul_result_t host_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                             uint64_t value, ul_backend_stream_t *s) {
  (void)s;
  UL_CHECK(host_p2p_index(c, w, index));
  host_slot_t *slot = &w->sig[(size_t)w->self * (size_t)w->nsig + (size_t)index];
  /* host_wait_geq's checks when nothing is left to wait for, without setting up a wait:
   * first that no peer aborted (a value reached before a peer aborted does not make its
   * staged data valid), then the value. The generic layer makes this check before every
   * small collective. */
  if ((!c->ctrl || host_aborted_peer(c->ctrl, c->nranks, c->rank) < 0) &&
      atomic_load_explicit(&slot->value, memory_order_acquire) >= value)
    return UL_OK;
  host_waiter_t wt;
  host_waiter_for_comm(c, &wt, 0);
  wt.shared = w->futex_shared;
  host_wait_fail_t fail;
  ul_result_t rc = host_wait_geq(&wt, slot, value, 1, &fail);
  if (rc == UL_OK) return UL_OK;
  char what[160];
  snprintf(what, sizeof what, "waiting for signal %d of its window to reach %llu (it is %llu)",
           index, (unsigned long long)value,
           (unsigned long long)atomic_load(&slot->value));
  return host_wait_error(c, rc, &fail, what);
}

ul_result_t host_wait_word(ul_backend_comm_t *c, ul_backend_window_t *w, size_t offset,
                           uint64_t value, ul_backend_stream_t *s) {
  (void)s;
  UL_CHECK(host_p2p_range(c, w, w->self, offset, sizeof(uint64_t), "wait_word"));
  if (offset % sizeof(uint64_t))
    return ul_backend_set_error(c->handle, UL_ERR_INVALID_ARG,
                                "host: wait_word at offset %zu, not a multiple of 8", offset);
  const _Atomic uint64_t *word =
      (const _Atomic uint64_t *)(const void *)((const char *)w->peer_bases[w->self] + offset);
  host_waiter_t wt;
  host_waiter_for_comm(c, &wt, 0);
  host_wait_fail_t fail;
  ul_result_t rc = host_wait_word_geq(&wt, word, value, &fail);
  if (rc == UL_OK) return UL_OK;
  char what[160];
  snprintf(what, sizeof what, "waiting for the word at offset %zu of its window to reach %llu "
           "(it is %llu)", offset, (unsigned long long)value,
           (unsigned long long)atomic_load_explicit(word, memory_order_relaxed));
  return host_wait_error(c, rc, &fail, what);
}

ul_result_t host_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                             uint64_t *value) {
  UL_CHECK(host_p2p_index(c, w, index));
  /* Pollers (the generic point-to-point loop) learn of a revoke here. */
  if (atomic_load_explicit(&c->ctrl->revoked, memory_order_acquire))
    return ul_backend_set_error(c->handle, UL_ERR_REVOKED,
                                "host: rank %d: the communicator was revoked (ul_comm_revoke on "
                                "some rank); shrink or destroy it",
                                c->rank);
  *value = atomic_load_explicit(&w->sig[(size_t)w->self * (size_t)w->nsig + (size_t)index].value,
                                memory_order_acquire);
  return UL_OK;
}

ul_result_t host_reduce_local(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                              size_t count, ul_dtype_t dtype, ul_op_t op,
                              ul_backend_stream_t *s) {
  (void)s;
  ul_result_t rc = ul_reduce_local(dst, a, b, count, dtype, op);
  if (rc != UL_OK)
    return ul_backend_set_error(c->handle, rc, "host: local reduction of %zu %s with %s failed",
                                count, ul_dtype_name(dtype) ? ul_dtype_name(dtype) : "?",
                                ul_op_name(op) ? ul_op_name(op) : "?");
  return UL_OK;
}

ul_result_t host_reduce_stream(ul_backend_comm_t *c, void *const *dst, int ndst, const void *a,
                               const void *b, size_t count, ul_dtype_t dtype, ul_op_t op,
                               ul_backend_stream_t *s) {
  (void)s;
  ul_result_t rc = ul_reduce_stream_local(dst, ndst, a, b, count, dtype, op);
  if (rc != UL_OK)
    return ul_backend_set_error(c->handle, rc,
                                "host: streaming reduction of %zu %s with %s into %d outputs "
                                "failed",
                                count, ul_dtype_name(dtype) ? ul_dtype_name(dtype) : "?",
                                ul_op_name(op) ? ul_op_name(op) : "?", ndst);
  return UL_OK;
}

ul_result_t host_scale_avg(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                           int nranks, ul_backend_stream_t *s) {
  (void)s;
  ul_result_t rc = ul_scale_avg_local(buf, count, dtype, nranks);
  if (rc != UL_OK)
    return ul_backend_set_error(c->handle, rc, "host: avg scaling of %zu %s by %d failed", count,
                                ul_dtype_name(dtype) ? ul_dtype_name(dtype) : "?", nranks);
  return UL_OK;
}

ul_result_t host_copy_local(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                            ul_backend_stream_t *s) {
  (void)c;
  (void)s;
  if (bytes && dst != src) memcpy(dst, src, bytes);
  return UL_OK;
}
