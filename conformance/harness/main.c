/* unilink-conformance: is backend X correct, what does it not support, and exactly
 * where does it go wrong. Public API only. See docs/conformance.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

static void cf_usage(FILE *f) {
  fprintf(f,
          "usage: unilink-conformance [options]\n"
          "  --backend NAME       backend to check (default: UNILINK_BACKEND, else auto)\n"
          "  --launcher KIND      thread | process | mpi (default: mpi under mpirun, else thread)\n"
          "  --ranks LIST         rank counts, e.g. 1,2,3,4,8 (default: thread 1,2,3,4,8;\n"
          "                       process 2,4; mpi: the number of processes)\n"
          "  --filter GLOBS       comma-separated fnmatch globs over case names, e.g.\n"
          "                       'allreduce/fp32/*,p2p/*'; a leading '!' excludes\n"
          "  --list               print the case names (and skip reasons) and exit\n"
          "  --quick              no 64 MiB counts and a thinned matrix\n"
          "  --strict             a SKIP counts as a failure\n"
          "  --seed N             input seed (default 1)\n"
          "  --timeout-ms N       communicator timeout (default 60000)\n"
          "  --mem malloc|ul      collective buffers from malloc or ul_mem_alloc\n"
          "                       (default: ul for device-memory backends, else malloc)\n"
          "  --json FILE          write results as JSON\n"
          "  --junit FILE         write results as JUnit XML\n"
          "  -v, --verbose        print every case result\n"
          "exit status: 0 passed (at least one case ran, none failed), 1 a failure,\n"
          "  2 usage error, 3 backend unavailable (a --junit file still gets one error case),\n"
          "  4 nothing ran (every selected case was skipped, or none was selected)\n");
}

/* Exit statuses (documented in the usage text and docs/conformance.md). "Nothing ran" is
 * its own status so that a CI job gating on the exit code cannot go green having tested
 * nothing. */
enum { CF_EXIT_PASS = 0, CF_EXIT_FAIL = 1, CF_EXIT_USAGE = 2, CF_EXIT_UNAVAILABLE = 3,
       CF_EXIT_NOTHING_RAN = 4 };

/* Exit 3, leaving the JUnit file CI looks for (with one error case) when one was asked. */
static int cf_unavailable(const cf_opts_t *o, const char *why) {
  if (o->junit_path && o->child_rank < 0 && cf_report_junit_unavailable(o->junit_path, o, why))
    fprintf(stderr, "unilink-conformance: cannot write %s\n", o->junit_path);
  return CF_EXIT_UNAVAILABLE;
}

static int cf_parse_ranks(const char *s, cf_opts_t *o) {
  o->nranks_list = 0;
  char *dup = strdup(s), *save = NULL;
  for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *end;
    long v = strtol(t, &end, 10);
    if (*end || v < 1 || v > CF_MAX_RANKS || o->nranks_list >= 16) {
      free(dup);
      return -1;
    }
    o->ranks[o->nranks_list++] = (int)v;
  }
  free(dup);
  return o->nranks_list ? 0 : -1;
}

