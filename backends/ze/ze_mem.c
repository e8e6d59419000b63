/* ze backend: device allocations, windows (signal segments, IPC export and import),
 * memory kinds and ul_mem_copy / ul_mem_set. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ze_internal.h"

/* The pattern bytes of zeCommandListAppendMemoryFill: static, because the spec does not
 * say when the driver reads the pattern. */
static const unsigned char ze_fill_bytes[256] = {
#define ZE_B4(i) (i), (i) + 1, (i) + 2, (i) + 3
#define ZE_B16(i) ZE_B4(i), ZE_B4((i) + 4), ZE_B4((i) + 8), ZE_B4((i) + 12)
#define ZE_B64(i) ZE_B16(i), ZE_B16((i) + 16), ZE_B16((i) + 32), ZE_B16((i) + 48)
    ZE_B64(0), ZE_B64(64), ZE_B64(128), ZE_B64(192)
#undef ZE_B64
#undef ZE_B16
#undef ZE_B4
};

ul_result_t ze_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  void *p = NULL;
  ze_device_mem_alloc_desc_t d = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  ze_result_t r = zeMemAllocDevice(ze_ctx, &d, size, 64, c->dev, &p);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeMemAllocDevice", r);
  ul_result_t rc = ulbu_alloc_add(&c->allocs, c->core, "ze backend", p, size, 0);
  if (rc != UL_OK) {
    zeMemFree(ze_ctx, p);
    return rc;
  }
  *ptr = p;
  return UL_OK;
}

ul_result_t ze_mem_free(ul_backend_comm_t *c, void *ptr) {
  ul_result_t rc = ulbu_alloc_remove(&c->allocs, c->core, "ze backend", ptr, NULL);
  if (rc != UL_OK) return rc;
  pthread_mutex_lock(&c->objlock);
  /* After an abort nobody synchronized the lists (the core frees the generic scratch
   * right after one): wait for the device before freeing, leak if it does not finish. */
  int idle = 1;
  if (c->dead) {
    idle = ze_list_drain(c, c->internal.list);
    for (ul_backend_stream_t *s = c->streams; s && idle; s = s->next)
      if (s->owned) idle = ze_list_drain(c, s->list);
  }
  /* An exported handle of a window on this memory goes back to the driver first. */
  for (ul_backend_window_t *w = c->windows; w; w = w->next)
    if (w->exported && w->alloc_base == ptr && idle) {
      if (ze_put_ipc) ze_put_ipc(ze_ctx, w->ipc);
      w->exported = 0;
    }
  pthread_mutex_unlock(&c->objlock);
  if (idle) zeMemFree(ze_ctx, ptr);
  else ul_backend_log(UL_LOG_WARN, "ze", "rank %d: ul_mem_free after an abort: the device is "
                      "still busy; %p leaked, not freed under it", c->rank, ptr);
  return UL_OK;
}

/* device_idle: no list of this communicator can still touch the window's memory (else
 * the IPC mappings stay open and the exported handle is kept: leaked, not freed under
 * the device). */
void ze_window_free(ul_backend_comm_t *c, ul_backend_window_t *w, int device_idle) {
  if (!w) return;
  for (int r = 0; w->peers && r < c->nranks; r++) {
    ze_peer_win_t *pw = &w->peers[r];
    if (pw->ipc_base && device_idle) zeMemCloseIpcHandle(ze_ctx, pw->ipc_base);
    if (pw->seg) munmap(pw->seg, w->seg_len);
  }
  /* Without zeMemPutIpcHandle (loaders before spec 1.6) the driver keeps the handle
   * until the memory is freed. */
  if (w->exported && device_idle && ze_put_ipc) ze_put_ipc(ze_ctx, w->ipc);
  free(w->peers);
  free(w);
}

typedef struct ze_serve_job {
  ul_backend_comm_t *c; /* whose abort flag stops the serving */
  int listen_fd, fd;
  int32_t *pids;
  int npids, nconn, timeout_ms;
  volatile int stop; /* set when this rank gives up or aborts: peers will not connect */
  _Atomic int done;
  ul_result_t rc;
  char err[200];
} ze_serve_job_t;

