/* unilink-info: what backends this libunilink sees (and why some cannot run), the
 * devices and links of one backend, every UNILINK_* parameter (from the library's one
 * table, param_list.h, via ul_param_get), the build options and the version; text, JSON
 * (--json) or the docs' markdown parameter table (--params --markdown). Public API only. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unilink/backend.h> /* UL_BACKEND_ABI_* */
#include <unilink/unilink.h>

static const struct {
  uint32_t bit;
  const char *name;
} features[] = {
    {UL_FEATURE_THREAD_RANKS, "thread-ranks"},   {UL_FEATURE_PROCESS_RANKS, "process-ranks"},
    {UL_FEATURE_MULTI_NODE, "multi-node"},       {UL_FEATURE_INIT_ALL, "init-all"},
    {UL_FEATURE_SPLIT, "split"},                 {UL_FEATURE_STREAMS, "streams"},
    {UL_FEATURE_P2P, "p2p"},                     {UL_FEATURE_ONE_SIDED, "one-sided"},
    {UL_FEATURE_DEVICE_MEMORY, "device-memory"}, {UL_FEATURE_MODELED, "modeled"},
    {UL_FEATURE_GENERIC_COLL, "generic-coll"},   {UL_FEATURE_NATIVE_COLL, "native-coll"},
};

typedef const char *(*info_namer_t)(int);
static const char *coll_namer(int i) { return ul_coll_name((ul_coll_t)i); }
static const char *dtype_namer(int i) { return ul_dtype_name((ul_dtype_t)i); }
static const char *op_namer(int i) { return ul_op_name((ul_op_t)i); }
static const char *feature_namer(int i) {
  return i < (int)(sizeof features / sizeof features[0]) ? features[i].name : NULL;
}
static uint32_t feature_bits(uint32_t f) {
  /* Feature flags as positions 0..n of the table above. */
  uint32_t out = 0;
  for (size_t i = 0; i < sizeof features / sizeof features[0]; i++)
    if (f & features[i].bit) out |= 1u << i;
  return out;
}

/* Names of the set bits, space separated. */
static void print_bits(FILE *o, uint32_t bits, int n, info_namer_t namer) {
  int first = 1;
  for (int i = 0; i < n; i++) {
    if (!(bits & (1u << i))) continue;
    const char *nm = namer(i);
    char tmp[16];
    if (nm == NULL) {
      snprintf(tmp, sizeof tmp, "bit%d", i);
      nm = tmp;
    }
    fprintf(o, "%s%s", first ? "" : " ", nm);
    first = 0;
  }
  if (first) fputs("-", o);
}

static int backend_info(int i, ul_backend_info_t *b) {
  memset(b, 0, sizeof *b);
  b->struct_size = sizeof *b;
  return ul_backend_get_info(i, b) == UL_OK;
}

/* only: print just this backend (NULL: all). A "sim:<preset>" name matches "sim". */
static int backend_matches(const char *name, const char *only) {
  if (!only) return 1;
  size_t n = strlen(name);
  return strncmp(name, only, n) == 0 && (only[n] == '\0' || only[n] == ':');
}

static void backends_text(FILE *o, const char *only) {
  int n = ul_backend_count();
  fprintf(o, "Backends (%d)\n", n);
  if (n == 0) {
    fprintf(o, "  none: no built-in backend and no plugin found (see UNILINK_PLUGIN_PATH)\n");
    return;
  }
  const char *best = ul_backend_auto();
  fprintf(o, "  %-12s %-12s %s\n", "NAME", "STATUS", "ORIGIN");
  for (int i = 0; i < n; i++) {
    ul_backend_info_t b;
    if (!backend_info(i, &b)) {
      fprintf(o, "  #%d: %s\n", i, ul_last_error());
      continue;
    }
    if (!backend_matches(b.name, only)) continue;
    fprintf(o, "  %-12s %-12s %s%s\n", b.name, b.available ? "available" : "unavailable",
            b.origin, (best && strcmp(best, b.name) == 0) ? "  [auto]" : "");
    if (b.description && b.description[0]) fprintf(o, "      %-13s %s\n", "description", b.description);
    if (!b.available) fprintf(o, "      %-13s %s\n", "reason", b.reason);
    if (b.version[0]) fprintf(o, "      %-13s %s\n", "version", b.version);
    fprintf(o, "      %-13s ", "features");
    print_bits(o, feature_bits(b.features), 32, feature_namer);
    fprintf(o, "\n      %-13s ", "collectives");
    print_bits(o, b.collectives, UL_COLL_COUNT, coll_namer);
    fprintf(o, "\n      %-13s ", "dtypes");
    print_bits(o, b.dtypes, UL_DTYPE_COUNT, dtype_namer);
    fprintf(o, "\n      %-13s ", "reduce dtypes");
    print_bits(o, b.reduce_dtypes, UL_DTYPE_COUNT, dtype_namer);
    fprintf(o, "\n      %-13s ", "ops");
    print_bits(o, b.ops, UL_OP_COUNT, op_namer);
    if (b.max_ranks > 0) fprintf(o, "\n      %-13s %d", "max ranks", b.max_ranks);
    fputc('\n', o);
  }
  fprintf(o, "  auto: %s\n", best ? best : "(no backend available)");
}

