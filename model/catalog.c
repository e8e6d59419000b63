/* Link catalog and topology files (JSON, parsed with cJSON). Every error names the
 * file, the entry and the field, so a user editing a topology finds the problem. */
#include "ul_model.h"
#include "model_err.h"
#include "topology_shape.h"
#include "host_memory.h"
#include "assumed_list.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef UNILINK_SOURCE_DATA_DIR
#define UNILINK_SOURCE_DATA_DIR ""
#endif
#ifndef UNILINK_INSTALL_DATA_DIR
#define UNILINK_INSTALL_DATA_DIR "/usr/local/share/unilink"
#endif


static int sim_catalog_has_links(const char *dir) {
  char p[1024];
  struct stat st;
  if (!dir || !*dir) return 0;
  snprintf(p, sizeof p, "%s/links.json", dir);
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

const char *ulsim_data_dir(char *buf, size_t len, char *err, size_t errlen) {
  const char *env = getenv("UNILINK_DATA_DIR");
  if (env && *env) {
    if (!sim_catalog_has_links(env)) {
      ulsim__err(err, errlen, "UNILINK_DATA_DIR=%s has no links.json", env);
      return NULL;
    }
    snprintf(buf, len, "%s", env);
    return buf;
  }
  const char *cands[] = {UNILINK_SOURCE_DATA_DIR, UNILINK_INSTALL_DATA_DIR};
  for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
    if (sim_catalog_has_links(cands[i])) {
      snprintf(buf, len, "%s", cands[i]);
      return buf;
    }
  }
  ulsim__err(err, errlen,
                  "no link catalog found: set UNILINK_DATA_DIR to the folder holding links.json "
                  "(looked in '%s' and '%s')",
                  UNILINK_SOURCE_DATA_DIR, UNILINK_INSTALL_DATA_DIR);
  return NULL;
}

