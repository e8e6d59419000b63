// UNILINK_TEST_LINK_SHARED
/* The ze plugin loads through the public registry (UNILINK_PLUGIN_PATH = build lib/). On
 * a machine without a Level Zero driver it is listed unavailable with zeInit's result as
 * the reason; on an Intel GPU node it is available. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unilink/unilink.h>

Test(ze_plugin, loads_and_reports_availability, .timeout = 60) {
  char path[1024];
  snprintf(path, sizeof path, "%s/lib/libunilink-ze.so", UNILINK_TEST_BUILD_DIR);
  if (access(path, R_OK) != 0) cr_skip_test("%s not built (no Level Zero loader)", path);
  setenv("UNILINK_PLUGIN_PATH", UNILINK_TEST_BUILD_DIR "/lib", 1);
  ul_backend_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  cr_assert_eq(ul_backend_query("ze", &info), UL_OK, "query: %s", ul_last_error());
  cr_assert_str_eq(info.name, "ze");
  cr_assert_eq(info.plugin, 1);
  cr_assert(strstr(info.origin, "libunilink-ze.so") != NULL, "origin %s", info.origin);
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
    return; /* an Intel GPU node */
  }
  cr_assert_eq(info.available, 0);
  cr_assert_gt(strlen(info.reason), 0);
  cr_assert(strstr(info.reason, "zeInit") != NULL, "reason: %s", info.reason);
  cr_assert(strstr(info.reason, "ZE_RESULT_") != NULL, "reason: %s", info.reason);
  cr_assert(strstr(info.reason, "(0x") != NULL, "raw value kept: %s", info.reason);
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("ze", &id), UL_ERR_UNAVAILABLE);
  cr_assert(strstr(ul_last_error(), "zeInit") != NULL, "last error: %s", ul_last_error());
  /* "auto" never picks an unavailable backend */
  const char *a = ul_backend_auto();
  cr_assert(a == NULL || strcmp(a, "ze") != 0, "auto picked %s", a ? a : "(null)");
}
