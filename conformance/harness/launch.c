/* Launchers and the rank environment: ranks as threads, as fork/exec'd processes, or
 * as MPI processes; the out-of-band channel (oob.c) keeps ranks in lockstep, exchanges
 * per-case outcomes and rebuilds a communicator that a failing case left broken.
 * Layers: data.c and oob.c below the cases; plan.c over the case table; this file over
 * both; main.c on top. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "oob.h"
#include "run.h"

_Thread_local const char *cf_current_case;
_Thread_local int cf_current_rank = -1;

/* ------------------------------------------------------------- crash report */
static void cf_crash(int sig) {
  /* async-signal-safe: write() only, then die by the same signal so a parent sees it */
  const char *c = cf_current_case ? cf_current_case : "(between cases)";
  char buf[320];
  size_t k = 0;
  const char *parts[] = {"\nunilink-conformance: fatal signal ", strsignal(sig), " in case ", c,
                         "\n"};
  for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
    for (const char *s = parts[i]; s && *s && k < sizeof(buf) - 1; s++) buf[k++] = *s;
  if (write(2, buf, k) < 0) { /* nothing more to do */ }
  signal(sig, SIG_DFL);
  raise(sig);
}

void cf_install_crash_handlers(void) {
  int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) signal(sigs[i], cf_crash);
  signal(SIGPIPE, SIG_IGN);
}

/* ------------------------------------------------------------- rank loop */
typedef struct cf_rank_args {
  const cf_opts_t *o;
  const ul_backend_info_t *info;
  cf_plan_t *p;
  cf_oob_t oob;
  int rank;            /* rank in the oob world */
  ul_unique_id_t id;   /* first communicator's id (thread, process) */
  int out_fd;          /* process child: record file, else -1 */
  int is_reporter;     /* merges into p->res */
  int member;          /* takes part in this rank count (MPI sub-communicators) */
  int start;           /* first instance index to run (process relaunch) */
  ul_comm_t parent;    /* MPI: split source */
  int use_parent;      /* MPI without split: the case comm is the world comm */
} cf_rank_args_t;

static ul_result_t cf_comm_create(cf_rank_args_t *a, ul_comm_t *comm, int first) {
  *comm = NULL;
  if (a->oob.kind == CF_OOB_MPI) {
    if (a->use_parent) {
      *comm = a->parent;
      return UL_OK;
    }
    return ul_comm_split(a->parent, a->member ? 0 : UL_SPLIT_NOCOLOR, a->rank, comm, NULL);
  }
  if (!first) {
    if (a->rank == 0 && ul_get_unique_id(a->o->backend, &a->id) != UL_OK)
      memset(&a->id, 0, sizeof a->id);
    if (cf_oob_bcast_id(&a->oob, &a->id)) return UL_ERR_ABORTED;
  }
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = a->o->timeout_ms;
  cfg.name = "conformance";
  return ul_comm_init_rank(comm, &cfg, a->p->nranks, a->id, a->rank);
}

static void cf_comm_drop(cf_rank_args_t *a, ul_comm_t comm, int clean) {
  if (!comm || (a->use_parent && comm == a->parent)) return;
  if (clean && ul_comm_finalize(comm) == UL_OK) ul_comm_destroy(comm);
  else ul_comm_abort(comm);
}

