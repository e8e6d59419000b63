/* The model chooses algorithm and protocol as NCCL's tuner does (NCCL 2.30
 * src/graph/tuning.cc), pinned for 8 GPUs on NVSwitch, 2 and 16 nodes of InfiniBand. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../model/ul_model.h"

static ulsim_catalog_t cat;
static char err[1024];

static void setup(void) {
  cr_assert_eq(ulsim_catalog_load_default(&cat, err, sizeof err), UL_OK, "%s", err);
}
static void teardown(void) { ulsim_catalog_free(&cat); }
TestSuite(model_tuner, .init = setup, .fini = teardown, .timeout = 30);

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

Test(model_tuner, eight_gpus_nvswitch) {
  expect("dgx-h100", 8, 4096, "ring", ULSIM_LL);
  expect("dgx-h100", 8, 65536, "ring", ULSIM_LL);
  expect("dgx-h100", 8, 1 << 20, "ring", ULSIM_LL);
  expect("dgx-h100", 8, 16 << 20, "ring", ULSIM_LL128);
  expect("dgx-h100", 8, 256 << 20, "ring", ULSIM_SIMPLE);
  /* NVLS from a few MiB up (25 us NVLS latency loses below) */
  expect("dgx-h100-nvls", 8, 65536, "ring", ULSIM_LL);
  expect("dgx-h100-nvls", 8, 256 << 20, "nvls", ULSIM_SIMPLE);
}

Test(model_tuner, two_nodes_ib) {
  expect("dgx-h100x2", 16, 65536, "tree", ULSIM_LL);
  expect("dgx-h100x2", 16, 1 << 20, "tree", ULSIM_LL128);
  expect("dgx-h100x2", 16, 256 << 20, "ring", ULSIM_SIMPLE);
}

Test(model_tuner, sixteen_nodes_ib) {
  expect("dgx-h100x16", 128, 65536, "tree", ULSIM_LL);
  expect("dgx-h100x16", 128, 16 << 20, "tree", ULSIM_LL128);
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
