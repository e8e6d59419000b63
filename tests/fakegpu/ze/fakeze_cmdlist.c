/* Immediate command lists of the fake Level Zero loader: a worker thread each that runs
 * copies, fills, barriers and event commands. See fakeze.c. */
#define _GNU_SOURCE
#define ZE_APIEXPORT __attribute__((visibility("default")))
#include <level_zero/ze_api.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fakemem.h"
#include "fakeze_int.h"

/* ----------------------------------------------------------- command lists */

static _Atomic unsigned g_list_seq;

/* A pointer a command touches, as the device sees it. direct: the fake can access it
 * with plain loads and stores (its private alias of device memory, or a USM host
 * allocation); otherwise it is pageable host memory, copied with fault checks. */
typedef struct fz_ptr {
  void *p;
  int direct;
} fz_ptr_t;

static int fz_resolve(ze_command_list_handle_t l, const void *ptr, size_t n, fz_ptr_t *out,
                      char *why, size_t wlen) {
  fakemem_region_t r;
  if (fakemem_find(ptr, 1, &r) == 0) {
    size_t off = (size_t)((const char *)ptr - (const char *)r.pub);
    if (n > r.size - off) {
      snprintf(why, wlen, "%zu bytes at %p run past the end of a %zu-byte device allocation",
               n, ptr, r.size);
      return -1;
    }
    if (!fz_can_access(l->dev->idx, r.device)) {
      snprintf(why, wlen, "%p is memory of device %d, which device %d cannot access (no peer "
               "access)", ptr, r.device, l->dev->idx);
      return -1;
    }
    out->p = (char *)r.priv + off;
    out->direct = 1;
    return 0;
  }
  fz_alloc_t a;
  if (fz_alloc_find(ptr, &a)) {
    if (n > a.size - (size_t)((const char *)ptr - (const char *)a.base)) {
      snprintf(why, wlen, "%zu bytes at %p run past the end of a %zu-byte host allocation", n,
               ptr, a.size);
      return -1;
    }
    out->p = (void *)ptr;
    out->direct = 1;
    return 0;
  }
  if (!g_pageable) {
    snprintf(why, wlen, "%p is pageable host memory (FAKEGPU_ZE_PAGEABLE=no)", ptr);
    return -1;
  }
  out->p = (void *)ptr;
  out->direct = 0;
  return 0;
}

/* Copy where one side may be pageable memory: the kernel checks both ranges. */
static int fz_vm_copy(void *dst, const void *src, size_t n) {
  if (!g_have_vm) {
    memmove(dst, src, n);
    return 0;
  }
  pid_t self = getpid();
  while (n) {
    struct iovec l = {dst, n}, r = {(void *)src, n};
    ssize_t k = process_vm_readv(self, &l, 1, &r, 1, 0);
    if (k <= 0) return -1;
    dst = (char *)dst + k;
    src = (const char *)src + k;
    n -= (size_t)k;
  }
  return 0;
}

static int fz_exec_copy(ze_command_list_handle_t l, fz_cmd_t *c, char *why, size_t wlen) {
  if (c->size == 0) return 0;
  fz_ptr_t d, s;
  if (fz_resolve(l, c->dst, c->size, &d, why, wlen) || fz_resolve(l, c->src, c->size, &s, why, wlen))
    return -1;
  if (d.direct && s.direct) {
    memmove(d.p, s.p, c->size);
    return 0;
  }
  if (fz_vm_copy(d.p, s.p, c->size) != 0) {
    snprintf(why, wlen, "copy of %zu bytes %p -> %p faulted (unmapped host memory?)", c->size,
             c->src, c->dst);
    return -1;
  }
  return 0;
}

static int fz_exec_fill(ze_command_list_handle_t l, fz_cmd_t *c, char *why, size_t wlen) {
  if (c->size == 0) return 0;
  fz_ptr_t d;
  if (fz_resolve(l, c->dst, c->size, &d, why, wlen)) return -1;
  unsigned char buf[4096];
  for (size_t i = 0; i < sizeof(buf); i++) buf[i] = c->pattern[i % c->pattern_size];
  /* The pattern repeats from the start of the range; sizeof(buf) is a multiple of every
   * allowed (power-of-two) pattern size, so chunks keep its phase. */
  for (size_t off = 0; off < c->size; off += sizeof(buf)) {
    size_t k = c->size - off < sizeof(buf) ? c->size - off : sizeof(buf);
    if (d.direct)
      memcpy((char *)d.p + off, buf, k);
    else if (fz_vm_copy((char *)d.p + off, buf, k) != 0) {
      snprintf(why, wlen, "fill of %zu bytes at %p faulted (unmapped host memory?)", c->size, c->dst);
      return -1;
    }
  }
  return 0;
}

