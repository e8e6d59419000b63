/* libFuzzer target: ul__parse_int, the parser of every UNILINK_* integer.
 * Invariants checked on every input:
 * - accepted text gives a value that, printed in decimal and parsed again, comes back
 *   unchanged (no silent wrap-around);
 * - refused text leaves the output untouched and explains itself (non-empty message
 *   that fits the buffer).
 * param.c is compiled in; the logging and thread-error hooks it calls are stubbed
 * below so the target needs nothing else from the core. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ul_core.h"

void ul__log(ul_log_level_t level, const char *subsys, const char *fmt, ...) {
  (void)level, (void)subsys, (void)fmt;
}
int ul__log_enabled(ul_log_level_t level, const char *subsys) {
  (void)level, (void)subsys;
  return 0;
}
int ul__log_max = UL_LOG_NONE; /* nothing logs */
ul_result_t ul__set_thread_error(ul_result_t rc, const char *fmt, ...) {
  (void)fmt;
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0; /* an embedded NUL ends the text, as getenv() would */
  int64_t v = 0x5a5a5a5a;
  char err[96];
  ul_result_t rc = ul__parse_int(text, &v, err, sizeof err);
  if (rc == UL_OK) {
    char again[32];
    snprintf(again, sizeof again, "%lld", (long long)v);
    int64_t w = 0;
    if (ul__parse_int(again, &w, NULL, 0) != UL_OK || w != v) abort();
  } else {
    if (rc != UL_ERR_INVALID_ARG || v != 0x5a5a5a5a) abort();
    size_t n = strnlen(err, sizeof err);
    if (n == 0 || n >= sizeof err) abort();
  }
  free(text);
  return 0;
}
