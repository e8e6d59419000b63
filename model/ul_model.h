/* The modeled interconnect: link catalog, topologies and the alpha-beta cost model.
 * Plain C with no core dependencies (only unilink.h enums), so the sim backend (inside
 * libunilink) and the unilink-model tool share one implementation. Prefix ulsim_. */
#ifndef UNILINK_MODEL_UL_MODEL_H
#define UNILINK_MODEL_UL_MODEL_H

#include <stddef.h>
#include <stdio.h>
#include <unilink/unilink.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ULSIM_NAME_MAX 64
#define ULSIM_SOURCE_MAX 640

/* Protocols, as in NCCL: LL (8-byte flag+data stores: low latency, half bandwidth),
 * LL128 (128-byte lines, 120 of data), Simple (bulk copies, full bandwidth). */
typedef enum ulsim_proto { ULSIM_LL = 0, ULSIM_LL128 = 1, ULSIM_SIMPLE = 2, ULSIM_NPROTO = 3 } ulsim_proto_t;

/* One link kind of the catalog (data/links.json). */
typedef struct ulsim_link {
  char name[ULSIM_NAME_MAX];
  char family[32];
  int generation;
  double line_gbps;         /* line rate per link per direction, GB/s (file: per_link_gbps,
                             * or the older line_gbps; derived when only per_card_gbps) */
  double card_gbps;         /* per card per direction over all its links of this kind, GB/s
                             * (file: per_card_gbps); 0 = not published per card */
  int links_per_card;       /* links the per-card figure spans (0 = not given) */
  int per_card;             /* 1: published per card only: a topology divides card_gbps over
                             * the links a GPU uses (a mesh does not multiply it by peers) */
  char assumed[128];        /* figures marked assumed (no source), ", "-joined field names */
  double efficiency;        /* achievable / line under collectives */
  double latency_us;        /* one-way latency of one hop */
  double hop_us[ULSIM_NPROTO]; /* per-hop collective latency by protocol */
  int ports, lanes;         /* 0 when not given */
  char confidence[16];      /* high | medium | low */
  char source[ULSIM_SOURCE_MAX];
} ulsim_link_t;

typedef struct ulsim_catalog {
  ulsim_link_t *links;
  int nlinks;
  char path[512];
} ulsim_catalog_t;

typedef enum ulsim_shape {
  ULSIM_SHAPE_SWITCH = 0, /* every GPU's links go into a switch: any pair gets it all */
  ULSIM_SHAPE_MESH = 1,   /* point-to-point full mesh: a pair gets links_per_peer links */
  ULSIM_SHAPE_BUS = 2     /* PCIe: one x16 port per GPU, optional shared cap */
} ulsim_shape_t;

/* Host memory of a PCIe node whose GPUs cannot reach each other directly ("p2p": false:
 * GeForce cards, ACS/IOMMU, NCCL_P2P_DISABLE). NCCL then stages every ring byte in host
 * memory (SHM transport): written by the sender, read by the receiver. */
typedef struct ulsim_host_memory {
  int sockets;
  int channels_per_socket;
  double mt_per_s;           /* DRAM transfer rate, MT/s (DDR5-4800: 4800) */
  double bytes_per_transfer; /* bytes per channel per transfer (64-bit DDR channel: 8) */
  double efficiency;         /* sustained / theoretical (STREAM-like), 0..1 */
  char assumed[128];         /* fields marked assumed, ", "-joined */
} ulsim_host_memory_t;

/* Theoretical DRAM bandwidth of all sockets, GB/s (MT/s x bytes x channels x sockets). */
double ulsim_host_memory_gbps(const ulsim_host_memory_t *h);

/* A topology: a node (gpus_per_node GPUs on one scale-up fabric) times nodes, joined
 * by nics_per_node NICs of one scale-out fabric. */
