/* Host memory bandwidth for unilink-bench's roofline and unilink-info's host links. */
#define _GNU_SOURCE
#include "bench_membw.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bench_copy_arg {
  char *dst;
  const char *src;
  size_t bytes;
} bench_copy_arg_t;

static void *bench_copy_thread(void *p) {
  bench_copy_arg_t *a = p;
  memcpy(a->dst, a->src, a->bytes);
  return NULL;
}

static double bench_membw_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bench_measure_membw(void) {
  const size_t bytes = (size_t)256 << 20;
  char *src = malloc(bytes), *dst = malloc(bytes);
  if (!src || !dst) { free(src); free(dst); return 0.0; }
  /* touch every page so the timing does not include first-touch faults */
  memset(src, 1, bytes);
  memset(dst, 0, bytes);
  double best = 0.0;
  for (int rep = 0; rep < 3; rep++) {
    pthread_t th[2];
    bench_copy_arg_t a[2];
    double t0 = bench_membw_now();
    for (int i = 0; i < 2; i++) {
      a[i].dst = dst + i * (bytes / 2);
      a[i].src = src + i * (bytes / 2);
      a[i].bytes = bytes / 2;
      if (pthread_create(&th[i], NULL, bench_copy_thread, &a[i]) != 0) {
        bench_copy_thread(&a[i]);
        th[i] = 0;
      }
    }
    for (int i = 0; i < 2; i++)
      if (th[i]) pthread_join(th[i], NULL);
    double dt = bench_membw_now() - t0;
    /* read + write: every byte is read once and written once */
    double gbs = dt > 0 ? 2.0 * (double)bytes / dt / 1e9 : 0.0;
    if (gbs > best) best = gbs;
  }
  free(src);
  free(dst);
  return best;
}
