/* The alpha-beta cost model: for a collective on a topology, the time of every
 * candidate algorithm x protocol, and the cheapest. Formulas are the standard ones
 * (Thakur, Rabenseifner, Gropp 2005; nccl-tests' bus-bandwidth factors) with NCCL's
 * published latency constants; docs/model.md derives each term. Units: microseconds,
 * GB/s (1 GB/s = 1000 bytes per microsecond), bytes. */
#include "ul_model.h"
#include "model_err.h"
#include "tuner.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>


/* NCCL base latencies per collective launch (us), [LL, LL128, Simple]
 * (src/graph/tuning.cc baseLatencies, 2.30.7). */
static const double sim_cost_base_ring[ULSIM_NPROTO] = {6.6, 14.0, 8.4};
static const double sim_cost_base_tree[ULSIM_NPROTO] = {6.8, 14.0, 8.4};
/* Bandwidth left by each protocol: LL carries 4 data bytes per 8-byte store, LL128 120
 * of 128 bytes per line (NCCL's 0.92), Simple all of it. */
static const double sim_cost_proto_bw[ULSIM_NPROTO] = {0.5, 0.92, 1.0};
/* NCCL's tree allreduce discount (tuning.cc: x0.92 on the tree's bus bandwidth). */
#define SIM_COST_TREE_EFF 0.92
/* NVLS pipeline fill: fitted to the NVLS curve of Azure ND H100 v5 (docs/model.md). */
#define SIM_COST_NVLS_FILL_RATIO 0.35
#define SIM_COST_NVLS_FILL_CAP_US 60.0
/* NVLS needs more than 4 GPUs to help ("partitions that have less than or equal to four
 * GPUs will not benefit from multicast", GB200 NVL partition guide). */
#define SIM_COST_NVLS_MIN_RANKS 5

const char *ulsim_proto_name(ulsim_proto_t p) {
  switch (p) {
    case ULSIM_LL: return "LL";
    case ULSIM_LL128: return "LL128";
    case ULSIM_SIMPLE: return "Simple";
    default: return "?";
  }
}

double ulsim_bus_factor(ul_coll_t coll, int n) {
  if (n < 1) return 0;
  switch (coll) {
    case UL_COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case UL_COLL_REDUCE_SCATTER:
    case UL_COLL_ALLGATHER:
    case UL_COLL_ALLGATHERV:
    case UL_COLL_ALLTOALL:
    case UL_COLL_ALLTOALLV:
    case UL_COLL_GATHER:
    case UL_COLL_SCATTER: return (double)(n - 1) / n;
    case UL_COLL_BROADCAST:
    case UL_COLL_REDUCE:
    case UL_COLL_SENDRECV: return 1.0;
    default: return 0.0;
  }
}

double ulsim_size_from_call_bytes(ul_coll_t coll, double call_bytes, int n) {
  switch (coll) {
    case UL_COLL_ALLGATHER:
    case UL_COLL_ALLGATHERV:
    case UL_COLL_REDUCE_SCATTER:
    case UL_COLL_ALLTOALL:
    case UL_COLL_ALLTOALLV:
    case UL_COLL_GATHER:
    case UL_COLL_SCATTER: return call_bytes * n;
    default: return call_bytes;
  }
}

int ulsim_parse_size(const char *text, double *bytes) {
  if (!text || !*text || !bytes) return -1;
  char *end;
  double v = strtod(text, &end);
  if (end == text || !isfinite(v) || v < 0) return -1;
  double mult = 1;
  if (*end) {
    char suf[8];
    size_t n = strlen(end);
    if (n >= sizeof suf) return -1;
    for (size_t i = 0; i <= n; i++) suf[i] = (char)toupper((unsigned char)end[i]);
    char c = suf[0];
    const char *rest = suf + 1;
    if (c == 'B' && !*rest) mult = 1;
    else {
      if (c == 'K') mult = 1024.0;
      else if (c == 'M') mult = 1024.0 * 1024;
      else if (c == 'G') mult = 1024.0 * 1024 * 1024;
      else if (c == 'T') mult = 1024.0 * 1024 * 1024 * 1024;
      else return -1;
      if (*rest && strcmp(rest, "B") && strcmp(rest, "IB")) return -1;
    }
  }
  *bytes = v * mult;
  return 0;
}

