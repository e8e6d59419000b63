/* Joined lists of the model's files: see assumed_list.h. */
#include "assumed_list.h"
#include "model_err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "a, b, c" from the allowed names, for the sentence that refuses another one. */
static void al_names(const char *const *allowed, size_t n, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", allowed[i]);
}

int ulsim__assumed_parse(const cJSON *o, char *out, size_t outlen, const char *sep,
                         const char *where, const char *const *allowed, size_t nallowed,
                         char *err, size_t errlen) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "assumed");
  if (!a) return 0;
  if (!cJSON_IsArray(a)) {
    ulsim__err(err, errlen, "%s: field \"assumed\" must be an array of field names", where);
    return -1;
  }
  out[0] = 0;
  const cJSON *e;
  int k = 0;
  cJSON_ArrayForEach(e, a) {
    const char *s = cJSON_IsString(e) ? e->valuestring : NULL;
    int ok = s && *s;
    if (ok && allowed) {
      ok = 0;
      for (size_t i = 0; i < nallowed; i++) ok |= !strcmp(s, allowed[i]);
    }
    if (!ok) {
      char names[256];
      if (allowed) al_names(allowed, nallowed, names, sizeof names);
      ulsim__err(err, errlen, "%s: assumed[%d] must %s%s (got %s%s%s)", where, k,
                 allowed ? "name one of the fields " : "be a non-empty sentence",
                 allowed ? names : "", s ? "\"" : "a value that is not a string", s ? s : "",
                 s ? "\"" : "");
      return -1;
    }
    /* The entries are kept joined by sep (and split on it when written back): an entry
     * holding sep, or a list past the room, would not come back as it was given. */
    size_t len = strlen(out);
    int holds_sep = strstr(s, sep) != NULL;
    if (holds_sep || len + (len ? strlen(sep) : 0) + strlen(s) >= outlen) {
      ulsim__err(err, errlen, "%s: assumed[%d] %s", where, k,
                 holds_sep ? "holds the list separator; give each sentence as its own entry"
                 : allowed ? "makes the list too long (name each field once)"
                           : "makes the list too long for the topology");
      return -1;
    }
    snprintf(out + len, outlen - len, "%s%s", len ? sep : "", s);
    k++;
  }
  return 0;
}

cJSON *ulsim__split_list(const char *joined, const char *sep) {
  cJSON *a = cJSON_CreateArray();
  size_t sl = strlen(sep);
  char *buf = a ? malloc(strlen(joined) + 1) : NULL;
  if (!buf) {
    cJSON_Delete(a);
    return NULL;
  }
  strcpy(buf, joined);
  for (char *s = buf, *next; s && *s; s = next) {
    next = sl ? strstr(s, sep) : NULL;
    if (next) {
      *next = 0;
      next += sl;
    }
    cJSON_AddItemToArray(a, cJSON_CreateString(s));
  }
  free(buf);
  return a;
}
