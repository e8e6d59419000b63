/* Memory: allocation the backend can share (ul_mem_alloc), host<->device movement
 * (ul_mem_copy, ul_mem_set), and the check that a buffer is memory the backend can reach.
 * The core itself never loads or stores memory of a device backend: everything that
 * touches such memory goes through the backend's mem_copy/mem_set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ul_core.h"

UL_API ul_result_t ul_mem_alloc(ul_comm_t comm, size_t size, void **ptr) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_mem_alloc");
  if (ptr == NULL) return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "ul_mem_alloc: ptr is NULL");
  *ptr = NULL;
  if (size == 0) return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "ul_mem_alloc: size is 0");
  ul_result_t rc = comm->backend->ops.mem_alloc(comm->bcomm, size, ptr);
  if (rc == UL_ERR_UNSUPPORTED && comm->backend->caps.flags & UL_BACKEND_HOST_MEMORY) {
    /* Plain host memory is what such a backend shares anyway. */
    void *p = NULL;
    if (posix_memalign(&p, 64, size) != 0)
      return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_mem_alloc: %zu bytes", size);
    *ptr = p;
    return UL_OK;
  }
  return rc;
}

UL_API ul_result_t ul_mem_free(ul_comm_t comm, void *ptr) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_mem_free");
  if (ptr == NULL) return UL_OK;
  ul_result_t rc = comm->backend->ops.mem_free(comm->bcomm, ptr);
  if (rc == UL_ERR_UNSUPPORTED && comm->backend->caps.flags & UL_BACKEND_HOST_MEMORY) {
    free(ptr);
    return UL_OK;
  }
  return rc;
}

static int device_backend(ul_comm_t comm) {
  return (comm->backend->caps.features & UL_FEATURE_DEVICE_MEMORY) != 0;
}

ul_result_t ul__check_reachable(ul_comm_t comm, const char *fn, const char *what, const void *ptr,
                                size_t bytes) {
  if (!device_backend(comm) || ptr == NULL || bytes == 0) return UL_OK;
  ul_backend_mem_kind_t kind = UL_BACKEND_MEM_UNKNOWN;
  if (comm->backend->ops.mem_kind(comm->bcomm, ptr, bytes, &kind) != UL_OK) return UL_OK;
  if (kind != UL_BACKEND_MEM_HOST) return UL_OK;
  /* NCCL would dereference it on the GPU (illegal address, a sticky error that poisons
   * the process's context) unless NCCL_CHECK_POINTERS=1: refuse it here, for every rank
   * count, so a one-GPU test and an eight-GPU run fail the same way. */
  return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                            "ul_%s: %s %p is pageable host memory, which backend %s cannot "
                            "reach; use device memory (ul_mem_alloc) and move data with "
                            "ul_mem_copy",
                            fn, what, ptr, comm->backend->ops.name);
}

/* A copy or fill queued on a host stream (backends without device queues). */
typedef struct mem_task {
  void *dst;
  const void *src;
  size_t bytes;
  int value;
  int is_set;
} mem_task_t;

static ul_result_t mem_task_run(void *arg) {
  mem_task_t *t = arg;
  if (t->is_set) memset(t->dst, t->value, t->bytes);
  else memcpy(t->dst, t->src, t->bytes);
  return UL_OK;
}

static ul_result_t mem_move(const char *fn, ul_comm_t comm, void *dst, const void *src, int value,
                            size_t bytes, ul_stream_t stream, int is_set) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, fn);
  if (stream && (stream->magic != UL__STREAM_MAGIC || stream->comm != comm))
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                              "%s: stream is not a live stream of this communicator", fn);
  if (bytes > 0 && dst == NULL)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "%s: dst is NULL with %zu bytes", fn, bytes);
  if (!is_set && bytes > 0 && src == NULL)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "%s: src is NULL with %zu bytes", fn, bytes);
  if (!is_set && src != dst && ul__overlap(dst, bytes, src, bytes))
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                              "%s: dst [%p, +%zu) and src [%p, +%zu) overlap", fn, dst, bytes, src,
                              bytes);
  if (comm->sticky != UL_OK)
    return ul__comm_set_error(comm, comm->sticky, "%s: communicator in error state", fn);
  if (bytes == 0 || (!is_set && src == dst)) return UL_OK;
  const ul_backend_ops_t *o = &comm->backend->ops;
  ul_backend_stream_t *bs = stream ? stream->bstream : NULL;
  ul_result_t rc = is_set ? o->mem_set(comm->bcomm, dst, value, bytes, bs)
                          : o->mem_copy(comm->bcomm, dst, src, bytes, bs);
  if (rc != UL_ERR_UNSUPPORTED) return rc;
  if (!(comm->backend->caps.flags & UL_BACKEND_HOST_MEMORY))
    return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                              "%s: backend %s cannot move memory (it has no %s op)", fn, o->name,
                              is_set ? "mem_set" : "mem_copy");
  mem_task_t t = {dst, src, bytes, value, is_set};
  if (stream && stream->host) return ul__host_stream_enqueue(stream->host, mem_task_run, &t, sizeof t);
  if (bs) UL_CHECK(o->stream_synchronize(bs, comm->config.timeout_ms));
  return mem_task_run(&t);
}

UL_API ul_result_t ul_mem_copy(void *dst, const void *src, size_t bytes, ul_comm_t comm,
                               ul_stream_t stream) {
  return mem_move("ul_mem_copy", comm, dst, src, 0, bytes, stream, 0);
}

UL_API ul_result_t ul_mem_set(void *dst, int value, size_t bytes, ul_comm_t comm,
                              ul_stream_t stream) {
  return mem_move("ul_mem_set", comm, dst, NULL, value, bytes, stream, 1);
}

void ul__exchange_free(ul_comm_t comm) {
  if (comm->xchg_buf) comm->backend->ops.mem_free(comm->bcomm, comm->xchg_buf);
  comm->xchg_buf = NULL;
  comm->xchg_cap = 0;
}
