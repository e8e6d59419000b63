/* Backend registry: built-in backends (the generated ul_builtin_backends.h) and plugins
 * (libunilink-<name>.so found in UNILINK_PLUGIN_PATH, the folder of libunilink, then
 * the install folder). Each table is copied into a full-size ul_backend_ops_t whose
 * absent ops are stubs returning UL_ERR_UNSUPPORTED, so the core never calls NULL and
 * never reads past a table's struct_size. Tables that break the contract are refused
 * but stay listed, unavailable with the reason, so unilink-info shows why.
 *
 * Concurrency: slots live at fixed addresses in a fixed-size array and the count is
 * published with release/acquire, so readers need no lock. Loading and probing take
 * recursive locks, because a backend's init may call back into the library.
 *
 * This file: slots, registration, loading a plugin, probing, selection and the API;
 * registry_stubs.c: the stub ops; registry_plugins.c: finding plugin files. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ul_core.h"

#define UL__MAX_BACKENDS 64
#define UL__NAME_MAX 31

/* Every collective of ul_backend_coll_ops_t. */
#define UL__COLL_LIST(X) \
  X(allreduce)           \
  X(broadcast)           \
  X(reduce)              \
  X(allgather)           \
  X(reduce_scatter)      \
  X(alltoall)            \
  X(gather)              \
  X(scatter)             \
  X(barrier)             \
  X(alltoallv)           \
  X(allgatherv)

/* --------------------------------------------------------------- built-ins */
#define UL_BUILTIN_BACKEND(name) extern const ul_backend_ops_t ul_backend_##name;
#include "ul_builtin_backends.h"
#undef UL_BUILTIN_BACKEND

static const ul_backend_ops_t *const ul__builtins[] = {
#define UL_BUILTIN_BACKEND(name) &ul_backend_##name,
#include "ul_builtin_backends.h"
#undef UL_BUILTIN_BACKEND
    NULL};

/* ------------------------------------------------------------------- slots */
typedef struct ul__slot {
  ul__backend_t be;          /* first member: a ul__backend_t* is a ul__slot_t* */
  char name[UL__NAME_MAX + 1];
  char description[160];
  ul_result_t reg_rc;        /* UL_OK, or why the table was refused */
  char file[PATH_MAX];       /* resolved plugin path ("" for built-ins), for dedupe */
} ul__slot_t;

static pthread_mutex_t ul__reg_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t ul__probe_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static ul__slot_t *ul__slots[UL__MAX_BACKENDS];
static atomic_int ul__nslots;
static atomic_int ul__reg_ready;
static int ul__reg_loading; /* guarded by ul__reg_lock */

static int ul__count(void) { return atomic_load_explicit(&ul__nslots, memory_order_acquire); }

static const size_t ul__ops_header_size =
    offsetof(ul_backend_ops_t, priority) + sizeof(((ul_backend_ops_t *)0)->priority);

/* Names are what users type in UNILINK_BACKEND: short, lowercase, no ':' (options). */
static const char *ul__name_problem(const char *name) {
  if (name == NULL || name[0] == '\0') return "has no name";
  size_t n = strnlen(name, UL__NAME_MAX + 1);
  if (n > UL__NAME_MAX) return "has a name longer than 31 characters";
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (!(islower(c) || isdigit(c) || c == '_' || c == '-'))
      return "has a name that is not lowercase letters, digits, '-' and '_'";
  }
  if (strcmp(name, "auto") == 0) return "is named \"auto\", which is reserved";
  return NULL;
}

/* First accepted table of that name; a refused one only if no accepted one exists. */
static ul__slot_t *ul__find_slot(const char *name, size_t len, int accepted_only) {
  int n = ul__count();
  ul__slot_t *refused = NULL;
  for (int i = 0; i < n; i++) {
    ul__slot_t *s = ul__slots[i];
    if (strlen(s->name) != len || strncasecmp(s->name, name, len) != 0) continue;
    if (s->reg_rc == UL_OK) return s;
    if (refused == NULL) refused = s;
  }
  return accepted_only ? NULL : refused;
}

