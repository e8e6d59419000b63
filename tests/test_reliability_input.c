/* Reliability, bad input (issue 8): every parser that reads text a user wrote rejects
 * malformed text with a sentence that points at the problem (the variable, the file
 * and line, the entry and field, the option), never crashes on truncated input, and
 * leaves its output untouched. Parsers: UNILINK_* integers (ul__parse_int,
 * ul__param_int), the sim link catalog and topology files, and the command lines of
 * unilink-bench and unilink-conformance. The libFuzzer targets in fuzz/ run the same
 * parsers on generated input; this file pins the messages. See docs/reliability.md. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../model/ul_model.h"
#include "ul_core.h"

/* ============================================================ UNILINK_* ints */

typedef struct bad_int {
  const char *text;
  const char *says; /* part of the message */
} bad_int_t;

Test(bad_input, parse_int_rejects_and_quotes_the_text, .timeout = 10) {
  static const bad_int_t cases[] = {
      {"", "empty"},
      {"   ", "empty"},
      {"12x", "\"12x\" is not an integer"},
      {"0x10", "\"0x10\" is not an integer"},
      {"1.5", "\"1.5\" is not an integer"},
      {"--5", "\"--5\" is not an integer"},
      {"5 5", "\"5 5\" is not an integer"},
      {"1kk", "\"1kk\" is not an integer"},
      {"k", "\"k\" is not an integer"},
      {"9223372036854775808", "does not fit in a 64-bit integer"},
      {"-9223372036854775809", "does not fit in a 64-bit integer"},
      {"8589934592g", "does not fit in a 64-bit integer"},
      {"\xff\xfe", "is not an integer"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t out = 4242;
    char err[160];
    ul_result_t rc = ul__parse_int(cases[i].text, &out, err, sizeof err);
    cr_expect_eq(rc, UL_ERR_INVALID_ARG, "\"%s\" accepted as %lld", cases[i].text,
                 (long long)out);
    cr_expect_eq(out, 4242, "\"%s\": output changed on error", cases[i].text);
    cr_expect(strstr(err, cases[i].says) != NULL, "\"%s\": message \"%s\" lacks \"%s\"",
              cases[i].text, err, cases[i].says);
  }
  /* A very long value is cut in the message, not overflowing it. */
  char longtext[4096];
  memset(longtext, '7', sizeof longtext - 2);
  longtext[sizeof longtext - 2] = 'x';
  longtext[sizeof longtext - 1] = 0;
  char err[64];
  int64_t out = 1;
  cr_expect_eq(ul__parse_int(longtext, &out, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_expect_lt(strlen(err), sizeof err);
}

Test(bad_input, parse_int_edges_accepted, .timeout = 10) {
  static const struct {
    const char *text;
    int64_t want;
  } ok[] = {{"0", 0},
            {" +7 ", 7},
            {"-0", 0},
            {"9223372036854775807", INT64_MAX},
            {"-9223372036854775808", INT64_MIN},
            {"8589934591g", (int64_t)8589934591 << 30},
            {"1k", 1024},
            {"3M", 3 << 20}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    int64_t out = 0;
    char err[160];
    cr_expect_eq(ul__parse_int(ok[i].text, &out, err, sizeof err), UL_OK, "\"%s\": %s",
                 ok[i].text, err);
    cr_expect_eq(out, ok[i].want, "\"%s\" -> %lld", ok[i].text, (long long)out);
  }
}

/* A malformed UNILINK_TIMEOUT_MS is not used: the default stays, and the warning names
 * the variable and quotes the text. */
Test(bad_input, env_int_warning_names_variable_and_text, .timeout = 10) {
  char path[] = "/tmp/ul-reliability-log-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  setenv("UNILINK_DEBUG_FILE", path, 1);
  setenv("UNILINK_DEBUG", "warn", 1);
  ul__log_reset();
  setenv("UNILINK_TIMEOUT_MS", "15s", 1);
  cr_expect_eq(ul__param_int("TIMEOUT_MS", 300000, NULL), 300000);
  ul__config_t cfg;
  cr_expect_eq(ul__config_resolve(NULL, &cfg), UL_OK);
  cr_expect_eq(cfg.timeout_ms, 300000, "malformed env changed the timeout to %d", cfg.timeout_ms);
  unsetenv("UNILINK_DEBUG_FILE");
  ul__log_reset();
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  char log[4096] = "";
  size_t n = fread(log, 1, sizeof log - 1, f);
  log[n] = 0;
  fclose(f);
  unlink(path);
  cr_expect(strstr(log, "UNILINK_TIMEOUT_MS=\"15s\" is invalid") != NULL, "log: %s", log);
  cr_expect(strstr(log, "\"15s\" is not an integer") != NULL, "log: %s", log);
  cr_expect(strstr(log, "default 300000") != NULL, "log: %s", log);
}

/* ===================================================== sim catalog and topology */

static const char *good_catalog =
    "{\"links\": [\n"
    " {\"name\": \"l1\", \"family\": \"f\", \"line_gbps\": 10, \"efficiency\": 0.8,\n"
    "  \"latency_us\": 1, \"hop_us\": [1, 2, 3], \"source\": \"test\"},\n"
    " {\"name\": \"l2\", \"family\": \"f\", \"line_gbps\": 20, \"efficiency\": 0.9,\n"
    "  \"latency_us\": 2, \"hop_us\": [1, 2, 3], \"source\": \"test\"}\n"
    "]}\n";

static const char *good_topology =
    "{\"name\": \"t\", \"gpus_per_node\": 4, \"nodes\": 2,\n"
    " \"intra\": {\"shape\": \"switch\", \"link\": \"l1\", \"links_per_gpu\": 2},\n"
    " \"inter\": {\"link\": \"l2\", \"nics_per_node\": 2}}\n";

static void load_catalog(ulsim_catalog_t *cat) {
  char err[512];
  cr_assert_eq(ulsim_catalog_parse(good_catalog, "cat.json", cat, err, sizeof err), UL_OK, "%s",
               err);
}

Test(bad_input, sim_json_error_points_at_the_line, .timeout = 10) {
  ulsim_catalog_t cat;
  char err[512];
  const char *text = "{\"links\": [\n {\"name\": \"a\",\n  \"family\": ,\n }]}\n";
  cr_expect_eq(ulsim_catalog_parse(text, "mine.json", &cat, err, sizeof err), UL_ERR_INVALID_ARG);
  cr_expect(strstr(err, "mine.json:3: malformed JSON") != NULL, "message: %s", err);
  ulsim_topology_t t;
  load_catalog(&cat);
  cr_expect_eq(ulsim_topology_parse("{\"name\": \"t\",\n\n \"gpus_per_node\": 4 4}", "topo.json",
                                    &cat, &t, err, sizeof err),
               UL_ERR_INVALID_ARG);
  cr_expect(strstr(err, "topo.json:3: malformed JSON") != NULL, "message: %s", err);
  ulsim_catalog_free(&cat);
}

Test(bad_input, sim_catalog_errors_name_entry_and_field, .timeout = 10) {
  static const struct {
    const char *from, *to, *says;
  } edits[] = {
      {"\"line_gbps\": 20", "\"line_gbps\": -20", "links[1] (\"l2\"): field \"line_gbps\" = -20 is out of range"},
      {"\"efficiency\": 0.8", "\"efficiency\": \"high\"", "links[0] (\"l1\"): field \"efficiency\" must be a number"},
      {"\"hop_us\": [1, 2, 3], \"source\": \"test\"},", "\"hop_us\": [1, 2], \"source\": \"test\"},", "links[0] (\"l1\"): field \"hop_us\" must be an array of 3"},
      {"\"name\": \"l2\"", "\"name\": \"l1\"", "links[1] (\"l1\"): duplicate name (also links[0])"},
      {", \"source\": \"test\"}\n]", "}\n]", "links[1] (\"l2\"): missing field \"source\""},
      {"{\"links\": [", "{\"links\": 3, \"x\": [", "field \"links\" must be a non-empty array"},
  };
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    char text[2048];
    const char *at = strstr(good_catalog, edits[i].from);
    cr_assert_not_null(at, "edit %zu does not apply", i);
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good_catalog), good_catalog, edits[i].to,
             at + strlen(edits[i].from));
    ulsim_catalog_t cat;
    char err[512] = "";
    cr_expect_eq(ulsim_catalog_parse(text, "cat.json", &cat, err, sizeof err), UL_ERR_INVALID_ARG,
                 "edit %zu accepted", i);
    cr_expect(strstr(err, edits[i].says) != NULL, "edit %zu: message \"%s\" lacks \"%s\"", i, err,
              edits[i].says);
    cr_expect_eq(cat.links, NULL, "edit %zu: catalog left allocated on error", i);
  }
}