static int cf_parse_args(int argc, char **argv, cf_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->seed = 1;
  o->timeout_ms = 60000;
  o->launcher = ul_launched_by_mpi() ? CF_LAUNCH_MPI : CF_LAUNCH_THREAD;
  o->child_rank = -1;
  o->use_ul_mem = -1;
  for (int i = 1; i < argc; i++) {
    char *a = argv[i], *val = NULL;
    char key[64];
    snprintf(key, sizeof key, "%s", a);
    char *eq = strchr(key, '=');
    if (eq && strncmp(a, "--", 2) == 0) {
      *eq = 0;
      val = a + (eq - key) + 1;
    }
#define CF_VAL()                                                                                 \
  do {                                                                                           \
    if (!val) {                                                                                  \
      if (i + 1 >= argc) {                                                                       \
        fprintf(stderr, "unilink-conformance: %s needs a value\n", key);                         \
        return -1;                                                                               \
      }                                                                                          \
      val = argv[++i];                                                                           \
    }                                                                                            \
  } while (0)
    if (!strcmp(key, "--backend")) { CF_VAL(); o->backend = val; }
    else if (!strcmp(key, "--launcher")) {
      CF_VAL();
      if (!strcmp(val, "thread")) o->launcher = CF_LAUNCH_THREAD;
      else if (!strcmp(val, "process")) o->launcher = CF_LAUNCH_PROCESS;
      else if (!strcmp(val, "mpi")) o->launcher = CF_LAUNCH_MPI;
      else { fprintf(stderr, "unilink-conformance: unknown launcher '%s'\n", val); return -1; }
    } else if (!strcmp(key, "--ranks")) {
      CF_VAL();
      if (cf_parse_ranks(val, o)) {
        fprintf(stderr, "unilink-conformance: bad --ranks '%s' (1..%d, comma separated)\n", val,
                CF_MAX_RANKS);
        return -1;
      }
    } else if (!strcmp(key, "--filter")) { CF_VAL(); o->filter = val; }
    else if (!strcmp(key, "--json")) { CF_VAL(); o->json_path = val; }
    else if (!strcmp(key, "--junit")) { CF_VAL(); o->junit_path = val; }
    else if (!strcmp(key, "--seed")) {
      CF_VAL();
      char *end;
      errno = 0;
      o->seed = strtoull(val, &end, 0);
      /* strtoull accepts "-1" (as 2^64-1) and saturates on overflow: refuse both. */
      if (*end || !*val || strchr(val, '-') || errno == ERANGE) {
        fprintf(stderr, "unilink-conformance: bad --seed '%s' (0 to 2^64-1)\n", val);
        return -1;
      }
    } else if (!strcmp(key, "--timeout-ms")) {
      CF_VAL();
      char *end;
      long v = strtol(val, &end, 10);
      if (*end || !*val || v < 100 || v > 24L * 3600 * 1000) {
        fprintf(stderr, "unilink-conformance: bad --timeout-ms '%s' (100 to 86400000)\n", val);
        return -1;
      }
      o->timeout_ms = (int)v;
    } else if (!strcmp(key, "--mem")) {
      CF_VAL();
      if (!strcmp(val, "malloc")) o->use_ul_mem = 0;
      else if (!strcmp(val, "ul")) o->use_ul_mem = 1;
      else { fprintf(stderr, "unilink-conformance: bad --mem '%s'\n", val); return -1; }
    } else if (!strcmp(key, "--strict")) o->strict = 1;
    else if (!strcmp(key, "--quick")) o->quick = 1;
    else if (!strcmp(key, "--list")) o->list = 1;
    else if (!strcmp(key, "-v") || !strcmp(key, "--verbose")) o->verbose = 1;
    else if (!strcmp(key, "-h") || !strcmp(key, "--help")) { cf_usage(stdout); exit(0); }
    /* hidden: process launcher children */
    else if (!strcmp(key, "--child-rank")) { CF_VAL(); o->child_rank = atoi(val); }
    else if (!strcmp(key, "--child-nranks")) { CF_VAL(); o->child_nranks = atoi(val); }
    else if (!strcmp(key, "--child-start")) { CF_VAL(); o->child_start = atoi(val); }
    else if (!strcmp(key, "--child-id")) { CF_VAL(); o->child_id_hex = val; }
    else if (!strcmp(key, "--child-ctl")) { CF_VAL(); o->child_ctl = val; }
    else if (!strcmp(key, "--child-out")) { CF_VAL(); o->child_out = val; }
    else {
      fprintf(stderr, "unilink-conformance: unknown option '%s'\n", a);
      return -1;
    }
#undef CF_VAL
  }
  if (!o->nranks_list) {
    if (o->launcher == CF_LAUNCH_PROCESS) {
      o->ranks[0] = 2;
      o->ranks[1] = 4;
      o->nranks_list = 2;
    } else if (o->launcher == CF_LAUNCH_MPI) {
      const char *envs[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS",
                            "MPI_LOCALNRANKS"};
      int w = 0;
      for (size_t k = 0; k < sizeof(envs) / sizeof(envs[0]) && !w; k++)
        if (getenv(envs[k])) w = atoi(getenv(envs[k]));
      o->ranks[0] = w > 0 && w <= CF_MAX_RANKS ? w : 2;
      o->nranks_list = 1;
    } else {
      int d[] = {1, 2, 3, 4, 8};
      memcpy(o->ranks, d, sizeof d);
      o->nranks_list = 5;
    }
  }
  return 0;
}

