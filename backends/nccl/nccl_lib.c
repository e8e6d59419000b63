/* The NCCL library as found at run time: its version and the entry points newer than
 * the oldest supported one, looked up by name (dlsym) so that one plugin binary runs on
 * every NCCL from 2.18.1; and the release of memory that came from either allocator.
 * The lowest file of the nccl plugin. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "nccl_internal.h"

int ulnccl_version_code;

/* Entry points newer than 2.18.1, looked up at init (ulnccl_resolve_optional). */
ulnccl_opt_t ulnccl_opt;

/* The plugin is dlopen'ed RTLD_LOCAL, so libnccl is not in the global scope: look the
 * symbols up in the library that provides ncclGetVersion. */
static void *nccl_lib_handle(void) {
  Dl_info info;
  if (dladdr((void *)&ncclGetVersion, &info) && info.dli_fname) {
    void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (h) return h; /* kept open: the plugin uses it for the process lifetime */
  }
  return RTLD_DEFAULT;
}

void ulnccl_resolve_optional(void) {
  memset(&ulnccl_opt, 0, sizeof(ulnccl_opt));
  if (!ul_backend_param_int("NCCL_NEW_API", 1,
                            "0: ignore NCCL entry points newer than 2.18.1 (ncclMemAlloc, "
                            "window registration, ncclAlltoAll/Gather/Scatter) and use the "
                            "fallbacks, as with an old NCCL"))
    return;
  void *h = nccl_lib_handle();
#define ULNCCL_SYM(field, name) *(void **)(&ulnccl_opt.field) = dlsym(h, name)
  ULNCCL_SYM(alltoall, "ncclAlltoAll");
  ULNCCL_SYM(gather, "ncclGather");
  ULNCCL_SYM(scatter, "ncclScatter");
  ULNCCL_SYM(mem_alloc, "ncclMemAlloc");
  ULNCCL_SYM(mem_free, "ncclMemFree");
  ULNCCL_SYM(win_register, "ncclCommWindowRegister");
  ULNCCL_SYM(win_deregister, "ncclCommWindowDeregister");
#undef ULNCCL_SYM
  if (!ulnccl_opt.mem_alloc || !ulnccl_opt.mem_free) ulnccl_opt.mem_alloc = NULL, ulnccl_opt.mem_free = NULL;
  if (!ulnccl_opt.win_register || !ulnccl_opt.win_deregister)
    ulnccl_opt.win_register = NULL, ulnccl_opt.win_deregister = NULL;
}

/* tag 1: ncclMemAlloc, 0: the cudaMalloc fallback. */
void ulnccl_alloc_release(void *ptr, int from_nccl, void *arg) {
  (void)arg;
  if (from_nccl && ulnccl_opt.mem_free) ulnccl_opt.mem_free(ptr);
  else cudaFree(ptr);
}
