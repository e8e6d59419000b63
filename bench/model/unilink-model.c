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

#include "sim_model.h"

static ulsim_catalog_t g_cat;

static int model_usage(FILE *f) {
  fprintf(f,
          "usage: unilink-model <command> [options]\n"
          "  links                               the link catalog, with sources\n"
          "  topologies                          topology presets, with sources\n"
          "  collective <coll> --topology T (--bytes B | -b MIN -e MAX [-f F]) [--ranks N]\n"
          "             [--algo a,b] [--model-only]    modeled time, algbw, busbw, candidates\n"
          "  train --params N --gpus G --topology T --tokens-per-gpu K --gpu-tflops F --mfu M\n"
          "        [--zero 0..3] [--bucket 25MB|all] [--overlap 0..1] [--grad-bytes 2]\n"
          "        [--compare T1,T2,...] [--plot FILE.png]\n"
          "  calibrate FILE.json --topology T [--out FILE] [--name NAME]\n"
          "  validate [DIR]                      model vs published measurements\n"
          "collectives: allreduce broadcast reduce allgather reduce_scatter alltoall gather\n"
          "             scatter barrier sendrecv. Sizes: 8, 64K, 1G, 25MB (binary suffixes).\n"
          "Data folder: $UNILINK_DATA_DIR, else the source tree or install prefix.\n");
  return 2;
}

static const char *model_coll_names[UL_COLL_COUNT] = {
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
    "alltoall",  "gather",    "scatter", "barrier",  "sendrecv"};

static int model_coll_parse(const char *s, ul_coll_t *c) {
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
static const char *model_opt(int argc, char **argv, const char *name, const char *alt) {
  for (int i = 0; i < argc - 1; i++)
    if (!strcmp(argv[i], name) || (alt && !strcmp(argv[i], alt))) return argv[i + 1];
  return NULL;
}

static int model_num(const char *text, const char *what, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !isfinite(v)) {
    fprintf(stderr, "unilink-model: %s: '%s' is not a number\n", what, text);
    return -1;
  }
  *out = v;
  return 0;
}

static int model_size(const char *text, const char *what, double *out) {
  if (ulsim_parse_size(text, out)) {
    fprintf(stderr, "unilink-model: %s: '%s' is not a size (examples: 8, 64K, 1G, 25MB)\n", what,
            text);
    return -1;
  }
  return 0;
}

static int model_load_topo(const char *spec, ulsim_topology_t *t) {
  char err[1024];
  if (ulsim_topology_load(spec, &g_cat, t, err, sizeof err) != UL_OK) {
    fprintf(stderr, "unilink-model: %s\n", err);
    return -1;
  }
  return 0;
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
  printf("%-15s %5s %-34s %-16s %9s %9s  %s\n", "name", "GPUs", "scale-up", "scale-out",
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
    printf("%-15s %5d %-34s %-16s %9.1f %9.1f  %s\n", t.name, t.gpus_per_node * t.nodes, up, out,
           bw.ring, t.has_inter ? t.nics_per_node * t.inter.line_gbps * t.inter.efficiency : 0,
           t.description);
    printf("%-15s       sources: %s\n", "", t.sources[0] ? t.sources : "(none given)");
  }
  printf("# <preset>x<N>: N nodes of a preset over its NICs (e.g. dgx-h100x8)\n");
  return 0;
}

/* ------------------------------------------------------------------ collective */

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
  if (model_load_topo(tspec, &t)) return 1;
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
  char err[1024];
  printf("# modeled (no data moved): %s on %s, %d ranks%s%s\n", model_coll_names[coll], t.name,
         (int)ranks, algo ? ", algorithms " : "", algo ? algo : "");
  if (minb == maxb) {
    ulsim_cost_t c;
    if (ulsim_cost(&t, coll, minb, (int)ranks, algo, &c, err, sizeof err) != UL_OK) {
      fprintf(stderr, "unilink-model: %s\n", err);
      return 1;
    }
    char sz[32];
    model_fmt_size(minb, sz, sizeof sz);
    printf("size %s: %s/%s %.2f us, algbw %.2f GB/s, busbw %.2f GB/s\n", sz, c.algorithm,
           ulsim_proto_name(c.proto), c.time_us, c.algbw_gbps, c.busbw_gbps);
    printf("%-10s %-7s %12s\n", "algorithm", "proto", "time us");
    for (int i = 0; i < c.ncand; i++)
      printf("%-10s %-7s %12.2f%s\n", c.cand[i].algorithm, ulsim_proto_name(c.cand[i].proto),
             c.cand[i].time_us,
             !strcmp(c.cand[i].algorithm, c.algorithm) && c.cand[i].proto == c.proto ? "  <- chosen"
                                                                                     : "");
    return 0;
  }
  printf("%14s %12s %10s %10s  %s\n", "size(B)", "time(us)", "algbw", "busbw", "algorithm");
  for (double b = minb; b <= maxb * 1.000001; b = b * fac) {
    ulsim_cost_t c;
    if (ulsim_cost(&t, coll, b, (int)ranks, algo, &c, err, sizeof err) != UL_OK) {
      fprintf(stderr, "unilink-model: %s\n", err);
      return 1;
    }
    printf("%14.0f %12.2f %10.2f %10.2f  %s/%s\n", b, c.time_us, c.algbw_gbps, c.busbw_gbps,
           c.algorithm, ulsim_proto_name(c.proto));
    if (b == 0) b = 1;
  }
  return 0;
}

