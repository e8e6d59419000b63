/* The UNILINK_* parameter registry. Every parameter the project ships is defined once in
 * param_list.h (type, default, owner, help): all of them are registered up front, so
 * unilink-info lists them before any backend loads, and a lookup by name takes the
 * default and help from that table, whatever its caller passes. Parameters of
 * out-of-tree plugins register on first read with the caller's default and help.
 * Values are read from the environment on every call:
 * reads are rare (communicator creation, tuning decisions) and tests change the
 * environment between calls. Strings handed out are interned and never freed, so a
 * pointer returned once stays valid even after the environment changes. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ul_core.h"

#define UL__PARAM_PREFIX "UNILINK_"
#define UL__PARAM_NAME_MAX 64

typedef struct ul__str_node {
  struct ul__str_node *next;
  char text[];
} ul__str_node_t;

/* The table's integer default (constant text, checked by the unit tests). */
static int64_t ul__param_def_int(const ul__param_def_t *d) {
  int64_t v = 0;
  (void)ul__parse_int(d->def, &v, NULL, 0);
  return v;
}

typedef struct ul__param {
  char name[UL__PARAM_NAME_MAX];          /* without prefix: "TIMEOUT_MS" */
  char env[UL__PARAM_NAME_MAX + 8];       /* "UNILINK_TIMEOUT_MS" */
  ul__param_type_t type;
  const char *owner;                      /* static: from the table, else "other" */
  const char *def_text;                   /* interned; "" when none */
  const char *help;                       /* interned */
  ul__str_node_t *warned;                 /* bad values already reported */
  const char *logged;                     /* last value reported at INFO (interned) */
} ul__param_t;

static pthread_mutex_t ul__param_lock = PTHREAD_MUTEX_INITIALIZER;
static ul__param_t *ul__params;
static int ul__nparams, ul__cap_params;
static ul__str_node_t *ul__interned;

/* Caller holds the lock. Returns a process-lifetime copy of s (NULL on no memory). */
static const char *ul__intern_locked(const char *s) {
  if (s == NULL) return NULL;
  for (ul__str_node_t *n = ul__interned; n; n = n->next)
    if (strcmp(n->text, s) == 0) return n->text;
  size_t len = strlen(s);
  ul__str_node_t *n = malloc(sizeof *n + len + 1);
  if (n == NULL) return NULL;
  memcpy(n->text, s, len + 1);
  n->next = ul__interned;
  ul__interned = n;
  return n->text;
}

/* "UNILINK_FOO" and "FOO" name the same parameter. Names are [A-Z0-9_]+. */
static int ul__param_normalize(const char *name, char *out) {
  if (name == NULL) return 0;
  if (strncmp(name, UL__PARAM_PREFIX, strlen(UL__PARAM_PREFIX)) == 0)
    name += strlen(UL__PARAM_PREFIX);
  size_t n = strlen(name);
  if (n == 0 || n >= UL__PARAM_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)name[i];
    if (!(isupper(ch) || isdigit(ch) || ch == '_')) return 0;
  }
  memcpy(out, name, n + 1);
  return 1;
}

static void ul__params_register_core_locked(void);
static int ul__core_registered; /* guarded by ul__param_lock */

/* Caller holds the lock. First registration fixes type, default and help. */
static ul__param_t *ul__param_register_locked(const char *name, ul__param_type_t type,
                                              const char *def_text, const char *help) {
  /* Core parameters first, whoever asks first, so listings keep one stable order. */
  if (!ul__core_registered) {
    ul__core_registered = 1;
    ul__params_register_core_locked();
  }
  for (int i = 0; i < ul__nparams; i++)
    if (strcmp(ul__params[i].name, name) == 0) {
      ul__param_t *p = &ul__params[i];
      if ((p->help == NULL || p->help[0] == '\0') && help && help[0])
        p->help = ul__intern_locked(help);
      return p;
    }
  if (ul__nparams == ul__cap_params) {
    int cap = ul__cap_params ? 2 * ul__cap_params : 32;
    ul__param_t *np = realloc(ul__params, (size_t)cap * sizeof *np);
    if (np == NULL) return NULL;
    ul__params = np;
    ul__cap_params = cap;
  }
  ul__param_t *p = &ul__params[ul__nparams];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  snprintf(p->env, sizeof p->env, UL__PARAM_PREFIX "%s", name);
  p->type = type;
  const ul__param_def_t *d = ul__param_def_find(name);
  p->owner = d ? d->owner : "other";
  p->def_text = ul__intern_locked(def_text ? def_text : "");
  p->help = ul__intern_locked(help ? help : "");
  if (p->def_text == NULL || p->help == NULL) return NULL;
  ul__nparams++;
  return p;
}

