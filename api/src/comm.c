/* Communicators: unique ids, init/split/finalize/destroy/abort, queries, errors. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "failure_seen.h"
#include "generic/generic.h"
#include "ul_core.h"

/* Layout of ul_unique_id_t: a 64-byte core header, then the backend payload. */
#define UL__ID_MAGIC 0x44494c55u /* "ULID" */
#define UL__ID_VERSION 1u
typedef struct ul__id_layout {
  uint32_t magic;
  uint32_t version;
  char backend[24];
  char options[28];
  uint32_t reserved;
  unsigned char payload[UL_BACKEND_ID_PAYLOAD_BYTES];
} ul__id_layout_t;
_Static_assert(sizeof(ul__id_layout_t) == UL_UNIQUE_ID_BYTES, "unique id layout");


/* Split "sim:dgx-h100" into name and options. */
static ul_result_t split_backend_name(const char *full, char *name, size_t nlen, char *opts,
                                      size_t olen) {
  name[0] = opts[0] = '\0';
  if (full == NULL || full[0] == '\0') return UL_OK;
  const char *colon = strchr(full, ':');
  size_t n = colon ? (size_t)(colon - full) : strlen(full);
  if (n >= nlen)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "backend name '%s' is too long (max %zu)",
                                full, nlen - 1);
  memcpy(name, full, n);
  name[n] = '\0';
  if (colon) {
    if (strlen(colon + 1) >= olen)
      return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                  "backend options '%s' are too long (max %zu characters)",
                                  colon + 1, olen - 1);
    strcpy(opts, colon + 1);
  }
  return UL_OK;
}

/* How the backend was chosen (ul__id_layout_t.reserved, ul_call_info_t.selection). */
enum { UL__SELECT_NAMED = 0, UL__SELECT_AUTO = 1, UL__SELECT_AUTO_DEVICE = 2 };

static void selection_text(char *out, size_t len, unsigned how, const char *backend) {
  if (how == UL__SELECT_AUTO)
    snprintf(out, len, "auto: %s, the best available backend for host memory "
             "(auto:device picks GPU backends)", backend);
  else if (how == UL__SELECT_AUTO_DEVICE)
    snprintf(out, len, "auto:device: %s, the best available device-memory backend", backend);
  else
    snprintf(out, len, "named: %s", backend);
}

/* Backend by name; "" or "auto" (options "device": auto:device) picks one. Options that
 * only steered auto are cleared. */
static ul_result_t find_backend_sel(const char *name, char *opts, ul__backend_t **be,
                                    unsigned *how) {
  int is_auto = name[0] == '\0' || strcmp(name, "auto") == 0;
  int device = is_auto && opts && strcmp(opts, "device") == 0;
  if (how) *how = is_auto ? (device ? UL__SELECT_AUTO_DEVICE : UL__SELECT_AUTO) : UL__SELECT_NAMED;
  if (device) opts[0] = '\0';
  return ul__registry_find(is_auto ? (device ? "auto:device" : NULL) : name, be);
}

static ul_result_t find_backend(const char *name, ul__backend_t **be) {
  return ul__registry_find(name[0] ? name : NULL, be);
}

UL_API ul_result_t ul_get_unique_id(const char *backend, ul_unique_id_t *id) {
  if (id == NULL) return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_get_unique_id: id is NULL");
  char name[24], opts[28];
  const char *requested = backend;
  if (requested == NULL || requested[0] == '\0')
    requested = ul__param_get_str(UL__P_BACKEND);
  if (strcmp(requested, "auto") == 0) requested = "";
  UL_CHECK(split_backend_name(requested, name, sizeof name, opts, sizeof opts));
  ul__backend_t *be = NULL;
  unsigned how = 0;
  UL_CHECK(find_backend_sel(name, opts, &be, &how));
  ul__id_layout_t lay;
  memset(&lay, 0, sizeof lay);
  lay.magic = UL__ID_MAGIC;
  lay.version = UL__ID_VERSION;
  lay.reserved = how;
  snprintf(lay.backend, sizeof lay.backend, "%s", be->ops.name);
  snprintf(lay.options, sizeof lay.options, "%s", opts);
  ul_result_t rc = be->ops.get_unique_id(lay.payload, sizeof lay.payload);
  if (rc != UL_OK) {
    if (ul_last_error()[0] == '\0')
      ul__set_thread_error(rc, "backend %s could not create a unique id", be->ops.name);
    return rc;
  }
  memcpy(id->internal, &lay, sizeof lay);
  UL_INFO("INIT", "unique id created for backend %s%s%s", be->ops.name, opts[0] ? ":" : "", opts);
  return UL_OK;
}

