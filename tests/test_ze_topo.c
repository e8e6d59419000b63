/* ze backend topology (backends/ze/ze_common.c): link kind, description and the
 * driver-reported bandwidth/latency from given P2P and fabric facts (pure function). */
#include <criterion/criterion.h>
#include <string.h>
#include <unilink/unilink.h>

#ifdef UNILINK_HAVE_ZE_COMMON
#include "ze_common.h"

static ulze_pair_facts_t base(void) {
  ulze_pair_facts_t f;
  memset(&f, 0, sizeof f);
  f.same_host = 1;
  f.peer_visible = 1;
  return f;
}

static ul_link_info_t describe(const ulze_pair_facts_t *f) {
  ul_link_info_t li;
  memset(&li, 0x5a, sizeof li);
  li.peer = 3;
  ulze_describe_pair(f, &li);
  return li;
}

Test(ze_topo, units, .timeout = 10) {
  cr_assert_float_eq(ulze_bandwidth_gbps(53, 1, 0), 53.0, 1e-12);
  cr_assert_float_eq(ulze_bandwidth_gbps(64, 2, 1600), 102.4, 1e-9);
  cr_assert_eq(ulze_bandwidth_gbps(64, 2, 0), 0.0, "per clock without a clock");
  cr_assert_eq(ulze_bandwidth_gbps(64, 0, 1600), 0.0, "unknown unit");
  cr_assert_float_eq(ulze_latency_us(1500, 1, 0), 1.5, 1e-12);
  cr_assert_float_eq(ulze_latency_us(800, 2, 1600), 0.5, 1e-12);
  cr_assert_eq(ulze_latency_us(2, 3, 1600), 0.0, "hops are not a time");
}

Test(ze_topo, self_network_invisible_same_device, .timeout = 10) {
  ulze_pair_facts_t f = base();
  f.self = 1;
  ul_link_info_t li = describe(&f);
  cr_assert_eq(li.peer, 3, "peer kept");
  cr_assert_eq(li.kind, UL_LINK_SELF);
  cr_assert_str_eq(li.description, "self");
  f = base();
  f.same_host = 0;
  li = describe(&f);
  cr_assert_eq(li.kind, UL_LINK_NETWORK);
  cr_assert_eq(li.source, UL_SOURCE_NONE);
  f = base();
  f.peer_visible = 0;
  li = describe(&f);
  cr_assert_eq(li.kind, UL_LINK_UNKNOWN);
  cr_assert(strstr(li.description, "not visible") != NULL, "%s", li.description);
  f = base();
  f.same_device = 1;
  li = describe(&f);
  cr_assert_eq(li.kind, UL_LINK_SELF);
  cr_assert_str_eq(li.description, "same device");
}

Test(ze_topo, xelink_from_fabric_with_p2p_bandwidth, .timeout = 10) {
  ulze_pair_facts_t f = base();
  f.can_access = 1;
  f.p2p_flags = 3;
  f.nedges = 4;
  strcpy(f.edge_model, "XeLink");
  f.edge_bw = 25; f.edge_bw_unit = 1; f.edge_lat = 900; f.edge_lat_unit = 1;
  f.have_p2p_bw = 1;
  f.logical_bw = 80; f.physical_bw = 100; f.bw_unit = 1;
  f.logical_lat = 0; f.physical_lat = 1200; f.lat_unit = 1;
  ul_link_info_t li = describe(&f);
  cr_assert_eq(li.kind, UL_LINK_XELINK);
  cr_assert_str_eq(li.description, "xelink x4");
  cr_assert_eq(li.lanes, 4);
  cr_assert_float_eq(li.bandwidth_gbps, 80.0, 1e-12, "logical figure first");
  cr_assert_float_eq(li.latency_us, 1.2, 1e-12, "physical latency when logical is 0");
  cr_assert_eq(li.source, UL_SOURCE_DRIVER);
  cr_assert_eq(li.generation, 0);
}

Test(ze_topo, xelink_figures_from_edges_only, .timeout = 10) {
  ulze_pair_facts_t f = base();
  f.can_access = 1;
  f.nedges = 2;
  strcpy(f.edge_model, "xe link");
  f.edge_bw = 32; f.edge_bw_unit = 2; f.edge_lat = 1600; f.edge_lat_unit = 2;
  f.clock_mhz = 1600;
  ul_link_info_t li = describe(&f);
  cr_assert_eq(li.kind, UL_LINK_XELINK);
  cr_assert_float_eq(li.bandwidth_gbps, 2 * 51.2, 1e-9, "per-edge figure summed over edges");
  cr_assert_float_eq(li.latency_us, 1.0, 1e-12);
  cr_assert_eq(li.source, UL_SOURCE_DRIVER);
}

Test(ze_topo, pcie_with_and_without_p2p, .timeout = 10) {
  ulze_pair_facts_t f = base();
  f.can_access = 1;
  f.have_p2p_bw = 1;
  f.physical_bw = 28; f.bw_unit = 1; f.lat_unit = 3; f.logical_lat = 2;
  ul_link_info_t li = describe(&f);
  cr_assert_eq(li.kind, UL_LINK_PCIE);
  cr_assert_str_eq(li.description, "pcie p2p");
  cr_assert_float_eq(li.bandwidth_gbps, 28.0, 1e-12);
  cr_assert_eq(li.latency_us, 0.0, "hops give no time");
  cr_assert_eq(li.source, UL_SOURCE_DRIVER);
  f = base();
  li = describe(&f);
  cr_assert_eq(li.kind, UL_LINK_PCIE);
  cr_assert_str_eq(li.description, "pcie (no p2p)");
  cr_assert_eq(li.source, UL_SOURCE_NONE, "nothing reported");
  cr_assert_eq(li.bandwidth_gbps, 0.0);
  f = base();
  f.p2p_flags = 1; /* access flag from zeDeviceGetP2PProperties alone */
  li = describe(&f);
  cr_assert_str_eq(li.description, "pcie p2p");
  f = base();
  f.nedges = 1;
  strcpy(f.edge_model, "unknown");
  li = describe(&f);
  cr_assert_eq(li.kind, UL_LINK_PCIE, "an edge of unknown technology is not Xe Link");
}

Test(ze_topo, tiles_of_one_card, .timeout = 10) {
  ulze_pair_facts_t f = base();
  f.can_access = 1;
  f.sibling_tiles = 1;
  ul_link_info_t li = describe(&f);
  cr_assert_eq(li.kind, UL_LINK_XELINK);
  cr_assert_str_eq(li.description, "mdfi (tiles of one card)");
  f = base();
  f.nedges = 1;
  strcpy(f.edge_model, "MDFI");
  li = describe(&f);
  cr_assert_str_eq(li.description, "mdfi (tiles of one card)");
}
#else
Test(ze_topo, not_built, .timeout = 10) { cr_skip_test("ze helpers not configured: nothing to test"); }
#endif
