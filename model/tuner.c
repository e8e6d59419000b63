/* Algorithm and protocol choice the way the library on the modeled system makes it.
 * For NVIDIA systems (NVLink, NVSwitch, PCIe boxes of NVIDIA GPUs) this restates NCCL's
 * own tuner (NCCL 2.30.x, src/graph/tuning.cc: ncclTunerConstantsDefaults,
 * ncclTopoTuneModel, ncclTopoGetAlgoTime): bus bandwidth per algorithm x protocol from the
 * graph bandwidth with NCCL's per-protocol factors and per-channel caps, latency from
 * NCCL's base and per-hop tables, time = latency + bytes / algorithm bandwidth. The graph
 * bandwidth comes from the topology (line rate x efficiency), not from NCCL's search.
 * Constants are restated (facts), not code; docs/model.md lists each with its source. */
#include <math.h>
#include <string.h>

#include "ul_model.h"
#include "tuner.h"

/* NCCL's algorithm rows of the latency tables. */
enum { T_TREE = 0, T_RING = 1, T_NVLS = 2, T_NVLS_TREE = 3 };
/* baseLatencies [algo][LL, LL128, Simple], us (tuning.cc ncclTunerConstantsDefaults). */
static const double tun_base[4][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}};
/* hwLatencies [NVLINK | PCI | NET][algo][proto], us (same table). */
static const double tun_hw[3][4][3] = {
    {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 25}, {0, 0, 25}},
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 0}, {0, 0, 0}},
    {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 18}, {0, 0, 20.9}}};
enum { HW_NVLINK = 0, HW_PCI = 1, HW_NET = 2 };
/* llMaxBws [arch or CPU][nodes 1, 2, >2], GB/s. Multi-node rows are by CPU vendor (Intel
 * row 0 assumed: the presets do not say). */
