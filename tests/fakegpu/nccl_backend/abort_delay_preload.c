/* LD_PRELOAD shim: ncclCommAbort that first sleeps FAKEGPU_NCCL_ABORT_DELAY_MS (default
 * 5000), like the abort that hangs in NVIDIA/nccl#1777, then calls the fake's. Used by
 * the H5 test: ul_comm_abort must return promptly anyway. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>
#include <time.h>

__attribute__((visibility("default"))) ncclResult_t ncclCommAbort(ncclComm_t comm) {
  static ncclResult_t (*real)(ncclComm_t);
  if (!real) *(void **)(&real) = dlsym(RTLD_NEXT, "ncclCommAbort");
  const char *v = getenv("FAKEGPU_NCCL_ABORT_DELAY_MS");
  long ms = v && *v ? atol(v) : 5000;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  return real ? real(comm) : ncclSystemError;
}
