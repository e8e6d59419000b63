/* Memory entry points of the fake NCCL: ncclMemAlloc, windows and buffer registration
 * (what a task may touch is in fakenccl_view.c). See fakenccl.c. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "fakemem.h"
#include "fakenccl_int.h"

/* ================================================================ memory, windows */

FN_API ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  if (!ptr) {
    fn_warn("ncclMemAlloc : ptr argument is NULL");
    return ncclInvalidArgument;
  }
  *ptr = NULL;
  if (size == 0) return ncclSuccess;
  CUDACHECK(cudaMalloc(ptr, size));
  return ncclSuccess;
}

FN_API ncclResult_t ncclMemFree(void *ptr) {
  if (!ptr) return ncclSuccess;
  CUDACHECK(cudaFree(ptr));
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                           ncclWindow_t *win, int winFlags) {
  ncclResult_t r;
  if ((r = comm_check(comm, "ncclCommWindowRegister")) != ncclSuccess) return r;
  if ((r = ptr_check(win, "ncclCommWindowRegister", "win")) != ncclSuccess) return r;
  if ((r = comm_ensure_ready(comm)) != ncclSuccess) return r;
  *win = NULL;
  fakemem_region_t reg;
  if (!buff || size == 0 || fakemem_find(buff, size, &reg) != 0) {
    fn_warn("ncclCommWindowRegister : buffer %p (%zu bytes) is not device memory", buff, size);
    return ncclInvalidArgument;
  }
  if (reg.device != comm->dev) {
    fn_warn("ncclCommWindowRegister : buffer allocated on device %d mismatchs with NCCL device %d",
            reg.device, comm->dev);
    return ncclInvalidArgument;
  }
  /* Collective: every rank registers its window (NCCL exchanges them). */
  uint64_t mine[2] = {(uint64_t)size, (uint64_t)winFlags}, *all = calloc((size_t)comm->nranks, 16);
  if (!all) return ncclSystemError;
  r = boot_allgather(comm, mine, sizeof mine, all, NULL);
  free(all);
  if (r != ncclSuccess) return r;
  struct ncclWindow_vidmem *w = calloc(1, sizeof *w);
  if (!w) return ncclSystemError;
  w->buff = buff;
  w->size = size;
  w->flags = winFlags;
  pthread_mutex_lock(&comm->lock);
  w->next = comm->windows;
  comm->windows = w;
  pthread_mutex_unlock(&comm->lock);
  *win = w;
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  ncclResult_t r;
  if ((r = comm_check(comm, "ncclCommWindowDeregister")) != ncclSuccess) return r;
  pthread_mutex_lock(&comm->lock);
  for (struct ncclWindow_vidmem **p = &comm->windows; *p; p = &(*p)->next) {
    if (*p == win) {
      *p = win->next;
      pthread_mutex_unlock(&comm->lock);
      free(win);
      return ncclSuccess;
    }
  }
  pthread_mutex_unlock(&comm->lock);
  fn_warn("ncclCommWindowDeregister : window %p is not registered with this communicator",
          (void *)win);
  return ncclInvalidArgument;
}

FN_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
  ncclResult_t r;
  if ((r = comm_check(comm, "ncclCommRegister")) != ncclSuccess) return r;
  if (!handle) return ncclInvalidArgument;
  if ((r = cuda_ptr_check(buff, comm, "buff", "ncclCommRegister")) != ncclSuccess) return r;
  *handle = buff;
  (void)size;
  return ncclSuccess;
}

FN_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  (void)handle;
  return comm_check(comm, "ncclCommDeregister");
}
