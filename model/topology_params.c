/* Topology parameters over a preset (GPUs and ranks per node, nodes, NIC count, speed and
 * kind, NVLink link count): what a user changes to describe their own system. Every
 * figure changed without a source is marked assumed. */
#include "ul_model.h"
#include "model_err.h"
#include "topology_shape.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Families a NIC can be; the rest of the catalog is scale-up fabric. */
static const struct {
  const char *alias, *family;
} sim_catalog_nic_families[] = {
    {"ib", "infiniband"},  {"infiniband", "infiniband"}, {"roce", "roce"},
    {"ethernet", "roce"},  {"efa", "efa"},               {"slingshot", "slingshot"},
    {"tcpxo", "tcpxo"},    {"tcpx", "tcpxo"}};

static const char *sim_catalog_nic_family(const char *kind) {
  for (size_t i = 0; i < sizeof sim_catalog_nic_families / sizeof sim_catalog_nic_families[0]; i++)
    if (!strcmp(kind, sim_catalog_nic_families[i].alias)) return sim_catalog_nic_families[i].family;
  return NULL;
}

static int sim_catalog_is_nic(const ulsim_link_t *l) {
  for (size_t i = 0; i < sizeof sim_catalog_nic_families / sizeof sim_catalog_nic_families[0]; i++)
    if (!strcmp(l->family, sim_catalog_nic_families[i].family)) return 1;
  return 0;
}

ul_result_t ulsim_parse_nics(const char *text, ulsim_topo_params_t *p, char *err, size_t errlen) {
  if (!text || !p) return ulsim__err(err, errlen, "--nics: NULL argument");
  const char *usage = "COUNTxSPEED[:KIND] with SPEED in Gb/s, e.g. 4x400G, 32x100G:efa, "
                      "4x200G:slingshot, 1x400G:ib-ndr";
  char buf[128];
  if (strlen(text) >= sizeof buf) return ulsim__err(err, errlen, "--nics: too long (%s)", usage);
  snprintf(buf, sizeof buf, "%s", text);
  char *kind = strchr(buf, ':');
  if (kind) {
    *kind++ = 0;
    if (!*kind || strlen(kind) >= sizeof p->nic_kind)
      return ulsim__err(err, errlen, "--nics '%s': empty or too long NIC kind (%s)", text, usage);
  }
  char *end;
  errno = 0;
  long cnt = strtol(buf, &end, 10);
  if (end == buf || errno || cnt < 1 || cnt > 4096)
    return ulsim__err(err, errlen, "--nics '%s': the NIC count must be a whole number 1..4096 (%s)",
                      text, usage);
  double gbit = 0;
  if (*end == 'x' || *end == 'X') {
    char *num = end + 1;
    gbit = strtod(num, &end);
    if (end == num || !isfinite(gbit) || gbit <= 0 || gbit > 8e4)
      return ulsim__err(err, errlen, "--nics '%s': the speed must be a number of Gb/s in (0, 80000] (%s)",
                        text, usage);
    if (*end && strcmp(end, "G") && strcmp(end, "Gb") && strcmp(end, "Gbps") &&
        strcmp(end, "Gb/s"))
      return ulsim__err(err, errlen,
                        "--nics '%s': unit '%s' is not Gb/s (NIC speeds are bit rates: %s)", text,
                        end, usage);
  } else if (*end) {
    return ulsim__err(err, errlen, "--nics '%s': %s", text, usage);
  }
  p->nics = (int)cnt;
  p->nic_gbps = gbit / 8.0;
  if (kind) snprintf(p->nic_kind, sizeof p->nic_kind, "%s", kind);
  return UL_OK;
}

/* Known NVLink counts per GPU by generation (P100 4, V100 6, A100 12, H100 18, B200 18). */
static int sim_catalog_nvlink_max(const ulsim_link_t *l) {
  static const int max[] = {0, 4, 6, 12, 18, 18};
  if (strcmp(l->family, "nvlink") || l->generation < 1 || l->generation > 5) return 0;
  return max[l->generation];
}

