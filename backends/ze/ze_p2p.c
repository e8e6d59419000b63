/* ze backend: one-sided operations (put, get, signals) and the local math of the
 * generic layer (host-staged reductions, copies). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "ze_internal.h"

ul_result_t ze_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                          const void *src, size_t bytes, ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  ze_peer_win_t *pw = &w->peers[peer];
  if (!pw->dev)
    return ul_backend_set_error(c->core, UL_ERR_INVALID_USAGE,
                                "ze backend: rank %d's window is empty", peer);
  return ze_copy_on(c, (char *)pw->dev + off, src, bytes, s, "zeCommandListAppendMemoryCopy (put)");
}

ul_result_t ze_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                          void *dst, size_t bytes, ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  ze_peer_win_t *pw = &w->peers[peer];
  if (!pw->dev)
    return ul_backend_set_error(c->core, UL_ERR_INVALID_USAGE,
                                "ze backend: rank %d's window is empty", peer);
  return ze_copy_on(c, dst, (char *)pw->dev + off, bytes, s, "zeCommandListAppendMemoryCopy (get)");
}

ul_result_t ze_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                             ul_backend_stream_t *s) {
  ze_peer_win_t *pw = &w->peers[peer];
  int ev;
  ul_result_t rc = ze_event_get(c, &ev);
  if (rc != UL_OK) return rc;
  struct ul_backend_stream *st = ze_lock(c, s);
  /* The barrier signals ev after every earlier command of the list completed. */
  ze_result_t r = zeCommandListAppendBarrier(st->list, c->ev[ev], 0, NULL);
  if (r != ZE_RESULT_SUCCESS) {
    ze_unlock(st);
    ze_event_put(c, ev);
    return ze_fail(c, "zeCommandListAppendBarrier (signal)", r);
  }
  st->dirty = 0;
  st->ops++;
  ze_pend_add(c, ev, (_Atomic uint64_t *)(pw->seg) + (size_t)index * c->nranks + c->rank,
              st->list);
  rc = ze_done(c, s);
  ze_unlock(st);
  return rc;
}

static const _Atomic uint64_t *ze_cells(ul_backend_comm_t *c, ul_backend_window_t *w, int index) {
  return (const _Atomic uint64_t *)(w->peers[c->rank].seg) + (size_t)index * c->nranks;
}

static void ze_progress_cb(void *c) { ze_progress(c); }

ul_result_t ze_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                  uint64_t value, ul_backend_stream_t *s) {
  (void)s;
  /* Our own pending signals may be what a peer waits for: progress between polls.
   * Commands appended after this returns run after the peer's data is visible: the
   * peer's barrier completed before its count was stored. */
  return ulbu_cells_wait(&c->waiter, c->core, c->rank, index, (const void *)ze_cells(c, w, index),
                         c->nranks, value, ze_progress_cb, c);
}

ul_result_t ze_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                  uint64_t *value) {
  ze_progress(c);
  *value = ulbu_cells_sum((const void *)ze_cells(c, w, index), c->nranks);
  return UL_OK;
}

static ul_result_t ze_stage_ready(ul_backend_comm_t *c) {
  if (c->stage_a) return UL_OK;
  size_t bytes = (size_t)ul_backend_param_int("ZE_STAGE_BYTES", 4 << 20,
                                              "ze backend: host staging buffer for local "
                                              "reductions (v1), bytes");
  if (bytes < 4096) bytes = 4096;
  ze_host_mem_alloc_desc_t hd = {ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, NULL, 0};
  ze_result_t r = zeMemAllocHost(ze_ctx, &hd, bytes, 64, &c->stage_a);
  if (r == ZE_RESULT_SUCCESS) r = zeMemAllocHost(ze_ctx, &hd, bytes, 64, &c->stage_b);
  if (r != ZE_RESULT_SUCCESS) {
    if (c->stage_a) zeMemFree(ze_ctx, c->stage_a);
    c->stage_a = NULL;
    return ze_fail(c, "zeMemAllocHost (reduction staging)", r);
  }
  c->stage_bytes = bytes;
  return UL_OK;
}

