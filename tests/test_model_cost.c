/* Cost model of the sim backend, checked against values computed by hand from the
 * formulas in docs/model.md and the constants in data/links.json. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "model_fixture.h"

#define GiB 1073741824.0
#define ASSERT_REL(got, want) \
  cr_assert(fabs((got) - (want)) <= 1e-9 * fabs(want) + 1e-9, "got %.9f want %.9f", (got), (want))

TestSuite(model_cost, .init = model_setup, .fini = model_teardown, .timeout = 30);

Test(model_cost, bandwidths_of_presets) {
  ulsim_bw_t bw;
  ulsim_topology_t h = model_topo("dgx-h100");
  cr_assert_eq(ulsim_bandwidths(&h, 8, &bw, err, sizeof err), UL_OK);
  ASSERT_REL(bw.ring, 18 * 25.0 * 0.82); /* 369 GB/s */
  cr_assert_eq(bw.nvls_alg, 0.0);
  cr_assert_eq(bw.nnodes, 1);
  /* MI300X: a pair gets one xGMI link (48 GB/s), eight GPUs spread over 7 links */
  ulsim_topology_t m = model_topo("mi300x-8gpu");
  cr_assert_eq(ulsim_bandwidths(&m, 2, &bw, err, sizeof err), UL_OK);
  ASSERT_REL(bw.ring, 64 * 0.75);
  cr_assert_eq(ulsim_bandwidths(&m, 8, &bw, err, sizeof err), UL_OK);
  ASSERT_REL(bw.ring, 7 * 64 * 0.75);
  ASSERT_REL(bw.pair, 64 * 0.75);
  /* two nodes of DGX H100: 8 NDR NICs at 0.95 */
  ulsim_topology_t h2 = model_topo("dgx-h100x2");
  cr_assert_eq(ulsim_bandwidths(&h2, 16, &bw, err, sizeof err), UL_OK);
  cr_assert_eq(bw.nnodes, 2);
  cr_assert_eq(bw.ppn, 8);
  ASSERT_REL(bw.inter, 8 * 50 * 0.95);
  ASSERT_REL(bw.hop_inter[ULSIM_SIMPLE], 14.0 + 0.6);
  /* NVLS only above 4 GPUs */
  ulsim_topology_t n = model_topo("dgx-h100-nvls");
  cr_assert_eq(ulsim_bandwidths(&n, 4, &bw, err, sizeof err), UL_OK);
  cr_assert_eq(bw.nvls_alg, 0.0);
  cr_assert_eq(ulsim_bandwidths(&n, 8, &bw, err, sizeof err), UL_OK);
  ASSERT_REL(bw.nvls_alg, 18 * 25.0 * 0.61);
}

Test(model_cost, ring_allreduce_1GiB_h100_by_hand) {
  ulsim_topology_t t = model_topo("dgx-h100");
  ulsim_cost_t c;
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, GiB, 8, "ring", &c, err, sizeof err), UL_OK,
               "%s", err);
  /* NCCL's ring: algbw = busbw x n / 2(n-1); latency = Simple base 8.4 + 14 NVLink hops of
   * 3.4 us (tuning.cc), plus the topology's 5 us launch */
  double alg = 369.0 * 8 / 14 * 1e3; /* bytes per us */
  cr_assert_str_eq(c.algorithm, "ring");
  cr_assert_eq(c.proto, ULSIM_SIMPLE);
  ASSERT_REL(c.time_us, 5.0 + 8.4 + 14 * 3.4 + GiB / alg);
  ASSERT_REL(c.busbw_gbps, GiB / (c.time_us * 1e3) * 1.75);
}

Test(model_cost, hierarchical_multinode_by_hand) {
  ulsim_topology_t t = model_topo("dgx-a100x4");
  ulsim_cost_t c;
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, GiB, 32, "hier", &c, err, sizeof err), UL_OK,
               "%s", err);
  double Bi = 12 * 25 * 0.77 * 1e3, Bn = 8 * 25 * 0.96 * 1e3;
  double ti = 2.0 * 7 / 8 * GiB / Bi, tn = 2.0 * 3 / 4 * GiB / Bn;
  cr_assert(tn > ti);
  double fill = (14 + 6) * 3e6 / Bn;
  double alpha = 5.0 + 8.4 + 14 * 3.4 + 6 * (14.0 + 0.6);
  cr_assert_eq(c.proto, ULSIM_SIMPLE);
  ASSERT_REL(c.time_us, alpha + tn + fill);
}

Test(model_cost, nvls_large_allreduce_and_threshold) {
  ulsim_topology_t t = model_topo("dgx-h100-nvls");
  ulsim_cost_t c;
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, 8 * GiB, 8, NULL, &c, err, sizeof err), UL_OK);
  cr_assert_str_eq(c.algorithm, "nvls");
  double tn = 8 * GiB / (274.5 * 1e3);
  /* + two waves of pipeline fill: 16 NVLS channels x 8 heads x 128 KiB chunks (NCCL keeps
   * the full chunk from 64 x 128 x 128 KiB = 1 GiB up) */
  double fill = 2 * (16.0 * 8 * 131072) / (274.5 * 1e3);
  ASSERT_REL(c.time_us, 5.0 + 25.0 + fill + tn);
  /* 4 GPUs: no multicast benefit, so no NVLS candidate */
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, GiB, 4, "nvls", &c, err, sizeof err),
               UL_ERR_INVALID_ARG);
  cr_assert(strstr(err, "no candidate"), "%s", err);
  /* NVLS is allreduce-only */
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLGATHER, GiB, 8, "nvls", &c, err, sizeof err),
               UL_ERR_INVALID_ARG);
}

