/* unilink-model: the modeled interconnect from the command line. Computes times
 * without moving data (so thousands of modeled ranks cost nothing), lists the link
 * catalog and topologies with their sources, estimates training steps, calibrates a
 * topology to a measured run and checks the model against published measurements. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model_cli.h"
#include "model_fit.h"

static void model_json_cost(const ulsim_cost_t *c, ul_coll_t coll, int ranks, const char *topo) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "topology", topo);
  cJSON_AddStringToObject(o, "collective", ul_coll_name(coll) ? ul_coll_name(coll) : "?");
  cJSON_AddNumberToObject(o, "ranks", ranks);
  cJSON_AddNumberToObject(o, "size_bytes", c->size_bytes);
  cJSON_AddStringToObject(o, "algorithm", c->algorithm);
  cJSON_AddStringToObject(o, "protocol", ulsim_proto_name(c->proto));
  cJSON_AddNumberToObject(o, "time_us", c->time_us);
  cJSON_AddNumberToObject(o, "algbw_gbps", c->algbw_gbps);
  cJSON_AddNumberToObject(o, "busbw_gbps", c->busbw_gbps);
  cJSON_AddStringToObject(o, "confidence", c->confidence);
  cJSON_AddStringToObject(o, "selection", c->tuner ? c->tuner : "");
  cJSON_AddStringToObject(o, "sources", c->sources);
  cJSON *cands = cJSON_AddArrayToObject(o, "candidates");
  for (int i = 0; i < c->ncand; i++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "algorithm", c->cand[i].algorithm);
    cJSON_AddStringToObject(x, "protocol", ulsim_proto_name(c->cand[i].proto));
    cJSON_AddNumberToObject(x, "time_us", c->cand[i].time_us);
    cJSON_AddNumberToObject(x, "estimate_us", c->cand[i].select_us);
    cJSON_AddNumberToObject(x, "channels", c->cand[i].nchannels);
    cJSON_AddNumberToObject(x, "threads", c->cand[i].nthreads);
    cJSON_AddNumberToObject(x, "latency_us", c->cand[i].lat_us);
    cJSON_AddNumberToObject(x, "algbw_gbps", c->cand[i].algbw_gbps);
    cJSON_AddStringToObject(x, "formula", c->cand[i].formula ? c->cand[i].formula : "");
    cJSON_AddItemToArray(cands, x);
  }
  char *txt = cJSON_PrintUnformatted(o);
  if (txt) printf("%s\n", txt);
  free(txt);
  cJSON_Delete(o);
}

static void model_fmt_size(double b, char *buf, size_t n) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4 && fmod(b, 1024) == 0) {
    b /= 1024;
    i++;
  }
  snprintf(buf, n, "%g %s", b, u[i]);
}

/* ------------------------------------------------------------------ links / topologies */

static int model_cmd_links(void) {
  printf("# link catalog: %s\n", g_cat.path);
  printf("%-16s %-11s %3s %9s %6s %9s %8s %-6s  %s\n", "name", "family", "gen", "line GB/s",
         "eff", "eff GB/s", "lat us", "conf", "source");
  for (int i = 0; i < g_cat.nlinks; i++) {
    const ulsim_link_t *l = &g_cat.links[i];
    printf("%-16s %-11s %3d %9.2f %6.3f %9.2f %8.2f %-6s  %s\n", l->name, l->family,
           l->generation, l->line_gbps, l->efficiency, l->line_gbps * l->efficiency,
           l->latency_us, l->confidence, l->source);
    if (l->card_gbps > 0 || l->assumed[0]) {
      char card[96] = "";
      if (l->per_card)
        snprintf(card, sizeof card, "per card %.2f GB/s (split over the links a topology uses) ",
                 l->card_gbps);
      else if (l->card_gbps > 0)
        snprintf(card, sizeof card, "per card %.2f GB/s = %d links x %.2f ", l->card_gbps,
                 l->links_per_card, l->line_gbps);
      printf("%-16s   %s%s%s\n", "", card, l->assumed[0] ? "assumed: " : "", l->assumed);
    }
  }
  return 0;
}

