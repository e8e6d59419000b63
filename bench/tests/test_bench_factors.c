/* Unit tests of the pure bench helpers: nccl-tests busbw/algbw factors and size
 * conventions (values worked out by hand from nccl-tests src/<op>.cu), roofline,
 * statistics, formatting, size parsing and exact test data. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <sched.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_membw.h"
#include "bench_util.h"
#include "unilink/unilink.h"

#define NEAR(a, b) (fabs((double)(a) - (double)(b)) < 1e-9 * (1.0 + fabs((double)(b))))

Test(bench_factors, allreduce_is_2n_minus_1_over_n, .timeout = 10) {
  cr_expect(NEAR(bench_bw_factor(BENCH_ALLREDUCE, 1), 0.0));
  cr_expect(NEAR(bench_bw_factor(BENCH_ALLREDUCE, 2), 1.0));
  cr_expect(NEAR(bench_bw_factor(BENCH_ALLREDUCE, 4), 1.5));
  cr_expect(NEAR(bench_bw_factor(BENCH_ALLREDUCE, 8), 1.75));
  /* 1 MiB of fp32 on 8 ranks in 1 ms: algbw = 1048576 B / 1e-3 s = 1.048576 GB/s */
  bench_counts_t c;
  bench_counts(BENCH_ALLREDUCE, 1048576, 4, 8, &c);
  cr_expect_eq(c.paramcount, 262144u);
  cr_expect_eq(bench_row_bytes(&c, 4), 1048576u);
  double alg, bus;
  bench_bw(BENCH_ALLREDUCE, c.paramcount, 4, 1e-3, 8, &alg, &bus);
  cr_expect(NEAR(alg, 1.048576), "alg %f", alg);
  cr_expect(NEAR(bus, 1.835008), "bus %f", bus);
}

Test(bench_factors, gather_family_is_n_minus_1_over_n, .timeout = 10) {
  bench_op_t ops[] = {BENCH_ALLGATHER, BENCH_REDUCE_SCATTER, BENCH_ALLTOALL, BENCH_GATHER,
                      BENCH_SCATTER};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    cr_expect(NEAR(bench_bw_factor(ops[i], 4), 0.75), "%s", bench_op_name(ops[i]));
    cr_expect(NEAR(bench_bw_factor(ops[i], 8), 0.875), "%s", bench_op_name(ops[i]));
  }
}

Test(bench_factors, rooted_and_p2p_are_one, .timeout = 10) {
  bench_op_t ops[] = {BENCH_BROADCAST, BENCH_REDUCE, BENCH_SENDRECV};
  for (size_t i = 0; i < 3; i++) {
    cr_expect(NEAR(bench_bw_factor(ops[i], 2), 1.0));
    cr_expect(NEAR(bench_bw_factor(ops[i], 7), 1.0));
  }
}

Test(bench_factors, allgather_size_convention, .timeout = 10) {
  /* -b 1000 fp32 on 4 ranks: count 250, block 62 rounded down to 16 B -> 60 elements */
  bench_counts_t c;
  bench_counts(BENCH_ALLGATHER, 1000, 4, 4, &c);
  cr_expect_eq(c.sendcount, 60u);
  cr_expect_eq(c.recvcount, 240u);
  cr_expect_eq(c.paramcount, 60u);
  cr_expect_eq(c.send_inplace_off, 60u);
  cr_expect_eq(bench_row_bytes(&c, 4), 960u);
  /* algbw uses count*size*nranks = 960 B; in 1 us that is 0.96 GB/s, busbw 0.72 */
  double alg, bus;
  bench_bw(BENCH_ALLGATHER, c.paramcount, 4, 1e-6, 4, &alg, &bus);
  cr_expect(NEAR(alg, 0.96), "alg %f", alg);
  cr_expect(NEAR(bus, 0.72), "bus %f", bus);
}