Test(bad_input, sim_topology_errors_name_the_field, .timeout = 10) {
  static const struct {
    const char *from, *to, *says;
  } edits[] = {
      {"\"gpus_per_node\": 4", "\"gpus_per_node\": 0", "field \"gpus_per_node\" = 0 is out of range"},
      {"\"gpus_per_node\": 4", "\"gpus_per_node\": 2.5", "field \"gpus_per_node\" must be an integer"},
      {"\"link\": \"l1\"", "\"link\": \"nvlink99\"", "nvlink99"},
      {"\"shape\": \"switch\"", "\"shape\": \"torus\"", "torus"},
      {"\"name\": \"t\", ", "", "missing field \"name\""},
      {"\"nodes\": 2", "\"nodes\": 1e30", "field \"nodes\""},
  };
  ulsim_catalog_t cat;
  load_catalog(&cat);
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    char text[2048];
    const char *at = strstr(good_topology, edits[i].from);
    cr_assert_not_null(at, "edit %zu does not apply", i);
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good_topology), good_topology, edits[i].to,
             at + strlen(edits[i].from));
    ulsim_topology_t t;
    char err[512] = "";
    cr_expect_eq(ulsim_topology_parse(text, "topo.json", &cat, &t, err, sizeof err),
                 UL_ERR_INVALID_ARG, "edit %zu accepted", i);
    cr_expect(strstr(err, edits[i].says) != NULL, "edit %zu: message \"%s\" lacks \"%s\"", i, err,
              edits[i].says);
    cr_expect(strstr(err, "topo.json") != NULL, "edit %zu: message does not name the file: %s", i,
              err);
  }
  ulsim_topology_t t;
  char err[512];
  cr_expect_eq(ulsim_topology_parse(good_topology, "topo.json", &cat, &t, err, sizeof err), UL_OK,
               "%s", err);
  ulsim_catalog_free(&cat);
}

