/* Node shape and rank placement of a topology (see topology_shape.h). */
#include "topology_shape.h"
#include "model_err.h"

int ulsim__node_gpus(const ulsim_topology_t *t) {
  return t->node_gpus > 0 ? t->node_gpus : t->gpus_per_node;
}
int ulsim__node_nics(const ulsim_topology_t *t) {
  return t->node_nics > 0 ? t->node_nics : t->nics_per_node;
}

/* Scale-up links one GPU of a full node uses. */
int ulsim__links_used(const ulsim_topology_t *t) {
  int g = ulsim__node_gpus(t);
  return t->shape == ULSIM_SHAPE_MESH ? t->links_per_peer * (g > 1 ? g - 1 : 1) : t->links_per_gpu;
}

/* A scale-up figure published per card is the card's total: divide it over the links a
 * GPU of this node uses (a mesh must not multiply it by the peer count). A per-link
 * figure with a known link count per card is checked against what the node uses. */
int ulsim__split_card(ulsim_topology_t *t, const char *where, char *err,
                                  size_t errlen) {
  int used = ulsim__links_used(t);
  if (t->intra.per_card) {
    t->intra.line_gbps = t->intra.card_gbps / (used > 0 ? used : 1);
    return 0;
  }
  if (t->intra.links_per_card && used > t->intra.links_per_card) {
    ulsim__err(err, errlen,
               "%s: a GPU would use %d %s links but the card has %d (links_per_card)", where,
               used, t->intra.name, t->intra.links_per_card);
    return -1;
  }
  return 0;
}

/* Place rpn ranks on each node (0: one per GPU). The cost model reads gpus_per_node as
 * the ranks of a node; the ranks use the NICs nearest their GPUs (NCCL pairs a GPU with
 * its local NIC), so fewer ranks use proportionally fewer NICs (rounded up). */
int ulsim__place(ulsim_topology_t *t, int rpn, const char *where, char *err,
                             size_t errlen) {
  int g = ulsim__node_gpus(t), n = ulsim__node_nics(t);
  if (rpn <= 0) rpn = g;
  if (rpn > g) {
    ulsim__err(err, errlen,
               "%s: %d ranks per node but a node has %d GPUs (one rank per GPU at most)", where,
               rpn, g);
    return -1;
  }
  t->node_gpus = g;
  t->node_nics = n;
  t->gpus_per_node = rpn;
  if (t->has_inter) t->nics_per_node = rpn == g ? n : (n * rpn + g - 1) / g;
  return 0;
}