static void params_text(FILE *o) {
  int n = ul_param_count();
  fprintf(o, "Parameters (%d)\n", n);
  fprintf(o, "  %-32s %-7s %-8s %-16s %s\n", "NAME", "TYPE", "OWNER", "VALUE", "DEFAULT");
  for (int i = 0; i < n; i++) {
    ul_param_info_t p;
    const char *type = "?", *owner = "?";
    if (ul_param_get(i, &p) != UL_OK) continue;
    (void)ul_param_kind(i, &type, &owner);
    fprintf(o, "  %-32s %-7s %-8s %-16s %s\n", p.name, type, owner,
            p.value[0] ? p.value : "(unset)", p.default_value[0] ? p.default_value : "\"\"");
    if (p.help && p.help[0]) fprintf(o, "      %s\n", p.help);
  }
}


/* The docs' parameter table (docs/user-guide.md holds this output between markers, and a
 * test compares them, so the docs cannot drift from the library's table). */
static void params_markdown(FILE *o) {
  fprintf(o, "| Variable | Type | Default | Owner | Meaning |\n|---|---|---|---|---|\n");
  int n = ul_param_count();
  for (int i = 0; i < n; i++) {
    ul_param_info_t p;
    const char *type = "?", *owner = "?";
    if (ul_param_get(i, &p) != UL_OK) continue;
    (void)ul_param_kind(i, &type, &owner);
    if (strcmp(owner, "test") == 0) continue; /* exists only in test builds */
    fprintf(o, "| `%s` | %s | %s%s%s | %s | ", p.name, type, p.default_value[0] ? "`" : "",
            p.default_value[0] ? p.default_value : "(empty)", p.default_value[0] ? "`" : "",
            owner);
    for (const char *c = p.help; c && *c; c++) fputs(*c == '|' ? "\\|" : (char[2]){*c, 0}, o);
    fputs(" |\n", o);
  }
}

static void build_text(FILE *o) {
  int n = ul_build_option_count();
  fprintf(o, "Build options\n");
  for (int i = 0; i < n; i++) {
    const char *k, *v;
    if (ul_build_option_get(i, &k, &v) == UL_OK) fprintf(o, "  %-18s %s\n", k, v[0] ? v : "-");
  }
}

static const char *link_kind_name(ul_link_kind_t k) {
  static const char *names[] = {"self", "nvlink", "pcie", "shm", "network", "modeled", "xelink",
                                "unknown"};
  return (k >= 0 && k <= UL_LINK_UNKNOWN) ? names[k] : "unknown";
}
static const char *link_source_name(ul_link_source_t s) {
  static const char *names[] = {"none", "measured", "driver", "modeled", "nominal"};
  return (s >= 0 && s <= UL_SOURCE_NOMINAL) ? names[s] : "none";
}

/* Devices and links of one backend: one process drives nranks ranks (ul_comm_init_all),
 * and rank 0's ul_comm_topology gives the link to every peer. Returns 0, or 3 when the
 * backend cannot start that many ranks here (the reason is printed). */
typedef struct links {
  int nranks;
  ul_link_info_t *l; /* nranks x nranks: row r is rank r's view */
  int *device;       /* per rank: ul_comm_device (-1: host memory, no device) */
} links_t;

/* The machine the ranks run on (what a host-memory backend's "device" is): CPU model,
 * logical CPUs, NUMA nodes and memory, from /proc and sysfs. Fields stay empty/0 where
 * the system does not say. */
typedef struct machine {
  char cpu[128];
  long cpus, numa_nodes;
  double mem_gib;
} machine_t;

