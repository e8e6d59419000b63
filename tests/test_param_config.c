/* Parameter registry, integer parsing and configuration precedence. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ul_core.h"

static char log_path[256];

static void log_to_file(const char *level) {
  snprintf(log_path, sizeof log_path, "/tmp/unilink-test-param-%ld.txt", (long)getpid());
  unlink(log_path);
  setenv("UNILINK_DEBUG_FILE", log_path, 1);
  setenv("UNILINK_DEBUG", level, 1);
  unsetenv("UNILINK_DEBUG_SUBSYS");
  ul__log_reset();
}

static int log_count(const char *needle) {
  FILE *f = fopen(log_path, "r");
  if (f == NULL) return 0;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  int c = 0;
  for (const char *p = buf; (p = strstr(p, needle)) != NULL; p += strlen(needle)) c++;
  return c;
}

static void clean_env(void) {
  unsetenv("UNILINK_BACKEND");
  unsetenv("UNILINK_TIMEOUT_MS");
  unsetenv("UNILINK_CHECK");
  log_to_file("warn");
}
static void fini_env(void) { unlink(log_path); }

TestSuite(parse_int, .init = clean_env, .fini = fini_env);
TestSuite(param, .init = clean_env, .fini = fini_env);
TestSuite(config, .init = clean_env, .fini = fini_env);

/* ---------------------------------------------------------------- parse_int */
static int64_t parse_ok(const char *text) {
  int64_t v = -12345;
  char err[128] = "unset";
  cr_assert_eq(ul__parse_int(text, &v, err, sizeof err), UL_OK, "\"%s\": %s", text, err);
  cr_assert_str_eq(err, "");
  return v;
}

static void parse_bad(const char *text, const char *err_part) {
  int64_t v = 777;
  char err[160] = "";
  cr_assert_eq(ul__parse_int(text, &v, err, sizeof err), UL_ERR_INVALID_ARG, "\"%s\"",
               text ? text : "(null)");
  cr_assert_eq(v, 777, "output changed for \"%s\"", text ? text : "(null)");
  cr_assert_not_null(strstr(err, err_part), "\"%s\": err \"%s\" lacks \"%s\"",
                     text ? text : "(null)", err, err_part);
}

Test(parse_int, decimal, .timeout = 10) {
  cr_assert_eq(parse_ok("0"), 0);
  cr_assert_eq(parse_ok("42"), 42);
  cr_assert_eq(parse_ok("-7"), -7);
  cr_assert_eq(parse_ok("+5"), 5);
  cr_assert_eq(parse_ok("  12\t"), 12);
  cr_assert_eq(parse_ok("007"), 7);
}

Test(parse_int, suffixes, .timeout = 10) {
  cr_assert_eq(parse_ok("4k"), 4096);
  cr_assert_eq(parse_ok("4K"), 4096);
  cr_assert_eq(parse_ok("2M"), 2 * 1048576);
  cr_assert_eq(parse_ok("3m"), 3 * 1048576);
  cr_assert_eq(parse_ok("1g"), 1073741824);
  cr_assert_eq(parse_ok("-2k"), -2048);
  cr_assert_eq(parse_ok("0g"), 0);
}

Test(parse_int, limits_and_overflow, .timeout = 10) {
  cr_assert_eq(parse_ok("9223372036854775807"), INT64_MAX);
  cr_assert_eq(parse_ok("-9223372036854775808"), INT64_MIN);
  cr_assert_eq(parse_ok("-8589934592g"), INT64_MIN); /* -2^33 * 2^30 */
  cr_assert_eq(parse_ok("8589934591g"), INT64_MAX - 1073741823);
  parse_bad("9223372036854775808", "does not fit");
  parse_bad("-9223372036854775809", "does not fit");
  parse_bad("99999999999999999999999", "does not fit");
  parse_bad("8589934592g", "does not fit");
  parse_bad("9007199254740992k", "does not fit");
}

Test(parse_int, garbage_and_empty, .timeout = 10) {
  parse_bad("", "empty");
  parse_bad("   ", "empty");
  parse_bad("12x", "\"12x\" is not an integer");
  parse_bad("abc", "not an integer");
  parse_bad("1kk", "not an integer");
  parse_bad("k", "not an integer");
  parse_bad("-", "not an integer");
  parse_bad("+-1", "not an integer");
  parse_bad("0x10", "not an integer");
  parse_bad("1.5", "not an integer");
  parse_bad("1 2", "not an integer");
  parse_bad(NULL, "no value");
}

