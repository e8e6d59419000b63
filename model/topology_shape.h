/* How a node is built and how ranks sit on it: shared by the topology file parser
 * (catalog.c) and the topology parameters (topology_params.c). Internal to model/. */
#ifndef UL_MODEL_TOPOLOGY_SHAPE_H
#define UL_MODEL_TOPOLOGY_SHAPE_H
#include <stddef.h>
#include "ul_model.h"

int ulsim__node_gpus(const ulsim_topology_t *t);  /* GPUs of the node as built */
int ulsim__node_nics(const ulsim_topology_t *t);  /* NICs of the node as built */
int ulsim__links_used(const ulsim_topology_t *t); /* scale-up links one GPU uses */
/* Per-card scale-up figures divided over the links used; -1 + err when over the card. */
int ulsim__split_card(ulsim_topology_t *t, const char *where, char *err, size_t errlen);
/* Place rpn ranks per node (0: one per GPU); -1 + err when more than GPUs. */
int ulsim__place(ulsim_topology_t *t, int rpn, const char *where, char *err, size_t errlen);
#endif