/* ------------------------------------------------------------- main */
int main(int argc, char **argv) {
  cf_opts_t o;
  if (cf_parse_args(argc, argv, &o)) {
    cf_usage(stderr);
    return 2;
  }
  cf_install_crash_handlers();
  if (!o.backend) {
    const char *env = getenv("UNILINK_BACKEND");
    o.backend = (env && *env && strcmp(env, "auto")) ? env : ul_backend_auto();
    if (!o.backend) {
      fprintf(stderr, "unilink-conformance: no backend is available here (%s)\n", ul_last_error());
      return cf_unavailable(&o, ul_last_error());
    }
  }
  ul_backend_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ul_result_t rc = ul_backend_query(o.backend, &info);
  if (rc != UL_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s (%s)", ul_result_name(rc), ul_last_error());
    fprintf(stderr, "unilink-conformance: backend '%s': %s\n", o.backend, why);
    int nb = ul_backend_count();
    fprintf(stderr, "registered backends:");
    for (int i = 0; i < nb; i++) {
      ul_backend_info_t bi;
      memset(&bi, 0, sizeof bi);
      bi.struct_size = sizeof bi;
      if (ul_backend_get_info(i, &bi) == UL_OK) fprintf(stderr, " %s", bi.name);
    }
    fprintf(stderr, "\n");
    return cf_unavailable(&o, why);
  }
  if (o.use_ul_mem < 0) o.use_ul_mem = (info.features & UL_FEATURE_DEVICE_MEMORY) ? 1 : 0;

  if (o.child_rank >= 0) return cf_child_main(&o, &info);

  if (!info.available && !o.list) {
    fprintf(stderr, "unilink-conformance: backend '%s' is unavailable here: %s\n", o.backend,
            info.reason[0] ? info.reason : "(no reason given)");
    return cf_unavailable(&o, info.reason[0] ? info.reason : "(no reason given)");
  }

  cf_plan_t plans[16];
  int nplans = 0;
  for (int k = 0; k < o.nranks_list; k++) {
    if (cf_plan_build(&o, &info, o.ranks[k], &plans[nplans])) {
      fprintf(stderr, "unilink-conformance: out of memory while planning\n");
      return 2;
    }
    nplans++;
  }

  if (o.list) {
    for (int k = 0; k < nplans; k++)
      for (int i = 0; i < plans[k].ninst; i++) {
        cf_inst_t *in = &plans[k].insts[i];
        if (!in->selected) continue;
        if (in->skip[0]) printf("%s  [skip: %s]\n", in->name, in->skip);
        else printf("%s\n", in->name);
      }
    return 0;
  }

  int fatal = 0, is_root = 1;
  if (o.launcher == CF_LAUNCH_MPI) {
    int r = cf_launch_mpi(&o, &info, plans, nplans, &is_root);
    if (r == 3) {
      /* No world communicator, so no root: the launcher's rank-0 process writes the file. */
      const char *lr = getenv("OMPI_COMM_WORLD_RANK");
      if (!lr) lr = getenv("PMI_RANK");
      if (!lr) lr = getenv("SLURM_PROCID");
      if (lr && strcmp(lr, "0") != 0) return CF_EXIT_UNAVAILABLE;
      return cf_unavailable(&o, "the mpi launcher could not start (see the messages above)");
    }
  } else {
    for (int k = 0; k < nplans && !fatal; k++) {
      if (!plans[k].nrun) continue;
      int r = o.launcher == CF_LAUNCH_THREAD
                  ? cf_launch_threads(&o, &info, &plans[k])
                  : cf_launch_processes(&o, &info, &plans[k], argc, argv);
      if (r == -2) fatal = 1;
    }
  }
  cf_progress_end();
  if (!is_root) return 0;

  /* Capability skips become results; --strict turns every skip into a failure. */
  int any_fail = 0;
  long nran = 0; /* cases that passed or failed: something was actually checked */
  for (int k = 0; k < nplans; k++) {
    cf_plan_t *p = &plans[k];
    if (p->world_error[0]) any_fail = 1;
    for (int i = 0; i < p->ninst; i++) {
      cf_inst_t *in = &p->insts[i];
      cf_result_t *res = &p->res[i];
      if (!in->selected) continue;
      if (in->skip[0]) {
        res->status = CF_SKIP;
        snprintf(res->msg, sizeof res->msg, "%s", in->skip);
      }
      if (o.strict && res->status == CF_SKIP) {
        char tmp[sizeof res->msg];
        snprintf(tmp, sizeof tmp, "%s", res->msg);
        res->status = CF_FAIL;
        snprintf(res->msg, sizeof res->msg, "skipped under --strict: %s", tmp);
      }
      if (res->status == CF_FAIL || res->status == CF_NONE) any_fail = 1;
      if (res->status == CF_FAIL || res->status == CF_PASS) nran++;
    }
  }
  cf_report_text(&o, &info, plans, nplans);
  if (o.json_path && cf_report_json(o.json_path, &o, &info, plans, nplans)) {
    fprintf(stderr, "unilink-conformance: cannot write %s\n", o.json_path);
    any_fail = 1;
  }
  if (o.junit_path && cf_report_junit(o.junit_path, &o, &info, plans, nplans)) {
    fprintf(stderr, "unilink-conformance: cannot write %s\n", o.junit_path);
    any_fail = 1;
  }
  fflush(stdout);
  if (fatal) _exit(1); /* ranks stuck in the library: do not wait for them */
  for (int k = 0; k < nplans; k++) cf_plan_free(&plans[k]);
  if (any_fail) return CF_EXIT_FAIL;
  if (nran == 0) {
    fprintf(stderr, "unilink-conformance: nothing ran: every selected case was skipped or none "
            "was selected (exit %d)\n", CF_EXIT_NOTHING_RAN);
    return CF_EXIT_NOTHING_RAN;
  }
  return CF_EXIT_PASS;
}
