/* cuda backend: data movement between ranks: put, get, signals, the staged path's log
 * drain, wait_signal and read_signal. */
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

/* ----------------------------------------------------------- data movement */

typedef struct cuda_log_job {
  cuda_seg_hdr_t *hdr;
  uint64_t off, bytes;
} cuda_log_job_t;

/* Host callback, runs after the device->shadow copy completed: record the range. It
 * only touches host memory (no CUDA calls are allowed in callbacks). */
static void CUDART_CB cuda_log_append(void *arg) {
  cuda_log_job_t *j = arg;
  cuda_seg_hdr_t *h = j->hdr;
  uint64_t n = atomic_fetch_add(&h->log_head, 1);
  cuda_log_entry_t *en = &h->log[n % CUDA_LOG_N];
  if (n - h->log_tail >= CUDA_LOG_N) atomic_store(&h->log_overflow, 1);
  en->off = j->off;
  en->bytes = j->bytes;
  atomic_store(&en->seq, n + 1);
  free(j);
}

static ul_result_t cuda_put_on(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                               const void *src, size_t bytes, ul_backend_stream_t *s) {
  cudaStream_t st = cuda_stream_of(c, s);
  cuda_peer_win_t *pw = &w->peers[peer];
  cudaError_t e;
  if (pw->dev) { /* p2p, or our own window */
    if ((e = cudaMemcpyAsync((char *)pw->dev + off, src, bytes, cudaMemcpyDefault, st)) != cudaSuccess)
      return cuda_fail(c, "cudaMemcpyAsync (put)", e);
    return cuda_done(c, s);
  }
  /* staged: src -> the peer's pinned shadow, then log the range for the peer. Default
   * direction: src may be device or (core metadata) host memory. */
  if ((e = cudaMemcpyAsync(pw->seg + w->shadow_off + off, src, bytes, cudaMemcpyDefault, st)) !=
      cudaSuccess)
    return cuda_fail(c, "cudaMemcpyAsync (staged put)", e);
  cuda_log_job_t *j = malloc(sizeof(*j));
  if (!j) return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  j->hdr = (cuda_seg_hdr_t *)pw->seg;
  j->off = off;
  j->bytes = bytes;
  if ((e = cudaLaunchHostFunc(st, cuda_log_append, j)) != cudaSuccess) {
    free(j);
    return cuda_fail(c, "cudaLaunchHostFunc", e);
  }
  return cuda_done(c, s);
}

ul_result_t cuda_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                     const void *src, size_t bytes, ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  CUDA_ON_DEVICE(c, cuda_put_on(c, w, peer, off, src, bytes, s));
}

/* staged, peer in another process: open its window once, in the context of its GPU
 * (visible here), so no peer access between the two GPUs is needed. */
static ul_result_t cuda_open_remote(ul_backend_comm_t *c, ul_backend_window_t *w, int peer) {
  cuda_peer_win_t *pw = &w->peers[peer];
  ul_result_t rc = UL_OK;
  pthread_mutex_lock(&w->drain_lock);
  if (!pw->remote) {
    void *opened = NULL;
    cudaError_t e = cudaSetDevice(c->peer_dev[peer]);
    if (e == cudaSuccess) e = cudaIpcOpenMemHandle(&opened, pw->ipc, cudaIpcMemLazyEnablePeerAccess);
    cudaSetDevice(c->device);
    if (e != cudaSuccess) {
      rc = cuda_fail(c, "cudaIpcOpenMemHandle (staged ul_get)", e);
    } else {
      pw->ipc_base = opened;
      pw->remote = (char *)opened + pw->ipc_off;
    }
  }
  pthread_mutex_unlock(&w->drain_lock);
  return rc;
}

static ul_result_t cuda_get_on(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                               void *dst, size_t bytes, ul_backend_stream_t *s) {
  cuda_peer_win_t *pw = &w->peers[peer];
  if (!pw->dev && !pw->same_proc && !pw->remote) {
    ul_result_t rc = cuda_open_remote(c, w, peer);
    if (rc != UL_OK) return rc;
  }
  char *src = pw->dev ? (char *)pw->dev : pw->same_proc ? (char *)pw->same_proc : pw->remote;
  cudaError_t e = cudaMemcpyAsync(dst, src + off, bytes, cudaMemcpyDefault, cuda_stream_of(c, s));
  if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync (get)", e);
  return cuda_done(c, s);
}