static void *ze_serve_main(void *arg) {
  ze_serve_job_t *j = arg;
  j->rc = ulze_ipc_serve(j->listen_fd, j->fd, j->pids, j->npids, j->nconn, j->timeout_ms,
                         &j->stop, j->err, sizeof(j->err));
  atomic_store(&j->done, 1);
  return NULL;
}

/* Has the IPC server thread finished? It sees our abort flag through stop. */
static ul_result_t ze_serve_poll(void *arg) {
  ze_serve_job_t *j = arg;
  if (ze_aborted(j->c)) j->stop = 1;
  return atomic_load(&j->done) ? UL_OK : UL_IN_PROGRESS;
}

/* Export [base, base+size) for ranks of other processes: IPC handle, descriptor, and a
 * socket that hands the descriptor to them. */
static ul_result_t ze_export(ul_backend_comm_t *c, ul_backend_window_t *w, void *base,
                             unsigned seq, ze_slot_t *mine, ze_serve_job_t *job) {
  void *abase = NULL;
  size_t asize = 0;
  ze_result_t r = zeMemGetAddressRange(ze_ctx, base, &abase, &asize);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeMemGetAddressRange (window memory must come from ul_mem_alloc)", r);
  ze_ipc_mem_handle_t h;
  if ((r = zeMemGetIpcHandle(ze_ctx, abase, &h)) != ZE_RESULT_SUCCESS)
    return ze_fail(c, "zeMemGetIpcHandle", r);
  w->exported = 1; /* from here on the window owns h */
  w->ipc = h;
  w->alloc_base = abase;
  int fd = -1;
  uint64_t fd64 = 0;
  if (ze_fd_from_handle && ze_fd_from_handle(ze_ctx, h, &fd64) == ZE_RESULT_SUCCESS) fd = (int)fd64;
  else memcpy(&fd, h.data, sizeof(fd));
  mine->has_ipc = 1;
  memcpy(mine->ipc, h.data, sizeof(mine->ipc));
  mine->ipc_offset = (uint64_t)((char *)base - (char *)abase);
  char name[96], err[200];
  ulbu_board_name(&c->board, name, sizeof(name), "ipc", (int)seq, c->rank);
  int lfd = ulze_ipc_listen(name, err, sizeof(err));
  if (lfd < 0) return ul_backend_set_error(c->core, UL_ERR_SYSTEM, "ze backend: %s", err);
  job->listen_fd = lfd;
  job->fd = fd;
  job->timeout_ms = c->timeout_ms;
  job->pids = calloc((size_t)c->nranks, sizeof(int32_t));
  if (!job->pids) {
    close(lfd);
    return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  }
  for (int q = 0; q < c->nranks; q++)
    if (c->idents[q].pid != c->idents[c->rank].pid) {
      job->pids[job->npids++] = c->idents[q].pid;
      job->nconn++;
    }
  return UL_OK;
}

static ul_result_t ze_import(ul_backend_comm_t *c, unsigned seq, int q, const ze_slot_t *s,
                             ze_peer_win_t *pw) {
  char name[96], err[200];
  ulbu_board_name(&c->board, name, sizeof(name), "ipc", (int)seq, q);
  int fd = -1;
  ul_result_t rc = ulze_ipc_fetch(name, c->timeout_ms, c->abort_flag, &fd, err, sizeof(err));
  if (rc != UL_OK)
    return ul_backend_set_error(c->core, rc, "ze backend: IPC handle of rank %d: %s", q, err);
  ze_ipc_mem_handle_t h;
  memcpy(h.data, s->ipc, sizeof(h.data));
  if (!ze_handle_from_fd || ze_handle_from_fd(ze_ctx, (uint64_t)fd, &h) != ZE_RESULT_SUCCESS) {
    memcpy(h.data, s->ipc, sizeof(h.data));
    memcpy(h.data, &fd, sizeof(fd)); /* the descriptor, now valid in this process */
  }
  void *p = NULL;
  ze_result_t r = zeMemOpenIpcHandle(ze_ctx, c->dev, h, 0, &p);
  close(fd); /* the driver imported the buffer; our copy of the descriptor is not needed */
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeMemOpenIpcHandle", r);
  pw->ipc_base = p;
  pw->dev = (char *)p + s->ipc_offset;
  return UL_OK;
}