static ul__slot_t *ul__slot_new(void) {
  if (ul__count() >= UL__MAX_BACKENDS) return NULL;
  ul__slot_t *s = calloc(1, sizeof *s);
  return s;
}

static void ul__slot_publish(ul__slot_t *s) {
  int n = ul__count();
  ul__slots[n] = s;
  atomic_store_explicit(&ul__nslots, n + 1, memory_order_release);
}

/* Register a refused table: listed, never usable, with the reason. */
static void ul__add_refused_locked(const char *name, const char *origin, const char *file,
                                   ul_result_t rc, const char *reason) {
  ul__slot_t *s = ul__slot_new();
  if (s == NULL) return;
  snprintf(s->name, sizeof s->name, "%s", name);
  snprintf(s->description, sizeof s->description, "(refused)");
  snprintf(s->be.origin, sizeof s->be.origin, "%s", origin);
  snprintf(s->file, sizeof s->file, "%s", file ? file : "");
  snprintf(s->be.reason, sizeof s->be.reason, "%s", reason);
  s->reg_rc = rc;
  s->be.plugin = file != NULL && file[0] != '\0';
  s->be.ops.abi_version = UL_BACKEND_ABI_VERSION;
  s->be.ops.struct_size = sizeof s->be.ops;
  s->be.ops.name = s->name;
  s->be.ops.description = s->description;
  ul__fill_all_stubs(&s->be.ops);
  s->be.coll.struct_size = sizeof s->be.coll;
  s->be.ops.coll = &s->be.coll;
  s->be.caps.struct_size = sizeof s->be.caps;
  s->be.probed = 1; /* nothing to probe */
  s->be.status = UL_ERR_UNAVAILABLE;
  ul__slot_publish(s);
}

/* Validate, copy and register one table. hint: name to show if the table's own cannot
 * be trusted (plugin file name). Takes ownership of dl_handle (closed on refusal). */