typedef struct ulsim_topology {
  char name[ULSIM_NAME_MAX];
  char description[256];
  char sources[1024]; /* "; "-joined */
  char origin[512];   /* file it came from */
  int gpus_per_node;
  int nodes;
  ulsim_shape_t shape;
  ulsim_link_t intra;    /* catalog entry with any topology overrides applied */
  int links_per_gpu;     /* switch / bus */
  int links_per_peer;    /* mesh */
  double bus_gbps;       /* bus: shared per-GPU cap (CPU/root complex); 0 = none */
  int has_switch;
  ulsim_link_t sw;
  int has_nvls;
  ulsim_link_t nvls;
  int has_inter;
  ulsim_link_t inter;
  int nics_per_node;
  double launch_us;      /* fixed per-call overhead (launch + host sync) */
  double pipeline_bytes; /* bytes in flight per ring step at full pipeline */
  int calibrated;        /* 1 if written by `unilink-model calibrate` */
  /* gpus_per_node above is what the cost model and the sim backend place per node (the
   * ranks per node); node_gpus/node_nics are the node as built (0: same as placed). */
  int node_gpus;         /* GPUs in one node */
  int node_nics;         /* NICs in one node (nics_per_node: those the placed ranks use) */
  char assumed[512];     /* topology figures marked assumed, "; "-joined */
  int no_p2p;            /* bus only: 1 = no GPU peer-to-peer, traffic through host memory */
  ulsim_host_memory_t host_mem; /* set when no_p2p */
} ulsim_topology_t;

/* Parameters of a topology over a preset's defaults (0 / "" = keep the preset's). */
typedef struct ulsim_topo_params {
  int gpus_per_node;     /* GPUs in one node */
  int ranks_per_node;    /* ranks on each node, <= GPUs (0: one per GPU) */
  int nodes;
  int nics;              /* NICs per node (0: preset's, scaled with gpus_per_node) */
  double nic_gbps;       /* GB/s per NIC per direction (0: the NIC kind's) */
  char nic_kind[ULSIM_NAME_MAX]; /* catalog link name or family: ib, roce, efa, slingshot, tcpxo */
  int nvlink_links;      /* scale-up links per GPU (A800/H800: 8) */
} ulsim_topo_params_t;

/* Parse "COUNTxSPEED[:KIND]" (SPEED in Gb/s, G/Gb/Gbps suffix optional; e.g. 4x400G,
 * 32x100G:efa, 1x400G:ib-ndr) into p->nics, p->nic_gbps, p->nic_kind. */
ul_result_t ulsim_parse_nics(const char *text, ulsim_topo_params_t *p, char *err, size_t errlen);
/* Apply @p p to @p t (a loaded preset). On error @p t is unchanged and err holds a
 * sentence naming the parameter. Changed figures without a source are marked assumed. */
ul_result_t ulsim_topology_apply(ulsim_topology_t *t, const ulsim_topo_params_t *p,
                                 const ulsim_catalog_t *cat, char *err, size_t errlen);

/* ------------------------------------------------------------------ data files */
/* Folder with links.json and topologies/: $UNILINK_DATA_DIR, then the source tree
 * (compiled in), then the install prefix. Returns buf, or NULL (err set). */
const char *ulsim_data_dir(char *buf, size_t len, char *err, size_t errlen);

/* Parse a catalog. Errors name the file, the entry and the field. */
ul_result_t ulsim_catalog_parse(const char *text, const char *origin, ulsim_catalog_t *cat,
                                char *err, size_t errlen);
ul_result_t ulsim_catalog_load(const char *path, ulsim_catalog_t *cat, char *err, size_t errlen);
/* Load <data dir>/links.json. */
ul_result_t ulsim_catalog_load_default(ulsim_catalog_t *cat, char *err, size_t errlen);
void ulsim_catalog_free(ulsim_catalog_t *cat);
const ulsim_link_t *ulsim_catalog_find(const ulsim_catalog_t *cat, const char *name);

/* Parse a topology file's text. */
ul_result_t ulsim_topology_parse(const char *text, const char *origin, const ulsim_catalog_t *cat,
                                 ulsim_topology_t *t, char *err, size_t errlen);
/* A preset name ("dgx-h100"), a preset with a node count ("dgx-h100x8"), or a path to a
 * topology file (contains '/' or ends in .json). */
