/* unilink-info: what backends this libunilink sees (and why some cannot run), every
 * UNILINK_* parameter with its value, default and help, and the library version.
 * Public API only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Names of the set bits, space separated for text, JSON strings for json. */
static void print_bits(FILE *o, uint32_t bits, int n, info_namer_t namer, int json) {
  int first = 1;
  if (json) fputc('[', o);
  for (int i = 0; i < n; i++) {
    if (!(bits & (1u << i))) continue;
    const char *nm = namer(i);
    char tmp[16];
    if (nm == NULL) {
      snprintf(tmp, sizeof tmp, "bit%d", i);
      nm = tmp;
    }
    if (json)
      fprintf(o, "%s\"%s\"", first ? "" : ",", nm);
    else
      fprintf(o, "%s%s", first ? "" : " ", nm);
    first = 0;
  }
  if (json) fputc(']', o);
  else if (first) fputs("-", o);
}

static void json_str(FILE *o, const char *s) {
  fputc('"', o);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
      case '"': fputs("\\\"", o); break;
      case '\\': fputs("\\\\", o); break;
      case '\n': fputs("\\n", o); break;
      case '\t': fputs("\\t", o); break;
      case '\r': fputs("\\r", o); break;
      default:
        if (*p < 0x20) fprintf(o, "\\u%04x", *p);
        else fputc(*p, o);
    }
  }
  fputc('"', o);
}

static void backends_text(FILE *o) {
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
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    if (ul_backend_get_info(i, &b) != UL_OK) {
      fprintf(o, "  #%d: %s\n", i, ul_last_error());
      continue;
    }
    fprintf(o, "  %-12s %-12s %s%s\n", b.name, b.available ? "available" : "unavailable",
            b.origin, (best && strcmp(best, b.name) == 0) ? "  [auto]" : "");
    if (b.description && b.description[0]) fprintf(o, "      %-13s %s\n", "description", b.description);
    if (!b.available) fprintf(o, "      %-13s %s\n", "reason", b.reason);
    if (b.version[0]) fprintf(o, "      %-13s %s\n", "version", b.version);
    fprintf(o, "      %-13s ", "features");
    print_bits(o, feature_bits(b.features), 32, feature_namer, 0);
    fprintf(o, "\n      %-13s ", "collectives");
    print_bits(o, b.collectives, UL_COLL_COUNT, coll_namer, 0);
    fprintf(o, "\n      %-13s ", "dtypes");
    print_bits(o, b.dtypes, UL_DTYPE_COUNT, dtype_namer, 0);
    fprintf(o, "\n      %-13s ", "reduce dtypes");
    print_bits(o, b.reduce_dtypes, UL_DTYPE_COUNT, dtype_namer, 0);
    fprintf(o, "\n      %-13s ", "ops");
    print_bits(o, b.ops, UL_OP_COUNT, op_namer, 0);
    if (b.max_ranks > 0) fprintf(o, "\n      %-13s %d", "max ranks", b.max_ranks);
    fputc('\n', o);
  }
  fprintf(o, "  auto: %s\n", best ? best : "(no backend available)");
}

static void params_text(FILE *o) {
  int n = ul_param_count();
  fprintf(o, "Parameters (%d)\n", n);
  fprintf(o, "  %-26s %-16s %s\n", "NAME", "VALUE", "DEFAULT");
  for (int i = 0; i < n; i++) {
    ul_param_info_t p;
    if (ul_param_get(i, &p) != UL_OK) continue;
    fprintf(o, "  %-26s %-16s %s\n", p.name, p.value[0] ? p.value : "(unset)",
            p.default_value[0] ? p.default_value : "\"\"");
    if (p.help && p.help[0]) fprintf(o, "      %s\n", p.help);
  }
}