static void cf_rank_loop(cf_rank_args_t *a) {
  cf_plan_t *p = a->p;
  const cf_opts_t *o = a->o;
  cf_ctl_t *ctl = a->oob.kind == CF_OOB_SHM ? a->oob.ctl : NULL;
  cf_current_rank = a->rank;
  ul_comm_t comm = NULL;
  char comm_err[CF_MSG] = "";
  ul_result_t rc = cf_comm_create(a, &comm, 1);
  if (rc != UL_OK && a->member) {
    snprintf(comm_err, sizeof comm_err, "communicator creation returned %s: %s",
             ul_result_name(rc), ul_last_error());
    comm = NULL;
  }
  if (comm && a->member) { /* the communicator must say who we are */
    int r = -1, n = -1;
    ul_comm_rank(comm, &r);
    ul_comm_size(comm, &n);
    if (r != a->rank || n != p->nranks)
      snprintf(comm_err, sizeof comm_err, "communicator reports rank %d of %d, expected %d of %d",
               r, n, a->rank, p->nranks);
  }
  cf_rec_t *all = malloc(sizeof(cf_rec_t) * (size_t)a->oob.nranks);
  long long last_progress = 0;
  long mpi_done = 0, mpi_fails = 0; /* MPI: rank 0 prints its own progress */
  for (int i = a->start; all && i < p->ninst; i++) {
    cf_inst_t *in = &p->insts[i];
    if (!in->selected || in->skip[0]) continue;
    if (ctl && atomic_load(&ctl->abort)) break;
    cf_rec_t rec;
    memset(&rec, 0, sizeof rec);
    rec.index = i;
    if (!a->member) {
      rec.status = CF_NONE;
    } else if (!comm || comm_err[0]) {
      rec.status = CF_FAIL;
      snprintf(rec.msg, sizeof rec.msg, "rank %d: no usable communicator: %s", a->rank,
               comm_err[0] ? comm_err : "(unknown)");
    } else {
      cf_ctx_t ctx;
      memset(&ctx, 0, sizeof ctx);
      ctx.comm = comm;
      ctx.rank = a->rank;
      ctx.nranks = p->nranks;
      ctx.inst = in;
      ctx.opts = o;
      ctx.info = a->info;
      ctx.oob = &a->oob;
      ctx.seed = cf_hash64(o->seed ^ cf_str_hash(in->name));
      cf_current_case = in->name;
      if (ctl) atomic_store(&ctl->current[a->rank], i);
      long long t0 = cf_now_ms();
      in->c->fn(&ctx);
      cf_free_all(&ctx);
      rec.ms = (float)(cf_now_ms() - t0);
      cf_current_case = NULL;
      if (ctx.status == CF_NONE) ctx.status = CF_PASS;
      rec.status = ctx.status;
      rec.broken = ctx.broken;
      memcpy(rec.msg, ctx.msg, sizeof rec.msg);
    }
    if (cf_oob_allgather(&a->oob, &rec, all, sizeof rec)) break;
    if (ctl) atomic_store(&ctl->current[a->rank], -1);
    int broken = 0;
    for (int r = 0; r < a->oob.nranks; r++) broken |= all[r].broken;
    if (a->out_fd >= 0 && write(a->out_fd, &rec, sizeof rec) != (ssize_t)sizeof rec)
      fprintf(stderr, "unilink-conformance: rank %d: cannot write results: %s\n", a->rank,
              strerror(errno));
    if (a->is_reporter) cf_merge(all, p->nranks, &p->res[i]);
    if (a->rank == 0) {
      int failed = 0;
      for (int r = 0; r < p->nranks; r++) failed |= all[r].status == CF_FAIL;
      if (ctl) {
        atomic_fetch_add(&ctl->done, 1);
        if (failed) atomic_fetch_add(&ctl->fails, 1);
      } else if (a->is_reporter) {
        mpi_done++;
        mpi_fails += failed;
        long long now = cf_now_ms();
        if (now - last_progress > 100) {
          cf_progress(0, p->nranks, mpi_done, p->nrun, mpi_fails);
          last_progress = now;
        }
      }
    }
    if (broken) {
      /* The case left the communicator unusable on some rank: every rank drops it and a
       * fresh one is built, so one failure does not cascade into the next cases. */
      if (comm) cf_comm_drop(a, comm, 0);
      comm = NULL;
      comm_err[0] = 0;
      if (a->use_parent) {
        snprintf(comm_err, sizeof comm_err, "the world communicator broke in an earlier case");
        continue;
      }
      rc = cf_comm_create(a, &comm, 0);
      if (rc != UL_OK && a->member)
        snprintf(comm_err, sizeof comm_err, "rebuilding the communicator returned %s: %s",
                 ul_result_name(rc), ul_last_error());
    }
  }
  free(all);
  int aborted = ctl && atomic_load(&ctl->abort);
  cf_comm_drop(a, comm, !aborted);
}