/* Local math through host staging (v1), chunk by chunk: a's chunk (and b's) into the
 * staging buffers, the math on the host, the result back to dst. b NULL: the average's
 * scaling of a in place, else the reduction of a and b. */
static ul_result_t ze_staged(ul_backend_comm_t *c, ul_backend_stream_t *s, const char *what,
                             void *dst, const void *a, const void *b, size_t count,
                             ul_dtype_t dtype, ul_op_t op, int nranks) {
  if (count == 0) return UL_OK;
  struct ul_backend_stream *st = ze_lock(c, s);
  pthread_mutex_lock(&c->stage_lock);
  ul_result_t rc = ze_stage_ready(c);
  size_t per = 0, nchunks = 0, es = ul_dtype_size(dtype);
  if (rc == UL_OK && ulze_stage_plan(count, dtype, c->stage_bytes, &per, &nchunks) != UL_OK)
    rc = ul_backend_set_error(c->core, UL_ERR_INVALID_ARG, "ze backend: %s of %zu x dtype %d",
                              what, count, (int)dtype);
  for (size_t k = 0; rc == UL_OK && k < nchunks; k++) {
    size_t off = k * per * es, n = count - k * per < per ? count - k * per : per;
    if ((rc = ze_copy(c, st, c->stage_a, (const char *)a + off, n * es,
                      b ? "zeCommandListAppendMemoryCopy (stage a)"
                        : "zeCommandListAppendMemoryCopy (stage)")) != UL_OK)
      break;
    if (b) {
      /* Independent of the copy of a (both only wait for what came before it): no
       * barrier between them, the copy engine may overlap them. */
      st->dirty = 0;
      if ((rc = ze_copy(c, st, c->stage_b, (const char *)b + off, n * es,
                        "zeCommandListAppendMemoryCopy (stage b)")) != UL_OK)
        break;
    }
    if ((rc = ze_list_sync(c, st, c->timeout_ms)) != UL_OK) break;
    rc = b ? ul_reduce_local(c->stage_a, c->stage_a, c->stage_b, n, dtype, op)
           : ul_scale_avg_local(c->stage_a, n, dtype, nranks);
    if (rc != UL_OK) break;
    if ((rc = ze_copy(c, st, (char *)dst + off, c->stage_a, n * es,
                      "zeCommandListAppendMemoryCopy (unstage)")) != UL_OK)
      break;
    rc = ze_list_sync(c, st, c->timeout_ms); /* the staging buffer is reused next chunk */
  }
  pthread_mutex_unlock(&c->stage_lock);
  ze_unlock(st);
  return rc;
}

ul_result_t ze_reduce_local(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                            size_t count, ul_dtype_t dtype, ul_op_t op, ul_backend_stream_t *s) {
  return ze_staged(c, s, "reduce", dst, a, b, count, dtype, op, 0);
}

ul_result_t ze_scale_avg(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                         int nranks, ul_backend_stream_t *s) {
  return ze_staged(c, s, "scale", buf, buf, NULL, count, dtype, UL_SUM, nranks);
}

/* One copy on s (s NULL: the internal list, completed before returning). */
ul_result_t ze_copy_on(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                       ul_backend_stream_t *s, const char *what) {
  struct ul_backend_stream *st = ze_lock(c, s);
  ul_result_t rc = ze_copy(c, st, dst, src, bytes, what);
  if (rc == UL_OK) rc = ze_done(c, s);
  ze_unlock(st);
  return rc;
}

ul_result_t ze_copy_local(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                          ul_backend_stream_t *s) {
  if (bytes == 0 || dst == src) return UL_OK;
  return ze_copy_on(c, dst, src, bytes, s, "zeCommandListAppendMemoryCopy (copy)");
}