static int model_cmd_topologies(void) {
  char names[128][ULSIM_NAME_MAX], err[512];
  int n = ulsim_topology_list(names, 128, err, sizeof err);
  if (n == 0) {
    fprintf(stderr, "unilink-model: no topologies: %s\n", err);
    return 1;
  }
  printf("%-22s %5s %-34s %-18s %9s %9s  %s\n", "name", "GPUs", "scale-up", "scale-out",
         "ring GB/s", "NIC GB/s", "description");
  for (int i = 0; i < n; i++) {
    ulsim_topology_t t;
    if (model_load_topo(names[i], &t)) return 1;
    ulsim_bw_t bw;
    ulsim_bandwidths(&t, t.gpus_per_node, &bw, err, sizeof err);
    char up[128], out[96] = "-";
    static const char *shapes[] = {"switch", "mesh", "bus"};
    snprintf(up, sizeof up, "%s x%d %s%s", t.intra.name,
             t.shape == ULSIM_SHAPE_MESH ? t.links_per_peer : t.links_per_gpu, shapes[t.shape],
             t.has_nvls ? " +NVLS" : "");
    if (t.has_inter) snprintf(out, sizeof out, "%d x %s", t.nics_per_node, t.inter.name);
    printf("%-22s %5d %-34s %-18s %9.1f %9.1f  %s\n", t.name, t.gpus_per_node * t.nodes, up, out,
           bw.ring, t.has_inter ? t.nics_per_node * t.inter.line_gbps * t.inter.efficiency : 0,
           t.description);
    printf("%-22s       sources: %s\n", "", t.sources[0] ? t.sources : "(none given)");
    if (t.assumed[0]) printf("%-22s       assumed: %s\n", "", t.assumed);
    char hm[768];
    if (*ulsim_host_memory_explain(&t, &bw, hm, sizeof hm))
      printf("%-22s       host memory: %s\n", "", hm);
  }
  printf("# <preset>x<N>: N nodes of a preset over its NICs (e.g. dgx-h100x8)\n");
  return 0;
}

/* ------------------------------------------------------------------ collective */

static int model_conf_rank(const char *c) {
  return !strcmp(c, "high") ? 2 : !strcmp(c, "medium") ? 1 : 0;
}

