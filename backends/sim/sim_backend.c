/* The sim backend: a peer-copy backend whose ranks are threads of one process. Data
 * moves for real in host memory (so the conformance suite runs on it); the time of
 * every operation comes from the cost model over a modeled topology and is reported
 * through annotate_call (ul_call_info_t::modeled_us, ::algorithm).
 *
 * Topology: the backend options ("sim:dgx-h100" -> "dgx-h100"), else
 * UNILINK_SIM_TOPOLOGY, else dgx-h100. Waits spin briefly, then sleep on a futex in
 * short slices so that timeouts and ul_comm_abort are noticed promptly. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unilink/backend.h>
#include <unistd.h>

#include "ul_model.h"
#include "../util/wait.h"

#define SIM_KEY_MAGIC 0x73696d31u /* "sim1" */
#define SIM_SLICE_MS 10
#define SIM_SPIN 64          /* polls before yielding */
#define SIM_YIELD_MS 0.05    /* then yield (ranks are threads, often more than cores) */

/* ------------------------------------------------------------------ groups */

/* All ranks of one communicator share a group: the join rendezvous and a generation
 * counted exchange used by the collective setup calls (window register/deregister). */
typedef struct sim_group {
  unsigned char key[32];
  int nranks;
  int joined;
  int refs;
  int linked; /* still in the pending list (not all ranks joined yet) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t gen;
  int arrived;
  unsigned char *present; /* nranks: arrived in the current exchange */
  void **slots[2];        /* nranks each, alternating by generation parity */
  atomic_int dead;
  atomic_int aborted_by; /* rank + 1 of the first rank that called ul_comm_abort, 0: none */
  struct sim_group *next;
} sim_group_t;

struct ul_backend_window;

struct ul_backend_comm {
  sim_group_t *g;
  int rank, nranks;
  int timeout_ms;
  const volatile int *abort_flag;
  ul_comm_t core;
  ulsim_topology_t topo;
  double clock_us; /* modeled time consumed by this rank's operations */
  atomic_int dead;
  struct ul_backend_window *windows; /* registered windows, freed at destroy */
  void **allocs;                     /* live ul_mem_alloc blocks (mem_free checks them) */
  size_t nallocs, allocs_cap;
};
typedef struct ul_backend_comm sim_comm_t;

struct ul_backend_window {
  sim_comm_t *c;
  void *base;
  size_t size;
  int nsig;
  _Atomic uint64_t *sig;
  atomic_uint wake;    /* futex word: bumped by every signal */
  atomic_int waiters;  /* sleeping waiters: skip the wake syscall when 0 */
  atomic_int refs;     /* one per rank that may still signal into it */
  struct ul_backend_window **peers; /* nranks */
  struct ul_backend_window *next;
};
typedef struct ul_backend_window sim_window_t;

#define SIM_TOPOLOGY_MAX_BYTES (1 << 20) /* the shipped topologies are a few KiB */
static pthread_mutex_t sim_backend_list_mu = PTHREAD_MUTEX_INITIALIZER;
static sim_group_t *sim_backend_pending;
static ulsim_catalog_t sim_backend_catalog;
static int sim_backend_catalog_ok;
static char sim_backend_catalog_err[512];
static pthread_once_t sim_backend_once = PTHREAD_ONCE_INIT;

static void sim_backend_load_catalog(void) {
  sim_backend_catalog_ok = ulsim_catalog_load_default(&sim_backend_catalog, sim_backend_catalog_err,
                                                      sizeof sim_backend_catalog_err) == UL_OK;
}

/* Between slices: our abort, the group's death (a peer aborted). UL_OK to keep waiting;
 * codes only, each wait says its own sentence. */
static ul_result_t sim_backend_wait_check(void *arg, double elapsed_ms, const char *what) {
  (void)elapsed_ms;
  (void)what;
  sim_comm_t *c = arg;
  if ((c->abort_flag && *c->abort_flag) || atomic_load(&c->dead)) return UL_ERR_ABORTED;
  if (c->g && atomic_load(&c->g->dead))
    return atomic_load(&c->g->aborted_by) ? UL_ERR_PEER_LOST : UL_ERR_ABORTED;
  return UL_OK;
}