/* Caller holds the lock. 1 if this bad value was not reported before (and records it). */
static int ul__param_first_warning_locked(ul__param_t *p, const char *value) {
  for (ul__str_node_t *n = p->warned; n; n = n->next)
    if (strcmp(n->text, value) == 0) return 0;
  size_t len = strlen(value);
  ul__str_node_t *n = malloc(sizeof *n + len + 1);
  if (n == NULL) return 1;
  memcpy(n->text, value, len + 1);
  n->next = p->warned;
  p->warned = n;
  return 1;
}

/* Caller holds the lock. 1 if value differs from the last one reported at INFO. */
static int ul__param_first_info_locked(ul__param_t *p, const char *value) {
  const char *v = ul__intern_locked(value);
  if (v == NULL || v == p->logged) return 0;
  p->logged = v;
  return 1;
}

ul_result_t ul__parse_int(const char *text, int64_t *out, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (text == NULL || out == NULL) {
    if (err && errlen) snprintf(err, errlen, "no value given");
    return UL_ERR_INVALID_ARG;
  }
  const char *p = text;
  while (isspace((unsigned char)*p)) p++;
  if (*p == '\0') {
    if (err && errlen) snprintf(err, errlen, "empty value");
    return UL_ERR_INVALID_ARG;
  }
  int neg = 0;
  if (*p == '+' || *p == '-') neg = (*p++ == '-');
  if (!isdigit((unsigned char)*p)) goto garbage;
  uint64_t mag = 0;
  /* The magnitude may reach 2^63 only for a negative number (INT64_MIN). */
  const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
  for (; isdigit((unsigned char)*p); p++) {
    unsigned d = (unsigned)(*p - '0');
    if (mag > (limit - d) / 10) goto overflow;
    mag = mag * 10 + d;
  }
  uint64_t mult = 1;
  switch (*p) {
    case 'k': case 'K': mult = 1ull << 10; p++; break;
    case 'm': case 'M': mult = 1ull << 20; p++; break;
    case 'g': case 'G': mult = 1ull << 30; p++; break;
    default: break;
  }
  while (isspace((unsigned char)*p)) p++;
  if (*p != '\0') goto garbage;
  if (mult != 1) {
    if (mag > limit / mult) goto overflow;
    mag *= mult;
  }
  *out = neg ? (mag == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
  return UL_OK;
garbage:
  if (err && errlen)
    snprintf(err, errlen,
             "\"%.64s\" is not an integer (decimal digits with an optional k, m or g suffix)",
             text);
  return UL_ERR_INVALID_ARG;
overflow:
  if (err && errlen) snprintf(err, errlen, "\"%.64s\" does not fit in a 64-bit integer", text);
  return UL_ERR_INVALID_ARG;
}

int64_t ul__param_int(const char *name, int64_t def, const char *help) {
  char key[UL__PARAM_NAME_MAX];
  if (!ul__param_normalize(name, key)) {
    UL_WARN("ENV", "invalid parameter name \"%s\"; using its default %" PRId64,
            name ? name : "(null)", def);
    return def;
  }
  const ul__param_def_t *d = ul__param_def_find(key);
  if (d) { /* the table is the one definition: a caller's default and help do not count */
    def = ul__param_def_int(d);
    help = d->help;
  }
  char def_text[32];
  snprintf(def_text, sizeof def_text, "%" PRId64, def);

  pthread_mutex_lock(&ul__param_lock);
  ul__param_t *p = ul__param_register_locked(key, UL__PARAM_INT, def_text, help);
  const char *env = p ? p->env : NULL;
  const char *raw = env ? getenv(env) : NULL;
  int64_t value = def;
  int warn = 0, info = 0;
  char err[160] = "";
  char envname[sizeof p->env] = "";
  if (env) snprintf(envname, sizeof envname, "%s", env);
  if (raw && raw[0] != '\0') {
    if (ul__parse_int(raw, &value, err, sizeof err) != UL_OK) {
      value = def;
      warn = ul__param_first_warning_locked(p, raw);
    } else {
      info = ul__param_first_info_locked(p, raw);
    }
  }
  const char *raw_copy = raw ? ul__intern_locked(raw) : NULL;
  pthread_mutex_unlock(&ul__param_lock);

  /* Log outside the lock: logging may be slow (a file) and must not serialise reads. */
  if (warn)
    UL_WARN("ENV", "%s=\"%.64s\" is invalid: %s; using the default %" PRId64, envname,
            raw_copy ? raw_copy : "", err, def);
  if (info) UL_INFO("ENV", "%s set by environment to %" PRId64, envname, value);
  return value;
}

const char *ul__param_str(const char *name, const char *def, const char *help) {
  char key[UL__PARAM_NAME_MAX];
  if (!ul__param_normalize(name, key)) {
    UL_WARN("ENV", "invalid parameter name \"%s\"; using its default", name ? name : "(null)");
    return def;
  }
  const ul__param_def_t *d = ul__param_def_find(key);
  if (d) {
    def = d->def;
    help = d->help;
  }
  pthread_mutex_lock(&ul__param_lock);
  ul__param_t *p = ul__param_register_locked(key, UL__PARAM_STR, def, help);
  const char *raw = p ? getenv(p->env) : NULL;
  const char *result = def;
  int info = 0;
  char envname[UL__PARAM_NAME_MAX + 8] = "";
  if (raw && raw[0] != '\0') {
    const char *v = ul__intern_locked(raw);
    if (v) {
      result = v;
      info = ul__param_first_info_locked(p, raw);
      snprintf(envname, sizeof envname, "%s", p->env);
    }
  }
  pthread_mutex_unlock(&ul__param_lock);
  if (info) UL_INFO("ENV", "%s set by environment to \"%s\"", envname, result);
  return result;
}

/* Register without reading, so that listing parameters never warns on its own. */
static void ul__param_define(const char *name, ul__param_type_t type, const char *def,
                             const char *help) {
  (void)ul__param_register_locked(name, type, def, help);
}

void ul__params_register_core(void) {
  pthread_mutex_lock(&ul__param_lock);
  if (!ul__core_registered) {
    ul__core_registered = 1;
    ul__params_register_core_locked();
  }
  pthread_mutex_unlock(&ul__param_lock);
}

/* Caller holds the lock. The whole table, in its order; the fault switch only where it
 * is compiled in, so a listing never offers a parameter the build ignores. */
static void ul__params_register_core_locked(void) {
  for (int i = 0; i < UL__P_COUNT; i++) {
    const ul__param_def_t *d = ul__param_def_at(i);
    if (i == UL__P_FAULT && !ul__test_hooks_built()) continue;
    ul__param_define(d->name, d->type, d->def, d->help);
  }
}

int64_t ul__param_get_int(ul__param_id_t id) {
  if (id < 0 || id >= UL__P_COUNT || ul__param_def_at(id)->type != UL__PARAM_INT) return 0;
  return ul__param_int(ul__param_def_at(id)->name, 0, NULL);
}

const char *ul__param_get_str(ul__param_id_t id) {
  if (id < 0 || id >= UL__P_COUNT || ul__param_def_at(id)->type != UL__PARAM_STR) return "";
  return ul__param_str(ul__param_def_at(id)->name, NULL, NULL);
}

int64_t ul__param_default_int(ul__param_id_t id) {
  return (id >= 0 && id < UL__P_COUNT) ? ul__param_def_int(ul__param_def_at(id)) : 0;
}

int ul_param_count(void) {
  ul__params_register_core();
  pthread_mutex_lock(&ul__param_lock);
  int n = ul__nparams;
  pthread_mutex_unlock(&ul__param_lock);
  return n;
}

ul_result_t ul_param_get(int index, ul_param_info_t *info) {
  if (info == NULL)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_param_get: info is NULL");
  ul__params_register_core();
  pthread_mutex_lock(&ul__param_lock);
  if (index < 0 || index >= ul__nparams) {
    int n = ul__nparams;
    pthread_mutex_unlock(&ul__param_lock);
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_param_get: index %d is out of range (0..%d)", index, n - 1);
  }
  ul__param_t *p = &ul__params[index];
  const char *raw = getenv(p->env);
  const char *value = raw ? ul__intern_locked(raw) : "";
  info->name = ul__intern_locked(p->env);
  info->value = value ? value : "";
  info->default_value = p->def_text;
  info->help = p->help;
  pthread_mutex_unlock(&ul__param_lock);
  return UL_OK;
}

ul_result_t ul_param_kind(int index, const char **type, const char **owner) {
  ul__params_register_core();
  pthread_mutex_lock(&ul__param_lock);
  if (index < 0 || index >= ul__nparams) {
    int n = ul__nparams;
    pthread_mutex_unlock(&ul__param_lock);
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_param_kind: index %d is out of range (0..%d)", index, n - 1);
  }
  if (type) *type = ul__params[index].type == UL__PARAM_INT ? "int" : "string";
  if (owner) *owner = ul__params[index].owner;
  pthread_mutex_unlock(&ul__param_lock);
  return UL_OK;
}

int64_t ul_backend_param_int(const char *name, int64_t default_value, const char *help) {
  int saved = errno;
  int64_t v = ul__param_int(name, default_value, help);
  errno = saved;
  return v;
}

const char *ul_backend_param_str(const char *name, const char *default_value,
                                 const char *help) {
  int saved = errno;
  const char *v = ul__param_str(name, default_value, help);
  errno = saved;
  return v;
}