static int model_cmd_collective(int argc, char **argv) {
  if (argc < 1) return model_usage(stderr);
  ul_coll_t coll;
  if (model_coll_parse(argv[0], &coll)) {
    fprintf(stderr, "unilink-model: unknown collective '%s'\n", argv[0]);
    return 2;
  }
  const char *tspec = model_opt(argc, argv, "--topology", "-t");
  if (!tspec) tspec = "dgx-h100";
  ulsim_topology_t t;
  if (model_topo_params(argc, argv)) return 2;
  if (model_load_topo(tspec, &t)) return 1;
  int json = 0, explain = 0;
  for (int i = 0; i < argc; i++) {
    json |= !strcmp(argv[i], "--json");
    explain |= !strcmp(argv[i], "--explain");
  }
  double ranks = t.gpus_per_node * t.nodes;
  const char *s;
  if ((s = model_opt(argc, argv, "--ranks", "-n")) && model_num(s, "--ranks", &ranks)) return 2;
  if (ranks < 1 || ranks > 1e7 || ranks != floor(ranks)) {
    fprintf(stderr, "unilink-model: --ranks must be a whole number >= 1\n");
    return 2;
  }
  const char *algo = model_opt(argc, argv, "--algo", NULL);
  double minb = 0, maxb = 0, fac = 2;
  if ((s = model_opt(argc, argv, "--bytes", NULL))) {
    if (model_size(s, "--bytes", &minb)) return 2;
    maxb = minb;
  } else {
    const char *b = model_opt(argc, argv, "-b", "--minbytes");
    const char *e = model_opt(argc, argv, "-e", "--maxbytes");
    if (!b || !e) {
      fprintf(stderr, "unilink-model: give --bytes B or -b MIN -e MAX\n");
      return 2;
    }
    if (model_size(b, "-b", &minb) || model_size(e, "-e", &maxb)) return 2;
    if ((s = model_opt(argc, argv, "-f", "--stepfactor")) && model_num(s, "-f", &fac)) return 2;
    if (fac <= 1) {
      fprintf(stderr, "unilink-model: -f must be > 1\n");
      return 2;
    }
  }
  char err[1024], prov[2000];
  if (!json) {
    printf("# modeled (no data moved): %s on %s, %d ranks (%d ranks/node on %d GPUs/node, %d "
           "nodes, %d NICs/node used of %d: %.1f GB/s)%s%s\n",
           model_coll_names[coll], t.name, (int)ranks, t.gpus_per_node,
           t.node_gpus ? t.node_gpus : t.gpus_per_node,
           ((int)ranks + t.gpus_per_node - 1) / t.gpus_per_node, t.nics_per_node,
           t.node_nics ? t.node_nics : t.nics_per_node,
           t.has_inter ? t.nics_per_node * t.inter.line_gbps * t.inter.efficiency : 0.0,
           algo ? ", FORCED algorithms " : "", algo ? algo : "");
    printf("# node: %s x%d %s, %s\n", t.intra.name,
           t.shape == ULSIM_SHAPE_MESH ? t.links_per_peer : t.links_per_gpu,
           t.shape == ULSIM_SHAPE_MESH ? "links/peer (mesh)"
                                       : t.shape == ULSIM_SHAPE_BUS ? "(PCIe bus)" : "links/GPU (switch)",
           t.description);
    if (t.assumed[0]) printf("# assumed: %s\n", t.assumed);
  }
  if (minb == maxb) {
    ulsim_cost_t c;
    if (ulsim_cost(&t, coll, minb, (int)ranks, algo, &c, err, sizeof err) != UL_OK) {
      fprintf(stderr, "unilink-model: %s\n", err);
      return 1;
    }
    if (json) {
      model_json_cost(&c, coll, (int)ranks, t.name);
      return 0;
    }
    char sz[32];
    model_fmt_size(minb, sz, sizeof sz);
    printf("size %s: %s/%s %.2f us, algbw %.2f GB/s, busbw %.2f GB/s\n", sz, c.algorithm,
           ulsim_proto_name(c.proto), c.time_us, c.algbw_gbps, c.busbw_gbps);
    printf("# %s\n", ulsim_cost_provenance(&c, prov, sizeof prov));
    printf("%-12s %-7s %12s %10s %10s %12s %4s %4s\n", "algorithm", "proto", "time us", "lat us",
           "algbw", "estimate us", "ch", "thr");
    for (int i = 0; i < c.ncand; i++) {
      printf("%-12s %-7s %12.2f %10.2f %10.2f %12.2f %4d %4d%s\n", c.cand[i].algorithm,
             ulsim_proto_name(c.cand[i].proto), c.cand[i].time_us, c.cand[i].lat_us,
             c.cand[i].algbw_gbps, c.cand[i].select_us, c.cand[i].nchannels, c.cand[i].nthreads,
             !strcmp(c.cand[i].algorithm, c.algorithm) && c.cand[i].proto == c.proto ? "  <- chosen"
                                                                                     : "");
      if (explain && c.cand[i].formula) printf("    formula: %s\n", c.cand[i].formula);
    }
    if (explain) {
      ulsim_bw_t bw = {0};
      if (ulsim_bandwidths(&t, (int)ranks, &bw, err, sizeof err) == UL_OK)
        printf("# constants: ring graph %.1f GB/s (%s x%d, line %.2f x eff %.3f), NVLS algbw %.1f, "
               "NICs %.1f GB/s, launch %.1f us; NCCL tables (2.30 src/graph/tuning.cc "
               "ncclTunerConstantsDefaults): baseLatencies, hwLatencies, llMaxBws, "
               "perChMax*Bws, treeCorrectionFactor; per-protocol factors LL x0.5, LL128 x0.92 "
               "(ring) / 7/9 (tree, 1 node), tree x0.92 (ncclTopoTuneModel); time = lat + "
               "bytes / (1000 algbw) (ncclTopoGetAlgoTime)\n",
               bw.ring, t.intra.name, t.links_per_gpu ? t.links_per_gpu : t.links_per_peer,
               t.intra.line_gbps, t.intra.efficiency, bw.nvls_alg, bw.inter, t.launch_us);
      char hm[768];
      if (*ulsim_host_memory_explain(&t, &bw, hm, sizeof hm)) printf("# %s\n", hm);
      printf("# channels: time = run on the channels (ch) and threads (thr) NCCL launches at "
             "this size (enqueue.cc topoGetAlgoInfo; channels from search.cc, connect.cc); "
             "estimate = NCCL's own all-channel estimate it chooses on\n");
      double est = 0;
      for (int i = 0; i < c.ncand; i++)
        if (!strcmp(c.cand[i].algorithm, c.algorithm) && c.cand[i].proto == c.proto)
          est = c.cand[i].select_us;
      printf("# why: %s/%s has the lowest estimate (%.2f us; modeled run %.2f us) among the %d "
             "candidates the %s enables here; direct/two_shot LL and 3-phase hier are not "
             "candidates (no library runs them on this system; --algo computes them as a "
             "diagnostic)\n",
             c.algorithm, ulsim_proto_name(c.proto), est, c.time_us, c.ncand, c.tuner);
    }
    return 0;
  }
  printf("%14s %12s %10s %10s  %s\n", "size(B)", "time(us)", "algbw", "busbw", "algorithm");
  /* the sweep's provenance is its least confident row's (a report labels the curve) */
  static ulsim_cost_t least;
  int nrows = 0;
  for (double b = minb; b <= maxb * 1.000001; b = b * fac) {
    static ulsim_cost_t c;
    if (ulsim_cost(&t, coll, b, (int)ranks, algo, &c, err, sizeof err) != UL_OK) {
      fprintf(stderr, "unilink-model: %s\n", err);
      return 1;
    }
    printf("%14.0f %12.2f %10.2f %10.2f  %s/%s\n", b, c.time_us, c.algbw_gbps, c.busbw_gbps,
           c.algorithm, ulsim_proto_name(c.proto));
    if (!nrows++ || model_conf_rank(c.confidence) < model_conf_rank(least.confidence)) least = c;
    if (b == 0) b = 1;
  }
  if (nrows) printf("# %s\n", ulsim_cost_provenance(&least, prov, sizeof prov));
  return 0;
}

