/* The library tuner each modeled system runs (tuner.c). Internal to the model. */
#ifndef UNILINK_MODEL_TUNER_H
#define UNILINK_MODEL_TUNER_H

#include "ul_model.h"

/* One candidate. NCCL chooses on its own estimate, lat + S / algbw with every channel;
 * the collective then runs on the channels NCCL launches at that size, timed as
 * lat + run_extra + S / run_algbw. */
typedef struct ulsim_tuner_cand {
  const char *algo;
  int proto;
  double lat_us;       /* NCCL's latency (launch not included) */
  double algbw;        /* NCCL's algorithm bandwidth at all channels, GB/s: selection */
  double run_algbw;    /* algorithm bandwidth of the channels launched at S, GB/s */
  double run_extra_us; /* pipeline fill NCCL's estimate leaves out (NVLS chunking) */
  int nchannels, nthreads;
  double chunk_bytes;  /* NVLS chunk at S (0: not NVLS) */
  const char *formula; /* static text */
} ulsim_tuner_cand_t;

typedef void (*ulsim_tuner_add_fn)(void *ctx, const ulsim_tuner_cand_t *c);

/* What NCCL's graph search and connect step give a communicator (search.cc, connect.cc). */
typedef struct ulsim_tuner_graph {
  int graph_ch;     /* ring graph channels of the search */
  double graph_bw;  /* per graph channel, GB/s in NCCL's topology units */
  int comm_ch;      /* communicator channels (rings duplicated) */
  int nvls_ch;      /* NVLS channels */
  int simple_nt;    /* ring Simple max threads */
} ulsim_tuner_graph_t;

int ulsim_tuner_arch(const ulsim_topology_t *t);
int ulsim_tuner_ll128(const ulsim_topology_t *t);
void ulsim_tuner_graph(const ulsim_topology_t *t, const ulsim_bw_t *bw, ulsim_tuner_graph_t *g);
/* Channels and threads NCCL launches for a ring (tree = 0) or tree collective of nbytes. */
void ulsim_tuner_launch(const ulsim_tuner_graph_t *g, int tree, int proto, int nranks,
                        double nbytes, int *nc, int *nt);
void ulsim_tuner_allreduce(const ulsim_topology_t *t, const ulsim_bw_t *bw, double S,
                           ulsim_tuner_add_fn add, void *ctx);
#endif