/* Waits on the group (under its mutex, woken by its condition variable): no spin, sleep
 * in slices so that aborts and the timeout are seen. */
static ulbu_waiter_t sim_backend_group_waiter(sim_comm_t *c, int timeout_ms) {
  ulbu_waiter_t w = {.arg = c,
                     .check = sim_backend_wait_check,
                     .timeout_ms = timeout_ms,
                     .sleep_ns = SIM_SLICE_MS * 1000000L};
  return w;
}

typedef struct sim_group_cond {
  sim_group_t *g;
  uint64_t gen; /* exchange: wait for the next generation; init: for every rank to join */
} sim_group_cond_t;

static ul_result_t sim_backend_gen_poll(void *arg) {
  sim_group_cond_t *x = arg;
  return x->g->gen != x->gen ? UL_OK : UL_IN_PROGRESS;
}

static ul_result_t sim_backend_joined_poll(void *arg) {
  sim_group_cond_t *x = arg;
  return x->g->joined >= x->g->nranks ? UL_OK : UL_IN_PROGRESS;
}

static void sim_backend_group_block(void *arg, long ns) {
  sim_group_cond_t *x = arg;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += ns;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  pthread_cond_timedwait(&x->g->cv, &x->g->mu, &ts);
}

static void sim_backend_group_free(sim_group_t *g) {
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g->present);
  free(g->slots[0]);
  free(g->slots[1]);
  free(g);
}

static sim_group_t *sim_backend_group_new(const unsigned char *key, int nranks) {
  sim_group_t *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  memcpy(g->key, key, sizeof g->key);
  g->nranks = nranks;
  g->present = calloc((size_t)nranks, 1);
  g->slots[0] = calloc((size_t)nranks, sizeof(void *));
  g->slots[1] = calloc((size_t)nranks, sizeof(void *));
  pthread_mutex_init(&g->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (!g->present || !g->slots[0] || !g->slots[1]) {
    sim_backend_group_free(g);
    return NULL;
  }
  return g;
}

/* Collective exchange: every rank contributes one pointer; all get all of them. */
static ul_result_t sim_backend_exchange(sim_comm_t *c, void *mine, void **all, const char *what) {
  sim_group_t *g = c->g;
  ul_result_t rc = UL_OK;
  pthread_mutex_lock(&g->mu);
  uint64_t gen = g->gen;
  g->slots[gen & 1][c->rank] = mine;
  g->present[c->rank] = 1;
  if (++g->arrived == g->nranks) {
    g->arrived = 0;
    memset(g->present, 0, (size_t)g->nranks);
    g->gen++;
    pthread_cond_broadcast(&g->cv);
  } else {
    ulbu_waiter_t w = sim_backend_group_waiter(c, c->timeout_ms);
    sim_group_cond_t x = {g, gen};
    const ulbu_cond_t next = {sim_backend_gen_poll, sim_backend_group_block, &x};
    rc = ulbu_wait(&w, &next, what, NULL);
  }
  if (rc == UL_OK) {
    if (all) memcpy(all, g->slots[gen & 1], sizeof(void *) * (size_t)g->nranks);
  } else {
    char missing[160] = "";
    size_t n = 0;
    for (int r = 0; r < g->nranks && n + 8 < sizeof missing; r++)
      if (!g->present[r]) n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? "," : "", r);
    /* the exchange can no longer complete consistently: the group is unusable */
    atomic_store(&g->dead, 1);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (rc == UL_ERR_TIMEOUT)
      return ul_backend_set_error(c->core, rc,
                                  "sim: %s on rank %d timed out after %d ms; ranks not arrived: %s",
                                  what, c->rank, c->timeout_ms, missing);
    if (rc == UL_ERR_PEER_LOST)
      return ul_backend_set_error(c->core, rc,
                                  "sim: %s on rank %d: peer rank %d aborted the communicator",
                                  what, c->rank, atomic_load(&g->aborted_by) - 1);
    return ul_backend_set_error(c->core, rc, "sim: %s on rank %d aborted", what, c->rank);
  }
  pthread_mutex_unlock(&g->mu);
  return UL_OK;
}

