/* What this library was built with, for unilink-info and bug reports. The values come
 * from CMake (generated ul_build_info.h), except test_hooks, which the fault.c variant
 * linked into this very library answers, so it cannot disagree with what the code does. */
#include <stddef.h>

#include "ul_build_info.h"
#include "ul_core.h"

static const struct {
  const char *name, *value;
} ul__build_options[] = {
    {"version", UL_BUILD_VERSION},
    {"test_hooks", NULL}, /* from fault.c */
    {"build_type", UL_BUILD_TYPE},
    {"sanitizers", UL_BUILD_SANITIZE},
    {"compiler", UL_BUILD_COMPILER},
    {"builtin_backends", UL_BUILD_BUILTIN},
    {"plugin_backends", UL_BUILD_PLUGINS},
    {"mpi_impl", UL_BUILD_MPI_IMPL},
    {"install_libdir", UL_BUILD_LIBDIR},
};
#define UL__NBUILD ((int)(sizeof ul__build_options / sizeof ul__build_options[0]))

int ul_build_option_count(void) { return UL__NBUILD; }

ul_result_t ul_build_option_get(int index, const char **name, const char **value) {
  if (index < 0 || index >= UL__NBUILD)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_build_option_get: index %d is out of range (0..%d)", index,
                                UL__NBUILD - 1);
  const char *v = ul__build_options[index].value;
  if (v == NULL) v = ul__test_hooks_built() ? "on" : "off";
  if (name) *name = ul__build_options[index].name;
  if (value) *value = v;
  return UL_OK;
}
