/* Below the driver files of unilink-bench (bench_comm.c, bench_sweep.c, bench_table.c,
 * bench_p2p.c all call these and nothing here calls them back): the clock, exit codes,
 * the first failure of a run, the breakable barrier and the exchange of results between
 * ranks. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <unilink/backend.h>

#include "bench.h"

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int bench_exit_for(ul_result_t rc) {
  switch (rc) {
  case UL_OK: return BENCH_EXIT_OK;
  case UL_ERR_TIMEOUT: return BENCH_EXIT_TIMEOUT;
  case UL_ERR_UNSUPPORTED: return BENCH_EXIT_UNSUPPORTED;
  case UL_ERR_UNAVAILABLE: return BENCH_EXIT_UNAVAILABLE;
  case UL_ERR_INVALID_USAGE: return BENCH_EXIT_USAGE;
  case UL_ERR_INTERNAL: return BENCH_EXIT_INTERNAL;
  default: return BENCH_EXIT_LIBRARY;
  }
}

void bench_fail(bench_run_t *r, ul_result_t rc, const char *fmt, ...) {
  pthread_mutex_lock(&r->mu);
  if (r->fail_rc == UL_OK) {
    r->fail_rc = rc == UL_OK ? UL_ERR_INTERNAL : rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->fail_msg, sizeof r->fail_msg, fmt, ap);
    va_end(ap);
  }
  /* wake every thread waiting in bench_barrier: the run is over */
  __atomic_store_n(&r->bar_broken, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* A breakable barrier (pthread_barrier cannot be cancelled when a thread fails). Thread
 * ranks time each synchronized call from here, so the release must be as even as the
 * process ranks' ul_barrier: ranks arrive with one atomic add and waiters spin on the
 * generation (one cache-line transfer after the last arrival) before they sleep.
 * Arriving under the mutex made a rank that found it held sleep in the kernel, and the
 * last arriver's timed call waited for its wake (1.5 us against 0.5 on processes). More
 * threads than CPUs sleep at once: a spinner would hold the CPU the last arriver needs. */
#define BENCH_BARRIER_SPIN 200000 /* pause loops, about 2-10 ms: then sleep */

void bench_sync_init(bench_run_t *r) {
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->bar_spin = r->nthreads <= sysconf(_SC_NPROCESSORS_ONLN) ? BENCH_BARRIER_SPIN : 0;
}

static int bench_local_barrier(bench_run_t *r) {
  if (__atomic_load_n(&r->bar_broken, __ATOMIC_ACQUIRE)) return -1;
  /* sense reversal: nobody reaches the next barrier before the generation moves */
  int gen = __atomic_load_n(&r->bar_gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&r->bar_count, 1, __ATOMIC_ACQ_REL) == r->nthreads) {
    __atomic_store_n(&r->bar_count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->bar_gen, gen + 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&r->mu); /* a sleeper checks the generation under the lock */
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return 0;
  }
  for (int i = 0; i < r->bar_spin; i++) {
    if (__atomic_load_n(&r->bar_gen, __ATOMIC_ACQUIRE) != gen) return 0;
    if (__atomic_load_n(&r->bar_broken, __ATOMIC_ACQUIRE)) return -1;
    ul_backend_cpu_pause();
  }
  pthread_mutex_lock(&r->mu);
  while (gen == __atomic_load_n(&r->bar_gen, __ATOMIC_ACQUIRE) && !r->bar_broken)
    pthread_cond_wait(&r->cv, &r->mu);
  int broken = gen == r->bar_gen; /* released only by a failure */
  pthread_mutex_unlock(&r->mu);
  return broken ? -1 : 0;
}

int bench_barrier(bench_run_t *r, int thread) {
  if (bench_local_barrier(r) != 0) return -1;
  if (r->mpi) {
    /* one rank per process: the communicator itself synchronises processes */
    ul_result_t rc = ul_barrier(r->comms[0], NULL);
    if (rc != UL_OK) {
      bench_fail(r, rc, "ul_barrier: %s", ul_comm_last_error(r->comms[0]));
      return -1;
    }
  }
  (void)thread;
  return 0;
}

/* Every rank contributes k doubles; on return all[rank*k + j] holds everyone's. */
int bench_exchange(bench_run_t *r, int thread, const double *mine, int k, double *all) {
  size_t per = r->xch_per_rank;
  int first_local = thread * r->ngpus;
  if (bench_local_barrier(r) != 0) return -1;
  if (thread == 0 && r->mpi) memset(r->xch, 0, sizeof(double) * per * (size_t)r->nranks);
  if (bench_local_barrier(r) != 0) return -1;
  for (int g = 0; g < r->ngpus; g++) {
    int rank = r->first_rank + first_local + g;
    memcpy(r->xch + (size_t)rank * per, mine + (size_t)g * k, sizeof(double) * (size_t)k);
  }
  if (bench_local_barrier(r) != 0) return -1;
  if (r->mpi) {
    /* slots of other processes are zero here: a sum is a gather. The allreduce runs on
     * memory from ul_mem_alloc (device memory on GPU backends, which cannot reach host
     * memory), staged with ul_mem_copy; one thread per process, so no race on xch_dev. */
    size_t xbytes = sizeof(double) * per * (size_t)r->nranks;
    ul_comm_t c0 = r->comms[0];
    ul_result_t rc = UL_OK;
    if (!r->xch_dev) rc = ul_mem_alloc(c0, xbytes, &r->xch_dev);
    if (rc == UL_OK) rc = ul_mem_copy(r->xch_dev, r->xch, xbytes, c0, NULL);
    if (rc == UL_OK)
      rc = ul_allreduce(r->xch_dev, r->xch_dev, per * (size_t)r->nranks, UL_FP64, UL_SUM, c0, NULL);
    if (rc == UL_OK) rc = ul_mem_copy(r->xch, r->xch_dev, xbytes, c0, NULL);
    if (rc != UL_OK) {
      bench_fail(r, rc, "result exchange (ul_allreduce fp64): %s", ul_comm_last_error(c0));
      return -1;
    }
  }
  for (int q = 0; q < r->nranks; q++)
    memcpy(all + (size_t)q * k, r->xch + (size_t)q * per, sizeof(double) * (size_t)k);
  return bench_local_barrier(r);
}

void bench_exchange_free(bench_run_t *r) {
  if (r->xch_dev && r->comms && r->comms[0]) ul_mem_free(r->comms[0], r->xch_dev);
  r->xch_dev = NULL;
}
