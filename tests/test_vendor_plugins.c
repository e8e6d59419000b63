// UNILINK_TEST_LINK_SHARED
/* Every plugin this build made loads through the public registry (UNILINK_PLUGIN_PATH =
 * build lib/). On a machine without the vendor's driver it is listed unavailable with the
 * vendor's own sentence as the reason, and ul_get_unique_id refuses it; with the device
 * it is available. No plugin is named here: the list and what each must report come from
 * the backends' descriptors (backends/<name>/backend.cmake, CHECK_*), written by CMake to
 * build/generated/plugin_checks.txt as name|features|description text|reason texts. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unilink/unilink.h>

#define CHECKS_FILE UNILINK_TEST_BUILD_DIR "/generated/plugin_checks.txt"

static uint32_t feature_bit(const char *name) {
  static const struct { const char *name; uint32_t bit; } f[] = {
      {"THREAD_RANKS", UL_FEATURE_THREAD_RANKS}, {"PROCESS_RANKS", UL_FEATURE_PROCESS_RANKS},
      {"MULTI_NODE", UL_FEATURE_MULTI_NODE},     {"INIT_ALL", UL_FEATURE_INIT_ALL},
      {"SPLIT", UL_FEATURE_SPLIT},               {"STREAMS", UL_FEATURE_STREAMS},
      {"P2P", UL_FEATURE_P2P},                   {"ONE_SIDED", UL_FEATURE_ONE_SIDED},
      {"DEVICE_MEMORY", UL_FEATURE_DEVICE_MEMORY}, {"GENERIC_COLL", UL_FEATURE_GENERIC_COLL},
      {"NATIVE_COLL", UL_FEATURE_NATIVE_COLL}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (strcmp(f[i].name, name) == 0) return f[i].bit;
  cr_assert_fail("descriptor names unknown feature %s", name);
  return 0;
}

/* One plugin: loaded, named, from its file; its declared features; its reason. */
static void check_plugin(char *name, char *features, const char *desc, char *reasons) {
  char path[1024];
  snprintf(path, sizeof path, "%s/lib/libunilink-%.64s.so", UNILINK_TEST_BUILD_DIR, name);
  cr_assert_eq(access(path, R_OK), 0, "%s registered as a plugin but not built", path);
  ul_backend_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  cr_assert_eq(ul_backend_query(name, &info), UL_OK, "query %s: %s", name, ul_last_error());
  cr_assert_str_eq(info.name, name);
  cr_assert_eq(info.plugin, 1, "%s", name);
  char file[64];
  snprintf(file, sizeof file, "libunilink-%.40s.so", name);
  cr_assert(strstr(info.origin, file) != NULL, "origin %s", info.origin);
  char *save = NULL;
  for (char *f = strtok_r(features, ",", &save); f; f = strtok_r(NULL, ",", &save))
    cr_assert(info.features & feature_bit(f), "%s does not declare %s", name, f);
  if (*desc) cr_assert(strstr(info.description, desc) != NULL, "%s: %s", name, info.description);

  char expect[64];
  snprintf(expect, sizeof expect, "UNILINK_TEST_EXPECT_%.40s", name);
  for (char *p = expect; *p; p++) *p = (char)toupper((unsigned char)*p);
  if (getenv(expect)) { /* set on a node with the device */
    cr_assert_eq(info.available, 1, "%s: reason: %s", name, info.reason);
    return;
  }
  if (info.available) {
    cr_assert_str_eq(info.reason, "", "%s", name);
    return;
  }
  /* Unavailable here: the reason names the vendor call and keeps its raw code. */
  cr_assert(info.reason[0] != 0, "%s unavailable without a reason", name);
  for (char *r = strtok_r(reasons, ";", &save); r; r = strtok_r(NULL, ";", &save))
    cr_assert(strstr(info.reason, r) != NULL, "%s reason lacks '%s': %s", name, r, info.reason);
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id(name, &id), UL_ERR_UNAVAILABLE, "%s", name);
  /* the first reason text (the vendor call, after strtok_r: reasons holds it alone) */
  const char *call = *reasons ? reasons : "";
  cr_assert(ul_last_error()[0] && strstr(ul_last_error(), call) != NULL, "%s: last error: %s",
            name, ul_last_error());
  const char *a = ul_backend_auto(); /* "auto" never picks an unavailable backend */
  cr_assert(a == NULL || strcmp(a, name) != 0, "auto picked %s", a ? a : "(null)");
}

Test(vendor_plugins, every_built_plugin, .timeout = 120) {
  setenv("UNILINK_PLUGIN_PATH", UNILINK_TEST_BUILD_DIR "/lib", 1);
  FILE *f = fopen(CHECKS_FILE, "r");
  cr_assert(f != NULL, "%s missing (written by backends/CMakeLists.txt)", CHECKS_FILE);
  char line[2048];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (!line[0]) continue;
    /* name|features|description|reasons: empty fields kept (no strtok here) */
    char *field[4] = {line, "", "", ""};
    for (int i = 1; i < 4 && field[i - 1]; i++) {
      char *bar = strchr(field[i - 1], '|');
      if (!bar) break;
      *bar = 0;
      field[i] = bar + 1;
    }
    check_plugin(field[0], field[1], field[2], field[3]);
    n++;
  }
  fclose(f);
  if (n == 0) cr_skip_test("no plugin built here");
}