static int sim_cost_ll128_ok(const ulsim_topology_t *t) {
  /* NCCL enables LL128 on NVLink-class fabrics only; treat the other load/store
   * scale-up links alike, and PCIe/Ethernet meshes without it. */
  const char *f = t->intra.family;
  return !strcmp(f, "nvlink") || !strcmp(f, "nvswitch") || !strcmp(f, "xgmi") ||
         !strcmp(f, "ualink") || !strcmp(f, "hccs") || !strcmp(f, "xelink") ||
         !strcmp(f, "mlu-link");
}

ul_result_t ulsim_bandwidths(const ulsim_topology_t *t, int nranks, ulsim_bw_t *bw, char *err,
                             size_t errlen) {
  if (!t || !bw) return ulsim__err(err, errlen, "model: NULL argument");
  if (nranks < 1) return ulsim__err(err, errlen, "model: %d ranks (need >= 1)", nranks);
  memset(bw, 0, sizeof *bw);
  bw->nranks = nranks;
  bw->ppn = nranks < t->gpus_per_node ? nranks : t->gpus_per_node;
  bw->nnodes = (nranks + bw->ppn - 1) / bw->ppn;
  if (bw->nnodes > 1 && !t->has_inter)
    return ulsim__err(err, errlen,
                        "topology \"%s\" has %d GPUs and no inter-node fabric: cannot place %d "
                        "ranks",
                        t->name, t->gpus_per_node, nranks);
  double L = t->intra.line_gbps * t->intra.efficiency;
  int g = bw->ppn;
  switch (t->shape) {
    case ULSIM_SHAPE_SWITCH:
      bw->ring = bw->pair = bw->inject = t->links_per_gpu * L;
      break;
    case ULSIM_SHAPE_MESH:
      /* A pair owns links_per_peer links; rings and direct algorithms spread over the
       * g-1 peers' links at once (several rings in different orders). */
      bw->pair = t->links_per_peer * L;
      bw->ring = bw->inject = (g > 1 ? g - 1 : 1) * bw->pair;
      break;
    case ULSIM_SHAPE_BUS:
      bw->ring = bw->pair = bw->inject = t->links_per_gpu * L;
      if (t->bus_gbps > 0 && t->bus_gbps < bw->ring) bw->ring = bw->pair = bw->inject = t->bus_gbps;
      bw->bus_ring = bw->ring;
      /* Without P2P every byte a GPU sends is written to host DRAM and read back by its
       * peer (NCCL SHM transport), and all g GPUs send at once: DRAM carries 2 g x B. */
      if (t->no_p2p) {
        bw->host_cap = ulsim_host_memory_gbps(&t->host_mem) * t->host_mem.efficiency / (2.0 * g);
        if (bw->host_cap < bw->ring) bw->ring = bw->pair = bw->inject = bw->host_cap;
      }
      break;
  }
  if (t->has_nvls && g >= SIM_COST_NVLS_MIN_RANKS)
    bw->nvls_alg = t->links_per_gpu * t->nvls.line_gbps * t->nvls.efficiency;
  for (int p = 0; p < ULSIM_NPROTO; p++) bw->hop_intra[p] = t->intra.hop_us[p];
  if (t->has_inter) {
    bw->inter = t->nics_per_node * t->inter.line_gbps * t->inter.efficiency;
    for (int p = 0; p < ULSIM_NPROTO; p++)
      bw->hop_inter[p] = t->inter.hop_us[p] + t->inter.latency_us;
  }
  return UL_OK;
}

/* ---------------------------------------------------------------- candidates */

/* Bytes per microsecond of a GB/s figure. */
static double sim_cost_bpus(double gbps) { return gbps * 1e3; }

typedef struct sim_cost_ctx {
  const ulsim_topology_t *t;
  const ulsim_bw_t *bw;
  double S;
  const char *force;
  ulsim_cost_t *out;
} sim_cost_ctx_t;

static int sim_cost_allowed(const char *force, const char *algo) {
  if (!force || !*force) return 1;
  size_t n = strlen(algo);
  for (const char *p = force; *p;) {
    const char *c = strchr(p, ',');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len == n && !strncmp(p, algo, n)) return 1;
    if (!c) break;
    p = c + 1;
  }
  return 0;
}

