/* One way for the model's parsers and checks to fail: a sentence in the caller's
 * buffer and UL_ERR_INVALID_ARG (the model only ever refuses its input). */
#ifndef UL_MODEL_ERR_H
#define UL_MODEL_ERR_H
#include <stdarg.h>
#include <stdio.h>
#include "ul_model.h"

static inline ul_result_t ulsim__err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline ul_result_t ulsim__err(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return UL_ERR_INVALID_ARG;
}
#endif