static ul_result_t ul__add_locked(const ul_backend_ops_t *ops, const char *origin,
                                  void *dl_handle, const char *file, const char *hint) {
  char reason[256];
  ul_result_t rc = UL_OK;
  const char *what = dl_handle ? "plugin" : "backend";
  const char *label = hint;
  if (label == NULL && ops != NULL &&
      ops->struct_size >= offsetof(ul_backend_ops_t, name) + sizeof(ops->name) && ops->name &&
      ul__name_problem(ops->name) == NULL)
    label = ops->name;
  if (label == NULL) label = "unnamed";

  if (ul__count() >= UL__MAX_BACKENDS) {
    UL_WARN("INIT", "%s \"%s\" (%s) not registered: more than %d backends", what, label, origin,
            UL__MAX_BACKENDS);
    if (dl_handle) dlclose(dl_handle);
    return ul__set_thread_error(UL_ERR_NO_MEMORY, "backend registry is full (%d entries)",
                                UL__MAX_BACKENDS);
  }
  if (ops == NULL) {
    rc = UL_ERR_INVALID_ARG;
    snprintf(reason, sizeof reason, "%s \"%s\" returned no backend table (%.160s)", what, label,
             origin);
  } else if (UL_BACKEND_ABI_MAJOR_OF(ops->abi_version) != UL_BACKEND_ABI_MAJOR) {
    rc = UL_ERR_VERSION;
    snprintf(reason, sizeof reason,
             "%s \"%s\" built for backend ABI %u.x, this libunilink speaks %d.x (%.160s)", what,
             label, (unsigned)UL_BACKEND_ABI_MAJOR_OF(ops->abi_version), UL_BACKEND_ABI_MAJOR,
             origin);
  } else if (ops->struct_size < ul__ops_header_size) {
    rc = UL_ERR_VERSION;
    snprintf(reason, sizeof reason,
             "%s \"%s\" has a table of %zu bytes, smaller than the %zu-byte header "
             "(abi_version, struct_size, name, description, priority) (%.100s)",
             what, label, ops->struct_size, ul__ops_header_size, origin);
  } else if (ul__name_problem(ops->name) != NULL) {
    rc = UL_ERR_INVALID_ARG;
    snprintf(reason, sizeof reason, "%s \"%s\" %s (%.160s)", what, label,
             ul__name_problem(ops->name), origin);
  } else {
    ul__slot_t *first = ul__find_slot(ops->name, strlen(ops->name), 1);
    if (first != NULL) {
      rc = UL_ERR_INVALID_ARG;
      snprintf(reason, sizeof reason,
               "%s \"%s\" has the same name as the backend from %.90s, which is used "
               "(%.90s)",
               what, ops->name, first->be.origin, origin);
      label = ops->name;
    }
  }
  if (rc != UL_OK) {
    UL_WARN("INIT", "refused %s", reason);
    /* label may point into the plugin's own strings: keep a copy past dlclose. */
    char label_copy[UL__NAME_MAX + 1];
    snprintf(label_copy, sizeof label_copy, "%s", label ? label : "");
    if (dl_handle) dlclose(dl_handle);
    ul__add_refused_locked(label ? label_copy : NULL, origin, file, rc, reason);
    return ul__set_thread_error(rc, "refused %s", reason);
  }

  ul__slot_t *s = ul__slot_new();
  if (s == NULL) {
    if (dl_handle) dlclose(dl_handle);
    return ul__set_thread_error(UL_ERR_NO_MEMORY, "no memory to register backend \"%s\"",
                                ops->name);
  }
  /* Copy what the table declares, never more; ops past struct_size stay NULL. */
  const size_t declared = ops->struct_size;
  memcpy(&s->be.ops, ops, declared < sizeof s->be.ops ? declared : sizeof s->be.ops);
  ul__fill_missing_ops(&s->be.ops, declared);

  const ul_backend_coll_ops_t *coll = NULL;
  if (offsetof(ul_backend_ops_t, coll) + sizeof(ops->coll) <= declared) coll = ops->coll;
  memset(&s->be.coll, 0, sizeof s->be.coll);
  if (coll != NULL && coll->struct_size > sizeof(size_t)) {
    const size_t csz = coll->struct_size;
    memcpy(&s->be.coll, coll, csz < sizeof s->be.coll ? csz : sizeof s->be.coll);
#define UL__FILL_COLL(field)                                                               \
  if (offsetof(ul_backend_coll_ops_t, field) + sizeof(s->be.coll.field) > csz)            \
    s->be.coll.field = NULL;
    UL__COLL_LIST(UL__FILL_COLL)
#undef UL__FILL_COLL
  }
  s->be.coll.struct_size = sizeof s->be.coll;
  s->be.ops.coll = &s->be.coll;

  snprintf(s->name, sizeof s->name, "%s", ops->name);
  const char *desc = NULL;
  if (offsetof(ul_backend_ops_t, description) + sizeof(ops->description) <= declared)
    desc = ops->description;
  snprintf(s->description, sizeof s->description, "%s", desc ? desc : "");
  s->be.ops.name = s->name;
  s->be.ops.description = s->description;
  s->be.ops.struct_size = sizeof s->be.ops;
  s->be.caps.struct_size = sizeof s->be.caps;
  s->be.plugin = dl_handle != NULL;
  s->be.dl_handle = dl_handle;
  snprintf(s->be.origin, sizeof s->be.origin, "%s", origin);
  snprintf(s->file, sizeof s->file, "%s", file ? file : "");
  s->reg_rc = UL_OK;
  ul__slot_publish(s);
  UL_INFO("INIT", "registered backend \"%s\" (%s, ABI %u.%u, priority %d)", s->name, origin,
          (unsigned)UL_BACKEND_ABI_MAJOR_OF(ops->abi_version),
          (unsigned)(ops->abi_version & 0xffffu), ops->priority);
  return UL_OK;
}

