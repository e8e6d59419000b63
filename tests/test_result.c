/* Result-code table, version string and the thread-local last error. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ul_core.h"

typedef struct {
  ul_result_t code;
  const char *name;
  const char *msg;
} result_row_t;

static const result_row_t rows[] = {
#define ROW(name, value, msg) {name, #name, msg},
    UL_RESULT_MAP(ROW)
#undef ROW
};
#define NROWS (sizeof rows / sizeof rows[0])

Test(result, every_code_has_its_name_and_message, .timeout = 10) {
  cr_assert_eq(NROWS, 17);
  for (size_t i = 0; i < NROWS; i++) {
    cr_assert_str_eq(ul_result_name(rows[i].code), rows[i].name);
    cr_assert_str_eq(ul_result_string(rows[i].code), rows[i].msg);
    cr_assert_neq(strcmp(ul_result_string(rows[i].code), "unknown result code"), 0);
  }
}

Test(result, names_and_messages_are_distinct, .timeout = 10) {
  for (size_t i = 0; i < NROWS; i++)
    for (size_t j = i + 1; j < NROWS; j++) {
      cr_assert_neq(rows[i].code, rows[j].code, "%s and %s share a value", rows[i].name,
                    rows[j].name);
      cr_assert_str_neq(ul_result_name(rows[i].code), ul_result_name(rows[j].code));
      cr_assert_str_neq(ul_result_string(rows[i].code), ul_result_string(rows[j].code));
    }
}

Test(result, fixed_values, .timeout = 10) {
  cr_assert_eq(UL_OK, 0);
  cr_assert_eq(UL_ERR_INVALID_ARG, -1);
  cr_assert_eq(UL_ERR_TIMEOUT, -6);
  cr_assert_eq(UL_ERR_INTERNAL, -14);
  cr_assert_eq(UL_IN_PROGRESS, 1);
  cr_assert_str_eq(ul_result_name(UL_ERR_TIMEOUT), "UL_ERR_TIMEOUT");
  cr_assert_str_eq(ul_result_string(UL_OK), "success");
}

Test(result, unknown_codes, .timeout = 10) {
  const int unknown[] = {-16, -999, 2, 42, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    cr_assert_str_eq(ul_result_name((ul_result_t)unknown[i]), "UL_UNKNOWN_RESULT");
    cr_assert_str_eq(ul_result_string((ul_result_t)unknown[i]), "unknown result code");
  }
}

Test(result, version_string, .timeout = 10) {
  char expect[32];
  snprintf(expect, sizeof expect, "%d.%d.%d", UL_VERSION_MAJOR, UL_VERSION_MINOR,
           UL_VERSION_PATCH);
  cr_assert_str_eq(ul_version_string(), expect);
  cr_assert_str_eq(ul_version_string(), "0.1.0");
}

Test(error, last_error_starts_empty_and_records, .timeout = 10) {
  cr_assert_not_null(ul_last_error());
  cr_assert_str_eq(ul_last_error(), "");
  cr_assert_eq(ul__set_thread_error(UL_ERR_TIMEOUT, "rank %d did not arrive", 3), UL_ERR_TIMEOUT);
  cr_assert_str_eq(ul_last_error(), "rank 3 did not arrive");
  cr_assert_eq(ul__set_thread_error(UL_OK, "%s", ""), UL_OK);
  cr_assert_str_eq(ul_last_error(), "");
}

Test(error, trailing_newlines_dropped_and_truncation_marked, .timeout = 10) {
  ul__set_thread_error(UL_ERR_SYSTEM, "open failed\n");
  cr_assert_str_eq(ul_last_error(), "open failed");
  char big[2000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  ul__set_thread_error(UL_ERR_SYSTEM, "%s", big);
  size_t n = strlen(ul_last_error());
  cr_assert_eq(n, 511);
  cr_assert_str_eq(ul_last_error() + n - 3, "...");
}

static void *other_thread(void *arg) {
  *(const char **)arg = ul_last_error();
  static char copy[64];
  snprintf(copy, sizeof copy, "%s", ul_last_error());
  ul__set_thread_error(UL_ERR_INTERNAL, "from the other thread");
  return copy;
}

Test(error, last_error_is_per_thread, .timeout = 10) {
  ul__set_thread_error(UL_ERR_TIMEOUT, "main thread error");
  const char *seen_ptr = NULL;
  pthread_t t;
  void *seen = NULL;
  cr_assert_eq(pthread_create(&t, NULL, other_thread, &seen_ptr), 0);
  pthread_join(t, &seen);
  cr_assert_str_eq((const char *)seen, "");
  cr_assert_str_eq(ul_last_error(), "main thread error");
}

static void format_into(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ul__vformat_error(buf, len, fmt, ap);
  va_end(ap);
}

Test(error, vformat_handles_small_and_null_buffers, .timeout = 10) {
  char buf[8];
  /* NULL / zero-length destinations must not crash or write. */
  format_into(NULL, 10, "x%d", 1);
  memcpy(buf, "unchang", 8);
  format_into(buf, 0, "x%d", 1);
  cr_assert_str_eq(buf, "unchang");
  format_into(buf, sizeof buf, "%d", 1234567890); /* 10 digits into 8 bytes */
  cr_assert_str_eq(buf, "1234...");
  format_into(buf, sizeof buf, "%d", 42);
  cr_assert_str_eq(buf, "42");
}
