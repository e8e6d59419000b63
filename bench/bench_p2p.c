/* `unilink-bench p2p`: rank x rank bandwidth and latency matrices, in the manner of
 * CUDA's p2pBandwidthLatencyTest, plus the link each pair reports. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

typedef struct p2p_ctx {
  bench_run_t *r;
  size_t bytes;
  int iters, lat_iters;
  char **sbuf, **rbuf;
  double *uni, *bidi, *lat; /* n*n */
  ul_link_info_t *links;    /* n*n, row = viewing rank */
  int *have_links;
} p2p_ctx_t;

typedef struct p2p_thread {
  p2p_ctx_t *c;
  int t;
  double mine[4];
  double *all;
} p2p_thread_t;

static int p2p_check(bench_run_t *r, ul_result_t rc, ul_comm_t comm, const char *what) {
  if (rc == UL_OK) return 0;
  bench_fail(r, rc, "p2p %s: %s: %s", what, ul_result_name(rc), ul_comm_last_error(comm));
  return -1;
}

/* exchange one double per rank; returns the value of rank q */
static int p2p_share(p2p_thread_t *T, double v) {
  T->mine[0] = v;
  return bench_exchange(T->c->r, T->t, T->mine, 1, T->all);
}

static void *p2p_thread_main(void *p) {
  p2p_thread_t *T = p;
  p2p_ctx_t *c = T->c;
  bench_run_t *r = c->r;
  int n = r->nranks;
  int me = r->first_rank + T->t;
  ul_comm_t comm = r->comms[T->t];
  char *sb = c->sbuf[T->t], *rb = c->rbuf[T->t];
  size_t cnt = c->bytes;

  /* links as this rank sees them */
  ul_link_info_t *row = calloc((size_t)n, sizeof *row);
  if (row && ul_comm_topology(comm, row, n) == UL_OK) {
    memcpy(c->links + (size_t)me * n, row, sizeof *row * (size_t)n);
    c->have_links[me] = 1;
  }
  free(row);

  for (int mode = 0; mode < 3; mode++) {
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < n; j++) {
        if (mode == 1 && j < i) continue; /* bidirectional is symmetric */
        if (bench_barrier(r, T->t)) return NULL;
        double el = 0.0;
        int involved = me == i || me == j;
        if (involved) {
          double t0 = bench_now();
          if (mode == 2) {
            /* ping-pong of one 8-byte element */
            for (int k = 0; k < c->lat_iters && i != j; k++) {
              if (me == i) {
                if (p2p_check(r, ul_send(sb, 8, UL_UINT8, j, comm, NULL), comm, "send") ||
                    p2p_check(r, ul_recv(rb, 8, UL_UINT8, j, comm, NULL), comm, "recv"))
                  return NULL;
              } else {
                if (p2p_check(r, ul_recv(rb, 8, UL_UINT8, i, comm, NULL), comm, "recv") ||
                    p2p_check(r, ul_send(sb, 8, UL_UINT8, i, comm, NULL), comm, "send"))
                  return NULL;
              }
            }
            if (i == j) {
              for (int k = 0; k < c->lat_iters; k++) {
                ul_group_start();
                ul_result_t a = ul_send(sb, 8, UL_UINT8, me, comm, NULL);
                ul_result_t b = ul_recv(rb, 8, UL_UINT8, me, comm, NULL);
                ul_result_t e = ul_group_end();
                if (p2p_check(r, a != UL_OK ? a : b != UL_OK ? b : e, comm, "self copy")) return NULL;
              }
            }
          } else if (i == j || mode == 1) {
            /* self copy, or both directions at once: one group per iteration */
            int peer = me == i ? j : i;
            for (int k = 0; k < c->iters; k++) {
              ul_group_start();
              ul_result_t a = ul_send(sb, cnt, UL_UINT8, peer, comm, NULL);
              ul_result_t b = ul_recv(rb, cnt, UL_UINT8, peer, comm, NULL);
              ul_result_t e = ul_group_end();
              if (p2p_check(r, a != UL_OK ? a : b != UL_OK ? b : e, comm, "send/recv group"))
                return NULL;
            }
          } else {
            for (int k = 0; k < c->iters; k++) {
              ul_result_t rc = me == i ? ul_send(sb, cnt, UL_UINT8, j, comm, NULL)
                                       : ul_recv(rb, cnt, UL_UINT8, i, comm, NULL);
              if (p2p_check(r, rc, comm, me == i ? "send" : "recv")) return NULL;
            }
          }
          el = bench_now() - t0;
        }
        if (p2p_share(T, el)) return NULL;
        if (T->t == 0 && r->printing) {
          double ti = T->all[i], tj = T->all[j];
          double t = ti > tj ? ti : tj; /* the pair is done when both are */
          size_t at = (size_t)i * n + j;
          if (mode == 0) c->uni[at] = t > 0 ? (double)cnt * c->iters / t / 1e9 : 0;
          if (mode == 1) {
            double bw = t > 0 ? 2.0 * (double)cnt * c->iters / t / 1e9 : 0;
            if (i == j) bw /= 2.0; /* a self copy moves the bytes once */
            c->bidi[at] = c->bidi[(size_t)j * n + i] = bw;
          }
          if (mode == 2) c->lat[at] = i == j ? t / c->lat_iters * 1e6 : t / (2.0 * c->lat_iters) * 1e6;
        }
      }
    }
  }
  return NULL;
}

