// UNILINK_TEST_LINK_SHARED
/* The cuda plugin loads through the public registry (UNILINK_PLUGIN_PATH = build lib/)
 * on a machine without a GPU and says why it is unavailable; with a GPU it is available. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unilink/unilink.h>

Test(cuda_plugin, loads_and_reports_availability, .timeout = 60) {
  char path[1024];
  snprintf(path, sizeof path, "%s/lib/libunilink-cuda.so", UNILINK_TEST_BUILD_DIR);
  if (access(path, R_OK) != 0) cr_skip_test("%s not built (no CUDA toolkit%s)", path,
                                            strcmp("cuda", "nccl") ? "" : " / NCCL");
  setenv("UNILINK_PLUGIN_PATH", UNILINK_TEST_BUILD_DIR "/lib", 1);
  ul_backend_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  cr_assert_eq(ul_backend_query("cuda", &info), UL_OK, "query: %s", ul_last_error());
  cr_assert_str_eq(info.name, "cuda");
  cr_assert_eq(info.plugin, 1);
  cr_assert(strstr(info.origin, "libunilink-cuda.so") != NULL, "origin %s", info.origin);
  if (info.available) {
    cr_assert_str_eq(info.reason, "");
    return; /* a GPU machine */
  }
  /* No driver / no GPU: CUDA's own sentence, naming the call that failed. */
  cr_assert_gt(strlen(info.reason), 0);
  cr_assert(strstr(info.reason, "cudaGetDeviceCount") != NULL, "reason: %s", info.reason);
  cr_assert(strstr(info.reason, "(code ") != NULL, "reason: %s", info.reason);
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("cuda", &id), UL_ERR_UNAVAILABLE);
  cr_assert(strstr(ul_last_error(), "cudaGetDeviceCount") != NULL || strlen(ul_last_error()) > 0,
            "last error: %s", ul_last_error());
}