static void sim_catalog_note(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sim_catalog_note(char *buf, size_t len, const char *fmt, ...) {
  size_t n = strlen(buf);
  if (n + 3 >= len) return;
  if (n) {
    snprintf(buf + n, len - n, "; ");
    n += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, len - n, fmt, ap);
  va_end(ap);
}

/* The NIC of a kind and speed: the catalog entry of that name, or of that family at
 * that line rate; else the family's nearest rate, its efficiency and latencies applied
 * to the given rate and marked assumed. */
static int sim_catalog_pick_nic(const ulsim_topology_t *t, const ulsim_topo_params_t *p,
                                const ulsim_catalog_t *cat, ulsim_link_t *out, char *err,
                                size_t errlen) {
  const ulsim_link_t *named = p->nic_kind[0] ? ulsim_catalog_find(cat, p->nic_kind) : NULL;
  const char *family = NULL;
  if (named) {
    if (!sim_catalog_is_nic(named))
      return ulsim__err(err, errlen,
                        "--nics: %s is a %s scale-up link, not a NIC (kinds: ib, roce, efa, "
                        "slingshot, tcpxo or a catalog NIC name)",
                        named->name, named->family);
    if (p->nic_gbps <= 0 || fabs(named->line_gbps - p->nic_gbps) < 1e-9) {
      *out = *named;
      return 0;
    }
    family = named->family;
  } else if (p->nic_kind[0]) {
    family = sim_catalog_nic_family(p->nic_kind);
    if (!family)
      return ulsim__err(err, errlen,
                        "--nics: unknown NIC kind '%s' (kinds: ib, roce, efa, slingshot, tcpxo, "
                        "or a catalog NIC name such as ib-ndr or efa-100)",
                        p->nic_kind);
    if (p->nic_gbps <= 0)
      return ulsim__err(err, errlen, "--nics: NIC kind '%s' needs a speed, e.g. 4x200G:%s",
                        p->nic_kind, p->nic_kind);
  } else {
    *out = t->inter;
    if (p->nic_gbps <= 0) return 0;
    family = t->inter.family;
  }
  const ulsim_link_t *near = named ? named : NULL;
  for (int i = 0; cat && i < cat->nlinks; i++) {
    const ulsim_link_t *l = &cat->links[i];
    if (strcmp(l->family, family) || !sim_catalog_is_nic(l)) continue;
    if (fabs(l->line_gbps - p->nic_gbps) < 1e-9) {
      *out = *l;
      return 0;
    }
    if (!near || fabs(log(l->line_gbps / p->nic_gbps)) < fabs(log(near->line_gbps / p->nic_gbps)))
      near = l;
  }
  if (!near && !strcmp(family, t->inter.family)) near = &t->inter;
  if (!near)
    return ulsim__err(err, errlen, "--nics: the catalog has no %s NIC to base a %g Gb/s one on",
                      family, p->nic_gbps * 8);
  *out = *near;
  /* a new name, so no one reads the base entry's figures as this NIC's */
  snprintf(out->name, sizeof out->name, "%s-%gG", family, p->nic_gbps * 8);
  out->line_gbps = p->nic_gbps;
  out->per_card = 0;
  out->card_gbps = 0;
  out->links_per_card = 0;
  snprintf(out->confidence, sizeof out->confidence, "low");
  snprintf(out->assumed, sizeof out->assumed, "efficiency, latency_us, hop_us");
  char src[ULSIM_SOURCE_MAX];
  snprintf(src, sizeof src,
           "assumed: %s efficiency and latencies applied to a %g Gb/s NIC given as a parameter",
           near->name, p->nic_gbps * 8);
  snprintf(out->source, sizeof out->source, "%s", src);
  return 0;
}

ul_result_t ulsim_topology_apply(ulsim_topology_t *t, const ulsim_topo_params_t *p,
                                 const ulsim_catalog_t *cat, char *err, size_t errlen) {
  if (!t || !p) return ulsim__err(err, errlen, "topology parameters: NULL argument");
  ulsim_topology_t u = *t;
  int g0 = ulsim__node_gpus(t);
  if (p->gpus_per_node < 0 || p->gpus_per_node > 4096)
    return ulsim__err(err, errlen, "--gpus-per-node %d: a whole number 1..4096", p->gpus_per_node);
  if (p->ranks_per_node < 0 || p->ranks_per_node > 4096)
    return ulsim__err(err, errlen, "--ranks-per-node %d: a whole number 1..4096", p->ranks_per_node);
  if (p->nodes < 0 || p->nodes > (1 << 20))
    return ulsim__err(err, errlen, "--nodes %d: a whole number 1..%d", p->nodes, 1 << 20);
  if (p->nics < 0 || p->nics > 4096 || !(p->nic_gbps >= 0) || p->nic_gbps > 1e4)
    return ulsim__err(err, errlen, "--nics: count 1..4096 and a speed in Gb/s");
  if (p->nvlink_links < 0 || p->nvlink_links > 1024)
    return ulsim__err(err, errlen, "--nvlink-links %d: a whole number 1..1024", p->nvlink_links);
  int g = p->gpus_per_node ? p->gpus_per_node : g0;
  char given[256] = "";
  if (g != g0) {
    if (u.shape == ULSIM_SHAPE_MESH && g > g0 && !p->nvlink_links)
      return ulsim__err(err, errlen,
                        "--gpus-per-node %d: %s is a full mesh of point-to-point links (%d per "
                        "peer, %d per GPU); %d GPUs would need %d links per GPU: give "
                        "--nvlink-links too",
                        g, t->name, u.links_per_peer, u.links_per_peer * (g0 - 1), g,
                        u.links_per_peer * (g - 1));
    u.node_gpus = g;
    u.gpus_per_node = g;
    sim_catalog_note(given, sizeof given, "%d GPUs/node", g);
    if (u.has_inter && !p->nics) {
      int n0 = ulsim__node_nics(t);
      u.node_nics = (n0 * g + g0 - 1) / g0;
      if (u.node_nics < 1) u.node_nics = 1;
      u.nics_per_node = u.node_nics;
      sim_catalog_note(u.assumed, sizeof u.assumed,
                       "inter.nics_per_node %d: the preset's %d NICs per %d GPUs scaled to %d "
                       "GPUs",
                       u.node_nics, n0, g0, g);
    }
  }
  if (p->nvlink_links) {
    int n = p->nvlink_links;
    if (u.shape == ULSIM_SHAPE_BUS)
      return ulsim__err(err, errlen,
                        "--nvlink-links %d: %s joins its GPUs over PCIe (no NVLink); use a "
                        "switch or mesh topology such as dgx-a100 or a100-pcie-nvbridge-2",
                        n, t->name);
    int max = sim_catalog_nvlink_max(&u.intra);
    if (max && n > max)
      return ulsim__err(err, errlen,
                        "--nvlink-links %d: %s GPUs have at most %d NVLink links", n,
                        u.intra.name, max);
    if (u.shape == ULSIM_SHAPE_SWITCH) {
      u.links_per_gpu = n;
    } else {
      if (g < 2)
        return ulsim__err(err, errlen,
                          "--nvlink-links %d: a node of one GPU has no scale-up peer", n);
      if (n % (g - 1))
        return ulsim__err(err, errlen,
                          "--nvlink-links %d: %s is a full mesh: %d links do not split evenly "
                          "over %d peers",
                          n, t->name, n, g - 1);
      u.links_per_peer = n / (g - 1);
    }
    if (u.intra.links_per_card && !u.intra.per_card && n > u.intra.links_per_card)
      return ulsim__err(err, errlen, "--nvlink-links %d: a %s card has %d links", n,
                        u.intra.name, u.intra.links_per_card);
    if (u.intra.per_card) u.intra.line_gbps = u.intra.card_gbps / n;
    sim_catalog_note(given, sizeof given, "%d scale-up links/GPU", n);
  }
  if (p->nics || p->nic_gbps > 0 || p->nic_kind[0]) {
    if (!u.has_inter)
      return ulsim__err(err, errlen, "--nics: topology %s has no scale-out fabric", t->name);
    if (sim_catalog_pick_nic(t, p, cat, &u.inter, err, errlen)) return UL_ERR_INVALID_ARG;
    if (p->nics) {
      u.node_nics = p->nics;
      u.nics_per_node = p->nics;
    }
    sim_catalog_note(given, sizeof given, "%d x %s NICs", u.node_nics, u.inter.name);
  }
  if (p->nodes) {
    if (p->nodes > 1 && !u.has_inter)
      return ulsim__err(err, errlen, "--nodes %d: topology %s has no inter-node fabric",
                        p->nodes, t->name);
    u.nodes = p->nodes;
    sim_catalog_note(given, sizeof given, "%d nodes", p->nodes);
  }
  if (p->ranks_per_node && p->ranks_per_node > g)
    return ulsim__err(err, errlen,
                      "--ranks-per-node %d: a node of %s has %d GPUs (one rank per GPU at most)",
                      p->ranks_per_node, t->name, g);
  if (ulsim__place(&u, p->ranks_per_node ? p->ranks_per_node : g, t->name, err, errlen))
    return UL_ERR_INVALID_ARG;
  if (p->ranks_per_node && p->ranks_per_node != g)
    sim_catalog_note(given, sizeof given, "%d ranks/node", p->ranks_per_node);
  if (given[0]) {
    char d[sizeof u.description];
    snprintf(d, sizeof d, "%.180s [given: %.60s]", t->description, given);
    snprintf(u.description, sizeof u.description, "%s", d);
  }
  *t = u;
  return UL_OK;
}