/* --------------------------------------------------------------- plugins */
ul_result_t ul__load_plugin_locked(const char *path) {
  char real[PATH_MAX];
  if (realpath(path, real) == NULL)
    return ul__set_thread_error(UL_ERR_NOT_FOUND, "plugin %s: %s", path, strerror(errno));
  int n = ul__count();
  for (int i = 0; i < n; i++)
    if (ul__slots[i]->file[0] && strcmp(ul__slots[i]->file, real) == 0)
      return ul__slots[i]->reg_rc; /* already seen (same file reached twice) */

  char hint[UL__NAME_MAX + 1];
  ul__plugin_hint(real, hint, sizeof hint);
  char reason[256];

  (void)dlerror();
  void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    snprintf(reason, sizeof reason, "plugin \"%s\" could not be loaded: %.180s", hint,
             e ? e : "unknown dlopen error");
    /* Usually a vendor library missing on this machine: normal, so INFO, not WARN. */
    UL_INFO("INIT", "%s", reason);
    ul__add_refused_locked(hint, real, real, UL_ERR_UNAVAILABLE, reason);
    return ul__set_thread_error(UL_ERR_UNAVAILABLE, "%s", reason);
  }
  ul_backend_entry_fn entry;
  *(void **)&entry = dlsym(h, UL_BACKEND_ENTRY_SYMBOL);
  if (entry == NULL) {
    snprintf(reason, sizeof reason, "plugin \"%s\" does not export %s() (%.160s)", hint,
             UL_BACKEND_ENTRY_SYMBOL, real);
    UL_WARN("INIT", "refused %s", reason);
    dlclose(h);
    ul__add_refused_locked(hint, real, real, UL_ERR_INVALID_ARG, reason);
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "refused %s", reason);
  }
  return ul__add_locked(entry(), real, h, real, hint);
}

static void ul__registry_ensure(void) {
  if (atomic_load_explicit(&ul__reg_ready, memory_order_acquire)) return;
  int saved = errno;
  pthread_mutex_lock(&ul__reg_lock);
  /* A backend calling back into the registry while we load sees the partial list. */
  if (!atomic_load_explicit(&ul__reg_ready, memory_order_relaxed) && !ul__reg_loading) {
    ul__reg_loading = 1;
    for (size_t i = 0; ul__builtins[i] != NULL; i++)
      (void)ul__add_locked(ul__builtins[i], "built-in", NULL, NULL, NULL);
    ul__load_plugins_locked(ul__load_plugin_locked);
    ul__reg_loading = 0;
    atomic_store_explicit(&ul__reg_ready, 1, memory_order_release);
  }
  pthread_mutex_unlock(&ul__reg_lock);
  errno = saved;
}

/* ----------------------------------------------------------------- probing */
static void ul__probe(ul__slot_t *s) {
  pthread_mutex_lock(&ul__probe_lock);
  if (s->be.probed) {
    pthread_mutex_unlock(&ul__probe_lock);
    return;
  }
  ul__backend_t *b = &s->be;
  b->probed = 1; /* before init: a re-entrant call must not probe again */
  b->status = UL_ERR_UNAVAILABLE;
  snprintf(b->reason, sizeof b->reason, "backend \"%s\" is still being probed", s->name);

  char reason[sizeof b->reason] = "";
  ul_result_t rc = UL_OK;
  if (!ul__op_is_stub((const void *)b->ops.init)) rc = b->ops.init(reason, sizeof reason);
  reason[sizeof reason - 1] = '\0';
  if (rc != UL_OK && reason[0] == '\0')
    snprintf(reason, sizeof reason, "init returned %s (%s)", ul_result_name(rc),
             ul_result_string(rc));

  ul_backend_caps_t caps;
  memset(&caps, 0, sizeof caps);
  caps.struct_size = sizeof caps;
  if (!ul__op_is_stub((const void *)b->ops.query_caps)) {
    /* Also for unavailable backends: unilink-info shows their static caps. */
    ul_result_t crc = b->ops.query_caps(&caps);
    if (crc != UL_OK) {
      memset(&caps, 0, sizeof caps);
      if (rc == UL_OK) {
        rc = crc;
        snprintf(reason, sizeof reason, "query_caps returned %s", ul_result_name(crc));
      }
    }
  }
  caps.struct_size = sizeof caps;
  caps.version[sizeof caps.version - 1] = '\0';
  b->caps = caps;
  if (rc == UL_OK) reason[0] = '\0';
  memcpy(b->reason, reason, sizeof b->reason);
  b->status = rc;
  if (rc == UL_OK)
    UL_INFO("INIT", "backend \"%s\" available%s%s", s->name, caps.version[0] ? ", version " : "",
            caps.version);
  else
    UL_INFO("INIT", "backend \"%s\" unavailable: %s", s->name, reason);
  pthread_mutex_unlock(&ul__probe_lock);
}