static void machine_read(machine_t *m) {
  memset(m, 0, sizeof *m);
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    char *c = strchr(line, ':');
    if (c && strncmp(line, "model name", 10) == 0) {
      c++;
      while (*c == ' ' || *c == '\t') c++;
      c[strcspn(c, "\n")] = 0;
      snprintf(m->cpu, sizeof m->cpu, "%s", c);
      break;
    }
  }
  if (f) fclose(f);
  m->cpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (int n = 0; n < 1024; n++) {
    char path[64];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d", n);
    if (access(path, F_OK) != 0) break;
    m->numa_nodes++;
  }
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  if (pages > 0 && psz > 0) m->mem_gib = (double)pages * (double)psz / (1024.0 * 1024.0 * 1024.0);
}

static int links_probe(const char *backend, int nranks, links_t *out, char *why, size_t wl) {
  memset(out, 0, sizeof *out);
  ul_comm_t *comms = calloc((size_t)nranks, sizeof *comms);
  ul_link_info_t *l = calloc((size_t)nranks * (size_t)nranks, sizeof *l);
  if (!comms || !l) {
    free(comms);
    free(l);
    snprintf(why, wl, "out of memory");
    return 3;
  }
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = backend;
  cfg.timeout_ms = 10000; /* a tool must not hang on a broken backend */
  cfg.name = "unilink-info";
  ul_result_t rc = ul_comm_init_all(comms, &cfg, nranks, NULL);
  if (rc != UL_OK) {
    snprintf(why, wl, "ul_comm_init_all(%s, %d ranks): %s: %s", backend, nranks,
             ul_result_name(rc), ul_last_error());
    free(comms);
    free(l);
    return 3;
  }
  int *device = calloc((size_t)nranks, sizeof *device);
  for (int r = 0; r < nranks && device; r++)
    if (ul_comm_device(comms[r], &device[r]) != UL_OK) device[r] = -1;
  for (int r = 0; r < nranks && rc == UL_OK; r++) {
    rc = ul_comm_topology(comms[r], l + (size_t)r * nranks, nranks);
    if (rc != UL_OK)
      snprintf(why, wl, "ul_comm_topology: %s: %s", ul_result_name(rc),
               ul_comm_last_error(comms[r]));
  }
  for (int r = 0; r < nranks; r++) ul_comm_destroy(comms[r]);
  free(comms);
  if (rc != UL_OK) {
    free(l);
    free(device);
    return 3;
  }
  out->nranks = nranks;
  out->l = l;
  out->device = device;
  return 0;
}

static void links_text(FILE *o, const char *backend, const links_t *k) {
  machine_t m;
  machine_read(&m);
  fprintf(o, "Devices and links of %s (%d ranks in this process)\n", backend, k->nranks);
  fprintf(o, "  machine: %s, %ld logical CPUs, %ld NUMA node%s, %.1f GiB memory\n",
          m.cpu[0] ? m.cpu : "CPU model not reported", m.cpus, m.numa_nodes,
          m.numa_nodes == 1 ? "" : "s", m.mem_gib);
  for (int r = 0; k->device && r < k->nranks; r++) {
    if (k->device[r] >= 0) fprintf(o, "  rank %-4d device %d\n", r, k->device[r]);
    else fprintf(o, "  rank %-4d host memory (no device)\n", r);
  }
  fprintf(o, "  %-5s %-5s %-8s %-9s %-10s %-10s %s\n", "RANK", "PEER", "KIND", "SOURCE", "GB/s",
          "LAT us", "DESCRIPTION");
  for (int r = 0; r < k->nranks; r++)
    for (int p = 0; p < k->nranks; p++) {
      const ul_link_info_t *x = &k->l[(size_t)r * k->nranks + p];
      /* a figure nobody gave is "-", never a 0.0 that reads as a measurement */
      char bw[16] = "-", lat[16] = "-";
      if (x->bandwidth_gbps > 0) snprintf(bw, sizeof bw, "%.1f", x->bandwidth_gbps);
      if (x->latency_us > 0) snprintf(lat, sizeof lat, "%.2f", x->latency_us);
      fprintf(o, "  %-5d %-5d %-8s %-9s %-10s %-10s %s\n", r, x->peer, link_kind_name(x->kind),
              x->source == UL_SOURCE_NONE && x->kind != UL_LINK_SELF ? "not given"
                                                                      : link_source_name(x->source),
              bw, lat, x->description);
    }
}

/* --------------------------------------------------------------- JSON */
static cJSON *bits_json(uint32_t bits, int n, info_namer_t namer) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) {
    if (!(bits & (1u << i))) continue;
    const char *nm = namer(i);
    char tmp[16];
    if (nm == NULL) {
      snprintf(tmp, sizeof tmp, "bit%d", i);
      nm = tmp;
    }
    cJSON_AddItemToArray(a, cJSON_CreateString(nm));
  }
  return a;
}

