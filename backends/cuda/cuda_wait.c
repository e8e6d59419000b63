/* cuda backend: errors, the device guard, host-side waits on streams and the bootstrap
 * board's allgather with agreement on success. */
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

/* ----------------------------------------------------------------- helpers */
/* ulgpu_fail also clears the thread's last error: a failed call of ours must not be
 * reported again by the next kernel launch (launchers return cudaGetLastError). */
ul_result_t cuda_fail(ul_backend_comm_t *c, const char *call, cudaError_t e) {
  return ulgpu_fail(c ? c->core : NULL, "cuda backend", call, e);
}

/* Make c's device current for this thread; *prev gets the caller's device. */
ul_result_t cuda_enter(ul_backend_comm_t *c, int *prev) {
  if (cudaGetDevice(prev) != cudaSuccess) {
    cudaGetLastError();
    *prev = -1;
  }
  if (*prev == c->device) return UL_OK;
  cudaError_t e = cudaSetDevice(c->device);
  return e == cudaSuccess ? UL_OK : cuda_fail(c, "cudaSetDevice", e);
}

/* Give the calling thread its own device back. */
void cuda_leave(ul_backend_comm_t *c, int prev) {
  if (prev >= 0 && prev != c->device) cudaSetDevice(prev);
}
static int cuda_aborted(ul_backend_comm_t *c) {
  return c->dead || (c->abort_flag && *c->abort_flag) || (c->init_abort && *c->init_abort);
}

static ul_result_t cuda_wait_check(void *arg, double elapsed_ms, const char *what) {
  (void)elapsed_ms;
  ul_backend_comm_t *c = arg;
  return cuda_aborted(c) ? ulbu_aborted_error(c->core, c->rank, what) : UL_OK;
}

static ul_result_t cuda_wait_expired(void *arg, int timeout_ms, const char *what) {
  ul_backend_comm_t *c = arg;
  return ulbu_timeout_error(c->core, c->rank, what, timeout_ms);
}

void cuda_waiter_init(ul_backend_comm_t *c) {
  c->waiter = ulbu_gpu_waiter(c, cuda_wait_check, cuda_wait_expired, c->timeout_ms);
}

/* A stream's wait says "stream synchronize" when aborted, "work on the stream" when late. */
static ul_result_t cuda_stream_check(void *arg, double elapsed_ms, const char *what) {
  (void)what;
  return cuda_wait_check(arg, elapsed_ms, "stream synchronize");
}

typedef struct cuda_stream_cond {
  ul_backend_comm_t *c;
  cudaStream_t s;
} cuda_stream_cond_t;

static ul_result_t cuda_stream_poll(void *arg) {
  cuda_stream_cond_t *x = arg;
  cudaError_t e = cudaStreamQuery(x->s);
  if (e == cudaSuccess) return UL_OK;
  if (e != cudaErrorNotReady) return cuda_fail(x->c, "cudaStreamQuery", e);
  return UL_IN_PROGRESS;
}

ul_result_t cuda_stream_wait(ul_backend_comm_t *c, cudaStream_t s, int timeout_ms) {
  ulbu_waiter_t w = c->waiter;
  w.check = cuda_stream_check;
  w.timeout_ms = timeout_ms;
  cuda_stream_cond_t x = {c, s};
  const ulbu_cond_t cond = {cuda_stream_poll, NULL, &x};
  return ulbu_wait(&w, &cond, "work on the stream", NULL);
}

/* NULL stream: run now. */
ul_result_t cuda_done(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return s ? UL_OK : cuda_stream_wait(c, c->internal, c->timeout_ms);
}

/* ------------------------------------------------------------------- board */

/* Rank 0 also unlinks the board name, in case its creator died before doing so. */
const ulbu_board_conf_t cuda_board_conf = {"cuda backend", "ulcuda", CUDA_SLOT_BYTES, 1};

/* Publish *mine, then read every rank's slot into all[] (collective). */
ul_result_t cuda_allgather(ul_backend_comm_t *c, const cuda_slot_t *mine, cuda_slot_t *all,
                         const char *what) {
  return ulbu_board_allgather(&c->board, mine, all, sizeof(*mine), what);
}

/* Before an allgather: this rank's status (and, on failure, its sentence) into mine. */
void cuda_status(ul_backend_comm_t *c, cuda_slot_t *mine, ul_result_t st) {
  mine->status = st;
  mine->why[0] = '\0';
  if (st != UL_OK) snprintf(mine->why, sizeof(mine->why), "%s", ul_comm_last_error(c->core));
}

/* After an allgather: UL_OK if every rank's status is UL_OK, else the first failing
 * rank's code; ranks other than the failing one record why, with its sentence (the
 * failing rank keeps its own). */
ul_result_t cuda_agree(ul_backend_comm_t *c, const cuda_slot_t *all, const char *what) {
  if (all[c->rank].status != UL_OK) return (ul_result_t)all[c->rank].status;
  for (int r = 0; r < c->nranks; r++) {
    if (all[r].status == UL_OK) continue;
    return ul_backend_set_error(c->core, (ul_result_t)all[r].status,
                                "cuda backend: rank %d: %s failed on rank %d: %.*s", c->rank, what,
                                r, (int)sizeof(all[r].why), all[r].why);
  }
  return UL_OK;
}