static ul_comm_t comm_alloc(ul__backend_t *be, const ul__config_t *cfg, int rank, int nranks) {
  ul_comm_t c = calloc(1, sizeof *c);
  if (!c) return NULL;
  pthread_mutex_t *m = malloc(sizeof *m);
  if (!m) {
    free(c);
    return NULL;
  }
  pthread_mutex_init(m, NULL);
  c->lock = m;
  c->turn = ul__turn_create();
  if (!c->turn) {
    pthread_mutex_destroy(m);
    free(m);
    free(c);
    return NULL;
  }
  if (!ul__comm_live_add(c)) {
    ul__turn_destroy(c->turn);
    pthread_mutex_destroy(m);
    free(m);
    free(c);
    return NULL;
  }
  c->magic = UL__COMM_MAGIC;
  c->backend = be;
  c->annotates = !ul__op_is_stub((const void *)be->ops.annotate_call);
  c->config = *cfg;
  c->rank = rank;
  c->nranks = nranks;
  c->device = cfg->device;
  c->props.struct_size = sizeof c->props;
  c->props.device = UL_CONFIG_UNDEF;
  return c;
}

static void comm_free(ul_comm_t c) {
  if (!c) return;
  ul__comm_live_remove(c);
  free(c->init_thread);
  /* the core's own stream of nonblocking mode: released with the others, freed here */
  if (c->nb_stream) ul_stream_destroy(c->nb_stream);
  ul__windows_free_all(c);
  c->magic = 0;
  pthread_mutex_destroy((pthread_mutex_t *)c->lock);
  free(c->lock);
  ul__turn_destroy(c->turn);
  free(c);
}

static void fill_args(ul_backend_comm_args_t *a, ul_comm_t c, const unsigned char *payload,
                      const char *options) {
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  a->comm = c;
  a->rank = c->rank;
  a->nranks = c->nranks;
  a->device = c->config.device;
  a->id_payload = payload;
  a->id_payload_bytes = UL_BACKEND_ID_PAYLOAD_BYTES;
  a->timeout_ms = c->config.timeout_ms;
  a->abort_flag = &c->abort_flag;
  a->name = c->config.name[0] ? c->config.name : NULL;
  a->options = options ? options : "";
  snprintf(c->options, sizeof c->options, "%s", a->options);
}

/* After the backend communicator exists: the generic layer's resources. */
static ul_result_t comm_finish_setup(ul_comm_t c) {
  if (c->props.struct_size == 0) c->props.struct_size = sizeof c->props;
  if (c->props.device != UL_CONFIG_UNDEF) c->device = c->props.device;
  if (c->props.path[0] == '\0') snprintf(c->props.path, sizeof c->props.path, "%s", "default");
  c->props.path[sizeof c->props.path - 1] = '\0'; /* every call copies all 32 bytes */
  return ul__generic_init(c);
}

/* The collective part of creating rank c: the backend's communicator, then the generic
 * layer. On failure c->last_error says why and c holds no backend communicator. */
static ul_result_t comm_init_steps(ul_comm_t c, const unsigned char *payload, const char *options) {
  ul_backend_comm_args_t args;
  fill_args(&args, c, payload, options);
  ul__backend_t *be = c->backend;
  ul_result_t rc = be->ops.comm_init(&args, &c->bcomm, &c->props);
  if (rc != UL_OK) {
    c->bcomm = NULL;
    if (!c->last_error[0])
      ul__comm_set_error(c, rc, "backend %s: comm_init of rank %d/%d failed", be->ops.name,
                         c->rank, c->nranks);
    return rc;
  }
  rc = comm_finish_setup(c);
  if (rc != UL_OK) {
    if (!c->last_error[0]) ul__comm_set_error(c, rc, "generic layer setup failed");
    be->ops.comm_abort(c->bcomm);
    be->ops.comm_destroy(c->bcomm);
    c->bcomm = NULL;
    return rc;
  }
  UL_INFO("INIT", "rank %d/%d joined on backend %s (path %s)", c->rank, c->nranks, be->ops.name,
          c->props.path);
  return UL_OK;
}