ul_result_t cuda_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                     void *dst, size_t bytes, ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  const cuda_peer_win_t *pw = &w->peers[peer];
  if (!pw->dev && !pw->same_proc && !(pw->ipc_ok && c->peer_dev[peer] >= 0))
    return ul_backend_set_error(c->core, UL_ERR_UNSUPPORTED,
                                "cuda backend: ul_get from rank %d needs its GPU visible in this "
                                "process and its window from ul_mem_alloc (staged path)",
                                peer);
  CUDA_ON_DEVICE(c, cuda_get_on(c, w, peer, off, dst, bytes, s));
}

#ifndef UNILINK_CUDA_KERNELS
typedef struct cuda_store_job {
  _Atomic uint64_t *cell;
  uint64_t value;
} cuda_store_job_t;

/* Host callback (no kernels): after earlier work on the stream completed, raise the
 * host cell to value (store-max, so two streams' signals cannot move it backwards). */
static void CUDART_CB cuda_store_cell(void *arg) {
  cuda_store_job_t *j = arg;
  uint64_t cur = atomic_load(j->cell);
  while (cur < j->value && !atomic_compare_exchange_weak(j->cell, &cur, j->value)) {
  }
  free(j);
}
#endif

/* Under sig_lock: order a signal on st after the latest signal of another stream, so
 * that the running counts reach every cell in issue order (one comm's streams then
 * serialise at signals, as NCCL serialises one communicator's operations). */
static ul_result_t cuda_signal_order(ul_backend_comm_t *c, cudaStream_t st) {
  if (!c->sig_have_last || c->sig_last == st) return UL_OK;
  cudaError_t e;
  if (!c->sig_ev && (e = cudaEventCreateWithFlags(&c->sig_ev, cudaEventDisableTiming)) != cudaSuccess)
    return cuda_fail(c, "cudaEventCreateWithFlags (signal order)", e);
  if ((e = cudaEventRecord(c->sig_ev, c->sig_last)) == cudaSuccess &&
      (e = cudaStreamWaitEvent(st, c->sig_ev, 0)) == cudaSuccess)
    return UL_OK;
  /* e.g. the previous stream belongs to another device (a wrapped stream): wait here. */
  cudaGetLastError();
  return cuda_stream_wait(c, c->sig_last, c->timeout_ms);
}

static ul_result_t cuda_signal_on(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                                  int index, ul_backend_stream_t *s) {
  cuda_peer_win_t *pw = &w->peers[peer];
  cudaStream_t st = cuda_stream_of(c, s);
  pthread_mutex_lock(&c->sig_lock);
  ul_result_t rc = cuda_signal_order(c, st);
  if (rc != UL_OK) {
    pthread_mutex_unlock(&c->sig_lock);
    return rc;
  }
  uint64_t v = ++pw->my_count[index];
  size_t cell_no = (size_t)index * c->nranks + c->rank;
#ifdef UNILINK_CUDA_KERNELS
  int e = ulcuda_launch_store64(pw->sig_dev + cell_no, v, st);
  if (e != 0) {
    --pw->my_count[index];
    pthread_mutex_unlock(&c->sig_lock);
    return cuda_fail(c, "signal kernel launch", (cudaError_t)e);
  }
#else
  /* No kernels: a host callback on the stream stores the count into the mapped cell
   * (ordered after the stream's earlier copies, and never an unbounded host wait). */
  cuda_store_job_t *j = malloc(sizeof(*j));
  cudaError_t e = cudaErrorMemoryAllocation;
  if (j) {
    j->cell = (_Atomic uint64_t *)(pw->seg + w->sig_off) + cell_no;
    j->value = v;
    e = cudaLaunchHostFunc(st, cuda_store_cell, j);
  }
  if (e != cudaSuccess) {
    free(j);
    --pw->my_count[index];
    pthread_mutex_unlock(&c->sig_lock);
    return cuda_fail(c, "cudaLaunchHostFunc (signal)", e);
  }
#endif
  c->sig_last = st;
  c->sig_have_last = 1;
  pthread_mutex_unlock(&c->sig_lock);
  return cuda_done(c, s);
}