Test(parse_int, err_buffer_optional, .timeout = 10) {
  int64_t v = 0;
  cr_assert_eq(ul__parse_int("x", &v, NULL, 0), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul__parse_int("9", &v, NULL, 0), UL_OK);
  cr_assert_eq(v, 9);
}

/* ------------------------------------------------------------------- params */
Test(param, int_reads_env_each_call, .timeout = 10) {
  unsetenv("UNILINK_TEST_P");
  cr_assert_eq(ul__param_int("TEST_P", 17, "a test parameter"), 17);
  setenv("UNILINK_TEST_P", "123", 1);
  cr_assert_eq(ul__param_int("TEST_P", 17, NULL), 123);
  setenv("UNILINK_TEST_P", "2k", 1);
  cr_assert_eq(ul__param_int("UNILINK_TEST_P", 17, NULL), 2048); /* prefix accepted */
  setenv("UNILINK_TEST_P", "", 1);
  cr_assert_eq(ul__param_int("TEST_P", 17, NULL), 17); /* empty = unset */
  cr_assert_eq(log_count("WARN"), 0);
}

Test(param, malformed_warns_once_per_distinct_value, .timeout = 10) {
  setenv("UNILINK_TEST_BAD", "junk", 1);
  for (int i = 0; i < 3; i++) cr_assert_eq(ul__param_int("TEST_BAD", -3, NULL), -3);
  cr_assert_eq(log_count("UNILINK_TEST_BAD=\"junk\""), 1);
  setenv("UNILINK_TEST_BAD", "12q", 1);
  cr_assert_eq(ul__param_int("TEST_BAD", -3, NULL), -3);
  cr_assert_eq(ul__param_int("TEST_BAD", -3, NULL), -3);
  cr_assert_eq(log_count("UNILINK_TEST_BAD=\"12q\""), 1);
  cr_assert_eq(log_count("WARN ENV UNILINK_TEST_BAD"), 2);
  cr_assert_eq(log_count("using the default -3"), 2);
  setenv("UNILINK_TEST_BAD", "junk", 1); /* seen before: no new warning */
  cr_assert_eq(ul__param_int("TEST_BAD", -3, NULL), -3);
  cr_assert_eq(log_count("WARN"), 2);
}

Test(param, str_values_stay_valid, .timeout = 10) {
  unsetenv("UNILINK_TEST_S");
  cr_assert_str_eq(ul__param_str("TEST_S", "dflt", "a string"), "dflt");
  cr_assert_null(ul__param_str("TEST_S2", NULL, NULL));
  setenv("UNILINK_TEST_S", "first", 1);
  const char *a = ul__param_str("TEST_S", "dflt", NULL);
  cr_assert_str_eq(a, "first");
  setenv("UNILINK_TEST_S", "second-value-that-is-longer", 1);
  const char *b = ul__param_str("TEST_S", "dflt", NULL);
  cr_assert_str_eq(b, "second-value-that-is-longer");
  cr_assert_str_eq(a, "first"); /* the earlier pointer still reads its value */
}

Test(param, invalid_names_return_default, .timeout = 10) {
  cr_assert_eq(ul__param_int("lower", 5, NULL), 5);
  cr_assert_eq(ul__param_int(NULL, 6, NULL), 6);
  cr_assert_str_eq(ul__param_str("BAD NAME", "d", NULL), "d");
  cr_assert_eq(log_count("invalid parameter name"), 3);
}

static int find_param(const char *name, ul_param_info_t *out) {
  int n = ul_param_count();
  for (int i = 0; i < n; i++) {
    cr_assert_eq(ul_param_get(i, out), UL_OK);
    if (strcmp(out->name, name) == 0) return i;
  }
  return -1;
}

