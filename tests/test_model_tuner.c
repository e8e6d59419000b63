/* The model chooses algorithm and protocol as NCCL's tuner does (NCCL 2.30
 * src/graph/tuning.cc), pinned for 8 GPUs on NVSwitch, 2 and 16 nodes of InfiniBand, and
 * runs them on the channels NCCL's search finds and launches (search.cc, connect.cc,
 * enqueue.cc). Expected values are worked from NCCL's rules by hand in the comments. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../model/tuner.h"
#include "model_fixture.h"

TestSuite(model_tuner, .init = model_setup, .fini = model_teardown, .timeout = 30);

static void expect(const char *topo, int ranks, double bytes, const char *algo,
                   ulsim_proto_t proto) {
  ulsim_topology_t t;
  cr_assert_eq(ulsim_topology_load(topo, &cat, &t, err, sizeof err), UL_OK, "%s", err);
  ulsim_cost_t c;
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, bytes, ranks, NULL, &c, err, sizeof err), UL_OK,
               "%s", err);
  cr_expect_str_eq(c.algorithm, algo, "%s %d ranks %.0f B: got %s/%s", topo, ranks, bytes,
                   c.algorithm, ulsim_proto_name(c.proto));
  cr_expect_eq(c.proto, proto, "%s %d ranks %.0f B: got %s/%s", topo, ranks, bytes, c.algorithm,
               ulsim_proto_name(c.proto));
  /* no candidate NCCL does not have */
  for (int i = 0; i < c.ncand; i++)
    cr_expect(strcmp(c.cand[i].algorithm, "direct") && strcmp(c.cand[i].algorithm, "two_shot") &&
                  strcmp(c.cand[i].algorithm, "hier"),
              "%s is a candidate", c.cand[i].algorithm);
}

/* 8 x H100, B = 18 x 25 x 0.82 = 369 GB/s, 12 graph channels; estimates (launch equal
 * for all, left out): ring LL 15.0 us + S / (min(141, 0.5 B) x 8/14 = 80.6 GB/s); ring
 * LL128 40.6 + S / (min(0.92 B, 12 x 36.7) x 8/14 = 194.0); ring Simple 56.0 + S / 210.9.
 * LL -> LL128 where 25.6 us = S (1/80.6 - 1/194.0): S = 3.5 MB; LL128 -> Simple where
 * 15.4 us = S (1/194.0 - 1/210.9): S = 37 MB. Tree LL at 64 KiB: 15.2 + S / (0.92 B / 3.8
 * x 0.5 x 0.6 = 26.8) = 17.6 us > ring's 15.8. */
Test(model_tuner, eight_gpus_nvswitch) {
  expect("dgx-h100", 8, 4096, "ring", ULSIM_LL);
  expect("dgx-h100", 8, 65536, "ring", ULSIM_LL);
  expect("dgx-h100", 8, 1 << 20, "ring", ULSIM_LL);
  expect("dgx-h100", 8, 2 << 20, "ring", ULSIM_LL);
  expect("dgx-h100", 8, 4 << 20, "ring", ULSIM_LL128);
  expect("dgx-h100", 8, 16 << 20, "ring", ULSIM_LL128);
  expect("dgx-h100", 8, 32 << 20, "ring", ULSIM_LL128);
  expect("dgx-h100", 8, 64 << 20, "ring", ULSIM_SIMPLE);
  expect("dgx-h100", 8, 256 << 20, "ring", ULSIM_SIMPLE);
  /* NVLS 25 + S / 274.5 against ring LL 15 + S / 80.6: NVLS from S = 10 us /
   * (1/80.6 - 1/274.5) = 1.14 MB, so ring/LL at 1 MiB and NVLS at 2 MiB */
  expect("dgx-h100-nvls", 8, 65536, "ring", ULSIM_LL);
  expect("dgx-h100-nvls", 8, 1 << 20, "ring", ULSIM_LL);
  expect("dgx-h100-nvls", 8, 2 << 20, "nvls", ULSIM_SIMPLE);
  expect("dgx-h100-nvls", 8, 256 << 20, "nvls", ULSIM_SIMPLE);
}