ul_result_t ulsim_topology_load(const char *spec, const ulsim_catalog_t *cat, ulsim_topology_t *t,
                                char *err, size_t errlen);
/* Preset names found in the data folder, sorted; returns the count (<= max). */
int ulsim_topology_list(char names[][ULSIM_NAME_MAX], int max, char *err, size_t errlen);
/* Write t as a self-contained topology file (links embedded, overrides kept). */
ul_result_t ulsim_topology_write(const ulsim_topology_t *t, FILE *f);

/* ------------------------------------------------------------------ cost model */
/* Per-GPU bandwidths (GB/s) of a topology for a communicator of nranks. */
typedef struct ulsim_bw {
  int nranks, ppn, nnodes;
  double ring;     /* bus bandwidth a ring inside one node reaches */
  double pair;     /* one GPU to one peer in the node */
  double inject;   /* one GPU to all peers at once (direct algorithms) */
  double nvls_alg; /* NVLS allreduce algorithm bandwidth (0: no NVLS) */
  double inter;    /* one node's NICs together (0: single node) */
  double bus_ring; /* bus: per-GPU PCIe figure before the host-memory cap */
  double host_cap; /* bus without P2P: host DRAM x efficiency / (2 x ppn) (0: none) */
  double hop_intra[ULSIM_NPROTO];
  double hop_inter[ULSIM_NPROTO];
} ulsim_bw_t;

ul_result_t ulsim_bandwidths(const ulsim_topology_t *t, int nranks, ulsim_bw_t *bw, char *err,
                             size_t errlen);
/* One sentence on the host-memory cap of @p bw (from ulsim_bandwidths on @p t): its
 * formula with the numbers, and whether it binds. "" when the node has P2P. Returns buf. */
const char *ulsim_host_memory_explain(const ulsim_topology_t *t, const ulsim_bw_t *bw, char *buf,
                                      size_t len);

#define ULSIM_MAX_CAND 48
typedef struct ulsim_candidate {
  char algorithm[24];
  ulsim_proto_t proto;
  double time_us;
  double lat_us;        /* latency term (launch and fill included), when the tuner gives one */
  double algbw_gbps;    /* bandwidth term, 0 when not split: time = lat + S / algbw */
  double select_us;     /* the library's own estimate it chooses on (= time_us when the
                         * candidate has no tuner) */
  double select_algbw_gbps; /* bandwidth of that estimate (all channels), 0 when none */
  int nchannels;        /* channels the library launches at this size (0: not modeled) */
  int nthreads;         /* threads per channel it launches (0: not modeled) */
  double chunk_bytes;   /* NVLS chunk at this size (0: not NVLS) */
  const char *formula;  /* static text: the cost formula, or NULL */
} ulsim_candidate_t;

typedef struct ulsim_cost {
  double time_us;        /* modeled duration of the chosen algorithm (the library's
                          * choice: lowest select_us) */
  char algorithm[24];    /* "ring", "tree", "direct", "two_shot", "nvls", "hier", ... */
  ulsim_proto_t proto;
  double size_bytes;     /* nccl-tests size S (total for allgather/RS/alltoall/gather) */
  double algbw_gbps;     /* S / time */
  double busbw_gbps;     /* algbw x nccl-tests bus factor */
  int ncand;
  ulsim_candidate_t cand[ULSIM_MAX_CAND];
  const char *tuner;     /* whose selection rules chose (ulsim_tuner_name) */
  char confidence[16];   /* lowest confidence of the links the result rests on */
  char sources[1200];    /* those links' sources, "; "-joined */
} ulsim_cost_t;

/* Which library's selection the model follows on a topology. */
typedef enum ulsim_vendor {
  ULSIM_VENDOR_NCCL = 0, ULSIM_VENDOR_RCCL = 1, ULSIM_VENDOR_HCCL = 2, ULSIM_VENDOR_OTHER = 3
} ulsim_vendor_t;
ulsim_vendor_t ulsim_vendor(const ulsim_topology_t *t);
const char *ulsim_tuner_name(ulsim_vendor_t v);