/* ------------------------------------------------------------------ train */

typedef struct model_train_opts {
  ulsim_train_in_t in;
  const char **topos; /* --topology then every --compare name (no limit: one per preset) */
  int ntopo;
  char *cmp;          /* the --compare list, split in place; topos point into it */
  const char *plot;
  int json;
} model_train_opts_t;

static int model_train_parse(int argc, char **argv, model_train_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->in.grad_bytes = 2;
  o->in.bucket_bytes = 25.0 * 1024 * 1024;
  o->in.overlap = -1; /* derived from the bucket schedule */
  o->in.mfu = 0.45;
  o->in.gpu_tflops = 989;
  const char *s;
  double g = 0, z = 0;
  if (!(s = model_opt(argc, argv, "--params", NULL)) || model_num(s, "--params", &o->in.params))
    return fprintf(stderr, "unilink-model: train needs --params\n"), -1;
  if (!(s = model_opt(argc, argv, "--gpus", NULL)) || model_num(s, "--gpus", &g))
    return fprintf(stderr, "unilink-model: train needs --gpus\n"), -1;
  o->in.gpus = (int)g;
  if (!(s = model_opt(argc, argv, "--tokens-per-gpu", NULL)) ||
      model_num(s, "--tokens-per-gpu", &o->in.tokens_per_gpu))
    return fprintf(stderr, "unilink-model: train needs --tokens-per-gpu\n"), -1;
  if ((s = model_opt(argc, argv, "--gpu-tflops", NULL)) &&
      model_num(s, "--gpu-tflops", &o->in.gpu_tflops))
    return -1;
  if ((s = model_opt(argc, argv, "--mfu", NULL)) && model_num(s, "--mfu", &o->in.mfu)) return -1;
  if ((s = model_opt(argc, argv, "--zero", NULL))) {
    if (model_num(s, "--zero", &z)) return -1;
    o->in.zero = (int)z;
  }
  if ((s = model_opt(argc, argv, "--overlap", NULL)) && model_num(s, "--overlap", &o->in.overlap))
    return -1;
  double v;
  if ((s = model_opt(argc, argv, "--gpu-mem", NULL))) {
    if (model_num(s, "--gpu-mem", &o->in.gpu_mem_gb)) return -1;
  }
  if ((s = model_opt(argc, argv, "--tp", NULL))) {
    if (model_num(s, "--tp", &v) || v < 1 || v != floor(v))
      return fprintf(stderr, "unilink-model: --tp must be a whole number >= 1\n"), -1;
    o->in.tp = (int)v;
  }
  if ((s = model_opt(argc, argv, "--pp", NULL))) {
    if (model_num(s, "--pp", &v) || v < 1 || v != floor(v))
      return fprintf(stderr, "unilink-model: --pp must be a whole number >= 1\n"), -1;
    o->in.pp = (int)v;
  }
  for (int i = 0; i < argc; i++) o->json |= !strcmp(argv[i], "--json");
  if ((s = model_opt(argc, argv, "--grad-bytes", NULL)) &&
      model_num(s, "--grad-bytes", &o->in.grad_bytes))
    return -1;
  if ((s = model_opt(argc, argv, "--bucket", NULL))) {
    if (!strcmp(s, "all") || !strcmp(s, "0")) o->in.bucket_bytes = 0;
    else if (model_size(s, "--bucket", &o->in.bucket_bytes)) return -1;
  }
  const char *t = model_opt(argc, argv, "--topology", "-t");
  const char *c = model_opt(argc, argv, "--compare", NULL);
  size_t most = 2;
  for (const char *q = c; q && *q; q++) most += *q == ',';
  o->topos = calloc(most, sizeof *o->topos);
  o->cmp = c ? strdup(c) : NULL;
  if (!o->topos || (c && !o->cmp))
    return fprintf(stderr, "unilink-model: out of memory for --compare\n"), -1;
  if (t) o->topos[o->ntopo++] = t;
  char *save = NULL;
  for (char *p = o->cmp ? strtok_r(o->cmp, ",", &save) : NULL; p; p = strtok_r(NULL, ",", &save))
    if (!t || strcmp(p, t)) o->topos[o->ntopo++] = p;
  if (o->ntopo == 0) return fprintf(stderr, "unilink-model: train needs --topology\n"), -1;
  o->plot = model_opt(argc, argv, "--plot", NULL);
  return 0;
}