/* Nonblocking creation (config.blocking = 0, NCCL's ncclInProgress): the steps run on a
 * thread; the handle is returned at once and refuses work until init_state is UL_OK. */
typedef struct comm_init_job {
  ul_comm_t c;
  ul__id_layout_t lay;
} comm_init_job_t;

static void *comm_init_thread(void *p) {
  comm_init_job_t *j = p;
  ul_result_t rc = comm_init_steps(j->c, j->lay.payload, j->lay.options);
  __atomic_store_n(&j->c->init_state, (int)rc, __ATOMIC_RELEASE);
  free(j);
  return NULL;
}

static ul_result_t comm_init_start(ul_comm_t c, const ul__id_layout_t *lay, ul_comm_t *out) {
  comm_init_job_t *j = malloc(sizeof *j);
  pthread_t *th = malloc(sizeof *th);
  if (!j || !th) {
    free(j);
    free(th);
    comm_free(c);
    return ul__set_thread_error(UL_ERR_NO_MEMORY, "ul_comm_init_rank: out of memory");
  }
  j->c = c;
  j->lay = *lay;
  c->init_state = UL_IN_PROGRESS;
  c->init_thread = th;
  if (pthread_create(th, NULL, comm_init_thread, j) != 0) {
    free(j);
    comm_free(c);
    return ul__set_thread_error(UL_ERR_SYSTEM, "ul_comm_init_rank: cannot start the init thread");
  }
  c->init_thread_live = 1;
  *out = c;
  ul__set_thread_error(UL_IN_PROGRESS, "%s", "");
  return UL_IN_PROGRESS;
}

/* Teardown of a handle whose nonblocking creation may still run: stop it (the abort flag
 * reaches the backend's rendezvous) and wait for the thread. 1: the creation had failed,
 * the handle holds no backend communicator. */
static int comm_init_join(ul_comm_t c) {
  if (c->init_thread_live) {
    if (__atomic_load_n(&c->init_state, __ATOMIC_ACQUIRE) == UL_IN_PROGRESS)
      __atomic_store_n(&c->abort_flag, 1, __ATOMIC_SEQ_CST);
    pthread_join(*(pthread_t *)c->init_thread, NULL);
    c->init_thread_live = 0;
  }
  return __atomic_load_n(&c->init_state, __ATOMIC_ACQUIRE) != UL_OK;
}

UL_API ul_result_t ul_comm_get_async_error(ul_comm_t comm, ul_result_t *async_error) {
  if (!ul__comm_alive(comm))
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_comm_get_async_error: comm is NULL or invalid");
  if (async_error == NULL)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_comm_get_async_error: async_error is NULL");
  ul_result_t st = (ul_result_t)__atomic_load_n(&comm->init_state, __ATOMIC_ACQUIRE);
  if (st == UL_OK) st = comm->sticky;
  ul_stream_t nb = __atomic_load_n(&comm->nb_stream, __ATOMIC_ACQUIRE);
  if (st == UL_OK && nb) {
    ul_result_t q = ul_stream_query(nb);
    if (q == UL_IN_PROGRESS || q != UL_OK) st = q;
  }
  *async_error = st;
  return UL_OK;
}

