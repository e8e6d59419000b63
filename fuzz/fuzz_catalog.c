/* libFuzzer target: ulsim_catalog_parse, the parser of the sim backend's link catalog
 * (data/links.json and user catalogs). Invariants: no crash or leak under ASan; a
 * refusal comes with a message naming the origin; an accepted catalog has at least
 * one link and every link can be found by its name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ul_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  ulsim_catalog_t cat;
  char err[1024] = "";
  ul_result_t rc = ulsim_catalog_parse(text, "fuzz.json", &cat, err, sizeof err);
  if (rc == UL_OK) {
    if (cat.nlinks < 1) abort();
    for (int i = 0; i < cat.nlinks; i++)
      if (ulsim_catalog_find(&cat, cat.links[i].name) != &cat.links[i]) abort();
    ulsim_catalog_free(&cat);
  } else if (strstr(err, "fuzz.json") == NULL) {
    abort(); /* every message points at the file */
  }
  free(text);
  return 0;
}
