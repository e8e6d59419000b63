/* Memory and one-sided operations: ul_mem_*, windows, put/get/signal/wait. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ul_core.h"

static int window_valid(ul_window_t w) { return w && w->magic == UL__WINDOW_MAGIC; }

UL_API ul_result_t ul_window_register(ul_comm_t comm, void *base, size_t size,
                                      ul_window_t *window) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_window_register");
  if (window == NULL)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "ul_window_register: window is NULL");
  *window = NULL;
  if (base == NULL && size > 0)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "ul_window_register: base is NULL with size %zu", size);
  if (comm->sticky != UL_OK)
    return ul__comm_set_error(comm, comm->sticky, "ul_window_register: communicator in error state");
  UL_CHECK(ul__check_reachable(comm, "window_register", "base", base, size));
  ul_window_t w = calloc(1, sizeof *w);
  int n = comm->nranks;
  if (w) {
    w->peer_bases = calloc((size_t)n, sizeof(void *));
    w->peer_sizes = calloc((size_t)n, sizeof(size_t));
  }
  if (!w || !w->peer_bases || !w->peer_sizes) {
    if (w) free(w->peer_bases), free(w->peer_sizes);
    free(w);
    return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_window_register: out of memory");
  }
  w->magic = UL__WINDOW_MAGIC;
  w->comm = comm;
  w->base = base;
  w->size = size;
  /* Everyone learns every window size, so put/get ranges are checked locally. */
  uint64_t mine = size, *all = calloc((size_t)n, sizeof *all);
  ul_result_t rc = all ? ul__exchange(comm, &mine, all, sizeof mine, NULL, 0) : UL_ERR_NO_MEMORY;
  if (rc == UL_OK) {
    for (int p = 0; p < n; p++) w->peer_sizes[p] = (size_t)all[p];
    rc = comm->backend->ops.window_register(comm->bcomm, base, size, 0, &w->bwin, w->peer_bases);
  }
  free(all);
  if (rc != UL_OK) {
    if (rc == UL_ERR_UNSUPPORTED && !strstr(comm->last_error, "window"))
      ul__comm_set_error(comm, rc, "ul_window_register: backend %s has no one-sided support",
                         comm->backend->ops.name);
    free(w->peer_bases), free(w->peer_sizes), free(w);
    return rc;
  }
  pthread_mutex_lock((pthread_mutex_t *)comm->lock);
  w->next = comm->windows;
  comm->windows = w;
  pthread_mutex_unlock((pthread_mutex_t *)comm->lock);
  *window = w;
  return UL_OK;
}

static void window_free(ul_window_t w) {
  w->magic = 0;
  free(w->peer_bases);
  free(w->peer_sizes);
  free(w);
}

/* Windows still registered when their communicator goes away: the backend frees its
 * side in comm_destroy; the handles become invalid. */
void ul__windows_free_all(ul_comm_t comm) {
  ul_window_t w = comm->windows;
  comm->windows = NULL;
  while (w) {
    ul_window_t next = w->next;
    window_free(w);
    w = next;
  }
}

UL_API ul_result_t ul_window_deregister(ul_window_t window) {
  if (!window_valid(window))
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_window_deregister: window is NULL or invalid");
  ul_comm_t c = window->comm;
  ul_result_t rc = c->backend->ops.window_deregister(c->bcomm, window->bwin);
  pthread_mutex_lock((pthread_mutex_t *)c->lock);
  for (ul_window_t *pp = &c->windows; *pp; pp = &(*pp)->next)
    if (*pp == window) {
      *pp = window->next;
      break;
    }
  pthread_mutex_unlock((pthread_mutex_t *)c->lock);
  window_free(window);
  return rc;
}

