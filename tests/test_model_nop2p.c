/* PCIe without GPU peer-to-peer: the host-memory cap of a bus node ("p2p": false,
 * "host_memory"), pinned by hand arithmetic, and the parser's refusals of bad input. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_fixture.h"

TestSuite(model_nop2p, .init = model_setup, .fini = model_teardown, .timeout = 30);

static ulsim_bw_t bws(const ulsim_topology_t *t, int ranks) {
  ulsim_bw_t bw;
  cr_assert_eq(ulsim_bandwidths(t, ranks, &bw, err, sizeof err), UL_OK, "%s", err);
  return bw;
}

Test(model_nop2p, pcie5_cap_by_hand) {
  ulsim_topology_t t = model_topo("pcie5-8gpu-nop2p");
  cr_assert_eq(t.no_p2p, 1);
  cr_assert_eq(t.host_mem.sockets, 2);
  cr_assert_eq(t.host_mem.channels_per_socket, 8);
  /* DDR5-4800: 4800 MT/s x 8 B x 8 channels = 307.2 GB/s per socket, 614.4 for two */
  cr_assert_float_eq(ulsim_host_memory_gbps(&t.host_mem), 614.4, 1e-9);
  ulsim_bw_t bw = bws(&t, 8);
  /* PCIe Gen5 x16: 63 GB/s x 0.76 = 47.88; DRAM: 614.4 x 0.77 / (2 x 8) = 29.568 */
  cr_assert_float_eq(bw.bus_ring, 47.88, 1e-9);
  cr_assert_float_eq(bw.host_cap, 29.568, 1e-9);
  cr_assert_float_eq(bw.ring, 29.568, 1e-9);
  cr_assert_float_eq(bw.pair, 29.568, 1e-9);
  cr_assert_float_eq(bw.inject, 29.568, 1e-9);
  char buf[768];
  ulsim_host_memory_explain(&t, &bw, buf, sizeof buf);
  cr_assert(strstr(buf, "BINDS") && strstr(buf, "29.57") && strstr(buf, "(2 x 8)") &&
                strstr(buf, "4800 MT/s"),
            "%s", buf);
}

Test(model_nop2p, fewer_gpus_share_the_dram_less) {
  ulsim_topology_t t = model_topo("pcie5-8gpu-nop2p");
  /* 4 GPUs: 614.4 x 0.77 / 8 = 59.136 > PCIe 47.88, so PCIe sets the pace again */
  ulsim_bw_t bw = bws(&t, 4);
  cr_assert_float_eq(bw.host_cap, 59.136, 1e-9);
  cr_assert_float_eq(bw.ring, 47.88, 1e-9);
  char buf[768];
  ulsim_host_memory_explain(&t, &bw, buf, sizeof buf);
  cr_assert(strstr(buf, "does not bind"), "%s", buf);
}

Test(model_nop2p, pcie4_cap_by_hand) {
  ulsim_topology_t t = model_topo("pcie4-8gpu-nop2p");
  /* DDR4-3200: 3200 x 8 B x 8 ch x 2 sockets = 409.6 GB/s; x 0.77 / 16 = 19.712 < 23.94 */
  cr_assert_float_eq(ulsim_host_memory_gbps(&t.host_mem), 409.6, 1e-9);
  ulsim_bw_t bw = bws(&t, 8);
  cr_assert_float_eq(bw.bus_ring, 31.5 * 0.76, 1e-9);
  cr_assert_float_eq(bw.ring, 19.712, 1e-9);
}

Test(model_nop2p, p2p_presets_unchanged) {
  for (int gen = 4; gen <= 5; gen++) {
    char name[32];
    snprintf(name, sizeof name, "pcie%d-8gpu", gen);
    ulsim_topology_t t = model_topo(name);
    cr_assert_eq(t.no_p2p, 0, "%s", name);
    ulsim_bw_t bw = bws(&t, 8);
    cr_assert_float_eq(bw.host_cap, 0.0, 1e-12);
    cr_assert_float_eq(bw.ring, (gen == 4 ? 31.5 : 63.0) * 0.76, 1e-9, "%s", name);
    char buf[64] = "x";
    cr_assert_str_eq(ulsim_host_memory_explain(&t, &bw, buf, sizeof buf), "");
  }
}