/* ------------------------------------------------------------------ lifecycle */

static ul_result_t sim_backend_init(char *reason, size_t reason_len) {
  pthread_once(&sim_backend_once, sim_backend_load_catalog);
  if (!sim_backend_catalog_ok) {
    snprintf(reason, reason_len, "sim: %s", sim_backend_catalog_err);
    return UL_ERR_UNAVAILABLE;
  }
  return UL_OK;
}

static void sim_backend_fini(void) {}

static ul_result_t sim_backend_query_caps(ul_backend_caps_t *caps) {
  caps->features = UL_FEATURE_THREAD_RANKS | UL_FEATURE_INIT_ALL | UL_FEATURE_SPLIT |
                   UL_FEATURE_STREAMS | UL_FEATURE_P2P | UL_FEATURE_ONE_SIDED |
                   UL_FEATURE_GENERIC_COLL | UL_FEATURE_MODELED;
  caps->flags = UL_BACKEND_HOST_STREAMS | UL_BACKEND_HOST_MEMORY;
  caps->native_colls = 0;
  caps->dtypes = (1u << UL_DTYPE_COUNT) - 1;
  caps->reduce_dtypes = (1u << UL_DTYPE_COUNT) - 1;
  caps->ops = (1u << UL_OP_COUNT) - 1;
  caps->max_ranks = 0;
  snprintf(caps->version, sizeof caps->version, "model 1");
  return UL_OK;
}

static ul_result_t sim_backend_get_unique_id(unsigned char *payload, size_t payload_bytes) {
  if (payload_bytes < 36) return UL_ERR_INVALID_ARG;
  memset(payload, 0, payload_bytes);
  uint32_t magic = SIM_KEY_MAGIC;
  memcpy(payload, &magic, 4);
  size_t got = 0;
  while (got < 32) {
    ssize_t r = getrandom(payload + 4 + got, 32 - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ul_backend_set_error(NULL, UL_ERR_SYSTEM, "sim: getrandom failed: %s",
                                  strerror(errno));
    }
    got += (size_t)r;
  }
  return UL_OK;
}

static ul_result_t sim_backend_comm_new(const ul_backend_comm_args_t *a, sim_comm_t **out) {
  pthread_once(&sim_backend_once, sim_backend_load_catalog);
  if (!sim_backend_catalog_ok)
    return ul_backend_set_error(a->comm, UL_ERR_UNAVAILABLE, "sim: %s", sim_backend_catalog_err);
  const char *spec = a->options && *a->options ? a->options : NULL;
  if (!spec)
    spec = ul_backend_param_str("SIM_TOPOLOGY", "dgx-h100",
                                "Topology the sim backend models: a preset (unilink-model "
                                "topologies), <preset>x<N>, or a topology file");
  /* A topology file must be a regular file of sane size: a FIFO or device would block
   * or feed the reader without bound (stat does not open it). */
  struct stat sb;
  if (stat(spec, &sb) == 0 && (!S_ISREG(sb.st_mode) || sb.st_size > SIM_TOPOLOGY_MAX_BYTES))
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "sim: topology '%s' is %s; a topology file must be a regular "
                                "file of at most %d bytes",
                                spec, S_ISREG(sb.st_mode) ? "too large" : "not a regular file",
                                SIM_TOPOLOGY_MAX_BYTES);
  sim_comm_t *c = calloc(1, sizeof *c);
  if (!c) return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "sim: out of memory");
  char err[512];
  ul_result_t rc = ulsim_topology_load(spec, &sim_backend_catalog, &c->topo, err, sizeof err);
  if (rc != UL_OK) {
    free(c);
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG, "sim: %s", err);
  }
  ulsim_bw_t bw;
  if (ulsim_bandwidths(&c->topo, a->nranks, &bw, err, sizeof err) != UL_OK) {
    free(c);
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG, "sim: %s", err);
  }
  c->rank = a->rank;
  c->nranks = a->nranks;
  c->timeout_ms = a->timeout_ms;
  c->abort_flag = a->abort_flag;
  c->core = a->comm;
  *out = c;
  return UL_OK;
}