/* ------------------------------------------------------------- threads */
static cf_ctl_t *cf_ctl_new_mem(int n) {
  cf_ctl_t *c = aligned_alloc(64, (sizeof(cf_ctl_t) + 63) & ~(size_t)63);
  if (!c) return NULL;
  memset(c, 0, sizeof *c);
  c->nranks = (uint32_t)n;
  for (int r = 0; r < CF_MAX_RANKS; r++) atomic_store(&c->current[r], -1);
  return c;
}

static void *cf_thread_main(void *arg) {
  cf_rank_loop(arg);
  return NULL;
}

int cf_launch_threads(const cf_opts_t *o, const ul_backend_info_t *info, cf_plan_t *p) {
  int n = p->nranks;
  if (n > CF_MAX_RANKS) {
    snprintf(p->world_error, sizeof p->world_error, "at most %d ranks", CF_MAX_RANKS);
    return -1;
  }
  ul_unique_id_t id;
  ul_result_t rc = ul_get_unique_id(o->backend, &id);
  if (rc != UL_OK) {
    snprintf(p->world_error, sizeof p->world_error, "ul_get_unique_id returned %s: %s",
             ul_result_name(rc), ul_last_error());
    return -1;
  }
  cf_ctl_t *ctl = cf_ctl_new_mem(n);
  cf_rank_args_t *args = calloc((size_t)n, sizeof *args);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  if (!ctl || !args || !th) {
    free(ctl); free(args); free(th);
    snprintf(p->world_error, sizeof p->world_error, "out of memory");
    return -1;
  }
  for (int r = 0; r < n; r++) {
    cf_rank_args_t *a = &args[r];
    a->o = o;
    a->info = info;
    a->p = p;
    a->rank = r;
    a->id = id;
    a->out_fd = -1;
    a->is_reporter = (r == 0);
    a->member = 1;
    a->oob = (cf_oob_t){.kind = CF_OOB_SHM, .threads = 1, .rank = r, .nranks = n, .ctl = ctl,
                        .timeout_ms = o->timeout_ms};
  }
  int started = 0;
  for (int r = 0; r < n; r++) {
    if (pthread_create(&th[r], NULL, cf_thread_main, &args[r]) != 0) {
      snprintf(p->world_error, sizeof p->world_error, "pthread_create failed");
      cf_oob_abort(&args[0].oob);
      break;
    }
    started++;
  }
  int joined = 0, hung = 0;
  long long abort_seen = 0;
  while (joined < started) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    if (pthread_timedjoin_np(th[joined], NULL, &ts) == 0) {
      joined++;
      continue;
    }
    cf_progress(0, n, atomic_load(&ctl->done), p->nrun, atomic_load(&ctl->fails));
    if (atomic_load(&ctl->abort)) {
      if (!abort_seen) abort_seen = cf_now_ms();
      else if (cf_now_ms() - abort_seen > 10000) { hung = 1; break; }
    }
  }
  cf_progress(1, n, atomic_load(&ctl->done), p->nrun, atomic_load(&ctl->fails));
  if (hung) {
    /* A rank is stuck inside the library past its timeout: record where, and leave the
     * threads behind (they cannot be cancelled safely). */
    char where[CF_MSG] = "";
    size_t k = 0;
    for (int r = 0; r < n; r++) {
      int32_t cur = atomic_load(&ctl->current[r]);
      if (cur >= 0 && k < sizeof where - 64)
        k += (size_t)snprintf(where + k, sizeof where - k, "%srank %d in %s", k ? ", " : "", r,
                              p->insts[cur].name);
    }
    snprintf(p->world_error, sizeof p->world_error,
             "ranks did not return from the library (hang past the timeout): %s",
             where[0] ? where : "(no case recorded)");
    for (int r = 0; r < n; r++) {
      int32_t cur = atomic_load(&ctl->current[r]);
      if (cur >= 0 && p->res[cur].status == CF_NONE) {
        p->res[cur].status = CF_FAIL;
        snprintf(p->res[cur].msg, sizeof p->res[cur].msg, "rank %d hung in this case", r);
      }
    }
    return -2;
  }
  if (atomic_load(&ctl->abort) && !p->world_error[0])
    snprintf(p->world_error, sizeof p->world_error, "run aborted (ranks lost lockstep)");
  free(ctl);
  free(args);
  free(th);
  return p->world_error[0] ? -1 : 0;
}

