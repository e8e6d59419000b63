/* A topology back to JSON (what `unilink-model calibrate` writes): the format
 * ulsim_topology_parse reads, with sources and assumed figures kept. */
#include "ul_model.h"
#include "topology_shape.h"
#include "host_memory.h"
#include "assumed_list.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *sim_catalog_link_json(const ulsim_link_t *l) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", l->name);
  cJSON_AddStringToObject(o, "family", l->family);
  cJSON_AddNumberToObject(o, "generation", l->generation);
  if (l->per_card) {
    cJSON_AddNumberToObject(o, "per_card_gbps", l->card_gbps);
  } else {
    cJSON_AddNumberToObject(o, "per_link_gbps", l->line_gbps);
    if (l->links_per_card) cJSON_AddNumberToObject(o, "links_per_card", l->links_per_card);
  }
  cJSON_AddNumberToObject(o, "efficiency", l->efficiency);
  cJSON_AddNumberToObject(o, "latency_us", l->latency_us);
  cJSON_AddItemToObject(o, "hop_us", cJSON_CreateDoubleArray(l->hop_us, ULSIM_NPROTO));
  if (l->confidence[0]) cJSON_AddStringToObject(o, "confidence", l->confidence);
  cJSON_AddStringToObject(o, "source", l->source[0] ? l->source : "unknown");
  if (l->assumed[0]) cJSON_AddItemToObject(o, "assumed", ulsim__split_list(l->assumed, ", "));
  return o;
}

ul_result_t ulsim_topology_write(const ulsim_topology_t *t, FILE *f) {
  if (!t || !f) return UL_ERR_INVALID_ARG;
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "format", "unilink-topology/1");
  cJSON_AddStringToObject(r, "name", t->name);
  cJSON_AddStringToObject(r, "description", t->description);
  /* sources were joined with "; " when read: split them back */
  cJSON_AddItemToObject(r, "sources", ulsim__split_list(t->sources, "; "));
  cJSON_AddNumberToObject(r, "gpus_per_node", ulsim__node_gpus(t));
  if (t->gpus_per_node != ulsim__node_gpus(t))
    cJSON_AddNumberToObject(r, "ranks_per_node", t->gpus_per_node);
  if (t->assumed[0]) cJSON_AddItemToObject(r, "assumed", ulsim__split_list(t->assumed, "; "));
  cJSON_AddNumberToObject(r, "nodes", t->nodes);
  if (t->calibrated) cJSON_AddNumberToObject(r, "calibrated", 1);
  cJSON *in = cJSON_AddObjectToObject(r, "intra");
  static const char *shapes[] = {"switch", "mesh", "bus"};
  cJSON_AddStringToObject(in, "shape", shapes[t->shape]);
  cJSON_AddItemToObject(in, "link", sim_catalog_link_json(&t->intra));
  cJSON_AddNumberToObject(in, "links_per_gpu", t->links_per_gpu);
  cJSON_AddNumberToObject(in, "links_per_peer", t->links_per_peer);
  if (t->bus_gbps > 0) cJSON_AddNumberToObject(in, "bus_gbps", t->bus_gbps);
  ulsim__host_memory_write(t, in);
  if (t->has_switch) cJSON_AddItemToObject(in, "switch", sim_catalog_link_json(&t->sw));
  if (t->has_nvls) cJSON_AddItemToObject(in, "nvls", sim_catalog_link_json(&t->nvls));
  if (t->has_inter) {
    cJSON *x = cJSON_AddObjectToObject(r, "inter");
    cJSON_AddItemToObject(x, "link", sim_catalog_link_json(&t->inter));
    cJSON_AddNumberToObject(x, "nics_per_node", ulsim__node_nics(t));
  }
  cJSON *tu = cJSON_AddObjectToObject(r, "tuning");
  cJSON_AddNumberToObject(tu, "launch_us", t->launch_us);
  cJSON_AddNumberToObject(tu, "pipeline_bytes", t->pipeline_bytes);
  char *text = cJSON_Print(r);
  cJSON_Delete(r);
  if (!text) return UL_ERR_NO_MEMORY;
  int ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  cJSON_free(text);
  return ok ? UL_OK : UL_ERR_SYSTEM;
}