static void sim_backend_props(ul_backend_comm_props_t *props) {
  props->load_store_peers = 1;
  snprintf(props->path, sizeof props->path, "threads (modeled)");
}

static ul_result_t sim_backend_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                         ul_backend_comm_props_t *props) {
  uint32_t magic;
  memcpy(&magic, a->id_payload, 4);
  if (magic != SIM_KEY_MAGIC)
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "sim: the unique id was not made by the sim backend");
  sim_comm_t *c;
  ul_result_t rc = sim_backend_comm_new(a, &c);
  if (rc != UL_OK) return rc;
  /* find or create the group of this id */
  pthread_mutex_lock(&sim_backend_list_mu);
  sim_group_t *g = sim_backend_pending;
  while (g && memcmp(g->key, a->id_payload + 4, sizeof g->key)) g = g->next;
  if (!g) {
    g = sim_backend_group_new(a->id_payload + 4, a->nranks);
    if (!g) {
      pthread_mutex_unlock(&sim_backend_list_mu);
      free(c);
      return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "sim: out of memory");
    }
    g->next = sim_backend_pending;
    g->linked = 1;
    sim_backend_pending = g;
  }
  pthread_mutex_lock(&g->mu);
  if (g->nranks != a->nranks || g->present[a->rank]) {
    int other = g->nranks;
    int dup = g->present[a->rank] != 0;
    pthread_mutex_unlock(&g->mu);
    pthread_mutex_unlock(&sim_backend_list_mu);
    free(c);
    if (dup)
      return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                  "sim: rank %d joined twice with the same unique id", a->rank);
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "sim: rank %d says %d ranks but others said %d", a->rank,
                                a->nranks, other);
  }
  g->present[a->rank] = 1;
  g->refs++;
  c->g = g;
  if (++g->joined == g->nranks) {
    /* everyone is here: unlink so the id could be reused for a new communicator */
    sim_group_t **pp = &sim_backend_pending;
    while (*pp && *pp != g) pp = &(*pp)->next;
    if (*pp) *pp = g->next;
    g->linked = 0;
    memset(g->present, 0, (size_t)g->nranks);
    pthread_cond_broadcast(&g->cv);
  }
  pthread_mutex_unlock(&sim_backend_list_mu);
  ulbu_waiter_t gw = sim_backend_group_waiter(c, c->timeout_ms);
  sim_group_cond_t gx = {g, 0};
  const ulbu_cond_t joined = {sim_backend_joined_poll, sim_backend_group_block, &gx};
  rc = ulbu_wait(&gw, &joined, "init", NULL);
  if (rc != UL_OK) {
    int joined = g->joined, n = g->nranks;
    g->present[c->rank] = 0;
    g->joined--;
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) {
      pthread_mutex_lock(&sim_backend_list_mu);
      sim_group_t **pp = &sim_backend_pending;
      while (*pp && *pp != g) pp = &(*pp)->next;
      if (*pp) *pp = g->next;
      pthread_mutex_unlock(&sim_backend_list_mu);
      sim_backend_group_free(g);
    }
    free(c);
    if (rc == UL_ERR_TIMEOUT)
      return ul_backend_set_error(a->comm, rc,
                                  "sim: rank %d timed out after %d ms waiting for peers (%d of %d "
                                  "joined)",
                                  a->rank, a->timeout_ms, joined, n);
    return ul_backend_set_error(a->comm, rc, "sim: rank %d: init aborted", a->rank);
  }
  pthread_mutex_unlock(&g->mu);
  sim_backend_props(props);
  *out = c;
  return UL_OK;
}

