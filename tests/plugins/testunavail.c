/* A plugin that cannot run here: init says why; its static caps are still queryable. */
#include <stdio.h>
#include <unilink/backend.h>

static ul_result_t testunavail_init(char *reason, size_t len) {
  snprintf(reason, len, "testunavail: no frobnicator device found (error 42)");
  return UL_ERR_UNAVAILABLE;
}

static ul_result_t testunavail_query_caps(ul_backend_caps_t *caps) {
  caps->features = UL_FEATURE_DEVICE_MEMORY | UL_FEATURE_NATIVE_COLL;
  caps->native_colls = 1u << UL_COLL_ALLREDUCE;
  caps->dtypes = 1u << UL_FP16;
  return UL_OK;
}

static const ul_backend_ops_t testunavail_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "testunavail",
    .description = "test plugin: always unavailable",
    .priority = 1000, /* highest, yet never chosen by auto: it is unavailable */
    .init = testunavail_init,
    .query_caps = testunavail_query_caps,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &testunavail_ops;
}