UL_API ul_result_t ul_comm_init_rank(ul_comm_t *comm, const ul_config_t *config, int nranks,
                                     ul_unique_id_t id, int rank) {
  if (comm == NULL)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_comm_init_rank: comm is NULL");
  *comm = NULL;
  if (nranks < 1)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_comm_init_rank: nranks is %d (must be >= 1)",
                                nranks);
  if (rank < 0 || rank >= nranks)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_comm_init_rank: rank %d is outside [0, %d)", rank, nranks);
  ul__config_t cfg;
  UL_CHECK(ul__config_resolve(config, &cfg));
  ul__id_layout_t lay;
  memcpy(&lay, id.internal, sizeof lay);
  if (lay.magic != UL__ID_MAGIC || lay.version != UL__ID_VERSION ||
      memchr(lay.backend, '\0', sizeof lay.backend) == NULL ||
      memchr(lay.options, '\0', sizeof lay.options) == NULL)
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_comm_init_rank: the unique id is not one from ul_get_unique_id "
                                "(bad magic/version)");
  if (config != NULL && cfg.backend[0] && strcmp(cfg.backend, "auto") != 0) {
    char name[24], opts[28];
    UL_CHECK(split_backend_name(cfg.backend, name, sizeof name, opts, sizeof opts));
    if (config->struct_size >= offsetof(ul_config_t, backend) + sizeof(char *) &&
        config->backend != NULL && strcmp(name, lay.backend) != 0)
      return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                  "ul_comm_init_rank: config asks for backend '%s' but the unique "
                                  "id was made for '%s'",
                                  name, lay.backend);
  }
  ul__backend_t *be = NULL;
  UL_CHECK(find_backend(lay.backend, &be));
  ul_comm_t c = comm_alloc(be, &cfg, rank, nranks);
  if (!c) return ul__set_thread_error(UL_ERR_NO_MEMORY, "ul_comm_init_rank: out of memory");
  selection_text(c->selection, sizeof c->selection, lay.reserved, be->ops.name);
  if (!cfg.blocking) return comm_init_start(c, &lay, comm);
  ul_result_t rc = comm_init_steps(c, lay.payload, lay.options);
  if (rc != UL_OK) {
    ul__set_thread_error(rc, "%s", c->last_error);
    comm_free(c);
    return rc;
  }
  *comm = c;
  return UL_OK;
}

typedef struct init_all_job {
  ul_comm_t c;
  ul_result_t rc;
} init_all_job_t;

static void *generic_setup_thread(void *arg) {
  init_all_job_t *j = arg;
  j->rc = comm_finish_setup(j->c);
  return NULL;
}