static cJSON *backends_json(const char *only) {
  cJSON *arr = cJSON_CreateArray();
  int n = ul_backend_count();
  for (int i = 0; i < n; i++) {
    ul_backend_info_t b;
    if (!backend_info(i, &b) || !backend_matches(b.name, only)) continue;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", b.name);
    cJSON_AddStringToObject(j, "description", b.description ? b.description : "");
    cJSON_AddBoolToObject(j, "available", b.available);
    cJSON_AddStringToObject(j, "reason", b.reason);
    cJSON_AddBoolToObject(j, "plugin", b.plugin);
    cJSON_AddStringToObject(j, "origin", b.origin);
    cJSON_AddStringToObject(j, "version", b.version);
    cJSON_AddItemToObject(j, "features", bits_json(feature_bits(b.features), 32, feature_namer));
    cJSON_AddItemToObject(j, "collectives", bits_json(b.collectives, UL_COLL_COUNT, coll_namer));
    cJSON_AddItemToObject(j, "dtypes", bits_json(b.dtypes, UL_DTYPE_COUNT, dtype_namer));
    cJSON_AddItemToObject(j, "reduce_dtypes",
                          bits_json(b.reduce_dtypes, UL_DTYPE_COUNT, dtype_namer));
    cJSON_AddItemToObject(j, "ops", bits_json(b.ops, UL_OP_COUNT, op_namer));
    cJSON_AddNumberToObject(j, "max_ranks", b.max_ranks);
    cJSON_AddItemToArray(arr, j);
  }
  return arr;
}

static cJSON *params_json(void) {
  cJSON *arr = cJSON_CreateArray();
  int n = ul_param_count();
  for (int i = 0; i < n; i++) {
    ul_param_info_t p;
    const char *type = "?", *owner = "?";
    if (ul_param_get(i, &p) != UL_OK) continue;
    (void)ul_param_kind(i, &type, &owner);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", p.name);
    cJSON_AddStringToObject(j, "type", type);
    cJSON_AddStringToObject(j, "owner", owner);
    cJSON_AddStringToObject(j, "value", p.value);
    cJSON_AddStringToObject(j, "default", p.default_value);
    cJSON_AddStringToObject(j, "help", p.help ? p.help : "");
    cJSON_AddItemToArray(arr, j);
  }
  return arr;
}

static cJSON *build_json(void) {
  cJSON *j = cJSON_CreateObject();
  int n = ul_build_option_count();
  for (int i = 0; i < n; i++) {
    const char *k, *v;
    if (ul_build_option_get(i, &k, &v) == UL_OK) cJSON_AddStringToObject(j, k, v);
  }
  return j;
}

static cJSON *links_json(const links_t *k) {
  cJSON *arr = cJSON_CreateArray();
  for (int r = 0; r < k->nranks; r++)
    for (int p = 0; p < k->nranks; p++) {
      const ul_link_info_t *x = &k->l[(size_t)r * k->nranks + p];
      cJSON *j = cJSON_CreateObject();
      cJSON_AddNumberToObject(j, "rank", r);
      cJSON_AddNumberToObject(j, "peer", x->peer);
      cJSON_AddStringToObject(j, "kind", link_kind_name(x->kind));
      cJSON_AddNumberToObject(j, "generation", x->generation);
      cJSON_AddNumberToObject(j, "lanes", x->lanes);
      cJSON_AddNumberToObject(j, "bandwidth_gbps", x->bandwidth_gbps);
      cJSON_AddNumberToObject(j, "latency_us", x->latency_us);
      cJSON_AddStringToObject(j, "source", link_source_name(x->source));
      cJSON_AddStringToObject(j, "description", x->description);
      cJSON_AddItemToArray(arr, j);
    }
  return arr;
}

static cJSON *devices_json(const links_t *k) {
  cJSON *arr = cJSON_CreateArray();
  for (int r = 0; k->device && r < k->nranks; r++) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "rank", r);
    cJSON_AddNumberToObject(j, "device", k->device[r]);
    cJSON_AddStringToObject(j, "memory", k->device[r] >= 0 ? "device" : "host");
    cJSON_AddItemToArray(arr, j);
  }
  return arr;
}