Test(model_nop2p, allreduce_1GiB_by_hand) {
  ulsim_topology_t t = model_topo("pcie5-8gpu-nop2p");
  ulsim_cost_t c;
  double S = 1073741824.0;
  cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, S, 8, NULL, &c, err, sizeof err), UL_OK, "%s",
               err);
  cr_assert_str_eq(c.algorithm, "ring");
  cr_assert_eq(c.proto, ULSIM_SIMPLE);
  /* NCCL ring Simple on PCI: base 8.4 + 14 steps x 5.7 us, launch 5 us; busbw 29.568 at
   * every channel (1 GiB launches all of them): algbw = 29.568 x 8 / 14 */
  double lat = 5.0 + 8.4 + 14 * 5.7;
  double t_us = lat + S / (29.568 * 8.0 / 14.0 * 1e3);
  cr_assert_float_eq(c.time_us, t_us, 1e-6 * t_us, "%f vs %f", c.time_us, t_us);
  cr_assert_float_eq(c.busbw_gbps, S / (t_us * 1e3) * 14.0 / 8.0, 1e-6);
  /* the result rests on an assumed DRAM efficiency: medium, and it says so */
  cr_assert_str_eq(c.confidence, "medium");
  cr_assert(strstr(c.sources, "host memory") && strstr(c.sources, "assumed: efficiency"), "%s",
            c.sources);
  /* the same size with P2P: PCIe-bound, the cap is absent */
  ulsim_topology_t p = model_topo("pcie5-8gpu");
  ulsim_cost_t d;
  cr_assert_eq(ulsim_cost(&p, UL_COLL_ALLREDUCE, S, 8, NULL, &d, err, sizeof err), UL_OK);
  cr_assert_gt(d.busbw_gbps, 47.0);
  cr_assert_str_eq(d.confidence, "high");
}

Test(model_nop2p, write_and_read_back) {
  ulsim_topology_t t = model_topo("pcie5-8gpu-nop2p"), u;
  model_write_read_back(&t, &u);
  cr_assert_eq(u.no_p2p, 1);
  cr_assert_eq(u.host_mem.sockets, 2);
  cr_assert_eq(u.host_mem.channels_per_socket, 8);
  cr_assert_float_eq(u.host_mem.mt_per_s, 4800, 1e-12);
  cr_assert_float_eq(u.host_mem.bytes_per_transfer, 8, 1e-12);
  cr_assert_float_eq(u.host_mem.efficiency, 0.77, 1e-12);
  cr_assert_str_eq(u.host_mem.assumed, "efficiency");
  cr_assert_float_eq(bws(&u, 8).ring, 29.568, 1e-9);
}

/* ------------------------------------------------------------ bad input */

#define PRE "{\"name\": \"x\", \"gpus_per_node\": 8, \"intra\": {"
#define HM_OK "\"sockets\": 2, \"channels_per_socket\": 8, \"mt_per_s\": 4800, " \
              "\"bytes_per_transfer\": 8, \"efficiency\": 0.77"

/* Refused like any topology error, and the sentence names the "intra" object. */
static void expect_error(const char *json, const char *needle1, const char *needle2) {
  model_expect_topology_error(json, needle1, needle2);
  cr_assert(strstr(err, "intra"), "no field in: %s", err);
}

Test(model_nop2p, parser_refuses_bad_host_memory) {
  expect_error(PRE "\"shape\": \"bus\", \"link\": \"pcie5\", \"p2p\": \"no\"}}", "p2p",
               "true or false");
  expect_error(PRE "\"shape\": \"switch\", \"link\": \"nvlink4\", \"links_per_gpu\": 18, "
                   "\"p2p\": false, \"host_memory\": {" HM_OK "}}}",
               "p2p", "bus");
  expect_error(PRE "\"shape\": \"bus\", \"link\": \"pcie5\", \"p2p\": false}}", "host_memory",
               "sockets");
  expect_error(PRE "\"shape\": \"bus\", \"link\": \"pcie5\", \"host_memory\": {" HM_OK "}}}",
               "host_memory", "\"p2p\": false");
  expect_error(PRE "\"shape\": \"bus\", \"link\": \"pcie5\", \"p2p\": false, \"host_memory\": 3}}",
               "host_memory", "object");
  expect_error(PRE "\"shape\": \"bus\", \"link\": \"pcie5\", \"p2p\": false, \"host_memory\": "
                   "{\"sockets\": 2, \"mt_per_s\": 4800, \"bytes_per_transfer\": 8, "
                   "\"efficiency\": 0.77}}}",
               "host_memory", "channels_per_socket");
  expect_error(PRE "\"shape\": \"bus\", \"link\": \"pcie5\", \"p2p\": false, \"host_memory\": "
                   "{\"sockets\": 2, \"channels_per_socket\": 8, \"mt_per_s\": 4800, "
                   "\"bytes_per_transfer\": 8, \"efficiency\": 1.5}}}",
               "efficiency", "out of range");
  expect_error(PRE "\"shape\": \"bus\", \"link\": \"pcie5\", \"p2p\": false, \"host_memory\": "
                   "{\"sockets\": 2, \"channels_per_socket\": 7.5, \"mt_per_s\": 4800, "
                   "\"bytes_per_transfer\": 8, \"efficiency\": 0.7}}}",
               "channels_per_socket", "whole number");
  expect_error(PRE "\"shape\": \"bus\", \"link\": \"pcie5\", \"p2p\": false, \"host_memory\": "
                   "{\"sockets\": 2, \"channels_per_socket\": 8, \"mt_per_s\": \"4800\", "
                   "\"bytes_per_transfer\": 8, \"efficiency\": 0.7}}}",
               "mt_per_s", "number");
  expect_error(PRE "\"shape\": \"bus\", \"link\": \"pcie5\", \"p2p\": false, \"host_memory\": {"
                   HM_OK ", \"channels\": 8}}}",
               "unknown field", "\"channels\"");
  expect_error(PRE "\"shape\": \"bus\", \"link\": \"pcie5\", \"p2p\": false, \"host_memory\": {"
                   HM_OK ", \"assumed\": [\"speed\"]}}}",
               "assumed[0]", "speed");
}

