/* cuda backend: device memory, window registration (p2p and staged), local math and
 * ul_mem_kind/copy/set. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <unilink/backend.h>

#include "backend_util.h"
#include "gpu_common.h"
#include "gpu_stream.h"
#include "gpu_topo.h"
#ifdef UNILINK_CUDA_KERNELS
#include "cuda_kernels.h"
#endif
#include "cuda_internal.h"

/* --------------------------------------------------------------- windows */

/* Release everything a window holds in this process: IPC mappings of peers' memory,
 * the registration and mapping of every segment (shadows included). */
void cuda_window_free(ul_backend_comm_t *c, ul_backend_window_t *w) {
  if (!w) return;
  for (int r = 0; w->peers && r < c->nranks; r++) {
    cuda_peer_win_t *pw = &w->peers[r];
    /* Close the base cudaIpcOpenMemHandle returned, not base + offset. */
    if (pw->ipc_base) cudaIpcCloseMemHandle(pw->ipc_base);
    if (pw->seg) {
      if (pw->registered) cudaHostUnregister(pw->seg);
      munmap(pw->seg, w->seg_len);
    }
    free(pw->my_count);
  }
  if (w->drain_ev) cudaEventDestroy(w->drain_ev);
  pthread_mutex_destroy(&w->drain_lock);
  free(w->peers);
  free(w);
}

static void cuda_window_unlist(ul_backend_comm_t *c, ul_backend_window_t *w) {
  pthread_mutex_lock(&c->win_lock);
  for (ul_backend_window_t **pp = &c->windows; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  pthread_mutex_unlock(&c->win_lock);
}
/* ------------------------------------------------------------------ memory */

static ul_result_t cuda_mem_alloc_on(ul_backend_comm_t *c, size_t size, void **ptr) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, size); /* cudaMalloc memory can be IPC-exported */
  if (e != cudaSuccess) return cuda_fail(c, "cudaMalloc", e);
  ul_result_t rc = ulbu_alloc_add(&c->allocs, c->core, "cuda backend", p, size, 0);
  if (rc != UL_OK) {
    cudaFree(p);
    return rc;
  }
  *ptr = p;
  return UL_OK;
}

ul_result_t cuda_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  CUDA_ON_DEVICE(c, cuda_mem_alloc_on(c, size, ptr));
}

static ul_result_t cuda_mem_free_on(ul_backend_comm_t *c, void *ptr) {
  ul_result_t rc = ulbu_alloc_remove(&c->allocs, c->core, "cuda backend", ptr, NULL);
  if (rc != UL_OK) return rc;
  cudaError_t e = cudaFree(ptr);
  return e == cudaSuccess ? UL_OK : cuda_fail(c, "cudaFree", e);
}

ul_result_t cuda_mem_free(ul_backend_comm_t *c, void *ptr) {
  CUDA_ON_DEVICE(c, cuda_mem_free_on(c, ptr));
}

/* Collective. Two agreement points (each rank's status travels in its slot): after the
 * local preparation (segment, IPC handle) and after mapping the peers, so that a rank
 * that fails makes every rank fail at the same step instead of leaving them to time out
 * in their first collective. */
