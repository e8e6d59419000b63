/* The fake NCCL's errors, environment, fault injection and time (ncclGetErrorString,
 * ncclGetLastError): the bottom of the library, which calls nothing else of it. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fakenccl_int.h"

/* ================================================================ errors, env */

static pthread_mutex_t g_err_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_last_error[1024];

/* NCCL's WARN: the text becomes ncclGetLastError() (one string per process). */
void fn_warn(const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&g_err_lock);
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
  va_end(ap);
  const char *dbg = getenv("NCCL_DEBUG");
  if (getenv("FAKEGPU_NCCL_DEBUG") || (dbg && strcasecmp(dbg, "VERSION") && strcasecmp(dbg, "")))
    fprintf(stderr, "fakenccl %d WARN %s\n", (int)getpid(), g_last_error);
  pthread_mutex_unlock(&g_err_lock);
}

int env_int(const char *name, int def) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end;
  long x = strtol(v, &end, 10);
  return *end ? def : (int)x;
}

int timeout_ms(void) { return env_int("FAKEGPU_NCCL_TIMEOUT_MS", 30000); }

/* FAKEGPU_NCCL_FAULT=kind:rank[:nth][,...] */
typedef struct {
  int kind, rank, nth;
} fn_fault_t;
static fn_fault_t g_faults[8];
static int g_nfaults;
static pthread_once_t g_fault_once = PTHREAD_ONCE_INIT;

static void parse_faults(void) {
  const char *v = getenv("FAKEGPU_NCCL_FAULT");
  if (!v) return;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", v);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t && g_nfaults < 8; t = strtok_r(NULL, ",", &save)) {
    fn_fault_t f = {0, -1, 0};
    char kind[32] = "";
    int n = sscanf(t, "%31[a-z_]:%d:%d", kind, &f.rank, &f.nth);
    if (n >= 2 && !strcmp(kind, "never_join")) f.kind = F_NEVER_JOIN;
    else if (n == 3 && !strcmp(kind, "async_error")) f.kind = F_ASYNC;
    else if (n == 3 && !strcmp(kind, "hang")) f.kind = F_HANG;
    if (f.kind) g_faults[g_nfaults++] = f;
    else fprintf(stderr, "fakenccl: ignoring FAKEGPU_NCCL_FAULT entry '%s'\n", t);
  }
}

void comm_faults(ncclComm_t c) {
  pthread_once(&g_fault_once, parse_faults);
  for (int i = 0; i < g_nfaults; i++) {
    if (g_faults[i].rank != c->rank) continue;
    if (g_faults[i].kind == F_NEVER_JOIN) c->fault_never_join = 1;
    if (g_faults[i].kind == F_ASYNC) c->fault_async_op = g_faults[i].nth;
    if (g_faults[i].kind == F_HANG) c->fault_hang_op = g_faults[i].nth;
  }
}

double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Short yields first (a peer thread is usually about to arrive), then 50 us sleeps so
 * waiting ranks do not starve the ones they wait for on a small machine. */
void backoff(unsigned *spins) {
  if (++*spins < 64) {
    sched_yield();
  } else {
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
  }
}

const char *cuda_str(cudaError_t e) { return cudaGetErrorString(e); }

FN_API const char *ncclGetErrorString(ncclResult_t code) {
  switch (code) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}

FN_API const char *ncclGetLastError(ncclComm_t comm) {
  /* NCCL: one string per process, comm unused. A per-thread copy taken under the lock,
   * so a reader never sees a message half rewritten by another thread. */
  static __thread char copy[sizeof g_last_error];
  (void)comm;
  pthread_mutex_lock(&g_err_lock);
  memcpy(copy, g_last_error, sizeof copy);
  pthread_mutex_unlock(&g_err_lock);
  return copy;
}