Test(model_nop2p, parser_accepts_a_user_file) {
  ulsim_topology_t t;
  cr_assert_eq(ulsim_topology_parse(PRE "\"shape\": \"bus\", \"link\": \"pcie4\", \"p2p\": false, "
                                        "\"host_memory\": {\"sockets\": 1, \"channels_per_socket\": "
                                        "12, \"mt_per_s\": 4800, \"bytes_per_transfer\": 8, "
                                        "\"efficiency\": 0.8}}}",
                                    "user.json", &cat, &t, err, sizeof err),
               UL_OK, "%s", err);
  /* one socket of 12 ch DDR5-4800: 460.8 GB/s x 0.8 / 16 = 23.04 < 23.94 */
  cr_assert_float_eq(bws(&t, 8).ring, 23.04, 1e-9);
  cr_assert_str_eq(t.host_mem.assumed, "");
  /* "p2p": true is the default and needs nothing else */
  cr_assert_eq(ulsim_topology_parse(PRE "\"shape\": \"bus\", \"link\": \"pcie4\", \"p2p\": true}}",
                                    "user.json", &cat, &t, err, sizeof err),
               UL_OK, "%s", err);
  cr_assert_eq(t.no_p2p, 0);
}

/* Found by fuzz.topology: a topology "assumed" sentence holding the list separator was
 * accepted but written back as two entries, one of them empty, which the parser then
 * refused (the round trip broke). Such input is refused at once, with its index; so is a
 * host_memory "assumed" list too long to keep. */
Test(model_nop2p, assumed_lists_round_trip_or_are_refused) {
  const char *sep = "{\"format\": \"unilink-topology/1\", \"name\": \"x\", \"gpus_per_node\": 2,"
                    " \"assumed\": [\"one\", \"two; ; three\"],"
                    " \"intra\": {\"shape\": \"bus\", \"link\": \"pcie5\"}}";
  ulsim_topology_t t;
  cr_assert_eq(ulsim_topology_parse(sep, "sep.json", &cat, &t, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_assert(strstr(err, "sep.json") && strstr(err, "assumed[1]") && strstr(err, "separator"), "%s", err);
  char many[4096];
  int n = snprintf(many, sizeof many,
                   "{\"format\": \"unilink-topology/1\", \"name\": \"x\", \"gpus_per_node\": 2,"
                   " \"intra\": {\"shape\": \"bus\", \"link\": \"pcie5\", \"p2p\": false,"
                   " \"host_memory\": {\"sockets\": 1, \"channels_per_socket\": 8, \"mt_per_s\": 4800,"
                   " \"bytes_per_transfer\": 8, \"efficiency\": 0.77, \"assumed\": [");
  for (int i = 0; i < 60; i++) n += snprintf(many + n, sizeof many - (size_t)n, "%s\"efficiency\"", i ? ", " : "");
  snprintf(many + n, sizeof many - (size_t)n, "]}}}");
  cr_assert_eq(ulsim_topology_parse(many, "many.json", &cat, &t, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_assert(strstr(err, "many.json") && strstr(err, "too long"), "%s", err);
  /* a plain list still reads back as it was */
  const char *ok = "{\"format\": \"unilink-topology/1\", \"name\": \"x\", \"gpus_per_node\": 2,"
                   " \"assumed\": [\"one\", \"two, with a comma\"],"
                   " \"intra\": {\"shape\": \"bus\", \"link\": \"pcie5\"}}";
  cr_assert_eq(ulsim_topology_parse(ok, "ok.json", &cat, &t, err, sizeof err), UL_OK, "%s", err);
  cr_assert_str_eq(t.assumed, "one; two, with a comma");
}
