/* Link catalog and topology files: the shipped data parses, and every kind of mistake
 * in a user file is reported with the file, the entry and the field. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_fixture.h"

TestSuite(model_catalog, .init = model_setup, .fini = model_teardown, .timeout = 30);

Test(model_catalog, shipped_catalog_covers_the_issue) {
  const char *want[] = {"nvlink1", "nvlink2", "nvlink3", "nvlink4", "nvlink5", "nvswitch3",
                        "nvls-nvswitch3", "pcie3", "pcie4", "pcie5", "pcie6", "ib-edr", "ib-hdr",
                        "ib-ndr", "ib-xdr", "roce-100", "roce-800", "xgmi-mi250x",
                        "xgmi-mi300x", "xgmi-mi355x", "xelink", "gaudi3-roce", "hccs-910b",
                        "mlu-link", "ualink1", "nvlink-c2c"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const ulsim_link_t *l = ulsim_catalog_find(&cat, want[i]);
    cr_assert_not_null(l, "missing %s", want[i]);
    cr_assert(l->source[0], "%s has no source", want[i]);
    cr_assert(l->confidence[0], "%s has no confidence flag", want[i]);
  }
  const ulsim_link_t *n4 = ulsim_catalog_find(&cat, "nvlink4");
  cr_assert_float_eq(n4->line_gbps, 25.0, 1e-12);
  cr_assert_float_eq(n4->hop_us[ULSIM_SIMPLE], 3.4, 1e-12);
  cr_assert_str_eq(ulsim_catalog_find(&cat, "xelink")->confidence, "low");
  cr_assert_null(ulsim_catalog_find(&cat, "nvlink9"));
}

Test(model_catalog, every_preset_loads) {
  const char *want[] = {"dgx-a100", "dgx-h100", "dgx-h100-nvls", "dgx-b200", "gb200-nvl72",
                        "pcie4-8gpu", "pcie5-8gpu", "pcie6-8gpu", "mi300x-8gpu", "gaudi3-8"};
  char names[64][ULSIM_NAME_MAX];
  int n = ulsim_topology_list(names, 64, err, sizeof err);
  cr_assert_geq(n, 10);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    ulsim_topology_t t;
    cr_assert_eq(ulsim_topology_load(want[i], &cat, &t, err, sizeof err), UL_OK, "%s", err);
    cr_assert_str_eq(t.name, want[i]);
    cr_assert(t.sources[0], "%s has no sources", want[i]);
  }
  for (int i = 0; i < n; i++) {
    ulsim_topology_t t;
    cr_assert_eq(ulsim_topology_load(names[i], &cat, &t, err, sizeof err), UL_OK, "%s", err);
  }
  ulsim_topology_t t;
  cr_assert_eq(ulsim_topology_load("gb200-nvl72", &cat, &t, err, sizeof err), UL_OK);
  cr_assert_eq(t.gpus_per_node, 72);
  cr_assert(t.has_nvls);
}

Test(model_catalog, node_count_suffix) {
  ulsim_topology_t t;
  cr_assert_eq(ulsim_topology_load("dgx-h100x8", &cat, &t, err, sizeof err), UL_OK, "%s", err);
  cr_assert_eq(t.nodes, 8);
  cr_assert_str_eq(t.name, "dgx-h100x8");
  cr_assert_eq(t.nics_per_node, 8);
  cr_assert_eq(ulsim_topology_load("mi300x-8gpux2", &cat, &t, err, sizeof err), UL_OK, "%s", err);
  cr_assert_eq(t.nodes, 2);
  cr_assert_eq(ulsim_topology_load("nosuchx4", &cat, &t, err, sizeof err), UL_ERR_NOT_FOUND);
  cr_assert_eq(ulsim_topology_load("dgx-h100x", &cat, &t, err, sizeof err), UL_ERR_NOT_FOUND);
  cr_assert(strstr(err, "dgx-h100") && strstr(err, "presets"), "%s", err);
  cr_assert_eq(ulsim_topology_load("../etc", &cat, &t, err, sizeof err), UL_ERR_NOT_FOUND);
}

Test(model_catalog, topology_errors_point_at_the_field) {
  model_expect_topology_error("{\"name\": \"x\",", "malformed", NULL);
  model_expect_topology_error("{\"name\": \"x\"}", "gpus_per_node", NULL);
  model_expect_topology_error("{\"name\": \"x\", \"gpus_per_node\": 8}", "intra", NULL);
  model_expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": 8, \"intra\": {\"shape\": \"ring\", \"link\": "
      "\"nvlink4\"}}",
      "shape", "ring");
  model_expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": 8, \"intra\": {\"shape\": \"switch\", \"link\": "
      "\"nvlink9\", \"links_per_gpu\": 4}}",
      "intra.link", "nvlink9");
  model_expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": \"8\", \"intra\": {}}", "gpus_per_node", "number");
  model_expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": 8, \"intra\": {\"shape\": \"switch\", \"link\": "
      "\"nvlink4\", \"links_per_gpu\": 18, \"efficiency\": 7}}",
      "efficiency", "out of range");
  model_expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": 8, \"nodes\": 2, \"intra\": {\"shape\": \"mesh\", "
      "\"link\": \"xgmi-mi300x\"}}",
      "inter", NULL);
  model_expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": 8, \"intra\": {\"shape\": \"switch\", \"link\": "
      "{\"name\": \"custom\", \"family\": \"nvlink\", \"line_gbps\": 10}, \"links_per_gpu\": 2}}",
      "intra.link", "efficiency");
}

Test(model_catalog, catalog_errors_name_entry_and_field) {
  ulsim_catalog_t c2;
  cr_assert_eq(ulsim_catalog_parse("{\"links\": [{\"name\": \"a\", \"family\": \"f\", "
                                   "\"line_gbps\": 1, \"efficiency\": 0.5, \"latency_us\": 1, "
                                   "\"hop_us\": [1,2], \"source\": \"s\"}]}",
                                   "cat.json", &c2, err, sizeof err),
               UL_ERR_INVALID_ARG);
  cr_assert(strstr(err, "cat.json") && strstr(err, "links[0]") && strstr(err, "\"a\"") &&
                strstr(err, "hop_us"),
            "%s", err);
  cr_assert_eq(ulsim_catalog_parse("{\"links\": [{\"name\": \"a\", \"family\": \"f\", "
                                   "\"line_gbps\": 1, \"efficiency\": 0.5, \"latency_us\": 1, "
                                   "\"hop_us\": [1,2,3]}]}",
                                   "cat.json", &c2, err, sizeof err),
               UL_ERR_INVALID_ARG);
  cr_assert(strstr(err, "source"), "%s", err);
  cr_assert_eq(ulsim_catalog_parse("{\"links\": []}", "cat.json", &c2, err, sizeof err),
               UL_ERR_INVALID_ARG);
  cr_assert_eq(ulsim_catalog_parse("[1]", "cat.json", &c2, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_assert_eq(ulsim_catalog_load("/nonexistent/links.json", &c2, err, sizeof err),
               UL_ERR_NOT_FOUND);
  cr_assert(strstr(err, "/nonexistent/links.json"), "%s", err);
}

Test(model_catalog, write_and_read_back_a_user_file) {
  ulsim_topology_t t, u;
  cr_assert_eq(ulsim_topology_load("dgx-h100-nvls", &cat, &t, err, sizeof err), UL_OK);
  t.intra.efficiency = 0.5;
  t.launch_us = 12.5;
  t.calibrated = 1;
  model_write_read_back(&t, &u);
  cr_assert_str_eq(u.name, t.name);
  cr_assert_float_eq(u.intra.efficiency, 0.5, 1e-12);
  cr_assert_float_eq(u.launch_us, 12.5, 1e-12);
  cr_assert_eq(u.calibrated, 1);
  cr_assert(u.has_nvls && u.has_inter && u.has_switch);
  cr_assert_eq(u.links_per_gpu, 18);
  cr_assert_str_eq(u.sources, t.sources);
}

/* ------------------------------------------------ topology parameters (issue 21) */