Test(bench_factors, reduce_scatter_and_alltoall_sizes, .timeout = 10) {
  bench_counts_t c;
  bench_counts(BENCH_REDUCE_SCATTER, 1000, 4, 4, &c);
  cr_expect_eq(c.sendcount, 240u);
  cr_expect_eq(c.recvcount, 60u);
  cr_expect_eq(c.recv_inplace_off, 60u);
  cr_expect(NEAR(bench_alg_bytes(BENCH_REDUCE_SCATTER, c.paramcount, 4, 4), 960.0));
  bench_counts(BENCH_ALLTOALL, 1000, 4, 4, &c);
  cr_expect_eq(c.paramcount, 60u);
  cr_expect_eq(c.sendcount, 240u);
  cr_expect_eq(c.recvcount, 240u);
  /* int8: blocks are multiples of 16 elements; 100 B on 3 ranks -> 33 -> 32 */
  bench_counts(BENCH_GATHER, 100, 1, 3, &c);
  cr_expect_eq(c.paramcount, 32u);
  cr_expect_eq(c.recvcount, 96u);
  /* fp64: 2 elements per 16 B; 8 B on 2 ranks -> block 0 (nccl-tests prints size 0) */
  bench_counts(BENCH_SCATTER, 8, 8, 2, &c);
  cr_expect_eq(c.paramcount, 0u);
  /* broadcast/reduce/sendrecv: count = bytes / eltsize, no rounding */
  bench_counts(BENCH_SENDRECV, 1002, 2, 4, &c);
  cr_expect_eq(c.paramcount, 501u);
  cr_expect(NEAR(bench_alg_bytes(BENCH_SENDRECV, 501, 2, 4), 1002.0));
}

Test(bench_factors, roofline, .timeout = 10) {
  /* allreduce on 2 ranks: busbw limit = membw / 4 */
  cr_expect(NEAR(bench_roof_busbw(BENCH_ALLREDUCE, 2, 40.0), 10.0));
  /* 4 ranks: factor 1.5 over traffic 8 S */
  cr_expect(NEAR(bench_roof_busbw(BENCH_ALLREDUCE, 4, 40.0), 7.5));
  cr_expect(NEAR(bench_roof_busbw(BENCH_BROADCAST, 2, 30.0), 10.0));
  cr_expect(NEAR(bench_roof_busbw(BENCH_ALLGATHER, 2, 30.0), 5.0));
  cr_expect(NEAR(bench_roof_busbw(BENCH_GATHER, 2, 40.0), 10.0));
  cr_expect(NEAR(bench_roof_busbw(BENCH_SENDRECV, 2, 40.0), 10.0));
}

Test(bench_stats, five_values, .timeout = 10) {
  double x[] = {5, 1, 4, 2, 3};
  bench_stats_t s;
  cr_assert_eq(bench_stats(x, 5, &s), 0);
  cr_expect(NEAR(s.min, 1));
  cr_expect(NEAR(s.max, 5));
  cr_expect(NEAR(s.median, 3));
  cr_expect(NEAR(s.mean, 3));
  cr_expect(NEAR(s.p99, 5));
  cr_expect(NEAR(s.stdev, sqrt(2.0)));
  cr_expect(NEAR(s.cv_pct, sqrt(2.0) / 3.0 * 100.0));
  cr_expect_eq(bench_stats(x, 0, &s), -1);
}

Test(bench_stats, hundred_values_nearest_rank, .timeout = 10) {
  double x[100];
  for (int i = 0; i < 100; i++) x[i] = 100 - i; /* 100..1 */
  bench_stats_t s;
  cr_assert_eq(bench_stats(x, 100, &s), 0);
  cr_expect(NEAR(s.p99, 99));
  cr_expect(NEAR(s.p95, 95));
  cr_expect(NEAR(s.median, 51));
}

Test(bench_format, widths, .timeout = 10) {
  char b[32];
  bench_format_num(12.5, 7, b, sizeof b);
  cr_expect_str_eq(b, "  12.50");
  bench_format_num(0.5, 6, b, sizeof b);
  cr_expect_str_eq(b, "  0.50");
  bench_format_num(1234.5, 6, b, sizeof b);
  cr_expect_str_eq(b, "1234.5");
  bench_format_num(123456.0, 7, b, sizeof b);
  cr_expect_str_eq(b, " 123456");
  bench_format_num(12345678.0, 6, b, sizeof b);
  cr_expect_str_eq(b, " 1e+07");
  bench_format_num(123456789.0, 7, b, sizeof b);
  cr_expect_str_eq(b, "1.2e+08");
}