Test(model_cost, factors_sizes_and_other_collectives) {
  ASSERT_REL(ulsim_bus_factor(UL_COLL_ALLREDUCE, 8), 1.75);
  ASSERT_REL(ulsim_bus_factor(UL_COLL_ALLGATHER, 4), 0.75);
  ASSERT_REL(ulsim_bus_factor(UL_COLL_BROADCAST, 4), 1.0);
  ASSERT_REL(ulsim_size_from_call_bytes(UL_COLL_ALLGATHER, 100, 4), 400.0);
  ASSERT_REL(ulsim_size_from_call_bytes(UL_COLL_ALLREDUCE, 100, 4), 100.0);
  ulsim_topology_t t = model_topo("pcie5-8gpu");
  ulsim_cost_t c;
  /* bus topology: no direct algorithms, ring allgather at 63 x 0.76 GB/s */
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLGATHER, GiB, 8, NULL, &c, err, sizeof err), UL_OK);
  cr_assert_str_eq(c.algorithm, "ring");
  double B = 63 * 0.76 * 1e3, tbw = 7.0 / 8 * GiB / B;
  ASSERT_REL(c.time_us, 5.0 + 8.4 + 7 * 5.7 + tbw + 7 * 3e6 / B);
  /* every collective has a cost; 1 rank is just the launch */
  for (int k = 0; k < UL_COLL_COUNT; k++) {
    cr_assert_eq(ulsim_cost(&t, (ul_coll_t)k, 4096, 8, NULL, &c, err, sizeof err), UL_OK, "%d: %s",
                 k, err);
    cr_assert(c.time_us > 5.0);
    cr_assert_eq(ulsim_cost(&t, (ul_coll_t)k, 4096, 1, NULL, &c, err, sizeof err), UL_OK);
  }
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, 4096, 1, NULL, &c, err, sizeof err), UL_OK);
  ASSERT_REL(c.time_us, 5.0);
  /* 16 ranks on a single-node preset: a second node over its NICs */
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, GiB, 16, NULL, &c, err, sizeof err), UL_OK);
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, GiB, 0, NULL, &c, err, sizeof err),
               UL_ERR_INVALID_ARG);
}

Test(model_cost, parse_size) {
  double b;
  cr_assert_eq(ulsim_parse_size("1G", &b), 0);
  ASSERT_REL(b, GiB);
  cr_assert_eq(ulsim_parse_size("64K", &b), 0);
  ASSERT_REL(b, 65536.0);
  cr_assert_eq(ulsim_parse_size("25MB", &b), 0);
  ASSERT_REL(b, 25.0 * 1048576);
  cr_assert_eq(ulsim_parse_size("2MiB", &b), 0);
  ASSERT_REL(b, 2.0 * 1048576);
  cr_assert_eq(ulsim_parse_size("1e9", &b), 0);
  ASSERT_REL(b, 1e9);
  cr_assert_eq(ulsim_parse_size("12", &b), 0);
  ASSERT_REL(b, 12.0);
  cr_assert_eq(ulsim_parse_size("1X", &b), -1);
  cr_assert_eq(ulsim_parse_size("", &b), -1);
  cr_assert_eq(ulsim_parse_size("-5", &b), -1);
  cr_assert_eq(ulsim_parse_size("3GBx", &b), -1);
}

Test(model_cost, train_reproduces_reference_worked_example) {
  /* reference (d.1): 7B params, bf16 grads (14 GB), 8 GPUs, 32k tokens/GPU, 989 TFLOP/s at
   * 45% MFU: compute 3.1 s; allreduce 66 ms on NVLink4 ring, 0.51 s on PCIe Gen5 */
  ulsim_train_in_t in = {.params = 7e9, .gpus = 8, .tokens_per_gpu = 32768, .gpu_tflops = 989,
                         .mfu = 0.45, .zero = 0, .bucket_bytes = 0, .overlap = 0,
                         .grad_bytes = 2};
  ulsim_train_out_t o;
  ulsim_topology_t h = model_topo("dgx-h100");
  cr_assert_eq(ulsim_train(&h, &in, &o, err, sizeof err), UL_OK, "%s", err);
  ASSERT_REL(o.compute_s, 6 * 7e9 * 32768 / (989e12 * 0.45));
  cr_assert_eq(o.nbuckets, 1);
  cr_assert(fabs(o.comm_s - 0.066) / 0.066 < 0.10, "NVLink4 sync %.4f s", o.comm_s);
  cr_assert(fabs(o.exposed_s / o.step_s - 0.02) < 0.01);
  ulsim_topology_t p = model_topo("pcie5-8gpu");
  cr_assert_eq(ulsim_train(&p, &in, &o, err, sizeof err), UL_OK);
  cr_assert(fabs(o.comm_s - 0.51) / 0.51 < 0.10, "PCIe5 sync %.4f s", o.comm_s);
  cr_assert(fabs(o.exposed_s / o.step_s - 0.14) < 0.02);
  /* overlap hides all but the last bucket */
  in.bucket_bytes = 25.0 * 1048576;
  in.overlap = 1.0;
  cr_assert_eq(ulsim_train(&h, &in, &o, err, sizeof err), UL_OK);
  cr_assert_eq(o.nbuckets, (int)ceil(14e9 / (25.0 * 1048576)));
  cr_assert(o.exposed_s < o.comm_s);
  cr_assert(o.exposed_s >= o.bucket_us * 1e-6 * 0.0);
  in.mfu = 0;
  cr_assert_eq(ulsim_train(&h, &in, &o, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_assert(strstr(err, "--mfu"), "%s", err);
}
