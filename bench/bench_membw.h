/**
 * @file bench_membw.h
 * @brief The host memory system's capacity: unilink-bench's roofline.
 *
 * Needs only libc and pthreads.
 */
#ifndef UNILINK_BENCH_MEMBW_H
#define UNILINK_BENCH_MEMBW_H

#include "bench_util.h"

#ifdef __cplusplus
extern "C" {
#endif

/** How the figures are measured, for output next to them. */
#define BENCH_MEMBW_METHOD "traffic of 2 threads, 256 MiB working set, best of copies with normal and streaming stores and reads"
#define BENCH_ROOF_METHOD "traffic of 2 threads, best of copies with normal and streaming stores and reads"

/** The roofline curve: the traffic rate of 2 threads (bytes read, including reads for
 *  ownership, plus bytes written; best of copies with normal and streaming stores and
 *  of reads alone, best of 3) for
 *  working sets of 64 KiB to 256 MiB, factor 4. roof->n is 0 when nothing could be
 *  measured. */
void bench_measure_roof(bench_roof_t *roof);

/** The least a 2-rank exchange of one cache line costs between CPUs 0 and 1, in ns
 *  (two pinned threads, flags only, 20000 rounds, best of 3): */
typedef struct bench_line_floor {
  double rtt_ns;      /**< round trip: one line each way, in turn */
  double exchange_ns; /**< both store, both wait, back to back: one transfer a call, the
                           floor of a 2-rank exchange in either timing method */
} bench_line_floor_t;

/** Measures the floors; returns 0 (all zero) with one CPU or when the threads cannot be
 *  made. */
int bench_measure_line_floor(bench_line_floor_t *f);

/** How the piece exchange is measured, for output next to its figure. */
#define BENCH_PIECE_METHOD "2 threads on CPUs 0 and 1 each copy 32 MiB to the other in 64 or 256 KiB pieces through two shared slots a direction, best of ordinary (memcpy) and streaming stores"

/** What copies through shared memory move between two ranks: GB/s each way while both
 *  send and receive (BENCH_PIECE_METHOD; best of 5 per kind), the rate that bounds a
 *  private-buffer collective bouncing its data through shared scratch. 0 with one
 *  CPU, when the memory or the threads cannot be had, or when a copied byte came out
 *  wrong (the measuring loop checks what it moved). */
double bench_measure_piece_exchange(void);

#ifdef __cplusplus
}
#endif
#endif
