/* Algorithm and protocol choice the way the library on the modeled system makes it.
 * For NVIDIA systems (NVLink, NVSwitch, PCIe boxes of NVIDIA GPUs) this restates NCCL's
 * own tuner (NCCL 2.30.x, src/graph/tuning.cc: ncclTunerConstantsDefaults,
 * ncclTopoTuneModel, ncclTopoGetAlgoTime): bus bandwidth per algorithm x protocol from the
 * graph bandwidth with NCCL's per-protocol factors and per-channel caps, latency from
 * NCCL's base and per-hop tables, time = latency + bytes / algorithm bandwidth. The graph
 * bandwidth comes from the topology (line rate x efficiency); the channel count from
 * NCCL's search (search.cc) restated over NCCL's own link figures.
 * NCCL chooses on that estimate with every channel; the collective it then launches runs
 * on fewer channels and threads for small sizes (enqueue.cc topoGetAlgoInfo) and, for
 * NVLS, in chunks that shrink with the size: the modeled time is that run's.
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

/* ---- channels: NCCL's graph search (src/graph/search.cc ncclTopoCompute) restated ---- */
/* NVLink bandwidth per link in NCCL's topology, GB/s [Volta, Ampere, Hopper, Blackwell]
 * (src/graph/topo.h:20-24: SM70/SM80 20.0, SM90 20.6, SM100 40.1). */
static const double tun_nvl_link_bw[4] = {20.0, 20.0, 20.6, 40.1};
/* Search speeds, GB/s per channel (search.cc:1051-1065): one node (intra) and with NICs
 * in the graph (inter); generic arrays before SM90, then SM90 and SM100 ones. */
static const double tun_spd_intra[3][13] = {
    {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0},
    {60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0},
    {90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0}};
static const int tun_nspd_intra[3] = {13, 11, 12};
static const double tun_spd_inter[3][20] = {
    {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4,
     1.2, 0.24, 0.12},
    {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
     0.24, 0.12},
    {96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
     3.0, 2.4, 1.2, 0.24, 0.12}};
static const int tun_nspd_inter[3] = {19, 17, 20};
/* Ring graph channels searched at most: MAXCHANNELS / 2 (init.cc:1177, device.h:91). */
#define TUN_GRAPH_MAXCH 32
#define TUN_MAXCHANNELS 64
/* PCI Gen3 x16 in NCCL's units (topo.h:25); bw = width x GT/s table / 80 (topo.cc:545-557,
 * 657) doubles per generation: Gen4 24, Gen5 48, Gen6 96. */
#define TUN_PCI_BW 12.0
/* GPU-to-NIC PCIe path in NCCL's units, assumed (the presets do not give it): Gen3 on
 * Volta, Gen4 on Ampere, Gen5 on Hopper and Blackwell (ConnectX-7 NICs). */
static const double tun_nic_pci_bw[4] = {12.0, 24.0, 48.0, 48.0};
/* NVLS channels (transport/nvls.cc:155-157, 210-214): SM90 16; SM100 24 on one node, 32
 * across nodes. Default NVLS chunk 128 KiB (nvls.cc:160). */
#define TUN_NVLS_CH_SM90 16
#define TUN_NVLS_CH_SM100_NVL 24
#define TUN_NVLS_CH_SM100 32
#define TUN_NVLS_CHUNK 131072.0
/* NVLS allreduce runs three warp groups per channel, scatter -> reduce/multicast ->
 * gather (device/all_reduce.h:395-404, 418-504): a 3-stage pipeline over waves of
 * nChannels x nHeads x chunkSize bytes, so two waves of fill beyond the bandwidth term. */
#define TUN_NVLS_STAGES 3
/* Per-thread work before more threads/channels (include/comm.h:49-51), max threads per
 * protocol (include/device.h:93-114); ring LL's threshold is x nranks (tuning.cc:593). */
static const double tun_thread_thr[3] = {8, 8, 64};
static const int tun_max_nt[3] = {512, 640, 512};
#define TUN_SIMPLE_LOWBW_NT 256 /* ring Simple when nChannels x bwIntra <= PCI_BW (tuning.cc:244-247) */