static ulsim_topology_t load_with(const char *preset, const ulsim_topo_params_t *p) {
  ulsim_topology_t t;
  cr_assert_eq(ulsim_topology_load(preset, &cat, &t, err, sizeof err), UL_OK, "%s", err);
  cr_assert_eq(ulsim_topology_apply(&t, p, &cat, err, sizeof err), UL_OK, "%s: %s", preset, err);
  return t;
}

static double nic_aggregate(const ulsim_topology_t *t) {
  ulsim_bw_t bw;
  cr_assert_eq(ulsim_bandwidths(t, t->gpus_per_node * t->nodes, &bw, err, sizeof err), UL_OK,
               "%s", err);
  return bw.inter;
}

Test(model_catalog, parameters_reshape_a_preset, .timeout = 30) {
  ulsim_topo_params_t p;
  memset(&p, 0, sizeof p);
  /* all zero: the preset unchanged */
  ulsim_topology_t base, t = load_with("dgx-h100", &p);
  cr_assert_eq(ulsim_topology_load("dgx-h100", &cat, &base, err, sizeof err), UL_OK);
  cr_assert_eq(memcmp(&t, &base, sizeof t), 0, "empty parameters changed the preset");

  /* the issue's example: 4 GPUs per node, 4 x 400G, on 2 nodes */
  cr_assert_eq(ulsim_parse_nics("4x400G", &p, err, sizeof err), UL_OK, "%s", err);
  p.gpus_per_node = 4;
  p.nodes = 2;
  t = load_with("dgx-h100", &p);
  cr_assert_eq(t.gpus_per_node, 4);
  cr_assert_eq(t.node_gpus, 4);
  cr_assert_eq(t.nodes, 2);
  cr_assert_eq(t.nics_per_node, 4);
  cr_assert_str_eq(t.inter.name, "ib-ndr");
  cr_assert_float_eq(nic_aggregate(&t), 4 * 50.0 * 0.95, 1e-9);
  ulsim_bw_t bw;
  cr_assert_eq(ulsim_bandwidths(&t, 8, &bw, err, sizeof err), UL_OK);
  cr_assert_eq(bw.ppn, 4);
  cr_assert_eq(bw.nnodes, 2);

  /* GPUs per node alone: NICs keep the preset's ratio (8 per 8 -> 4 per 4), marked assumed */
  memset(&p, 0, sizeof p);
  p.gpus_per_node = 4;
  t = load_with("dgx-h100", &p);
  cr_assert_eq(t.nics_per_node, 4);
  cr_assert(strstr(t.assumed, "nics_per_node 4"), "%s", t.assumed);
  p.gpus_per_node = 1; /* one GPU per node over IB */
  p.nodes = 16;
  t = load_with("dgx-h100", &p);
  cr_assert_eq(t.gpus_per_node, 1);
  cr_assert_eq(t.nics_per_node, 1);
  cr_assert_eq(ulsim_bandwidths(&t, 16, &bw, err, sizeof err), UL_OK);
  cr_assert_eq(bw.nnodes, 16);
  cr_assert_float_eq(bw.inter, 50.0 * 0.95, 1e-9);
  /* pcie4-8gpu has 2 NICs for 8 GPUs: 2 GPUs keep one (rounded up) */
  memset(&p, 0, sizeof p);
  p.gpus_per_node = 2;
  cr_assert_eq(load_with("pcie4-8gpu", &p).nics_per_node, 1);

  /* ranks per node below the GPUs: the node stays 8 GPUs, the ranks use their own NICs */
  memset(&p, 0, sizeof p);
  p.ranks_per_node = 2;
  p.nodes = 4;
  t = load_with("dgx-h100", &p);
  cr_assert_eq(t.node_gpus, 8);
  cr_assert_eq(t.gpus_per_node, 2);
  cr_assert_eq(t.node_nics, 8);
  cr_assert_eq(t.nics_per_node, 2);
  cr_assert_float_eq(nic_aggregate(&t), 2 * 50.0 * 0.95, 1e-9);
  /* on a mesh, fewer ranks use fewer peer links */
  p.nodes = 0;
  p.ranks_per_node = 4;
  t = load_with("mi300x-8gpu", &p);
  cr_assert_eq(ulsim_bandwidths(&t, 4, &bw, err, sizeof err), UL_OK);
  cr_assert_float_eq(bw.ring, 3 * 64.0 * 0.75, 1e-9);

  /* A800/H800: 8 NVLink links instead of 12/18 */
  memset(&p, 0, sizeof p);
  p.nvlink_links = 8;
  t = load_with("dgx-a100", &p);
  cr_assert_eq(t.links_per_gpu, 8);
  cr_assert_eq(ulsim_bandwidths(&t, 8, &bw, err, sizeof err), UL_OK);
  cr_assert_float_eq(bw.ring, 8 * 25.0 * 0.77, 1e-9);
  /* on a mesh the links split over the peers */
  p.nvlink_links = 12;
  t = load_with("a100-pcie-nvbridge-2", &p);
  cr_assert_eq(t.links_per_peer, 12);
  p.nvlink_links = 21;
  cr_assert_eq(load_with("gaudi2-8", &p).links_per_peer, 3);

  /* a NIC kind and speed with no catalog entry: scaled from the family, marked assumed */
  memset(&p, 0, sizeof p);
  cr_assert_eq(ulsim_parse_nics("32x100G:efa", &p, err, sizeof err), UL_OK, "%s", err);
  cr_assert_eq(p.nics, 32);
  cr_assert_float_eq(p.nic_gbps, 12.5, 1e-12);
  cr_assert_str_eq(p.nic_kind, "efa");
  t = load_with("dgx-h100", &p);
  cr_assert_str_eq(t.inter.name, "efa-100");
  cr_assert_float_eq(nic_aggregate(&t), 32 * 12.5 * 0.85, 1e-9);
  cr_assert_eq(ulsim_parse_nics("4x300G:ib", &p, err, sizeof err), UL_OK);
  t = load_with("dgx-h100", &p);
  cr_assert_str_eq(t.inter.name, "infiniband-300G");
  cr_assert_float_eq(t.inter.line_gbps, 37.5, 1e-12);
  cr_assert_str_eq(t.inter.confidence, "low");
  cr_assert(strstr(t.inter.source, "assumed"), "%s", t.inter.source);
}