UL_API ul_result_t ul_comm_init_all(ul_comm_t *comms, const ul_config_t *config, int ndev,
                                    const int *devlist) {
  if (comms == NULL)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_comm_init_all: comms is NULL");
  if (ndev < 1)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_comm_init_all: ndev is %d (must be >= 1)",
                                ndev);
  ul__config_t cfg;
  UL_CHECK(ul__config_resolve(config, &cfg));
  /* As config.device: an index >= 0, or UL_CONFIG_UNDEF to let the backend decide. */
  for (int i = 0; devlist && i < ndev; i++)
    if (devlist[i] < 0 && devlist[i] != UL_CONFIG_UNDEF)
      return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                  "ul_comm_init_all: devlist[%d] is %d; a device index must be "
                                  ">= 0, or UL_CONFIG_UNDEF to let the backend decide",
                                  i, devlist[i]);
  if (!devlist && cfg.device != UL_CONFIG_UNDEF && cfg.device > INT32_MAX - (ndev - 1))
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_comm_init_all: config.device %d + rank exceeds INT32_MAX for "
                                "%d devices",
                                (int)cfg.device, ndev);
  char name[24], opts[28];
  UL_CHECK(split_backend_name(strcmp(cfg.backend, "auto") == 0 ? "" : cfg.backend, name,
                              sizeof name, opts, sizeof opts));
  ul__backend_t *be = NULL;
  unsigned how = 0;
  UL_CHECK(find_backend_sel(name, opts, &be, &how));
  if (ul__op_is_stub((const void *)be->ops.comm_init_all))
    return ul__set_thread_error(UL_ERR_UNSUPPORTED,
                                "backend %s does not support ul_comm_init_all", be->ops.name);
  for (int i = 0; i < ndev; i++) comms[i] = NULL;
  ul_comm_t *cs = calloc((size_t)ndev, sizeof *cs);
  ul_backend_comm_args_t *args = calloc((size_t)ndev, sizeof *args);
  ul_backend_comm_t **bcs = calloc((size_t)ndev, sizeof *bcs);
  ul_backend_comm_props_t *props = calloc((size_t)ndev, sizeof *props);
  init_all_job_t *jobs = calloc((size_t)ndev, sizeof *jobs);
  pthread_t *th = calloc((size_t)ndev, sizeof *th);
  unsigned char payload[UL_BACKEND_ID_PAYLOAD_BYTES] = {0};
  ul_result_t rc = UL_OK;
  if (!cs || !args || !bcs || !props || !jobs || !th) {
    rc = ul__set_thread_error(UL_ERR_NO_MEMORY, "ul_comm_init_all: out of memory");
    goto out;
  }
  for (int i = 0; i < ndev; i++) {
    ul__config_t ci = cfg;
    ci.device = devlist ? devlist[i] : (cfg.device == UL_CONFIG_UNDEF ? i : cfg.device + i);
    cs[i] = comm_alloc(be, &ci, i, ndev);
    if (!cs[i]) {
      rc = ul__set_thread_error(UL_ERR_NO_MEMORY, "ul_comm_init_all: out of memory");
      goto out;
    }
    selection_text(cs[i]->selection, sizeof cs[i]->selection, how, be->ops.name);
    fill_args(&args[i], cs[i], payload, opts);
    props[i].struct_size = sizeof props[i];
    props[i].device = UL_CONFIG_UNDEF;
  }
  rc = be->ops.comm_init_all(args, ndev, bcs, props);
  if (rc != UL_OK) {
    if (cs[0]->last_error[0]) ul__set_thread_error(rc, "%s", cs[0]->last_error);
    goto out;
  }
  for (int i = 0; i < ndev; i++) {
    cs[i]->bcomm = bcs[i];
    cs[i]->props = props[i];
  }
  /* Generic setup is collective (window registration): one thread per rank. */
  for (int i = 0; i < ndev; i++) {
    jobs[i].c = cs[i];
    if (pthread_create(&th[i], NULL, generic_setup_thread, &jobs[i]) != 0) {
      jobs[i].rc = UL_ERR_SYSTEM;
      th[i] = 0;
    }
  }
  for (int i = 0; i < ndev; i++)
    if (th[i]) pthread_join(th[i], NULL);
  for (int i = 0; i < ndev; i++)
    if (jobs[i].rc != UL_OK && rc == UL_OK) {
      rc = jobs[i].rc;
      ul__set_thread_error(rc, "%s", cs[i]->last_error);
    }
  if (rc != UL_OK) {
    for (int i = 0; i < ndev; i++) be->ops.comm_abort(bcs[i]);
    for (int i = 0; i < ndev; i++) {
      ul__generic_fini(cs[i]);
      be->ops.comm_destroy(bcs[i]);
    }
    goto out;
  }
  for (int i = 0; i < ndev; i++) {
    comms[i] = cs[i];
    cs[i] = NULL;
  }
out:
  if (cs)
    for (int i = 0; i < ndev; i++) comm_free(cs[i]);
  free(cs);
  free(args);
  free(bcs);
  free(props);
  free(jobs);
  free(th);
  return rc;
}

/* ------------------------------------------------------------------ split */

typedef struct split_entry {
  int32_t color, key, rank, pad;
} split_entry_t;

static int split_cmp(const void *a, const void *b) {
  const split_entry_t *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : (x->rank > y->rank);
}