static void sim_cost_add(sim_cost_ctx_t *x, const char *algo, ulsim_proto_t proto, double us) {
  if (!sim_cost_allowed(x->force, algo) || !(us >= 0) || x->out->ncand >= ULSIM_MAX_CAND) return;
  ulsim_candidate_t *c = &x->out->cand[x->out->ncand++];
  memset(c, 0, sizeof *c);
  snprintf(c->algorithm, sizeof c->algorithm, "%s", algo);
  c->proto = proto;
  c->time_us = us;
  c->select_us = us;
}

/* Algorithms no library runs on that system by itself (direct/two-shot LL on NVSwitch,
 * a 3-phase hierarchical allreduce): computed only when forced, as a diagnostic. */
static void sim_cost_add_diag(sim_cost_ctx_t *x, const char *algo, ulsim_proto_t proto,
                              double us) {
  if (x->force && *x->force) sim_cost_add(x, algo, proto, us);
}

/* A tuner candidate: ranked on the library's own estimate (launch + latency + S over
 * the all-channel bandwidth), timed as the run it launches (launch + latency + fill + S
 * over the bandwidth of the channels it uses at S). */
static void sim_cost_add_tuned(void *ctx, const ulsim_tuner_cand_t *t) {
  sim_cost_ctx_t *x = ctx;
  if (!(t->algbw > 0) || !(t->run_algbw > 0)) return;
  double lat = x->t->launch_us + t->lat_us + t->run_extra_us;
  int before = x->out->ncand;
  sim_cost_add(x, t->algo, (ulsim_proto_t)t->proto, lat + x->S / sim_cost_bpus(t->run_algbw));
  if (x->out->ncand > before) {
    ulsim_candidate_t *c = &x->out->cand[before];
    c->lat_us = lat;
    c->algbw_gbps = t->run_algbw;
    c->select_us = x->t->launch_us + t->lat_us + x->S / sim_cost_bpus(t->algbw);
    c->select_algbw_gbps = t->algbw;
    c->nchannels = t->nchannels;
    c->nthreads = t->nthreads;
    c->chunk_bytes = t->chunk_bytes;
    c->formula = t->formula;
  }
}


/* Pipeline fill of an algorithm of nsteps store-and-forward steps: a chunked pipeline
 * spends nsteps chunk-times filling. Chunks are S/(ranks) until they reach the
 * topology's pipeline_bytes, so the fill equals the bandwidth term for mid sizes and
 * caps at nsteps x pipeline_bytes / B for large ones. */
static double sim_cost_fill(const ulsim_topology_t *t, double tbw, int nsteps, double bw_gbps) {
  double cap = nsteps * t->pipeline_bytes / sim_cost_bpus(bw_gbps);
  return tbw < cap ? tbw : cap;
}

static double sim_cost_alpha(const sim_cost_ctx_t *x, const double *base, int proto,
                             double hops_intra, double hops_inter) {
  return x->t->launch_us + base[proto] + hops_intra * x->bw->hop_intra[proto] +
         hops_inter * x->bw->hop_inter[proto];
}

static int sim_cost_log2ceil(int n) {
  int k = 0;
  while ((1 << k) < n) k++;
  return k;
}

static void sim_cost_protos(const sim_cost_ctx_t *x, int *protos, int *np) {
  *np = 0;
  protos[(*np)++] = ULSIM_LL;
  if (sim_cost_ll128_ok(x->t)) protos[(*np)++] = ULSIM_LL128;
  protos[(*np)++] = ULSIM_SIMPLE;
}

/* Bus bandwidth of a ring spanning all ranks: the slower of the node's ring and the
 * node's NICs (every ring crosses each node boundary once per channel). */
static double sim_cost_ring_bw(const ulsim_bw_t *bw) {
  if (bw->nnodes > 1 && bw->inter < bw->ring) return bw->inter;
  return bw->ring;
}

