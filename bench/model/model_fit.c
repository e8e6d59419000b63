/* unilink-model calibrate and validate: the model against measured runs. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_cli.h"
#include "model_fit.h"

/* ------------------------------------------------------------------ calibrate */

typedef struct model_point {
  double size, time_us, busbw;
} model_point_t;

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

/* The measured collective. nccl-tests -J output (src/util.cu) has no collective field:
 * args[0] names the test binary (all_reduce_perf, ...). unilink-bench's -J output has the
 * same shape with args[0] = unilink-bench, the collective as a positional argument and
 * in config.operation. */
static int model_calib_coll(const cJSON *root, ul_coll_t *coll, char *why, size_t n) {
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(root, "args");
  const cJSON *a0 = cJSON_IsArray(args) ? cJSON_GetArrayItem(args, 0) : NULL;
  if (!cJSON_IsString(a0)) {
    snprintf(why, n, "no \"args\" list naming the benchmark (nccl-tests >= 2.17 or "
                     "unilink-bench -J output expected)");
    return -1;
  }
  const char *b = strrchr(a0->valuestring, '/');
  b = b ? b + 1 : a0->valuestring;
  char nm[64];
  snprintf(nm, sizeof nm, "%s", b);
  char *suf = strstr(nm, "_perf");
  if (suf) *suf = 0;
  if (suf && !model_coll_parse(nm, coll)) return 0;
  if (!strcmp(nm, "unilink-bench")) {
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(cfg, "operation");
    if (cJSON_IsString(op) && !model_coll_parse(op->valuestring, coll)) return 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, args) {
      if (x != a0 && cJSON_IsString(x) && !model_coll_parse(x->valuestring, coll)) return 0;
    }
    snprintf(why, n, "unilink-bench run without a collective in config.operation or its args");
    return -1;
  }
  snprintf(why, n, "binary '%.60s' is neither an nccl-tests collective (all_reduce_perf, "
                   "all_gather_perf, ...) nor unilink-bench", b);
  return -1;
}

static int model_json_int(const cJSON *o, const char *key, int dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) && v->valueint > 0 ? v->valueint : dflt;
}

/* Ranks of the run: unilink-bench's config.ranks; else nccl-tests 2.19's config.devices,
 * one entry per process (util.cu keeps each process's first "Using devices" line), each
 * process running nthreads x ngpus ranks; else a top-level "devices" list, one per rank
 * (files of older versions). 0 when none says. */
static int model_calib_ranks(const cJSON *root) {
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
  int r = model_json_int(cfg, "ranks", 0);
  if (r) return r;
  const cJSON *devs = cJSON_GetObjectItemCaseSensitive(cfg, "devices");
  if (cJSON_IsArray(devs) && cJSON_GetArraySize(devs) > 0)
    return cJSON_GetArraySize(devs) * model_json_int(cfg, "nthreads", 1) *
           model_json_int(cfg, "ngpus", 1);
  devs = cJSON_GetObjectItemCaseSensitive(root, "devices");
  return cJSON_IsArray(devs) ? cJSON_GetArraySize(devs) : 0;
}