static ul_result_t sim_backend_comm_init_all(const ul_backend_comm_args_t *args, int ndev,
                                             ul_backend_comm_t **out,
                                             ul_backend_comm_props_t *props) {
  unsigned char key[32];
  if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key) memset(key, 0x5a, sizeof key);
  sim_group_t *g = sim_backend_group_new(key, ndev);
  if (!g) return ul_backend_set_error(args[0].comm, UL_ERR_NO_MEMORY, "sim: out of memory");
  for (int i = 0; i < ndev; i++) {
    ul_result_t rc = sim_backend_comm_new(&args[i], &out[i]);
    if (rc != UL_OK) {
      for (int j = 0; j < i; j++) free(out[j]);
      sim_backend_group_free(g);
      return rc;
    }
    out[i]->g = g;
    sim_backend_props(&props[i]);
  }
  g->joined = g->refs = ndev;
  return UL_OK;
}

static ul_result_t sim_backend_comm_finalize(ul_backend_comm_t *c) {
  (void)c; /* nothing is ever left in flight: the core drains host streams first */
  return UL_OK;
}

static void sim_backend_window_free(sim_window_t *w) {
  free(w->peers);
  free(w->sig);
  free(w);
}

/* Drop this rank's references on every window of the registration. A window is freed
 * once no rank can signal into it any more, so deregistration never waits for peers
 * (the core may deregister from ul_comm_destroy, which is local). */
static void sim_backend_window_release(sim_window_t *w) {
  int n = w->c->nranks;
  sim_window_t **peers = malloc(sizeof *peers * (size_t)n);
  if (!peers) return; /* leak rather than risk a use after free */
  memcpy(peers, w->peers, sizeof *peers * (size_t)n);
  for (int p = 0; p < n; p++)
    if (atomic_fetch_sub(&peers[p]->refs, 1) == 1) sim_backend_window_free(peers[p]);
  free(peers);
}

static ul_result_t sim_backend_comm_destroy(ul_backend_comm_t *c) {
  while (c->windows) {
    sim_window_t *w = c->windows;
    c->windows = w->next;
    sim_backend_window_release(w);
  }
  sim_group_t *g = c->g;
  if (g) {
    pthread_mutex_lock(&g->mu);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) sim_backend_group_free(g);
  }
  free(c->allocs);
  free(c);
  return UL_OK;
}

static ul_result_t sim_backend_comm_abort(ul_backend_comm_t *c) {
  /* waiters poll these flags every SIM_SLICE_MS; touching windows here could race with a
   * deregister in another thread. The group's flag releases the peers waiting on this
   * rank (UL_ERR_PEER_LOST naming it), as a host peer's abort does. */
  atomic_store(&c->dead, 1);
  if (c->g) {
    int none = 0;
    atomic_compare_exchange_strong(&c->g->aborted_by, &none, c->rank + 1);
    atomic_store(&c->g->dead, 1);
    pthread_cond_broadcast(&c->g->cv);
  }
  return UL_OK;
}

static ul_result_t sim_backend_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  const ulsim_topology_t *t = &c->topo;
  memset(out, 0, sizeof *out);
  out->peer = peer;
  if (peer == c->rank) {
    out->kind = UL_LINK_SELF;
    out->source = UL_SOURCE_NONE;
    snprintf(out->description, sizeof out->description, "self");
    return UL_OK;
  }
  out->kind = UL_LINK_MODELED;
  out->source = UL_SOURCE_MODELED;
  int ppn = c->nranks < t->gpus_per_node ? c->nranks : t->gpus_per_node;
  const ulsim_link_t *l;
  int count;
  if (c->rank / ppn != peer / ppn) {
    l = &t->inter;
    count = 1;
  } else {
    l = &t->intra;
    count = t->shape == ULSIM_SHAPE_MESH ? t->links_per_peer : t->links_per_gpu;
  }
  out->generation = l->generation;
  out->lanes = l->lanes ? l->lanes * count : count;
  out->bandwidth_gbps = l->line_gbps * count;
  out->latency_us = l->latency_us;
  /* The confidence travels with the figure: a user reading a modeled HCCS or MLU-Link
   * number must see that it rests on one unverified vendor claim. */
  snprintf(out->description, sizeof out->description, "%.20s x%d (modeled, %.28s, confidence %.6s)",
           l->name, count, t->name, l->confidence[0] ? l->confidence : "?");
  return UL_OK;
}

