/* Send and receive kernels of the fake NCCL: a byte ring per ordered rank pair in the
 * segment (the entry points ncclSend/ncclRecv are in fakenccl_coll.c). See fakenccl.c. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "fakenccl_int.h"

/* ================================================================ send/recv */

static void ring_copy_in(char *ring, size_t R, uint64_t pos, const void *src, size_t len) {
  size_t off = pos % R, first = len < R - off ? len : R - off;
  memcpy(ring + off, src, first);
  if (len > first) memcpy(ring, (const char *)src + first, len - first);
}
static void ring_copy_out(const char *ring, size_t R, uint64_t pos, void *dst, size_t len) {
  size_t off = pos % R, first = len < R - off ? len : R - off;
  memcpy(dst, ring + off, first);
  if (len > first) memcpy((char *)dst + first, ring, len - first);
}

/* All sends and receives of one group together: each peer's messages in order, all
 * peers at once (a ring pattern would deadlock one at a time). */
int run_p2p(ncclComm_t c, fn_op_t **ops, int nops) {
  fn_shm_t *s = c->shm;
  size_t R = s->ring;
  char **views = calloc((size_t)nops, sizeof *views);
  if (!views) return -1;
  for (int i = 0; i < nops; i++) {
    fn_op_t *o = ops[i];
    size_t bytes = o->count * fn_type_size(o->dtype);
    const void *b = o->kind == K_SEND ? o->sbuf : o->rbuf;
    int host = o->kind == K_SEND ? o->s_host : o->r_host;
    views[i] = host ? (char *)b : dev_view(b, bytes);
    if (bytes && !views[i]) {
      free(views);
      return illegal_address(c, o, "buff");
    }
  }
  unsigned spins = 0;
  int rc = 0;
  for (;;) {
    int pending = 0, progressed = 0;
    for (int i = 0; i < nops && rc == 0; i++) {
      fn_op_t *o = ops[i];
      if (o->finished) continue;
      pending++;
      int first = 1;
      for (int k = 0; k < i; k++)
        if (!ops[k]->finished && ops[k]->kind == o->kind && ops[k]->root == o->root) first = 0;
      if (!first) continue;
      uint64_t bytes = o->count * fn_type_size(o->dtype);
      int src = o->kind == K_SEND ? c->rank : o->root, dst = o->kind == K_SEND ? o->root : c->rank;
      fn_ring_t *r = shm_ring(s, src, dst);
      char *data = shm_ringdata(s, src, dst);
      if (o->kind == K_SEND) {
        uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
        uint64_t space = R - (head - atomic_load_explicit(&r->tail, memory_order_acquire));
        if (!o->hdr_done) {
          if (space < 8) continue;
          ring_copy_in(data, R, head, &bytes, 8);
          head += 8;
          space -= 8;
          o->hdr_done = 1;
          progressed = 1;
        }
        uint64_t k = bytes - o->done < space ? bytes - o->done : space;
        if (k) {
          ring_copy_in(data, R, head, views[i] + o->done, k);
          head += k;
          o->done += k;
          progressed = 1;
        }
        atomic_store_explicit(&r->head, head, memory_order_release);
      } else {
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        uint64_t avail = atomic_load_explicit(&r->head, memory_order_acquire) - tail;
        if (!o->hdr_done) {
          if (avail < 8) continue;
          uint64_t len;
          ring_copy_out(data, R, tail, &len, 8);
          if (len != bytes) {
            fn_warn("%s : rank %d receives %llu bytes from rank %d, which sent %llu", o->name,
                    c->rank, (unsigned long long)bytes, o->root, (unsigned long long)len);
            task_error(c, ncclInvalidUsage);
            rc = -1;
            break;
          }
          tail += 8;
          avail -= 8;
          o->hdr_done = 1;
          progressed = 1;
        }
        uint64_t k = bytes - o->done < avail ? bytes - o->done : avail;
        if (k) {
          ring_copy_out(data, R, tail, views[i] + o->done, k);
          tail += k;
          o->done += k;
          progressed = 1;
        }
        atomic_store_explicit(&r->tail, tail, memory_order_release);
      }
      if (o->hdr_done && o->done == bytes) o->finished = 1;
    }
    if (rc || pending == 0) break;
    if (progressed) {
      spins = 0;
      continue;
    }
    if (atomic_load(&c->abort_flag)) {
      rc = -1;
      break;
    }
    if ((spins & 1023) == 1023 && peer_died(c)) {
      rc = wait_result(c, FW_PEER);
      break;
    }
    backoff(&spins);
  }
  free(views);
  return rc;
}
