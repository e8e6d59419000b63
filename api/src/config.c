/* Resolve a communicator configuration: explicit field > UNILINK_* environment >
 * default. Only fields that fit in cfg->struct_size are read, so programs built
 * against an older (shorter) ul_config_t keep working. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ul_core.h"

#define UL__CONFIG_MAX_STRUCT (64u * 1024u)
#define UL__BACKEND_NAME_MAX 31

/* Does field [off, off+size) lie inside the caller's struct? */
#define UL__CFG_HAS(cfg, field)                                                      \
  ((cfg) != NULL && offsetof(ul_config_t, field) + sizeof(((ul_config_t *)0)->field) <= \
                        (cfg)->struct_size)

static const char *ul__env_text(const char *var) {
  const char *v = getenv(var);
  return (v && v[0]) ? v : NULL;
}

ul_result_t ul__config_resolve(const ul_config_t *cfg, ul__config_t *out) {
  if (out == NULL) return ul__set_thread_error(UL_ERR_INVALID_ARG, "config: output is NULL");
  const size_t min_size = offsetof(ul_config_t, backend) + sizeof(cfg->backend);
  if (cfg != NULL && (cfg->struct_size < min_size || cfg->struct_size > UL__CONFIG_MAX_STRUCT))
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "config.struct_size is %zu; expected between %zu and %u "
                                "(initialise the config with UL_CONFIG_INIT)",
                                cfg->struct_size, min_size, UL__CONFIG_MAX_STRUCT);

  /* Build in a local so that a rejected config leaves *out untouched. */
  ul__config_t r;
  memset(&r, 0, sizeof r);
  r.device = UL_CONFIG_UNDEF;
  r.blocking = 1;

  /* backend */
  const char *backend = NULL, *backend_src = NULL;
  const char *env_backend = ul__param_get_str(UL__P_BACKEND);
  if (UL__CFG_HAS(cfg, backend) && cfg->backend != NULL) {
    backend = cfg->backend;
    backend_src = "config.backend";
    if (ul__env_text("UNILINK_BACKEND"))
      UL_INFO("ENV", "UNILINK_BACKEND=%s is ignored: config.backend=\"%s\" was set explicitly",
              env_backend, cfg->backend);
  } else {
    backend = env_backend;
    backend_src = "UNILINK_BACKEND";
  }
  if (backend == NULL || strcasecmp(backend, "auto") == 0) backend = "";
  if (strlen(backend) > UL__BACKEND_NAME_MAX)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "%s \"%.64s%s\" is %zu characters long; backend names have at "
                                "most %d",
                                backend_src, backend, strlen(backend) > 64 ? "..." : "",
                                strlen(backend), UL__BACKEND_NAME_MAX);
  snprintf(r.backend, sizeof r.backend, "%s", backend);

  /* timeout_ms */
  if (UL__CFG_HAS(cfg, timeout_ms) && cfg->timeout_ms != UL_CONFIG_UNDEF) {
    if (cfg->timeout_ms < 0)
      return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                  "config.timeout_ms is %" PRId32
                                  "; it must be >= 0 (0 waits forever)",
                                  cfg->timeout_ms);
    r.timeout_ms = cfg->timeout_ms;
    if (ul__env_text("UNILINK_TIMEOUT_MS"))
      UL_INFO("ENV", "UNILINK_TIMEOUT_MS=%s is ignored: config.timeout_ms=%" PRId32
              " was set explicitly", ul__env_text("UNILINK_TIMEOUT_MS"), cfg->timeout_ms);
  } else {
    int64_t t = ul__param_get_int(UL__P_TIMEOUT_MS);
    if (t < 0 || t > INT32_MAX) {
      int64_t bad = t;
      t = ul__param_default_int(UL__P_TIMEOUT_MS);
      UL_WARN("ENV", "UNILINK_TIMEOUT_MS=%" PRId64 " is out of range (0..%d); using %" PRId64,
              bad, INT32_MAX, t);
    }
    r.timeout_ms = (int)t;
  }

  /* check */
  if (UL__CFG_HAS(cfg, check) && cfg->check != UL_CONFIG_UNDEF) {
    if (cfg->check != 0 && cfg->check != 1)
      return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                  "config.check is %" PRId32 "; it must be 0 or 1",
                                  cfg->check);
    r.check = cfg->check;
    if (ul__env_text("UNILINK_CHECK"))
      UL_INFO("ENV", "UNILINK_CHECK=%s is ignored: config.check=%" PRId32 " was set explicitly",
              ul__env_text("UNILINK_CHECK"), cfg->check);
  } else {
    int64_t c = ul__param_get_int(UL__P_CHECK);
    if (c != 0 && c != 1) {
      UL_WARN("ENV", "UNILINK_CHECK=%" PRId64 " must be 0 or 1; using 0", c);
      c = 0;
    }
    r.check = (int)c;
  }

  /* device: no environment variable; the backend decides when undefined. */
  if (UL__CFG_HAS(cfg, device)) {
    if (cfg->device != UL_CONFIG_UNDEF && cfg->device < 0)
      return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                  "config.device is %" PRId32
                                  "; it must be a device index >= 0, or UL_CONFIG_UNDEF to let "
                                  "the backend choose",
                                  cfg->device);
    r.device = cfg->device;
  }

  /* blocking: 1 (default) or 0 (nonblocking mode, as NCCL's config.blocking). */
  if (UL__CFG_HAS(cfg, blocking) && cfg->blocking != UL_CONFIG_UNDEF && cfg->blocking != 0 &&
      cfg->blocking != 1)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "config.blocking is %" PRId32 "; it must be 0 or 1 (or "
                                "UL_CONFIG_UNDEF)",
                                cfg->blocking);
  if (UL__CFG_HAS(cfg, blocking) && cfg->blocking == 0) r.blocking = 0;

  /* name: a log label; silently shortened to fit. */
  if (UL__CFG_HAS(cfg, name) && cfg->name != NULL) snprintf(r.name, sizeof r.name, "%s", cfg->name);

  *out = r;
  return UL_OK;
}
