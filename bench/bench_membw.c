/* Host memory-system capacity for unilink-bench's roofline: what a working set of a given
 * size can move per second, reads plus writes, with 2 threads. A roofline must be an upper
 * bound, so each point is the best of plain copies (which keep a cache-resident set in the
 * cache), streaming-store copies (no read-for-ownership of the destination) and reads
 * alone (the most traffic the memory system carries). */
#define _GNU_SOURCE
#include "bench_membw.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* What the measuring threads do; BENCH_TRAFFIC_PER_BYTE[kind] is the traffic it moves
 * per byte of its size argument (below). */
typedef enum { BENCH_COPY, BENCH_COPY_STREAMING, BENCH_READ } bench_traffic_kind_t;
static const double BENCH_TRAFFIC_PER_BYTE[] = {3.0, 2.0, 1.0};

typedef struct bench_copy_arg {
  char *dst;
  const char *src;
  size_t bytes;
  int reps;
  bench_traffic_kind_t kind;
  int cpu; /* where the thread ran (last seen), -1 unknown */
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

/* Read 64-byte aligned lines and fold them into one word (kept, so the loads stay). */
static uint64_t bench_read_lines(const char *s, size_t bytes) {
#if defined(__x86_64__)
  __m128i a = _mm_setzero_si128(), b = a, c = a, e = a;
  for (size_t i = 0; i + 64 <= bytes; i += 64) {
    a = _mm_xor_si128(a, _mm_load_si128((const __m128i *)(s + i)));
    b = _mm_xor_si128(b, _mm_load_si128((const __m128i *)(s + i + 16)));
    c = _mm_xor_si128(c, _mm_load_si128((const __m128i *)(s + i + 32)));
    e = _mm_xor_si128(e, _mm_load_si128((const __m128i *)(s + i + 48)));
  }
  a = _mm_xor_si128(_mm_xor_si128(a, b), _mm_xor_si128(c, e));
  return (uint64_t)_mm_cvtsi128_si64(a);
#else
  uint64_t x = 0;
  for (size_t i = 0; i + 8 <= bytes; i += 8) x ^= *(const uint64_t *)(s + i);
  return x;
#endif
}

static void *bench_copy_thread(void *p) {
  bench_copy_arg_t *a = p;
  uint64_t fold = 0;
  for (int k = 0; k < a->reps; k++) {
    if (a->kind == BENCH_READ) fold ^= bench_read_lines(a->src, a->bytes);
    else bench_copy_lines(a->dst, a->src, a->bytes, a->kind == BENCH_COPY_STREAMING);
    __asm__ __volatile__("" ::: "memory"); /* keep every repetition */
  }
  __asm__ __volatile__("" ::"r"(fold));
  a->cpu = sched_getcpu();
  return NULL;
}

static double bench_membw_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Thread i on CPU i (of those online): the machine's capacity, not the calling rank's.
 * Under mpirun --bind-to core the measuring rank is bound to one core, and its two
 * threads inherited that mask: the roof was a single core's (64 MiB: 40-47 GB/s under
 * mpirun, 51-81 in one process). A mask refused (a cpuset) leaves the inherited one. */
static int bench_spawn_on_cpu(pthread_t *th, int i, void *(*fn)(void *), void *a) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  pthread_attr_t attr;
  if (ncpu > 0 && pthread_attr_init(&attr) == 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((int)(i % ncpu), &set);
    int rc = pthread_attr_setaffinity_np(&attr, sizeof set, &set) == 0
                 ? pthread_create(th, &attr, fn, a)
                 : -1;
    pthread_attr_destroy(&attr);
    if (rc == 0) return 0;
  }
  return pthread_create(th, NULL, fn, a);
}

/* Best of 3 of 2 threads each copying (or, BENCH_READ, reading) half of `bytes`,
 * reps times: GB/s of traffic. An ordinary store to a line first reads it (read for
 * ownership), so such a copy moves three bytes per byte copied (source read, destination
 * read, destination written); a streaming store skips the read: two; a read, one.
 * Counting what really moved keeps the roof an upper bound at every level (counted as
 * two, a cache-resident copy's capacity came out a third low and collectives whose
 * outputs stream beat it). */