/* "auto" picks among backends that take host memory: a program that asked for no
 * device memory (malloc buffers) must never land on nccl/cuda/ze, whose kernels cannot
 * read it. "auto:device" picks among device-memory backends only. */
static ul__slot_t *ul__best_of(int device) {
  ul__slot_t *best = NULL;
  int n = ul__count();
  for (int i = 0; i < n; i++) {
    ul__slot_t *s = ul__slots[i];
    ul__probe(s);
    if (s->be.status != UL_OK) continue;
    if (((s->be.caps.features & UL_FEATURE_DEVICE_MEMORY) != 0) != device) continue;
    if (best == NULL || s->be.ops.priority > best->be.ops.priority) best = s; /* ties: first */
  }
  return best;
}
static ul__slot_t *ul__best(void) { return ul__best_of(0); }

/* "name" or "name:options" -> length of the name part. */
static size_t ul__name_len(const char *name) {
  const char *colon = strchr(name, ':');
  return colon ? (size_t)(colon - name) : strlen(name);
}

static int ul__is_auto(const char *name) {
  size_t len = ul__name_len(name);
  return len == 0 || (len == 4 && strncasecmp(name, "auto", 4) == 0);
}

/* --------------------------------------------------------------- internal API */
int ul__registry_count(void) {
  ul__registry_ensure();
  return ul__count();
}

ul__backend_t *ul__registry_at(int index) {
  ul__registry_ensure();
  if (index < 0 || index >= ul__count()) return NULL;
  ul__probe(ul__slots[index]);
  return &ul__slots[index]->be;
}

static void ul__list_names(char *buf, size_t len, int with_reasons) {
  size_t o = 0;
  buf[0] = '\0';
  int n = ul__count();
  for (int i = 0; i < n && o + 1 < len; i++) {
    ul__slot_t *s = ul__slots[i];
    int w;
    if (with_reasons)
      w = snprintf(buf + o, len - o, "%s%s (%s)", i ? "; " : "", s->name, s->be.reason);
    else
      w = snprintf(buf + o, len - o, "%s%s", i ? ", " : "", s->name);
    if (w < 0) break;
    o += (size_t)w;
  }
  if (n == 0) snprintf(buf, len, "none");
}

ul_result_t ul__registry_find_bootstrap(ul__backend_t **out) {
  *out = NULL;
  ul__registry_ensure();
  char why[400] = "";
  size_t o = 0;
  int n = ul__count();
  for (int i = 0; i < n; i++) {
    ul__slot_t *s = ul__slots[i];
    if (ul__op_is_stub((const void *)s->be.ops.bootstrap_bcast)) continue;
    ul__probe(s);
    if (s->be.status == UL_OK) {
      *out = &s->be;
      return UL_OK;
    }
    if (o + 1 < sizeof why)
      o += (size_t)snprintf(why + o, sizeof why - o, "%s%s: %s", o ? "; " : "", s->name,
                            s->be.reason);
  }
  return ul__set_thread_error(UL_ERR_UNAVAILABLE,
                              "no usable backend offers a launcher bootstrap (the mpi plugin, "
                              "libunilink-mpi.so, does)%s%s",
                              why[0] ? ": " : "", why);
}

