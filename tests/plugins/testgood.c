/* A well-formed plugin that fills only a few ops, built against an "older header":
 * its struct_size ends before comm_topology, so the core must stub every later op even
 * though this table's memory holds a non-NULL comm_topology. */
#include <stddef.h>
#include <stdio.h>
#include <unilink/backend.h>

static ul_result_t testgood_init(char *reason, size_t len) { return UL_OK; }

static ul_result_t testgood_query_caps(ul_backend_caps_t *caps) {
  caps->features = UL_FEATURE_THREAD_RANKS | UL_FEATURE_GENERIC_COLL | UL_FEATURE_P2P;
  caps->dtypes = (1u << UL_INT32) | (1u << UL_FP32);
  caps->reduce_dtypes = 1u << UL_FP32;
  caps->ops = (1u << UL_SUM) | (1u << UL_MAX);
  caps->max_ranks = 8;
  snprintf(caps->version, sizeof caps->version, "testgood 1.2.3");
  return UL_OK;
}

static ul_result_t testgood_get_unique_id(unsigned char *payload, size_t bytes) {
  for (size_t i = 0; i < bytes; i++) payload[i] = (unsigned char)(0xA0 + (i & 0x0f));
  return UL_OK;
}

/* Beyond struct_size: the core must never call it. */
static ul_result_t testgood_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  return UL_OK;
}

static const ul_backend_ops_t testgood_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = offsetof(ul_backend_ops_t, comm_topology),
    .name = "testgood",
    .description = "test plugin: few ops, short table",
    .priority = -100,
    .init = testgood_init,
    .query_caps = testgood_query_caps,
    .get_unique_id = testgood_get_unique_id,
    .comm_init = NULL, /* inside struct_size but NULL: stubbed */
    .comm_topology = testgood_comm_topology,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &testgood_ops;
}
