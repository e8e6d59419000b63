/* Events of the fake Level Zero loader: pools, events, host signal/reset/wait.
 * See fakeze.c. */
#define _GNU_SOURCE
#define ZE_APIEXPORT __attribute__((visibility("default")))
#include <level_zero/ze_api.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "fakeze_int.h"

/* ------------------------------------------------------------------ events */

FZ_EXPORT ze_result_t zeEventPoolCreate(ze_context_handle_t hContext, const ze_event_pool_desc_t *desc,
                                        uint32_t numDevices, ze_device_handle_t *phDevices,
                                        ze_event_pool_handle_t *phEventPool) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!desc || !phEventPool) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->flags > 0xf) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (desc->count == 0 || (numDevices > 0 && !phDevices)) return ZE_RESULT_ERROR_INVALID_SIZE;
  for (uint32_t i = 0; i < numDevices; i++)
    if (!fz_dev(phDevices[i])) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  ze_event_pool_handle_t p = calloc(1, sizeof(*p));
  if (p) p->ev = calloc(desc->count, sizeof(*p->ev));
  if (!p || !p->ev) {
    free(p);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  p->magic = FZ_MAGIC_POOL;
  p->ctx = hContext;
  p->count = desc->count;
  p->flags = desc->flags;
  for (uint32_t i = 0; i < desc->count; i++) {
    p->ev[i].pool = p;
    p->ev[i].index = i;
  }
  atomic_fetch_add(&g_live_pools, 1);
  *phEventPool = p;
  return ZE_RESULT_SUCCESS;
}

void fz_pool_free(ze_event_pool_handle_t p) {
  free(p->ev);
  free(p);
}

FZ_EXPORT ze_result_t zeEventPoolDestroy(ze_event_pool_handle_t hEventPool) {
  FZ_CHECK_INIT();
  if (!hEventPool || hEventPool->magic != FZ_MAGIC_POOL) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  int busy = 0;
  pthread_mutex_lock(&g_ev_mu);
  hEventPool->magic = 0;
  hEventPool->destroyed = 1;
  busy = hEventPool->refs > 0;
  for (uint32_t i = 0; i < hEventPool->count; i++)
    if (hEventPool->ev[i].created) {
      hEventPool->ev[i].created = 0;
      hEventPool->ev[i].magic = 0;
      atomic_fetch_sub(&g_live_events, 1);
    }
  pthread_mutex_unlock(&g_ev_mu);
  atomic_fetch_sub(&g_live_pools, 1);
  if (busy)
    fz_violation("zeEventPoolDestroy while commands of a command list still use its events");
  else
    fz_pool_free(hEventPool);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeEventCreate(ze_event_pool_handle_t hEventPool, const ze_event_desc_t *desc,
                                    ze_event_handle_t *phEvent) {
  FZ_CHECK_INIT();
  if (!hEventPool || hEventPool->magic != FZ_MAGIC_POOL) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!desc || !phEvent) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->signal > 0x7 || desc->wait > 0x7) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (desc->index >= hEventPool->count) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  ze_event_handle_t e = &hEventPool->ev[desc->index];
  pthread_mutex_lock(&g_ev_mu);
  int twice = e->created;
  if (!twice) {
    e->created = 1;
    e->magic = FZ_MAGIC_EVENT;
    atomic_store(&e->state, FZ_EV_RESET);
  }
  pthread_mutex_unlock(&g_ev_mu);
  if (twice) {
    fz_violation("zeEventCreate: index %u of the pool already has an event", desc->index);
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  atomic_fetch_add(&g_live_events, 1);
  *phEvent = e;
  return ZE_RESULT_SUCCESS;
}

int fz_ev_ok(ze_event_handle_t e) { return e && e->magic == FZ_MAGIC_EVENT && e->created; }

FZ_EXPORT ze_result_t zeEventDestroy(ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_ev_ok(hEvent)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  pthread_mutex_lock(&g_ev_mu);
  hEvent->created = 0;
  hEvent->magic = 0;
  pthread_mutex_unlock(&g_ev_mu);
  atomic_fetch_sub(&g_live_events, 1);
  return ZE_RESULT_SUCCESS;
}

void fz_ev_set(ze_event_handle_t e, int state) {
  pthread_mutex_lock(&g_ev_mu);
  atomic_store(&e->state, state);
  pthread_cond_broadcast(&g_ev_cv);
  pthread_mutex_unlock(&g_ev_mu);
}

static ze_result_t fz_ev_result(ze_event_handle_t e) {
  int s = atomic_load(&e->state);
  return s == FZ_EV_SIGNALED ? ZE_RESULT_SUCCESS : s == FZ_EV_LOST ? ZE_RESULT_ERROR_DEVICE_LOST
                                                                   : ZE_RESULT_NOT_READY;
}

FZ_EXPORT ze_result_t zeEventHostSignal(ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_ev_ok(hEvent)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_ev_set(hEvent, FZ_EV_SIGNALED);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeEventHostReset(ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_ev_ok(hEvent)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_ev_set(hEvent, FZ_EV_RESET);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeEventQueryStatus(ze_event_handle_t hEvent) {
  FZ_CHECK_INIT();
  if (!fz_ev_ok(hEvent)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return fz_ev_result(hEvent);
}

FZ_EXPORT ze_result_t zeEventHostSynchronize(ze_event_handle_t hEvent, uint64_t timeout) {
  FZ_CHECK_INIT();
  if (!fz_ev_ok(hEvent)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  if (timeout != UINT64_MAX) {
    uint64_t ns = (uint64_t)dl.tv_nsec + timeout % 1000000000ull;
    dl.tv_sec += (time_t)(timeout / 1000000000ull + ns / 1000000000ull);
    dl.tv_nsec = (long)(ns % 1000000000ull);
  }
  pthread_mutex_lock(&g_ev_mu);
  while (atomic_load(&hEvent->state) == FZ_EV_RESET && timeout != 0) {
    if (timeout == UINT64_MAX)
      pthread_cond_wait(&g_ev_cv, &g_ev_mu);
    else if (pthread_cond_timedwait(&g_ev_cv, &g_ev_mu, &dl) == ETIMEDOUT)
      break;
  }
  pthread_mutex_unlock(&g_ev_mu);
  return fz_ev_result(hEvent);
}