/* ------------------------------------------------------------------ memory */

static ul_result_t sim_backend_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  void *p = NULL;
  if (posix_memalign(&p, 64, size ? size : 1) != 0)
    return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "sim: cannot allocate %zu bytes", size);
  pthread_mutex_lock(&sim_backend_list_mu);
  if (c->nallocs == c->allocs_cap) {
    size_t cap = c->allocs_cap ? 2 * c->allocs_cap : 16;
    void **n = realloc(c->allocs, cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&sim_backend_list_mu);
      free(p);
      return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "sim: out of memory");
    }
    c->allocs = n;
    c->allocs_cap = cap;
  }
  c->allocs[c->nallocs++] = p;
  pthread_mutex_unlock(&sim_backend_list_mu);
  *ptr = p;
  return UL_OK;
}

/* Only what sim_backend_mem_alloc handed out on this communicator may be freed: the
 * header promises UL_ERR_INVALID_ARG for anything else (free() of it would crash). */
static ul_result_t sim_backend_mem_free(ul_backend_comm_t *c, void *ptr) {
  pthread_mutex_lock(&sim_backend_list_mu);
  size_t i = 0;
  while (i < c->nallocs && c->allocs[i] != ptr) i++;
  int found = i < c->nallocs;
  if (found) c->allocs[i] = c->allocs[--c->nallocs];
  pthread_mutex_unlock(&sim_backend_list_mu);
  if (!found)
    return ul_backend_set_error(c->core, UL_ERR_INVALID_ARG,
                                "sim: ul_mem_free: %p was not allocated by ul_mem_alloc on this "
                                "communicator (or was freed already)",
                                ptr);
  free(ptr);
  return UL_OK;
}

static ul_result_t sim_backend_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                               int extra_signals, ul_backend_window_t **out,
                                               void **peer_bases) {
  sim_window_t *w = calloc(1, sizeof *w);
  int nsig = UL_WINDOW_SIGNALS + (extra_signals > 0 ? extra_signals : 0);
  if (w) {
    w->sig = calloc((size_t)nsig, sizeof *w->sig);
    w->peers = calloc((size_t)c->nranks, sizeof *w->peers);
  }
  if (!w || !w->sig || !w->peers) {
    if (w) sim_backend_window_free(w);
    return ul_backend_set_error(c->core, UL_ERR_NO_MEMORY, "sim: out of memory for a window");
  }
  w->c = c;
  w->base = base;
  w->size = size;
  w->nsig = nsig;
  atomic_init(&w->refs, c->nranks);
  ul_result_t rc = sim_backend_exchange(c, w, (void **)w->peers, "window_register");
  if (rc != UL_OK) {
    sim_backend_window_free(w);
    return rc;
  }
  for (int p = 0; p < c->nranks; p++) peer_bases[p] = w->peers[p]->base;
  w->next = c->windows;
  c->windows = w;
  *out = w;
  return UL_OK;
}

static ul_result_t sim_backend_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  /* Collective: no rank may free its window memory while a peer still reads it. */
  ul_result_t rc = sim_backend_exchange(c, NULL, NULL, "window_deregister");
  if (rc != UL_OK) return rc;
  sim_window_t **pp = &c->windows;
  while (*pp && *pp != w) pp = &(*pp)->next;
  if (*pp) *pp = w->next;
  sim_backend_window_release(w);
  return UL_OK;
}

/* ------------------------------------------------------------------ data movement */

static ul_result_t sim_backend_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                                   size_t offset, const void *src, size_t bytes,
                                   ul_backend_stream_t *s) {
  (void)c;
  (void)s;
  if (bytes) memcpy((char *)w->peers[peer]->base + offset, src, bytes);
  return UL_OK;
}

