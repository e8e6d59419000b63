/* nccl backend: device memory (ncclMemAlloc or cudaMalloc), window registration, and
 * the one-sided ops NCCL does not offer. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "nccl_internal.h"

/* ------------------------------------------------------------------ memory */

ul_result_t ulnccl_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  NCCL_ENTER(c);
  ul_result_t rc = ulnccl_check_abort(c, "ul_mem_alloc"); /* the reaper owns the list now */
  if (rc != UL_OK) return rc;
  void *p = NULL;
  int from_nccl = 0;
  /* ncclMemAlloc (>= 2.19) gives memory every NCCL optimisation (and windows) accepts;
   * cudaMalloc where it is absent or VMM is not available. Both are device memory. */
  if (ulnccl_opt.mem_alloc && ulnccl_opt.mem_alloc(&p, size) == ncclSuccess) {
    from_nccl = 1;
  } else {
    cudaError_t e = cudaMalloc(&p, size);
    if (e != cudaSuccess) return ulnccl_cuda_fail(c, "cudaMalloc", e);
  }
  rc = ulbu_alloc_add(&c->allocs, c->core, "nccl backend", p, size, from_nccl);
  if (rc != UL_OK) {
    ulnccl_alloc_release(p, from_nccl, NULL);
    return rc;
  }
  *ptr = p;
  return UL_OK;
}

ul_result_t ulnccl_mem_free(ul_backend_comm_t *c, void *ptr) {
  NCCL_ENTER(c);
  if (ulnccl_aborted(c)) return UL_OK; /* the reaper frees every allocation with the comm */
  int from_nccl = 0;
  ul_result_t rc = ulbu_alloc_remove(&c->allocs, c->core, "nccl backend", ptr, &from_nccl);
  if (rc != UL_OK) return rc;
  ulnccl_alloc_release(ptr, from_nccl, NULL);
  return UL_OK;
}

/* 1 when [p, p+bytes) lies inside one of this comm's ul_mem_alloc allocations. */
static int nccl_in_allocs(ul_backend_comm_t *c, const void *p, size_t bytes) {
  uintptr_t a = (uintptr_t)p;
  int in = 0;
  pthread_mutex_lock(&c->allocs.lock);
  for (ulbu_alloc_t *x = c->allocs.head; x && !in; x = x->next) {
    uintptr_t b = (uintptr_t)x->ptr;
    in = a >= b && a - b <= x->size && bytes <= x->size - (a - b);
  }
  pthread_mutex_unlock(&c->allocs.lock);
  return in;
}

/* One address as CUDA sees it. */
static ul_backend_mem_kind_t nccl_kind_of(ul_backend_comm_t *c, const void *p) {
  struct cudaPointerAttributes at;
  memset(&at, 0, sizeof(at));
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    cudaGetLastError(); /* not sticky, but keep CUDA's last error clean */
    return UL_BACKEND_MEM_UNKNOWN;
  }
  switch (at.type) {
  case cudaMemoryTypeUnregistered: return UL_BACKEND_MEM_HOST;
  case cudaMemoryTypeHost: return UL_BACKEND_MEM_HOST_MAPPED;
  case cudaMemoryTypeManaged: /* addressable by every device and the host */
    return UL_BACKEND_MEM_HOST_MAPPED;
  case cudaMemoryTypeDevice:
    return at.device == c->device ? UL_BACKEND_MEM_DEVICE : UL_BACKEND_MEM_PEER_DEVICE;
  default: return UL_BACKEND_MEM_UNKNOWN;
  }
}

ul_result_t ulnccl_mem_kind(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                            ul_backend_mem_kind_t *kind) {
  NCCL_ENTER(c);
  /* ncclMemAlloc (VMM) memory included */
  if (!ulnccl_aborted(c) && nccl_in_allocs(c, ptr, bytes)) {
    *kind = UL_BACKEND_MEM_DEVICE;
    return UL_OK;
  }
  ul_backend_mem_kind_t k = nccl_kind_of(c, ptr);
  if (bytes > 1 && k != UL_BACKEND_MEM_UNKNOWN) {
    /* The whole range: both ends must be the same kind of memory. */
    ul_backend_mem_kind_t k2 = nccl_kind_of(c, (const char *)ptr + bytes - 1);
    if (k2 != k) k = (k == UL_BACKEND_MEM_HOST || k2 == UL_BACKEND_MEM_HOST) ? UL_BACKEND_MEM_HOST
                                                                              : UL_BACKEND_MEM_UNKNOWN;
  }
  *kind = k;
  return UL_OK;
}

/* NULL stream: the internal (blocking) stream, waited for with the timeout. */
static ul_result_t nccl_mem_done(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  if (s) return UL_OK;
  return ulnccl_stream_wait(c, c->internal, c->timeout_ms);
}

