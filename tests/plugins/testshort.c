/* A plugin whose struct_size does not even cover the table header: must be refused. */
#include <stddef.h>
#include <unilink/backend.h>

static const ul_backend_ops_t testshort_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = offsetof(ul_backend_ops_t, name),
    .name = "testshort",
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &testshort_ops;
}
