/* Plugin discovery of the backend registry (registry.c): libunilink-<name>.so in the
 * folders of UNILINK_PLUGIN_PATH, the folder of libunilink, then the install folder. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ul_core.h"

#ifndef UNILINK_INSTALL_LIBDIR
#define UNILINK_INSTALL_LIBDIR ""
#endif

#define UL__PLUGIN_PREFIX "libunilink-"
#define UL__PLUGIN_SUFFIX ".so"

/* --------------------------------------------------------------- plugins */
/* "…/libunilink-foo.so" -> "foo"; any other file name -> its base name. */
void ul__plugin_hint(const char *path, char *out, size_t len) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  const size_t pl = strlen(UL__PLUGIN_PREFIX), sl = strlen(UL__PLUGIN_SUFFIX);
  if (n > pl + sl && strncmp(base, UL__PLUGIN_PREFIX, pl) == 0 &&
      strcmp(base + n - sl, UL__PLUGIN_SUFFIX) == 0)
    snprintf(out, len, "%.*s", (int)(n - pl - sl), base + pl);
  else
    snprintf(out, len, "%.*s", (int)(len - 1), base); /* cut to a name */
}

static int ul__plugin_filter(const struct dirent *d) {
  size_t n = strlen(d->d_name);
  const size_t pl = strlen(UL__PLUGIN_PREFIX), sl = strlen(UL__PLUGIN_SUFFIX);
  return n > pl + sl && strncmp(d->d_name, UL__PLUGIN_PREFIX, pl) == 0 &&
         strcmp(d->d_name + n - sl, UL__PLUGIN_SUFFIX) == 0;
}

typedef struct ul__dirset {
  char dirs[16][PATH_MAX];
  int n;
} ul__dirset_t;

static void ul__scan_dir_locked(const char *dir, const char *why, ul__dirset_t *seen,
                                ul_result_t (*load)(const char *path)) {
  char real[PATH_MAX];
  if (dir == NULL || dir[0] == '\0' || realpath(dir, real) == NULL) return;
  for (int i = 0; i < seen->n; i++)
    if (strcmp(seen->dirs[i], real) == 0) return; /* same folder named twice */
  if (seen->n < (int)(sizeof seen->dirs / sizeof seen->dirs[0]))
    snprintf(seen->dirs[seen->n++], PATH_MAX, "%s", real);
  struct dirent **list = NULL;
  int n = scandir(real, &list, ul__plugin_filter, alphasort); /* sorted: deterministic */
  if (n < 0) return;
  UL_TRACE("INIT", "scanning %s (%s): %d plugin file(s)", real, why, n);
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", real, list[i]->d_name) < (int)sizeof path)
      (void)load(path);
    free(list[i]);
  }
  free(list);
}

void ul__load_plugins_locked(ul_result_t (*load)(const char *path)) {
  ul__dirset_t *seen = calloc(1, sizeof *seen);
  if (seen == NULL) return;
  const char *pp = ul__param_get_str(UL__P_PLUGIN_PATH);
  if (pp && pp[0]) {
    char *copy = strdup(pp);
    if (copy) {
      char *save = NULL;
      for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
        ul__scan_dir_locked(d, "UNILINK_PLUGIN_PATH", seen, load);
      free(copy);
    }
  }
  Dl_info info;
  /* this file is part of libunilink: its own address names the library's folder */
  if (dladdr((void *)&ul__load_plugins_locked, &info) && info.dli_fname && info.dli_fname[0]) {
    char self[PATH_MAX];
    snprintf(self, sizeof self, "%s", info.dli_fname);
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      ul__scan_dir_locked(self[0] ? self : "/", "folder of libunilink", seen, load);
    }
  }
  ul__scan_dir_locked(UNILINK_INSTALL_LIBDIR, "install folder", seen, load);
  free(seen);
}