/* One line a tool prints next to a modeled figure: confidence and sources of @p c, plus
 * a warning when any link is low confidence. For bench rows and reports. Returns buf. */
const char *ulsim_cost_provenance(const ulsim_cost_t *c, char *buf, size_t len);

/* nccl-tests bus-bandwidth factor of a collective for n ranks. */
double ulsim_bus_factor(ul_coll_t coll, int nranks);
/* nccl-tests size S from the per-rank byte count unilink records (ul_call_info_t::bytes:
 * count x dtype size of the public call). */
double ulsim_size_from_call_bytes(ul_coll_t coll, double call_bytes, int nranks);
const char *ulsim_proto_name(ulsim_proto_t p);

/* Cost of @p coll of nccl-tests size @p size_bytes over @p nranks ranks of @p t: every
 * candidate algorithm x protocol, the cheapest chosen. @p force_algo (NULL = choose)
 * restricts the choice to one algorithm name. */
ul_result_t ulsim_cost(const ulsim_topology_t *t, ul_coll_t coll, double size_bytes, int nranks,
                       const char *force_algo, ulsim_cost_t *out, char *err, size_t errlen);

/* Parse "1G", "64K", "25MB", "1e9", "512" into bytes. Suffixes K/M/G/T, KB/MB/GB/TB and
 * KiB/MiB/GiB/TiB are all binary (2^10...), as in nccl-tests -b/-e and PyTorch's
 * bucket_cap_mb. Returns 0 on success, -1 on malformed text. */
int ulsim_parse_size(const char *text, double *bytes);

/* -------------------------------------------------------------- training estimator */
typedef struct ulsim_train_in {
  double params;          /* N */
  int gpus;               /* G */
  double tokens_per_gpu;  /* per step */
  double gpu_tflops;      /* peak, dense */
  double mfu;             /* 0..1 */
  int zero;               /* 0 (DDP) .. 3 */
  double bucket_bytes;    /* gradient bucket */
  double overlap;         /* fraction of backward that can hide communication, 0..1 */
  double grad_bytes;      /* bytes per gradient element (2 = bf16) */
  /* < 0: derive overlap from the bucket schedule (buckets become ready evenly through
   * backward and run one after another); 0..1: a given fraction (older interface). */
  double gpu_mem_gb;      /* memory per GPU for the ZeRO check, GB; 0 = not checked */
  double param_bytes;     /* bytes per parameter (0 -> 2, bf16) */
  double opt_bytes;       /* optimizer bytes per parameter (0 -> 12: Adam fp32 master, m, v) */
  int tp, pp;             /* tensor / pipeline parallel degree (0 -> 1); dp = gpus/(tp pp) */
} ulsim_train_in_t;

typedef struct ulsim_train_out {
  double compute_s;       /* 6 N tokens / (G peak mfu) */
  double comm_s;          /* gradient sync (all buckets) */
  double bucket_us;       /* one bucket's collective */
  char algorithm[24];
  double busbw_gbps;      /* achieved per bucket */
  double exposed_s;       /* communication not hidden by backward */
  double step_s;
  double efficiency;      /* compute / step */
  int nbuckets;
  double backward_share;  /* fraction of compute that is backward (assumed 2/3) */
  double overlap_used;    /* fraction of gradient sync hidden */
  double mem_gb;          /* parameters + gradients + optimizer state per GPU, GB */
  int dp;                 /* data-parallel ranks the gradients are reduced over */
  char confidence[16];
  char sources[1200];
} ulsim_train_out_t;

ul_result_t ulsim_train(const ulsim_topology_t *t, const ulsim_train_in_t *in,
                        ulsim_train_out_t *out, char *err, size_t errlen);
/* Parameters + gradients + optimizer state per GPU (GB) for ZeRO stage 0..3 over dp. */
double ulsim_train_memory_gb(double params, int zero, int dp, double param_bytes,
                             double grad_bytes, double opt_bytes);

#ifdef __cplusplus
}
#endif
#endif