/* ------------------------------------------------------------------ train */

typedef struct model_train_opts {
  ulsim_train_in_t in;
  const char *topos[16];
  int ntopo;
  const char *plot;
} model_train_opts_t;

static int model_train_parse(int argc, char **argv, model_train_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->in.grad_bytes = 2;
  o->in.bucket_bytes = 25.0 * 1024 * 1024;
  o->in.overlap = 0;
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
  if ((s = model_opt(argc, argv, "--grad-bytes", NULL)) &&
      model_num(s, "--grad-bytes", &o->in.grad_bytes))
    return -1;
  if ((s = model_opt(argc, argv, "--bucket", NULL))) {
    if (!strcmp(s, "all") || !strcmp(s, "0")) o->in.bucket_bytes = 0;
    else if (model_size(s, "--bucket", &o->in.bucket_bytes)) return -1;
  }
  const char *t = model_opt(argc, argv, "--topology", "-t");
  if (t) o->topos[o->ntopo++] = t;
  static char cmp[1024];
  if ((s = model_opt(argc, argv, "--compare", NULL))) {
    snprintf(cmp, sizeof cmp, "%s", s);
    for (char *p = strtok(cmp, ","); p && o->ntopo < 16; p = strtok(NULL, ","))
      if (!t || strcmp(p, t)) o->topos[o->ntopo++] = p;
  }
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

static int model_cmd_train(int argc, char **argv) {
  model_train_opts_t o;
  if (model_train_parse(argc, argv, &o)) return 2;
  const ulsim_train_in_t *in = &o.in;
  char bucket_txt[48];
  if (in->bucket_bytes > 0) snprintf(bucket_txt, sizeof bucket_txt, "%g MiB", in->bucket_bytes / 1048576.0);
  else snprintf(bucket_txt, sizeof bucket_txt, "all (one collective)");
  printf("# training step estimate: %.3g params, %d GPUs, %g tokens/GPU/step, %g TFLOP/s x MFU "
         "%.2f, %s, bucket %s, overlap %.2f\n",
         in->params, in->gpus, in->tokens_per_gpu, in->gpu_tflops, in->mfu,
         in->zero == 0 ? "DDP allreduce" : in->zero == 3 ? "ZeRO-3" : "ZeRO-1/2", bucket_txt,
         in->overlap);
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

/* ------------------------------------------------------------------ calibrate */

typedef struct model_point {
  double size, time_us, busbw;
} model_point_t;

static char *model_read(const char *path) {
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

static double model_calib_error(const ulsim_topology_t *t, ul_coll_t coll, int ranks,
                                const model_point_t *pts, int n) {
  double e = 0;
  for (int i = 0; i < n; i++) {
    ulsim_cost_t c;
    char err[64];
    if (ulsim_cost(t, coll, pts[i].size, ranks, NULL, &c, err, sizeof err)) return INFINITY;
    double r = log(c.time_us / pts[i].time_us);
    e += r * r;
  }
  return e;
}

static int model_cmd_calibrate(int argc, char **argv) {
  if (argc < 1 || argv[0][0] == '-') return model_usage(stderr);
  const char *path = argv[0];
  const char *tspec = model_opt(argc, argv, "--topology", "-t");
  if (!tspec) {
    fprintf(stderr, "unilink-model: calibrate needs --topology (the preset to start from)\n");
    return 2;
  }
  ulsim_topology_t t;
  if (model_load_topo(tspec, &t)) return 1;
  char *text = model_read(path);
  if (!text) {
    fprintf(stderr, "unilink-model: cannot read %s\n", path);
    return 1;
  }
  cJSON *root = cJSON_Parse(text);
  free(text);
  if (!root) {
    fprintf(stderr, "unilink-model: %s: malformed JSON\n", path);
    return 1;
  }
  int rc = 1;
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
  const cJSON *op = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "operation") : NULL;
  const cJSON *rk = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "ranks") : NULL;
  const cJSON *devs = cJSON_GetObjectItemCaseSensitive(root, "devices");
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "results");
  ul_coll_t coll = UL_COLL_ALLREDUCE;
  if (cJSON_IsString(op) && model_coll_parse(op->valuestring, &coll)) {
    fprintf(stderr, "unilink-model: %s: config.operation '%s' is not a collective\n", path,
            op->valuestring);
    goto out;
  }
  int ranks = cJSON_IsNumber(rk) ? rk->valueint : cJSON_IsArray(devs) ? cJSON_GetArraySize(devs) : 0;
  const char *s = model_opt(argc, argv, "--ranks", NULL);
  if (s) ranks = atoi(s);
  if (ranks < 2) {
    fprintf(stderr, "unilink-model: %s: rank count unknown (config.ranks or devices[]); give "
                    "--ranks\n", path);
    goto out;
  }
  if (!cJSON_IsArray(res) || cJSON_GetArraySize(res) == 0) {
    fprintf(stderr, "unilink-model: %s: no \"results\" array (nccl-tests -J v3 shape expected)\n",
            path);
    goto out;
  }
  model_point_t pts[256];
  int n = 0;
  const cJSON *r;
  cJSON_ArrayForEach(r, res) {
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(r, "size");
    const cJSON *oop = cJSON_GetObjectItemCaseSensitive(r, "out_of_place");
    const cJSON *tm = cJSON_IsObject(oop) ? cJSON_GetObjectItemCaseSensitive(oop, "time") : NULL;
    if (!cJSON_IsNumber(sz) || !cJSON_IsNumber(tm) || tm->valuedouble <= 0 || n >= 256) continue;
    pts[n].size = sz->valuedouble;
    pts[n].time_us = tm->valuedouble;
    n++;
  }
  if (n < 2) {
    fprintf(stderr, "unilink-model: %s: need at least 2 results with size and out_of_place.time\n",
            path);
    goto out;
  }
  /* Fit beta (efficiency of the bottleneck link) and alpha (launch overhead) by
   * minimising the squared log error of time over all sizes: a log grid, then a finer
   * one around the best point. */
  ulsim_bw_t bw;
  char err[512];
  if (ulsim_bandwidths(&t, ranks, &bw, err, sizeof err)) {
    fprintf(stderr, "unilink-model: %s\n", err);
    goto out;
  }
  int fit_inter = bw.nnodes > 1 && bw.inter < bw.ring;
  double *eff = fit_inter ? &t.inter.efficiency : &t.intra.efficiency;
  double e0 = *eff, a0 = t.launch_us;
  double best = INFINITY, be = e0, ba = a0;
  double elo = 0.01, ehi = 1.5, alo = 0, ahi = 2000;
  for (int pass = 0; pass < 3; pass++) {
    for (int i = 0; i <= 40; i++)
      for (int j = 0; j <= 40; j++) {
        double e = elo * pow(ehi / elo, i / 40.0);
        double a = alo + (ahi - alo) * j / 40.0;
        *eff = e;
        t.launch_us = a;
        double err2 = model_calib_error(&t, coll, ranks, pts, n);
        if (err2 < best) best = err2, be = e, ba = a;
      }
    elo = be / 1.3, ehi = be * 1.3 > 1.5 ? 1.5 : be * 1.3;
    double span = (ahi - alo) / 20;
    alo = ba - span < 0 ? 0 : ba - span, ahi = ba + span;
  }
  *eff = be;
  t.launch_us = ba;
  t.calibrated = 1;
  const char *name = model_opt(argc, argv, "--name", NULL);
  char nm[ULSIM_NAME_MAX];
  snprintf(nm, sizeof nm, "%.48s-calibrated", t.name);
  snprintf(t.name, sizeof t.name, "%s", name ? name : nm);
  char src[1600];
  snprintf(src, sizeof src, "%.1000s; calibrated to %.400s (%s, %d ranks, %d sizes)", t.sources, path,
           model_coll_names[coll], ranks, n);
  snprintf(t.sources, sizeof t.sources, "%.1000s", src);
  fprintf(stderr,
          "# calibrated %s link efficiency %.4f -> %.4f, launch %.2f -> %.2f us; rms log error "
          "%.3f over %d sizes\n",
          fit_inter ? "inter-node" : "intra-node", e0, be, a0, ba, sqrt(best / n), n);
  const char *outp = model_opt(argc, argv, "--out", "-o");
  FILE *f = outp ? fopen(outp, "w") : stdout;
  if (!f) {
    fprintf(stderr, "unilink-model: cannot write %s\n", outp);
    goto out;
  }
  rc = ulsim_topology_write(&t, f) == UL_OK ? 0 : 1;
  if (outp) {
    fclose(f);
    fprintf(stderr, "# wrote %s (use it as --topology %s)\n", outp, outp);
  }
out:
  cJSON_Delete(root);
  return rc;
}

