/* Communicators of unilink-bench (threads, -g groups, mpirun) and NCCL_TESTS_SPLIT. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bench.h"
/* ---------------------------------------------------------------------------- */
/* communicators                                                                  */
/* ---------------------------------------------------------------------------- */

typedef struct bench_init_arg {
  bench_run_t *r;
  ul_unique_id_t id;
  int local;
  ul_result_t rc;
  char why[256]; /* ul_last_error() is per thread: keep the init thread's sentence */
} bench_init_arg_t;

/* local: this process's rank index. NCCL_TESTS_DEVICE picks device device0 + local, as
 * nccl-tests' cudaSetDevice(gpu0 + i); unset, the backend decides (nccl-tests: the local
 * rank's block). Only device backends get here with device0 set (bench_main refuses it
 * on the others). */
static void bench_config(const bench_run_t *r, ul_config_t *cfg, int local) {
  ul_config_t init = UL_CONFIG_INIT;
  *cfg = init;
  cfg->backend = r->backend;
  if (r->o->device0 >= 0 && (r->info.features & UL_FEATURE_DEVICE_MEMORY))
    cfg->device = r->o->device0 + local;
  if (r->o->timeout_s > 0) cfg->timeout_ms = r->o->timeout_s * 1000;
  cfg->name = "unilink-bench";
}

static void *bench_init_thread(void *p) {
  bench_init_arg_t *a = p;
  ul_config_t cfg;
  bench_config(a->r, &cfg, a->local);
  a->rc = ul_comm_init_rank(&a->r->comms[a->local], &cfg, a->r->nranks, a->id,
                            a->r->first_rank + a->local);
  if (a->rc != UL_OK) snprintf(a->why, sizeof a->why, "%s", ul_last_error());
  return NULL;
}

/* A communicator that cannot be made: the sentence goes to stderr and stays in
 * r->fail_msg for the "# backend X failed" line (the run has not started: no fail_rc). */