static char *sim_catalog_read_file(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    ulsim__err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 14, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    size_t r = fread(buf + n, 1, cap - n - 1, f);
    n += r;
    if (r == 0) break;
    if (n + 1 >= cap) {
      if (cap > (64u << 20)) {  // a topology file is small; refuse absurd inputs
        free(buf);
        buf = NULL;
        ulsim__err(err, errlen, "%s: file larger than 64 MiB", path);
        fclose(f);
        return NULL;
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (!buf) {
    ulsim__err(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  buf[n] = 0;
  return buf;
}

/* Line number of a byte offset, for parse errors. */
static int sim_catalog_line_of(const char *text, const char *at) {
  int line = 1;
  for (const char *p = text; p && at && p < at && *p; p++)
    if (*p == '\n') line++;
  return line;
}

static cJSON *sim_catalog_parse_json(const char *text, const char *origin, char *err,
                                     size_t errlen) {
  cJSON *root = cJSON_ParseWithOpts(text, NULL, 0);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    ulsim__err(err, errlen, "%s:%d: malformed JSON near '%.20s'", origin,
                    sim_catalog_line_of(text, at), at ? at : "");
    return NULL;
  }
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    ulsim__err(err, errlen, "%s: top level must be a JSON object", origin);
    return NULL;
  }
  return root;
}

/* Field readers: missing optional fields keep *out; wrong types are errors. */
static int sim_catalog_get_num(const cJSON *obj, const char *field, int required, double lo,
                               double hi, double *out, const char *where, char *err,
                               size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
  if (!v) {
    if (required) {
      ulsim__err(err, errlen, "%s: missing field \"%s\"", where, field);
      return -1;
    }
    return 0;
  }
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
    ulsim__err(err, errlen, "%s: field \"%s\" must be a number", where, field);
    return -1;
  }
  if (v->valuedouble < lo || v->valuedouble > hi) {
    ulsim__err(err, errlen, "%s: field \"%s\" = %g is out of range [%g, %g]", where, field,
                    v->valuedouble, lo, hi);
    return -1;
  }
  *out = v->valuedouble;
  return 0;
}

static int sim_catalog_get_int(const cJSON *obj, const char *field, int required, int lo, int hi,
                               int *out, const char *where, char *err, size_t errlen) {
  double d = *out;
  if (sim_catalog_get_num(obj, field, required, lo, hi, &d, where, err, errlen)) return -1;
  if (d != floor(d)) {
    ulsim__err(err, errlen, "%s: field \"%s\" must be an integer (got %g)", where, field, d);
    return -1;
  }
  *out = (int)d;
  return 0;
}

static int sim_catalog_get_str(const cJSON *obj, const char *field, int required, char *out,
                               size_t outlen, const char *where, char *err, size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
  if (!v) {
    if (required) {
      ulsim__err(err, errlen, "%s: missing field \"%s\"", where, field);
      return -1;
    }
    return 0;
  }
  if (!cJSON_IsString(v) || !v->valuestring) {
    ulsim__err(err, errlen, "%s: field \"%s\" must be a string", where, field);
    return -1;
  }
  if (required && !*v->valuestring) {
    ulsim__err(err, errlen, "%s: field \"%s\" must not be empty", where, field);
    return -1;
  }
  snprintf(out, outlen, "%s", v->valuestring);
  return 0;
}

/* A bandwidth field in GB/s per direction: a number (GB/s), or a string whose unit is
 * checked and converted ("25 GB/s", "200 Gb/s", "400Gbps", "1.8 TB/s"): bits and bytes
 * are the usual mix-up in vendor figures, so a bare string without a unit is refused. */
static int sim_catalog_get_gbps(const cJSON *obj, const char *field, double lo, double hi,
                                double *out, int *given, const char *where, char *err,
                                size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
  *given = 0;
  if (!v) return 0;
  double x;
  if (cJSON_IsNumber(v)) {
    if (sim_catalog_get_num(obj, field, 1, lo, hi, &x, where, err, errlen)) return -1;
  } else if (cJSON_IsString(v) && v->valuestring) {
    char *end;
    x = strtod(v->valuestring, &end);
    while (*end == ' ') end++;
    static const struct { const char *unit; double to_gbps; } units[] = {
        {"GB/s", 1.0},     {"GBps", 1.0},  {"Gb/s", 0.125}, {"Gbps", 0.125},
        {"Gbit/s", 0.125}, {"TB/s", 1e3},  {"Tb/s", 125.0}, {"Tbps", 125.0}};
    double f = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
      if (!strcmp(end, units[i].unit)) f = units[i].to_gbps;
    if (end == v->valuestring || !isfinite(x) || f == 0) {
      ulsim__err(err, errlen,
                 "%s: field \"%s\" = \"%s\": give GB/s per direction as a number, or a "
                 "string with a unit (GB/s, Gb/s, TB/s, Tb/s)",
                 where, field, v->valuestring);
      return -1;
    }
    x *= f;
    if (x < lo || x > hi) {
      ulsim__err(err, errlen, "%s: field \"%s\" = %g GB/s is out of range [%g, %g]", where,
                 field, x, lo, hi);
      return -1;
    }
  } else {
    ulsim__err(err, errlen, "%s: field \"%s\" must be a number (GB/s) or a string with a unit",
               where, field);
    return -1;
  }
  *out = x;
  *given = 1;
  return 0;
}

/* Figures a link entry may mark as assumed. */
static const char *const sim_catalog_figures[] = {
    "per_link_gbps", "line_gbps", "per_card_gbps", "links_per_card", "efficiency",
    "latency_us",    "hop_us"};

/* Largest single link of any kind in the catalog is NVLink-C2C (450 GB/s per direction):
 * a per-link figure far above that is a per-card total or a bit rate in the wrong field. */
#define SIM_CATALOG_MAX_LINK_GBPS 1000.0
#define SIM_CATALOG_MAX_CARD_GBPS 20000.0

/* Fields of a link object (catalog entries and inline/override objects). */
static int sim_catalog_link_fields(const cJSON *o, ulsim_link_t *l, int required,
                                   const char *where, char *err, size_t errlen) {
  double per_link = 0, line = 0, card = 0;
  int g_link = 0, g_line = 0, g_card = 0;
  if (sim_catalog_get_str(o, "name", required, l->name, sizeof l->name, where, err, errlen) ||
      sim_catalog_get_str(o, "family", required, l->family, sizeof l->family, where, err,
                          errlen) ||
      sim_catalog_get_int(o, "generation", 0, 0, 100, &l->generation, where, err, errlen) ||
      sim_catalog_get_gbps(o, "per_link_gbps", 1e-6, SIM_CATALOG_MAX_LINK_GBPS, &per_link,
                           &g_link, where, err, errlen) ||
      sim_catalog_get_gbps(o, "line_gbps", 1e-6, SIM_CATALOG_MAX_LINK_GBPS, &line, &g_line,
                           where, err, errlen) ||
      sim_catalog_get_gbps(o, "per_card_gbps", 1e-6, SIM_CATALOG_MAX_CARD_GBPS, &card, &g_card,
                           where, err, errlen) ||
      sim_catalog_get_int(o, "links_per_card", 0, 1, 1 << 10, &l->links_per_card, where, err,
                          errlen) ||
      sim_catalog_get_num(o, "efficiency", required, 1e-3, 1.5, &l->efficiency, where, err,
                          errlen) ||
      sim_catalog_get_num(o, "latency_us", required, 0, 1e6, &l->latency_us, where, err,
                          errlen) ||
      sim_catalog_get_int(o, "ports", 0, 0, 1 << 20, &l->ports, where, err, errlen) ||
      sim_catalog_get_int(o, "lanes", 0, 0, 1 << 10, &l->lanes, where, err, errlen) ||
      sim_catalog_get_str(o, "confidence", 0, l->confidence, sizeof l->confidence, where, err,
                          errlen) ||
      sim_catalog_get_str(o, "source", required, l->source, sizeof l->source, where, err,
                          errlen) ||
      ulsim__assumed_parse(o, l->assumed, sizeof l->assumed, ", ", where, sim_catalog_figures,
                           sizeof sim_catalog_figures / sizeof sim_catalog_figures[0], err,
                              errlen))
    return -1;
  /* line_gbps is the older name of per_link_gbps: both may be given only if they agree */
  if (g_link && g_line && fabs(per_link - line) > 1e-9 * per_link) {
    ulsim__err(err, errlen,
               "%s: fields \"per_link_gbps\" (%g) and \"line_gbps\" (%g) disagree: "
               "line_gbps is the older name of per_link_gbps, give one",
               where, per_link, line);
    return -1;
  }
  if (g_line && !g_link) {
    per_link = line;
    g_link = 1;
  }
  if (g_card) {
    l->card_gbps = card;
    if (g_link) {
      /* both: they must describe the same card */
      if (!l->links_per_card) {
        ulsim__err(err, errlen,
                   "%s: per_link_gbps and per_card_gbps together need \"links_per_card\"",
                   where);
        return -1;
      }
      double want = per_link * l->links_per_card;
      if (fabs(want - card) > 0.02 * card) {
        ulsim__err(err, errlen,
                   "%s: per_card_gbps %g GB/s is not per_link_gbps %g x links_per_card %d "
                   "(= %g GB/s)",
                   where, card, per_link, l->links_per_card, want);
        return -1;
      }
      l->line_gbps = per_link;
      l->per_card = 0;
    } else if (l->links_per_card) {
      l->line_gbps = card / l->links_per_card;
      l->per_card = 0;
    } else {
      /* the split is unknown: the topology divides it over the links a GPU uses; until
       * then one aggregate port */
      l->line_gbps = card;
      l->per_card = 1;
    }
  } else if (g_link) {
    l->line_gbps = per_link;
    l->per_card = 0;
    if (l->card_gbps > 0 && !l->links_per_card) l->card_gbps = 0; /* override of a per-card link */
    else if (l->links_per_card) l->card_gbps = per_link * l->links_per_card;
  } else if (required) {
    ulsim__err(err, errlen,
               "%s: missing bandwidth: give \"per_link_gbps\" (one link, per direction) or "
               "\"per_card_gbps\" (the card's total over its links, per direction)",
               where);
    return -1;
  }
  if (l->links_per_card && !l->card_gbps) l->card_gbps = l->line_gbps * l->links_per_card;
  if (l->confidence[0] && strcmp(l->confidence, "high") && strcmp(l->confidence, "medium") &&
      strcmp(l->confidence, "low")) {
    ulsim__err(err, errlen, "%s: field \"confidence\" must be high, medium or low (got \"%s\")",
                    where, l->confidence);
    return -1;
  }
  /* an assumed bandwidth cannot rest on a high-confidence claim */
  if (!strcmp(l->confidence, "high") &&
      (strstr(l->assumed, "gbps") || strstr(l->assumed, "efficiency"))) {
    ulsim__err(err, errlen,
               "%s: confidence \"high\" but its bandwidth is marked assumed (%s): use medium "
               "or low",
               where, l->assumed);
    return -1;
  }
  const cJSON *hop = cJSON_GetObjectItemCaseSensitive(o, "hop_us");
  if (hop) {
    if (!cJSON_IsArray(hop) || cJSON_GetArraySize(hop) != ULSIM_NPROTO) {
      ulsim__err(err, errlen,
                      "%s: field \"hop_us\" must be an array of 3 numbers [LL, LL128, Simple]",
                      where);
      return -1;
    }
    for (int i = 0; i < ULSIM_NPROTO; i++) {
      const cJSON *e = cJSON_GetArrayItem(hop, i);
      if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e6) {
        ulsim__err(err, errlen, "%s: field \"hop_us\"[%d] must be a number in [0, 1e6]",
                        where, i);
        return -1;
      }
      l->hop_us[i] = e->valuedouble;
    }
  } else if (required) {
    ulsim__err(err, errlen, "%s: missing field \"hop_us\"", where);
    return -1;
  }
  return 0;
}

