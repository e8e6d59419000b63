/* The out-of-band channel (oob.h): barrier, small all-gather and id broadcast between
 * the ranks of one rank count. Calls only the public API (under MPI). */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "oob.h"

long long cf_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void cf_futex_wait(_Atomic uint32_t *a, uint32_t v, int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  syscall(SYS_futex, (uint32_t *)a, FUTEX_WAIT, v, &ts, NULL, 0);
}
void cf_futex_wake(_Atomic uint32_t *a) {
  syscall(SYS_futex, (uint32_t *)a, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

int cf_oob_is_threads(cf_oob_t *o) { return o && o->threads; }

void cf_oob_abort(cf_oob_t *o) {
  if (o->kind != CF_OOB_SHM) return;
  atomic_store(&o->ctl->abort, 1);
  atomic_fetch_add(&o->ctl->gen, 1);
  cf_futex_wake(&o->ctl->gen);
}

int cf_oob_barrier(cf_oob_t *o) {
  if (o->kind == CF_OOB_MPI) return ul_barrier(o->ctrl, NULL) == UL_OK ? 0 : -1;
  cf_ctl_t *c = o->ctl;
  if (atomic_load(&c->abort)) return -1;
  uint32_t g = atomic_load(&c->gen);
  if (atomic_fetch_add(&c->arrive, 1) + 1 == c->nranks) {
    atomic_store(&c->arrive, 0);
    atomic_fetch_add(&c->gen, 1);
    cf_futex_wake(&c->gen);
    return 0;
  }
  /* A peer may legitimately be busy in a long case (64 MiB verify) or blocked in the
   * library until its own timeout; beyond that something hangs. */
  long long deadline = cf_now_ms() + 2LL * o->timeout_ms + 60000;
  while (atomic_load(&c->gen) == g) {
    if (atomic_load(&c->abort)) return -1;
    cf_futex_wait(&c->gen, g, 200);
    if (cf_now_ms() > deadline) {
      fprintf(stderr, "unilink-conformance: rank %d: peers did not reach the harness barrier; "
              "aborting this rank count\n", o->rank);
      cf_oob_abort(o);
      return -1;
    }
  }
  return atomic_load(&c->abort) ? -1 : 0;
}

int cf_oob_allgather(cf_oob_t *o, const void *mine, void *all, size_t bytes) {
  if (bytes > CF_OOB_SLOT) return -1;
  if (o->kind == CF_OOB_MPI) {
    unsigned char pad[CF_OOB_SLOT];
    unsigned char *tmp = malloc((size_t)o->nranks * CF_OOB_SLOT);
    if (!tmp) return -1;
    memset(pad, 0, sizeof pad);
    memcpy(pad, mine, bytes);
    ul_result_t rc = ul_allgather(pad, tmp, CF_OOB_SLOT, UL_UINT8, o->ctrl, NULL);
    for (int r = 0; rc == UL_OK && r < o->nranks; r++)
      memcpy((char *)all + (size_t)r * bytes, tmp + (size_t)r * CF_OOB_SLOT, bytes);
    free(tmp);
    return rc == UL_OK ? 0 : -1;
  }
  /* Two slot sets by parity: a rank that passed exchange k+1 knows every rank finished
   * reading exchange k, so one barrier per exchange suffices. */
  unsigned par = o->parity++ & 1;
  memcpy(o->ctl->slots[par][o->rank], mine, bytes);
  if (cf_oob_barrier(o)) return -1;
  for (int r = 0; r < o->nranks; r++)
    memcpy((char *)all + (size_t)r * bytes, o->ctl->slots[par][r], bytes);
  return 0;
}

int cf_oob_bcast_id(cf_oob_t *o, ul_unique_id_t *id) {
  if (o->kind == CF_OOB_MPI)
    return ul_broadcast(id, id, sizeof(*id), UL_UINT8, 0, o->ctrl, NULL) == UL_OK ? 0 : -1;
  if (o->rank == 0) o->ctl->id = *id;
  if (cf_oob_barrier(o)) return -1;
  if (o->rank != 0) *id = o->ctl->id;
  return cf_oob_barrier(o);
}
