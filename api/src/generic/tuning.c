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
 * Sizes are nccl-tests' (a rank's larger buffer). Without a file the built-in limits
 * apply (UNILINK_ONESHOT_BYTES, scaled when ranks outnumber cores; bounce at every size,
 * or never when ranks outnumber cores). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

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

ul_result_t ul__tuning_load(ul__generic_t *g, const char *path) {
  for (int c = 0; c < UL_COLL_COUNT; c++) {
    g->staged_max[0][c] = g->staged_max[1][c] = UL__UNTUNED;
    g->bounce_from[c] = UL__UNTUNED;
  }
  if (!path || !path[0]) return UL_OK;
  FILE *f = fopen(path, "r");
  if (!f)
    return ul__comm_set_error(g->comm, UL_ERR_INVALID_ARG, "UNILINK_TUNING_FILE %s: %s", path,
                              strerror(errno));
  char line[512];
  int ln = 0;
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
  return rc;
}

size_t ul__tuning_staging_bytes(const ul__generic_t *g) {
  size_t m = 0;
  for (int p = 0; p < 2; p++)
    for (int c = 0; c < UL_COLL_COUNT; c++)
      if (g->staged_max[p][c] != UL__UNTUNED && g->staged_max[p][c] > m) m = g->staged_max[p][c];
  return m;
}
