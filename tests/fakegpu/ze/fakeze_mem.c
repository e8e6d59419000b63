/* Memory of the fake Level Zero loader: the allocation table, device/host/shared
 * allocations and IPC handles. See fakeze.c. */
#define _GNU_SOURCE
#define ZE_APIEXPORT __attribute__((visibility("default")))
#include <level_zero/ze_api.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakemem.h"
#include "fakeze.h"
#include "fakeze_int.h"

/* -------------------------------------------------------- allocation table */

static pthread_mutex_t g_alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static fz_alloc_t *g_allocs;
static int g_nalloc, g_capalloc;
static uint64_t g_next_id = 1;

static int fz_alloc_add(const fz_alloc_t *a) {
  pthread_mutex_lock(&g_alloc_mu);
  if (g_nalloc == g_capalloc) {
    int cap = g_capalloc ? 2 * g_capalloc : 64;
    fz_alloc_t *n = realloc(g_allocs, (size_t)cap * sizeof(*n));
    if (!n) {
      pthread_mutex_unlock(&g_alloc_mu);
      return -1;
    }
    g_allocs = n;
    g_capalloc = cap;
  }
  g_allocs[g_nalloc] = *a;
  g_allocs[g_nalloc].id = g_next_id++;
  g_nalloc++;
  pthread_mutex_unlock(&g_alloc_mu);
  return 0;
}

/* The allocation containing ptr (1) or not (0). */
int fz_alloc_find(const void *ptr, fz_alloc_t *out) {
  uintptr_t p = (uintptr_t)ptr;
  int found = 0;
  pthread_mutex_lock(&g_alloc_mu);
  for (int i = 0; i < g_nalloc && !found; i++) {
    uintptr_t b = (uintptr_t)g_allocs[i].base;
    if (p >= b && p - b < g_allocs[i].size) {
      if (out) *out = g_allocs[i];
      found = 1;
    }
  }
  pthread_mutex_unlock(&g_alloc_mu);
  return found;
}

/* Remove the allocation based at ptr with ipc flag @ipc; 1 when removed. */
static int fz_alloc_remove(const void *ptr, int ipc, fz_alloc_t *out) {
  int found = 0;
  pthread_mutex_lock(&g_alloc_mu);
  for (int i = 0; i < g_nalloc; i++)
    if (g_allocs[i].base == ptr && g_allocs[i].ipc == ipc) {
      if (out) *out = g_allocs[i];
      g_allocs[i] = g_allocs[--g_nalloc];
      found = 1;
      break;
    }
  pthread_mutex_unlock(&g_alloc_mu);
  return found;
}

static int fz_alloc_count(int ipc) {
  int n = 0;
  pthread_mutex_lock(&g_alloc_mu);
  for (int i = 0; i < g_nalloc; i++) n += g_allocs[i].ipc == ipc;
  pthread_mutex_unlock(&g_alloc_mu);
  return n;
}

/* Introspection for the tests (the rest is in fakeze.c, which sits below this file). */
FZ_EXPORT int fakeze_live_allocations(void) { return fz_alloc_count(0); }
FZ_EXPORT int fakeze_open_ipc(void) { return fz_alloc_count(1); }

/* ------------------------------------------------------------------ memory */