static void expect_param_error(const char *preset, const ulsim_topo_params_t *p,
                               const char *needle1, const char *needle2) {
  ulsim_topology_t t, before;
  cr_assert_eq(ulsim_topology_load(preset, &cat, &t, err, sizeof err), UL_OK, "%s", err);
  before = t;
  err[0] = 0;
  cr_assert_eq(ulsim_topology_apply(&t, p, &cat, err, sizeof err), UL_ERR_INVALID_ARG,
               "accepted on %s", preset);
  cr_assert(strstr(err, needle1), "no '%s' in: %s", needle1, err);
  if (needle2) cr_assert(strstr(err, needle2), "no '%s' in: %s", needle2, err);
  cr_assert_eq(memcmp(&t, &before, sizeof t), 0, "topology changed on error");
}

Test(model_catalog, bad_parameters_are_refused_with_a_sentence, .timeout = 30) {
  ulsim_topo_params_t p;
  memset(&p, 0, sizeof p);
  p.ranks_per_node = 9;
  expect_param_error("dgx-h100", &p, "--ranks-per-node 9", "8 GPUs");
  memset(&p, 0, sizeof p);
  p.gpus_per_node = 4;
  p.ranks_per_node = 8;
  expect_param_error("dgx-h100", &p, "--ranks-per-node 8", "4 GPUs");
  memset(&p, 0, sizeof p);
  p.nvlink_links = 19;
  expect_param_error("dgx-h100", &p, "at most 18", NULL);
  p.nvlink_links = 8;
  expect_param_error("pcie4-8gpu", &p, "PCIe", "no NVLink");
  expect_param_error("mi300x-8gpu", &p, "do not split evenly", "7 peers");
  memset(&p, 0, sizeof p);
  p.gpus_per_node = 16;
  expect_param_error("mi300x-8gpu", &p, "full mesh", "15 links per GPU");
  memset(&p, 0, sizeof p);
  p.gpus_per_node = -1;
  expect_param_error("dgx-h100", &p, "--gpus-per-node -1", NULL);
  memset(&p, 0, sizeof p);
  p.nodes = 2;
  ulsim_topology_t t;
  cr_assert_eq(ulsim_topology_parse("{\"name\": \"solo\", \"gpus_per_node\": 2, \"intra\": "
                                    "{\"shape\": \"mesh\", \"link\": \"nvlink3\"}}",
                                    "solo.json", &cat, &t, err, sizeof err),
               UL_OK, "%s", err);
  cr_assert_eq(ulsim_topology_apply(&t, &p, &cat, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_assert(strstr(err, "no inter-node fabric"), "%s", err);
  memset(&p, 0, sizeof p);
  snprintf(p.nic_kind, sizeof p.nic_kind, "nvlink4");
  expect_param_error("dgx-h100", &p, "scale-up link, not a NIC", NULL);
  snprintf(p.nic_kind, sizeof p.nic_kind, "pigeon");
  expect_param_error("dgx-h100", &p, "unknown NIC kind 'pigeon'", NULL);
  snprintf(p.nic_kind, sizeof p.nic_kind, "efa");
  expect_param_error("dgx-h100", &p, "needs a speed", NULL);

  /* --nics text */
  static const struct { const char *text, *says; } bad[] = {
      {"0x400G", "NIC count"},     {"4x", "speed"},         {"4x400GB", "not Gb/s"},
      {"x400G", "NIC count"},      {"4x-1G", "speed"},      {"4y400G", "COUNTxSPEED"},
      {"4x400G:", "NIC kind"},     {"99999x1G", "NIC count"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&p, 0, sizeof p);
    err[0] = 0;
    cr_assert_eq(ulsim_parse_nics(bad[i].text, &p, err, sizeof err), UL_ERR_INVALID_ARG,
                 "accepted '%s'", bad[i].text);
    cr_assert(strstr(err, bad[i].says) && strstr(err, bad[i].text), "'%s': %s", bad[i].text, err);
    cr_assert_eq(p.nics, 0, "'%s' half-parsed", bad[i].text);
  }
  /* a topology file asking for more ranks than GPUs */
  model_expect_topology_error("{\"name\": \"x\", \"gpus_per_node\": 4, \"ranks_per_node\": 8, "
                        "\"intra\": {\"shape\": \"switch\", \"link\": \"nvlink4\", "
                        "\"links_per_gpu\": 18}}",
                        "8 ranks per node", "4 GPUs");
}

/* ------------------------------------------------ per-link and per-card figures */

Test(model_catalog, per_card_figures_are_not_multiplied_by_peers, .timeout = 30) {
  /* MLU-Link is published per card (100 GB/s per direction): a 4-card mesh gives each
   * card 100 in total, not 3 x 100 */
  const ulsim_link_t *mlu = ulsim_catalog_find(&cat, "mlu-link");
  cr_assert_not_null(mlu);
  cr_assert_eq(mlu->per_card, 1);
  cr_assert_float_eq(mlu->card_gbps, 100.0, 1e-12);
  ulsim_topology_t t;
  ulsim_bw_t bw;
  cr_assert_eq(ulsim_topology_load("mlu370-x8-4card", &cat, &t, err, sizeof err), UL_OK, "%s", err);
  cr_assert_float_eq(t.intra.line_gbps, 100.0 / 3, 1e-9);
  cr_assert_eq(ulsim_bandwidths(&t, 4, &bw, err, sizeof err), UL_OK);
  cr_assert_float_eq(bw.ring, 100.0 * 0.75, 1e-9);
  cr_assert_float_eq(bw.pair, 100.0 / 3 * 0.75, 1e-9);
  /* a user mesh of 8 of them: still the card's total per GPU */
  cr_assert_eq(ulsim_topology_parse("{\"name\": \"m8\", \"gpus_per_node\": 8, \"intra\": "
                                    "{\"shape\": \"mesh\", \"link\": \"mlu-link\"}}",
                                    "m8.json", &cat, &t, err, sizeof err), UL_OK, "%s", err);
  cr_assert_eq(ulsim_bandwidths(&t, 8, &bw, err, sizeof err), UL_OK);
  cr_assert_float_eq(bw.ring, 100.0 * 0.75, 1e-9);
  /* ub-950 likewise: one switch port carries the per-card total */
  const ulsim_link_t *ub = ulsim_catalog_find(&cat, "ub-950");
  cr_assert_eq(ub->per_card, 1);
  cr_assert_float_eq(ub->card_gbps, 840.0, 1e-12);
  /* a per-link figure does multiply: MI300X 7 peers x 64 x 0.75 */
  cr_assert_eq(ulsim_topology_load("mi300x-8gpu", &cat, &t, err, sizeof err), UL_OK);
  cr_assert_eq(ulsim_bandwidths(&t, 8, &bw, err, sizeof err), UL_OK);
  cr_assert_float_eq(bw.ring, 7 * 64.0 * 0.75, 1e-9);
  /* both given (HCCS 910B: 7 x 28 = 196): the per-link rate, the node checked against 7 */
  const ulsim_link_t *h = ulsim_catalog_find(&cat, "hccs-910b");
  cr_assert_eq(h->per_card, 0);
  cr_assert_eq(h->links_per_card, 7);
  cr_assert_float_eq(h->line_gbps, 28.0, 1e-12);
  cr_assert_float_eq(h->card_gbps, 196.0, 1e-12);
  cr_assert_eq(ulsim_topology_load("ascend910b-8", &cat, &t, err, sizeof err), UL_OK);
  cr_assert_eq(ulsim_bandwidths(&t, 8, &bw, err, sizeof err), UL_OK);
  cr_assert_float_eq(bw.ring, 196.0 * 0.75, 1e-9);
  model_expect_topology_error("{\"name\": \"x\", \"gpus_per_node\": 8, \"intra\": {\"shape\": "
                        "\"mesh\", \"link\": \"hccs-910b\", \"links_per_peer\": 2}}",
                        "14 hccs-910b links", "has 7");
}

static const char *link_entry(const char *bw_fields) {
  static char buf[512];
  snprintf(buf, sizeof buf,
           "{\"links\": [{\"name\": \"a\", \"family\": \"f\", %s, \"efficiency\": 0.5, "
           "\"latency_us\": 1, \"hop_us\": [1,2,3], \"source\": \"s\"}]}",
           bw_fields);
  return buf;
}

Test(model_catalog, bandwidth_fields_are_unit_checked, .timeout = 30) {
  ulsim_catalog_t c2;
  /* strings with units convert; the old line_gbps still reads */
  static const struct { const char *fields; double per_link; int per_card; } good[] = {
      {"\"per_link_gbps\": 25", 25.0, 0},       {"\"line_gbps\": 25", 25.0, 0},
      {"\"per_link_gbps\": \"200 Gb/s\"", 25.0, 0}, {"\"per_link_gbps\": \"25 GB/s\"", 25.0, 0},
      {"\"per_link_gbps\": \"400Gbps\"", 50.0, 0},  {"\"per_card_gbps\": \"1.8 TB/s\"", 1800.0, 1},
      {"\"per_card_gbps\": 96, \"links_per_card\": 4", 24.0, 0},
      {"\"per_link_gbps\": 24, \"per_card_gbps\": 96, \"links_per_card\": 4", 24.0, 0},
      {"\"per_link_gbps\": 25, \"line_gbps\": 25", 25.0, 0}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    cr_assert_eq(ulsim_catalog_parse(link_entry(good[i].fields), "c.json", &c2, err, sizeof err),
                 UL_OK, "%s: %s", good[i].fields, err);
    cr_assert_float_eq(c2.links[0].line_gbps, good[i].per_link, 1e-9, "%s", good[i].fields);
    cr_assert_eq(c2.links[0].per_card, good[i].per_card, "%s", good[i].fields);
    ulsim_catalog_free(&c2);
  }
  static const struct { const char *fields, *says; } bad[] = {
      {"\"per_link_gbps\": \"200\"", "with a unit"},
      {"\"per_link_gbps\": \"200 MB/s\"", "with a unit"},
      {"\"per_link_gbps\": 1800", "out of range"}, /* a per-card total in the per-link field */
      {"\"per_link_gbps\": \"14.4 Tb/s\"", "out of range"},
      {"\"per_link_gbps\": 25, \"line_gbps\": 50", "disagree"},
      {"\"per_link_gbps\": 25, \"per_card_gbps\": 100", "links_per_card"},
      {"\"per_link_gbps\": 25, \"per_card_gbps\": 100, \"links_per_card\": 3", "not per_link_gbps"},
      {"\"links_per_card\": 3", "missing bandwidth"},
      {"\"per_link_gbps\": true", "must be a number"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    cr_assert_eq(ulsim_catalog_parse(link_entry(bad[i].fields), "c.json", &c2, err, sizeof err),
                 UL_ERR_INVALID_ARG, "accepted %s", bad[i].fields);
    cr_assert(strstr(err, bad[i].says) && strstr(err, "links[0]"), "%s: %s", bad[i].fields, err);
  }
  /* assumed names real figures, and an assumed bandwidth cannot be high confidence */
  cr_assert_eq(ulsim_catalog_parse(link_entry("\"per_link_gbps\": 1, \"assumed\": [\"speed\"]"),
                                   "c.json", &c2, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_assert(strstr(err, "assumed[0]") && strstr(err, "speed"), "%s", err);
  /* the sentence says which names would do */
  cr_assert(strstr(err, "per_link_gbps, line_gbps") && strstr(err, "hop_us"), "%s", err);
  cr_assert_eq(ulsim_catalog_parse(link_entry("\"per_link_gbps\": 1, \"assumed\": [3]"),
                                   "c.json", &c2, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_assert(strstr(err, "assumed[0]") && strstr(err, "not a string"), "%s", err);
  cr_assert_eq(ulsim_catalog_parse(link_entry("\"per_link_gbps\": 1, \"confidence\": \"high\", "
                                              "\"assumed\": [\"efficiency\"]"),
                                   "c.json", &c2, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_assert(strstr(err, "high") && strstr(err, "assumed"), "%s", err);
}

/* ------------------------------------------------ the presets the issue names */

Test(model_catalog, new_presets_load_with_sources, .timeout = 30) {
  static const struct { const char *name; int gpus, nics; const char *inter; } want[] = {
      {"a100-pcie-nvbridge-2", 2, 1, "roce-100"}, {"turing-nvbridge-2", 2, 1, "roce-100"},
      {"aws-p4d", 8, 4, "efa-100"},               {"aws-p5", 8, 32, "efa-100"},
      {"mlu370-x8-4card", 4, 2, "roce-100"},      {"gaudi2-8", 8, 24, "roce-100"},
      {"gaudi3-8", 8, 24, "roce-200"},            {"pcie3-8gpu", 8, 1, "roce-100"},
      {"mi355x-8gpu", 8, 8, "roce-400"},          {"slingshot-a100-4", 4, 4, "slingshot-200"},
      {"gh200-quad-slingshot", 4, 4, "slingshot-200"}, {"gcp-a3-mega", 8, 8, "tcpxo-200"},
      {"gcp-a3-high", 8, 4, "tcpx-200"}};
  char names[128][ULSIM_NAME_MAX];
  int n = ulsim_topology_list(names, 128, err, sizeof err);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int listed = 0;
    for (int k = 0; k < n; k++) listed |= !strcmp(names[k], want[i].name);
    cr_assert(listed, "%s not listed by ulsim_topology_list", want[i].name);
    ulsim_topology_t t;
    cr_assert_eq(ulsim_topology_load(want[i].name, &cat, &t, err, sizeof err), UL_OK, "%s", err);
    cr_assert_eq(t.gpus_per_node, want[i].gpus, "%s", want[i].name);
    cr_assert_eq(t.nics_per_node, want[i].nics, "%s", want[i].name);
    cr_assert_str_eq(t.inter.name, want[i].inter, "%s", want[i].name);
    cr_assert(t.sources[0], "%s has no sources", want[i].name);
    /* every link figure it rests on: a source, and a low/medium mark where any bandwidth
     * is assumed (the loader refuses high); a source that says "assumed" must list what */
    const ulsim_link_t *use[] = {&t.intra, t.has_switch ? &t.sw : NULL,
                                 t.has_nvls ? &t.nvls : NULL, &t.inter};
    for (size_t k = 0; k < sizeof use / sizeof use[0]; k++) {
      if (!use[k]) continue;
      cr_assert(use[k]->source[0] && strcmp(use[k]->source, "unknown"), "%s: %s has no source",
                want[i].name, use[k]->name);
      cr_assert(use[k]->confidence[0], "%s: %s has no confidence", want[i].name, use[k]->name);
      if (strcmp(use[k]->confidence, "high"))
        cr_assert(use[k]->assumed[0] || strstr(use[k]->source, "assumed") ||
                      strstr(use[k]->source, "secondary") || strstr(use[k]->source, "NOT"),
                  "%s: %s is %s confidence without saying what is assumed", want[i].name,
                  use[k]->name, use[k]->confidence);
    }
    /* a modeled allreduce on two of them works and is bounded by the hardware */
    ulsim_cost_t c;
    cr_assert_eq(ulsim_cost(&t, UL_COLL_ALLREDUCE, 1 << 30, t.gpus_per_node * 2, NULL, &c, err,
                            sizeof err),
                 UL_OK, "%s: %s", want[i].name, err);
    cr_assert_gt(c.busbw_gbps, 0.0, "%s", want[i].name);
  }
  /* every new link figure: listed as assumed or sourced */
  const char *new_links[] = {"efa-100", "slingshot-200", "tcpxo-200", "tcpx-200"};
  for (size_t i = 0; i < sizeof new_links / sizeof new_links[0]; i++) {
    const ulsim_link_t *l = ulsim_catalog_find(&cat, new_links[i]);
    cr_assert_not_null(l, "%s", new_links[i]);
    cr_assert(strstr(l->assumed, "efficiency") && strstr(l->assumed, "latency_us"), "%s: %s",
              l->name, l->assumed);
    cr_assert_str_neq(l->confidence, "high");
  }
}
