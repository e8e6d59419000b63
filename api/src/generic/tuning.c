/* Selection limits measured on the machine (UNILINK_TUNING_FILE, written by
 * bench/calibrate-host.sh), per collective and rank count:
 *
 *   <collective> <ranks> process|thread <bytes>     the largest message the staged
 *                                                   one-shot algorithm takes before the
 *                                                   direct one is faster
 *   <collective> <ranks> process bounce_from <bytes>  process ranks with private buffers:
 *                                                   the smallest message that bounces
 *                                                   through scratch; below it the direct
 *                                                   algorithm's single copies
 *
 * Sizes are nccl-tests' (a rank's larger buffer). UNILINK_TUNING_FILE=auto (the default)
 * reads the table calibrate-host.sh cached for this host, if any, and only when its
 * machine line names this machine's CPU model and CPU count (decision 0020). Without a
 * table the built-in limits apply (UNILINK_ONESHOT_BYTES, scaled when ranks outnumber
 * cores; bounce at every size, or never when ranks outnumber cores). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generic_internal.h"

/* The collectives with a staged/direct choice, by their public names. */
static int tunable(const char *name, ul_coll_t *coll) {
  static const ul_coll_t k[] = {UL_COLL_ALLREDUCE, UL_COLL_REDUCE_SCATTER, UL_COLL_ALLGATHER,
                                UL_COLL_BROADCAST, UL_COLL_ALLTOALL};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (strcmp(name, ul_coll_name(k[i])) == 0) {
      *coll = k[i];
      return 1;
    }
  return 0;
}

/* Where calibrate-host.sh caches this host's table (its default FILE): keyed by host
 * name, so a home directory shared by a cluster's nodes holds one table per node. */
static int cached_table_path(char *out, size_t len) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char host[256];
  if (gethostname(host, sizeof host) != 0) return 0;
  host[sizeof host - 1] = '\0';
  int k = xdg && xdg[0] ? snprintf(out, len, "%s/unilink/host-tuning-%s.txt", xdg, host)
          : home && home[0] ? snprintf(out, len, "%s/.cache/unilink/host-tuning-%s.txt", home, host)
                            : -1;
  return k > 0 && (size_t)k < len;
}

/* What the machine line calibrate-host.sh writes first says after MACHINE_ID_TAG: "<CPU
 * model> | <online CPUs>", the model as /proc/cpuinfo's first "model name", trimmed
 * (empty where it has none; bench/tuning_rules.py builds the same line). */
static void machine_id(char *out, size_t len) {
  char model[256] = "", line[512];
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || !colon) continue;
    for (colon++; *colon == ' ' || *colon == '\t'; colon++) {}
    snprintf(model, sizeof model, "%s", colon);
    size_t k = strcspn(model, "\n");
    while (k > 0 && (model[k - 1] == ' ' || model[k - 1] == '\t')) k--;
    model[k] = '\0';
    break;
  }
  if (f) fclose(f);
  snprintf(out, len, "%s | %ld", model, sysconf(_SC_NPROCESSORS_ONLN));
}

#define MACHINE_ID_TAG "# machine-id: "

ul_result_t ul__tuning_load(ul__generic_t *g, const char *setting) {
  for (int c = 0; c < UL_COLL_COUNT; c++) {
    g->staged_max[0][c] = g->staged_max[1][c] = UL__UNTUNED;
    g->bounce_from[c] = UL__UNTUNED;
  }
  if (!setting || !setting[0] || strcmp(setting, "none") == 0) return UL_OK;
  char cached[4096];
  int automatic = strcmp(setting, "auto") == 0;
  const char *path = setting;
  if (automatic) {
    if (!cached_table_path(cached, sizeof cached)) return UL_OK;
    path = cached;
  }
  FILE *f = fopen(path, "r");
  if (!f && automatic) {
    UL_INFO("TUNING", "no calibration cached for this host (%s): built-in selection limits; "
            "bench/calibrate-host.sh measures them", path);
    return UL_OK;
  }
  if (!f)
    return ul__comm_set_error(g->comm, UL_ERR_INVALID_ARG, "UNILINK_TUNING_FILE %s: %s", path,
                              strerror(errno));
  char line[512];
  int ln = 0;
  if (automatic) { /* a cached table is this machine's only if its first line says so */
    char want[sizeof line + sizeof MACHINE_ID_TAG + 1];
    machine_id(line, sizeof line);
    snprintf(want, sizeof want, "%s%s\n", MACHINE_ID_TAG, line);
    ln = 1;
    if (!fgets(line, sizeof line, f) || strcmp(line, want) != 0) {
      fclose(f);
      want[strlen(want) - 1] = '\0';
      UL_WARN("TUNING", "%s was measured on another machine or written by an older "
              "bench/calibrate-host.sh (its first line is not '%s'): built-in selection "
              "limits; calibrate again", path, want);
      return UL_OK;
    }
  }
  ul_result_t rc = UL_OK;
  while (rc == UL_OK && fgets(line, sizeof line, f)) {
    ln++;
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char name[32], place[16], extra;
    int ranks;
    unsigned long long bytes;
    int got = sscanf(line, "%31s %d %15s %llu %c", name, &ranks, place, &bytes, &extra);
    if (got <= 0) continue; /* blank or comment */
    int bounce = 0;
    if (got == 3) { /* perhaps "<collective> <ranks> process bounce_from <bytes>" */
      char key[16];
      got = sscanf(line, "%31s %d %15s %15s %llu %c", name, &ranks, place, key, &bytes, &extra);
      bounce = got == 5 && strcmp(key, "bounce_from") == 0;
      got = bounce ? 4 : -1;
    }
    ul_coll_t coll;
    const char *why = NULL;
    if (got != 4)
      why = "expected '<collective> <ranks> process|thread <bytes>' or '<collective> <ranks> "
            "process bounce_from <bytes>'";
    else if (!tunable(name, &coll))
      why = "the collective is not one of allreduce, reduce_scatter, allgather, broadcast, "
            "alltoall";
    else if (ranks < 2) why = "ranks must be at least 2";
    else if (strcmp(place, "process") != 0 && strcmp(place, "thread") != 0)
      why = "placement must be 'process' or 'thread'";
    else if (bounce && strcmp(place, "process") != 0)
      why = "bounce_from is for process ranks (thread ranks reach each other's buffers)";
    else if (!bounce && bytes > UL__STAGED_MAX_BYTES) why = "bytes above the 1 MiB staging limit";
    if (why) {
      rc = ul__comm_set_error(g->comm, UL_ERR_INVALID_ARG, "UNILINK_TUNING_FILE %s line %d: %s",
                              path, ln, why);
      break;
    }
    if (ranks != g->n) continue;
    if (bounce) g->bounce_from[coll] = (size_t)bytes;
    else g->staged_max[strcmp(place, "thread") == 0][coll] = (size_t)bytes;
  }
  fclose(f);
  if (rc == UL_OK) UL_INFO("TUNING", "selection limits measured here: %s", path);
  return rc;
}

size_t ul__tuning_staging_bytes(const ul__generic_t *g) {
  size_t m = 0;
  for (int p = 0; p < 2; p++)
    for (int c = 0; c < UL_COLL_COUNT; c++)
      if (g->staged_max[p][c] != UL__UNTUNED && g->staged_max[p][c] > m) m = g->staged_max[p][c];
  return m;
}