ul_result_t cuda_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                        ul_backend_stream_t *s) {
  CUDA_ON_DEVICE(c, cuda_signal_on(c, w, peer, index, s));
}

/* A sender's log entry is published (host callback) before its signal store runs, so
 * every entry behind the counts read (acquire) is visible to the log reads that follow. */
static const uint64_t *cuda_cells(ul_backend_comm_t *c, ul_backend_window_t *w, int index) {
  return (const uint64_t *)(w->peers[c->rank].seg + w->sig_off) + (size_t)index * c->nranks;
}

static uint64_t cuda_signal_sum(ul_backend_comm_t *c, ul_backend_window_t *w, int index) {
  return ulbu_cells_sum(cuda_cells(c, w, index), c->nranks);
}

/* staged: is there a logged range not yet copied into the device window? A reserved
 * entry counts although its range is not written yet: a later entry, whose signal the
 * caller may already have counted, is drained only behind it. */
static int cuda_log_pending(ul_backend_window_t *w, int rank) {
  cuda_seg_hdr_t *h = (cuda_seg_hdr_t *)w->peers[rank].seg;
  if (atomic_load(&h->log_overflow)) return 1;
  uint64_t tail = __atomic_load_n(&h->log_tail, __ATOMIC_ACQUIRE);
  return atomic_load(&h->log_head) != tail;
}

typedef struct cuda_log_cond {
  cuda_seg_hdr_t *h;
  uint64_t tail;
} cuda_log_cond_t;

/* The entry at tail is written (or the log overflowed: the whole shadow is copied). */
static ul_result_t cuda_log_poll(void *arg) {
  cuda_log_cond_t *x = arg;
  if (atomic_load(&x->h->log_overflow)) return UL_OK;
  return atomic_load(&x->h->log[x->tail % CUDA_LOG_N].seq) == x->tail + 1 ? UL_OK : UL_IN_PROGRESS;
}

/* staged: copy every logged range shadow -> device window, on the internal stream, and
 * mark the drain with drain_ev. A drain started by one stream's waiter also carries the
 * ranges that other streams' waiters need, so every waiter's stream waits for the latest
 * mark (cuda_drain_order), whoever drained.
 * Senders reserve entries (log_head) and write them later, in any order: a sender whose
 * signal the caller saw has reserved its entry below the head read here, but an entry
 * before it may be reserved and not yet written (its sender's host callback between the
 * two). Stopping there would leave the seen sender's range out of the window, so every
 * entry below that head is waited for (bounded: the writer is inside cuda_log_append). */
