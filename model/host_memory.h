/* The "p2p" flag and "host_memory" section of a bus (PCIe) node: read by the topology
 * parser (catalog.c), written back by topology_write.c. Internal to model/. */
#ifndef UL_MODEL_HOST_MEMORY_H
#define UL_MODEL_HOST_MEMORY_H
#include <stddef.h>
#include <cjson/cJSON.h>
#include "ul_model.h"

/* Read "p2p" and "host_memory" of the topology's "intra" object into t (t->shape already
 * set). -1 with a sentence naming @p where and the field on bad input. */
int ulsim__host_memory_parse(const cJSON *intra, ulsim_topology_t *t, const char *where, char *err,
                             size_t errlen);
/* Add "p2p" and "host_memory" to @p intra when t has no P2P. */
void ulsim__host_memory_write(const ulsim_topology_t *t, cJSON *intra);
#endif
