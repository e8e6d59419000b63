/* Topology parsing of the NVIDIA backends (backends/cuda/gpu_common.c): NVML NVLink
 * version -> generation, link counting and the link description, from given link
 * states (no NVML, no GPU). */
#include <criterion/criterion.h>
#include <string.h>
#include <unilink/unilink.h>

#ifdef UNILINK_HAVE_GPU_COMMON
#include "gpu_common.h"

Test(cuda_topo, nvlink_generation, .timeout = 10) {
  /* NVML enum values decoded when the architecture is unknown */
  cr_assert_eq(ulgpu_nvlink_generation(1, 0, 0), 1);
  cr_assert_eq(ulgpu_nvlink_generation(3, 0, 0), 2); /* 2.2 */
  cr_assert_eq(ulgpu_nvlink_generation(4, 0, 0), 3);
  cr_assert_eq(ulgpu_nvlink_generation(6, 0, 0), 4);
  cr_assert_eq(ulgpu_nvlink_generation(7, 0, 0), 5);
  cr_assert_eq(ulgpu_nvlink_generation(0, 0, 0), 0);
  cr_assert_eq(ulgpu_nvlink_generation(42, 0, 0), 0);
  /* the architecture wins (H100 drivers reporting "5.0" stay NVLink 4) */
  cr_assert_eq(ulgpu_nvlink_generation(7, 9, 0), 4);
  cr_assert_eq(ulgpu_nvlink_generation(0, 8, 0), 3);
  cr_assert_eq(ulgpu_nvlink_generation(0, 7, 0), 2);
  cr_assert_eq(ulgpu_nvlink_generation(0, 10, 0), 5);
  cr_assert_eq(ulgpu_nvlink_generation(4, 8, 9), 3, "sm89 has no NVLink entry: NVML decides");
}

static ulgpu_nvlink_state_t links18[18];

static void fill_switch_links(int n_active) {
  memset(links18, 0, sizeof links18);
  for (int i = 0; i < 18; i++) {
    links18[i].active = i < n_active;
    links18[i].version = 6;
    links18[i].to_switch = 1;
  }
}

Test(cuda_topo, nvswitch_h100, .timeout = 10) {
  fill_switch_links(18);
  ulgpu_pair_facts_t f = {.same_host = 1, .peer_visible = 1, .p2p_access = 1, .sm_major = 9,
                          .links = links18, .nlinks = 18};
  ul_link_info_t li = {.peer = 3};
  ulgpu_describe_pair(&f, &li);
  cr_assert_eq(li.peer, 3);
  cr_assert_eq(li.kind, UL_LINK_NVLINK);
  cr_assert_eq(li.generation, 4);
  cr_assert_eq(li.lanes, 18);
  cr_assert_eq(li.source, UL_SOURCE_DRIVER);
  cr_assert_str_eq(li.description, "nvlink4 x18");
  fill_switch_links(12); /* a degraded GPU with 6 links down */
  ulgpu_describe_pair(&f, &li);
  cr_assert_str_eq(li.description, "nvlink4 x12");
}

Test(cuda_topo, direct_links_count_only_the_peer, .timeout = 10) {
  ulgpu_nvlink_state_t l[6] = {
      {1, 4, 1, 0}, {1, 4, 1, 0}, {1, 4, 0, 0}, {1, 4, 0, 0}, {0, 4, 1, 0}, {1, 4, 1, 0}};
  int gen = -1;
  cr_assert_eq(ulgpu_nvlink_count(l, 6, 8, 0, &gen), 3);
  cr_assert_eq(gen, 3);
  ulgpu_pair_facts_t f = {.same_host = 1, .peer_visible = 1, .sm_major = 8, .links = l,
                          .nlinks = 6};
  ul_link_info_t li = {.peer = 1};
  ulgpu_describe_pair(&f, &li);
  cr_assert_str_eq(li.description, "nvlink3 x3");
}

Test(cuda_topo, pcie_and_others, .timeout = 10) {
  ulgpu_nvlink_state_t none[2] = {{1, 6, 0, 0}, {0, 0, 0, 0}};
  ulgpu_pair_facts_t f = {.same_host = 1, .peer_visible = 1, .p2p_access = 1, .p2p_rank = 0,
                          .sm_major = 8, .links = none, .nlinks = 2};
  ul_link_info_t li = {.peer = 2};
  ulgpu_describe_pair(&f, &li);
  cr_assert_eq(li.kind, UL_LINK_PCIE);
  cr_assert_str_eq(li.description, "pcie p2p (rank 0)");
  f.p2p_access = 0;
  f.links = NULL;
  ulgpu_describe_pair(&f, &li);
  cr_assert_eq(li.kind, UL_LINK_PCIE);
  cr_assert_str_eq(li.description, "pcie (no p2p, staged through host)");
  f.self = 1;
  ulgpu_describe_pair(&f, &li);
  cr_assert_eq(li.kind, UL_LINK_SELF);
  f.self = 0;
  f.same_host = 0;
  ulgpu_describe_pair(&f, &li);
  cr_assert_eq(li.kind, UL_LINK_NETWORK);
  cr_assert_eq(li.source, UL_SOURCE_NONE);
  f.same_host = 1;
  f.peer_visible = 0;
  ulgpu_describe_pair(&f, &li);
  cr_assert_eq(li.kind, UL_LINK_UNKNOWN);
  cr_assert_eq(li.peer, 2);
}
#else
Test(cuda_topo, not_built, .timeout = 10) {
  cr_skip_test("CUDA toolkit not configured: nothing to test");
}
#endif