/* Every truncation of a valid file is either accepted or refused with a message: no
 * crash, no silent failure (what the fuzz targets check at large, in small). */
Test(bad_input, sim_every_prefix_parses_or_says_why, .timeout = 20) {
  ulsim_catalog_t cat;
  load_catalog(&cat);
  size_t len = strlen(good_topology);
  char *buf = malloc(len + 1);
  for (size_t k = 0; k < len; k++) {
    memcpy(buf, good_topology, k);
    buf[k] = 0;
    ulsim_topology_t t;
    char err[512] = "";
    ul_result_t rc = ulsim_topology_parse(buf, "cut.json", &cat, &t, err, sizeof err);
    if (rc != UL_OK) cr_expect(err[0] != 0, "topology prefix %zu refused without a message", k);
  }
  free(buf);
  len = strlen(good_catalog);
  buf = malloc(len + 1);
  for (size_t k = 0; k < len; k++) {
    memcpy(buf, good_catalog, k);
    buf[k] = 0;
    ulsim_catalog_t c2;
    char err[512] = "";
    ul_result_t rc = ulsim_catalog_parse(buf, "cut.json", &c2, err, sizeof err);
    if (rc != UL_OK) cr_expect(err[0] != 0, "catalog prefix %zu refused without a message", k);
    else ulsim_catalog_free(&c2);
  }
  free(buf);
  ulsim_catalog_free(&cat);
}

Test(bad_input, sim_size_parser, .timeout = 10) {
  const char *bad[] = {"", "x", "1Q", "-5", "1e999", "nan", "12 34", "1KiBB"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    double v = 7;
    cr_expect_neq(ulsim_parse_size(bad[i], &v), 0, "\"%s\" accepted as %g", bad[i], v);
  }
  double v = 0;
  cr_expect_eq(ulsim_parse_size("64MiB", &v), 0);
  cr_expect_eq(v, 64.0 * 1024 * 1024);
}