static cJSON *machine_json(void) {
  machine_t m;
  machine_read(&m);
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "cpu", m.cpu);
  cJSON_AddNumberToObject(j, "logical_cpus", (double)m.cpus);
  cJSON_AddNumberToObject(j, "numa_nodes", (double)m.numa_nodes);
  cJSON_AddNumberToObject(j, "memory_gib", m.mem_gib);
  return j;
}

static void usage(FILE *o, const char *argv0) {
  fprintf(o,
          "usage: %s [--backends] [--params [--markdown]] [--build] [--backend NAME\n"
          "          [--ranks N]] [--json] [-h]\n"
          "  Lists the backends unilink sees (available or why not, origin, version,\n"
          "  features, collectives, dtypes and ops), every UNILINK_* parameter with its\n"
          "  type, owner, value, default and help, the build options and the version.\n"
          "  --backends      only the backends\n"
          "  --params        only the parameters (--markdown: as the docs' table)\n"
          "  --build         only the build options (test hooks, sanitizers, backends)\n"
          "  --backend NAME  only this backend, with its devices and the links between\n"
          "                  N ranks started in this process (--ranks N, default 2)\n"
          "  --json          machine-readable output of the same\n"
          "  -h, --help      this text\n"
          "exit status: 0 ok, 2 usage error, 3 the --backend cannot start here\n",
          argv0);
}

int main(int argc, char **argv) {
  int want_backends = 0, want_params = 0, want_build = 0, json = 0, markdown = 0, nranks = 2;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--backends") == 0) want_backends = 1;
    else if (strcmp(argv[i], "--params") == 0) want_params = 1;
    else if (strcmp(argv[i], "--build") == 0) want_build = 1;
    else if (strcmp(argv[i], "--markdown") == 0) markdown = 1;
    else if (strcmp(argv[i], "--json") == 0) json = 1;
    else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) only = argv[++i];
    else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 1024) {
        fprintf(stderr, "%s: --ranks wants 1..1024, not \"%s\"\n", argv[0], argv[i]);
        return 2;
      }
      nranks = (int)v;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout, argv[0]);
      return 0;
    } else {
      fprintf(stderr, "%s: unknown option \"%s\"\n", argv[0], argv[i]);
      usage(stderr, argv[0]);
      return 2;
    }
  }
  FILE *o = stdout;
  if (markdown) {
    params_markdown(o);
    return ferror(o) ? 1 : 0;
  }
  if (!want_backends && !want_params && !want_build) {
    want_backends = 1;
    want_params = want_build = only == NULL;
  }
  links_t k = {0, NULL, NULL};
  char why[512] = "";
  int status = 0;
  if (only && want_backends) status = links_probe(only, nranks, &k, why, sizeof why);
  if (json) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", ul_version_string());
    /* Backends first: probing them registers plugins' own parameters. */
    if (want_backends) {
      const char *best = ul_backend_auto();
      cJSON_AddItemToObject(root, "auto", best ? cJSON_CreateString(best) : cJSON_CreateNull());
      cJSON_AddItemToObject(root, "backends", backends_json(only));
      if (only) {
        cJSON_AddStringToObject(root, "backend", only);
        cJSON_AddItemToObject(root, "machine", machine_json());
        if (status == 0) {
          cJSON_AddItemToObject(root, "devices", devices_json(&k));
          cJSON_AddItemToObject(root, "links", links_json(&k));
        }
        else cJSON_AddStringToObject(root, "links_error", why);
      }
    }
    if (want_params) cJSON_AddItemToObject(root, "params", params_json());
    if (want_build) cJSON_AddItemToObject(root, "build", build_json());
    char *text = cJSON_Print(root);
    if (text) fprintf(o, "%s\n", text);
    cJSON_free(text);
    cJSON_Delete(root);
  } else {
    int sep = 0;
    if (want_backends) {
      backends_text(o, only);
      if (only) {
        fputc('\n', o);
        if (status == 0) links_text(o, only, &k);
        else fprintf(o, "Devices and links of %s: cannot start ranks here: %s\n", only, why);
      }
      sep = 1;
    }
    if (want_params) {
      if (sep) fputc('\n', o);
      params_text(o);
      sep = 1;
    }
    if (want_build) {
      if (sep) fputc('\n', o);
      build_text(o);
      sep = 1;
    }
    if (sep && !only)
      fprintf(o, "\nlibunilink %s (backend ABI %d.%d)\n", ul_version_string(),
              UL_BACKEND_ABI_MAJOR, UL_BACKEND_ABI_MINOR);
  }
  free(k.l);
  free(k.device);
  if (status) fprintf(stderr, "unilink-info: %s\n", why);
  return ferror(o) ? 1 : status;
}
