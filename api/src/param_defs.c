/* The table of every parameter the project ships (param_list.h), with nothing but
 * lookups: the lowest layer, so that the logger can read its defaults without the
 * registry (param.c), which itself logs. */
#include <string.h>

#include "ul_core.h"

static const ul__param_def_t ul__param_defs[UL__P_COUNT] = {
#define UL__PARAM_DEF(n, t, d, o, h) {#n, UL__PARAM_##t, d, o, h},
    UL_PARAM_LIST(UL__PARAM_DEF)
#undef UL__PARAM_DEF
};

const ul__param_def_t *ul__param_def_at(int id) { return &ul__param_defs[id]; }

const ul__param_def_t *ul__param_def_find(const char *key) {
  for (int i = 0; i < UL__P_COUNT; i++)
    if (strcmp(ul__param_defs[i].name, key) == 0) return &ul__param_defs[i];
  return NULL;
}

const char *ul__param_default(ul__param_id_t id) {
  return (id >= 0 && id < UL__P_COUNT) ? ul__param_defs[id].def : "";
}