ul_result_t ulsim_catalog_parse(const char *text, const char *origin, ulsim_catalog_t *cat,
                                char *err, size_t errlen) {
  if (!text || !cat) return ulsim__err(err, errlen, "catalog: NULL argument");
  memset(cat, 0, sizeof *cat);
  cJSON *root = sim_catalog_parse_json(text, origin, err, errlen);
  if (!root) return UL_ERR_INVALID_ARG;
  ul_result_t rc = UL_ERR_INVALID_ARG;
  const cJSON *links = cJSON_GetObjectItemCaseSensitive(root, "links");
  if (!cJSON_IsArray(links) || cJSON_GetArraySize(links) == 0) {
    ulsim__err(err, errlen, "%s: field \"links\" must be a non-empty array", origin);
    goto out;
  }
  int n = cJSON_GetArraySize(links);
  cat->links = calloc((size_t)n, sizeof *cat->links);
  if (!cat->links) {
    rc = ulsim__err(err, errlen, "%s: out of memory", origin);
    rc = UL_ERR_NO_MEMORY;
    goto out;
  }
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, links) {
    char where[640];
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (cJSON_IsString(nm))
      snprintf(where, sizeof where, "%s: links[%d] (\"%.60s\")", origin, i, nm->valuestring);
    else
      snprintf(where, sizeof where, "%s: links[%d]", origin, i);
    if (!cJSON_IsObject(e)) {
      ulsim__err(err, errlen, "%s: must be an object", where);
      goto out;
    }
    if (sim_catalog_link_fields(e, &cat->links[i], 1, where, err, errlen)) goto out;
    for (int j = 0; j < i; j++)
      if (!strcmp(cat->links[j].name, cat->links[i].name)) {
        ulsim__err(err, errlen, "%s: duplicate name (also links[%d])", where, j);
        goto out;
      }
    i++;
  }
  cat->nlinks = n;
  snprintf(cat->path, sizeof cat->path, "%s", origin);
  rc = UL_OK;
