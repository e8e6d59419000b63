/* A plugin built for a future backend ABI 2.x: must be refused. */
#include <unilink/backend.h>

static const ul_backend_ops_t testabi_ops = {
    .abi_version = (2u << 16) | 0u,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "testabi",
    .description = "test plugin: wrong ABI major",
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &testabi_ops;
}
