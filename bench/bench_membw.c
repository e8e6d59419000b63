/* Host memory-system capacity for unilink-bench's roofline: what a working set of a given
 * size can move per second, reads plus writes, with 2 threads. A roofline must be an upper
 * bound, so each point is the best of plain copies (which keep a cache-resident set in the
 * cache) and streaming-store copies (no read-for-ownership of the destination: the most
 * DRAM traffic a copy can carry). */
#define _GNU_SOURCE
#include "bench_membw.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

typedef struct bench_copy_arg {
  char *dst;
  const char *src;
  size_t bytes;
  int reps, streaming;
} bench_copy_arg_t;

/* Copy 64-byte aligned buffers, whole lines, with non-temporal (streaming) or ordinary
 * stores. Our own loop, not memcpy: glibc switches to streaming stores above a size of
 * its own, and the two kinds move different traffic (below). */
static void bench_copy_lines(char *d, const char *s, size_t bytes, int streaming) {
#if defined(__x86_64__)
  for (size_t i = 0; i + 64 <= bytes; i += 64) {
    __m128i a = _mm_load_si128((const __m128i *)(s + i));
    __m128i b = _mm_load_si128((const __m128i *)(s + i + 16));
    __m128i c = _mm_load_si128((const __m128i *)(s + i + 32));
    __m128i e = _mm_load_si128((const __m128i *)(s + i + 48));
    if (streaming) {
      _mm_stream_si128((__m128i *)(d + i), a);
      _mm_stream_si128((__m128i *)(d + i + 16), b);
      _mm_stream_si128((__m128i *)(d + i + 32), c);
      _mm_stream_si128((__m128i *)(d + i + 48), e);
    } else {
      _mm_store_si128((__m128i *)(d + i), a);
      _mm_store_si128((__m128i *)(d + i + 16), b);
      _mm_store_si128((__m128i *)(d + i + 32), c);
      _mm_store_si128((__m128i *)(d + i + 48), e);
    }
  }
  if (streaming) _mm_sfence();
#else
  (void)streaming;
  memcpy(d, s, bytes);
#endif
}

static void *bench_copy_thread(void *p) {
  bench_copy_arg_t *a = p;
  for (int k = 0; k < a->reps; k++) {
    bench_copy_lines(a->dst, a->src, a->bytes, a->streaming);
    __asm__ __volatile__("" ::: "memory"); /* keep every repetition */
  }
  return NULL;
}

static double bench_membw_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best of 3 of 2 threads each copying half of `bytes`, reps times: GB/s of traffic. An
 * ordinary store to a line first reads it (read for ownership), so such a copy moves
 * three bytes per byte copied (source read, destination read, destination written); a
 * streaming store skips the read: two. Counting what really moved keeps the roof an
 * upper bound at every level (counted as two, a cache-resident copy's capacity came out
 * a third low and collectives whose outputs stream beat it). */
static double bench_copy_rate(size_t bytes, int reps, int streaming) {
  char *src = NULL, *dst = NULL;
  if (posix_memalign((void **)&src, 64, bytes) != 0) return 0.0;
  if (posix_memalign((void **)&dst, 64, bytes) != 0) {
    free(src);
    return 0.0;
  }
  /* touch every page so the timing does not include first-touch faults */
  memset(src, 1, bytes);
  memset(dst, 0, bytes);
  double best = 0.0;
  for (int rep = 0; rep < 3; rep++) {
    pthread_t th[2];
    bench_copy_arg_t a[2];
    double t0 = bench_membw_now();
    for (int i = 0; i < 2; i++) {
      a[i] = (bench_copy_arg_t){dst + i * (bytes / 2), src + i * (bytes / 2), bytes / 2, reps,
                                streaming};
      if (pthread_create(&th[i], NULL, bench_copy_thread, &a[i]) != 0) {
        bench_copy_thread(&a[i]);
        th[i] = 0;
      }
    }
    for (int i = 0; i < 2; i++)
      if (th[i]) pthread_join(th[i], NULL);
    double dt = bench_membw_now() - t0;
    double moved = (streaming ? 2.0 : 3.0) * (double)bytes * reps;
    double gbs = dt > 0 ? moved / dt / 1e9 : 0.0;
    if (gbs > best) best = gbs;
  }
  free(src);
  free(dst);
  return best;
}

void bench_measure_roof(bench_roof_t *roof) {
  roof->n = 0;
  for (size_t w = (size_t)64 << 10; w <= ((size_t)256 << 20) && roof->n < BENCH_ROOF_POINTS;
       w <<= 2) {
    /* at least 128 MiB moved per timing: long enough to time, short at every level */
    int reps = (int)(((size_t)128 << 20) / w);
    if (reps < 1) reps = 1;
    double a = bench_copy_rate(w / 2, reps, 0), b = bench_copy_rate(w / 2, reps, 1);
    roof->bytes[roof->n] = w;
    roof->gbs[roof->n++] = a > b ? a : b;
  }
  if (roof->n > 0 && roof->gbs[roof->n - 1] <= 0) roof->n = 0;
}