out:
  cJSON_Delete(root);
  if (rc != UL_OK) ulsim_catalog_free(cat);
  return rc;
}

ul_result_t ulsim_catalog_load(const char *path, ulsim_catalog_t *cat, char *err, size_t errlen) {
  char *text = sim_catalog_read_file(path, err, errlen);
  if (!text) return UL_ERR_NOT_FOUND;
  ul_result_t rc = ulsim_catalog_parse(text, path, cat, err, errlen);
  free(text);
  return rc;
}

ul_result_t ulsim_catalog_load_default(ulsim_catalog_t *cat, char *err, size_t errlen) {
  char dir[768], path[1024];
  if (!ulsim_data_dir(dir, sizeof dir, err, errlen)) return UL_ERR_NOT_FOUND;
  snprintf(path, sizeof path, "%s/links.json", dir);
  return ulsim_catalog_load(path, cat, err, errlen);
}

void ulsim_catalog_free(ulsim_catalog_t *cat) {
  if (!cat) return;
  free(cat->links);
  cat->links = NULL;
  cat->nlinks = 0;
}

const ulsim_link_t *ulsim_catalog_find(const ulsim_catalog_t *cat, const char *name) {
  if (!cat || !name) return NULL;
  for (int i = 0; i < cat->nlinks; i++)
    if (!strcmp(cat->links[i].name, name)) return &cat->links[i];
  return NULL;
}