static ul_result_t cuda_window_register_on(ul_backend_comm_t *c, void *base, size_t size,
                                           int extra_signals, ul_backend_window_t **out,
                                           void **peer_bases) {
  ul_result_t rc = UL_OK, st = UL_OK;
  cudaError_t e;
  cuda_slot_t mine, *all = calloc((size_t)c->nranks, sizeof(cuda_slot_t));
  ul_backend_window_t *w = calloc(1, sizeof(*w));
  if (w) w->peers = calloc((size_t)c->nranks, sizeof(cuda_peer_win_t));
  if (!w || !all || !w->peers) {
    free(all);
    if (w) free(w->peers);
    free(w);
    return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  }
  pthread_mutex_init(&w->drain_lock, NULL);
  unsigned seq = c->win_seq++;
  w->base = base;
  w->size = size;
  w->nsig = UL_WINDOW_SIGNALS + (extra_signals > 0 ? extra_signals : 0);
  /* Segment: [log header][signal cells nsig x nranks][shadow (staged only)]. */
  w->sig_off = (sizeof(cuda_seg_hdr_t) + 4095) & ~(size_t)4095;
  size_t sig_bytes = (size_t)w->nsig * (size_t)c->nranks * sizeof(uint64_t);
  w->shadow_off = (w->sig_off + sig_bytes + 4095) & ~(size_t)4095;
  w->seg_len = w->shadow_off + (c->path == ULGPU_PATH_STAGED ? ((size + 4095) & ~(size_t)4095) : 0);
  char name[96];
  ulbu_board_name(&c->board, name, sizeof(name), "w", (int)seq, c->rank);
  int created = 0;
  memset(&mine, 0, sizeof(mine));
  mine.ident = c->idents[c->rank];
  mine.raw_base = (uint64_t)(uintptr_t)base;
  mine.size = size;
  if ((st = ulbu_shm_create(c->core, "cuda backend", name, w->seg_len)) == UL_OK) created = 1;
  if (st == UL_OK && !c->same_process && base && size) {
    mine.ipc_offset = ulbu_alloc_offset(&c->allocs, base);
    e = cudaIpcGetMemHandle(&mine.ipc, (char *)base - mine.ipc_offset);
    mine.ipc_ok = e == cudaSuccess;
    if (e != cudaSuccess && c->path == ULGPU_PATH_P2P)
      st = cuda_fail(c, "cudaIpcGetMemHandle (window memory must come from ul_mem_alloc)", e);
    else if (e != cudaSuccess)
      cudaGetLastError(); /* staged: only ul_get from this window is lost */
  }
  cuda_status(c, &mine, st);
  if ((rc = cuda_allgather(c, &mine, all, "window register")) != UL_OK) goto out;
  if ((rc = cuda_agree(c, all, "window register")) != UL_OK) goto out;
  for (int r = 0; st == UL_OK && r < c->nranks; r++) {
    cuda_peer_win_t *pw = &w->peers[r];
    char pname[96];
    void *m = NULL;
    ulbu_board_name(&c->board, pname, sizeof(pname), "w", (int)seq, r);
    if ((st = ulbu_shm_map(c->core, "cuda backend", pname, w->seg_len, &m)) != UL_OK) break;
    pw->seg = m;
    /* Pinned and mapped: kernels store signals into it, copies to the shadow run at
     * full PCIe speed. */
    if ((e = cudaHostRegister(m, w->seg_len, cudaHostRegisterMapped | cudaHostRegisterPortable)) !=
        cudaSuccess) {
      st = cuda_fail(c, "cudaHostRegister", e);
      break;
    }
    pw->registered = 1;
    void *dptr = NULL;
    if ((e = cudaHostGetDevicePointer(&dptr, (char *)m + w->sig_off, 0)) != cudaSuccess) {
      st = cuda_fail(c, "cudaHostGetDevicePointer", e);
      break;
    }
    pw->sig_dev = dptr;
    if (!(pw->my_count = calloc((size_t)w->nsig, sizeof(uint64_t)))) {
      st = ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
      break;
    }
    if (c->path == ULGPU_PATH_P2P) {
      if (r == c->rank || all[r].ident.pid == c->idents[c->rank].pid) {
        pw->dev = (void *)(uintptr_t)all[r].raw_base;
      } else if (all[r].size) {
        void *opened = NULL;
        e = cudaIpcOpenMemHandle(&opened, all[r].ipc, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
          st = cuda_fail(c, "cudaIpcOpenMemHandle", e);
          break;
        }
        pw->ipc_base = opened;
        pw->dev = (char *)opened + all[r].ipc_offset;
      }
    } else {
      if (r == c->rank) pw->dev = base;
      if (all[r].ident.pid == c->idents[c->rank].pid) {
        pw->same_proc = (void *)(uintptr_t)all[r].raw_base;
      } else if (all[r].ipc_ok) {
        pw->ipc_ok = 1;
        pw->ipc = all[r].ipc;
        pw->ipc_off = all[r].ipc_offset;
      }
    }
  }
  cuda_status(c, &mine, st);
  rc = cuda_allgather(c, &mine, all, "window register");
  if (rc == UL_OK) rc = cuda_agree(c, all, "window register");
out:
  /* Every rank has mapped our segment (or given up): no name left behind. */
  if (created) shm_unlink(name);
  free(all);
  if (rc != UL_OK) {
    cuda_window_free(c, w);
    return rc;
  }
  for (int r = 0; r < c->nranks; r++) peer_bases[r] = w->peers[r].dev;
  pthread_mutex_lock(&c->win_lock);
  w->next = c->windows;
  c->windows = w;
  pthread_mutex_unlock(&c->win_lock);
  *out = w;
  return UL_OK;
}

