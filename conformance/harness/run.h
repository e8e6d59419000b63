/* Harness internals shared by the driver, the launchers and the reporter. */
#ifndef CF_RUN_H
#define CF_RUN_H

#include "cf.h"

/* What one rank says about one instance; exchanged between ranks and written by
 * process children to their result file. Fits in CF_OOB_SLOT. */
typedef struct cf_rec {
  int32_t index;   /* instance index in the plan */
  int32_t status;  /* cf_status_t */
  int32_t broken;
  float ms;
  char msg[CF_MSG];
} cf_rec_t;

/* Merged result of one instance, as reported. */
typedef struct cf_result {
  cf_status_t status;
  double ms;
  char msg[CF_MSG + 64];
} cf_result_t;

/* All instances for one rank count. */
typedef struct cf_plan {
  int nranks;
  cf_inst_t *insts;
  int ninst;
  int nrun;            /* selected and not skipped by capability */
  cf_result_t *res;    /* ninst */
  char world_error[CF_MSG]; /* launcher-level failure for this rank count */
} cf_plan_t;

/* Planning (plan.c). */
int cf_plan_build(const cf_opts_t *o, const ul_backend_info_t *info, int nranks, cf_plan_t *p);
void cf_plan_free(cf_plan_t *p);

/* Merge the per-rank records of one instance (nmember ranks took part). */
void cf_merge(const cf_rec_t *recs, int nranks, cf_result_t *out);

/* Launchers (launch.c). Fill plan->res. Return 0, or -1 with plan->world_error set. */
int cf_launch_threads(const cf_opts_t *o, const ul_backend_info_t *info, cf_plan_t *p);
int cf_launch_processes(const cf_opts_t *o, const ul_backend_info_t *info, cf_plan_t *p,
                        int argc, char **argv);
/* Process child entry (hidden options). Returns the process exit code. */
int cf_child_main(const cf_opts_t *o, const ul_backend_info_t *info);
/* MPI launcher: runs every plan; only rank 0 (*is_root) reports. Returns 0/-1/3. */
int cf_launch_mpi(const cf_opts_t *o, const ul_backend_info_t *info, cf_plan_t *plans,
                  int nplans, int *is_root);

/* Progress line (report.c), only on a terminal. */
void cf_progress(int force, int nranks, long done, long total, long fails);
void cf_progress_end(void);

/* Reports (report.c). */
void cf_report_text(const cf_opts_t *o, const ul_backend_info_t *info, cf_plan_t *plans,
                    int nplans);
int cf_report_json(const char *path, const cf_opts_t *o, const ul_backend_info_t *info,
                   cf_plan_t *plans, int nplans);
int cf_report_junit(const char *path, const cf_opts_t *o, const ul_backend_info_t *info,
                    cf_plan_t *plans, int nplans);
/* One error case when the backend cannot run at all (unknown or unavailable). */
int cf_report_junit_unavailable(const char *path, const cf_opts_t *o, const char *why);
const char *cf_launcher_name(cf_launcher_t l);

/* Run one instance on one rank (cases.c dispatcher lives in launch.c). */
extern _Thread_local const char *cf_current_case;
extern _Thread_local int cf_current_rank;
void cf_install_crash_handlers(void);

#endif