int model_cmd_calibrate(int argc, char **argv) {
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
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "results");
  const char *want_s = model_opt(argc, argv, "--collective", "-c");
  ul_coll_t want = UL_COLL_ALLREDUCE, coll;
  char why[512];
  if (want_s && model_coll_parse(want_s, &want)) {
    fprintf(stderr, "unilink-model: --collective '%s' is not a collective\n", want_s);
    goto out;
  }
  if (model_calib_coll(root, &coll, why, sizeof why)) {
    fprintf(stderr, "unilink-model: %s: %s\n", path, why);
    goto out;
  }
  if (coll != want) {
    fprintf(stderr, "unilink-model: %s: measured %s, but calibrating %s: refusing (give "
                    "--collective %s to calibrate that collective)\n", path,
            model_coll_names[coll], model_coll_names[want], model_coll_names[coll]);
    goto out;
  }
  int ranks = model_calib_ranks(root);
  const char *s = model_opt(argc, argv, "--ranks", NULL);
  if (s && model_whole(s, "--ranks", 2, 1 << 24, &ranks)) goto out;
  if (ranks < 2) {
    fprintf(stderr, "unilink-model: %s: rank count unknown (no config.ranks, config.devices or "
                    "devices); give --ranks\n", path);
    goto out;
  }
  if (!cJSON_IsArray(res) || cJSON_GetArraySize(res) == 0) {
    fprintf(stderr, "unilink-model: %s: no \"results\" array (nccl-tests -J v3 shape expected)\n",
            path);
    goto out;
  }
  /* unilink-bench side by side writes one results list with a "backend" per entry: fit
   * one backend, --backend or the file's first */
  const char *backend = model_opt(argc, argv, "--backend", NULL);
  if (!backend) {
    const cJSON *first = cJSON_GetArrayItem(res, 0);
    const cJSON *fb = cJSON_GetObjectItemCaseSensitive(first, "backend");
    backend = cJSON_IsString(fb) ? fb->valuestring : NULL;
  }
  model_point_t pts[256];
  int n = 0;
  const cJSON *r;
  cJSON_ArrayForEach(r, res) {
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(r, "size");
    const cJSON *oop = cJSON_GetObjectItemCaseSensitive(r, "out_of_place");
    const cJSON *tm = cJSON_IsObject(oop) ? cJSON_GetObjectItemCaseSensitive(oop, "time") : NULL;
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(r, "backend");
    if (backend && cJSON_IsString(rb) && strcmp(rb->valuestring, backend)) continue;
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

/* Per-system error lists for the leave-one-system-out table. */
#define MODEL_MAX_SYS 64
typedef struct model_sys_err {
  char name[64];
  double band[3][512];
  int n[3];
} model_sys_err_t;

static int model_band(double size) { return size < 65536 ? 0 : size < 64.0 * 1048576 ? 1 : 2; }

/* Free choice by default: the model picks algorithm and protocol as the user gets them.
 * --forced restricts each file to the algorithms it says were measured (diagnostic). */
int model_cmd_validate(int argc, char **argv) {
  const char *dir = argc > 0 && argv[0][0] != '-' ? argv[0] : NULL;
  int forced = 0, strict = 0;
  for (int i = 0; i < argc; i++) {
    forced |= !strcmp(argv[i], "--forced");
    strict |= !strcmp(argv[i], "--strict");
  }
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
  static double all[3][4096];
  static model_sys_err_t sys[MODEL_MAX_SYS];
  int nall[3] = {0, 0, 0}, nsys = 0, bad = 0;
  printf("# model vs published measurements, %s\n",
         forced ? "FORCED to each file's measured algorithm (diagnostic, not the model's accuracy)"
                : "the model's own algorithm choice (as collective/train/bench/sim use it)");
  printf("%-34s %-16s %5s %-15s %12s %9s %9s %8s\n", "dataset", "topology", "ranks",
         "algorithm", "size(B)", "measured", "modeled", "error");
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
    /* one system = one topology preset */
    int si = 0;
    while (si < nsys && strcmp(sys[si].name, t.name)) si++;
    if (si == nsys && nsys < MODEL_MAX_SYS) {
      memset(&sys[nsys], 0, sizeof sys[nsys]);
      snprintf(sys[nsys].name, sizeof sys[nsys].name, "%s", t.name);
      nsys++;
    }
    const char *force = forced && cJSON_IsString(algos) ? algos->valuestring : NULL;
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
      int b = model_band(sz->valuedouble);
      if (nall[b] < 4096) all[b][nall[b]++] = fabs(errp);
      if (si < MODEL_MAX_SYS && sys[si].n[b] < 512) sys[si].band[b][sys[si].n[b]++] = fabs(errp);
      char al[40];
      snprintf(al, sizeof al, "%s/%s", c.algorithm, ulsim_proto_name(c.proto));
      printf("%-34.34s %-16.16s %5d %-15s %12.0f %9.2f %9.2f %+7.1f%%\n", name->valuestring,
             t.name, rk->valueint, al, sz->valuedouble, bwj->valuedouble, c.busbw_gbps, errp);
    }
    cJSON_Delete(root);
  }
  static const char *bands[3] = {"< 64 KiB", "64 KiB .. 64 MiB", ">= 64 MiB"};
  static const double target[3] = {35.0, 20.0, 15.0};
  int ok = !bad;
  double med[3];
  for (int b = 0; b < 3; b++) {
    double tmp[4096];
    memcpy(tmp, all[b], sizeof(double) * (size_t)nall[b]);
    med[b] = model_median(tmp, nall[b]);
    if (nall[b] == 0)
      printf("# band %-17s: no measured points in the data (not scored; target %.0f%%)\n",
             bands[b], target[b]);
    else
      printf("# band %-17s: median |error| of busbw %.1f%% over %d points (target <= %.0f%%) "
             "%s\n",
             bands[b], med[b], nall[b], target[b], med[b] <= target[b] ? "met" : "MISSED");
    if (nall[b] && med[b] > target[b]) ok = 0;
  }
  /* Leave-one-system-out: the model has no parameter fitted to these files (constants
   * come from NCCL's tuner and links.json sources), so the calibration step on the other
   * systems changes nothing and each held-out system's error equals its plain error. */
  printf("# in-sample caveat: links.json nvlink5 efficiency (0.77) cites the Azure ND GB200 v6 "
         "8 GiB point; the dgx-b200 row at >= 64 MiB is therefore not held out\n");
  printf("# leave-one-system-out: calibration step = none (first-principles model: no "
         "parameter is fitted to bench/validation/; links.json figures are vendor/source "
         "values), so each held-out result equals the plain result\n");
  printf("%-18s %22s %22s %22s\n", "held-out system", bands[0], bands[1], bands[2]);
  for (int s = 0; s < nsys; s++) {
    printf("%-18.18s", sys[s].name);
    for (int b = 0; b < 3; b++) {
      char cell[40];
      if (sys[s].n[b] == 0) snprintf(cell, sizeof cell, "-");
      else snprintf(cell, sizeof cell, "%.1f%% (%d pts)", model_median(sys[s].band[b], sys[s].n[b]),
                    sys[s].n[b]);
      printf(" %22s", cell);
    }
    printf("\n");
  }
  printf("# targets %s%s\n", ok ? "met" : "NOT met (reported, not tuned away)",
         forced ? " (forced diagnostic)" : "");
  /* Exit status: bad data always fails; missed targets only with --strict, so the numbers
   * are printed and tracked without the model being fitted to pass. */
  return bad || (strict && !ok) ? 1 : 0;
}