static void bench_init_error(bench_run_t *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void bench_init_error(bench_run_t *r, const char *fmt, ...) {
  char msg[sizeof r->fail_msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "unilink-bench: %s\n", msg);
  memcpy(r->fail_msg, msg, sizeof msg);
}

int bench_comms_create(bench_run_t *r) {
  r->comms = calloc((size_t)r->nlocal, sizeof(ul_comm_t));
  r->streams = calloc((size_t)r->nlocal, sizeof(ul_stream_t));
  if (!r->comms || !r->streams) return BENCH_EXIT_INTERNAL;
  ul_result_t rc;
  if (r->mpi) {
    ul_unique_id_t id;
    int rank = 0, n = 0;
    rc = ul_bootstrap_mpi(r->backend, &id, &rank, &n);
    if (rc != UL_OK) {
      bench_init_error(r, "ul_bootstrap_mpi(%s): %s: %s", r->backend,
              ul_result_name(rc), ul_last_error());
      return rc == UL_ERR_UNAVAILABLE ? BENCH_EXIT_UNAVAILABLE : bench_exit_for(rc);
    }
    r->proc = rank;
    r->nprocs = n;
    r->nranks = n;
    r->first_rank = rank;
    ul_config_t cfg;
    bench_config(r, &cfg, 0);
    rc = ul_comm_init_rank(&r->comms[0], &cfg, n, id, rank);
    if (rc != UL_OK) {
      bench_init_error(r, "ul_comm_init_rank(%s, rank %d of %d): %s: %s", r->backend,
              rank, n, ul_result_name(rc), ul_last_error());
      return bench_exit_for(rc);
    }
    /* every process's device line, gathered to rank 0 over the whole world (nccl-tests
     * lists every rank with its NCCL_TESTS_SPLIT group) */
    r->color = bench_split_color(rank);
    double *saved = r->xch;
    size_t saved_per = r->xch_per_rank;
    r->xch_per_rank = 16;
    r->xch = calloc((size_t)n * 16, sizeof(double));
    int gathered = r->xch ? bench_gather_devices(r) : -1;
    free(r->xch);
    bench_exchange_free(r); /* sized for this exchange only */
    r->xch = saved;
    r->xch_per_rank = saved_per;
    if (gathered != 0) {
      bench_init_error(r, "gathering the device list failed: %s", r->fail_msg);
      return bench_exit_for(r->fail_rc);
    }
    if (getenv("NCCL_TESTS_SPLIT_MASK") || getenv("NCCL_TESTS_SPLIT")) {
      /* each group runs its own collective, as nccl-tests' MPI_Comm_split; rank 0's
       * group is the one reported */
      ul_comm_t sub = NULL;
      rc = ul_comm_split(r->comms[0], r->color, rank, &sub, NULL);
      if (rc != UL_OK) {
        bench_init_error(r, "NCCL_TESTS_SPLIT: ul_comm_split(%s, color %d): %s: %s",
                r->backend, r->color, ul_result_name(rc), ul_comm_last_error(r->comms[0]));
        return bench_exit_for(rc);
      }
      r->world = r->comms[0];
      r->comms[0] = sub;
      ul_comm_rank(sub, &r->first_rank);
      ul_comm_size(sub, &r->nranks);
    }
  } else if (r->nthreads == 1 && r->ngpus > 1) {
    /* -g G on one thread: one process driving G ranks, as ncclCommInitAll */
    ul_config_t cfg;
    bench_config(r, &cfg, 0);
    int *devlist = NULL;
    if (cfg.device != UL_CONFIG_UNDEF) {
      devlist = calloc((size_t)r->ngpus, sizeof *devlist);
      if (!devlist) return BENCH_EXIT_INTERNAL;
      for (int i = 0; i < r->ngpus; i++) devlist[i] = cfg.device + i;
      cfg.device = UL_CONFIG_UNDEF;
    }
    rc = ul_comm_init_all(r->comms, &cfg, r->ngpus, devlist);
    free(devlist);
    if (rc != UL_OK) {
      bench_init_error(r, "ul_comm_init_all(%s, %d ranks): %s: %s", r->backend,
              r->ngpus, ul_result_name(rc), ul_last_error());
      return bench_exit_for(rc);
    }
  } else {
    ul_unique_id_t id;
    rc = ul_get_unique_id(r->backend, &id);
    if (rc != UL_OK) {
      bench_init_error(r, "ul_get_unique_id(%s): %s: %s", r->backend,
              ul_result_name(rc), ul_last_error());
      return rc == UL_ERR_UNAVAILABLE ? BENCH_EXIT_UNAVAILABLE : bench_exit_for(rc);
    }
    /* every rank joins from its own thread: ul_comm_init_rank waits for all */
    bench_init_arg_t *args = calloc((size_t)r->nlocal, sizeof *args);
    pthread_t *th = calloc((size_t)r->nlocal, sizeof *th);
    if (!args || !th) { free(args); free(th); return BENCH_EXIT_INTERNAL; }
    for (int i = 0; i < r->nlocal; i++) {
      args[i].r = r;
      args[i].id = id;
      args[i].local = i;
      if (pthread_create(&th[i], NULL, bench_init_thread, &args[i]) != 0) {
        args[i].rc = UL_ERR_SYSTEM;
        th[i] = 0;
      }
    }
    int bad = -1;
    for (int i = 0; i < r->nlocal; i++) {
      if (th[i]) pthread_join(th[i], NULL);
      if (args[i].rc != UL_OK && bad < 0) bad = i;
    }
    if (bad >= 0) {
      bench_init_error(r, "ul_comm_init_rank(%s, rank %d of %d): %s: %s", r->backend,
              bad, r->nranks, ul_result_name(args[bad].rc),
              r->comms[bad] ? ul_comm_last_error(r->comms[bad]) : args[bad].why);
      int code = bench_exit_for(args[bad].rc);
      free(args);
      free(th);
      return code;
    }
    free(args);
    free(th);
  }
  if (r->ngpus > 1) {
    /* one thread drives several ranks: calls must be enqueued, not run in place */
    for (int i = 0; i < r->nlocal; i++) {
      rc = ul_stream_create(r->comms[i], &r->streams[i]);
      if (rc != UL_OK) {
        bench_init_error(r, "-g %d needs streams on backend %s: ul_stream_create: %s: %s",
                r->ngpus, r->backend, ul_result_name(rc), ul_comm_last_error(r->comms[i]));
        return bench_exit_for(rc);
      }
    }
  }
  return BENCH_EXIT_OK;
}

static void *bench_fini_thread(void *p) {
  ul_comm_t comm = *(ul_comm_t *)p;
  /* finalize is collective: each rank needs its own thread, like init */
  ul_comm_finalize(comm);
  ul_comm_destroy(comm);
  return NULL;
}

void bench_comms_destroy(bench_run_t *r) {
  for (int i = 0; r->streams && i < r->nlocal; i++)
    if (r->streams[i]) ul_stream_destroy(r->streams[i]);
  if (r->comms && r->fail_rc != UL_OK) {
    /* a failed run: never wait for peers */
    for (int i = 0; i < r->nlocal; i++)
      if (r->comms[i]) ul_comm_abort(r->comms[i]);
  } else if (r->comms) {
    pthread_t *th = calloc((size_t)r->nlocal, sizeof *th);
    for (int i = 0; i < r->nlocal; i++) {
      if (!r->comms[i]) continue;
      if (!th || pthread_create(&th[i], NULL, bench_fini_thread, &r->comms[i]) != 0) {
        if (th) th[i] = 0;
        ul_comm_destroy(r->comms[i]); /* local; peers see us leave */
      }
    }
    for (int i = 0; th && i < r->nlocal; i++)
      if (th[i]) pthread_join(th[i], NULL);
    free(th);
  }
  if (r->world) {
    if (r->fail_rc != UL_OK) ul_comm_abort(r->world);
    else { ul_comm_finalize(r->world); ul_comm_destroy(r->world); }
    r->world = NULL;
  }
  free(r->comms);
  free(r->streams);
  r->comms = NULL;
  r->streams = NULL;
}

/* nccl-tests' NCCL_TESTS_SPLIT_MASK (hex mask) and NCCL_TESTS_SPLIT ("AND n", "&n",
 * "OR n", "|n", "MOD n", "%n", "DIV n", "/n"; n in base 0 or 0b binary). */
static int bench_split_int(const char *s, int *v) {
  while (*s == ' ' || *s == '\t') s++;
  if (!*s) return 0;
  char *end = NULL;
  if (strncasecmp(s, "0b", 2) == 0) *v = (int)strtoul(s + 2, &end, 2);
  else *v = (int)strtoul(s, &end, 0);
  return end != s;
}

int bench_split_color(int proc) {
  const char *e = getenv("NCCL_TESTS_SPLIT_MASK");
  if (e) return proc & (int)strtoul(e, NULL, 16);
  e = getenv("NCCL_TESTS_SPLIT");
  if (!e) return 0;
  static const struct { const char *word, *sym; int kind; } ops[] = {
      {"AND", "&", 0}, {"OR", "|", 1}, {"MOD", "%", 2}, {"DIV", "/", 3}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    size_t wl = strlen(ops[i].word);
    const char *arg = NULL;
    if (strncasecmp(e, ops[i].word, wl) == 0) arg = e + wl;
    else if (strncmp(e, ops[i].sym, 1) == 0) arg = e + 1;
    int v = 0;
    if (!arg || !bench_split_int(arg, &v)) continue;
    switch (ops[i].kind) {
    case 0: return proc & v;
    case 1: return proc | v;
    case 2: return v ? proc % v : 0;
    default: return v ? proc / v : 0;
    }
  }
  return 0;
}