static ul_result_t check_rma(const char *fn, ul_window_t w, int peer, size_t off, size_t bytes,
                             const void *buf, ul_stream_t stream) {
  if (!window_valid(w)) return ul__set_thread_error(UL_ERR_INVALID_ARG, "%s: window is NULL or invalid", fn);
  ul_comm_t c = w->comm;
  if (peer < 0 || peer >= c->nranks)
    return ul__comm_set_error(c, UL_ERR_INVALID_ARG, "%s: peer %d is outside [0, %d)", fn, peer, c->nranks);
  if (bytes > 0 && buf == NULL)
    return ul__comm_set_error(c, UL_ERR_INVALID_ARG, "%s: local buffer is NULL with %zu bytes", fn, bytes);
  UL_CHECK(ul__check_reachable(c, fn + 3, "local buffer", buf, bytes));
  size_t end;
  if (__builtin_add_overflow(off, bytes, &end) || end > w->peer_sizes[peer])
    return ul__comm_set_error(c, UL_ERR_INVALID_ARG,
                              "%s: range [%zu, +%zu) is outside rank %d's window of %zu bytes", fn,
                              off, bytes, peer, w->peer_sizes[peer]);
  if (stream && (stream->magic != UL__STREAM_MAGIC || stream->comm != c))
    return ul__comm_set_error(c, UL_ERR_INVALID_ARG, "%s: stream is invalid or of another communicator", fn);
  if (c->sticky != UL_OK) return ul__comm_set_error(c, c->sticky, "%s: communicator in error state", fn);
  return UL_OK;
}

/* One-sided calls run in the caller's thread; on a host stream they wait for the
 * stream's earlier work first, which keeps stream order. */
static ul_result_t drain(ul_stream_t s) {
  if (s && s->host) return ul__host_stream_sync(s->host, s->comm->config.timeout_ms);
  return UL_OK;
}

static ul_result_t finish(ul_comm_t c, ul_result_t rc) {
  if (rc == UL_ERR_TIMEOUT || rc == UL_ERR_PEER_LOST || rc == UL_ERR_ABORTED) c->sticky = rc;
  return rc;
}

UL_API ul_result_t ul_put(const void *src, size_t bytes, int peer, ul_window_t window,
                          size_t offset, ul_stream_t stream) {
  UL_CHECK(check_rma("ul_put", window, peer, offset, bytes, src, stream));
  ul_comm_t c = window->comm;
  UL_CHECK(drain(stream));
  if (bytes == 0) return UL_OK;
  return finish(c, c->backend->ops.put(c->bcomm, window->bwin, peer, offset, src, bytes,
                                       stream ? stream->bstream : NULL));
}

UL_API ul_result_t ul_get(void *dst, size_t bytes, int peer, ul_window_t window, size_t offset,
                          ul_stream_t stream) {
  UL_CHECK(check_rma("ul_get", window, peer, offset, bytes, dst, stream));
  ul_comm_t c = window->comm;
  UL_CHECK(drain(stream));
  if (bytes == 0) return UL_OK;
  return finish(c, c->backend->ops.get(c->bcomm, window->bwin, peer, offset, dst, bytes,
                                       stream ? stream->bstream : NULL));
}

UL_API ul_result_t ul_signal(int peer, ul_window_t window, int index, ul_stream_t stream) {
  UL_CHECK(check_rma("ul_signal", window, peer, 0, 0, NULL, stream));
  ul_comm_t c = window->comm;
  if (index < 0 || index >= UL_WINDOW_SIGNALS)
    return ul__comm_set_error(c, UL_ERR_INVALID_ARG, "ul_signal: index %d is outside [0, %d)", index,
                              UL_WINDOW_SIGNALS);
  UL_CHECK(drain(stream));
  return finish(c, c->backend->ops.signal(c->bcomm, window->bwin, peer, index,
                                          stream ? stream->bstream : NULL));
}

UL_API ul_result_t ul_wait_signal(ul_window_t window, int index, uint64_t value,
                                  ul_stream_t stream) {
  if (!window_valid(window))
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_wait_signal: window is NULL or invalid");
  ul_comm_t c = window->comm;
  UL_CHECK(check_rma("ul_wait_signal", window, c->rank, 0, 0, NULL, stream));
  if (index < 0 || index >= UL_WINDOW_SIGNALS)
    return ul__comm_set_error(c, UL_ERR_INVALID_ARG, "ul_wait_signal: index %d is outside [0, %d)",
                              index, UL_WINDOW_SIGNALS);
  UL_CHECK(drain(stream));
  __atomic_add_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  ul_result_t rc = c->backend->ops.wait_signal(c->bcomm, window->bwin, index, value,
                                               stream ? stream->bstream : NULL);
  if (rc == UL_ERR_TIMEOUT)
    ul__comm_set_error(c, rc, "ul_wait_signal: signal %d did not reach %llu within %d ms", index,
                       (unsigned long long)value, c->config.timeout_ms);
  __atomic_sub_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  return rc == UL_ERR_TIMEOUT ? rc : finish(c, rc);
}