ul_result_t ze_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                      int extra_signals, ul_backend_window_t **out,
                                      void **peer_bases) {
  ul_result_t rc = UL_OK;
  ze_slot_t mine, *all = calloc((size_t)c->nranks, sizeof(ze_slot_t));
  ul_backend_window_t *w = calloc(1, sizeof(*w));
  ze_serve_job_t job;
  memset(&job, 0, sizeof(job));
  job.c = c;
  job.listen_fd = -1;
  pthread_t server;
  int serving = 0;
  if (w) w->peers = calloc((size_t)c->nranks, sizeof(ze_peer_win_t));
  if (!w || !all || !w->peers) {
    free(all);
    ze_window_free(c, w, 1);
    return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "ze backend: out of memory");
  }
  unsigned seq = c->win_seq++;
  w->base = base;
  w->size = size;
  w->nsig = UL_WINDOW_SIGNALS + (extra_signals > 0 ? extra_signals : 0);
  size_t sig_bytes = (size_t)w->nsig * (size_t)c->nranks * sizeof(uint64_t);
  w->seg_len = (sig_bytes + 4095) & ~(size_t)4095;
  char name[96];
  ulbu_board_name(&c->board, name, sizeof(name), "w", (int)seq, c->rank);
  /* On failure still take part in the allgather below so peers fail fast rather than
   * time out. */
  rc = ulbu_shm_create(c->core, "ze backend", name, w->seg_len);
  memset(&mine, 0, sizeof(mine));
  mine.ident = c->idents[c->rank];
  mine.raw_base = (uint64_t)(uintptr_t)base;
  mine.size = size;
  if (rc == UL_OK && !c->same_process && base && size) {
    rc = ze_export(c, w, base, seq, &mine, &job);
    if (rc == UL_OK && job.nconn > 0) {
      serving = pthread_create(&server, NULL, ze_serve_main, &job) == 0;
      if (!serving) {
        close(job.listen_fd);
        rc = ul_backend_set_error(c->core, UL_ERR_SYSTEM, "ze backend: cannot start IPC server");
      }
    } else if (job.listen_fd >= 0) {
      close(job.listen_fd);
    }
  }
  mine.p2p_ok = rc == UL_OK;
  ul_result_t grc = ze_allgather(c, &mine, all, "window register");
  if (rc == UL_OK) rc = grc;
  for (int q = 0; rc == UL_OK && q < c->nranks; q++)
    if (!all[q].p2p_ok)
      rc = ul_backend_set_error(c->core, UL_ERR_BACKEND,
                                "ze backend: rank %d could not export its window", q);
  for (int q = 0; rc == UL_OK && q < c->nranks; q++) {
    ze_peer_win_t *pw = &w->peers[q];
    char pname[96];
    void *m = NULL;
    ulbu_board_name(&c->board, pname, sizeof(pname), "w", (int)seq, q);
    if ((rc = ulbu_shm_map(c->core, "ze backend", pname, w->seg_len, &m)) != UL_OK) break;
    pw->seg = m;
    if (q == c->rank || all[q].ident.pid == c->idents[c->rank].pid)
      pw->dev = (void *)(uintptr_t)all[q].raw_base; /* one context: pointers are shared */
    else if (all[q].has_ipc)
      rc = ze_import(c, seq, q, &all[q], pw);
    peer_bases[q] = NULL; /* device memory: not host load/store reachable */
  }
  if (serving) {
    if (rc != UL_OK) job.stop = 1;
    /* No deadline here: the server keeps the communicator's timeout itself. */
    const ulbu_waiter_t wt = {.sleep_ns = 1000000L};
    const ulbu_cond_t cond = {ze_serve_poll, NULL, &job};
    (void)ulbu_wait(&wt, &cond, "IPC handle server", NULL);
    pthread_join(server, NULL);
    if (rc == UL_OK && job.rc != UL_OK)
      rc = ul_backend_set_error(c->core, job.rc, "ze backend: %s", job.err);
  }
  free(job.pids);
  grc = ulbu_board_barrier(&c->board, "window register");
  shm_unlink(name); /* every rank has mapped it (or failed): no name left behind */
  if (rc == UL_OK) rc = grc;
  free(all);
  if (rc != UL_OK) {
    ze_window_free(c, w, 1); /* nothing was appended that touches it */
    return rc;
  }
  pthread_mutex_lock(&c->objlock);
  w->next = c->windows;
  c->windows = w;
  pthread_mutex_unlock(&c->objlock);
  *out = w;
  return UL_OK;
}