static void fz_cmd_release(fz_cmd_t *c) {
  /* A pool destroyed while commands still named its events is freed by the last one;
   * refs counts every reference, so no later event of this command is in a freed pool. */
  pthread_mutex_lock(&g_ev_mu);
  for (uint32_t i = 0; i <= c->nwait; i++) {
    ze_event_handle_t e = i < c->nwait ? c->wait[i] : c->signal;
    if (!e) continue;
    ze_event_pool_handle_t p = e->pool;
    if (--p->refs == 0 && p->destroyed) fz_pool_free(p);
  }
  pthread_mutex_unlock(&g_ev_mu);
  free(c->wait);
  free(c);
}

/* Wait for the command's wait events: 0 all signalled, 1 one is lost, 2 the list is
 * being destroyed (the application destroyed a list the device still waits in). */
static int fz_wait_events(ze_command_list_handle_t l, fz_cmd_t *c) {
  int rc = 0;
  pthread_mutex_lock(&g_ev_mu);
  for (;;) {
    int all = 1;
    rc = 0;
    for (uint32_t i = 0; i < c->nwait && !rc; i++) {
      int s = atomic_load(&c->wait[i]->state);
      if (s == FZ_EV_LOST) rc = 1;
      if (s == FZ_EV_RESET) all = 0;
    }
    if (rc || all) break;
    if (atomic_load(&l->closing)) { /* atomic: l->mu is taken before g_ev_mu elsewhere */
      rc = 2;
      break;
    }
    pthread_cond_wait(&g_ev_cv, &g_ev_mu);
  }
  pthread_mutex_unlock(&g_ev_mu);
  return rc;
}

static void fz_lose(ze_command_list_handle_t l, const char *why) {
  /* Device first: whoever sees the list lost also sees its device lost. */
  atomic_store(&l->dev->lost, 1);
  if (!atomic_exchange(&l->lost, 1))
    fz_warn("device %d lost (command list %p): %s", l->dev->idx, (void *)l, why);
}

/* Run one command; 0 done, 1 lost, 2 abandoned (list destroyed while it waited). */
static int fz_run(ze_command_list_handle_t l, fz_cmd_t *c) {
  char why[256] = "";
  int w = fz_wait_events(l, c);
  if (w == 1) {
    fz_lose(l, "waited on an event of a lost device");
    return 1;
  }
  if (w == 2) return 2;
  if (g_delay_us) usleep((useconds_t)(rand_r(&l->rng) % (g_delay_us + 1)));
  int bad = 0;
  if (c->kind == FZ_CMD_COPY || c->kind == FZ_CMD_FILL) {
    pthread_rwlock_rdlock(&g_mem_rw);
    bad = c->kind == FZ_CMD_COPY ? fz_exec_copy(l, c, why, sizeof(why))
                                 : fz_exec_fill(l, c, why, sizeof(why));
    pthread_rwlock_unlock(&g_mem_rw);
  }
  if (bad) {
    fz_lose(l, why);
    return 1;
  }
  if (c->signal) fz_ev_set(c->signal, c->kind == FZ_CMD_RESET ? FZ_EV_RESET : FZ_EV_SIGNALED);
  return 0;
}

static int fz_is_batchable(const fz_cmd_t *c) { return c->kind == FZ_CMD_COPY || c->kind == FZ_CMD_FILL; }

static void *fz_worker(void *arg) {
  ze_command_list_handle_t l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->head && !l->closing) pthread_cond_wait(&l->cv, &l->mu);
    if (!l->head) break;
    /* Normally one command at a time, in order. FAKEGPU_ZE_REORDER=1: the queued
     * copies/fills up to the next barrier, signal, wait or reset run in a random order,
     * which the specification allows (only barriers and events order a list). The
     * batch stays visible in l->batch (for zeMemFree's check) until it is retired. */
    fz_cmd_t **batch = l->batch;
    int n = 0;
    do {
      batch[n++] = l->head;
      l->head = l->head->next;
    } while (g_reorder && l->head && n < 16 && fz_is_batchable(batch[0]) &&
             fz_is_batchable(l->head));
    if (!l->head) l->tail = NULL;
    for (int i = n - 1; i > 0; i--) {
      int j = rand_r(&l->rng) % (i + 1);
      fz_cmd_t *t = batch[i];
      batch[i] = batch[j];
      batch[j] = t;
    }
    l->nbatch = n;
    pthread_mutex_unlock(&l->mu);
    int stop = 0;
    for (int i = 0; i < n; i++) {
      int r = stop ? stop : fz_run(l, batch[i]);
      if (r == 1 && batch[i]->signal) fz_ev_set(batch[i]->signal, FZ_EV_LOST);
      if (r == 2) atomic_fetch_add(&g_dropped, 1);
      if (r) stop = r;
    }
    pthread_mutex_lock(&l->mu);
    l->nbatch = 0;
    for (int i = 0; i < n; i++) fz_cmd_release(batch[i]);
    l->retired += (uint64_t)n;
    if (stop) {
      /* Lost, or destroyed while waiting: nothing queued behind it runs. */
      while (l->head) {
        fz_cmd_t *c = l->head;
        l->head = c->next;
        if (stop == 1 && c->signal) fz_ev_set(c->signal, FZ_EV_LOST);
        if (stop == 2) atomic_fetch_add(&g_dropped, 1);
        fz_cmd_release(c);
        l->retired++;
      }
      l->tail = NULL;
    }
    pthread_cond_broadcast(&l->cv);
    if (stop == 2) break;
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