ul_result_t ul__registry_find(const char *name, ul__backend_t **out) {
  if (out) *out = NULL;
  if (out == NULL)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "backend lookup: output is NULL");
  ul__registry_ensure();
  char list[400];
  if (name == NULL || ul__is_auto(name)) {
    const char *colon = name ? strchr(name, ':') : NULL;
    int device = colon && strcmp(colon + 1, "device") == 0;
    ul__slot_t *best = ul__best_of(device);
    if (best == NULL) {
      ul__list_names(list, sizeof list, 1);
      return ul__set_thread_error(UL_ERR_UNAVAILABLE, "no %sbackend is available on this machine: %s",
                                  device ? "device-memory " : "", list);
    }
    *out = &best->be;
    return UL_OK;
  }
  size_t len = ul__name_len(name);
  ul__slot_t *s = ul__find_slot(name, len, 0);
  if (s == NULL) {
    ul__list_names(list, sizeof list, 0);
    return ul__set_thread_error(UL_ERR_NOT_FOUND, "unknown backend \"%.*s\"; registered: %s",
                                (int)(len > 64 ? 64 : len), name, list);
  }
  ul__probe(s);
  if (s->be.status != UL_OK)
    return ul__set_thread_error(UL_ERR_UNAVAILABLE, "backend \"%s\" is unavailable: %s",
                                s->name, s->be.reason);
  *out = &s->be;
  return UL_OK;
}

ul_result_t ul__registry_add(const ul_backend_ops_t *ops, const char *origin, void *dl_handle) {
  ul__registry_ensure();
  pthread_mutex_lock(&ul__reg_lock);
  ul_result_t rc = ul__add_locked(ops, origin ? origin : "built-in", dl_handle, NULL, NULL);
  pthread_mutex_unlock(&ul__reg_lock);
  return rc;
}

ul_result_t ul__registry_load_plugin(const char *path) {
  if (path == NULL || path[0] == '\0')
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "plugin path is NULL or empty");
  ul__registry_ensure();
  pthread_mutex_lock(&ul__reg_lock);
  ul_result_t rc = ul__load_plugin_locked(path);
  pthread_mutex_unlock(&ul__reg_lock);
  return rc;
}

void ul__registry_reset(void) {
  pthread_mutex_lock(&ul__reg_lock);
  pthread_mutex_lock(&ul__probe_lock);
  int n = ul__count();
  atomic_store_explicit(&ul__reg_ready, 0, memory_order_release);
  atomic_store_explicit(&ul__nslots, 0, memory_order_release);
  for (int i = n - 1; i >= 0; i--) {
    ul__slot_t *s = ul__slots[i];
    if (s->be.probed && s->be.status == UL_OK && !ul__op_is_stub((const void *)s->be.ops.fini))
      s->be.ops.fini();
    if (s->be.dl_handle) dlclose(s->be.dl_handle);
    free(s);
    ul__slots[i] = NULL;
  }
  pthread_mutex_unlock(&ul__probe_lock);
  pthread_mutex_unlock(&ul__reg_lock);
}

/* ----------------------------------------------------------------- public API */
int ul_backend_count(void) { return ul__registry_count(); }

static ul_result_t ul__check_info(ul_backend_info_t *info, const char *fn) {
  if (info == NULL) return ul__set_thread_error(UL_ERR_INVALID_ARG, "%s: info is NULL", fn);
  const size_t min = offsetof(ul_backend_info_t, available) + sizeof(info->available);
  if (info->struct_size < min || info->struct_size > 64u * 1024u)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "%s: info->struct_size is %zu; set it to sizeof(ul_backend_info_t)",
                                fn, info->struct_size);
  return UL_OK;
}

