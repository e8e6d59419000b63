/* The fixture of the model's tests (test_model_*.c): the default link catalog loaded
 * before each test and freed after, one error buffer, and the loads and refusals they
 * all check. Use: TestSuite(name, .init = model_setup, .fini = model_teardown, ...). */
#ifndef UL_TEST_MODEL_FIXTURE_H
#define UL_TEST_MODEL_FIXTURE_H
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../model/ul_model.h"

static ulsim_catalog_t cat;
static char err[1024];

static inline void model_setup(void) {
  cr_assert_eq(ulsim_catalog_load_default(&cat, err, sizeof err), UL_OK, "%s", err);
}
static inline void model_teardown(void) { ulsim_catalog_free(&cat); }

/* A shipped topology preset, or the test fails with the model's sentence. */
static inline ulsim_topology_t model_topo(const char *name) {
  ulsim_topology_t t;
  cr_assert_eq(ulsim_topology_load(name, &cat, &t, err, sizeof err), UL_OK, "%s", err);
  return t;
}

/* @p json, read as the user file "user.json", is refused with a sentence naming the file
 * and holding needle1 (and needle2 unless NULL), and leaves the output as it was. */
static inline void model_expect_topology_error(const char *json, const char *needle1,
                                               const char *needle2) {
  ulsim_topology_t t;
  memset(&t, 0x5a, sizeof t);
  ulsim_topology_t before = t;
  cr_assert_eq(ulsim_topology_parse(json, "user.json", &cat, &t, err, sizeof err),
               UL_ERR_INVALID_ARG, "accepted: %s", json);
  cr_assert(strstr(err, "user.json"), "no file in: %s", err);
  cr_assert(strstr(err, needle1), "no '%s' in: %s", needle1, err);
  if (needle2) cr_assert(strstr(err, needle2), "no '%s' in: %s", needle2, err);
  cr_assert_eq(memcmp(&t, &before, sizeof t), 0, "output changed on error");
}

/* @p t written to a file (what `unilink-model calibrate` does) and read back into @p u. */
static inline void model_write_read_back(const ulsim_topology_t *t, ulsim_topology_t *u) {
  char path[] = "/tmp/unilink-model-XXXXXX.json";
  int fd = mkstemps(path, 5);
  cr_assert_geq(fd, 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_eq(ulsim_topology_write(t, f), UL_OK);
  fclose(f);
  ul_result_t rc = ulsim_topology_load(path, &cat, u, err, sizeof err);
  unlink(path);
  cr_assert_eq(rc, UL_OK, "%s", err);
}
#endif