/* 2 x 8 H100, 8 graph channels (see search test), Intel llMaxBw 39 GB/s on 2 nodes.
 * 64 KiB: tree LL 26.4 us + S / (39 x 0.5 x 0.6) = 32.0 us against ring LL 41.2 + S /
 * (39 x 16/30) = 44.4. 1 MiB: tree LL128 49.7 + S / (min(331.2 x 120/128, 8 x 36.7) x 0.5
 * x 0.6 = 88.1) = 61.6 against ring LL128 76.4 + S / 156.6 = 83.1 and tree LL 160.
 * 64 MiB: ring LL128 76.4 + S / 156.6 = 505 against ring Simple 134 x 1.4 + S / 196.8 =
 * 529 and tree LL128 558. 256 MiB: ring Simple 1552 against ring LL128 1790. */
Test(model_tuner, two_nodes_ib) {
  expect("dgx-h100x2", 16, 65536, "tree", ULSIM_LL);
  expect("dgx-h100x2", 16, 1 << 20, "tree", ULSIM_LL128);
  expect("dgx-h100x2", 16, 64 << 20, "ring", ULSIM_LL128);
  expect("dgx-h100x2", 16, 256 << 20, "ring", ULSIM_SIMPLE);
}

/* 16 x 8 H100: ring latency over 254 steps (30 across nodes) is 330 us for LL; tree LL
 * 60 us + S / (20.4 x 0.5 x corr) wins small; 16 MiB tree LL128 104.3 + S / (8 x 29 x 0.5
 * x 0.9) = 265 us against tree Simple 186 + S / (288 x 0.5 x 0.7) = 352; 4 GiB ring
 * Simple 1716 + S / (369 x 128/254) = 24.8 ms against tree Simple 186 + S / 144 = 30.0. */
Test(model_tuner, sixteen_nodes_ib) {
  expect("dgx-h100x16", 128, 65536, "tree", ULSIM_LL);
  expect("dgx-h100x16", 128, 16 << 20, "tree", ULSIM_LL128);
  expect("dgx-h100x16", 128, 4.0 * (1 << 30), "ring", ULSIM_SIMPLE);
}

static void graph_of(const char *topo, int ranks, ulsim_tuner_graph_t *g) {
  ulsim_topology_t t;
  ulsim_bw_t bw;
  cr_assert_eq(ulsim_topology_load(topo, &cat, &t, err, sizeof err), UL_OK, "%s", err);
  cr_assert_eq(ulsim_bandwidths(&t, ranks, &bw, err, sizeof err), UL_OK, "%s", err);
  ulsim_tuner_graph(&t, &bw, g);
}