static int model_train_plot(const model_train_opts_t *o, const char *path) {
  char dat[1024], gp[1024];
  snprintf(dat, sizeof dat, "%s.dat", path);
  snprintf(gp, sizeof gp, "%s.gp", path);
  FILE *f = fopen(dat, "w");
  if (!f) return fprintf(stderr, "unilink-model: cannot write %s\n", dat), 1;
  fprintf(f, "# gpus");
  for (int k = 0; k < o->ntopo; k++) fprintf(f, " %s", o->topos[k]);
  fprintf(f, "\n");
  for (int g = 1; g <= (o->in.gpus > 8 ? o->in.gpus * 4 : 1024); g *= 2) {
    fprintf(f, "%d", g);
    for (int k = 0; k < o->ntopo; k++) {
      ulsim_topology_t t;
      ulsim_train_in_t in = o->in;
      ulsim_train_out_t out;
      char err[512];
      in.gpus = g;
      if (model_load_topo(o->topos[k], &t) || ulsim_train(&t, &in, &out, err, sizeof err))
        fprintf(f, " NaN");
      else
        fprintf(f, " %.4f", out.efficiency * 100);
    }
    fprintf(f, "\n");
  }
  fclose(f);
  f = fopen(gp, "w");
  if (!f) return fprintf(stderr, "unilink-model: cannot write %s\n", gp), 1;
  fprintf(f,
          "set terminal pngcairo size 900,560 noenhanced\nset output '%s'\n"
          "set title 'Modeled data-parallel scaling efficiency (%.3g params, %g tokens/GPU, "
          "MFU %.2f, bucket %.0f MiB, overlap %.2f)'\n"
          "set xlabel 'GPUs'\nset ylabel 'scaling efficiency (%%)'\nset logscale x 2\n"
          "set yrange [0:105]\nset grid\nset key bottom left\n",
          path, o->in.params, o->in.tokens_per_gpu, o->in.mfu, o->in.bucket_bytes / 1048576.0,
          o->in.overlap);
  fprintf(f, "plot ");
  for (int k = 0; k < o->ntopo; k++)
    fprintf(f, "%s'%s' using 1:%d with linespoints title '%s'", k ? ", " : "", dat, k + 2,
            o->topos[k]);
  fprintf(f, "\n");
  fclose(f);
  char cmd[2200];
  snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>/dev/null", gp);
  int rc = system(cmd);
  if (rc != 0) {
    /* pngcairo may be missing from gnuplot-nox: fall back to the plain png terminal */
    snprintf(cmd, sizeof cmd,
             "sed -i 's/^set terminal pngcairo/set terminal png/' '%s' && gnuplot '%s'", gp, gp);
    rc = system(cmd);
  }
  if (rc != 0) return fprintf(stderr, "unilink-model: gnuplot failed (data in %s)\n", dat), 1;
  printf("# plot written to %s (data %s)\n", path, dat);
  return 0;
}