/* A link reference in a topology: a catalog name ("link": "nvlink4") plus optional
 * overrides in the same object, or a full inline link object ("link": {...}) as
 * calibration writes them. */
static int sim_catalog_resolve_link(const cJSON *obj, const char *field, const ulsim_catalog_t *cat,
                                    ulsim_link_t *out, const char *where, char *err,
                                    size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
  char w[700];
  snprintf(w, sizeof w, "%s.%s", where, field);
  if (cJSON_IsString(v)) {
    const ulsim_link_t *l = ulsim_catalog_find(cat, v->valuestring);
    if (!l) {
      ulsim__err(err, errlen, "%s: unknown link \"%s\" (not in the catalog %s)", w,
                      v->valuestring, cat && cat->path[0] ? cat->path : "");
      return -1;
    }
    *out = *l;
    return 0;
  }
  if (cJSON_IsObject(v)) {
    memset(out, 0, sizeof *out);
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(v, "name");
    const ulsim_link_t *l = cJSON_IsString(base) ? ulsim_catalog_find(cat, base->valuestring) : NULL;
    if (l) *out = *l;  // a known name: fields given override the catalog's
    return sim_catalog_link_fields(v, out, l ? 0 : 1, w, err, errlen);
  }
  ulsim__err(err, errlen, "%s: must be a catalog link name or a link object", w);
  return -1;
}