/* NCCL's ring search (search.cc) over NCCL's own link figures (topo.h SMxx_NVLINK_BW). */
Test(model_tuner, channels_from_the_search) {
  ulsim_tuner_graph_t g;
  /* H100: 18 x 20.6 = 370.8 GB/s; SM90 speeds 60 (6 channels, 360), 50 (7, 350), 40 (9,
   * 360), 30 (12, 360) tie or lose, 24/60 < 0.49 stops; 60 >= 50 so the 6 are duplicated
   * to 12 x 30; 12 x 40 does not fit. Communicator: 2 x 12 = 24; NVLS 16. */
  graph_of("dgx-h100", 8, &g);
  cr_expect_eq(g.graph_ch, 12);
  cr_expect_float_eq(g.graph_bw, 30.0, 1e-9);
  cr_expect_eq(g.comm_ch, 24);
  cr_expect_eq(g.nvls_ch, 16);
  cr_expect_eq(g.simple_nt, 512);
  /* A100: 12 x 20 = 240; 6 x 40 = 240 reaches the total at once; SM80 duplicates (the
   * SM90 exception does not apply) to 12 x 20; communicator 24. */
  graph_of("dgx-a100", 8, &g);
  cr_expect_eq(g.graph_ch, 12);
  cr_expect_float_eq(g.graph_bw, 20.0, 1e-9);
  cr_expect_eq(g.comm_ch, 24);
  /* B200: 18 x 40.1 = 721.8; SM100 90 gives 8 (720), no later speed beats it; duplicated
   * to 16 x 45; 16 x 50 does not fit; communicator 32; NVLS 24 on one node. */
  graph_of("dgx-b200", 8, &g);
  cr_expect_eq(g.graph_ch, 16);
  cr_expect_float_eq(g.graph_bw, 45.0, 1e-9);
  cr_expect_eq(g.comm_ch, 32);
  cr_expect_eq(g.nvls_ch, 24);
  /* 2 nodes of H100, NICs 50 GB/s behind PCIe Gen5 (48): 48 fits 7 (NVLink 370.8/48),
   * 45 fits 8 (one per NIC) = 360, nothing later beats it; 45 < 50 with 8 > 4 channels is
   * not duplicated on SM90; 45 is not > 45, so no multi-node doubling: 16 channels. */
  graph_of("dgx-h100x2", 16, &g);
  cr_expect_eq(g.graph_ch, 8);
  cr_expect_float_eq(g.graph_bw, 45.0, 1e-9);
  cr_expect_eq(g.comm_ch, 16);
  /* 4 nodes of A100, HDR 25 behind Gen4 (24): 8 x 24 = 192, below 25 no duplication */
  graph_of("dgx-a100x4", 32, &g);
  cr_expect_eq(g.graph_ch, 8);
  cr_expect_eq(g.comm_ch, 16);
}

static const ulsim_candidate_t *cand_of(const ulsim_cost_t *c, const char *algo,
                                        ulsim_proto_t p) {
  for (int i = 0; i < c->ncand; i++)
    if (!strcmp(c->cand[i].algorithm, algo) && c->cand[i].proto == p) return &c->cand[i];
  cr_assert_fail("no %s/%s candidate", algo, ulsim_proto_name(p));
  return NULL;
}

/* enqueue.cc topoGetAlgoInfo: channels drop while bytes < nc x nt x threshold, then
 * threads halve. */