/* ------------------------------------------------------------- processes */
static void cf_hex_encode(const void *in, size_t n, char *out) {
  const unsigned char *b = in;
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
  out[2 * n] = 0;
}

static int cf_hex_decode(const char *hex, void *out, size_t n) {
  if (!hex || strlen(hex) != 2 * n) return -1;
  unsigned char *b = out;
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
    b[i] = (unsigned char)v;
  }
  return 0;
}

static cf_ctl_t *cf_ctl_map(const char *path, int create, int n) {
  int fd = open(path, O_RDWR | (create ? O_CREAT : 0), 0600);
  if (fd < 0) return NULL;
  if (create && ftruncate(fd, sizeof(cf_ctl_t)) != 0) {
    close(fd);
    return NULL;
  }
  void *m = mmap(NULL, sizeof(cf_ctl_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return NULL;
  cf_ctl_t *c = m;
  if (create) {
    memset(c, 0, sizeof *c);
    c->nranks = (uint32_t)n;
    for (int r = 0; r < CF_MAX_RANKS; r++) atomic_store(&c->current[r], -1);
  }
  return c;
}

int cf_child_main(const cf_opts_t *o, const ul_backend_info_t *info) {
  int n = o->child_nranks, r = o->child_rank;
  if (n < 1 || n > CF_MAX_RANKS || r < 0 || r >= n) return 2;
  cf_ctl_t *ctl = cf_ctl_map(o->child_ctl, 0, n);
  if (!ctl) {
    fprintf(stderr, "unilink-conformance child %d: cannot map %s\n", r, o->child_ctl);
    return 2;
  }
  int fd = open(o->child_out, O_WRONLY | O_APPEND);
  if (fd < 0) return 2;
  cf_plan_t plan;
  if (cf_plan_build(o, info, n, &plan)) return 2;
  cf_rank_args_t a;
  memset(&a, 0, sizeof a);
  a.o = o;
  a.info = info;
  a.p = &plan;
  a.rank = r;
  a.out_fd = fd;
  a.member = 1;
  a.start = o->child_start;
  a.oob = (cf_oob_t){.kind = CF_OOB_SHM, .threads = 0, .rank = r, .nranks = n, .ctl = ctl,
                     .timeout_ms = o->timeout_ms};
  if (cf_hex_decode(o->child_id_hex, &a.id, sizeof a.id)) {
    fprintf(stderr, "unilink-conformance child %d: bad --child-id\n", r);
    return 2;
  }
  cf_rank_loop(&a);
  close(fd);
  cf_plan_free(&plan);
  return 0;
}

int cf_launch_processes(const cf_opts_t *o, const ul_backend_info_t *info, cf_plan_t *p,
                        int argc, char **argv) {
  int n = p->nranks;
  if (n > CF_MAX_RANKS) {
    snprintf(p->world_error, sizeof p->world_error, "at most %d ranks", CF_MAX_RANKS);
    return -1;
  }
  char dir[] = "/tmp/unilink-conformance-XXXXXX";
  if (!mkdtemp(dir)) {
    snprintf(p->world_error, sizeof p->world_error, "mkdtemp: %s", strerror(errno));
    return -1;
  }
  char ctlpath[128], outpath[CF_MAX_RANKS][128];
  snprintf(ctlpath, sizeof ctlpath, "%s/ctl", dir);
  for (int r = 0; r < n; r++) snprintf(outpath[r], sizeof outpath[r], "%s/rank%d.rec", dir, r);
  cf_rec_t *recs = calloc((size_t)p->ninst * (size_t)n, sizeof(cf_rec_t));
  if (!recs) return -1;
  int start = 0, launches = 0, ret = 0;
  while (start < p->ninst && launches++ < 32) {
    cf_ctl_t *ctl = cf_ctl_map(ctlpath, 1, n);
    ul_unique_id_t id;
    ul_result_t rc = ctl ? ul_get_unique_id(o->backend, &id) : UL_ERR_SYSTEM;
    if (rc != UL_OK) {
      snprintf(p->world_error, sizeof p->world_error, "ul_get_unique_id returned %s: %s",
               ul_result_name(rc), ul_last_error());
      ret = -1;
      break;
    }
    char idhex[2 * sizeof(id) + 1], rs[16], ns[16], st[16];
    cf_hex_encode(&id, sizeof id, idhex);
    snprintf(ns, sizeof ns, "%d", n);
    snprintf(st, sizeof st, "%d", start);
    pid_t pids[CF_MAX_RANKS];
    int status[CF_MAX_RANKS], alive = 0;
    for (int r = 0; r < n; r++) {
      int fd = open(outpath[r], O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) close(fd);
      snprintf(rs, sizeof rs, "%d", r);
      char **av = calloc((size_t)argc + 14, sizeof(char *));
      int k = 0;
      for (int i = 0; i < argc; i++) av[k++] = argv[i];
      const char *extra[] = {"--child-rank", rs, "--child-nranks", ns, "--child-id", idhex,
                             "--child-ctl", ctlpath, "--child-out", outpath[r], "--child-start", st};
      for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) av[k++] = (char *)extra[i];
      av[k] = NULL;
      pid_t pid = fork();
      if (pid == 0) {
        execv("/proc/self/exe", av);
        _exit(127);
      }
      free(av);
      pids[r] = pid;
      status[r] = -1;
      if (pid > 0) alive++;
    }
    long long abort_seen = 0;
    int crashed_rank = -1, crashed_inst = -1, crashed_status = 0;
    while (alive > 0) {
      for (int r = 0; r < n; r++) {
        if (pids[r] <= 0 || status[r] != -1) continue;
        int st2;
        pid_t w = waitpid(pids[r], &st2, WNOHANG);
        if (w == pids[r]) {
          status[r] = st2;
          alive--;
          if (!(WIFEXITED(st2) && WEXITSTATUS(st2) == 0) && crashed_rank < 0) {
            crashed_rank = r;
            crashed_inst = atomic_load(&ctl->current[r]);
            crashed_status = st2;
            atomic_store(&ctl->abort, 1);
            atomic_fetch_add(&ctl->gen, 1);
            cf_futex_wake(&ctl->gen);
          }
        }
      }
      if (alive <= 0) break;
      cf_progress(0, n, atomic_load(&ctl->done), p->nrun, atomic_load(&ctl->fails));
      if (atomic_load(&ctl->abort)) {
        if (!abort_seen) abort_seen = cf_now_ms();
        else if (cf_now_ms() - abort_seen > o->timeout_ms + 10000LL) {
          for (int r = 0; r < n; r++) /* our own children, by pid */
            if (pids[r] > 0 && status[r] == -1) kill(pids[r], SIGKILL);
        }
      }
      usleep(50000);
    }
    cf_progress(1, n, atomic_load(&ctl->done), p->nrun, atomic_load(&ctl->fails));
    /* Collect what every rank recorded. */
    int max_done = start - 1;
    for (int r = 0; r < n; r++) {
      int fd = open(outpath[r], O_RDONLY);
      if (fd < 0) continue;
      cf_rec_t rec;
      while (read(fd, &rec, sizeof rec) == (ssize_t)sizeof rec) {
        if (rec.index < 0 || rec.index >= p->ninst) continue;
        recs[(size_t)rec.index * n + r] = rec;
        if (rec.index > max_done) max_done = rec.index;
      }
      close(fd);
    }
    int hung_inst = -1;
    if (crashed_rank < 0 && atomic_load(&ctl->abort)) {
      for (int r = 0; r < n && hung_inst < 0; r++) hung_inst = atomic_load(&ctl->current[r]);
    }
    munmap(ctl, sizeof *ctl);
    if (crashed_rank >= 0 && crashed_inst >= 0) {
      cf_result_t *res = &p->res[crashed_inst];
      res->status = CF_FAIL;
      if (WIFSIGNALED(crashed_status))
        snprintf(res->msg, sizeof res->msg, "rank %d crashed with signal %d (%s) in this case",
                 crashed_rank, WTERMSIG(crashed_status), strsignal(WTERMSIG(crashed_status)));
      else
        snprintf(res->msg, sizeof res->msg, "rank %d exited with status %d in this case",
                 crashed_rank, WEXITSTATUS(crashed_status));
      start = crashed_inst + 1; /* relaunch after the crashing case */
      continue;
    }
    if (crashed_rank >= 0 || hung_inst >= 0) {
      int at = hung_inst >= 0 ? hung_inst : max_done + 1;
      if (at < p->ninst && p->res[at].status == CF_NONE) {
        p->res[at].status = CF_FAIL;
        if (crashed_rank >= 0)
          snprintf(p->res[at].msg, sizeof p->res[at].msg,
                   "rank %d ended abnormally during this case", crashed_rank);
        else
          snprintf(p->res[at].msg, sizeof p->res[at].msg,
                   "ranks did not complete this case (hang past the timeout)");
      }
      start = at + 1;
      continue;
    }
    break;
  }
  /* Merge per instance; instances some rank never reported stay "not run". */
  for (int i = 0; i < p->ninst; i++) {
    if (p->res[i].status != CF_NONE) continue;
    cf_rec_t *ri = &recs[(size_t)i * n];
    int have = 0;
    for (int r = 0; r < n; r++) have += ri[r].status != CF_NONE;
    if (have == n) cf_merge(ri, n, &p->res[i]);
  }
  free(recs);
  unlink(ctlpath);
  for (int r = 0; r < n; r++) unlink(outpath[r]);
  rmdir(dir);
  return ret;
}

/* ------------------------------------------------------------- mpi */
int cf_launch_mpi(const cf_opts_t *o, const ul_backend_info_t *info, cf_plan_t *plans,
                  int nplans, int *is_root) {
  *is_root = 0;
  if (!ul_launched_by_mpi()) {
    fprintf(stderr, "unilink-conformance: --launcher mpi: this process was not started by "
            "mpirun/mpiexec/srun\n");
    return 3;
  }
  ul_unique_id_t id;
  int rank = -1, W = 0;
  ul_result_t rc = ul_bootstrap_mpi(o->backend, &id, &rank, &W);
  if (rc == UL_ERR_UNAVAILABLE) {
    fprintf(stderr, "unilink-conformance: ul_bootstrap_mpi is unavailable: %s\n", ul_last_error());
    return 3;
  }
  if (rc != UL_OK) {
    fprintf(stderr, "unilink-conformance: ul_bootstrap_mpi returned %s: %s\n",
            ul_result_name(rc), ul_last_error());
    return 3;
  }
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = o->timeout_ms;
  cfg.name = "conformance-world";
  ul_comm_t world = NULL;
  rc = ul_comm_init_rank(&world, &cfg, W, id, rank);
  if (rc != UL_OK) {
    fprintf(stderr, "unilink-conformance: rank %d: ul_comm_init_rank (world) returned %s: %s\n",
            rank, ul_result_name(rc), ul_comm_last_error(NULL));
    return 3;
  }
  *is_root = rank == 0;
  int can_split = (info->features & UL_FEATURE_SPLIT) != 0;
  for (int k = 0; k < nplans; k++) {
    cf_plan_t *p = &plans[k];
    int n = p->nranks;
    if (n > W) {
      snprintf(p->world_error, sizeof p->world_error,
               "needs %d ranks; mpirun started %d processes", n, W);
      continue;
    }
    if (n < W && !can_split) {
      snprintf(p->world_error, sizeof p->world_error,
               "a %d-rank communicator out of %d processes needs ul_comm_split", n, W);
      continue;
    }
    cf_rank_args_t a;
    memset(&a, 0, sizeof a);
    a.o = o;
    a.info = info;
    a.p = p;
    a.rank = rank;
    a.out_fd = -1;
    a.is_reporter = rank == 0;
    a.member = rank < n;
    a.parent = world;
    a.use_parent = !can_split;
    a.oob = (cf_oob_t){.kind = CF_OOB_MPI, .rank = rank, .nranks = W, .ctrl = world,
                       .timeout_ms = o->timeout_ms};
    cf_rank_loop(&a);
    if (rank == 0) cf_progress(1, n, p->nrun, p->nrun, 0);
  }
  ul_comm_finalize(world);
  ul_comm_destroy(world);
  return 0;
}