Test(param, core_parameters_listed_with_help, .timeout = 10) {
  static const char *const core[][2] = {
      {"UNILINK_BACKEND", "auto"},     {"UNILINK_TIMEOUT_MS", "300000"},
      {"UNILINK_CHECK", "0"},          {"UNILINK_DEBUG", "warn"},
      {"UNILINK_DEBUG_SUBSYS", "ALL"}, {"UNILINK_DEBUG_FILE", ""},
      {"UNILINK_PLUGIN_PATH", ""},     {"UNILINK_ALGO", ""},
  };
  ul_param_info_t info;
  for (size_t i = 0; i < sizeof core / sizeof core[0]; i++) {
    cr_assert_geq(find_param(core[i][0], &info), 0, "%s not listed", core[i][0]);
    cr_assert_str_eq(info.default_value, core[i][1], "%s", core[i][0]);
    cr_assert_gt(strlen(info.help), 10, "%s has no help", core[i][0]);
  }
  setenv("UNILINK_TIMEOUT_MS", "1234", 1);
  cr_assert_geq(find_param("UNILINK_TIMEOUT_MS", &info), 0);
  cr_assert_str_eq(info.value, "1234");
  unsetenv("UNILINK_TIMEOUT_MS");
  find_param("UNILINK_TIMEOUT_MS", &info);
  cr_assert_str_eq(info.value, "");
  cr_assert_eq(log_count("WARN"), 0); /* listing never warns */
}

/* param_list.h is the one definition: every entry is listed before any backend reads it,
 * its integer defaults parse, and a caller's own default or help does not count. */
Test(param, table_is_the_one_definition, .timeout = 10) {
  static const struct { const char *name, *type, *def; } table[] = {
#define ROW(n, t, d, o, h) {"UNILINK_" #n, #t, d},
      UL_PARAM_LIST(ROW)
#undef ROW
  };
  ul_param_info_t info;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    int idx = find_param(table[i].name, &info);
    if (strcmp(table[i].name, "UNILINK_FAULT") == 0) { /* only where it is compiled in */
      cr_assert_eq(idx >= 0, ul__test_hooks_built() == 1, "FAULT listing vs test hooks");
      continue;
    }
    cr_assert_geq(idx, 0, "%s not listed", table[i].name);
    cr_assert_str_eq(info.default_value, table[i].def, "%s", table[i].name);
    const char *type = NULL, *owner = NULL;
    cr_assert_eq(ul_param_kind(idx, &type, &owner), UL_OK);
    cr_assert_str_eq(type, strcmp(table[i].type, "INT") == 0 ? "int" : "string");
    cr_assert_neq(strcmp(owner, "other"), 0, "%s has no owner", table[i].name);
    if (strcmp(table[i].type, "INT") == 0) {
      int64_t v;
      cr_assert_eq(ul__parse_int(table[i].def, &v, NULL, 0), UL_OK, "%s", table[i].name);
    }
  }
  /* a caller passing another default gets the table's */
  unsetenv("UNILINK_CHUNK_BYTES");
  cr_assert_eq(ul__param_int("CHUNK_BYTES", 7, "stale help"), 262144);
  cr_assert_eq(ul_backend_param_int("MPI_CHUNK", 5, NULL), 2147483647);
  cr_assert_str_eq(ul_backend_param_str("SIM_TOPOLOGY", "other", NULL), "dgx-h100");
  cr_assert_eq(ul__param_get_int(UL__P_TIMEOUT_MS), 300000);
  cr_assert_eq(ul_param_kind(-1, NULL, NULL), UL_ERR_INVALID_ARG);
}

Test(param, backend_params_are_listed, .timeout = 10) {
  int before = ul_param_count();
  setenv("UNILINK_TESTB_CHUNK", "64k", 1);
  cr_assert_eq(ul_backend_param_int("TESTB_CHUNK", 1024, "chunk size of testb"), 65536);
  cr_assert_str_eq(ul_backend_param_str("TESTB_MODE", "fast", "mode of testb"), "fast");
  cr_assert_eq(ul_param_count(), before + 2);
  /* Registering again adds nothing. */
  cr_assert_eq(ul_backend_param_int("TESTB_CHUNK", 1024, "chunk size of testb"), 65536);
  cr_assert_eq(ul_param_count(), before + 2);
  ul_param_info_t info;
  cr_assert_geq(find_param("UNILINK_TESTB_CHUNK", &info), 0);
  cr_assert_str_eq(info.value, "64k");
  cr_assert_str_eq(info.default_value, "1024");
  cr_assert_str_eq(info.help, "chunk size of testb");
  cr_assert_geq(find_param("UNILINK_TESTB_MODE", &info), 0);
  cr_assert_str_eq(info.default_value, "fast");
}

