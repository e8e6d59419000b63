/* Groups of the fake NCCL: ncclGroupStart/End, the background jobs of init and split,
 * and the stream tasks that run a group's operations. See fakenccl.c. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakenccl_int.h"

/* ================================================================ groups, jobs */

__thread int g_depth;
static __thread ncclResult_t g_group_err;
static __thread int g_group_blocking = -1;
__thread fn_op_t *g_ops, **g_ops_tail; /* NULL tail: the list is empty */
__thread fn_job_t *g_jobs;

void group_join_comm(ncclComm_t c, ncclResult_t *err) {
  if (g_group_blocking == -1) g_group_blocking = c->blocking;
  else if (g_group_blocking != c->blocking && *err == ncclSuccess) {
    fn_warn("Blocking and nonblocking communicators are not allowed in the same group.");
    *err = ncclInvalidArgument;
  }
}

ncclResult_t group_err_check(ncclResult_t r) {
  if (g_depth > 0 && r != ncclSuccess && r != ncclInProgress && g_group_err == ncclSuccess)
    g_group_err = r;
  return r;
}

static void free_ops(fn_op_t *o) {
  while (o) {
    fn_op_t *n = o->next;
    free(o);
    o = n;
  }
}

static ncclResult_t launch_ops(void);

/* Runs a queued job on its own thread (NCCL's ncclAsyncLaunch). */
static void start_job(fn_job_t *j) {
  pthread_t th;
  comm_ref(j->comm);
  if (pthread_create(&th, NULL, j->fn, j->arg) != 0) {
    fn_warn("pthread_create failed");
    atomic_store(&j->comm->async, ncclSystemError);
    comm_unref(j->comm);
    return;
  }
  j->comm->job = th;
  j->comm->job_live = 1;
  j->started = 1;
}

ncclResult_t group_end_internal(void) {
  if (g_depth == 0) {
    fn_warn("ncclGroupEnd: not in a group call.");
    return ncclInvalidUsage;
  }
  if (--g_depth > 0) return ncclSuccess;
  ncclResult_t ret = g_group_err;
  fn_op_t *ops = g_ops;
  fn_job_t *jobs = g_jobs;
  int blocking = g_group_blocking;
  g_ops = NULL;
  g_ops_tail = NULL;
  g_jobs = NULL;
  g_group_err = ncclSuccess;
  g_group_blocking = -1;
  if (ret != ncclSuccess) {
    /* groupCleanup: nothing of the group runs; init jobs leave their comm failed. */
    for (fn_job_t *j = jobs; j;) {
      fn_job_t *n = j->next;
      atomic_store(&j->comm->async, ret);
      free(j->arg == j->comm ? NULL : j->arg);
      free(j);
      j = n;
    }
    free_ops(ops);
    return ret;
  }
  for (fn_job_t *j = jobs; j; j = j->next) start_job(j);
  if (blocking == 1) {
    for (fn_job_t *j = jobs; j; j = j->next) {
      if (!j->started) continue;
      pthread_join(j->comm->job, NULL);
      j->comm->job_live = 0;
      ncclResult_t st = (ncclResult_t)atomic_load(&j->comm->async);
      if (st != ncclSuccess && ret == ncclSuccess) ret = st;
    }
  } else if (jobs) {
    ret = ncclInProgress;
  }
  while (jobs) {
    fn_job_t *n = jobs->next;
    free(jobs);
    jobs = n;
  }
  g_ops = ops; /* launch_ops consumes the list */
  ncclResult_t r = launch_ops();
  if (r != ncclSuccess) return r;
  if (blocking == 0 && ops) ret = ncclInProgress;
  return ret;
}

FN_API ncclResult_t ncclGroupStart(void) {
  g_depth++;
  return ncclSuccess;
}

FN_API ncclResult_t ncclGroupEnd(void) { return group_end_internal(); }

FN_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  if (simInfo) simInfo->estimatedTime = 0.0f;
  return group_end_internal();
}

/* ================================================================ stream tasks */

static void CUDART_CB task_fn(void *arg) {
  fn_task_t *t = arg;
  ncclComm_t c = t->comm;
  atomic_fetch_add(&c->running, 1);
  unsigned spins = 0;
  int rc = 0;
  /* NCCL serializes a communicator's kernels across streams. */
  while (atomic_load_explicit(&c->exec_seq, memory_order_acquire) != t->seq) {
    if (atomic_load(&c->abort_flag)) {
      rc = -1;
      break;
    }
    backoff(&spins);
  }
  int turn = rc == 0;
  /* A failed communicator runs nothing more (owed InProgress reports are not errors). */
  int st = atomic_load(&c->async);
  if (atomic_load(&c->abort_flag) || (st != ncclSuccess && st != ncclInProgress)) rc = -1;
  fn_op_t *p2p[256];
  int np = 0;
  for (fn_op_t *o = t->ops; o && rc == 0; o = o->next) {
    if (o->fault == F_HANG) {
      /* FAKEGPU_NCCL_FAULT hang: this kernel never finishes until ncclCommAbort. */
      while (!atomic_load(&c->abort_flag)) backoff(&spins);
      rc = -1;
      break;
    }
    if (o->fault == F_ASYNC) {
      fn_warn("NCCL : rank %d: injected remote error at operation %s (FAKEGPU_NCCL_FAULT)",
              c->rank, o->name);
      task_error(c, ncclRemoteError);
      rc = -1;
      break;
    }
    if (o->kind == K_SEND || o->kind == K_RECV) {
      if (np < 256) p2p[np++] = o;
      continue;
    }
    rc = run_coll(c, o);
  }
  if (rc == 0 && np) rc = run_p2p(c, p2p, np);
  if (turn) atomic_store_explicit(&c->exec_seq, t->seq + 1, memory_order_release);
  free_ops(t->ops);
  free(t);
  atomic_fetch_sub(&c->running, 1);
  atomic_fetch_sub(&c->outstanding, 1);
  comm_unref(c);
}

