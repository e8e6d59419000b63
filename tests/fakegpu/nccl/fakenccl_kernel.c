/* What a collective task runs on its stream (the fake kernel): the collective protocol
 * over the segment, and the errors a kernel reports (illegal address, lost peer). Called
 * by the stream tasks of fakenccl_group.c; send/recv run in fakenccl_p2p.c. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakenccl_int.h"

/* ================================================================ kernel errors */

void task_error(ncclComm_t c, ncclResult_t r) {
  int expect = ncclSuccess;
  atomic_compare_exchange_strong(&c->async, &expect, r);
}

int illegal_address(ncclComm_t c, const fn_op_t *o, const char *which) {
  char msg[256];
  snprintf(msg, sizeof msg,
           "Cuda failure 'an illegal memory access was encountered' (%s rank %d: %s is not "
           "memory of device %d)", o->name, c->rank, which, c->dev);
  fn_warn("%s", msg);
  fprintf(stderr, "fakenccl: %s\n", msg); /* a kernel fault is loud on a real GPU too */
  task_error(c, ncclUnhandledCudaError);
  return -1;
}

int wait_result(ncclComm_t c, int w) {
  if (w == FW_OK) return 0;
  if (w == FW_PEER) {
    fn_warn("NCCL : remote process exited (rank %d)", c->rank);
    task_error(c, ncclRemoteError);
  }
  return -1;
}

/* ================================================================ collectives */

/* Sizes in elements a rank contributes/receives per peer, and the bytes of its buffers. */
static int multi_segment(fn_kind_t k) {
  return k == K_REDUCESCATTER || k == K_ALLTOALL || k == K_SCATTER;
}

/* One collective over the segment, in steps of at most one staging chunk per rank. */
int run_coll(ncclComm_t c, fn_op_t *o) {
  fn_shm_t *s = c->shm;
  int n = c->nranks, me = c->rank, root = o->root;
  size_t es = fn_type_size(o->dtype), count = o->count;
  size_t sbytes = multi_segment(o->kind) ? n * count * es : count * es;
  size_t rbytes = (o->kind == K_ALLGATHER || o->kind == K_ALLTOALL || o->kind == K_GATHER)
                      ? n * count * es : count * es;
  int need_s = !((o->kind == K_BROADCAST || o->kind == K_SCATTER) && me != root);
  int need_r = !((o->kind == K_REDUCE || o->kind == K_GATHER) && me != root);
  char *sv = NULL, *rv = NULL;
  if (need_s && !(sv = o->s_host ? (char *)o->sbuf : dev_view(o->sbuf, sbytes)))
    return illegal_address(c, o, "sendbuff");
  if (need_r && !(rv = o->r_host ? (char *)o->rbuf : dev_view(o->rbuf, rbytes)))
    return illegal_address(c, o, "recvbuff");
  fn_redop_t op = o->op;
  if (o->scalar_ptr) {
    const void *p = dev_view(o->scalar_ptr, es);
    if (!p) return illegal_address(c, o, "the PreMulSum scalar");
    memcpy(&op.scalar, p, es);
  }
  size_t per = multi_segment(o->kind) ? s->chunk / (n * es) : s->chunk / es;
  const void *srcs[1024];
  const void **sp = n <= 1024 ? srcs : malloc(n * sizeof *sp);
  if (!sp) return -1;
  int rc = 0;
  for (size_t e0 = 0; e0 < count && rc == 0; e0 += per) {
    size_t m = count - e0 < per ? count - e0 : per, mb = m * es;
    uint64_t step = ++c->step;
    /* 1. peers have read my slot of the previous step */
    rc = wait_result(c, wait_all_ge(c, &shm_step(s, 0)->done, sizeof(fn_step_t), step - 1, 0, NULL));
    if (rc) break;
    /* 2. stage my contribution */
    char *slot = shm_stage(s, me);
    if (need_s) {
      if (multi_segment(o->kind)) {
        for (int i = 0; i < n; i++) memcpy(slot + i * mb, sv + (i * count + e0) * es, mb);
      } else {
        memcpy(slot, sv + e0 * es, mb);
      }
    }
    atomic_store_explicit(&shm_step(s, me)->arrive, step, memory_order_release);
    /* 3. everybody has staged */
    rc = wait_result(c, wait_all_ge(c, &shm_step(s, 0)->arrive, sizeof(fn_step_t), step, 0, NULL));
    if (rc) break;
    /* 4. my result */
    if (need_r) {
      switch (o->kind) {
      case K_ALLREDUCE: case K_REDUCE:
        for (int j = 0; j < n; j++) sp[j] = shm_stage(s, j);
        fn_reduce(o->dtype, op, sp, n, rv + e0 * es, m);
        break;
      case K_REDUCESCATTER:
        for (int j = 0; j < n; j++) sp[j] = shm_stage(s, j) + me * mb;
        fn_reduce(o->dtype, op, sp, n, rv + e0 * es, m);
        break;
      case K_BROADCAST: memcpy(rv + e0 * es, shm_stage(s, root), mb); break;
      case K_ALLGATHER: case K_GATHER:
        for (int j = 0; j < n; j++) memcpy(rv + (j * count + e0) * es, shm_stage(s, j), mb);
        break;
      case K_ALLTOALL:
        for (int j = 0; j < n; j++) memcpy(rv + (j * count + e0) * es, shm_stage(s, j) + me * mb, mb);
        break;
      case K_SCATTER: memcpy(rv + e0 * es, shm_stage(s, root) + me * mb, mb); break;
      default: break;
      }
    }
    atomic_store_explicit(&shm_step(s, me)->done, step, memory_order_release);
  }
  if (sp != srcs) free(sp);
  return rc;
}
