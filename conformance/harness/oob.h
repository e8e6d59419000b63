/* The harness's out-of-band channel between ranks (never the library under test): a
 * control block in shared memory with a futex barrier for thread and process ranks, or
 * the world communicator under MPI. The launchers (launch.c) create it and read its
 * progress counters; the cases reach it only through cf.h's cf_oob_* calls. */
#ifndef CF_OOB_H
#define CF_OOB_H

#include <stdatomic.h>

#include "cf.h"

enum { CF_OOB_SHM = 0, CF_OOB_MPI = 1 };

/* Control block shared by the ranks of one rank count (plain memory for threads, a
 * mapped file for processes). */
typedef struct cf_ctl {
  _Atomic uint32_t arrive;
  _Atomic uint32_t gen; /* futex word */
  _Atomic uint32_t abort;
  _Atomic uint32_t done;
  _Atomic uint32_t fails;
  uint32_t nranks;
  _Atomic int32_t current[CF_MAX_RANKS]; /* instance each rank is running, -1 none */
  ul_unique_id_t id;
  unsigned char slots[2][CF_MAX_RANKS][CF_OOB_SLOT];
} cf_ctl_t;

struct cf_oob {
  int kind;
  int threads;
  int rank, nranks;
  cf_ctl_t *ctl;
  unsigned parity;
  int timeout_ms;
  ul_comm_t ctrl; /* MPI: world communicator */
};

/* Milliseconds of CLOCK_MONOTONIC. */
long long cf_now_ms(void);
/* Wake every waiter on a futex word of the control block. */
void cf_futex_wake(_Atomic uint32_t *a);
/* Release every rank waiting in the shared-memory barrier (no-op under MPI). */
void cf_oob_abort(cf_oob_t *o);

#endif