UL_API ul_result_t ul_comm_split(ul_comm_t comm, int color, int key, ul_comm_t *newcomm,
                                 const ul_config_t *config) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_comm_split");
  if (newcomm == NULL)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "ul_comm_split: newcomm is NULL");
  if (color < UL_SPLIT_NOCOLOR)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                              "ul_comm_split: color %d is negative (only UL_SPLIT_NOCOLOR = -1 "
                              "is allowed)",
                              color);
  *newcomm = NULL;
  if (comm->sticky != UL_OK)
    return ul__comm_set_error(comm, comm->sticky, "ul_comm_split: communicator is in error state");
  ul__config_t cfg = comm->config;
  if (config) UL_CHECK(ul__config_resolve(config, &cfg));
  int n = comm->nranks;
  /* Everyone learns everyone's (color, key) through an allgather on the parent. */
  split_entry_t mine = {color, key, comm->rank, 0};
  split_entry_t *all = calloc((size_t)n, sizeof *all);
  if (!all) return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_comm_split: out of memory");
  ul_result_t rc = ul__exchange(comm, &mine, all, sizeof mine, NULL, 0);
  if (rc != UL_OK) {
    free(all);
    return rc;
  }
  int m = 0;
  split_entry_t *grp = calloc((size_t)n, sizeof *grp);
  if (!grp) {
    free(all);
    return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_comm_split: out of memory");
  }
  for (int i = 0; i < n; i++)
    if (all[i].color == color && color != UL_SPLIT_NOCOLOR) grp[m++] = all[i];
  qsort(grp, (size_t)m, sizeof *grp, split_cmp);
  int newrank = -1;
  for (int i = 0; i < m; i++)
    if (grp[i].rank == comm->rank) newrank = i;
  if (!ul__op_is_stub((const void *)comm->backend->ops.comm_split)) {
    /* Native split (MPI_Comm_split, ncclCommSplit): the backend forms the groups; the
     * allgather above gave the core the new rank and size to check against. */
    ul_comm_t child = comm_alloc(comm->backend, &cfg, newrank < 0 ? 0 : newrank, m);
    if (!child) {
      free(grp);
      free(all);
      return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_comm_split: out of memory");
    }
    ul_backend_comm_args_t args;
    fill_args(&args, child, NULL, comm->options);
    if (color == UL_SPLIT_NOCOLOR) args.rank = -1, args.nranks = 0;
    rc = comm->backend->ops.comm_split(comm->bcomm, color, key, &args, &child->bcomm, &child->props);
    if (rc == UL_OK && child->bcomm != NULL) rc = comm_finish_setup(child);
    if (rc != UL_OK || child->bcomm == NULL) {
      if (rc != UL_OK) ul__comm_set_error(comm, rc, "ul_comm_split: %s", child->last_error);
      if (child->bcomm) comm->backend->ops.comm_destroy(child->bcomm);
      comm_free(child);
    } else {
      *newcomm = child;
    }
    free(grp);
    free(all);
    return rc;
  }
  /* Leader of each color (lowest parent rank) makes a unique id; every leader's id is
   * shared with all parent ranks, each takes its color's. */
  ul_unique_id_t *ids = calloc((size_t)n, sizeof *ids);
  ul_unique_id_t myid;
  memset(&myid, 0, sizeof myid);
  int leader = -1;
  for (int i = 0; i < n && color != UL_SPLIT_NOCOLOR; i++)
    if (all[i].color == color) {
      leader = i;
      break;
    }
  ul_result_t idrc = UL_OK;
  if (leader == comm->rank) {
    /* The child keeps the parent's backend options (e.g. the sim topology). */
    char full[64];
    snprintf(full, sizeof full, "%s%s%s", comm->backend->ops.name, comm->options[0] ? ":" : "",
             comm->options);
    idrc = ul_get_unique_id(full, &myid);
  }
  rc = ids ? ul__exchange(comm, &myid, ids, sizeof myid, NULL, 0) : UL_ERR_NO_MEMORY;
  if (rc == UL_OK && idrc != UL_OK) rc = idrc;
  if (rc == UL_OK && color != UL_SPLIT_NOCOLOR) {
    ul_config_t pub = UL_CONFIG_INIT;
    pub.timeout_ms = cfg.timeout_ms;
    pub.check = cfg.check;
    /* The child stays on this rank's device: its buffers live there (a backend left to
     * choose would pick newrank % ndev, another GPU). */
    if (config && cfg.device != UL_CONFIG_UNDEF) pub.device = cfg.device;
    else if (comm->device != UL_CONFIG_UNDEF) pub.device = comm->device;
    rc = ul_comm_init_rank(newcomm, &pub, m, ids[leader], newrank);
  }
  free(ids);
  free(grp);
  free(all);
  if (rc != UL_OK && ul__comm_valid(comm) && comm->last_error[0] == '\0')
    ul__comm_set_error(comm, rc, "ul_comm_split failed: %s", ul_last_error());
  return rc;
}

/* --------------------------------------------------------------- teardown */

/* Complete the work queued on the communicator's streams (finalize's promise); the first
 * error of any stream is returned. Streams must not be destroyed meanwhile. */
