/* Helpers of the cuda backend's tests under the fake CUDA runtime (see
 * test_cuda_backend.h). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unilink/unilink.h>

#include "fakecuda.h"
#include "test_cuda_backend.h"

double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int g_timeout_ms = TIMEOUT_MS;

ul_config_t cfg_on(int device) {
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "cuda";
  cfg.timeout_ms = g_timeout_ms;
  cfg.device = device;
  return cfg;
}

void rank_fail(rank_ctx_t *x, const char *fmt, ...) {
  if (x->bad++) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->why, sizeof x->why, fmt, ap);
  va_end(ap);
}

void *rank_main(void *arg) {
  rank_ctx_t *x = arg;
  ul_config_t cfg = cfg_on(x->device);
  x->init_rc = ul_comm_init_rank(&x->comm, &cfg, x->nranks, x->id, x->rank);
  if (x->init_rc != UL_OK) {
    rank_fail(x, "rank %d: init: %s: %s", x->rank, ul_result_name(x->init_rc), ul_last_error());
    return NULL;
  }
  if (x->body) x->body(x);
  return NULL;
}

void run_threads(rank_ctx_t *x, int n, const int *devices, rank_body_t body, void *arg) {
  ul_unique_id_t id;
  ul_result_t rc = ul_get_unique_id("cuda", &id);
  cr_assert_eq(rc, UL_OK, "ul_get_unique_id: %s", ul_last_error());
  pthread_t th[MAXR];
  for (int r = 0; r < n; r++) {
    memset(&x[r], 0, sizeof x[r]);
    x[r].rank = r;
    x[r].nranks = n;
    x[r].device = devices ? devices[r] : UL_CONFIG_UNDEF;
    x[r].id = id;
    x[r].body = body;
    x[r].arg = arg;
    cr_assert_eq(pthread_create(&th[r], NULL, rank_main, &x[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < n; r++) cr_assert_eq(x[r].bad, 0, "%s", x[r].why);
}

void destroy_all(rank_ctx_t *x, int n) {
  for (int r = 0; r < n; r++)
    if (x[r].comm) cr_assert_eq(ul_comm_destroy(x[r].comm), UL_OK);
}

counts_t counts_now(void) {
  counts_t c = {fakecuda_live_allocations(), fakecuda_registered_ranges(),
                fakecuda_pinned_allocations(), fakecuda_open_ipc(), fakecuda_live_streams(),
                fakecuda_live_events()};
  return c;
}

int counts_equal(counts_t a, counts_t b, char *buf, size_t len) {
  snprintf(buf, len,
           "allocations %d->%d, host registrations %d->%d, pinned %d->%d, open IPC %d->%d, "
           "streams %d->%d, events %d->%d",
           a.allocs, b.allocs, a.registered, b.registered, a.pinned, b.pinned, a.ipc, b.ipc,
           a.streams, b.streams, a.events, b.events);
  return a.allocs == b.allocs && a.registered == b.registered && a.pinned == b.pinned &&
         a.ipc == b.ipc && a.streams == b.streams && a.events == b.events;
}