static void p2p_print_matrix(const char *title, const double *m, int n, int prec) {
  printf("%s\n   D\\D", title);
  for (int j = 0; j < n; j++) printf(" %9d", j);
  printf("\n");
  for (int i = 0; i < n; i++) {
    printf("  %4d", i);
    for (int j = 0; j < n; j++) printf(" %9.*f", prec, m[(size_t)i * n + j]);
    printf("\n");
  }
}

static const char *p2p_kind(ul_link_kind_t k) {
  switch (k) {
  case UL_LINK_SELF: return "self";
  case UL_LINK_NVLINK: return "nvlink";
  case UL_LINK_PCIE: return "pcie";
  case UL_LINK_SHM: return "shm";
  case UL_LINK_NETWORK: return "network";
  case UL_LINK_MODELED: return "modeled";
  case UL_LINK_XELINK: return "xelink";
  default: return "unknown";
  }
}

static const char *p2p_source(ul_link_source_t s) {
  switch (s) {
  case UL_SOURCE_MEASURED: return "measured";
  case UL_SOURCE_DRIVER: return "driver";
  case UL_SOURCE_MODELED: return "modeled";
  case UL_SOURCE_NOMINAL: return "nominal";
  default: return "none";
  }
}

int bench_p2p_main(const bench_opts_t *o) {
  bench_run_t run;
  memset(&run, 0, sizeof run);
  bench_run_t *r = &run;
  r->o = o;
  r->backend = o->backends[0];
  snprintf(r->base, sizeof r->base, "%s", r->backend);
  char *colon = strchr(r->base, ':');
  if (colon) *colon = '\0';
  r->info.struct_size = sizeof r->info;
  ul_result_t qrc = ul_backend_query(r->base, &r->info);
  if (qrc != UL_OK || !r->info.available) {
    printf("# backend %s unavailable: %s\n", r->backend,
           qrc != UL_OK ? ul_last_error() : r->info.reason);
    return BENCH_EXIT_UNAVAILABLE;
  }
  if (!(r->info.features & UL_FEATURE_P2P)) {
    printf("# backend %s has no send/recv\n", r->backend);
    return BENCH_EXIT_UNSUPPORTED;
  }
  r->mpi = ul_launched_by_mpi();
  r->nthreads = r->mpi ? 1 : o->nthreads;
  r->ngpus = 1;
  r->nlocal = r->nthreads;
  r->nranks = r->nlocal;
  r->modeled = (r->info.features & UL_FEATURE_MODELED) != 0;
  bench_sync_init(r);
  int code = bench_comms_create(r);
  if (code != BENCH_EXIT_OK) { bench_comms_destroy(r); return code; }
  r->printing = !r->mpi || r->proc == 0;
  int n = r->nranks;

  p2p_ctx_t c;
  memset(&c, 0, sizeof c);
  c.r = r;
  c.bytes = o->maxb ? o->maxb : 1;
  c.iters = o->iters;
  c.lat_iters = o->iters * 5 < 100 ? 100 : o->iters * 5;
  c.sbuf = calloc((size_t)r->nlocal, sizeof(char *));
  c.rbuf = calloc((size_t)r->nlocal, sizeof(char *));
  c.uni = calloc((size_t)n * n, sizeof(double));
  c.bidi = calloc((size_t)n * n, sizeof(double));
  c.lat = calloc((size_t)n * n, sizeof(double));
  c.links = calloc((size_t)n * n, sizeof(ul_link_info_t));
  c.have_links = calloc((size_t)n, sizeof(int));
  r->xch_per_rank = 4;
  r->xch = calloc((size_t)n * 4, sizeof(double));
  p2p_thread_t *th = calloc((size_t)r->nthreads, sizeof *th);
  pthread_t *tid = calloc((size_t)r->nthreads, sizeof *tid);
  if (!c.sbuf || !c.rbuf || !c.uni || !c.bidi || !c.lat || !c.links || !c.have_links || !r->xch ||
      !th || !tid)
    return BENCH_EXIT_INTERNAL;
  /* buffers from the backend (device memory on GPU backends, which cannot reach
   * pageable host memory), as the sweep's; malloc only where the backend has none.
   * They are set through the library, never by the CPU. */
  int *from_ul = calloc((size_t)r->nlocal * 2, sizeof(int));
  if (!from_ul) return BENCH_EXIT_INTERNAL;
  for (int i = 0; i < r->nlocal; i++) {
    char **bufs[2] = {&c.sbuf[i], &c.rbuf[i]};
    for (int b = 0; b < 2; b++) {
      void *p = NULL;
      if (ul_mem_alloc(r->comms[i], c.bytes + 8, &p) == UL_OK && p) from_ul[i * 2 + b] = 1;
      else if (posix_memalign(&p, 4096, c.bytes + 8) != 0) p = NULL;
      if (!p) return BENCH_EXIT_INTERNAL;
      *bufs[b] = p;
      ul_result_t rc = ul_mem_set(p, b ? 0 : i + 1, c.bytes + 8, r->comms[i], NULL);
      if (rc != UL_OK) {
        fprintf(stderr, "unilink-bench: p2p: ul_mem_set: %s: %s\n", ul_result_name(rc),
                ul_comm_last_error(r->comms[i]));
        return bench_exit_for(rc);
      }
    }
  }
  for (int t = 0; t < r->nthreads; t++) {
    th[t].c = &c;
    th[t].t = t;
    th[t].all = calloc((size_t)n, sizeof(double));
  }
  for (int t = 1; t < r->nthreads; t++) pthread_create(&tid[t], NULL, p2p_thread_main, &th[t]);
  p2p_thread_main(&th[0]);
  for (int t = 1; t < r->nthreads; t++) pthread_join(tid[t], NULL);

  if (r->fail_rc == UL_OK && r->printing) {
    printf("# unilink-bench p2p: backend %s%s, %d ranks, %zu-byte messages, %d iterations "
           "(latency: 8-byte ping-pong x %d)\n",
           r->backend, r->modeled ? " (data moved for real; times are wall clock)" : "", n,
           c.bytes, c.iters, c.lat_iters);
    p2p_print_matrix("Unidirectional bandwidth matrix (GB/s), row = sender, column = receiver",
                     c.uni, n, 2);
    p2p_print_matrix("Bidirectional bandwidth matrix (GB/s, both directions together)", c.bidi, n, 2);
    p2p_print_matrix("Latency matrix (us, one way)", c.lat, n, 2);
    printf("Links reported by ul_comm_topology (row rank's view of column peer)\n   D\\D");
    for (int j = 0; j < n; j++) printf(" %9d", j);
    printf("\n");
    for (int i = 0; i < n; i++) {
      printf("  %4d", i);
      for (int j = 0; j < n; j++)
        printf(" %9s", c.have_links[i] ? p2p_kind(c.links[(size_t)i * n + j].kind) : "?");
      printf("\n");
    }
    for (int i = 0; i < n; i++) {
      if (!c.have_links[i]) continue;
      for (int j = 0; j < n; j++) {
        const ul_link_info_t *l = &c.links[(size_t)i * n + j];
        printf("#  %d -> %d: %-8s %-32s", i, j, p2p_kind(l->kind), l->description);
        if (l->bandwidth_gbps > 0) printf(" %8.2f GB/s", l->bandwidth_gbps);
        if (l->latency_us > 0) printf(" %7.2f us", l->latency_us);
        printf(" (%s)\n", p2p_source(l->source));
      }
    }
  }
  int rc = r->fail_rc == UL_OK ? BENCH_EXIT_OK : bench_exit_for(r->fail_rc);
  if (r->fail_rc != UL_OK) fprintf(stderr, "unilink-bench: %s\n", r->fail_msg);
  for (int i = 0; i < r->nlocal; i++) {
    char *bufs[2] = {c.sbuf[i], c.rbuf[i]};
    for (int b = 0; b < 2; b++) {
      if (from_ul[i * 2 + b]) ul_mem_free(r->comms[i], bufs[b]);
      else free(bufs[b]);
    }
  }
  free(from_ul);
  bench_exchange_free(r);
  for (int t = 0; t < r->nthreads; t++) free(th[t].all);
  free(th); free(tid); free(c.sbuf); free(c.rbuf); free(c.uni); free(c.bidi); free(c.lat);
  free(c.links); free(c.have_links); free(r->xch);
  bench_comms_destroy(r);
  return rc;
}