static ul_result_t comm_sync_streams(ul_comm_t comm) {
  ul__comm_lock(comm);
  size_t n = 0;
  for (ul_stream_t s = comm->streams; s; s = s->next) n++;
  ul_stream_t *snap = n ? malloc(n * sizeof *snap) : NULL;
  if (n && !snap) {
    ul__comm_unlock(comm);
    return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_comm_finalize: out of memory");
  }
  n = 0;
  for (ul_stream_t s = comm->streams; s; s = s->next) snap[n++] = s;
  ul__comm_unlock(comm); /* queued tasks take this lock to record their calls */
  ul_result_t first = UL_OK;
  for (size_t i = 0; i < n; i++) {
    ul_result_t rc = UL_OK;
    if (snap[i]->host) rc = ul__host_stream_sync(snap[i]->host, comm->config.timeout_ms);
    else if (snap[i]->bstream)
      rc = comm->backend->ops.stream_synchronize(snap[i]->bstream, comm->config.timeout_ms);
    if (rc == UL_ERR_UNSUPPORTED) rc = UL_OK;
    if (rc != UL_OK && first == UL_OK) {
      first = rc;
      if (rc == UL_ERR_TIMEOUT)
        ul__comm_set_error(comm, rc,
                           "ul_comm_finalize: work queued on a stream still running after %d ms",
                           comm->config.timeout_ms);
    }
  }
  free(snap);
  return first;
}

UL_API ul_result_t ul_comm_finalize(ul_comm_t comm) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_comm_finalize");
  if (comm->sticky != UL_OK) return comm->sticky;
  __atomic_add_fetch(&comm->in_flight, 1, __ATOMIC_SEQ_CST); /* abort must not free under it */
  ul_result_t rc = comm_sync_streams(comm);
  if (rc != UL_OK) {
    __atomic_sub_fetch(&comm->in_flight, 1, __ATOMIC_SEQ_CST);
    if (rc == UL_ERR_TIMEOUT || rc == UL_ERR_PEER_LOST || rc == UL_ERR_ABORTED) comm->sticky = rc;
    return rc;
  }
  rc = comm->backend->ops.comm_finalize(comm->bcomm);
  __atomic_sub_fetch(&comm->in_flight, 1, __ATOMIC_SEQ_CST);
  if (rc == UL_ERR_UNSUPPORTED) rc = UL_OK; /* nothing to flush */
  if (rc == UL_ERR_TIMEOUT || rc == UL_ERR_PEER_LOST || rc == UL_ERR_ABORTED) comm->sticky = rc;
  return rc;
}

UL_API ul_result_t ul_comm_destroy(ul_comm_t comm) {
  if (comm == NULL) return UL_OK;
  /* The registry, not the handle, is asked first: a racing teardown may have freed it. */
  int claim = ul__comm_live_claim(comm, 0);
  if (claim < 0)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_comm_destroy: invalid communicator handle");
  if (claim > 0) return UL_OK; /* not read: the other teardown may have freed it */ /* an abort or destroy running on another thread frees it */
  if (comm_init_join(comm)) {
    comm_free(comm);
    return UL_OK;
  }
  ul__streams_release_all(comm);
  ul__generic_fini(comm);
  ul__exchange_free(comm);
  comm->backend->ops.comm_destroy(comm->bcomm);
  comm_free(comm);
  return UL_OK;
}

/* A thread is inside a call on comm. */
static int comm_busy(ul_comm_t comm) {
  return __atomic_load_n(&comm->in_flight, __ATOMIC_SEQ_CST) > 0 ||
         __atomic_load_n(&comm->owner_busy, __ATOMIC_ACQUIRE);
}