static const double tun_llmax[4][3] = {
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
/* perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws, perChMaxNVLSTreeBws
 * [Volta, Ampere, Hopper, Blackwell][nodes 1, 2, >2], GB/s per channel. */
static const double tun_ring_ll128[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {40.0, 40.0, 40.0}};
static const double tun_tree_ll128[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
static const double tun_tree[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
static const double tun_nvls_tree[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 80.0}};
/* treeCorrectionFactor [proto][log2(bytes/64)], ncclTopoGetAlgoTime. */
static const double tun_tree_corr[3][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0,
     1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0,
     1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9,
     .9}};
/* Network post overhead (getNetOverhead: 1 us on Intel x86, x3 for Simple). */
#define TUN_NET_OVERHEAD_US 1.0
/* Channel bandwidth NCCL's search settles on for NVLink graphs; assumed (search.cc tries
 * speeds from 40 GB/s down; H100 rings come out near 20 GB/s x 16-24 channels). */
#define TUN_CH_GBPS 20.0
#define TUN_MAX_CH 32

const char *ulsim_tuner_name(ulsim_vendor_t v) {
  switch (v) {
    case ULSIM_VENDOR_NCCL: return "NCCL 2.30 tuner (src/graph/tuning.cc)";
    case ULSIM_VENDOR_RCCL: return "RCCL (NCCL-derived tuner; MI300X rows assumed = Hopper)";
    case ULSIM_VENDOR_HCCL: return "HCCL (ring/mesh, Simple only; CANN docs, assumed constants)";
    default: return "generic ring/tree (no vendor tuner known; assumed)";
  }
}

ulsim_vendor_t ulsim_vendor(const ulsim_topology_t *t) {
  const char *f = t->intra.family;
  if (!strcmp(f, "nvlink") || !strcmp(f, "nvswitch") || !strcmp(f, "pcie"))
    return ULSIM_VENDOR_NCCL;
  if (!strcmp(f, "xgmi")) return ULSIM_VENDOR_RCCL;
  if (!strcmp(f, "hccs") || !strncmp(t->intra.name, "gaudi", 5)) return ULSIM_VENDOR_HCCL;
  return ULSIM_VENDOR_OTHER;
}

/* NCCL's compute-capability row: from the NVLink generation (or PCIe generation for
 * PCIe boxes, assumed: Gen3 Volta-era, Gen4 Ampere, Gen5+ Blackwell cards). */
int ulsim_tuner_arch(const ulsim_topology_t *t) {
  const char *n = t->intra.name;
  if (!strcmp(t->intra.family, "pcie")) {
    int g = t->intra.generation;
    return g <= 3 ? 0 : g == 4 ? 1 : 3;
  }
  if (!strcmp(n, "nvlink1") || !strcmp(n, "nvlink2")) return 0;
  if (!strcmp(n, "nvlink3")) return 1;
  if (!strcmp(n, "nvlink4")) return 2;
  if (!strcmp(t->intra.family, "xgmi")) return 2;
  return 3;
}

static int tun_log2i(int n) {
  int k = 0;
  while ((1 << (k + 1)) <= n) k++;
  return k;
}

int ulsim_tuner_channels(double ring_gbps) {
  int c = (int)ceil(ring_gbps / TUN_CH_GBPS);
  return c < 2 ? 2 : c > TUN_MAX_CH ? TUN_MAX_CH : c;
}

/* LL128 enable rule (tuning.cc, protoEnable == 2): intra path NVLink or NVLink bridge
 * (PATH_NVB), SM70+, and the inter path GPU-direct (<= PXN on Hopper+, <= PXB before:
 * presets' NICs are GPU-direct). PCIe-only boxes therefore run LL and Simple. RCCL
 * enables LL128 on MI300 (gfx942) xGMI; HCCL has no LL protocols. */
int ulsim_tuner_ll128(const ulsim_topology_t *t) {
  ulsim_vendor_t v = ulsim_vendor(t);
  if (v == ULSIM_VENDOR_NCCL) return strcmp(t->intra.family, "pcie") != 0;
  if (v == ULSIM_VENDOR_RCCL) return !strcmp(t->intra.name, "xgmi-mi300x");
  return 0;
}

void ulsim_tuner_allreduce(const ulsim_topology_t *t, const ulsim_bw_t *bw, double S,
                           ulsim_tuner_add_fn add, void *ctx) {
  int n = bw->nranks, g = bw->ppn, k = bw->nnodes;
  ulsim_vendor_t v = ulsim_vendor(t);
  int arch = ulsim_tuner_arch(t), i2 = k <= 2 ? k - 1 : 2;
  int intra_hw = strcmp(t->intra.family, "pcie") ? HW_NVLINK : HW_PCI;
  /* Ring graph bandwidth: the node's ring, and beyond one node its NICs (every ring
   * crosses each node boundary once per channel). */
  double B = bw->ring;
  if (k > 1 && bw->inter < B) B = bw->inter;
  int nch = ulsim_tuner_channels(B);
  double inter_extra = k > 1 ? t->inter.latency_us : 0;
  int nsteps = 2 * (n - 1), ninter = k > 1 ? 2 * (k - 1) : 0;
  int logsz = S >= 64 ? tun_log2i((int)fmin(S / 64, 1 << 30)) : -1;
  for (int p = 0; p < 3; p++) {
    if (p == ULSIM_LL128 && !ulsim_tuner_ll128(t)) continue;
    if (v == ULSIM_VENDOR_HCCL && p != ULSIM_SIMPLE) continue;
    /* ring */
    double bus = B;
    if (p == ULSIM_LL) bus = fmin(tun_llmax[k == 1 ? arch : 0][i2], bus * 0.5);
    if (p == ULSIM_LL128) bus = fmin(bus * 0.92, nch * tun_ring_ll128[arch][i2]);
    double alg = bus * n / nsteps;
    double intra_lat = tun_hw[intra_hw][T_RING][p];
    double inter_lat = (g == 1 ? tun_hw[HW_NET][T_TREE][p] : tun_hw[HW_NET][T_RING][p]) +
                       inter_extra * (p == ULSIM_SIMPLE ? 2 : 1);
    if (k > 1) intra_lat = fmax(intra_lat, TUN_NET_OVERHEAD_US * (p == ULSIM_SIMPLE ? 3 : 1));
    double lat = tun_base[T_RING][p] + (nsteps - ninter) * intra_lat + ninter * inter_lat;
    if (p == ULSIM_SIMPLE && k > 1 && S / (nch * n) >= 64) lat *= arch >= 1 ? 1.4 : 1.9;
    add(ctx, "ring", p, lat, alg,
        "ring: base + (2(n-1) - 2(k-1)) x hop_intra + 2(k-1) x hop_net; algbw = busbw x n/(2(n-1))");
    /* tree (double binary tree across nodes, chains inside) */
    if (v == ULSIM_VENDOR_HCCL) continue;
    double Bt = bw->ring;
    if (k == 2 && 2 * bw->inter < Bt) Bt = 2 * bw->inter;
    if (k > 2 && bw->inter < Bt) Bt = bw->inter;
    double tb = fmin(Bt * 0.92, nch * tun_tree[arch][i2]);
    if (p == ULSIM_LL) tb = fmin(tb / 3.8, tun_llmax[k == 1 ? arch : 0][i2]);
    if (p == ULSIM_LL128)
      tb = fmin(tb * (k == 1 ? 7.0 / 9.0 : 120.0 / 128.0), nch * tun_tree_ll128[arch][i2]);
    double talg = tb * 0.5;
    if (logsz >= 0 && logsz < 23) talg *= tun_tree_corr[p][logsz];
    double tintra = tun_hw[intra_hw][T_TREE][p];
    double tinter = tun_hw[HW_NET][T_TREE][p] + inter_extra * (p == ULSIM_SIMPLE ? 2 : 1);
    double tlat = tun_base[T_TREE][p] + 2 * ((g - 1) * tintra + tun_log2i(k) * tinter);
    add(ctx, "tree", p, tlat, talg,
        "tree: base + 2((g-1) hop_intra + log2(k) hop_net); algbw = 0.5 x busbw x "
        "treeCorrection(size)");
  }
  /* NVLS inside a node (k == 1), NVLS tree across nodes: Simple only. Multi-node NVLS
   * needs CollNet (SHARP), which no preset has. */
  if (bw->nvls_alg > 0 && v == ULSIM_VENDOR_NCCL) {
    if (k == 1) {
      add(ctx, "nvls", ULSIM_SIMPLE, tun_hw[HW_NVLINK][T_NVLS][ULSIM_SIMPLE], bw->nvls_alg,
          "nvls: hop_nvls (25 us); algbw = NVLS multimem bandwidth of the switch (links.json)");
    } else {
      /* bus bandwidth bounded by the NVLS reduction, by the node's NICs (x2 on two nodes:
       * each tree sends half) and by NCCL's per-channel cap. */
      double nvls_bus = bw->nvls_alg * 2.0 * (g - 1) / g;
      double nb = fmin(fmin(nvls_bus, bw->inter * (k <= 2 ? 2 : 1)),
                       nch * tun_nvls_tree[arch][i2] > 0 ? nch * tun_nvls_tree[arch][i2] : 1e30);
      double alg = nb * n / (2.0 * (n - 1));
      double lat = tun_hw[HW_NVLINK][T_NVLS_TREE][ULSIM_SIMPLE] +
                   2 * tun_log2i(k) * (tun_hw[HW_NET][T_NVLS_TREE][ULSIM_SIMPLE] + 2 * inter_extra);
      add(ctx, "nvls_tree", ULSIM_SIMPLE, lat, alg,
          "nvls_tree: hop_nvls + 2 log2(k) hop_net; busbw = min(NVLS, NICs x (k<=2 ? 2 : 1), "
          "channels x perChMaxNVLSTreeBw)");
    }
  }
}
