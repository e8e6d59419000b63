/* Thread-local last error: the sentence behind the most recent failure of a call
 * made outside a communicator (ul_get_unique_id, ul_backend_query, config checks). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ul_core.h"

#define UL__THREAD_ERROR_LEN 512

static _Thread_local char ul__thread_error[UL__THREAD_ERROR_LEN];

void ul__vformat_error(char *buf, size_t len, const char *fmt, va_list ap) {
  if (buf == NULL || len == 0) return;
  if (fmt == NULL) {
    buf[0] = '\0';
    return;
  }
  int n = vsnprintf(buf, len, fmt, ap);
  if (n < 0) {
    snprintf(buf, len, "(unformattable error message: %s)", fmt);
    return;
  }
  /* Mark truncation so a reader knows the sentence was cut, not wrong. */
  if ((size_t)n >= len && len > 4) memcpy(buf + len - 4, "...", 4);
  /* One line: drop trailing newlines a caller may have added. */
  size_t l = strlen(buf);
  while (l > 0 && (buf[l - 1] == '\n' || buf[l - 1] == '\r')) buf[--l] = '\0';
}

/* Record the sentence and return rc, so callers write `return ul__set_thread_error(...)`.
 * A format of "" clears the last error. errno is preserved for the caller. */
ul_result_t ul__set_thread_error(ul_result_t rc, const char *fmt, ...) {
  int saved_errno = errno;
  va_list ap;
  va_start(ap, fmt);
  ul__vformat_error(ul__thread_error, sizeof ul__thread_error, fmt, ap);
  va_end(ap);
  if (rc != UL_OK && ul__thread_error[0] != '\0')
    UL_TRACE("INIT", "thread error %s: %s", ul_result_name(rc), ul__thread_error);
  errno = saved_errno;
  return rc;
}

const char *ul_last_error(void) { return ul__thread_error; }