Test(model_tuner, channel_reduction_for_small_sizes) {
  ulsim_tuner_graph_t g;
  graph_of("dgx-h100", 8, &g);
  int nc, nt;
  /* ring LL, threshold 8 x 8 ranks = 64 B/thread: 65536 / (512 x 64) = 2 channels */
  ulsim_tuner_launch(&g, 0, ULSIM_LL, 8, 65536, &nc, &nt);
  cr_expect_eq(nc, 2);
  cr_expect_eq(nt, 512);
  /* 16 KiB: one channel, then 512 -> 256 threads (16384 < 1 x 512 x 64, not < 256 x 64) */
  ulsim_tuner_launch(&g, 0, ULSIM_LL, 8, 16384, &nc, &nt);
  cr_expect_eq(nc, 1);
  cr_expect_eq(nt, 256);
  /* ring LL128, 8 B/thread x 640: 65536 / 5120 -> 12 channels */
  ulsim_tuner_launch(&g, 0, ULSIM_LL128, 8, 65536, &nc, &nt);
  cr_expect_eq(nc, 12);
  cr_expect_eq(nt, 640);
  /* tree LL, no x nranks: 65536 / (512 x 8) = 16 channels; trees run 640 threads */
  ulsim_tuner_launch(&g, 1, ULSIM_LL, 8, 65536, &nc, &nt);
  cr_expect_eq(nc, 16);
  cr_expect_eq(nt, 640);
  /* ring Simple, 64 B/thread x 512: 65536 / 32768 = 2 channels */
  ulsim_tuner_launch(&g, 0, ULSIM_SIMPLE, 8, 65536, &nc, &nt);
  cr_expect_eq(nc, 2);
  cr_expect_eq(nt, 512);
  /* 256 MiB Simple: every channel */
  ulsim_tuner_launch(&g, 0, ULSIM_SIMPLE, 8, 256.0 * (1 << 20), &nc, &nt);
  cr_expect_eq(nc, 24);
  cr_expect_eq(nt, 512);

  /* The run uses those channels: ring LL at 64 KiB on 2 of 24 channels, busbw 0.5 x 369 x
   * 2/24 = 15.4 GB/s, algbw x 8/14; chosen on NCCL's all-channel estimate. */
  ulsim_topology_t t;
  ulsim_cost_t c;
  cr_assert_eq(ulsim_topology_load("dgx-h100", &cat, &t, err, sizeof err), UL_OK, "%s", err);
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, 65536, 8, NULL, &c, err, sizeof err), UL_OK);
  const ulsim_candidate_t *r = cand_of(&c, "ring", ULSIM_LL);
  cr_expect_eq(r->nchannels, 2);
  cr_expect_float_eq(r->algbw_gbps, 0.5 * 369 * 2 / 24 * 8 / 14, 1e-9);
  cr_expect_float_eq(r->select_algbw_gbps, 141.0 * 8 / 14, 1e-9);
  cr_expect_float_eq(c.time_us, 5.0 + 15.0 + 65536 / (0.5 * 369 * 2 / 24 * 8 / 14 * 1e3), 1e-6);
  cr_expect_float_eq(r->select_us, 5.0 + 15.0 + 65536 / (141.0 * 8 / 14 * 1e3), 1e-6);
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, 256.0 * (1 << 20), 8, NULL, &c, err,
                          sizeof err),
               UL_OK);
  r = cand_of(&c, "ring", ULSIM_SIMPLE);
  cr_expect_eq(r->nchannels, 24);
  cr_expect_float_eq(r->algbw_gbps, r->select_algbw_gbps, 1e-9);
}

/* Selection follows NCCL's estimate, not the modeled run: at 64 KiB on 8 H100 NCCL picks
 * ring/LL (15.8 us vs tree/LL 17.6 us at all channels), though tree/LL on its 16 launched
 * channels would run sooner than ring/LL on 2. */
Test(model_tuner, choice_is_the_library_estimate) {
  ulsim_topology_t t;
  ulsim_cost_t c;
  cr_assert_eq(ulsim_topology_load("dgx-h100", &cat, &t, err, sizeof err), UL_OK, "%s", err);
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, 65536, 8, NULL, &c, err, sizeof err), UL_OK);
  const ulsim_candidate_t *ring = cand_of(&c, "ring", ULSIM_LL);
  const ulsim_candidate_t *tree = cand_of(&c, "tree", ULSIM_LL);
  cr_expect_str_eq(c.algorithm, "ring");
  cr_expect_lt(ring->select_us, tree->select_us);
  cr_expect_gt(ring->time_us, tree->time_us);
  cr_expect_float_eq(c.time_us, ring->time_us, 1e-9);
}

/* NVLS chunk (enqueue.cc:2263-2274) with 16 channels x 8 heads = 128 concurrent ops:
 * 128 KiB -> 64 KiB below 1 GiB, -> 32 KiB below 64 MiB, -> 16 KiB below 8 MiB. The run
 * adds two waves (3 warp-group stages) of ops x chunk bytes at the NVLS bandwidth. */