FZ_EXPORT ze_result_t zeCommandListCreateImmediate(ze_context_handle_t hContext,
                                                   ze_device_handle_t hDevice,
                                                   const ze_command_queue_desc_t *altdesc,
                                                   ze_command_list_handle_t *phCommandList) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *d = fz_dev(hDevice);
  if (!fz_ctx_ok(hContext) || !d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!altdesc || !phCommandList) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (altdesc->flags > 0x1 || altdesc->mode > ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS ||
      altdesc->priority > ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_HIGH)
    return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (atomic_load(&d->lost)) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (altdesc->ordinal >= fz_ngroups()) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  ze_command_queue_group_properties_t g;
  fz_group(altdesc->ordinal, &g);
  if (altdesc->index >= g.numQueues) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  ze_command_list_handle_t l = calloc(1, sizeof(*l));
  if (!l) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  l->magic = FZ_MAGIC_LIST;
  l->ctx = hContext;
  l->dev = d;
  l->ordinal = altdesc->ordinal;
  l->sync = altdesc->mode == ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS;
  l->max_fill = g.maxMemoryFillPatternSize;
  l->rng = g_seed * 2654435761u + atomic_fetch_add(&g_list_seq, 1);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  if (pthread_create(&l->th, NULL, fz_worker, l) != 0) {
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  atomic_fetch_add(&g_live_lists, 1);
  pthread_mutex_lock(&g_lists_mu);
  l->gnext = g_lists;
  if (g_lists) g_lists->gprev = l;
  g_lists = l;
  pthread_mutex_unlock(&g_lists_mu);
  *phCommandList = l;
  return ZE_RESULT_SUCCESS;
}

static int fz_list_ok(ze_command_list_handle_t l) { return l && l->magic == FZ_MAGIC_LIST; }

FZ_EXPORT ze_result_t zeCommandListDestroy(ze_command_list_handle_t hCommandList) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  ze_command_list_handle_t l = hCommandList;
  int before = atomic_load(&g_dropped);
  pthread_mutex_lock(&l->mu);
  l->magic = 0;
  atomic_store(&l->closing, 1);
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  /* Wake a command waiting on an event: it gives up (below). Copies and fills already
   * queued still run first, as the device would finish them. */
  pthread_mutex_lock(&g_ev_mu);
  pthread_cond_broadcast(&g_ev_cv);
  pthread_mutex_unlock(&g_ev_mu);
  pthread_join(l->th, NULL);
  pthread_mutex_lock(&g_lists_mu);
  if (l->gprev)
    l->gprev->gnext = l->gnext;
  else
    g_lists = l->gnext;
  if (l->gnext) l->gnext->gprev = l->gprev;
  pthread_mutex_unlock(&g_lists_mu);
  int dropped = atomic_load(&g_dropped) - before;
  if (dropped > 0)
    fz_warn("zeCommandListDestroy(%p): %d command(s) still waited on events and were dropped "
            "(the application must ensure the device no longer uses the list)", (void *)l, dropped);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
  atomic_fetch_sub(&g_live_lists, 1);
  return ZE_RESULT_SUCCESS;
}