static void backends_json(FILE *o) {
  int n = ul_backend_count();
  const char *best = ul_backend_auto();
  fputs("\"auto\":", o);
  if (best) json_str(o, best); else fputs("null", o);
  fputs(",\"backends\":[", o);
  int first = 1;
  for (int i = 0; i < n; i++) {
    ul_backend_info_t b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    if (ul_backend_get_info(i, &b) != UL_OK) continue;
    fputs(first ? "{" : ",{", o);
    first = 0;
    fputs("\"name\":", o); json_str(o, b.name);
    fputs(",\"description\":", o); json_str(o, b.description);
    fprintf(o, ",\"available\":%s", b.available ? "true" : "false");
    fputs(",\"reason\":", o); json_str(o, b.reason);
    fprintf(o, ",\"plugin\":%s", b.plugin ? "true" : "false");
    fputs(",\"origin\":", o); json_str(o, b.origin);
    fputs(",\"version\":", o); json_str(o, b.version);
    fputs(",\"features\":", o); print_bits(o, feature_bits(b.features), 32, feature_namer, 1);
    fputs(",\"collectives\":", o); print_bits(o, b.collectives, UL_COLL_COUNT, coll_namer, 1);
    fputs(",\"dtypes\":", o); print_bits(o, b.dtypes, UL_DTYPE_COUNT, dtype_namer, 1);
    fputs(",\"reduce_dtypes\":", o);
    print_bits(o, b.reduce_dtypes, UL_DTYPE_COUNT, dtype_namer, 1);
    fputs(",\"ops\":", o); print_bits(o, b.ops, UL_OP_COUNT, op_namer, 1);
    fprintf(o, ",\"max_ranks\":%d}", b.max_ranks);
  }
  fputc(']', o);
}

static void params_json(FILE *o) {
  fputs("\"params\":[", o);
  int n = ul_param_count();
  for (int i = 0; i < n; i++) {
    ul_param_info_t p;
    if (ul_param_get(i, &p) != UL_OK) continue;
    fputs(i ? ",{" : "{", o);
    fputs("\"name\":", o); json_str(o, p.name);
    fputs(",\"value\":", o); json_str(o, p.value);
    fputs(",\"default\":", o); json_str(o, p.default_value);
    fputs(",\"help\":", o); json_str(o, p.help);
    fputc('}', o);
  }
  fputc(']', o);
}

static void usage(FILE *o, const char *argv0) {
  fprintf(o,
          "usage: %s [--backends] [--params] [--json] [-h]\n"
          "  Lists the backends unilink sees (available or why not, origin, version,\n"
          "  features, collectives, dtypes and ops), every UNILINK_* parameter with its\n"
          "  value, default and help, and the library version.\n"
          "  --backends  only the backends\n"
          "  --params    only the parameters\n"
          "  --json      machine-readable output of the same\n"
          "  -h, --help  this text\n",
          argv0);
}

int main(int argc, char **argv) {
  int want_backends = 0, want_params = 0, json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--backends") == 0) want_backends = 1;
    else if (strcmp(argv[i], "--params") == 0) want_params = 1;
    else if (strcmp(argv[i], "--json") == 0) json = 1;
    else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout, argv[0]);
      return 0;
    } else {
      fprintf(stderr, "%s: unknown option \"%s\"\n", argv[0], argv[i]);
      usage(stderr, argv[0]);
      return 2;
    }
  }
  if (!want_backends && !want_params) want_backends = want_params = 1;
  int all = want_backends && want_params;
  FILE *o = stdout;
  if (json) {
    fputs("{\"version\":", o);
    json_str(o, ul_version_string());
    /* Backends first: probing them registers their parameters. */
    if (want_backends) { fputc(',', o); backends_json(o); }
    if (want_params) { fputc(',', o); params_json(o); }
    fputs("}\n", o);
  } else {
    if (want_backends) backends_text(o);
    if (all) fputc('\n', o);
    if (want_params) params_text(o);
    if (all) fprintf(o, "\nlibunilink %s (backend ABI %d.%d)\n", ul_version_string(),
                       UL_BACKEND_ABI_MAJOR, UL_BACKEND_ABI_MINOR);
  }
  return ferror(o) ? 1 : 0;
}
