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
#define BENCH_MEMBW_METHOD "traffic of a 2-thread copy, 256 MiB working set, best of normal and streaming stores"
#define BENCH_ROOF_METHOD "traffic of a 2-thread copy, best of normal and streaming stores"

/** The roofline curve: the traffic rate of a copy (bytes read, including reads for
 *  ownership, plus bytes written; best of normal and streaming stores, best of 3) for
 *  working sets of 64 KiB to 256 MiB, factor 4. roof->n is 0 when nothing could be
 *  measured. */
void bench_measure_roof(bench_roof_t *roof);

#ifdef __cplusplus
}
#endif
#endif