Test(bench_parse, sizes, .timeout = 10) {
  size_t v = 0;
  cr_expect_eq(bench_parse_size("8", &v), 0);
  cr_expect_eq(v, 8u);
  cr_expect_eq(bench_parse_size("64M", &v), 0);
  cr_expect_eq(v, 67108864u);
  cr_expect_eq(bench_parse_size("1.5K", &v), 0);
  cr_expect_eq(v, 1536u);
  cr_expect_eq(bench_parse_size("1g", &v), 0);
  cr_expect_eq(v, 1073741824u);
  v = 7;
  cr_expect_eq(bench_parse_size("abc", &v), -1);
  cr_expect_eq(bench_parse_size("-1", &v), -1);
  cr_expect_eq(bench_parse_size("10X", &v), -1);
  cr_expect_eq(bench_parse_size("", &v), -1);
  cr_expect_eq(v, 7u);
}

Test(bench_ops, names, .timeout = 10) {
  bench_op_t op;
  cr_expect_eq(bench_op_from_name("all_reduce", &op), 0);
  cr_expect_eq(op, BENCH_ALLREDUCE);
  cr_expect_eq(bench_op_from_name("reduce_scatter", &op), 0);
  cr_expect_eq(op, BENCH_REDUCE_SCATTER);
  cr_expect_eq(bench_op_from_name("nope", &op), -1);
  cr_expect_eq(bench_op_has_inplace(BENCH_ALLTOALL), 0);
  cr_expect_eq(bench_op_rooted(BENCH_GATHER), 1);
  cr_expect_eq(bench_op_rooted(BENCH_ALLREDUCE), 0);
}

/* Every reduction of generated inputs is an integer no larger than the dtype's exact
 * range, so any summation order gives the same bits. */
Test(bench_gen, reductions_stay_exact, .timeout = 30) {
  int dtypes[] = {UL_INT8, UL_UINT8, UL_INT32, UL_FP16, UL_BF16, UL_FP32, UL_FP64,
                  UL_FP8_E4M3, UL_FP8_E5M2};
  int ops[] = {UL_SUM, UL_PROD, UL_MIN, UL_MAX, UL_AVG};
  int ranks[] = {1, 2, 3, 8, 13};
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
    for (size_t o = 0; o < 5; o++)
      for (size_t n = 0; n < 5; n++) {
        bench_gen_t g;
        bench_gen_init(&g, dtypes[d], ops[o], ranks[n], 42, 1);
        double m = bench_dtype_exact_max(dtypes[d]);
        int nonzero = 0;
        for (size_t i = 0; i < 500; i++) {
          double sum = 0;
          for (int r = 0; r < ranks[n]; r++) {
            double v = bench_gen_value(&g, r, i);
            cr_assert(v >= 0 && v == floor(v) && v <= m);
            sum += v;
          }
          cr_assert(sum <= m || ops[o] != UL_SUM, "dtype %d n %d sum %f", dtypes[d], ranks[n], sum);
          double red = bench_gen_reduced(&g, i);
          cr_assert(red == floor(red) && red <= m, "dtype %d op %d n %d red %f", dtypes[d],
                    ops[o], ranks[n], red);
          if (red != 0) nonzero++;
        }
        /* avg over more ranks than the dtype's exact range can only be all zero */
        if (ops[o] == UL_AVG && floor(m / ranks[n]) < 1) continue;
        cr_expect(nonzero > 0, "all-zero data for dtype %d op %d n %d", dtypes[d], ops[o],
                  ranks[n]);
      }
}

Test(bench_gen, seeded_and_rank_dependent, .timeout = 10) {
  bench_gen_t a, b;
  bench_gen_init(&a, UL_FP32, UL_SUM, 4, 1, 1);
  bench_gen_init(&b, UL_FP32, UL_SUM, 4, 2, 1);
  int diff_seed = 0, diff_rank = 0;
  for (size_t i = 0; i < 100; i++) {
    if (bench_gen_value(&a, 0, i) != bench_gen_value(&b, 0, i)) diff_seed++;
    if (bench_gen_value(&a, 0, i) != bench_gen_value(&a, 1, i)) diff_rank++;
    cr_expect(bench_gen_value(&a, 2, i) == bench_gen_value(&a, 2, i));
  }
  cr_expect(diff_seed > 50);
  cr_expect(diff_rank > 50);
  /* sum reference by hand for element 0 */
  double s = 0;
  for (int r = 0; r < 4; r++) s += bench_gen_value(&a, r, 0);
  cr_expect(bench_gen_reduced(&a, 0) == s);
}