ul_result_t cuda_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                 int extra_signals, ul_backend_window_t **out,
                                 void **peer_bases) {
  CUDA_ON_DEVICE(c, cuda_window_register_on(c, base, size, extra_signals, out, peer_bases));
}

static ul_result_t cuda_window_deregister_on(ul_backend_comm_t *c, ul_backend_window_t *w) {
  /* Peers may still be copying into our window/segment until everyone is here. */
  ul_result_t rc = cuda_stream_wait(c, c->internal, c->timeout_ms);
  ul_result_t b = ulbu_board_barrier(&c->board, "window deregister");
  cuda_window_unlist(c, w);
  cuda_window_free(c, w);
  return rc != UL_OK ? rc : b;
}

ul_result_t cuda_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  CUDA_ON_DEVICE(c, cuda_window_deregister_on(c, w));
}
/* ------------------------------------------------------------- local math */

#ifdef UNILINK_CUDA_KERNELS
static ul_result_t cuda_reduce_on(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                                  size_t count, ul_dtype_t dtype, ul_op_t op,
                                  ul_backend_stream_t *s) {
  int e = ulcuda_launch_reduce(dst, a, b, count, (int)dtype, (int)(op == UL_AVG ? UL_SUM : op),
                               cuda_stream_of(c, s));
  if (e != 0) return cuda_fail(c, "reduce kernel launch", (cudaError_t)e);
  return cuda_done(c, s);
}

static ul_result_t cuda_scale_on(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                                 int nranks, ul_backend_stream_t *s) {
  int e = ulcuda_launch_scale(buf, count, (int)dtype, nranks, cuda_stream_of(c, s));
  if (e != 0) return cuda_fail(c, "scale kernel launch", (cudaError_t)e);
  return cuda_done(c, s);
}
#endif

ul_result_t cuda_reduce_local(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                              size_t count, ul_dtype_t dtype, ul_op_t op,
                              ul_backend_stream_t *s) {
  if (count == 0) return UL_OK;
#ifdef UNILINK_CUDA_KERNELS
  CUDA_ON_DEVICE(c, cuda_reduce_on(c, dst, a, b, count, dtype, op, s));
#else
  (void)dst, (void)a, (void)b, (void)dtype, (void)op, (void)s;
  return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                              "cuda backend: built without nvcc, so it has no device reduction "
                              "kernels; rebuild with the CUDA compiler");
#endif
}

ul_result_t cuda_scale_avg(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                           int nranks, ul_backend_stream_t *s) {
  if (count == 0) return UL_OK;
#ifdef UNILINK_CUDA_KERNELS
  CUDA_ON_DEVICE(c, cuda_scale_on(c, buf, count, dtype, nranks, s));
#else
  (void)buf, (void)dtype, (void)nranks, (void)s;
  return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                              "cuda backend: built without nvcc (no device kernels)");
#endif
}

static ul_result_t cuda_copy_on(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                                ul_backend_stream_t *s, const char *what) {
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream_of(c, s));
  if (e != cudaSuccess) return cuda_fail(c, what, e);
  return cuda_done(c, s);
}

