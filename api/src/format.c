/* Error sentences are formatted here, below both the error record (error.c) and the
 * logger (log.c), which each need it. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ul_core.h"

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