Test(model_tuner, nvls_chunk_pipeline) {
  ulsim_topology_t t;
  ulsim_cost_t c;
  cr_assert_eq(ulsim_topology_load("dgx-h100-nvls", &cat, &t, err, sizeof err), UL_OK, "%s",
               err);
  static const double sizes[] = {2 << 20, 8 << 20, 256 << 20, 1 << 30};
  static const double chunks[] = {16384, 32768, 65536, 131072};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, sizes[i], 8, NULL, &c, err, sizeof err),
                 UL_OK);
    const ulsim_candidate_t *v = cand_of(&c, "nvls", ULSIM_SIMPLE);
    cr_expect_float_eq(v->chunk_bytes, chunks[i], 1e-9, "%.0f B", sizes[i]);
    double wave = 128 * chunks[i];
    double fill = 2 * fmin(sizes[i], wave) / (274.5 * 1e3);
    cr_expect_float_eq(v->time_us - v->select_us, fill, 1e-6, "%.0f B", sizes[i]);
  }
}

Test(model_tuner, pcie_has_no_ll128_and_nvls_tree_is_nic_bound) {
  ulsim_topology_t t;
  ulsim_cost_t c;
  cr_assert_eq(ulsim_topology_load("pcie5-8gpu", &cat, &t, err, sizeof err), UL_OK, "%s", err);
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, 1 << 24, 8, NULL, &c, err, sizeof err), UL_OK);
  for (int i = 0; i < c.ncand; i++) cr_expect_neq(c.cand[i].proto, ULSIM_LL128);
  /* NVLS tree on 4 nodes: busbw never above the node's NICs (8 x 50 x 0.95 = 380 GB/s) */
  cr_assert_eq(ulsim_topology_load("dgx-h100-nvlsx4", &cat, &t, err, sizeof err), UL_OK, "%s",
               err);
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, 4.0 * (1 << 30), 32, "nvls_tree", &c, err,
                          sizeof err),
               UL_OK, "%s", err);
  cr_expect_leq(c.busbw_gbps, 380.0 + 1e-6);
  /* every result carries confidence and sources */
  cr_expect(c.confidence[0] && c.sources[0] && c.tuner);
}

Test(model_tuner, memory_check_per_zero_stage) {
  /* 7e9 params: 2 + 2 + 12 bytes each = 112 GB unsharded; over 8 data-parallel ranks
   * ZeRO-1 2+2+12/8 = 38.5 GB, ZeRO-2 2+14/8 = 26.25 GB, ZeRO-3 16/8 = 14 GB */
  cr_expect_float_eq(ulsim_train_memory_gb(7e9, 0, 8, 2, 2, 12), 112.0, 1e-9);
  cr_expect_float_eq(ulsim_train_memory_gb(7e9, 1, 8, 2, 2, 12), 38.5, 1e-9);
  cr_expect_float_eq(ulsim_train_memory_gb(7e9, 2, 8, 2, 2, 12), 26.25, 1e-9);
  cr_expect_float_eq(ulsim_train_memory_gb(7e9, 3, 8, 2, 2, 12), 14.0, 1e-9);
  ulsim_topology_t t;
  cr_assert_eq(ulsim_topology_load("dgx-h100", &cat, &t, err, sizeof err), UL_OK, "%s", err);
  ulsim_train_in_t in = {.params = 7e9, .gpus = 8, .tokens_per_gpu = 4096, .gpu_tflops = 989,
                         .mfu = 0.4, .zero = 0, .bucket_bytes = 25 << 20, .overlap = -1,
                         .grad_bytes = 2, .gpu_mem_gb = 80};
  ulsim_train_out_t o;
  /* DDP needs 112 GB on an 80 GB GPU: refused, with the figures in the message */
  cr_assert_eq(ulsim_train(&t, &in, &o, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_expect(strstr(err, "does not fit") && strstr(err, "112.0 GB"), "%s", err);
  in.zero = 2;
  cr_assert_eq(ulsim_train(&t, &in, &o, err, sizeof err), UL_OK, "%s", err);
  cr_expect_float_eq(o.mem_gb, 26.25, 1e-9);
  /* overlap derived from the schedule: hidden part in [0, 1], last bucket exposed */
  cr_expect(o.overlap_used >= 0 && o.overlap_used < 1, "%f", o.overlap_used);
  cr_expect(o.exposed_s > 0);
}