/* What NCCL's search and connect step give a communicator on this topology. */
static int tun_spd_row(int arch) { return arch >= 3 ? 2 : arch == 2 ? 1 : 0; }

typedef struct tun_sys {
  double gpu_bw;   /* bandwidth out of each GPU into the fabric, NCCL's units */
  double max_bw;   /* one path's bandwidth (maxBw of the search) */
  double nic_bw;   /* one NIC, GB/s (0: one node) */
  int nics;
} tun_sys_t;

/* Channels a ring at speed s fits: each GPU's fabric bandwidth, and across nodes the NICs
 * (every channel enters and leaves the node through one NIC). */
static int tun_fit(const tun_sys_t *y, double s) {
  int n = (int)floor(y->gpu_bw / s + 1e-9);
  if (y->nics > 0) {
    int per = (int)floor(y->nic_bw / s + 1e-9);
    if (per * y->nics < n) n = per * y->nics;
  }
  return n > TUN_GRAPH_MAXCH ? TUN_GRAPH_MAXCH : n;
}

void ulsim_tuner_graph(const ulsim_topology_t *t, const ulsim_bw_t *bw, ulsim_tuner_graph_t *g) {
  memset(g, 0, sizeof *g);
  int arch = ulsim_tuner_arch(t), k = bw->nnodes;
  tun_sys_t y = {0, 0, 0, 0};
  const char *f = t->intra.family;
  int nvlink = !strcmp(f, "nvlink") || !strcmp(f, "nvswitch");
  if (nvlink) {
    int links = t->shape == ULSIM_SHAPE_MESH ? t->links_per_peer * (bw->ppn - 1) : t->links_per_gpu;
    y.gpu_bw = links * tun_nvl_link_bw[arch];
    y.max_bw = t->shape == ULSIM_SHAPE_MESH ? t->links_per_peer * tun_nvl_link_bw[arch] : y.gpu_bw;
  } else if (!strcmp(f, "pcie")) {
    y.gpu_bw = y.max_bw = TUN_PCI_BW * pow(2.0, t->intra.generation - 3);
  } else {
    /* not NVIDIA: the topology's own figures stand in for NCCL's (assumed) */
    y.gpu_bw = bw->ring;
    y.max_bw = bw->pair;
  }
  if (bw->ppn == 1) y.gpu_bw = y.max_bw = 1e9; /* no intra ring: the NIC alone limits */
  if (k > 1) {
    y.nic_bw = t->inter.line_gbps;
    y.nics = t->nics_per_node;
    double m = fmin(y.nic_bw, tun_nic_pci_bw[arch]);
    if (m < y.max_bw) y.max_bw = m;
  }
  int row = tun_spd_row(arch);
  const double *spd = k > 1 ? tun_spd_inter[row] : tun_spd_intra[row];
  int ns = k > 1 ? tun_nspd_inter[row] : tun_nspd_intra[row];
  /* pass 1 (search.cc:1170-1252): the fastest speed that fits, then slower ones while the
   * next is > 0.49 of the best found; a graph replaces the best only with more total
   * bandwidth (ncclTopoCompareGraphs, search.cc:457). */
  int i = 0;
  while (i < ns - 1 && spd[i] > y.max_bw) i++;
  int n = 0;
  double s = 0;
  for (;;) {
    int c = tun_fit(&y, spd[i]);
    if (c * spd[i] > n * s) n = c, s = spd[i];
    if (n >= TUN_GRAPH_MAXCH || n * s >= y.gpu_bw) break; /* search.cc:1197-1198 */
    if (i < ns - 1 && (n == 0 || spd[i + 1] / s > 0.49)) i++;
    else break;
  }
  if (n == 0) n = 1, s = spd[ns - 1];
  /* duplicate channels (ncclTopoDupChannels, search.cc:1036-1049) */
  if (s >= 25.0 && !(arch >= 2 && s < 50.0 && n > 4)) {
    int d = 2 * n > TUN_GRAPH_MAXCH ? TUN_GRAPH_MAXCH : 2 * n;
    s /= (d + n - 1) / n;
    n = d;
  }
  /* pass 2 (search.cc:1267-1287): rings try faster speeds keeping at least n channels */
  for (i = 0; i < ns - 1 && spd[i] > s; i++) {}
  for (int j = i - 1; j >= 0; j--) {
    int c = tun_fit(&y, spd[j]);
    if (c >= n && c * spd[j] > n * s) n = c, s = spd[j];
  }
  g->graph_ch = n;
  g->graph_bw = s;
  /* communicator channels: rings duplicated (graph/connect.cc:460), and again on Hopper+
   * across nodes when bwIntra > 45 with fewer than 16 (connect.cc:481) */
  int cc = 2 * n > TUN_MAXCHANNELS ? TUN_MAXCHANNELS : 2 * n;
  if (arch >= 2 && k > 1 && s > 45.0 && cc < 16) cc = 2 * cc;
  g->comm_ch = cc;
  g->nvls_ch = arch >= 3 ? (k > 1 ? TUN_NVLS_CH_SM100 : TUN_NVLS_CH_SM100_NVL) : TUN_NVLS_CH_SM90;
  g->simple_nt = n * s <= TUN_PCI_BW ? TUN_SIMPLE_LOWBW_NT : tun_max_nt[ULSIM_SIMPLE];
}