typedef cudaError_t (*stream_get_device_fn)(cudaStream_t, int *);

/* The device a stream belongs to, where the runtime can say (CUDA 12.8+). */
static int stream_device(cudaStream_t s, int *dev) {
  static stream_get_device_fn fn;
  static int looked;
  if (!looked) {
    fn = (stream_get_device_fn)dlsym(RTLD_DEFAULT, "cudaStreamGetDevice");
    looked = 1;
  }
  if (!fn || s == 0 || s == cudaStreamLegacy || s == cudaStreamPerThread) return 0;
  if (fn(s, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return 1;
}

/* Launch one communicator's part of a group: one task on its first stream, joined with
 * the other streams it used by events (NCCL's strong-stream join). */
static ncclResult_t launch_comm(ncclComm_t c, fn_op_t *ops) {
  cudaStream_t st = ops->stream;
  int sd;
  for (fn_op_t *o = ops; o; o = o->next) {
    if (stream_device(o->stream, &sd) && sd != c->dev) {
      fn_warn("Cuda failure '%s'", cuda_str(cudaErrorInvalidResourceHandle));
      free_ops(ops);
      return ncclUnhandledCudaError;
    }
    o->s_host = host_reachable(o->sbuf);
    o->r_host = host_reachable(o->rbuf);
    long nth = ++c->nops;
    if (c->fault_async_op && nth == c->fault_async_op) o->fault = F_ASYNC;
    if (c->fault_hang_op && nth == c->fault_hang_op) o->fault = F_HANG;
  }
  /* Other streams of this group (the task frees the ops once it ran). */
  cudaStream_t others[64];
  int nothers = 0;
  for (fn_op_t *o = ops->next; o; o = o->next) {
    int seen = o->stream == st;
    for (int k = 0; k < nothers && !seen; k++) seen = others[k] == o->stream;
    if (!seen && nothers < 64) others[nothers++] = o->stream;
  }
  for (int k = 0; k < nothers; k++) {
    cudaEvent_t ev;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess) {
      cudaEventRecord(ev, others[k]);
      cudaStreamWaitEvent(st, ev, 0);
      cudaEventDestroy(ev);
    }
  }
  fn_task_t *t = calloc(1, sizeof *t);
  if (!t) {
    free_ops(ops);
    return ncclSystemError;
  }
  t->comm = c;
  t->ops = ops;
  t->seq = c->enq_seq++;
  comm_ref(c);
  atomic_fetch_add(&c->outstanding, 1);
  cudaError_t e = cudaLaunchHostFunc(st, task_fn, t);
  if (e != cudaSuccess) {
    c->enq_seq--;
    atomic_fetch_sub(&c->outstanding, 1);
    comm_unref(c);
    free_ops(ops);
    free(t);
    fn_warn("Cuda failure '%s'", cuda_str(e));
    return ncclUnhandledCudaError;
  }
  for (int k = 0; k < nothers; k++) {
    cudaEvent_t ev;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess) {
      cudaEventRecord(ev, st);
      cudaStreamWaitEvent(others[k], ev, 0);
      cudaEventDestroy(ev);
    }
  }
  if (!c->blocking) atomic_store(&c->polls, env_int("FAKEGPU_NCCL_OP_POLLS", 1));
  return ncclSuccess;
}

/* doLaunches: every communicator of the group, each on its device. */
static ncclResult_t launch_ops(void) {
  fn_op_t *all = g_ops;
  g_ops = NULL;
  g_ops_tail = NULL;
  if (!all) return ncclSuccess;
  int old = 0;
  cudaGetDevice(&old);
  ncclResult_t ret = ncclSuccess;
  while (all) {
    ncclComm_t c = all->comm;
    fn_op_t *mine = NULL, **mt = &mine, *rest = NULL, **rt = &rest;
    for (fn_op_t *o = all, *n; o; o = n) {
      n = o->next;
      o->next = NULL;
      if (o->comm == c) {
        *mt = o;
        mt = &o->next;
      } else {
        *rt = o;
        rt = &o->next;
      }
    }
    all = rest;
    if (ret != ncclSuccess) {
      free_ops(mine);
      continue;
    }
    if (cudaSetDevice(c->dev) != cudaSuccess) {
      fn_warn("Cuda failure '%s'", cuda_str(cudaErrorInvalidDevice));
      ret = ncclUnhandledCudaError;
      free_ops(mine);
      continue;
    }
    ret = launch_comm(c, mine);
    if (ret != ncclSuccess && !c->blocking) atomic_store(&c->async, ret);
  }
  cudaSetDevice(old);
  return ret;
}