static double bench_copy_rate(size_t bytes, int reps, bench_traffic_kind_t kind, uint64_t *cpus) {
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
                                kind, -1};
      if (bench_spawn_on_cpu(&th[i], i, bench_copy_thread, &a[i]) != 0) {
        bench_copy_thread(&a[i]);
        th[i] = 0;
      }
    }
    for (int i = 0; i < 2; i++) {
      if (th[i]) pthread_join(th[i], NULL);
      if (a[i].cpu >= 0) *cpus |= (uint64_t)1 << (a[i].cpu % 64);
    }
    double dt = bench_membw_now() - t0;
    double moved = BENCH_TRAFFIC_PER_BYTE[kind] * (double)bytes * reps;
    double gbs = dt > 0 ? moved / dt / 1e9 : 0.0;
    if (gbs > best) best = gbs;
  }
  free(src);
  free(dst);
  return best;
}

void bench_measure_roof(bench_roof_t *roof) {
  roof->n = 0;
  uint64_t cpus = 0;
  for (size_t w = (size_t)64 << 10; w <= ((size_t)256 << 20) && roof->n < BENCH_ROOF_POINTS;
       w <<= 2) {
    /* at least 128 MiB moved per timing: long enough to time, short at every level */
    int reps = (int)(((size_t)128 << 20) / w);
    if (reps < 1) reps = 1;
    /* Reads alone move more per second than any copy (no write-back, no turnaround):
     * 2 threads read the whole working set. Collectives read more than they write
     * (a reduction two to one), so a copy-only roof was beaten by them: alltoall np2
     * 64 MiB at 119% of it, allreduce 16 MiB at 142-157%. */
    double a = bench_copy_rate(w / 2, reps, BENCH_COPY, &cpus);
    double b = bench_copy_rate(w / 2, reps, BENCH_COPY_STREAMING, &cpus);
    double r = bench_copy_rate(w, reps, BENCH_READ, &cpus);
    double best = a > b ? a : b;
    roof->bytes[roof->n] = w;
    roof->gbs[roof->n++] = r > best ? r : best;
  }
  if (roof->n > 0 && roof->gbs[roof->n - 1] <= 0) roof->n = 0;
  roof->cpus = __builtin_popcountll(cpus);
}

/* Two threads on CPUs 0 and 1, each with its own cache line, time the least a 2-rank
 * exchange costs, two ways:
 *  - round trip: a counter passed back and forth (one line transfer each way, in turn);
 *  - exchange: both store their line, then wait for the other's, back to back. The two
 *    transfers overlap: one transfer a call, the floor of a 2-rank 8-byte allreduce in
 *    nccl-tests' loop, and in a synchronized call too (the rank that starts first waits
 *    for the line of the rank that starts last, at least one transfer).
 * Lines 128 bytes apart: some CPUs fetch lines in pairs. */
enum { FLOOR_RTT = 0, FLOOR_EXCHANGE = 1, FLOOR_LINES = 2 };
#define FLOOR_ROUNDS 20000

typedef struct bench_floor_run {
  _Alignas(128) struct {
    _Alignas(128) _Atomic uint64_t v;
  } line[FLOOR_LINES][2]; /* [pattern][thread] */
  _Atomic int ready;
  double rtt_ns, exchange_ns; /* thread 0's */
} bench_floor_run_t;

typedef struct bench_floor_arg {
  bench_floor_run_t *x;
  int me;
} bench_floor_arg_t;

static void floor_wait(_Atomic uint64_t *v, uint64_t target) {
  while (atomic_load_explicit(v, memory_order_acquire) < target) {
  }
}

static void *bench_floor_thread(void *p) {
  bench_floor_arg_t *a = p;
  bench_floor_run_t *x = a->x;
  int me = a->me, peer = !me;
  atomic_fetch_add(&x->ready, 1);
  while (atomic_load(&x->ready) < 2) {
  }
  /* round trip: thread 0 pings, thread 1 answers */
  double t0 = bench_membw_now();
  for (uint64_t i = 1; i <= FLOOR_ROUNDS; i++) {
    if (me == 0) {
      atomic_store_explicit(&x->line[FLOOR_RTT][0].v, i, memory_order_release);
      floor_wait(&x->line[FLOOR_RTT][1].v, i);
    } else {
      floor_wait(&x->line[FLOOR_RTT][0].v, i);
      atomic_store_explicit(&x->line[FLOOR_RTT][1].v, i, memory_order_release);
    }
  }
  if (me == 0) x->rtt_ns = (bench_membw_now() - t0) * 1e9 / FLOOR_ROUNDS;
  t0 = bench_membw_now();
  for (uint64_t i = 1; i <= FLOOR_ROUNDS; i++) {
    atomic_store_explicit(&x->line[FLOOR_EXCHANGE][me].v, i, memory_order_release);
    floor_wait(&x->line[FLOOR_EXCHANGE][peer].v, i);
  }
  if (me == 0) x->exchange_ns = (bench_membw_now() - t0) * 1e9 / FLOOR_ROUNDS;
  return NULL;
}

