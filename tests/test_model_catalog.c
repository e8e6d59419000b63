/* Link catalog and topology files: the shipped data parses, and every kind of mistake
 * in a user file is reported with the file, the entry and the field. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../model/ul_model.h"

static ulsim_catalog_t cat;
static char err[1024];

static void setup(void) {
  cr_assert_eq(ulsim_catalog_load_default(&cat, err, sizeof err), UL_OK, "%s", err);
}
static void teardown(void) { ulsim_catalog_free(&cat); }

TestSuite(model_catalog, .init = setup, .fini = teardown, .timeout = 30);

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

static void expect_topology_error(const char *json, const char *needle1, const char *needle2) {
  ulsim_topology_t t;
  memset(&t, 0x5a, sizeof t);
  ulsim_topology_t before = t;
  cr_assert_eq(ulsim_topology_parse(json, "user.json", &cat, &t, err, sizeof err),
               UL_ERR_INVALID_ARG, "accepted: %s", json);
  cr_assert(strstr(err, "user.json"), "no file in: %s", err);
  cr_assert(strstr(err, needle1), "no '%s' in: %s", needle1, err);
  if (needle2) cr_assert(strstr(err, needle2), "no '%s' in: %s", needle2, err);
  cr_assert_eq(memcmp(&t, &before, sizeof t), 0, "output changed on error");
}

Test(model_catalog, topology_errors_point_at_the_field) {
  expect_topology_error("{\"name\": \"x\",", "malformed", NULL);
  expect_topology_error("{\"name\": \"x\"}", "gpus_per_node", NULL);
  expect_topology_error("{\"name\": \"x\", \"gpus_per_node\": 8}", "intra", NULL);
  expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": 8, \"intra\": {\"shape\": \"ring\", \"link\": "
      "\"nvlink4\"}}",
      "shape", "ring");
  expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": 8, \"intra\": {\"shape\": \"switch\", \"link\": "
      "\"nvlink9\", \"links_per_gpu\": 4}}",
      "intra.link", "nvlink9");
  expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": \"8\", \"intra\": {}}", "gpus_per_node", "number");
  expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": 8, \"intra\": {\"shape\": \"switch\", \"link\": "
      "\"nvlink4\", \"links_per_gpu\": 18, \"efficiency\": 7}}",
      "efficiency", "out of range");
  expect_topology_error(
      "{\"name\": \"x\", \"gpus_per_node\": 8, \"nodes\": 2, \"intra\": {\"shape\": \"mesh\", "
      "\"link\": \"xgmi-mi300x\"}}",
      "inter", NULL);
  expect_topology_error(
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
  char path[] = "/tmp/unilink-topo-XXXXXX.json";
  int fd = mkstemps(path, 5);
  cr_assert_geq(fd, 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_eq(ulsim_topology_write(&t, f), UL_OK);
  fclose(f);
  cr_assert_eq(ulsim_topology_load(path, &cat, &u, err, sizeof err), UL_OK, "%s", err);
  unlink(path);
  cr_assert_str_eq(u.name, t.name);
  cr_assert_float_eq(u.intra.efficiency, 0.5, 1e-12);
  cr_assert_float_eq(u.launch_us, 12.5, 1e-12);
  cr_assert_eq(u.calibrated, 1);
  cr_assert(u.has_nvls && u.has_inter && u.has_switch);
  cr_assert_eq(u.links_per_gpu, 18);
  cr_assert_str_eq(u.sources, t.sources);
}