static ul_result_t sim_backend_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                                   size_t offset, void *dst, size_t bytes, ul_backend_stream_t *s) {
  (void)c;
  (void)s;
  if (bytes) memcpy(dst, (const char *)w->peers[peer]->base + offset, bytes);
  return UL_OK;
}

static ul_result_t sim_backend_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                                      int index, ul_backend_stream_t *s) {
  (void)c;
  (void)s;
  sim_window_t *pw = w->peers[peer];
  if (index < 0 || index >= pw->nsig)
    return ul_backend_set_error(c->core, UL_ERR_INVALID_ARG, "sim: signal index %d out of range",
                                index);
  /* release: the puts before this signal are visible to whoever sees the new value */
  atomic_fetch_add_explicit(&pw->sig[index], 1, memory_order_release);
  atomic_fetch_add_explicit(&pw->wake, 1, memory_order_release);
  if (atomic_load(&pw->waiters) > 0)
    syscall(SYS_futex, &pw->wake, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
  return UL_OK;
}

typedef struct sim_signal_cond {
  ul_backend_window_t *w;
  int index;
  uint64_t value;
} sim_signal_cond_t;

static ul_result_t sim_backend_signal_poll(void *arg) {
  sim_signal_cond_t *x = arg;
  return atomic_load_explicit(&x->w->sig[x->index], memory_order_acquire) >= x->value
             ? UL_OK
             : UL_IN_PROGRESS;
}

/* Sleep on the window's futex word until any signal arrives (or ns pass). The word is
 * read before the value: a signal in between changes it and the futex returns at once. */
static void sim_backend_signal_block(void *arg, long ns) {
  sim_signal_cond_t *x = arg;
  unsigned seen = atomic_load_explicit(&x->w->wake, memory_order_acquire);
  if (sim_backend_signal_poll(x) == UL_OK) return;
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  atomic_fetch_add(&x->w->waiters, 1);
  syscall(SYS_futex, &x->w->wake, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
  atomic_fetch_sub(&x->w->waiters, 1);
}

static ul_result_t sim_backend_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                           uint64_t value, ul_backend_stream_t *s) {
  (void)s;
  if (index < 0 || index >= w->nsig)
    return ul_backend_set_error(c->core, UL_ERR_INVALID_ARG, "sim: signal index %d out of range",
                                index);
  ulbu_waiter_t how = {.arg = c,
                       .check = sim_backend_wait_check,
                       .timeout_ms = c->timeout_ms,
                       .spin = SIM_SPIN,
                       .yield_ms = SIM_YIELD_MS,
                       .sleep_ns = SIM_SLICE_MS * 1000000L};
  sim_signal_cond_t x = {w, index, value};
  const ulbu_cond_t reached = {sim_backend_signal_poll, sim_backend_signal_block, &x};
  ul_result_t rc = ulbu_wait(&how, &reached, "wait_signal", NULL);
  if (rc == UL_ERR_TIMEOUT)
    return ul_backend_set_error(
        c->core, rc, "sim: rank %d timed out after %d ms waiting for signal %d to reach %llu "
                     "(it is %llu)",
        c->rank, c->timeout_ms, index, (unsigned long long)value,
        (unsigned long long)atomic_load(&w->sig[index]));
  if (rc == UL_ERR_PEER_LOST)
    return ul_backend_set_error(c->core, rc,
                                "sim: rank %d: wait on signal %d: peer rank %d aborted the "
                                "communicator",
                                c->rank, index, atomic_load(&c->g->aborted_by) - 1);
  if (rc != UL_OK)
    return ul_backend_set_error(c->core, rc, "sim: rank %d: wait on signal %d aborted", c->rank,
                                index);
  return UL_OK;
}

static ul_result_t sim_backend_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                           uint64_t *value) {
  if (index < 0 || index >= w->nsig)
    return ul_backend_set_error(c->core, UL_ERR_INVALID_ARG, "sim: signal index %d out of range",
                                index);
  *value = atomic_load_explicit(&w->sig[index], memory_order_acquire);
  return UL_OK;
}