/* fn(a0) on CPU 0 and fn(a1) on CPU 1 at once, until both return; 0 when no thread can
 * be made. */
static int bench_run_pair(void *(*fn)(void *), void *a0, void *a1) {
  pthread_t th[2];
  if (bench_spawn_on_cpu(&th[0], 0, fn, a0) != 0) return 0;
  int spawned = bench_spawn_on_cpu(&th[1], 1, fn, a1) == 0;
  if (!spawned) fn(a1); /* the first waits for a partner: be it here */
  pthread_join(th[0], NULL);
  if (spawned) pthread_join(th[1], NULL);
  return 1;
}

/* One measurement of both floors; 0 when the threads cannot be made. */
static int bench_floor_once(bench_floor_run_t *x) {
  bench_floor_arg_t a[2] = {{x, 0}, {x, 1}};
  return bench_run_pair(bench_floor_thread, &a[0], &a[1]);
}

int bench_measure_line_floor(bench_line_floor_t *f) {
  memset(f, 0, sizeof *f);
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return 0; /* one CPU: no transfer to time */
  bench_floor_run_t *x = aligned_alloc(128, sizeof *x);
  int ok = x != NULL;
  for (int rep = 0; ok && rep < 3; rep++) { /* best of 3, each figure on its own */
    memset(x, 0, sizeof *x);
    ok = bench_floor_once(x);
    if (ok && (rep == 0 || x->rtt_ns < f->rtt_ns)) f->rtt_ns = x->rtt_ns;
    if (ok && (rep == 0 || x->exchange_ns < f->exchange_ns)) f->exchange_ns = x->exchange_ns;
  }
  free(x);
  if (!ok) memset(f, 0, sizeof *f);
  return ok;
}

/* The piece exchange: two threads on CPUs 0 and 1 each send a private source to the other
 * through two slots in shared memory and copy what arrives into a private destination,
 * piece by piece, both directions at once. A private-buffer collective between two ranks
 * does at least that (each byte that changes ranks is written into shared memory and read
 * out of it), with a reduction and the library's code on top: its rate bounds such a
 * collective, as far as one measurement on a shared machine bounds another (docs/bench.md).
 * On the reference VM: 9.7-10.9 GB/s each way with ordinary stores, 10.7-14.3 with
 * streaming ones (AVX2), 22-25 when only one thread sends. */
#define PIECE_BYTES_EACH ((size_t)32 << 20)
#define PIECE_REPS 5

typedef struct piece_chan {
  _Alignas(128) _Atomic uint64_t posted;   /* pieces written into the slots */
  _Alignas(128) _Atomic uint64_t consumed; /* pieces copied out of them */
  char *slot[2];
} piece_chan_t;

typedef struct piece_run {
  piece_chan_t chan[2]; /* chan[i]: thread i's pieces to the other */
  char *src[2], *dst[2];
  size_t piece;
  int streaming;
  _Alignas(128) _Atomic int arrived;
  double t_start[PIECE_REPS], t_end[PIECE_REPS][2];
} piece_run_t;

typedef struct piece_arg {
  piece_run_t *x;
  int me;
} piece_arg_t;

/* Ordinary stores by memcpy, as the host backend's put into a channel slot (pieces are far
 * below glibc's own streaming threshold); streaming ones by our loop. */
static void piece_copy(char *d, const char *s, size_t bytes, int streaming) {
  if (streaming) bench_copy_lines(d, s, bytes, 1);
  else memcpy(d, s, bytes);
}