static void ul__fill_info(ul__slot_t *s, ul_backend_info_t *info) {
  ul__probe(s);
  ul_backend_info_t full;
  memset(&full, 0, sizeof full);
  const ul__backend_t *b = &s->be;
  full.name = s->name;
  full.description = s->description;
  full.available = b->status == UL_OK;
  snprintf(full.reason, sizeof full.reason, "%s", full.available ? "" : b->reason);
  full.features = b->caps.features;
  uint32_t native = b->caps.native_colls;
#define UL__NATIVE_BIT(field) \
  if (b->coll.field != NULL) native |= 1u << UL_COLL_##field;
#define UL_COLL_allreduce UL_COLL_ALLREDUCE
#define UL_COLL_broadcast UL_COLL_BROADCAST
#define UL_COLL_reduce UL_COLL_REDUCE
#define UL_COLL_allgather UL_COLL_ALLGATHER
#define UL_COLL_reduce_scatter UL_COLL_REDUCE_SCATTER
#define UL_COLL_alltoall UL_COLL_ALLTOALL
#define UL_COLL_gather UL_COLL_GATHER
#define UL_COLL_scatter UL_COLL_SCATTER
#define UL_COLL_barrier UL_COLL_BARRIER
#define UL_COLL_alltoallv UL_COLL_ALLTOALLV
#define UL_COLL_allgatherv UL_COLL_ALLGATHERV
  UL__COLL_LIST(UL__NATIVE_BIT)
#undef UL__NATIVE_BIT
  full.collectives = native;
  if (b->caps.features & UL_FEATURE_GENERIC_COLL)
    full.collectives |= ((1u << UL_COLL_SENDRECV) - 1u) | (1u << UL_COLL_ALLTOALLV) |
                        (1u << UL_COLL_ALLGATHERV);
  if (b->caps.features & UL_FEATURE_P2P) full.collectives |= 1u << UL_COLL_SENDRECV;
  full.dtypes = b->caps.dtypes;
  full.ops = b->caps.ops;
  full.reduce_dtypes = b->caps.reduce_dtypes;
  full.max_ranks = b->caps.max_ranks;
  full.plugin = b->plugin;
  snprintf(full.origin, sizeof full.origin, "%s", b->origin);
  snprintf(full.version, sizeof full.version, "%s", b->caps.version);
  /* Write only what the caller's struct holds (older, shorter headers). */
  size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
  full.struct_size = info->struct_size;
  memcpy(info, &full, n);
}

ul_result_t ul_backend_get_info(int index, ul_backend_info_t *info) {
  UL_CHECK(ul__check_info(info, "ul_backend_get_info"));
  ul__registry_ensure();
  int n = ul__count();
  if (index < 0 || index >= n)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_backend_get_info: index %d is out of range (%d backends)",
                                index, n);
  ul__fill_info(ul__slots[index], info);
  return UL_OK;
}

ul_result_t ul_backend_query(const char *name, ul_backend_info_t *info) {
  if (name == NULL)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_backend_query: name is NULL");
  UL_CHECK(ul__check_info(info, "ul_backend_query"));
  ul__registry_ensure();
  ul__slot_t *s;
  if (ul__is_auto(name)) {
    s = ul__best();
    if (s == NULL)
      return ul__set_thread_error(UL_ERR_NOT_FOUND,
                                  "ul_backend_query: \"auto\" finds no available backend");
  } else {
    size_t len = ul__name_len(name);
    s = ul__find_slot(name, len, 0);
    if (s == NULL) {
      char list[400];
      ul__list_names(list, sizeof list, 0);
      return ul__set_thread_error(UL_ERR_NOT_FOUND,
                                  "ul_backend_query: unknown backend \"%.*s\"; registered: %s",
                                  (int)(len > 64 ? 64 : len), name, list);
    }
  }
  ul__fill_info(s, info);
  return UL_OK;
}

const char *ul_backend_auto(void) {
  ul__registry_ensure();
  ul__slot_t *s = ul__best();
  return s ? s->name : NULL;
}
