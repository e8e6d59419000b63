/* Thread-local last error: the sentence behind the most recent failure of a call
 * made outside a communicator (ul_get_unique_id, ul_backend_query, config checks). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ul_core.h"

#define UL__THREAD_ERROR_LEN 512

static _Thread_local char ul__thread_error[UL__THREAD_ERROR_LEN];

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