static void model_train_free(model_train_opts_t *o) {
  free(o->topos);
  free(o->cmp);
}

static int model_train_run(model_train_opts_t *o);

static int model_cmd_train(int argc, char **argv) {
  model_train_opts_t o;
  int rc = model_train_parse(argc, argv, &o) || model_topo_params(argc, argv) ? 2
                                                                               : model_train_run(&o);
  model_train_free(&o);
  return rc;
}

static int model_train_run(model_train_opts_t *op) {
  model_train_opts_t o = *op;
  const ulsim_train_in_t *in = &o.in;
  char bucket_txt[48];
  if (in->bucket_bytes > 0) snprintf(bucket_txt, sizeof bucket_txt, "%g MiB", in->bucket_bytes / 1048576.0);
  else snprintf(bucket_txt, sizeof bucket_txt, "all (one collective)");
  if (o.json) {
    int rc = 0;
    printf("[");
    for (int k = 0; k < o.ntopo; k++) {
      ulsim_topology_t t;
      ulsim_train_out_t out;
      char err[1024];
      if (model_load_topo(o.topos[k], &t)) return 1;
      if (ulsim_train(&t, in, &out, err, sizeof err) != UL_OK) {
        fprintf(stderr, "unilink-model: %s: %s\n", o.topos[k], err);
        rc = 1;
        continue;
      }
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "topology", t.name);
      cJSON_AddNumberToObject(j, "params", in->params);
      cJSON_AddNumberToObject(j, "gpus", in->gpus);
      cJSON_AddNumberToObject(j, "dp", out.dp);
      cJSON_AddNumberToObject(j, "zero", in->zero);
      cJSON_AddNumberToObject(j, "grad_bytes_total", in->params * in->grad_bytes);
      cJSON_AddNumberToObject(j, "bucket_bytes", in->bucket_bytes);
      cJSON_AddNumberToObject(j, "buckets", out.nbuckets);
      cJSON_AddNumberToObject(j, "backward_share", out.backward_share);
      cJSON_AddNumberToObject(j, "mem_gb_per_gpu", out.mem_gb);
      cJSON_AddNumberToObject(j, "compute_s", out.compute_s);
      cJSON_AddNumberToObject(j, "comm_s", out.comm_s);
      cJSON_AddNumberToObject(j, "exposed_s", out.exposed_s);
      cJSON_AddNumberToObject(j, "overlap", out.overlap_used);
      cJSON_AddNumberToObject(j, "step_s", out.step_s);
      cJSON_AddNumberToObject(j, "efficiency", out.efficiency);
      cJSON_AddStringToObject(j, "algorithm", out.algorithm);
      cJSON_AddNumberToObject(j, "busbw_gbps", out.busbw_gbps);
      cJSON_AddStringToObject(j, "confidence", out.confidence);
      cJSON_AddStringToObject(j, "sources", out.sources);
      char *txt = cJSON_PrintUnformatted(j);
      printf("%s%s", k ? "," : "", txt ? txt : "{}");
      free(txt);
      cJSON_Delete(j);
    }
    printf("]\n");
    return rc;
  }
  char ov[48];
  if (in->overlap < 0) snprintf(ov, sizeof ov, "derived from the bucket schedule");
  else snprintf(ov, sizeof ov, "given %.2f", in->overlap);
  printf("# training step estimate: %.3g params, %d GPUs (tp %d, pp %d), %g tokens/GPU/step, "
         "%g TFLOP/s x MFU %.2f, %s, bucket %s, overlap %s\n",
         in->params, in->gpus, in->tp > 0 ? in->tp : 1, in->pp > 0 ? in->pp : 1,
         in->tokens_per_gpu, in->gpu_tflops, in->mfu,
         in->zero == 0 ? "DDP allreduce" : in->zero == 3 ? "ZeRO-3" : "ZeRO-1/2", bucket_txt, ov);
  printf("# assumptions: gradient bytes = params x %g = %.3g GB; backward = 2/3 of compute (4N of "
         "6N FLOPs/token, Kaplan et al. 2020); buckets ready evenly through backward, run one at "
         "a time; memory = params x 2 + grads x %g + optimizer x 12 bytes (ZeRO paper), "
         "activations not counted%s\n",
         in->grad_bytes, in->params * in->grad_bytes / 1e9, in->grad_bytes,
         in->gpu_mem_gb > 0 ? "" : " (give --gpu-mem GB to check)");
  printf("%-16s %10s %8s %11s %-10s %9s %11s %11s %10s %8s\n", "topology", "compute s",
         "buckets", "bucket ms", "algorithm", "busbw", "grad sync s", "exposed s", "step s",
         "eff %");
  int rc = 0;
  for (int k = 0; k < o.ntopo; k++) {
    ulsim_topology_t t;
    ulsim_train_out_t out;
    char err[1024];
    if (model_load_topo(o.topos[k], &t)) return 1;
    if (ulsim_train(&t, in, &out, err, sizeof err) != UL_OK) {
      fprintf(stderr, "unilink-model: %s: %s\n", o.topos[k], err);
      rc = 1;
      continue;
    }
    printf("%-16s %10.3f %8d %11.3f %-10s %9.1f %11.4f %11.4f %10.4f %8.2f\n", t.name,
           out.compute_s, out.nbuckets, out.bucket_us / 1e3, out.algorithm, out.busbw_gbps,
           out.comm_s, out.exposed_s, out.step_s, out.efficiency * 100);
    if (g_topo_params_set && strstr(t.description, "[given:"))
      printf("%-16s   node: %d ranks/node on %d GPUs/node, %d of %d x %s NICs; %s\n", "",
             t.gpus_per_node, t.node_gpus ? t.node_gpus : t.gpus_per_node, t.nics_per_node,
             t.node_nics ? t.node_nics : t.nics_per_node, t.has_inter ? t.inter.name : "-",
             strstr(t.description, "[given:"));
    printf("%-16s   memory %.1f GB/GPU (ZeRO-%d, dp %d), overlap %.0f%%, confidence %s%s\n", "",
           out.mem_gb, in->zero, out.dp, out.overlap_used * 100, out.confidence,
           !strcmp(out.confidence, "low") ? "\nWARNING: low confidence: rests on a single vendor "
                                            "claim or assumed link figures"
                                          : "");
  }
  /* gradient sync per bucket size, first topology */
  ulsim_topology_t t0;
  if (model_load_topo(o.topos[0], &t0)) return 1;
  printf("# gradient sync on %s by bucket size\n", t0.name);
  printf("%10s %8s %11s %9s %11s %11s %8s\n", "bucket", "buckets", "bucket ms", "busbw",
         "grad sync s", "exposed s", "eff %");
  const double buckets[] = {1, 4, 25, 100, 400, 0};
  for (size_t i = 0; i < sizeof buckets / sizeof buckets[0]; i++) {
    ulsim_train_in_t x = *in;
    x.bucket_bytes = buckets[i] * 1048576.0;
    ulsim_train_out_t out;
    char err[512], label[24];
    if (ulsim_train(&t0, &x, &out, err, sizeof err) != UL_OK) continue;
    if (buckets[i] > 0) snprintf(label, sizeof label, "%g MiB", buckets[i]);
    else snprintf(label, sizeof label, "all");
    printf("%10s %8d %11.3f %9.1f %11.4f %11.4f %8.2f\n", label, out.nbuckets,
           out.bucket_us / 1e3, out.busbw_gbps, out.comm_s, out.exposed_s, out.efficiency * 100);
  }
  if (o.plot && model_train_plot(&o, o.plot)) rc = 1;
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
    return model_usage(argc < 2 ? stderr : stdout) == 2 && argc < 2 ? 2 : 0;
  char err[1024];
  if (ulsim_catalog_load_default(&g_cat, err, sizeof err) != UL_OK) {
    fprintf(stderr, "unilink-model: %s\n", err);
    return 1;
  }
  const char *cmd = argv[1];
  int rc;
  if (!strcmp(cmd, "links")) rc = model_cmd_links();
  else if (!strcmp(cmd, "topologies")) rc = model_cmd_topologies();
  else if (!strcmp(cmd, "collective")) rc = model_cmd_collective(argc - 2, argv + 2);
  else if (!strcmp(cmd, "train")) rc = model_cmd_train(argc - 2, argv + 2);
  else if (!strcmp(cmd, "calibrate")) rc = model_cmd_calibrate(argc - 2, argv + 2);
  else if (!strcmp(cmd, "validate")) rc = model_cmd_validate(argc - 2, argv + 2);
  else {
    fprintf(stderr, "unilink-model: unknown command '%s'\n", cmd);
    rc = model_usage(stderr);
  }
  ulsim_catalog_free(&g_cat);
  return rc;
}
