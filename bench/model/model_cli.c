/* Helpers every unilink-model command uses: the catalog, usage, option, number and size
 * parsing, and topology loading with the topology parameters. Below both command files
 * (unilink-model.c, model_fit.c), which call into it and never the other way. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_cli.h"

ulsim_catalog_t g_cat;

int model_usage(FILE *f) {
  fprintf(f,
          "usage: unilink-model <command> [options]\n"
          "  links                               the link catalog, with sources\n"
          "  topologies                          topology presets, with sources\n"
          "  collective <coll> --topology T (--bytes B | -b MIN -e MAX [-f F]) [--ranks N]\n"
          "             [--algo a,b (forced diagnostic)] [--explain] [--json]\n"
          "                                      modeled time, algbw, busbw, candidates\n"
          "  topology parameters (collective, train): [--gpus-per-node G] [--ranks-per-node R]\n"
          "             [--nodes N] [--nics COUNTxSPEED[:KIND], e.g. 4x400G, 32x100G:efa]\n"
          "             [--nic-kind ib|roce|efa|slingshot|tcpxo|<link>] [--nvlink-links L]\n"
          "  train --params N --gpus G --topology T --tokens-per-gpu K --gpu-tflops F --mfu M\n"
          "        [--zero 0..3] [--bucket 25MB|all] [--overlap 0..1 (default: derived)]\n"
          "        [--grad-bytes 2] [--gpu-mem GB] [--tp N] [--pp N] [--json]\n"
          "        [--compare T1,T2,...] [--plot FILE.png]\n"
          "  calibrate FILE.json --topology T [--collective C] [--out FILE] [--name NAME]\n"
          "            [--ranks N] [--backend B]  FILE: -J output of nccl-tests (2.17..2.19) or\n"
          "                                      unilink-bench, measuring C (allreduce)\n"
          "  validate [DIR] [--forced]           model vs published measurements (own choice;\n"
          "                                      --forced: each file's measured algorithm)\n"
          "collectives: allreduce broadcast reduce allgather reduce_scatter alltoall gather\n"
          "             scatter barrier sendrecv. Sizes: 8, 64K, 1G, 25MB (binary suffixes).\n"
          "Data folder: $UNILINK_DATA_DIR, else the source tree or install prefix.\n");
  return 2;
}

const char *model_coll_names[UL_COLL_COUNT] = {
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
    "alltoall",  "gather",    "scatter", "barrier",  "sendrecv", "alltoallv", "allgatherv"};

int model_coll_parse(const char *s, ul_coll_t *c) {
  for (int i = 0; i < UL_COLL_COUNT; i++)
    if (!strcmp(s, model_coll_names[i])) {
      *c = (ul_coll_t)i;
      return 0;
    }
  /* nccl-tests spellings */
  if (!strcmp(s, "all_reduce")) *c = UL_COLL_ALLREDUCE;
  else if (!strcmp(s, "all_gather")) *c = UL_COLL_ALLGATHER;
  else if (!strcmp(s, "reducescatter")) *c = UL_COLL_REDUCE_SCATTER;
  else if (!strcmp(s, "alltoall") || !strcmp(s, "all_to_all")) *c = UL_COLL_ALLTOALL;
  else return -1;
  return 0;
}

/* Option lookup: "--name value" pairs after the command. */
const char *model_opt(int argc, char **argv, const char *name, const char *alt) {
  for (int i = 0; i < argc - 1; i++)
    if (!strcmp(argv[i], name) || (alt && !strcmp(argv[i], alt))) return argv[i + 1];
  return NULL;
}

int model_num(const char *text, const char *what, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !isfinite(v)) {
    fprintf(stderr, "unilink-model: %s: '%s' is not a number\n", what, text);
    return -1;
  }
  *out = v;
  return 0;
}

int model_size(const char *text, const char *what, double *out) {
  if (ulsim_parse_size(text, out)) {
    fprintf(stderr, "unilink-model: %s: '%s' is not a size (examples: 8, 64K, 1G, 25MB)\n", what,
            text);
    return -1;
  }
  return 0;
}

/* Topology parameters of collective and train (0 = the preset's), applied by
 * model_load_topo to every topology those commands load. */
ulsim_topo_params_t g_topo_params;
int g_topo_params_set;

int model_whole(const char *s, const char *what, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "unilink-model: %s '%s': a whole number %d..%d\n", what, s, lo, hi);
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* --gpus-per-node G, --ranks-per-node R, --nodes N, --nics COUNTxSPEED[:KIND] (--nic-kind
 * KIND), --nvlink-links L over a preset. Returns -1 after printing a sentence. */
int model_topo_params(int argc, char **argv) {
  ulsim_topo_params_t p;
  memset(&p, 0, sizeof p);
  const char *s;
  char err[512];
  if ((s = model_opt(argc, argv, "--gpus-per-node", NULL)) &&
      model_whole(s, "--gpus-per-node", 1, 4096, &p.gpus_per_node))
    return -1;
  if ((s = model_opt(argc, argv, "--ranks-per-node", NULL)) &&
      model_whole(s, "--ranks-per-node", 1, 4096, &p.ranks_per_node))
    return -1;
  if ((s = model_opt(argc, argv, "--nodes", NULL)) &&
      model_whole(s, "--nodes", 1, 1 << 20, &p.nodes))
    return -1;
  if ((s = model_opt(argc, argv, "--nvlink-links", NULL)) &&
      model_whole(s, "--nvlink-links", 1, 1024, &p.nvlink_links))
    return -1;
  if ((s = model_opt(argc, argv, "--nics", NULL)) && ulsim_parse_nics(s, &p, err, sizeof err)) {
    fprintf(stderr, "unilink-model: %s\n", err);
    return -1;
  }
  if ((s = model_opt(argc, argv, "--nic-kind", NULL))) {
    if (!*s || strlen(s) >= sizeof p.nic_kind) {
      fprintf(stderr, "unilink-model: --nic-kind '%s': a NIC kind (ib, roce, efa, slingshot, "
                      "tcpxo) or a catalog NIC name\n", s);
      return -1;
    }
    snprintf(p.nic_kind, sizeof p.nic_kind, "%s", s);
  }
  g_topo_params = p;
  g_topo_params_set = 1;
  return 0;
}

int model_load_topo(const char *spec, ulsim_topology_t *t) {
  char err[1024];
  if (ulsim_topology_load(spec, &g_cat, t, err, sizeof err) != UL_OK ||
      (g_topo_params_set && ulsim_topology_apply(t, &g_topo_params, &g_cat, err, sizeof err) != UL_OK)) {
    fprintf(stderr, "unilink-model: %s\n", err);
    return -1;
  }
  return 0;
}

/* The whole file, NUL-terminated (NULL if unreadable or over 64 MiB). */
char *model_read(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (n < 0 || n > (64L << 20)) {
    fclose(f);
    return NULL;
  }
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  if (b) b[n] = 0;
  fclose(f);
  return b;
}