Test(bench_json, escape, .timeout = 10) {
  char out[64];
  cr_expect_eq(bench_json_escape("a\"b\\c\n", out, sizeof out), 0);
  cr_expect_str_eq(out, "a\\\"b\\\\c\\n");
  cr_expect_eq(bench_json_escape("\x01", out, sizeof out), 0);
  cr_expect_str_eq(out, "\\u0001");
  cr_expect_eq(bench_json_escape("abcdef", out, 4), -1);
}

/* The table prints the value the JSON holds: a time of 2.5250000001 us shows as 2.52
 * in both, not 2.53 in the table and 2.52 in a report read from "2.525000". */
Test(bench_json, table_value_is_the_json_value, .timeout = 10) {
  char table[32], json[32], from_json[32];
  double v = bench_json_value(2.5250000001);
  snprintf(json, sizeof json, "%.6f", v);
  cr_expect_str_eq(json, "2.525000");
  snprintf(table, sizeof table, "%.2f", v);
  snprintf(from_json, sizeof from_json, "%.2f", strtod(json, NULL));
  cr_expect_str_eq(table, from_json);
  cr_expect(bench_json_value(NAN) != bench_json_value(NAN));
  cr_expect_eq(bench_json_value(1234.5), 1234.5);
}

/* The same for the per-iteration columns (min, max, p99, cv%, and the synchronized
 * method's mean and median): each prints the value of the JSON's per-iteration report. */
Test(bench_json, per_iteration_columns_are_the_json_values, .timeout = 10) {
  const double it[] = {2.5250000001, 3.0150000001, 1.0050000001, 2.0};
  bench_stats_t st;
  cr_assert_eq(bench_stats(it, 4, &st), 0);
  bench_stats_t raw = st;
  bench_stats_json_values(&st);
  const double got[] = {st.min, st.max, st.mean, st.median, st.p95, st.p99, st.stdev, st.cv_pct};
  const double was[] = {raw.min, raw.max, raw.mean, raw.median, raw.p95, raw.p99, raw.stdev, raw.cv_pct};
  for (int i = 0; i < 8; i++) {
    char json[64], table[32], from_json[32];
    snprintf(json, sizeof json, "%.6f", was[i]);
    cr_expect_eq(got[i], strtod(json, NULL), "field %d: %.17g, the JSON holds %s", i, got[i], json);
    snprintf(table, sizeof table, "%.2f", got[i]);
    snprintf(from_json, sizeof from_json, "%.2f", strtod(json, NULL));
    cr_expect_str_eq(table, from_json, "field %d", i);
  }
  /* the case this is for: min 1.0050000001 prints 1.01 from the full double, 1.00 from
   * the JSON's 1.005000 */
  char full[32], kept[32];
  snprintf(full, sizeof full, "%.2f", raw.min);
  snprintf(kept, sizeof kept, "%.2f", st.min);
  cr_expect_str_eq(full, "1.01");
  cr_expect_str_eq(kept, "1.00");
}

Test(bench_factors, roof_by_working_set, .timeout = 10) {
  bench_roof_t roof = {3, {1u << 20, 4u << 20, 16u << 20}, {90.0, 60.0, 20.0}, 2};
  /* below the smallest point: the smallest point's rate */
  cr_expect(NEAR(bench_roof_at(&roof, 1000.0), 90.0));
  /* the largest point not above the bytes moved (a smaller set is faster: an upper bound) */
  cr_expect(NEAR(bench_roof_at(&roof, 4.0 * (1u << 20)), 60.0));
  cr_expect(NEAR(bench_roof_at(&roof, 15.0 * (1u << 20)), 60.0));
  cr_expect(NEAR(bench_roof_at(&roof, 1e12), 20.0));
  bench_roof_t none = {.n = 0};
  cr_expect(NEAR(bench_roof_at(&none, 1e6), 0.0));
}

/* Measured before and after a sweep, the roof is the larger rate per working set: a
 * shared machine's capacity moves between minutes, and the roof must bound both. */