static ul_result_t sim_backend_reduce_local(ul_backend_comm_t *c, void *dst, const void *a,
                                            const void *b, size_t count, ul_dtype_t dtype,
                                            ul_op_t op, ul_backend_stream_t *s) {
  (void)c;
  (void)s;
  return ul_reduce_local(dst, a, b, count, dtype, op);
}

static ul_result_t sim_backend_scale_avg(ul_backend_comm_t *c, void *buf, size_t count,
                                         ul_dtype_t dtype, int nranks, ul_backend_stream_t *s) {
  (void)c;
  (void)s;
  return ul_scale_avg_local(buf, count, dtype, nranks);
}

static ul_result_t sim_backend_copy_local(ul_backend_comm_t *c, void *dst, const void *src,
                                          size_t bytes, ul_backend_stream_t *s) {
  (void)c;
  (void)s;
  if (bytes && dst != src) memmove(dst, src, bytes);
  return UL_OK;
}

/* ------------------------------------------------------------------ introspection */

/* The vector collectives are modeled as their regular form sized by the largest
 * per-peer block (what the core reports in info->bytes for them): the slowest pair
 * bounds an exchange in which every pair moves at once. */
static ul_coll_t sim_backend_model_coll(ul_coll_t coll) {
  if (coll == UL_COLL_ALLTOALLV) return UL_COLL_ALLTOALL;
  if (coll == UL_COLL_ALLGATHERV) return UL_COLL_ALLGATHER;
  return coll;
}

static ul_result_t sim_backend_annotate_call(ul_backend_comm_t *c, ul_call_info_t *info) {
  ulsim_cost_t cost;
  char err[256];
  ul_coll_t mc = sim_backend_model_coll(info->coll);
  double S = ulsim_size_from_call_bytes(mc, (double)info->bytes, c->nranks);
  if (ulsim_cost(&c->topo, mc, S, c->nranks, NULL, &cost, err, sizeof err) != UL_OK)
    return UL_ERR_UNSUPPORTED;
  char ran[32];
  snprintf(ran, sizeof ran, "%s", info->algorithm);
  info->modeled_us = cost.time_us;
  c->clock_us += cost.time_us;
  snprintf(info->algorithm, sizeof info->algorithm, "%s", cost.algorithm);
  snprintf(info->reason, sizeof info->reason,
           "modeled on %.40s: %.20s/%s %.2f us, busbw %.1f GB/s, cheapest of %d candidates (data moved "
           "by the generic layer: %.24s)",
           c->topo.name, cost.algorithm, ulsim_proto_name(cost.proto), cost.time_us,
           cost.busbw_gbps, cost.ncand, ran[0] ? ran : "?");
  return UL_OK;
}

const ul_backend_ops_t ul_backend_sim = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "sim",
    .description = "modeled interconnect: real data in host memory, time from a link/topology model",
    .priority = 1,
    .init = sim_backend_init,
    .fini = sim_backend_fini,
    .query_caps = sim_backend_query_caps,
    .get_unique_id = sim_backend_get_unique_id,
    .comm_init = sim_backend_comm_init,
    .comm_init_all = sim_backend_comm_init_all,
    .comm_finalize = sim_backend_comm_finalize,
    .comm_destroy = sim_backend_comm_destroy,
    .comm_abort = sim_backend_comm_abort,
    .comm_topology = sim_backend_comm_topology,
    .mem_alloc = sim_backend_mem_alloc,
    .mem_free = sim_backend_mem_free,
    .window_register = sim_backend_window_register,
    .window_deregister = sim_backend_window_deregister,
    .put = sim_backend_put,
    .get = sim_backend_get,
    .signal = sim_backend_signal,
    .wait_signal = sim_backend_wait_signal,
    .read_signal = sim_backend_read_signal,
    .reduce_local = sim_backend_reduce_local,
    .scale_avg = sim_backend_scale_avg,
    .copy_local = sim_backend_copy_local,
    .annotate_call = sim_backend_annotate_call,
};