FZ_EXPORT ze_result_t zeMemAllocDevice(ze_context_handle_t hContext,
                                       const ze_device_mem_alloc_desc_t *desc, size_t size,
                                       size_t alignment, ze_device_handle_t hDevice, void **pptr) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *d = fz_dev(hDevice);
  if (!fz_ctx_ok(hContext) || !d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!desc || !pptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (size == 0 || size > ((uint64_t)1 << 34)) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  /* fakemem maps whole pages: page alignment is all it can promise. */
  if ((alignment & (alignment - 1)) || alignment > 4096) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  if (atomic_load(&d->lost)) return ZE_RESULT_ERROR_DEVICE_LOST;
  void *p = NULL;
  int e = fakemem_alloc(size, d->idx, &p);
  if (e) return e == ENOMEM ? ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY : ZE_RESULT_ERROR_UNKNOWN;
  fz_alloc_t a = {p, size, ZE_MEMORY_TYPE_DEVICE, hContext, d->idx, 0, 0};
  if (fz_alloc_add(&a) != 0) {
    fakemem_free(p);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  *pptr = p;
  return ZE_RESULT_SUCCESS;
}

static ze_result_t fz_host_alloc(ze_context_handle_t hContext, size_t size, size_t alignment,
                                 ze_memory_type_t type, int dev, void **pptr) {
  if (size == 0) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  if (alignment & (alignment - 1)) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  void *p = NULL;
  if (posix_memalign(&p, alignment > 64 ? alignment : 64, size) != 0)
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  fz_alloc_t a = {p, size, type, hContext, dev, 0, 0};
  if (fz_alloc_add(&a) != 0) {
    free(p);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  *pptr = p;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemAllocHost(ze_context_handle_t hContext,
                                     const ze_host_mem_alloc_desc_t *desc, size_t size,
                                     size_t alignment, void **pptr) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!desc || !pptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return fz_host_alloc(hContext, size, alignment, ZE_MEMORY_TYPE_HOST, -1, pptr);
}

FZ_EXPORT ze_result_t zeMemAllocShared(ze_context_handle_t hContext,
                                       const ze_device_mem_alloc_desc_t *ddesc,
                                       const ze_host_mem_alloc_desc_t *hdesc, size_t size,
                                       size_t alignment, ze_device_handle_t hDevice, void **pptr) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ddesc || !hdesc || !pptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  struct _ze_device_handle_t *d = hDevice ? fz_dev(hDevice) : NULL;
  if (hDevice && !d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return fz_host_alloc(hContext, size, alignment, ZE_MEMORY_TYPE_SHARED, d ? d->idx : -1, pptr);
}

static int fz_cmd_touches(const fz_cmd_t *c, uintptr_t b, size_t n) {
  if (c->kind != FZ_CMD_COPY && c->kind != FZ_CMD_FILL) return 0;
  uintptr_t d = (uintptr_t)c->dst, s = (uintptr_t)c->src;
  if (c->size && d < b + n && b < d + c->size) return 1;
  return c->kind == FZ_CMD_COPY && c->size && s < b + n && b < s + c->size;
}

/* The specification: "the application must ensure the device is not currently
 * referencing the memory before it is freed". Report a copy or fill still queued on, or
 * running in, any command list that touches [base, base+size). */
static void fz_check_unused(const char *call, const void *base, size_t size) {
  uintptr_t b = (uintptr_t)base;
  pthread_mutex_lock(&g_lists_mu);
  for (ze_command_list_handle_t l = g_lists; l; l = l->gnext) {
    int hit = 0;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->nbatch && !hit; i++) hit = fz_cmd_touches(l->batch[i], b, size);
    for (fz_cmd_t *c = l->head; c && !hit; c = c->next) hit = fz_cmd_touches(c, b, size);
    pthread_mutex_unlock(&l->mu);
    if (hit)
      fz_violation("%s(%p): a copy or fill of command list %p that touches it has not "
                   "completed (the device still references the memory)", call, base, (void *)l);
  }
  pthread_mutex_unlock(&g_lists_mu);
}

FZ_EXPORT ze_result_t zeMemFree(ze_context_handle_t hContext, void *ptr) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_alloc_t a;
  if (!fz_alloc_remove(ptr, 0, &a)) {
    if (fz_alloc_find(ptr, &a) && a.ipc)
      fz_violation("zeMemFree(%p) of memory opened with zeMemOpenIpcHandle "
                   "(close it with zeMemCloseIpcHandle)", ptr);
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (a.ctx != hContext) fz_violation("zeMemFree(%p) with another context than it was allocated on", ptr);
  fz_check_unused("zeMemFree", a.base, a.size);
  pthread_rwlock_wrlock(&g_mem_rw);
  if (a.type == ZE_MEMORY_TYPE_DEVICE)
    fakemem_free(ptr);
  else
    free(ptr);
  pthread_rwlock_unlock(&g_mem_rw);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemGetAddressRange(ze_context_handle_t hContext, const void *ptr,
                                           void **pBase, size_t *pSize) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_alloc_t a;
  /* Not an allocation of this driver: the specification names no code; this one is
   * chosen (README). */
  if (!fz_alloc_find(ptr, &a)) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (pBase) *pBase = a.base;
  if (pSize) *pSize = a.size;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemGetAllocProperties(ze_context_handle_t hContext, const void *ptr,
                                              ze_memory_allocation_properties_t *p,
                                              ze_device_handle_t *phDevice) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr || !p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_alloc_t a;
  if (!fz_alloc_find(ptr, &a)) {
    p->type = ZE_MEMORY_TYPE_UNKNOWN;
    p->id = 0;
    p->pageSize = 0;
    if (phDevice) *phDevice = NULL;
    return ZE_RESULT_SUCCESS;
  }
  p->type = a.type;
  p->id = a.id;
  p->pageSize = 4096;
  if (phDevice) *phDevice = a.dev >= 0 ? &g_dev[a.dev] : NULL;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemGetIpcHandle(ze_context_handle_t hContext, const void *ptr,
                                        ze_ipc_mem_handle_t *pIpcHandle) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr || !pIpcHandle) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_alloc_t a;
  fakemem_region_t r;
  if (!fz_alloc_find(ptr, &a) || a.type != ZE_MEMORY_TYPE_DEVICE || a.ipc) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (a.base != ptr) {
    fz_violation("zeMemGetIpcHandle(%p): not the base of its allocation (%p); the "
                 "specification requires the pointer zeMemAllocDevice returned", ptr, a.base);
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (fakemem_find(ptr, 1, &r) != 0) return ZE_RESULT_ERROR_UNKNOWN;
#ifdef FAKEZE_NEWER_LOADER
  /* A descriptor of its own per handle, as a dma-buf export is; zeMemPutIpcHandle
   * closes it. */
  int fd = fcntl(r.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  atomic_fetch_add(&g_ipc_out, 1);
#else
  /* 1.8.12 has no zeMemPutIpcHandle: the allocation's own descriptor, valid until
   * zeMemFree, so no descriptor is created that nobody could close. */
  int fd = r.fd;
#endif
  fz_ipc_t h = {fd, FZ_MAGIC_IPC, a.size, a.dev, (int32_t)getpid(), a.id};
  memset(pIpcHandle->data, 0, sizeof(pIpcHandle->data));
  memcpy(pIpcHandle->data, &h, sizeof(h));
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemOpenIpcHandle(ze_context_handle_t hContext, ze_device_handle_t hDevice,
                                         ze_ipc_mem_handle_t handle, ze_ipc_memory_flags_t flags,
                                         void **pptr) {
  FZ_CHECK_INIT();
  struct _ze_device_handle_t *d = fz_dev(hDevice);
  if (!fz_ctx_ok(hContext) || !d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (flags > 0x3) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (!pptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_ipc_t h;
  memcpy(&h, handle.data, sizeof(h));
  if (h.magic != FZ_MAGIC_IPC || h.size == 0 || h.device < -1 || h.device >= g_ndev)
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (h.device == -1) h.device = d->idx; /* built from a bare descriptor: owner unknown */
  /* The descriptor must be valid in this process (the importer received its own copy). */
  void *p = NULL;
  int e = fakemem_import(getpid(), h.fd, h.size, h.device, &p);
  if (e) {
    fz_warn("zeMemOpenIpcHandle: descriptor %d (from pid %d) cannot be mapped here: %s", h.fd,
            h.pid, strerror(e));
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  fz_alloc_t a = {p, h.size, ZE_MEMORY_TYPE_DEVICE, hContext, d->idx, 1, 0};
  if (fz_alloc_add(&a) != 0) {
    fakemem_free(p);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  *pptr = p;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemCloseIpcHandle(ze_context_handle_t hContext, const void *ptr) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!ptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_alloc_t a;
  if (!fz_alloc_remove(ptr, 1, &a)) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  fz_check_unused("zeMemCloseIpcHandle", a.base, a.size);
  pthread_rwlock_wrlock(&g_mem_rw);
  fakemem_free((void *)ptr);
  pthread_rwlock_unlock(&g_mem_rw);
  return ZE_RESULT_SUCCESS;
}

#ifdef FAKEZE_NEWER_LOADER
FZ_EXPORT ze_result_t zeMemPutIpcHandle(ze_context_handle_t hContext, ze_ipc_mem_handle_t handle) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  fz_ipc_t h;
  memcpy(&h, handle.data, sizeof(h));
  if (h.magic != FZ_MAGIC_IPC || h.pid != (int32_t)getpid()) {
    fz_violation("zeMemPutIpcHandle of a handle this process did not get");
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (close(h.fd) != 0) {
    fz_violation("zeMemPutIpcHandle: descriptor %d of the handle is not open (put twice?)", h.fd);
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  atomic_fetch_sub(&g_ipc_out, 1);
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemGetFileDescriptorFromIpcHandleExp(ze_context_handle_t hContext,
                                                             ze_ipc_mem_handle_t ipcHandle,
                                                             uint64_t *pHandle) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!pHandle) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  fz_ipc_t h;
  memcpy(&h, ipcHandle.data, sizeof(h));
  if (h.magic != FZ_MAGIC_IPC) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  *pHandle = (uint64_t)(uint32_t)h.fd;
  return ZE_RESULT_SUCCESS;
}

FZ_EXPORT ze_result_t zeMemGetIpcHandleFromFileDescriptorExp(ze_context_handle_t hContext,
                                                             uint64_t handle,
                                                             ze_ipc_mem_handle_t *pIpcHandle) {
  FZ_CHECK_INIT();
  if (!fz_ctx_ok(hContext)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!pIpcHandle) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  struct stat st;
  if (handle > INT32_MAX || fstat((int)handle, &st) != 0 || st.st_size <= 0)
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  /* Everything comes from the descriptor alone, as for a dma-buf: its size; the owning
   * device is not in it (-1: zeMemOpenIpcHandle takes the opening device). */
  fz_ipc_t h = {(int32_t)handle, FZ_MAGIC_IPC, (uint64_t)st.st_size, -1, 0, 0};
  memset(pIpcHandle->data, 0, sizeof(pIpcHandle->data));
  memcpy(pIpcHandle->data, &h, sizeof(h));
  return ZE_RESULT_SUCCESS;
}
#endif