/* Common front of every append: validation, then queue @c (owned by this call). */
static ze_result_t fz_append(ze_command_list_handle_t l, fz_cmd_t *c, uint32_t nwait,
                             ze_event_handle_t *wait) {
  if (nwait > 0 && !wait) {
    free(c);
    return ZE_RESULT_ERROR_INVALID_SIZE;
  }
  for (uint32_t i = 0; i < nwait; i++)
    if (!fz_ev_ok(wait[i])) {
      free(c);
      return ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT;
    }
  if (c->signal && !fz_ev_ok(c->signal)) {
    free(c);
    return ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT;
  }
  if (atomic_load(&l->lost) || atomic_load(&l->dev->lost)) {
    free(c);
    return ZE_RESULT_ERROR_DEVICE_LOST;
  }
  if (nwait) {
    c->wait = malloc(nwait * sizeof(*c->wait));
    if (!c->wait) {
      free(c);
      return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    memcpy(c->wait, wait, nwait * sizeof(*wait));
    c->nwait = nwait;
  }
  if (atomic_exchange(&l->in_append, 1))
    fz_violation("command list %p appended to from two threads at once", (void *)l);
  pthread_mutex_lock(&g_ev_mu);
  for (uint32_t i = 0; i < c->nwait; i++) c->wait[i]->pool->refs++;
  if (c->signal) c->signal->pool->refs++;
  pthread_mutex_unlock(&g_ev_mu);
  pthread_mutex_lock(&l->mu);
  if (l->tail)
    l->tail->next = c;
  else
    l->head = c;
  l->tail = c;
  uint64_t seq = ++l->appended;
  pthread_cond_broadcast(&l->cv);
  ze_result_t r = ZE_RESULT_SUCCESS;
  if (l->sync) {
    while (l->retired < seq) pthread_cond_wait(&l->cv, &l->mu);
    if (atomic_load(&l->lost)) r = ZE_RESULT_ERROR_DEVICE_LOST;
  }
  pthread_mutex_unlock(&l->mu);
  atomic_store(&l->in_append, 0);
  return r;
}

static fz_cmd_t *fz_cmd_new(int kind, ze_event_handle_t signal) {
  fz_cmd_t *c = calloc(1, sizeof(*c));
  if (c) {
    c->kind = kind;
    c->signal = signal;
  }
  return c;
}

FZ_EXPORT ze_result_t zeCommandListAppendMemoryCopy(ze_command_list_handle_t hCommandList,
                                                    void *dstptr, const void *srcptr, size_t size,
                                                    ze_event_handle_t hSignalEvent,
                                                    uint32_t numWaitEvents,
                                                    ze_event_handle_t *phWaitEvents) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!dstptr || !srcptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_COPY, hSignalEvent);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  /* Pointers are resolved when the copy executes, as a device would. */
  c->dst = dstptr;
  c->src = srcptr;
  c->size = size;
  return fz_append(hCommandList, c, numWaitEvents, phWaitEvents);
}

FZ_EXPORT ze_result_t zeCommandListAppendMemoryFill(ze_command_list_handle_t hCommandList, void *ptr,
                                                    const void *pattern, size_t pattern_size,
                                                    size_t size, ze_event_handle_t hSignalEvent,
                                                    uint32_t numWaitEvents,
                                                    ze_event_handle_t *phWaitEvents) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr || !pattern) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (pattern_size == 0 || (pattern_size & (pattern_size - 1)) ||
      pattern_size > hCommandList->max_fill) {
    fz_violation("zeCommandListAppendMemoryFill: pattern_size %zu is not a power of two <= %zu "
                 "(maxMemoryFillPatternSize of the list's queue group)", pattern_size,
                 hCommandList->max_fill);
    return ZE_RESULT_ERROR_INVALID_SIZE;
  }
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_FILL, hSignalEvent);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  c->dst = ptr;
  c->size = size;
  c->pattern_size = pattern_size;
  memcpy(c->pattern, pattern, pattern_size); /* the pattern is read at append time */
  return fz_append(hCommandList, c, numWaitEvents, phWaitEvents);
}

FZ_EXPORT ze_result_t zeCommandListAppendBarrier(ze_command_list_handle_t hCommandList,
                                                 ze_event_handle_t hSignalEvent,
                                                 uint32_t numWaitEvents,
                                                 ze_event_handle_t *phWaitEvents) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_BARRIER, hSignalEvent);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  return fz_append(hCommandList, c, numWaitEvents, phWaitEvents);
}

FZ_EXPORT ze_result_t zeCommandListAppendSignalEvent(ze_command_list_handle_t hCommandList,
                                                     ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList) || !hEvent) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_SIGNAL, hEvent);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  return fz_append(hCommandList, c, 0, NULL);
}

FZ_EXPORT ze_result_t zeCommandListAppendWaitOnEvents(ze_command_list_handle_t hCommandList,
                                                      uint32_t numEvents,
                                                      ze_event_handle_t *phEvents) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!phEvents) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_WAIT, NULL);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  return fz_append(hCommandList, c, numEvents, phEvents);
}

FZ_EXPORT ze_result_t zeCommandListAppendEventReset(ze_command_list_handle_t hCommandList,
                                                    ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_list_ok(hCommandList) || !hEvent) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_cmd_t *c = fz_cmd_new(FZ_CMD_RESET, hEvent);
  if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  return fz_append(hCommandList, c, 0, NULL);
}