ul_result_t cuda_copy_local(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                            ul_backend_stream_t *s) {
  if (bytes == 0 || dst == src) return UL_OK;
  CUDA_ON_DEVICE(c, cuda_copy_on(c, dst, src, bytes, s, "cudaMemcpyAsync (copy)"));
}

/* ------------------------------------------------- memory kinds and movement */

/* One address: what cudaPointerGetAttributes says it is. */
static ul_backend_mem_kind_t cuda_kind_of(ul_backend_comm_t *c, const void *p) {
  struct cudaPointerAttributes at;
  memset(&at, 0, sizeof(at));
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    cudaGetLastError(); /* not sticky, but do not leave it for the caller's next check */
    return UL_BACKEND_MEM_UNKNOWN;
  }
  switch (at.type) {
  case cudaMemoryTypeUnregistered: return UL_BACKEND_MEM_HOST;
  case cudaMemoryTypeHost: return UL_BACKEND_MEM_HOST_MAPPED;
  /* Managed memory counts as device memory of its device: the device addresses it,
   * and the core must not assume a CPU touch is cheap or coherent. */
  case cudaMemoryTypeDevice:
  case cudaMemoryTypeManaged:
    return at.device == c->device ? UL_BACKEND_MEM_DEVICE : UL_BACKEND_MEM_PEER_DEVICE;
  default: return UL_BACKEND_MEM_UNKNOWN;
  }
}

ul_result_t cuda_mem_kind(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                          ul_backend_mem_kind_t *kind) {
  ul_backend_mem_kind_t k = cuda_kind_of(c, ptr);
  /* The whole range: its last byte must be of the same kind (a host buffer only partly
   * registered, or a device range running past its allocation, is not one kind). */
  if (k != UL_BACKEND_MEM_UNKNOWN && bytes > 1 && cuda_kind_of(c, (const char *)ptr + bytes - 1) != k)
    k = UL_BACKEND_MEM_UNKNOWN;
  *kind = k;
  return UL_OK;
}

ul_result_t cuda_mem_copy(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                          ul_backend_stream_t *s) {
  if (bytes == 0 || dst == src) return UL_OK;
  /* NULL stream: the blocking internal stream (after the caller's legacy-stream work),
   * completed within the communicator's timeout before returning. */
  CUDA_ON_DEVICE(c, cuda_copy_on(c, dst, src, bytes, s, "cudaMemcpyAsync (ul_mem_copy)"));
}

typedef struct cuda_memset_job {
  void *dst;
  int value;
  size_t bytes;
} cuda_memset_job_t;

/* Host callback: a host-memory memset at its place in the stream. */
static void CUDART_CB cuda_memset_host(void *arg) {
  cuda_memset_job_t *j = arg;
  memset(j->dst, j->value, j->bytes);
  free(j);
}

static ul_result_t cuda_mem_set_on(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                                   ul_backend_stream_t *s) {
  ul_backend_mem_kind_t k = cuda_kind_of(c, dst);
  cudaError_t e;
  if (k == UL_BACKEND_MEM_HOST || k == UL_BACKEND_MEM_HOST_MAPPED) {
    /* cudaMemsetAsync wants device-addressable memory; host memory is set by the CPU,
     * in stream order, from a host callback. */
    cuda_memset_job_t *j = malloc(sizeof(*j));
    if (!j) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
    j->dst = dst;
    j->value = value;
    j->bytes = bytes;
    if ((e = cudaLaunchHostFunc(cuda_stream_of(c, s), cuda_memset_host, j)) != cudaSuccess) {
      free(j);
      return cuda_fail(c, "cudaLaunchHostFunc (ul_mem_set)", e);
    }
  } else if ((e = cudaMemsetAsync(dst, value, bytes, cuda_stream_of(c, s))) != cudaSuccess) {
    return cuda_fail(c, "cudaMemsetAsync (ul_mem_set)", e);
  }
  return cuda_done(c, s);
}

ul_result_t cuda_mem_set(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                         ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  CUDA_ON_DEVICE(c, cuda_mem_set_on(c, dst, value, bytes, s));
}
