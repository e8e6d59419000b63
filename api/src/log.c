/* Logging: UNILINK_DEBUG (level), UNILINK_DEBUG_SUBSYS (filter), UNILINK_DEBUG_FILE
 * (destination). The environment is parsed once and cached; ul__log_reset() re-reads
 * it. Disabled messages cost one atomic load and a compare.
 *
 * Filter rules: WARN lines always pass the subsystem filter (a warning must never be
 * lost to a filter); INFO/TRACE lines pass when their subsystem is selected. The list is
 * comma separated; ALL selects everything; BACKEND also selects every non-core subsystem
 * (backend names); a leading '^' turns the whole list into an exclusion list (as NCCL). */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ul_core.h"

#define UL__LOG_MAX_TOKENS 32
#define UL__LOG_TOKEN_LEN 32
#define UL__LOG_LINE 2048

/* Core subsystems; anything else is a backend's name. */
static const char *const ul__core_subsys[] = {"INIT", "COLL",  "P2P",       "MEM",  "BACKEND",
                                              "TUNING", "ENV", "BOOTSTRAP", "TRACE"};

typedef struct ul__log_cfg {
  int negate; /* list is an exclusion list */
  int all;    /* ALL named in the list */
  int ntokens;
  char tokens[UL__LOG_MAX_TOKENS][UL__LOG_TOKEN_LEN];
  FILE *out;
  int out_owned;
  char host[64];
} ul__log_cfg_t;

static pthread_mutex_t ul__log_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int ul__log_ready;                 /* cfg parsed */
/* The level read from the environment; INT_MAX before (so UL__LOG_ON asks us). Plain int
 * with atomic builtins: ul_core.h's macro loads it without <stdatomic.h>. */
int ul__log_max = INT_MAX;
static ul__log_cfg_t ul__log_cfg;               /* guarded by ul__log_lock */

static int ul__is_core_subsys(const char *s) {
  for (size_t i = 0; i < sizeof ul__core_subsys / sizeof ul__core_subsys[0]; i++)
    if (strcasecmp(s, ul__core_subsys[i]) == 0) return 1;
  return 0;
}

static void ul__log_parse_subsys(ul__log_cfg_t *c, const char *text) {
  c->negate = 0;
  c->all = 0;
  c->ntokens = 0;
  if (text == NULL || text[0] == '\0') {
    c->all = 1; /* default: every subsystem */
    return;
  }
  const char *p = text;
  while (isspace((unsigned char)*p)) p++;
  if (*p == '^') {
    c->negate = 1;
    p++;
  }
  while (*p) {
    while (*p == ',' || isspace((unsigned char)*p)) p++;
    const char *start = p;
    while (*p && *p != ',') p++;
    const char *end = p;
    while (end > start && isspace((unsigned char)end[-1])) end--;
    size_t n = (size_t)(end - start);
    if (n == 0) continue;
    if (n >= UL__LOG_TOKEN_LEN) n = UL__LOG_TOKEN_LEN - 1;
    if (n == 3 && strncasecmp(start, "ALL", 3) == 0) {
      c->all = 1;
      continue;
    }
    if (c->ntokens < UL__LOG_MAX_TOKENS) {
      memcpy(c->tokens[c->ntokens], start, n);
      c->tokens[c->ntokens][n] = '\0';
      c->ntokens++;
    }
  }
  /* "^" alone excludes nothing. */
}

static int ul__log_subsys_listed(const ul__log_cfg_t *c, const char *subsys) {
  if (c->all) return 1;
  int core = ul__is_core_subsys(subsys);
  for (int i = 0; i < c->ntokens; i++) {
    if (strcasecmp(c->tokens[i], subsys) == 0) return 1;
    if (!core && strcasecmp(c->tokens[i], "BACKEND") == 0) return 1;
  }
  return 0;
}

/* Expand %h (host) and %p (pid); %% is a literal percent. */
static void ul__log_expand_path(const char *in, char *out, size_t len, const char *host) {
  size_t o = 0;
  for (const char *p = in; *p && o + 1 < len; p++) {
    char tmp[64];
    const char *ins = NULL;
    if (p[0] == '%' && p[1] == 'h') {
      ins = host;
    } else if (p[0] == '%' && p[1] == 'p') {
      snprintf(tmp, sizeof tmp, "%ld", (long)getpid());
      ins = tmp;
    } else if (p[0] == '%' && p[1] == '%') {
      ins = "%";
    }
    if (ins) {
      p++;
      for (; *ins && o + 1 < len; ins++) out[o++] = *ins;
    } else {
      out[o++] = *p;
    }
  }
  out[o] = '\0';
}

static int ul__log_parse_level(const char *text, int *level) {
  static const struct {
    const char *name;
    int level;
  } levels[] = {{"none", UL_LOG_NONE}, {"off", UL_LOG_NONE}, {"warn", UL_LOG_WARN},
                {"info", UL_LOG_INFO}, {"trace", UL_LOG_TRACE}};
  if (text == NULL || text[0] == '\0') {
    *level = UL_LOG_WARN;
    return 1;
  }
  for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
    if (strcasecmp(text, levels[i].name) == 0) {
      *level = levels[i].level;
      return 1;
    }
  *level = UL_LOG_WARN;
  return 0;
}

static void ul__write_line(FILE *out, const ul__log_cfg_t *c, ul_log_level_t level,
                           const char *subsys, const char *msg);