ul_result_t ulnccl_mem_copy(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                            ul_backend_stream_t *s) {
  NCCL_ENTER(c);
  ul_result_t rc = ulnccl_usable(c, "ul_mem_copy");
  if (rc != UL_OK || bytes == 0) return rc;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ulnccl_stream_of(c, s));
  if (e != cudaSuccess) return ulnccl_cuda_fail(c, "cudaMemcpyAsync", e);
  return nccl_mem_done(c, s);
}

ul_result_t ulnccl_mem_set(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                           ul_backend_stream_t *s) {
  NCCL_ENTER(c);
  ul_result_t rc = ulnccl_usable(c, "ul_mem_set");
  if (rc != UL_OK || bytes == 0) return rc;
  if (nccl_kind_of(c, dst) == UL_BACKEND_MEM_HOST) {
    /* Pageable host memory: cudaMemsetAsync cannot reach it. Order after the stream's
     * earlier work by waiting for it (rare: host buffers are set with memset). */
    rc = ulnccl_stream_wait(c, ulnccl_stream_of(c, s), c->timeout_ms);
    if (rc == UL_OK) memset(dst, value, bytes);
    return rc;
  }
  cudaError_t e = cudaMemsetAsync(dst, value, bytes, ulnccl_stream_of(c, s));
  if (e != cudaSuccess) return ulnccl_cuda_fail(c, "cudaMemsetAsync", e);
  return nccl_mem_done(c, s);
}

/* Windows register the buffer with NCCL (ncclCommWindowRegister, >= 2.27) so collectives
 * on it can use NCCL's symmetric-memory kernels; with an older NCCL nothing is
 * registered (only a performance difference). One-sided put/get/signal are not offered. */
ul_result_t ulnccl_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                   int extra_signals, ul_backend_window_t **out,
                                   void **peer_bases) {
  (void)extra_signals;
  NCCL_ENTER(c);
  ul_result_t rc = ulnccl_usable(c, "ul_window_register");
  if (rc != UL_OK) return rc;
  ul_backend_window_t *w = calloc(1, sizeof(*w));
  if (!w) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "nccl backend: out of memory");
  for (int i = 0; i < c->nranks; i++) peer_bases[i] = NULL;
  if (ulnccl_opt.win_register) {
    ncclResult_t r = ulnccl_opt.win_register(c->nc, base, size, &w->win, ULNCCL_WIN_DEFAULT);
    if (r == ncclInProgress) rc = ulnccl_wait_ready(c, c->nc, "ncclCommWindowRegister");
    else if (r != ncclSuccess) rc = ulnccl_fail(c, "ncclCommWindowRegister (buffers must come from "
                                                 "ul_mem_alloc)", r);
  }
  if (rc != UL_OK) {
    free(w);
    return rc;
  }
  *out = w;
  return UL_OK;
}

ul_result_t ulnccl_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  NCCL_ENTER(c);
  ul_result_t rc = UL_OK;
  if (w->win && ulnccl_opt.win_deregister && !ulnccl_aborted(c)) {
    ncclResult_t r = ulnccl_opt.win_deregister(c->nc, w->win);
    if (r == ncclInProgress) rc = ulnccl_wait_ready(c, c->nc, "ncclCommWindowDeregister");
    else if (r != ncclSuccess) rc = ulnccl_fail(c, "ncclCommWindowDeregister", r);
  }
  free(w);
  return rc;
}

static ul_result_t nccl_no_one_sided(ul_backend_comm_t *c, const char *what) {
  return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                              "nccl backend: %s is not available: NCCL 2.28 has no host-side "
                              "one-sided API (ncclPutSignal/ncclSignal arrive in 2.29); use the "
                              "cuda backend for put/get/signal",
                              what);
}
ul_result_t ulnccl_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                       const void *src, size_t bytes, ul_backend_stream_t *s) {
  (void)w, (void)peer, (void)off, (void)src, (void)bytes, (void)s;
  return nccl_no_one_sided(c, "ul_put");
}
ul_result_t ulnccl_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                       void *dst, size_t bytes, ul_backend_stream_t *s) {
  (void)w, (void)peer, (void)off, (void)dst, (void)bytes, (void)s;
  return nccl_no_one_sided(c, "ul_get");
}
ul_result_t ulnccl_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                          ul_backend_stream_t *s) {
  (void)w, (void)peer, (void)index, (void)s;
  return nccl_no_one_sided(c, "ul_signal");
}
ul_result_t ulnccl_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                               uint64_t value, ul_backend_stream_t *s) {
  (void)w, (void)index, (void)value, (void)s;
  return nccl_no_one_sided(c, "ul_wait_signal");
}