static void sim_cost_allreduce(sim_cost_ctx_t *x) {
  const ulsim_bw_t *bw = x->bw;
  const ulsim_topology_t *t = x->t;
  int p = bw->nranks, g = bw->ppn, k = bw->nnodes;
  double S = x->S;
  int protos[3], np;
  sim_cost_protos(x, protos, &np);
  if (p == 1) {
    sim_cost_add(x, "local", ULSIM_SIMPLE, t->launch_us);
    return;
  }
  /* The library's own tuner first; the older alpha-beta candidates below stay as forced
   * diagnostics only. */
  ulsim_tuner_allreduce(t, bw, S, sim_cost_add_tuned, x);
  if (!x->force || !*x->force) return;
  for (int i = 0; i < np; i++) {
    int pr = protos[i];
    double f = sim_cost_proto_bw[pr];
    /* ring: 2(p-1) steps, 2(k-1) of them across nodes */
    double B = sim_cost_ring_bw(bw) * f;
    double tbw = 2.0 * (p - 1) / p * S / sim_cost_bpus(B);
    int nsteps = 2 * (p - 1);
    sim_cost_add(x, "ring_ab", pr,
                 sim_cost_alpha(x, sim_cost_base_ring, pr, nsteps - 2 * (k - 1), 2 * (k - 1)) +
                     tbw + sim_cost_fill(t, tbw, nsteps, B));
    /* tree (NCCL double binary tree: chain inside nodes, tree across): 2((g-1) + log2 k)
     * hops; each tree carries half the data, bus bandwidth x0.92; the node's NICs cap it
     * beyond two nodes. */
    double Bt = bw->ring;
    if (k == 2 && 2 * bw->inter < Bt) Bt = 2 * bw->inter;
    if (k > 2 && bw->inter < Bt) Bt = bw->inter;
    Bt *= f * SIM_COST_TREE_EFF;
    double tbw_t = 2.0 * S / sim_cost_bpus(Bt) * (p - 1) / p;
    int lk = sim_cost_log2ceil(k);
    sim_cost_add(x, "tree_ab", pr,
                 sim_cost_alpha(x, sim_cost_base_tree, pr, 2.0 * (g - 1), 2.0 * lk) + tbw_t +
                     sim_cost_fill(t, tbw_t, 2 * (g - 1 + lk), Bt));
    /* hierarchical: ring reduce-scatter in the node, allreduce of the 1/g shard across
     * nodes over each GPU's share of the NICs, ring allgather in the node; the phases
     * pipeline, so the slower one sets the pace. */
    if (k > 1) {
      double Bi = bw->ring * f, Bn = bw->inter * f;
      double ti = 2.0 * (g - 1) / g * S / sim_cost_bpus(Bi);
      double tn = 2.0 * (k - 1) / k * S / sim_cost_bpus(Bn);
      double tb = ti > tn ? ti : tn;
      double Bs = ti > tn ? Bi : Bn;
      sim_cost_add_diag(x, "hier", pr,
                   sim_cost_alpha(x, sim_cost_base_ring, pr, 2.0 * (g - 1), 2.0 * (k - 1)) + tb +
                       sim_cost_fill(t, tb, 2 * (g - 1) + 2 * (k - 1), Bs));
    }
  }
  /* direct one-shot and two-shot: load/store over the switch or mesh, flag-synchronised
   * like LL (so half the bandwidth); single node only. */
  if (k == 1 && t->shape != ULSIM_SHAPE_BUS) {
    double Bj = bw->inject * sim_cost_proto_bw[ULSIM_LL];
    double t1 = (p - 1) * S / sim_cost_bpus(Bj);
    sim_cost_add_diag(x, "direct", ULSIM_LL, sim_cost_alpha(x, sim_cost_base_ring, ULSIM_LL, 1, 0) + t1);
    double t2 = 2.0 * (p - 1) / p * S / sim_cost_bpus(Bj);
    sim_cost_add_diag(x, "two_shot", ULSIM_LL,
                 sim_cost_alpha(x, sim_cost_base_ring, ULSIM_LL, 2, 0) + t2);
  }
  /* NVLS: the switch reduces; each GPU sends and receives S once. Multi-node: NVLS in
   * the node, tree across nodes (NCCL's NVLSTree). */
  if (bw->nvls_alg > 0) {
    double tn = S / sim_cost_bpus(bw->nvls_alg);
    double fill = SIM_COST_NVLS_FILL_RATIO * tn;
    if (fill > SIM_COST_NVLS_FILL_CAP_US) fill = SIM_COST_NVLS_FILL_CAP_US;
    double a = t->launch_us + sim_cost_base_ring[ULSIM_SIMPLE] + t->nvls.hop_us[ULSIM_SIMPLE];
    if (k == 1) {
      sim_cost_add(x, "nvls_ab", ULSIM_SIMPLE, a + tn + fill);
    } else {
      double tx = 2.0 * (k - 1) / k * S / sim_cost_bpus(bw->inter);
      double tb = tn > tx ? tn : tx;
      sim_cost_add(x, "nvls_tree_ab", ULSIM_SIMPLE,
                   a + 2.0 * sim_cost_log2ceil(k) * bw->hop_inter[ULSIM_SIMPLE] + tb + fill);
    }
  }
}

