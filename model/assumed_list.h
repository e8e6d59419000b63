/* Lists kept in a fixed buffer joined by a separator (the "assumed" figures of links,
 * host memory and topologies, a topology's sources): read from a JSON array of strings
 * and split back into one when written. Below every parser and writer in model/: it
 * calls none of them. Internal to model/. */
#ifndef UL_MODEL_ASSUMED_LIST_H
#define UL_MODEL_ASSUMED_LIST_H
#include <stddef.h>
#include <cjson/cJSON.h>

/* Read the array @p o["assumed"] into @p out, entries joined by @p sep; absent leaves out
 * as it is. With @p allowed each entry must be one of those nallowed names, else a
 * non-empty string. An entry holding sep, or a list past outlen, would not read back as
 * given: -1 with a sentence naming @p where and the entry's index, out then unspecified. */
int ulsim__assumed_parse(const cJSON *o, char *out, size_t outlen, const char *sep,
                         const char *where, const char *const *allowed, size_t nallowed,
                         char *err, size_t errlen);
/* @p joined split on @p sep into a new JSON array of strings; NULL when out of memory. */
cJSON *ulsim__split_list(const char *joined, const char *sep);
#endif