ul_result_t ze_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  /* Peers may still copy into our window until everyone is here. */
  struct ul_backend_stream *st = ze_lock(c, NULL);
  ul_result_t rc = ze_list_sync(c, st, c->timeout_ms);
  ze_unlock(st);
  ul_result_t b = ulbu_board_barrier(&c->board, "window deregister");
  pthread_mutex_lock(&c->objlock);
  for (ul_backend_window_t **p = &c->windows; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  pthread_mutex_unlock(&c->objlock);
  /* If the sync failed, the internal list may still read or write the peers' windows. */
  ze_window_free(c, w, rc == UL_OK);
  return rc != UL_OK ? rc : b;
}

ul_result_t ze_mem_kind(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                               ul_backend_mem_kind_t *kind) {
  ze_memory_allocation_properties_t p = {.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES};
  ze_device_handle_t d = NULL;
  ze_result_t r = zeMemGetAllocProperties(ze_ctx, ptr, &p, &d);
  if (r != ZE_RESULT_SUCCESS) return ze_fail(c, "zeMemGetAllocProperties", r);
  if (p.type == ZE_MEMORY_TYPE_UNKNOWN) { /* not the driver's: plain (pageable) host memory */
    *kind = UL_BACKEND_MEM_HOST;
    return UL_OK;
  }
  /* The driver's memory: the whole range must lie in the one allocation. */
  void *base = NULL;
  size_t size = 0;
  if ((r = zeMemGetAddressRange(ze_ctx, ptr, &base, &size)) != ZE_RESULT_SUCCESS)
    return ze_fail(c, "zeMemGetAddressRange", r);
  size_t off = (size_t)((const char *)ptr - (const char *)base);
  if (off > size || bytes > size - off)
    return ul_backend_set_error(c->core, UL_ERR_INVALID_ARG,
                                "ze backend: [%p, +%zu bytes) runs past the end of its Level Zero "
                                "allocation (%zu bytes at %p)", ptr, bytes, size, base);
  switch (p.type) {
  case ZE_MEMORY_TYPE_DEVICE:
    *kind = d == c->dev ? UL_BACKEND_MEM_DEVICE : UL_BACKEND_MEM_PEER_DEVICE;
    break;
  case ZE_MEMORY_TYPE_HOST:
  case ZE_MEMORY_TYPE_SHARED: /* migrates on access: both the host and the device reach it */
    *kind = UL_BACKEND_MEM_HOST_MAPPED;
    break;
  default:
    *kind = UL_BACKEND_MEM_UNKNOWN;
    break;
  }
  return UL_OK;
}

/* Level Zero copies infer the direction from the pointers, as cudaMemcpyDefault does. */
ul_result_t ze_mem_copy(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                               ul_backend_stream_t *s) {
  if (bytes == 0 || dst == src) return UL_OK;
  return ze_copy_on(c, dst, src, bytes, s, "zeCommandListAppendMemoryCopy (ul_mem_copy)");
}

ul_result_t ze_mem_set(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                              ul_backend_stream_t *s) {
  if (bytes == 0) return UL_OK;
  struct ul_backend_stream *st = ze_lock(c, s);
  ul_result_t rc = ze_order(c, st);
  if (rc == UL_OK) {
    ze_result_t r = zeCommandListAppendMemoryFill(st->list, dst, &ze_fill_bytes[value & 0xff], 1,
                                                  bytes, NULL, 0, NULL);
    if (r != ZE_RESULT_SUCCESS) {
      rc = ze_fail(c, "zeCommandListAppendMemoryFill (ul_mem_set)", r);
    } else {
      st->dirty = 1;
      st->ops++;
      rc = ze_done(c, s);
    }
  }
  ze_unlock(st);
  return rc;
}