/* A ring or pipelined chain over all p ranks (k of the hops cross nodes): latency of
 * its hops, the bandwidth term tbw, and the pipeline fill at bandwidth B. */
static void sim_cost_add_chain(sim_cost_ctx_t *x, int pr, double B, double tbw) {
  int p = x->bw->nranks, k = x->bw->nnodes;
  sim_cost_add(x, "ring", pr,
               sim_cost_alpha(x, sim_cost_base_ring, pr, (p - 1) - (k - 1), k - 1) + tbw +
                   sim_cost_fill(x->t, tbw, p - 1, B));
}

/* reduce-scatter and allgather: S is the total (nccl-tests size). */
static void sim_cost_rs_ag(sim_cost_ctx_t *x) {
  const ulsim_bw_t *bw = x->bw;
  const ulsim_topology_t *t = x->t;
  int p = bw->nranks, g = bw->ppn, k = bw->nnodes;
  double S = x->S;
  if (p == 1) {
    sim_cost_add(x, "local", ULSIM_SIMPLE, t->launch_us);
    return;
  }
  int protos[3], np;
  sim_cost_protos(x, protos, &np);
  for (int i = 0; i < np; i++) {
    int pr = protos[i];
    double f = sim_cost_proto_bw[pr];
    double B = sim_cost_ring_bw(bw) * f;
    double tbw = (double)(p - 1) / p * S / sim_cost_bpus(B);
    sim_cost_add_chain(x, pr, B, tbw);
    if (k > 1) {
      double Bi = bw->ring * f, Bn = bw->inter * f;
      double ti = (double)(g - 1) / g * S / sim_cost_bpus(Bi);
      double tn = (double)(k - 1) / k * S / sim_cost_bpus(Bn);
      double tb = ti > tn ? ti : tn;
      sim_cost_add_diag(x, "hier", pr,
                   sim_cost_alpha(x, sim_cost_base_ring, pr, g - 1, k - 1) + tb +
                       sim_cost_fill(t, tb, (g - 1) + (k - 1), ti > tn ? Bi : Bn));
    }
  }
  if (k == 1 && t->shape != ULSIM_SHAPE_BUS) {
    double Bj = bw->inject * sim_cost_proto_bw[ULSIM_LL];
    sim_cost_add_diag(x, "direct", ULSIM_LL,
                 sim_cost_alpha(x, sim_cost_base_ring, ULSIM_LL, 1, 0) +
                     (double)(p - 1) / p * S / sim_cost_bpus(Bj));
  }
}

static void sim_cost_bcast_reduce(sim_cost_ctx_t *x) {
  const ulsim_bw_t *bw = x->bw;
  const ulsim_topology_t *t = x->t;
  int p = bw->nranks, k = bw->nnodes;
  double S = x->S;
  if (p == 1) {
    sim_cost_add(x, "local", ULSIM_SIMPLE, t->launch_us);
    return;
  }
  int protos[3], np;
  sim_cost_protos(x, protos, &np);
  for (int i = 0; i < np; i++) {
    int pr = protos[i];
    double f = sim_cost_proto_bw[pr];
    /* pipelined chain: every byte crosses p-1 links, chunks overlap */
    double B = sim_cost_ring_bw(bw) * f;
    double tbw = S / sim_cost_bpus(B);
    sim_cost_add_chain(x, pr, B, tbw);
    /* binomial tree, store and forward: log2 p rounds of the whole message */
    int lp = sim_cost_log2ceil(p);
    double Bp = (k > 1 ? (bw->inter < bw->pair ? bw->inter : bw->pair) : bw->pair) * f;
    int lk = sim_cost_log2ceil(k);
    sim_cost_add(x, "tree", pr,
                 sim_cost_alpha(x, sim_cost_base_tree, pr, lp - lk, lk) +
                     lp * S / sim_cost_bpus(Bp));
  }
  if (k == 1 && t->shape != ULSIM_SHAPE_BUS) {
    double Bj = bw->inject * sim_cost_proto_bw[ULSIM_LL];
    sim_cost_add_diag(x, "direct", ULSIM_LL,
                 sim_cost_alpha(x, sim_cost_base_ring, ULSIM_LL, 1, 0) +
                     (p - 1) * S / sim_cost_bpus(Bj));
  }
}