Test(param, core_parameters_come_first, .timeout = 10) {
  cr_assert_eq(ul_backend_param_int("ZZ_FIRST", 1, "registered before anything else"), 1);
  ul_param_info_t info;
  cr_assert_eq(ul_param_get(0, &info), UL_OK);
  cr_assert_str_eq(info.name, "UNILINK_BACKEND");
  cr_assert_eq(ul_param_get(ul_param_count() - 1, &info), UL_OK);
  cr_assert_str_eq(info.name, "UNILINK_ZZ_FIRST");
}

Test(param, get_rejects_bad_arguments, .timeout = 10) {
  ul_param_info_t info;
  cr_assert_eq(ul_param_get(0, NULL), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_param_get(-1, &info), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_param_get(ul_param_count(), &info), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "out of range"));
}

/* ------------------------------------------------------------------- config */
static const ul__config_t sentinel = {"sentinel", 11, 1, 7, 1, "sentinel-name"};

static void assert_untouched(const ul__config_t *c) {
  cr_assert_eq(memcmp(c, &sentinel, sizeof *c), 0, "output changed on error");
}

Test(config, defaults, .timeout = 10) {
  ul__config_t c = sentinel;
  cr_assert_eq(ul__config_resolve(NULL, &c), UL_OK);
  cr_assert_str_eq(c.backend, "");
  cr_assert_eq(c.timeout_ms, 300000);
  cr_assert_eq(c.check, 0);
  cr_assert_eq(c.device, UL_CONFIG_UNDEF);
  cr_assert_str_eq(c.name, "");
  ul_config_t cfg = UL_CONFIG_INIT;
  c = sentinel;
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_OK);
  cr_assert_str_eq(c.backend, "");
  cr_assert_eq(c.timeout_ms, 300000);
  cr_assert_eq(c.check, 0);
  cr_assert_eq(c.device, UL_CONFIG_UNDEF);
}

Test(config, environment_over_default, .timeout = 10) {
  setenv("UNILINK_BACKEND", "sim:dgx-h100", 1);
  setenv("UNILINK_TIMEOUT_MS", "5000", 1);
  setenv("UNILINK_CHECK", "1", 1);
  ul_config_t cfg = UL_CONFIG_INIT;
  ul__config_t c;
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_OK);
  cr_assert_str_eq(c.backend, "sim:dgx-h100");
  cr_assert_eq(c.timeout_ms, 5000);
  cr_assert_eq(c.check, 1);
  cr_assert_eq(ul__config_resolve(NULL, &c), UL_OK);
  cr_assert_str_eq(c.backend, "sim:dgx-h100");
  cr_assert_eq(c.timeout_ms, 5000);
  cr_assert_eq(c.check, 1);
  setenv("UNILINK_BACKEND", "AUTO", 1);
  cr_assert_eq(ul__config_resolve(NULL, &c), UL_OK);
  cr_assert_str_eq(c.backend, "");
}

Test(config, explicit_over_environment, .timeout = 10) {
  log_to_file("info");
  setenv("UNILINK_BACKEND", "sim", 1);
  setenv("UNILINK_TIMEOUT_MS", "5000", 1);
  setenv("UNILINK_CHECK", "1", 1);
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "host";
  cfg.timeout_ms = 0; /* explicit "forever" beats the environment */
  cfg.check = 0;
  cfg.device = 3;
  cfg.name = "trainer";
  ul__config_t c;
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_OK);
  cr_assert_str_eq(c.backend, "host");
  cr_assert_eq(c.timeout_ms, 0);
  cr_assert_eq(c.check, 0);
  cr_assert_eq(c.device, 3);
  cr_assert_str_eq(c.name, "trainer");
  cr_assert_eq(log_count("UNILINK_BACKEND=sim is ignored"), 1);
  cr_assert_eq(log_count("UNILINK_TIMEOUT_MS=5000 is ignored"), 1);
  cr_assert_eq(log_count("UNILINK_CHECK=1 is ignored"), 1);
  /* Each field on its own: the others still come from the environment. */
  ul_config_t only_timeout = UL_CONFIG_INIT;
  only_timeout.timeout_ms = 250;
  cr_assert_eq(ul__config_resolve(&only_timeout, &c), UL_OK);
  cr_assert_str_eq(c.backend, "sim");
  cr_assert_eq(c.timeout_ms, 250);
  cr_assert_eq(c.check, 1);
  ul_config_t explicit_auto = UL_CONFIG_INIT;
  explicit_auto.backend = "auto";
  cr_assert_eq(ul__config_resolve(&explicit_auto, &c), UL_OK);
  cr_assert_str_eq(c.backend, "");
}

