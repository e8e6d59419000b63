// UNILINK_TEST_LINK_SHARED
/* Each vendor plugin loads through the public registry (UNILINK_PLUGIN_PATH = build lib/).
 * On a machine without the vendor's driver it is listed unavailable with the vendor's own
 * sentence as the reason, and ul_get_unique_id refuses it; with the device it is
 * available. One checker, one test per plugin. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unilink/unilink.h>

/* Loads plugin `name` and returns its info; skips the test when it was not built. */
static ul_backend_info_t load_plugin(const char *name, const char *needs) {
  char path[1024];
  snprintf(path, sizeof path, "%s/lib/libunilink-%s.so", UNILINK_TEST_BUILD_DIR, name);
  if (access(path, R_OK) != 0) cr_skip_test("%s not built (no %s)", path, needs);
  setenv("UNILINK_PLUGIN_PATH", UNILINK_TEST_BUILD_DIR "/lib", 1);
  ul_backend_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  cr_assert_eq(ul_backend_query(name, &info), UL_OK, "query: %s", ul_last_error());
  cr_assert_str_eq(info.name, name);
  cr_assert_eq(info.plugin, 1);
  char file[64];
  snprintf(file, sizeof file, "libunilink-%s.so", name);
  cr_assert(strstr(info.origin, file) != NULL, "origin %s", info.origin);
  return info;
}

/* Unavailable here: the reason names the vendor call and keeps its raw code. */
static void expect_unavailable(const ul_backend_info_t *info, const char *call,
                               const char *code_mark) {
  cr_assert_eq(info->available, 0);
  cr_assert(strstr(info->reason, call) != NULL, "reason: %s", info->reason);
  cr_assert(strstr(info->reason, code_mark) != NULL, "raw code kept: %s", info->reason);
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id(info->name, &id), UL_ERR_UNAVAILABLE);
  cr_assert(strstr(ul_last_error(), call) != NULL, "last error: %s", ul_last_error());
  const char *a = ul_backend_auto(); /* "auto" never picks an unavailable backend */
  cr_assert(a == NULL || strcmp(a, info->name) != 0, "auto picked %s", a ? a : "(null)");
}

Test(vendor_plugins, cuda, .timeout = 60) {
  ul_backend_info_t info = load_plugin("cuda", "CUDA toolkit");
  cr_assert(info.features & UL_FEATURE_GENERIC_COLL);
  if (info.available) { /* a GPU machine */
    cr_assert_str_eq(info.reason, "");
    return;
  }
  expect_unavailable(&info, "cudaGetDeviceCount", "(code ");
}

Test(vendor_plugins, nccl, .timeout = 60) {
  ul_backend_info_t info = load_plugin("nccl", "CUDA toolkit / NCCL");
  cr_assert(info.features & UL_FEATURE_NATIVE_COLL);
  if (info.available) {
    cr_assert_str_eq(info.reason, "");
    return;
  }
  expect_unavailable(&info, "cudaGetDeviceCount", "(code ");
}

Test(vendor_plugins, ze, .timeout = 60) {
  ul_backend_info_t info = load_plugin("ze", "Level Zero loader");
  cr_assert(strstr(info.description, "staged through host memory (v1)") != NULL, "%s",
            info.description);
  cr_assert(info.features & UL_FEATURE_GENERIC_COLL);
  cr_assert(info.features & UL_FEATURE_DEVICE_MEMORY);
  cr_assert(info.features & UL_FEATURE_INIT_ALL);
  if (getenv("UNILINK_TEST_EXPECT_ZE")) { /* set on an Intel GPU node */
    cr_assert_eq(info.available, 1, "reason: %s", info.reason);
    return;
  }
  if (info.available) {
    cr_assert_str_eq(info.reason, "");
    return;
  }
  expect_unavailable(&info, "zeInit", "(0x");
  cr_assert(strstr(info.reason, "ZE_RESULT_") != NULL, "reason: %s", info.reason);
}