ul_result_t ulsim_topology_parse(const char *text, const char *origin, const ulsim_catalog_t *cat,
                                 ulsim_topology_t *t, char *err, size_t errlen) {
  if (!text || !t) return ulsim__err(err, errlen, "topology: NULL argument");
  ulsim_topology_t tmp;
  memset(&tmp, 0, sizeof tmp);
  cJSON *root = sim_catalog_parse_json(text, origin, err, errlen);
  if (!root) return UL_ERR_INVALID_ARG;
  ul_result_t rc = UL_ERR_INVALID_ARG;
  char where[600];
  snprintf(where, sizeof where, "%s", origin);
  tmp.nodes = 1;
  tmp.launch_us = 5.0;
  tmp.pipeline_bytes = 3e6;
  if (sim_catalog_get_str(root, "name", 1, tmp.name, sizeof tmp.name, where, err, errlen) ||
      sim_catalog_get_str(root, "description", 0, tmp.description, sizeof tmp.description, where,
                          err, errlen) ||
      sim_catalog_get_int(root, "gpus_per_node", 1, 1, 1 << 20, &tmp.gpus_per_node, where, err,
                          errlen) ||
      sim_catalog_get_int(root, "nodes", 0, 1, 1 << 20, &tmp.nodes, where, err, errlen) ||
      sim_catalog_get_int(root, "calibrated", 0, 0, 1, &tmp.calibrated, where, err, errlen))
    goto out;
  snprintf(where, sizeof where, "%s (topology \"%s\")", origin, tmp.name);
  int rpn = 0;
  if (sim_catalog_get_int(root, "ranks_per_node", 0, 1, 1 << 20, &rpn, where, err, errlen) ||
      ulsim__assumed_parse(root, tmp.assumed, sizeof tmp.assumed, "; ", where, NULL, 0, err,
                           errlen))
    goto out;
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "sources");
  if (src) {
    if (!cJSON_IsArray(src)) {
      ulsim__err(err, errlen, "%s: field \"sources\" must be an array of strings", where);
      goto out;
    }
    const cJSON *s;
    int k = 0;
    cJSON_ArrayForEach(s, src) {
      if (!cJSON_IsString(s)) {
        ulsim__err(err, errlen, "%s: sources[%d] must be a string", where, k);
        goto out;
      }
      size_t len = strlen(tmp.sources);
      snprintf(tmp.sources + len, sizeof tmp.sources - len, "%s%s", len ? "; " : "",
               s->valuestring);
      k++;
    }
  }
  const cJSON *tuning = cJSON_GetObjectItemCaseSensitive(root, "tuning");
  if (tuning) {
    char w[640];
    snprintf(w, sizeof w, "%s.tuning", where);
    if (!cJSON_IsObject(tuning)) {
      ulsim__err(err, errlen, "%s: must be an object", w);
      goto out;
    }
    if (sim_catalog_get_num(tuning, "launch_us", 0, 0, 1e6, &tmp.launch_us, w, err, errlen) ||
        sim_catalog_get_num(tuning, "pipeline_bytes", 0, 0, 1e12, &tmp.pipeline_bytes, w, err,
                            errlen))
      goto out;
  }
  const cJSON *intra = cJSON_GetObjectItemCaseSensitive(root, "intra");
  char wi[640];
  snprintf(wi, sizeof wi, "%s.intra", where);
  if (!cJSON_IsObject(intra)) {
    ulsim__err(err, errlen, "%s: missing object \"intra\" (the scale-up fabric)", where);
    goto out;
  }
  char shape[16] = "";
  if (sim_catalog_get_str(intra, "shape", 1, shape, sizeof shape, wi, err, errlen)) goto out;
  if (!strcmp(shape, "switch"))
    tmp.shape = ULSIM_SHAPE_SWITCH;
  else if (!strcmp(shape, "mesh"))
    tmp.shape = ULSIM_SHAPE_MESH;
  else if (!strcmp(shape, "bus"))
    tmp.shape = ULSIM_SHAPE_BUS;
  else {
    ulsim__err(err, errlen, "%s: field \"shape\" must be switch, mesh or bus (got \"%s\")",
                    wi, shape);
    goto out;
  }
  if (sim_catalog_resolve_link(intra, "link", cat, &tmp.intra, wi, err, errlen)) goto out;
  tmp.links_per_gpu = 1;
  tmp.links_per_peer = 1;
  if (sim_catalog_get_int(intra, "links_per_gpu", tmp.shape == ULSIM_SHAPE_SWITCH, 1, 1 << 16,
                          &tmp.links_per_gpu, wi, err, errlen) ||
      sim_catalog_get_int(intra, "links_per_peer", 0, 1, 1 << 16, &tmp.links_per_peer, wi, err,
                          errlen) ||
      sim_catalog_get_num(intra, "bus_gbps", 0, 0, 1e7, &tmp.bus_gbps, wi, err, errlen) ||
      sim_catalog_get_num(intra, "efficiency", 0, 1e-3, 1.5, &tmp.intra.efficiency, wi, err,
                          errlen) ||
      ulsim__host_memory_parse(intra, &tmp, wi, err, errlen))
    goto out;
  if (cJSON_GetObjectItemCaseSensitive(intra, "switch")) {
    if (sim_catalog_resolve_link(intra, "switch", cat, &tmp.sw, wi, err, errlen)) goto out;
    tmp.has_switch = 1;
  }
  if (cJSON_GetObjectItemCaseSensitive(intra, "nvls")) {
    if (tmp.shape != ULSIM_SHAPE_SWITCH) {
      ulsim__err(err, errlen, "%s: field \"nvls\" needs shape \"switch\"", wi);
      goto out;
    }
    if (sim_catalog_resolve_link(intra, "nvls", cat, &tmp.nvls, wi, err, errlen)) goto out;
    tmp.has_nvls = 1;
  }
  const cJSON *inter = cJSON_GetObjectItemCaseSensitive(root, "inter");
  if (inter) {
    char w[640];
    snprintf(w, sizeof w, "%s.inter", where);
    if (!cJSON_IsObject(inter)) {
      ulsim__err(err, errlen, "%s: must be an object", w);
      goto out;
    }
    if (sim_catalog_resolve_link(inter, "link", cat, &tmp.inter, w, err, errlen) ||
        sim_catalog_get_int(inter, "nics_per_node", 1, 1, 1 << 16, &tmp.nics_per_node, w, err,
                            errlen) ||
        sim_catalog_get_num(inter, "efficiency", 0, 1e-3, 1.5, &tmp.inter.efficiency, w, err,
                            errlen))
      goto out;
    tmp.has_inter = 1;
  }
  if (tmp.nodes > 1 && !tmp.has_inter) {
    ulsim__err(err, errlen, "%s: \"nodes\" is %d but there is no \"inter\" fabric", where,
                    tmp.nodes);
    goto out;
  }
  tmp.node_gpus = tmp.gpus_per_node;
  tmp.node_nics = tmp.nics_per_node;
  if (ulsim__split_card(&tmp, wi, err, errlen) ||
      ulsim__place(&tmp, rpn, where, err, errlen))
    goto out;
  snprintf(tmp.origin, sizeof tmp.origin, "%s", origin);
  *t = tmp;
  rc = UL_OK;