static ul_result_t cuda_drain_log(ul_backend_comm_t *c, ul_backend_window_t *w) {
  char *seg = w->peers[c->rank].seg;
  cuda_seg_hdr_t *h = (cuda_seg_hdr_t *)seg;
  cudaStream_t st = c->internal;
  cudaError_t e = cudaSuccess;
  ul_result_t rc = UL_OK;
  int copied = 0;
  pthread_mutex_lock(&w->drain_lock);
  uint64_t head = atomic_load(&h->log_head);
  for (;;) {
    if (atomic_exchange(&h->log_overflow, 0)) {
      __atomic_store_n(&h->log_tail, atomic_load(&h->log_head), __ATOMIC_RELEASE);
      e = cudaMemcpyAsync(w->base, seg + w->shadow_off, w->size, cudaMemcpyDefault, st);
      if (e != cudaSuccess) rc = cuda_fail(c, "cudaMemcpyAsync (staged window)", e);
      copied = 1;
      break;
    }
    cuda_log_entry_t *en = &h->log[h->log_tail % CUDA_LOG_N];
    if (atomic_load(&en->seq) != h->log_tail + 1) { /* not written (yet) */
      if (h->log_tail >= head) break;
      cuda_log_cond_t x = {h, h->log_tail};
      const ulbu_cond_t cond = {cuda_log_poll, NULL, &x};
      if ((rc = ulbu_wait(&c->waiter, &cond, "a peer's staged put to be logged", NULL)) != UL_OK)
        break;
      continue;
    }
    e = cudaMemcpyAsync((char *)w->base + en->off, seg + w->shadow_off + en->off, en->bytes,
                        cudaMemcpyDefault, st);
    if (e != cudaSuccess) {
      rc = cuda_fail(c, "cudaMemcpyAsync (staged window)", e);
      break;
    }
    copied = 1;
    __atomic_store_n(&h->log_tail, h->log_tail + 1, __ATOMIC_RELEASE);
  }
  if (rc == UL_OK && copied) {
    if (!w->drain_ev && (e = cudaEventCreateWithFlags(&w->drain_ev, cudaEventDisableTiming)) != cudaSuccess)
      rc = cuda_fail(c, "cudaEventCreateWithFlags (staged window)", e);
    else if ((e = cudaEventRecord(w->drain_ev, st)) != cudaSuccess)
      rc = cuda_fail(c, "cudaEventRecord (staged window)", e);
    else
      w->drain_marked = 1;
  }
  pthread_mutex_unlock(&w->drain_lock);
  return rc;
}

/* staged: work issued on s from now on sees every range drained so far. NULL stream:
 * the drains complete before returning (cuda_done). */
static ul_result_t cuda_drain_order(ul_backend_comm_t *c, ul_backend_window_t *w,
                                    ul_backend_stream_t *s) {
  if (!s) return cuda_done(c, s);
  ul_result_t rc = UL_OK;
  pthread_mutex_lock(&w->drain_lock);
  if (w->drain_marked && s->s != c->internal) {
    cudaError_t e = cudaStreamWaitEvent(s->s, w->drain_ev, 0);
    if (e != cudaSuccess) rc = cuda_fail(c, "cudaStreamWaitEvent (staged window)", e);
  }
  pthread_mutex_unlock(&w->drain_lock);
  return rc;
}

static ul_result_t cuda_wait_signal_on(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                       uint64_t value, ul_backend_stream_t *s) {
  ul_result_t rc = ulbu_cells_wait(&c->waiter, c->core, c->rank, index, cuda_cells(c, w, index),
                                   c->nranks, value, NULL, NULL);
  if (rc != UL_OK) return rc;
  if (c->path != ULGPU_PATH_STAGED) return UL_OK; /* nothing was enqueued */
  rc = cuda_drain_log(c, w);
  if (rc != UL_OK) return rc;
  return cuda_drain_order(c, w, s);
}

ul_result_t cuda_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                             uint64_t value, ul_backend_stream_t *s) {
  if (c->path != ULGPU_PATH_STAGED) return cuda_wait_signal_on(c, w, index, value, s);
  CUDA_ON_DEVICE(c, cuda_wait_signal_on(c, w, index, value, s));
}

/* staged: the data behind the count must be in the device window when the caller sees
 * the count (the generic layer polls read_signal and then copies from the window on
 * its own stream), so drain the log and complete the drain before returning. */
static ul_result_t cuda_read_drain(ul_backend_comm_t *c, ul_backend_window_t *w) {
  ul_result_t rc = cuda_drain_log(c, w);
  if (rc != UL_OK) return rc;
  return cuda_stream_wait(c, c->internal, c->timeout_ms);
}

ul_result_t cuda_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                             uint64_t *value) {
  uint64_t v = cuda_signal_sum(c, w, index);
  if (c->path == ULGPU_PATH_STAGED && cuda_log_pending(w, c->rank)) {
    int prev;
    ul_result_t rc = cuda_enter(c, &prev);
    if (rc == UL_OK) {
      rc = cuda_read_drain(c, w);
      cuda_leave(c, prev);
    }
    if (rc != UL_OK) return rc;
  }
  *value = v;
  return UL_OK;
}