/* alltoall, gather, scatter: every rank exchanges its blocks with every other rank
 * directly. Alltoall cannot aggregate several NICs per GPU (sjeaugey,
 * nccl-tests#267): each GPU uses its own share of the node's NICs, at most one NIC. */
static void sim_cost_exchange(sim_cost_ctx_t *x, ul_coll_t coll) {
  const ulsim_bw_t *bw = x->bw;
  const ulsim_topology_t *t = x->t;
  int p = bw->nranks, g = bw->ppn, k = bw->nnodes;
  double S = x->S;
  if (p == 1) {
    sim_cost_add(x, "local", ULSIM_SIMPLE, t->launch_us);
    return;
  }
  double nic = 0;
  if (k > 1) {
    nic = bw->inter / g;
    double one = t->inter.line_gbps * t->inter.efficiency;
    if (nic > one) nic = one;
  }
  int protos[3], np;
  sim_cost_protos(x, protos, &np);
  for (int i = 0; i < np; i++) {
    int pr = protos[i];
    double f = sim_cost_proto_bw[pr];
    double ti = (double)(g - 1) / p * S / sim_cost_bpus(bw->inject * f);
    double tn = k > 1 ? (double)(p - g) / p * S / sim_cost_bpus(nic * f) : 0;
    double tb = ti > tn ? ti : tn;
    const char *name = coll == UL_COLL_ALLTOALL ? "pairwise" : "direct";
    /* p2p operations are posted together: one launch, hops to the farthest peer */
    sim_cost_add(x, name, pr,
                 sim_cost_alpha(x, sim_cost_base_ring, pr, k > 1 ? 0 : 1, k > 1 ? 1 : 0) + tb +
                     sim_cost_fill(t, tb, 1, k > 1 ? nic * f : bw->inject * f));
  }
}

static void sim_cost_sendrecv(sim_cost_ctx_t *x) {
  const ulsim_bw_t *bw = x->bw;
  int k = bw->nnodes;
  double B = bw->pair;
  if (k > 1) {
    double one = x->t->inter.line_gbps * x->t->inter.efficiency;
    if (one < B) B = one;
  }
  int protos[3], np;
  sim_cost_protos(x, protos, &np);
  for (int i = 0; i < np; i++) {
    int pr = protos[i];
    double Bf = B * sim_cost_proto_bw[pr];
    double tbw = x->S / sim_cost_bpus(Bf);
    sim_cost_add(x, "p2p", pr,
                 sim_cost_alpha(x, sim_cost_base_ring, pr, k > 1 ? 0 : 1, k > 1 ? 1 : 0) + tbw +
                     sim_cost_fill(x->t, tbw, 1, Bf));
  }
}

static int sim_cost_conf_rank(const char *c) {
  return !strcmp(c, "high") ? 2 : !strcmp(c, "medium") ? 1 : 0;
}

/* The links a result rests on: the scale-up link (and NVLS when it was chosen), the NIC
 * when the communicator spans nodes. Confidence is the lowest of them. */
static void sim_cost_provenance_fill(const ulsim_topology_t *t, const ulsim_bw_t *bw,
                                     ulsim_cost_t *out) {
  const ulsim_link_t *use[3];
  int n = 0;
  use[n++] = &t->intra;
  if (t->has_nvls && !strncmp(out->algorithm, "nvls", 4)) use[n++] = &t->nvls;
  if (bw->nnodes > 1 && t->has_inter) use[n++] = &t->inter;
  int lo = 2;
  size_t off = 0;
  out->sources[0] = 0;
  for (int i = 0; i < n; i++) {
    int r = sim_cost_conf_rank(use[i]->confidence);
    if (r < lo) lo = r;
    int w = snprintf(out->sources + off, sizeof out->sources - off, "%s%s: %s", i ? "; " : "",
                     use[i]->name, use[i]->source);
    if (w < 0 || (size_t)w >= sizeof out->sources - off) break;
    off += (size_t)w;
  }
  /* a binding host-memory cap is a figure the result rests on too; an assumed DRAM
   * efficiency makes it no better than medium */
  if (t->no_p2p && bw->host_cap > 0 && bw->host_cap < bw->bus_ring &&
      (bw->nnodes == 1 || bw->host_cap < bw->inter)) {
    const ulsim_host_memory_t *h = &t->host_mem;
    if (h->assumed[0] && lo > 1) lo = 1;
    snprintf(out->sources + off, sizeof out->sources - off,
             "; host memory (no P2P, caps the ring): %d x %d ch x %g MT/s x %g B x %g%s%s%s",
             h->sockets, h->channels_per_socket, h->mt_per_s, h->bytes_per_transfer,
             h->efficiency, h->assumed[0] ? " (assumed: " : "", h->assumed,
             h->assumed[0] ? ")" : "");
  }
  snprintf(out->confidence, sizeof out->confidence, "%s",
           lo == 2 ? "high" : lo == 1 ? "medium" : "low");
}