/* ============================================================ command lines */

/* Run a tool of the build with arguments; returns the exit status, stderr in err. */
static int run_tool(const char *tool, const char *args, char *err, size_t errlen) {
  char exe[1024], cmd[2048], errpath[] = "/tmp/ul-reliability-cli-XXXXXX";
  snprintf(exe, sizeof exe, "%s/bin/%s", UNILINK_TEST_BUILD_DIR, tool);
  struct stat st;
  if (stat(exe, &st) != 0) return -2;
  int fd = mkstemp(errpath);
  cr_assert_geq(fd, 0);
  close(fd);
  snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>'%s'", exe, args, errpath);
  int st2 = system(cmd);
  FILE *f = fopen(errpath, "r");
  size_t n = f ? fread(err, 1, errlen - 1, f) : 0;
  err[n] = 0;
  if (f) fclose(f);
  unlink(errpath);
  return WIFEXITED(st2) ? WEXITSTATUS(st2) : -1;
}

typedef struct cli_case {
  const char *args, *says;
  int rc;
} cli_case_t;

static void run_cli_cases(const char *tool, const cli_case_t *cases, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char err[8192];
    int rc = run_tool(tool, cases[i].args, err, sizeof err);
    if (rc == -2) cr_skip_test("%s not built", tool);
    cr_expect_eq(rc, cases[i].rc, "%s %s exited %d: %s", tool, cases[i].args, rc, err);
    cr_expect(strstr(err, cases[i].says) != NULL, "%s %s: stderr lacks \"%s\": %s", tool,
              cases[i].args, cases[i].says, err);
  }
}

Test(bad_input, bench_cli_points_at_the_option, .timeout = 20) {
  static const cli_case_t cases[] = {
      {"-n abc all_reduce", "invalid value 'abc' for iters", 255},
      {"-t 0 all_reduce", "invalid value '0' for nthreads/ranks", 255},
      {"-t 99999999999999999999 all_reduce", "invalid value '99999999999999999999'", 255},
      {"-w -1 all_reduce", "invalid value '-1' for warmup_iters", 255},
      {"-b 1x all_reduce", "'minbytes'", 255},
      {"-e -4 all_reduce", "'maxbytes'", 255},
      {"-i 0 all_reduce", "'stepBytes'", 255},
      {"-d float17 all_reduce", "invalid datatype 'float17'", 255},
      {"-o mulsum all_reduce", "invalid op 'mulsum'", 255},
      {"no_such_collective", "unknown operation 'no_such_collective'", 255},
      {"", "missing operation", 255},
  };
  run_cli_cases("unilink-bench", cases, sizeof cases / sizeof cases[0]);
}

Test(bad_input, conformance_cli_points_at_the_option, .timeout = 20) {
  static const cli_case_t cases[] = {
      {"--ranks 0", "bad --ranks '0'", 2},
      {"--ranks 2,x", "bad --ranks '2,x'", 2},
      {"--ranks 65", "bad --ranks '65'", 2},
      {"--launcher teleport", "unknown launcher 'teleport'", 2},
      {"--seed 12q", "bad --seed '12q'", 2},
      {"--timeout-ms 50", "--timeout-ms", 2},
      {"--mem gpu", "bad --mem 'gpu'", 2},
      {"--no-such-option", "unknown option '--no-such-option'", 2},
      {"--backend", "--backend needs a value", 2},
  };
  run_cli_cases("unilink-conformance", cases, sizeof cases / sizeof cases[0]);
}

/* Values that would wrap around: strtol's result cast to int (4294967396 would become
 * 100) and strtoull's acceptance of "-1". */
Test(bad_input, conformance_cli_rejects_wrapping_numbers, .timeout = 20) {
  static const cli_case_t cases[] = {
      {"--backend host --ranks 2 --list --filter none --timeout-ms 4294967396", "--timeout-ms", 2},
      {"--backend host --ranks 2 --list --filter none --seed -1", "--seed", 2},
  };
  run_cli_cases("unilink-conformance", cases, sizeof cases / sizeof cases[0]);
}