/* ------------------------------------------------------------------ validate */

static int model_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double model_median(double *v, int n) {
  if (n == 0) return NAN;
  qsort(v, (size_t)n, sizeof *v, model_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int model_cmd_validate(int argc, char **argv) {
  const char *dir = argc > 0 && argv[0][0] != '-' ? argv[0] : NULL;
  char defdir[1024];
  if (!dir) {
    snprintf(defdir, sizeof defdir, "%s", UNILINK_VALIDATION_DIR);
    dir = defdir;
  }
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "unilink-model: cannot open validation folder %s\n", dir);
    return 1;
  }
  char files[256][256];
  int nf = 0;
  struct dirent *e;
  while ((e = readdir(d)) && nf < 256) {
    size_t l = strlen(e->d_name);
    if (l > 5 && !strcmp(e->d_name + l - 5, ".json") && l < 256)
      snprintf(files[nf++], sizeof files[0], "%s", e->d_name);
  }
  closedir(d);
  qsort(files, (size_t)nf, sizeof files[0], (int (*)(const void *, const void *))strcmp);
  static double big[4096], mid[4096], small[4096];
  int nbig = 0, nmid = 0, nsmall = 0, bad = 0;
  printf("%-34s %-16s %5s %-10s %12s %9s %9s %8s\n", "dataset", "topology", "ranks", "algorithm",
         "size(B)", "measured", "modeled", "error");
  for (int i = 0; i < nf; i++) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    char *text = model_read(path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!root) {
      fprintf(stderr, "unilink-model: %s: unreadable or malformed JSON\n", path);
      bad = 1;
      continue;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    const cJSON *topo = cJSON_GetObjectItemCaseSensitive(root, "topology");
    const cJSON *collj = cJSON_GetObjectItemCaseSensitive(root, "collective");
    const cJSON *rk = cJSON_GetObjectItemCaseSensitive(root, "ranks");
    const cJSON *algos = cJSON_GetObjectItemCaseSensitive(root, "algos");
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source");
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(root, "points");
    ul_coll_t coll;
    ulsim_topology_t t;
    if (!cJSON_IsString(name) || !cJSON_IsString(topo) || !cJSON_IsString(collj) ||
        !cJSON_IsNumber(rk) || !cJSON_IsString(src) || !cJSON_IsArray(pts) ||
        model_coll_parse(collj->valuestring, &coll) || model_load_topo(topo->valuestring, &t)) {
      fprintf(stderr,
              "unilink-model: %s: needs name, topology, collective, ranks, source, points\n",
              path);
      bad = 1;
      cJSON_Delete(root);
      continue;
    }
    const char *force = cJSON_IsString(algos) ? algos->valuestring : NULL;
    const cJSON *p;
    cJSON_ArrayForEach(p, pts) {
      const cJSON *sz = cJSON_GetArrayItem(p, 0), *bwj = cJSON_GetArrayItem(p, 1);
      if (!cJSON_IsNumber(sz) || !cJSON_IsNumber(bwj)) continue;
      ulsim_cost_t c;
      char err[512];
      if (ulsim_cost(&t, coll, sz->valuedouble, rk->valueint, force, &c, err, sizeof err)) {
        fprintf(stderr, "unilink-model: %s: %s\n", path, err);
        bad = 1;
        break;
      }
      double errp = (c.busbw_gbps - bwj->valuedouble) / bwj->valuedouble * 100;
      double a = fabs(errp);
      const char *bucket = sz->valuedouble >= 64.0 * 1048576 ? "" : sz->valuedouble >= 65536 ? "" : " (small)";
      if (sz->valuedouble >= 64.0 * 1048576) big[nbig++] = a;
      else if (sz->valuedouble >= 65536) mid[nmid++] = a;
      else small[nsmall++] = a;
      printf("%-34.34s %-16.16s %5d %-10s %12.0f %9.2f %9.2f %+7.1f%%%s\n", name->valuestring,
             t.name, rk->valueint, c.algorithm, sz->valuedouble, bwj->valuedouble, c.busbw_gbps,
             errp, bucket);
      if (nbig >= 4096 || nmid >= 4096 || nsmall >= 4096) break;
    }
    cJSON_Delete(root);
  }
  double mb = model_median(big, nbig), mm = model_median(mid, nmid);
  printf("# median |error| of busbw: sizes >= 64 MiB: %.1f%% over %d points (target 15%%)\n", mb,
         nbig);
  printf("# median |error| of busbw: 64 KiB .. 64 MiB: %.1f%% over %d points (target 35%%)\n", mm,
         nmid);
  if (nsmall)
    printf("# (%d points below 64 KiB shown, not scored; median %.1f%%)\n", nsmall,
           model_median(small, nsmall));
  int ok = !bad && nbig > 0 && nmid > 0 && mb <= 15.0 && mm <= 35.0;
  printf("# validation %s\n", ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
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
