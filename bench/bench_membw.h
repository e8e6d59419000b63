/**
 * @file bench_membw.h
 * @brief The host memory bandwidth figure of unilink-bench's roofline, shared with
 *        unilink-info (which shows it for host links) so both print the same measurement.
 *
 * Needs only libc and pthreads: unilink-info compiles bench_membw.c into itself.
 */
#ifndef UNILINK_BENCH_MEMBW_H
#define UNILINK_BENCH_MEMBW_H

#ifdef __cplusplus
extern "C" {
#endif

/** How the figure is measured, for output next to it. */
#define BENCH_MEMBW_METHOD "read+write, 2-thread copy of 256 MiB"

/** Memory bandwidth in GB/s (1e9 B/s, bytes read plus bytes written) of a 2-thread copy
 *  of 256 MiB buffers, best of 3; 0.0 when the buffers cannot be allocated. */
double bench_measure_membw(void);

#ifdef __cplusplus
}
#endif
#endif