out:
  cJSON_Delete(root);
  return rc;
}

static ul_result_t sim_catalog_topology_file(const char *path, const ulsim_catalog_t *cat,
                                             ulsim_topology_t *t, char *err, size_t errlen) {
  char *text = sim_catalog_read_file(path, err, errlen);
  if (!text) return UL_ERR_NOT_FOUND;
  ul_result_t rc = ulsim_topology_parse(text, path, cat, t, err, errlen);
  free(text);
  return rc;
}

static int sim_catalog_valid_preset_name(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.') return 0;
  return 1;
}

ul_result_t ulsim_topology_load(const char *spec, const ulsim_catalog_t *cat, ulsim_topology_t *t,
                                char *err, size_t errlen) {
  if (!spec || !*spec || !t) return ulsim__err(err, errlen, "topology: empty name");
  size_t n = strlen(spec);
  if (strchr(spec, '/') || (n > 5 && !strcmp(spec + n - 5, ".json")))
    return sim_catalog_topology_file(spec, cat, t, err, errlen);
  if (!sim_catalog_valid_preset_name(spec) || n >= ULSIM_NAME_MAX)
    return ulsim__err(err, errlen, "topology \"%.80s\": not a preset name or a file path",
                           spec);
  char dir[768], path[1024];
  if (!ulsim_data_dir(dir, sizeof dir, err, errlen)) return UL_ERR_NOT_FOUND;
  snprintf(path, sizeof path, "%s/topologies/%s.json", dir, spec);
  struct stat st;
  if (stat(path, &st) == 0) return sim_catalog_topology_file(path, cat, t, err, errlen);
  /* "<node>x<N>": N nodes of a preset, over the preset's NICs. */
  const char *x = strrchr(spec, 'x');
  if (x && x > spec && x[1]) {
    char *end;
    errno = 0;
    long nodes = strtol(x + 1, &end, 10);
    if (!*end && errno == 0 && nodes >= 1 && nodes <= (1 << 20) && isdigit((unsigned char)x[1])) {
      char base[ULSIM_NAME_MAX];
      snprintf(base, sizeof base, "%.*s", (int)(x - spec), spec);
      snprintf(path, sizeof path, "%s/topologies/%s.json", dir, base);
      if (stat(path, &st) == 0) {
        ul_result_t rc = sim_catalog_topology_file(path, cat, t, err, errlen);
        if (rc != UL_OK) return rc;
        if (nodes > 1 && !t->has_inter)
          return ulsim__err(err, errlen,
                                 "topology \"%s\": preset \"%s\" has no inter-node fabric", spec,
                                 base);
        t->nodes *= (int)nodes;
        snprintf(t->name, sizeof t->name, "%s", spec);
        char d[256];
        snprintf(d, sizeof d, "%ld x (%.200s)", nodes, t->description);
        snprintf(t->description, sizeof t->description, "%s", d);
        return UL_OK;
      }
    }
  }
  char names[64][ULSIM_NAME_MAX];
  char e2[8];
  int k = ulsim_topology_list(names, 64, e2, sizeof e2);
  char known[1024] = "";
  for (int i = 0; i < k; i++) {
    size_t len = strlen(known);
    snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", names[i]);
  }
  ulsim__err(err, errlen,
                  "unknown topology \"%s\" (presets: %s; or <preset>x<N> for N nodes, or a "
                  "topology file path)",
                  spec, known);
  return UL_ERR_NOT_FOUND;
}

static int sim_catalog_cmp_names(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

int ulsim_topology_list(char names[][ULSIM_NAME_MAX], int max, char *err, size_t errlen) {
  char dir[768], path[1024];
  if (!ulsim_data_dir(dir, sizeof dir, err, errlen)) return 0;
  snprintf(path, sizeof path, "%s/topologies", dir);
  DIR *d = opendir(path);
  if (!d) {
    ulsim__err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return 0;
  }
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max) {
    size_t len = strlen(e->d_name);
    if (len <= 5 || strcmp(e->d_name + len - 5, ".json") || len - 5 >= ULSIM_NAME_MAX) continue;
    snprintf(names[n], ULSIM_NAME_MAX, "%.*s", (int)(len - 5), e->d_name);
    n++;
  }
  closedir(d);
  qsort(names, (size_t)n, ULSIM_NAME_MAX, sim_catalog_cmp_names);
  return n;
}