/* Channels and threads NCCL launches for one ring or tree collective of nbytes
 * (enqueue.cc topoGetAlgoInfo, 2070-2103): channels drop while the bytes do not give each
 * thread its threshold, then threads halve (multiples of 128 only), never below three
 * warps (2111). Trees end at the full 640 threads regardless (enqueue.cc:2112). */
void ulsim_tuner_launch(const ulsim_tuner_graph_t *g, int tree, int proto, int nranks,
                        double nbytes, int *nc_out, int *nt_out) {
  int nc = g->comm_ch;
  int nt = proto == ULSIM_SIMPLE && !tree ? g->simple_nt : tun_max_nt[proto];
  double thr = tun_thread_thr[proto] * (!tree && proto == ULSIM_LL ? nranks : 1);
  while (nbytes < (double)nc * nt * thr && nc >= 2) nc--;
  while (nbytes < (double)nc * nt * thr && nt % 128 == 0) nt /= 2;
  if (nt < 96) nt = 96;
  if (tree) nt = 640;
  *nc_out = nc;
  *nt_out = nt;
}

/* NVLS chunk NCCL uses for nbytes (enqueue.cc:2258-2285): the chunk shrinks so small
 * operations still spread over every channel and head. */
static double tun_nvls_chunk(int tree, int nnodes, int nc, int nheads, double nbytes) {
  double ops = (double)nc * nheads, c;
  if (!tree) {
    c = TUN_NVLS_CHUNK;
    if (nbytes < 64 * ops * c && c > 65536) c = 65536;
    if (nbytes < 8 * ops * c && c > 32768) c = 32768;
    if (nbytes < 2 * ops * c && c > 16384) c = 16384;
  } else {
    /* nvlsTreeMaxChunkSize: 64 KiB from 4 nodes, else the NVLS chunk (nvls.cc:228-229) */
    c = nnodes >= 4 ? 65536 : TUN_NVLS_CHUNK;
    if (nbytes < 32 * ops * c && c > 262144) c = 262144;
    if (nbytes < 16 * ops * c && c > 131072) c = 131072;
    if (nbytes < 4 * ops * c && c > 65536) c = 65536;
    if (nbytes < 1 * ops * c && c > 32768) c = 32768;
  }
  return c;
}

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

/* Ring bus bandwidth of protocol p (ncclTopoTuneModel, tuning.cc:324-329) from graph
 * bandwidth B over ch graph channels' worth of per-channel caps. */
static double tun_ring_bus(int p, double B, double ch, int arch, int i2, int ll_row) {
  if (p == ULSIM_LL) return fmin(tun_llmax[ll_row][i2], B * 0.5);
  if (p == ULSIM_LL128) return fmin(B * 0.92, ch * tun_ring_ll128[arch][i2]);
  return B;
}

