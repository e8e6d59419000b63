/* libFuzzer target: ulsim_topology_parse, the parser of sim topology files (presets
 * in data/topologies and user files), against the shipped link catalog.
 * Invariants: no crash or leak under ASan; a refusal names the origin; an accepted
 * topology has sane counts and survives a round trip through ulsim_topology_write
 * (what `unilink-model calibrate` does with it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ul_model.h"

static ulsim_catalog_t cat;
static int have_cat;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!have_cat) {
    char err[1024];
    if (ulsim_catalog_load_default(&cat, err, sizeof err) != UL_OK) {
      fprintf(stderr, "fuzz_topology: no link catalog: %s (set UNILINK_DATA_DIR)\n", err);
      abort();
    }
    have_cat = 1;
  }
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  ulsim_topology_t t;
  char err[1024] = "";
  ul_result_t rc = ulsim_topology_parse(text, "fuzz.json", &cat, &t, err, sizeof err);
  if (rc == UL_OK) {
    if (t.gpus_per_node < 1 || t.nodes < 1) abort();
    char *out = NULL;
    size_t outlen = 0;
    FILE *f = open_memstream(&out, &outlen);
    if (f) {
      ul_result_t wrc = ulsim_topology_write(&t, f);
      fclose(f);
      if (wrc == UL_OK) {
        ulsim_topology_t back;
        char err2[1024] = "";
        if (ulsim_topology_parse(out, "roundtrip.json", &cat, &back, err2, sizeof err2) != UL_OK) {
          fprintf(stderr, "round trip refused: %s\n%s\n", err2, out);
          abort();
        }
        if (back.gpus_per_node != t.gpus_per_node || back.nodes != t.nodes) abort();
      }
      free(out);
    }
  } else if (strstr(err, "fuzz.json") == NULL) {
    abort();
  }
  free(text);
  return 0;
}