static void *piece_thread(void *p) {
  piece_arg_t *a = p;
  piece_run_t *x = a->x;
  int me = a->me;
  piece_chan_t *out = &x->chan[me], *in = &x->chan[!me];
  uint64_t pieces = PIECE_BYTES_EACH / x->piece;
  for (int rep = 0; rep < PIECE_REPS; rep++) {
    atomic_fetch_add(&x->arrived, 1);
    while (atomic_load(&x->arrived) < 2 * (rep + 1)) {
    }
    if (me == 0) x->t_start[rep] = bench_membw_now();
    for (uint64_t k = 0; k < pieces; k++) {
      uint64_t s = (uint64_t)rep * pieces + k;
      floor_wait(&out->consumed, s < 2 ? 0 : s - 1); /* the slot's last piece is out */
      piece_copy(out->slot[s & 1], x->src[me] + k * x->piece, x->piece, x->streaming);
      atomic_store_explicit(&out->posted, s + 1, memory_order_release);
      floor_wait(&in->posted, s + 1);
      piece_copy(x->dst[me] + k * x->piece, in->slot[s & 1], x->piece, x->streaming);
      atomic_store_explicit(&in->consumed, s + 1, memory_order_release);
    }
    x->t_end[rep][me] = bench_membw_now();
  }
  return NULL;
}

/* Word i of thread t's source: which thread, and where, so that a piece delivered to the
 * wrong place or not at all shows. */
static uint64_t piece_word(int t, size_t i) { return ((uint64_t)(t + 1) << 48) | i; }

/* Best GB/s each way of PIECE_REPS exchanges of one kind; 0 if the threads cannot be
 * made or a byte came out wrong. */
static double piece_rate(piece_run_t *x, size_t piece, int streaming) {
  x->piece = piece;
  x->streaming = streaming;
  atomic_store(&x->arrived, 0);
  for (int i = 0; i < 2; i++) {
    atomic_store(&x->chan[i].posted, 0);
    atomic_store(&x->chan[i].consumed, 0);
    memset(x->dst[i], 0, PIECE_BYTES_EACH);
  }
  piece_arg_t a[2] = {{x, 0}, {x, 1}};
  if (!bench_run_pair(piece_thread, &a[0], &a[1])) return 0.0;
  for (int t = 0; t < 2; t++) {
    const uint64_t *w = (const uint64_t *)x->dst[t];
    for (size_t i = 0; i < PIECE_BYTES_EACH / 8; i++)
      if (w[i] != piece_word(!t, i)) return 0.0;
  }
  double best = 0.0;
  for (int rep = 0; rep < PIECE_REPS; rep++) {
    double end = x->t_end[rep][0] > x->t_end[rep][1] ? x->t_end[rep][0] : x->t_end[rep][1];
    double dt = end - x->t_start[rep];
    double gbs = dt > 0 ? (double)PIECE_BYTES_EACH / dt / 1e9 : 0.0;
    if (gbs > best) best = gbs;
  }
  return best;
}

double bench_measure_piece_exchange(void) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return 0.0; /* one CPU: nothing crosses */
  piece_run_t *x = aligned_alloc(128, sizeof *x);
  if (!x) return 0.0;
  memset(x, 0, sizeof *x);
  static const size_t pieces[] = {(size_t)64 << 10, (size_t)256 << 10};
  const size_t most = (size_t)256 << 10;
  int ok = 1;
  for (int t = 0; t < 2; t++) {
    ok = ok && posix_memalign((void **)&x->src[t], 64, PIECE_BYTES_EACH) == 0 &&
         posix_memalign((void **)&x->dst[t], 64, PIECE_BYTES_EACH) == 0;
    for (int k = 0; ok && k < 2; k++)
      ok = posix_memalign((void **)&x->chan[t].slot[k], 64, most) == 0;
    if (ok) {
      uint64_t *w = (uint64_t *)x->src[t];
      for (size_t i = 0; i < PIECE_BYTES_EACH / 8; i++) w[i] = piece_word(t, i);
      memset(x->chan[t].slot[0], 0, most);
      memset(x->chan[t].slot[1], 0, most);
    }
  }
  double best = 0.0;
  for (int p = 0; ok && p < 2; p++)
    for (int streaming = 0; ok && streaming < 2; streaming++) {
      double gbs = piece_rate(x, pieces[p], streaming);
      if (gbs <= 0) best = 0.0, ok = 0; /* a wrong byte: no figure at all */
      else if (gbs > best) best = gbs;
    }
  for (int t = 0; t < 2; t++) {
    free(x->src[t]);
    free(x->dst[t]);
    free(x->chan[t].slot[0]);
    free(x->chan[t].slot[1]);
  }
  free(x);
  return best;
}
