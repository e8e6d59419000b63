/* The template backend: the smallest table the core accepts. It probes, declares its
 * capabilities, makes unique ids and one-rank communicators; every other op is left
 * NULL, so the core's stub filler answers UL_ERR_UNSUPPORTED for it (never test for
 * NULL, never write such stubs yourself). A new backend fills ops one by one, declaring
 * each feature in query_caps only when its ops exist (docs/backend-guide.md). */
#include <stdlib.h>
#include <string.h>
#include <unilink/backend.h>

/* Per-communicator state; the core hands it back to every op. */
struct ul_backend_comm {
  int rank, nranks;
};

/* Probe once per process: UL_ERR_UNAVAILABLE plus a sentence (naming the vendor call and
 * its raw code) when the hardware or driver is missing. The template needs nothing. */
static ul_result_t template_init(char *reason, size_t len) {
  (void)reason;
  (void)len;
  return UL_OK;
}

static ul_result_t template_query_caps(ul_backend_caps_t *caps) {
  /* Ranks as threads of one process, one rank at most: no data movement is declared,
   * so the conformance suite skips every case with "backend does not declare ...". */
  caps->features = UL_FEATURE_THREAD_RANKS;
  caps->flags = UL_BACKEND_HOST_STREAMS | UL_BACKEND_HOST_MEMORY;
  caps->max_ranks = 1;
  return UL_OK;
}

/* Your part of the unique id: what ranks need to find each other (tokens, names). */
static ul_result_t template_get_unique_id(unsigned char *payload, size_t bytes) {
  memset(payload, 0, bytes);
  return UL_OK;
}

static ul_result_t template_comm_init(const ul_backend_comm_args_t *args, ul_backend_comm_t **out,
                                      ul_backend_comm_props_t *props) {
  /* Bad input gets a sentence and changes nothing. */
  if (args->nranks != 1)
    return ul_backend_set_error(args->comm, UL_ERR_UNSUPPORTED,
                                "template: %d ranks asked, the template backend runs one",
                                args->nranks);
  ul_backend_comm_t *c = calloc(1, sizeof *c);
  if (!c) return ul_backend_set_error(args->comm, UL_ERR_NO_MEMORY, "template: out of memory");
  c->rank = args->rank;
  c->nranks = args->nranks;
  strncpy(props->path, "template", sizeof props->path - 1);
  *out = c;
  return UL_OK;
}

static ul_result_t template_comm_destroy(ul_backend_comm_t *c) {
  free(c);
  return UL_OK;
}

static const ul_backend_ops_t template_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "template",
    .description = "template backend: one rank, no data movement (a starting point)",
    .priority = -100, /* never chosen by "auto" */
    .init = template_init,
    .query_caps = template_query_caps,
    .get_unique_id = template_get_unique_id,
    .comm_init = template_comm_init,
    .comm_destroy = template_comm_destroy,
    /* every other op: NULL, stubbed by the core with UL_ERR_UNSUPPORTED */
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &template_ops;
}