/* Tree bus bandwidth (tuning.cc:330-335) from the tree's graph bandwidth Bt. */
static double tun_tree_bus(int p, double Bt, double ch, int arch, int i2, int ll_row, int k) {
  double tb = fmin(Bt * 0.92, ch * tun_tree[arch][i2]);
  if (p == ULSIM_LL) tb = fmin(tb / 3.8, tun_llmax[ll_row][i2]);
  if (p == ULSIM_LL128)
    tb = fmin(tb * (k == 1 ? 7.0 / 9.0 : 120.0 / 128.0), ch * tun_tree_ll128[arch][i2]);
  return tb;
}

void ulsim_tuner_allreduce(const ulsim_topology_t *t, const ulsim_bw_t *bw, double S,
                           ulsim_tuner_add_fn add, void *ctx) {
  int n = bw->nranks, g = bw->ppn, k = bw->nnodes;
  ulsim_vendor_t v = ulsim_vendor(t);
  int arch = ulsim_tuner_arch(t), i2 = k <= 2 ? k - 1 : 2, llr = k == 1 ? arch : 0;
  int intra_hw = strcmp(t->intra.family, "pcie") ? HW_NVLINK : HW_PCI;
  ulsim_tuner_graph_t gr;
  ulsim_tuner_graph(t, bw, &gr);
  /* Ring graph bandwidth: the node's ring, and beyond one node its NICs (every ring
   * crosses each node boundary once per channel). */
  double B = bw->ring;
  if (k > 1 && bw->inter < B) B = bw->inter;
  double nch = gr.graph_ch;
  double inter_extra = k > 1 ? t->inter.latency_us : 0;
  int nsteps = 2 * (n - 1), ninter = k > 1 ? 2 * (k - 1) : 0;
  int logsz = S >= 64 ? tun_log2i((int)fmin(S / 64, 1 << 30)) : -1;
  for (int p = 0; p < 3; p++) {
    if (p == ULSIM_LL128 && !ulsim_tuner_ll128(t)) continue;
    if (v == ULSIM_VENDOR_HCCL && p != ULSIM_SIMPLE) continue;
    ulsim_tuner_cand_t c;
    memset(&c, 0, sizeof c);
    c.proto = p;
    /* ring: NCCL's estimate at all channels chooses; the run uses the nc channels (and nt
     * threads, per-channel rate taken proportional, assumed) NCCL launches at S */
    int nc, nt;
    ulsim_tuner_launch(&gr, 0, p, n, S, &nc, &nt);
    int ntmax = p == ULSIM_SIMPLE ? gr.simple_nt : tun_max_nt[p];
    double frac = (double)nc / gr.comm_ch * nt / ntmax;
    double intra_lat = tun_hw[intra_hw][T_RING][p];
    double inter_lat = (g == 1 ? tun_hw[HW_NET][T_TREE][p] : tun_hw[HW_NET][T_RING][p]) +
                       inter_extra * (p == ULSIM_SIMPLE ? 2 : 1);
    if (k > 1) intra_lat = fmax(intra_lat, TUN_NET_OVERHEAD_US * (p == ULSIM_SIMPLE ? 3 : 1));
    double lat = tun_base[T_RING][p] + (nsteps - ninter) * intra_lat + ninter * inter_lat;
    if (p == ULSIM_SIMPLE && k > 1 && S / (gr.comm_ch * n) >= 64) lat *= arch >= 1 ? 1.4 : 1.9;
    c.algo = "ring";
    c.lat_us = lat;
    c.algbw = tun_ring_bus(p, B, nch, arch, i2, llr) * n / nsteps;
    c.run_algbw = tun_ring_bus(p, B * frac, nch * frac, arch, i2, llr) * n / nsteps;
    c.nchannels = nc;
    c.nthreads = nt;
    c.formula = "ring: lat = base + (2(n-1) - 2(k-1)) x hop_intra + 2(k-1) x hop_net; algbw = "
                "busbw x n/(2(n-1)); chosen on busbw at all channels (NCCL's estimate), timed "
                "on busbw(nc x B / channels) for the nc channels and nt threads NCCL launches "
                "at this size (enqueue.cc topoGetAlgoInfo)";
    add(ctx, &c);
    /* tree (double binary tree across nodes, chains inside) */
    if (v == ULSIM_VENDOR_HCCL) continue;
    double Bt = bw->ring;
    if (k == 2 && 2 * bw->inter < Bt) Bt = 2 * bw->inter;
    if (k > 2 && bw->inter < Bt) Bt = bw->inter;
    ulsim_tuner_launch(&gr, 1, p, n, S, &nc, &nt);
    frac = (double)nc / gr.comm_ch;
    double corr = logsz >= 0 && logsz < 23 ? tun_tree_corr[p][logsz] : 1.0;
    double tintra = tun_hw[intra_hw][T_TREE][p];
    double tinter = tun_hw[HW_NET][T_TREE][p] + inter_extra * (p == ULSIM_SIMPLE ? 2 : 1);
    c.algo = "tree";
    c.lat_us = tun_base[T_TREE][p] + 2 * ((g - 1) * tintra + tun_log2i(k) * tinter);
    c.algbw = tun_tree_bus(p, Bt, nch, arch, i2, llr, k) * 0.5 * corr;
    c.run_algbw = tun_tree_bus(p, Bt * frac, nch * frac, arch, i2, llr, k) * 0.5 * corr;
    c.nchannels = nc;
    c.nthreads = nt;
    c.formula = "tree: lat = base + 2((g-1) hop_intra + log2(k) hop_net); algbw = 0.5 x busbw x "
                "treeCorrection(size); chosen at all channels, timed at the nc channels NCCL "
                "launches";
    add(ctx, &c);
  }
  /* NVLS inside a node (k == 1), NVLS tree across nodes: Simple only. Multi-node NVLS
   * needs CollNet (SHARP), which no preset has. NVLS channels are never reduced
   * (enqueue.cc:2084-2091); the run adds the pipeline fill of the chunk NCCL picks. */
  if (bw->nvls_alg > 0 && v == ULSIM_VENDOR_NCCL) {
    ulsim_tuner_cand_t c;
    memset(&c, 0, sizeof c);
    c.proto = ULSIM_SIMPLE;
    c.nchannels = gr.nvls_ch;
    c.nthreads = 640; /* NCCL_MAX_NTHREADS (tuning.cc:250-252) */
    if (k == 1) {
      c.algo = "nvls";
      c.lat_us = tun_hw[HW_NVLINK][T_NVLS][ULSIM_SIMPLE];
      c.algbw = c.run_algbw = bw->nvls_alg;
      c.formula = "nvls: lat = hop_nvls (25 us); algbw = NVLS multimem bandwidth of the switch "
                  "(links.json); run adds (3-1) waves of fill, wave = nvls channels x GPUs x "
                  "chunk (chunk 128K shrinking to 16K for small sizes, enqueue.cc)";
    } else {
      /* bus bandwidth bounded by the NVLS reduction, by the node's NICs (x2 on two nodes:
       * each tree sends half) and by NCCL's per-channel cap. */
      double nvls_bus = bw->nvls_alg * 2.0 * (g - 1) / g;
      double nb = fmin(fmin(nvls_bus, bw->inter * (k <= 2 ? 2 : 1)),
                       nch * tun_nvls_tree[arch][i2] > 0 ? nch * tun_nvls_tree[arch][i2] : 1e30);
      c.algo = "nvls_tree";
      c.lat_us = tun_hw[HW_NVLINK][T_NVLS_TREE][ULSIM_SIMPLE] +
                 2 * tun_log2i(k) * (tun_hw[HW_NET][T_NVLS_TREE][ULSIM_SIMPLE] + 2 * inter_extra);
      c.algbw = c.run_algbw = nb * n / (2.0 * (n - 1));
      c.formula = "nvls_tree: lat = hop_nvls + 2 log2(k) hop_net; busbw = min(NVLS, NICs x (k<=2 "
                  "? 2 : 1), channels x perChMaxNVLSTreeBw); run adds (3-1) waves of chunk fill";
    }
    double chunk = tun_nvls_chunk(k > 1, k, gr.nvls_ch, g, S);
    double wave = (double)gr.nvls_ch * g * chunk;
    c.run_extra_us = (TUN_NVLS_STAGES - 1) * fmin(S, wave) / (c.run_algbw * 1e3);
    c.chunk_bytes = chunk;
    add(ctx, &c);
  }
}