Test(bench_factors, roof_merge_keeps_the_larger_rate, .timeout = 10) {
  bench_roof_t a = {3, {1u << 20, 4u << 20, 16u << 20}, {90.0, 40.0, 20.0}, 1};
  bench_roof_t b = {3, {1u << 20, 4u << 20, 16u << 20}, {80.0, 60.0, 30.0}, 2};
  bench_roof_merge(&a, &b);
  cr_expect(NEAR(a.gbs[0], 90.0));
  cr_expect(NEAR(a.gbs[1], 60.0));
  cr_expect(NEAR(a.gbs[2], 30.0));
  cr_expect_eq(a.cpus, 2);
  bench_roof_t failed = {.n = 0};
  bench_roof_merge(&a, &failed); /* a failed measurement changes nothing */
  cr_expect(NEAR(a.gbs[2], 30.0));
  bench_roof_t empty = {.n = 0};
  bench_roof_merge(&empty, &b); /* nothing before: the second one */
  cr_expect_eq(empty.n, 3);
  cr_expect(NEAR(empty.gbs[1], 60.0));
  /* %roof: allreduce np2 moves 4 x S, busbw factor 1, and reads 2 x S; the bound is the
   * working set of its inputs (its outputs can stream past the cache): 1 MiB reads
   * 2 MiB, the 1 MiB point's rate 90, roof busbw 22.5, so busbw 12 is 53.3% (by its
   * 4 MiB of traffic it would have been the 4 MiB point's 60: 80%, and calls whose
   * inputs stay cached beat that roof) */
  cr_expect(NEAR(bench_roof_pct(&a, BENCH_ALLREDUCE, 2, 1u << 20, 12.0), 100.0 * 12 / 22.5));
  /* broadcast np2 4 MiB reads the root's 4 MiB: rate 60, traffic 3 x S, roof busbw 20 */
  cr_expect(NEAR(bench_roof_pct(&a, BENCH_BROADCAST, 2, 4u << 20, 12.0), 60.0));
  cr_expect(NEAR(bench_roof_inputs(BENCH_ALLGATHER, 4), 1.0));
  cr_expect(NEAR(bench_roof_inputs(BENCH_REDUCE_SCATTER, 4), 4.0));
  cr_expect(NEAR(bench_roof_pct(&failed, BENCH_ALLREDUCE, 2, 1u << 20, 12.0), -1.0));
}

/* The roof is the machine's capacity, not the calling process's: under mpirun
 * --bind-to core the measuring rank is bound to one core, and threads that inherited
 * that mask measured one core's capacity (64 MiB: 40-47 GB/s against 51-81). Bound to
 * CPU 0, the measurement must still run on two CPUs where there are two, and every
 * capacity must be positive. */
Test(bench_factors, roof_measured_on_two_cpus_from_a_bound_process, .timeout = 120) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one CPU online");
  cpu_set_t one, all;
  cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
  bench_roof_t roof;
  bench_measure_roof(&roof);
  sched_setaffinity(0, sizeof all, &all);
  cr_assert_gt(roof.n, 0);
  for (int i = 0; i < roof.n; i++) cr_expect_gt(roof.gbs[i], 0.0, "point %d", i);
  cr_expect_eq(roof.cpus, 2, "the measuring threads ran on %d CPU(s)", roof.cpus);
}

/* The 2-rank floors between two CPUs: positive times below a millisecond (a thread that
 * never ran would hang the loop or leave 0), and an exchange, whose two transfers
 * overlap, below two round trips (transfers in turn). */
Test(bench_factors, line_floors_measured, .timeout = 60) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one CPU online");
  bench_line_floor_t f;
  cr_assert_eq(bench_measure_line_floor(&f), 1);
  const double ns[] = {f.rtt_ns, f.exchange_ns};
  for (int i = 0; i < 2; i++) {
    cr_expect_gt(ns[i], 0.0, "floor %d", i);
    cr_expect_lt(ns[i], 1e6, "floor %d: %g ns", i, ns[i]);
  }
  cr_expect_lt(f.exchange_ns, 2 * f.rtt_ns, "exchange %g ns, round trip %g ns", f.exchange_ns,
               f.rtt_ns);
}

/* The piece exchange between two CPUs: a rate, which it gives only when every byte each
 * thread sent arrived where it belongs in the other's destination (a piece copied out of
 * a slot before it was written, or over one not yet read, gives 0: with the receiver's
 * wait for the posted piece removed, this test failed), and a plausible one. */
Test(bench_factors, piece_exchange_measured, .timeout = 60) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("one CPU online");
  double gbs = bench_measure_piece_exchange();
  cr_assert_gt(gbs, 0.0, "no rate: a piece arrived wrong, or the threads did not run");
  cr_expect_lt(gbs, 10000.0, "%g GB/s each way", gbs);
}