UL_API ul_result_t ul_comm_abort(ul_comm_t comm) {
  /* Idempotent: a second (racing) abort raises the flag and leaves the teardown to the
   * first; once that has freed the handle it is not live (UL_ERR_INVALID_ARG). */
  int claim = comm ? ul__comm_live_claim(comm, 1) : -1;
  if (claim < 0) /* not live: the handle may be freed memory, so it is not read */
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_comm_abort: comm is NULL or invalid");
  if (claim > 0) return UL_OK; /* not read: the first abort may have freed it */
  ul__failure_note(UL_ERR_ABORTED); /* peers may be left waiting: see failure_seen.c */
  if (comm_init_join(comm)) {
    comm_free(comm);
    return UL_OK;
  }
  comm->backend->ops.comm_abort(comm->bcomm);
  /* Threads blocked in this comm see the flag within one wait slice; let them leave
   * before freeing (bounded: never wait for peers). The owner's calls count in
   * owner_busy, not in_flight, and it must see that it owns comm no more. */
  ul__owner_release(comm);
  struct timespec ts = {0, 1000000};
  for (int i = 0; i < 2000 && comm_busy(comm); i++) nanosleep(&ts, NULL);
  if (comm_busy(comm)) {
    /* A thread is still inside the backend: leak rather than free under it. */
    UL_WARN("INIT", "ul_comm_abort: a thread is still inside a call; communicator leaked");
    comm->sticky = UL_ERR_ABORTED;
    return UL_OK;
  }
  ul__streams_release_all(comm);
  ul__generic_fini(comm);
  ul__exchange_free(comm);
  comm->backend->ops.comm_destroy(comm->bcomm);
  comm_free(comm);
  return UL_OK;
}

/* ---------------------------------------------------------------- queries */

#define COMM_QUERY(fn, T, expr)                                                                  \
  UL_API ul_result_t fn(ul_comm_t comm, T *out) {                                                \
    if (!ul__comm_valid(comm))                                                                   \
      return ul__comm_invalid(comm, #fn);                                                        \
    if (out == NULL) return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, #fn ": output is NULL"); \
    *out = (expr);                                                                               \
    return UL_OK;                                                                                \
  }
COMM_QUERY(ul_comm_rank, int, comm->rank)
COMM_QUERY(ul_comm_size, int, comm->nranks)
/* -1 on host-memory backends (host, mpi, sim) as the header says, whatever index
 * ul_comm_init_all or config.device gave the rank */
COMM_QUERY(ul_comm_device, int,
           comm->device == UL_CONFIG_UNDEF || (comm->backend->caps.flags & UL_BACKEND_HOST_MEMORY)
               ? -1
               : comm->device)
COMM_QUERY(ul_comm_backend, const char *, comm->backend->ops.name)

UL_API ul_result_t ul_comm_get_error(ul_comm_t comm) {
  if (!ul__comm_alive(comm)) return UL_ERR_INVALID_ARG;
  int st = __atomic_load_n(&comm->init_state, __ATOMIC_ACQUIRE);
  if (st != UL_OK) return (ul_result_t)st; /* UL_IN_PROGRESS while a nonblocking init runs */
  return comm->sticky;
}

UL_API ul_result_t ul_comm_topology(ul_comm_t comm, ul_link_info_t *links, int nlinks) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_comm_topology");
  if (links == NULL)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "ul_comm_topology: links is NULL");
  if (nlinks < comm->nranks)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                              "ul_comm_topology: nlinks is %d but the communicator has %d ranks",
                              nlinks, comm->nranks);
  for (int p = 0; p < comm->nranks; p++) {
    ul_link_info_t li;
    memset(&li, 0, sizeof li);
    li.peer = p;
    ul_result_t rc = comm->backend->ops.comm_topology(comm->bcomm, p, &li);
    if (rc != UL_OK) {
      memset(&li, 0, sizeof li);
      li.kind = p == comm->rank ? UL_LINK_SELF : UL_LINK_UNKNOWN;
      snprintf(li.description, sizeof li.description, "%s",
               p == comm->rank ? "self" : "unknown (backend does not report links)");
    }
    li.peer = p;
    links[p] = li;
  }
  return UL_OK;
}

/* comm_recover.c builds the shrunk communicator the way init does. */
ul_comm_t ul__comm_alloc(ul__backend_t *be, const ul__config_t *cfg, int rank, int nranks) {
  return comm_alloc(be, cfg, rank, nranks);
}
void ul__comm_free(ul_comm_t c) { comm_free(c); }
void ul__comm_fill_args(ul_backend_comm_args_t *a, ul_comm_t c, const char *options) {
  fill_args(a, c, NULL, options);
}
ul_result_t ul__comm_finish_setup(ul_comm_t c) { return comm_finish_setup(c); }