/* Caller holds ul__log_lock. */
static void ul__log_load_locked(void) {
  ul__log_cfg_t *c = &ul__log_cfg;
  if (c->out_owned && c->out) fclose(c->out);
  c->out = stderr;
  c->out_owned = 0;

  if (gethostname(c->host, sizeof c->host) != 0) snprintf(c->host, sizeof c->host, "unknown");
  c->host[sizeof c->host - 1] = '\0';
  char *dot = strchr(c->host, '.');
  if (dot) *dot = '\0';

  const char *file = getenv("UNILINK_DEBUG_FILE");
  char path[4096];
  const char *file_problem = NULL;
  int file_errno = 0;
  if (file && file[0]) {
    ul__log_expand_path(file, path, sizeof path, c->host);
    /* Append: several processes given the same name must not truncate each other. */
    FILE *f = fopen(path, "ae");
    if (f) {
      c->out = f;
      c->out_owned = 1;
    } else {
      file_problem = path;
      file_errno = errno;
    }
  }

  /* getenv, not the registry: the registry logs, and logging starts here. The defaults
   * still come from the one table (param_list.h). */
  const char *subsys = getenv("UNILINK_DEBUG_SUBSYS");
  ul__log_parse_subsys(c, subsys && subsys[0] ? subsys : ul__param_default(UL__P_DEBUG_SUBSYS));

  int level;
  const char *lvl = getenv("UNILINK_DEBUG");
  if (lvl == NULL || lvl[0] == '\0') lvl = ul__param_default(UL__P_DEBUG);
  int ok = ul__log_parse_level(lvl, &level);
  __atomic_store_n(&ul__log_max, (int)level, __ATOMIC_RELAXED);
  atomic_store_explicit(&ul__log_ready, 1, memory_order_release);

  char msg[512];
  if (!ok) {
    snprintf(msg, sizeof msg,
             "UNILINK_DEBUG=\"%.200s\" is not a log level (none, warn, info, trace); using warn",
             lvl);
    ul__write_line(c->out, c, UL_LOG_WARN, "ENV", msg);
  }
  if (file_problem && level >= UL_LOG_WARN) {
    snprintf(msg, sizeof msg, "cannot open UNILINK_DEBUG_FILE \"%.300s\": %s; logging to stderr",
             file_problem, strerror(file_errno));
    ul__write_line(c->out, c, UL_LOG_WARN, "ENV", msg);
  }
}

static void ul__log_ensure(void) {
  if (atomic_load_explicit(&ul__log_ready, memory_order_acquire)) return;
  int saved = errno;
  pthread_mutex_lock(&ul__log_lock);
  if (!atomic_load_explicit(&ul__log_ready, memory_order_relaxed)) ul__log_load_locked();
  pthread_mutex_unlock(&ul__log_lock);
  errno = saved;
}

void ul__log_reset(void) {
  int saved = errno;
  pthread_mutex_lock(&ul__log_lock);
  ul__log_load_locked();
  pthread_mutex_unlock(&ul__log_lock);
  errno = saved;
}

int ul__log_enabled(ul_log_level_t level, const char *subsys) {
  if (level <= UL_LOG_NONE) return 0;
  ul__log_ensure();
  if ((int)level > __atomic_load_n(&ul__log_max, __ATOMIC_RELAXED)) return 0;
  if (level == UL_LOG_WARN) return 1;
  if (subsys == NULL) subsys = "";
  pthread_mutex_lock(&ul__log_lock);
  int listed = ul__log_subsys_listed(&ul__log_cfg, subsys);
  int on = ul__log_cfg.negate ? !listed : listed;
  if (ul__log_cfg.negate && ul__log_cfg.all) on = 0;
  pthread_mutex_unlock(&ul__log_lock);
  return on;
}

static const char *ul__level_name(ul_log_level_t level) {
  switch (level) {
    case UL_LOG_WARN: return "WARN";
    case UL_LOG_INFO: return "INFO";
    case UL_LOG_TRACE: return "TRACE";
    default: return "NONE";
  }
}

/* Caller holds ul__log_lock (or is the loader). One fprintf per line keeps lines whole. */
static void ul__write_line(FILE *out, const ul__log_cfg_t *c, ul_log_level_t level,
                           const char *subsys, const char *msg) {
  if (out == NULL) return;
  fprintf(out, "%s:%ld:%ld unilink %s %s %s\n", c->host, (long)getpid(),
          (long)syscall(SYS_gettid), ul__level_name(level), subsys, msg);
  fflush(out);
}

static void ul__vlog(ul_log_level_t level, const char *subsys, const char *fmt, va_list ap) {
  char msg[UL__LOG_LINE];
  ul__vformat_error(msg, sizeof msg, fmt, ap);
  pthread_mutex_lock(&ul__log_lock);
  ul__write_line(ul__log_cfg.out, &ul__log_cfg, level, subsys ? subsys : "-", msg);
  pthread_mutex_unlock(&ul__log_lock);
}

void ul__log(ul_log_level_t level, const char *subsys, const char *fmt, ...) {
  int saved = errno;
  if (fmt != NULL && ul__log_enabled(level, subsys)) {
    va_list ap;
    va_start(ap, fmt);
    ul__vlog(level, subsys, fmt, ap);
    va_end(ap);
  }
  errno = saved;
}

void ul_backend_log(ul_log_level_t level, const char *subsys, const char *fmt, ...) {
  int saved = errno;
  if (fmt != NULL && ul__log_enabled(level, subsys)) {
    va_list ap;
    va_start(ap, fmt);
    ul__vlog(level, subsys, fmt, ap);
    va_end(ap);
  }
  errno = saved;
}

int ul_backend_log_enabled(ul_log_level_t level, const char *subsys) {
  int saved = errno;
  int on = ul__log_enabled(level, subsys);
  errno = saved;
  return on;
}