const char *ulsim_cost_provenance(const ulsim_cost_t *c, char *buf, size_t len) {
  if (!buf || !len) return buf;
  if (!c) {
    buf[0] = 0;
    return buf;
  }
  snprintf(buf, len, "confidence %s; selection: %s; sources: %s%s", c->confidence,
           c->tuner ? c->tuner : "?", c->sources,
           !strcmp(c->confidence, "low")
               ? "\nWARNING: low confidence: this figure rests on a single vendor claim or an "
                 "assumed value; do not quote it as measured"
               : "");
  return buf;
}

ul_result_t ulsim_cost(const ulsim_topology_t *t, ul_coll_t coll, double size_bytes, int nranks,
                       const char *force_algo, ulsim_cost_t *out, char *err, size_t errlen) {
  if (!t || !out) return ulsim__err(err, errlen, "model: NULL argument");
  if (!(size_bytes >= 0) || !isfinite(size_bytes))
    return ulsim__err(err, errlen, "model: size %g is not a byte count", size_bytes);
  if ((unsigned)coll >= UL_COLL_COUNT)
    return ulsim__err(err, errlen, "model: unknown collective %d", (int)coll);
  ulsim_bw_t bw;
  ul_result_t rc = ulsim_bandwidths(t, nranks, &bw, err, errlen);
  if (rc != UL_OK) return rc;
  memset(out, 0, sizeof *out);
  sim_cost_ctx_t x = {t, &bw, size_bytes, force_algo, out};
  switch (coll) {
    case UL_COLL_ALLREDUCE: sim_cost_allreduce(&x); break;
    case UL_COLL_BARRIER:
      x.S = 0;
      sim_cost_allreduce(&x);
      break;
    case UL_COLL_REDUCE_SCATTER:
    case UL_COLL_ALLGATHERV: /* modeled as the even allgather of the same total */
    case UL_COLL_ALLGATHER: sim_cost_rs_ag(&x); break;
    case UL_COLL_BROADCAST:
    case UL_COLL_REDUCE: sim_cost_bcast_reduce(&x); break;
    case UL_COLL_ALLTOALL:
    case UL_COLL_ALLTOALLV: /* modeled as the even alltoall of the same total */
    case UL_COLL_GATHER:
    case UL_COLL_SCATTER: sim_cost_exchange(&x, coll); break;
    case UL_COLL_SENDRECV: sim_cost_sendrecv(&x); break;
    default: break;
  }
  if (out->ncand == 0)
    return ulsim__err(err, errlen,
                        "model: no candidate algorithm%s%s for %s on %d ranks of \"%s\"",
                        force_algo ? " among " : "", force_algo ? force_algo : "",
                        ul_coll_name(coll) ? ul_coll_name(coll) : "?", nranks, t->name);
  /* the library's choice: the lowest of its own estimates (select_us), which for the
   * tuners' candidates is not the modeled run time */
  int best = 0;
  for (int i = 1; i < out->ncand; i++)
    if (out->cand[i].select_us < out->cand[best].select_us) best = i;
  out->time_us = out->cand[best].time_us;
  snprintf(out->algorithm, sizeof out->algorithm, "%s", out->cand[best].algorithm);
  out->proto = out->cand[best].proto;
  out->size_bytes = size_bytes;
  out->algbw_gbps = out->time_us > 0 ? size_bytes / (out->time_us * 1e3) : 0;
  out->busbw_gbps = out->algbw_gbps * ulsim_bus_factor(coll, nranks);
  out->tuner = ulsim_tuner_name(ulsim_vendor(t));
  sim_cost_provenance_fill(t, &bw, out);
  return UL_OK;
}