Test(config, rejects_bad_fields, .timeout = 10) {
  ul__config_t c = sentinel;
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = -5;
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "config.timeout_ms is -5"), "%s", ul_last_error());
  assert_untouched(&c);

  cfg = (ul_config_t)UL_CONFIG_INIT;
  cfg.check = 2;
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "config.check is 2"), "%s", ul_last_error());
  assert_untouched(&c);

  cfg = (ul_config_t)UL_CONFIG_INIT;
  cfg.backend = "abcdefghijklmnopqrstuvwxyz012345"; /* 32 characters */
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "config.backend"), "%s", ul_last_error());
  assert_untouched(&c);

  cfg.backend = "abcdefghijklmnopqrstuvwxyz01234"; /* 31 characters: fits */
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_OK);
  cr_assert_str_eq(c.backend, "abcdefghijklmnopqrstuvwxyz01234");

  c = sentinel;
  setenv("UNILINK_BACKEND", "abcdefghijklmnopqrstuvwxyz0123456789", 1);
  cr_assert_eq(ul__config_resolve(NULL, &c), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "UNILINK_BACKEND"), "%s", ul_last_error());
  assert_untouched(&c);

  cr_assert_eq(ul__config_resolve(NULL, NULL), UL_ERR_INVALID_ARG);
}

Test(config, struct_size_bounds, .timeout = 10) {
  ul__config_t c = sentinel;
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.struct_size = 0;
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "struct_size is 0"), "%s", ul_last_error());
  assert_untouched(&c);
  cfg.struct_size = offsetof(ul_config_t, backend) + sizeof(char *) - 1;
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_ERR_INVALID_ARG);
  cfg.struct_size = 64 * 1024 + 1;
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_ERR_INVALID_ARG);
  assert_untouched(&c);
  /* A future, larger struct is fine (only known fields are read). */
  cfg.struct_size = 64 * 1024;
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_OK);
}

Test(config, reads_only_fields_inside_struct_size, .timeout = 10) {
  setenv("UNILINK_CHECK", "1", 1);
  /* An "old" caller whose struct ends after timeout_ms: check/device/name hold
   * garbage that must be ignored. */
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "host";
  cfg.timeout_ms = 77;
  cfg.check = 55;
  cfg.device = 9;
  cfg.name = (const char *)0x1; /* would crash if read */
  cfg.struct_size = offsetof(ul_config_t, check);
  ul__config_t c;
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_OK);
  cr_assert_str_eq(c.backend, "host");
  cr_assert_eq(c.timeout_ms, 77);
  cr_assert_eq(c.check, 1);
  cr_assert_eq(c.device, UL_CONFIG_UNDEF);
  cr_assert_str_eq(c.name, "");
  /* Smallest accepted struct: backend only. */
  cfg.struct_size = offsetof(ul_config_t, backend) + sizeof(char *);
  cr_assert_eq(ul__config_resolve(&cfg, &c), UL_OK);
  cr_assert_str_eq(c.backend, "host");
  cr_assert_eq(c.timeout_ms, 300000);
}

Test(config, malformed_environment_uses_defaults, .timeout = 10) {
  setenv("UNILINK_TIMEOUT_MS", "soon", 1);
  setenv("UNILINK_CHECK", "yes", 1);
  ul__config_t c;
  cr_assert_eq(ul__config_resolve(NULL, &c), UL_OK);
  cr_assert_eq(c.timeout_ms, 300000);
  cr_assert_eq(c.check, 0);
  cr_assert_eq(log_count("UNILINK_TIMEOUT_MS=\"soon\""), 1);
  cr_assert_eq(log_count("UNILINK_CHECK=\"yes\""), 1);
  setenv("UNILINK_TIMEOUT_MS", "-1", 1);
  setenv("UNILINK_CHECK", "2", 1);
  cr_assert_eq(ul__config_resolve(NULL, &c), UL_OK);
  cr_assert_eq(c.timeout_ms, 300000);
  cr_assert_eq(c.check, 0);
  cr_assert_eq(log_count("UNILINK_TIMEOUT_MS=-1 is out of range"), 1);
  cr_assert_eq(log_count("UNILINK_CHECK=2 must be 0 or 1"), 1);
}
