/* Planning: every instance of every registered case for one rank count, filtered by
 * --filter and by what the backend declares; and the merge of the ranks' records of one
 * instance. Over the case table (cases/registry.c); under the launchers and main.c. */
#define _GNU_SOURCE
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

static int cf_filter_match(const char *filter, const char *name) {
  if (!filter || !*filter) return 1;
  int any_include = 0, included = 0, excluded = 0;
  char *dup = strdup(filter), *save = NULL;
  for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (t[0] == '!') {
      if (fnmatch(t + 1, name, 0) == 0) excluded = 1;
    } else {
      any_include = 1;
      if (fnmatch(t, name, 0) == 0) included = 1;
    }
  }
  free(dup);
  return !excluded && (!any_include || included);
}

static const char *cf_feature_name(uint32_t bit) {
  switch (bit) {
  case UL_FEATURE_THREAD_RANKS: return "thread ranks";
  case UL_FEATURE_PROCESS_RANKS: return "process ranks";
  case UL_FEATURE_MULTI_NODE: return "multi-node";
  case UL_FEATURE_INIT_ALL: return "ul_comm_init_all";
  case UL_FEATURE_SPLIT: return "ul_comm_split";
  case UL_FEATURE_STREAMS: return "streams";
  case UL_FEATURE_P2P: return "send/recv";
  case UL_FEATURE_ONE_SIDED: return "one-sided windows";
  case UL_FEATURE_DEVICE_MEMORY: return "device memory";
  case UL_FEATURE_GENERIC_COLL: return "generic collectives";
  case UL_FEATURE_NATIVE_COLL: return "native collectives";
  default: return "feature";
  }
}

typedef struct cf_emit_state {
  const cf_opts_t *o;
  const ul_backend_info_t *info;
  cf_plan_t *p;
  int cap;
  int oom;
} cf_emit_state_t;

static void cf_caps_reason(const ul_backend_info_t *info, const cf_opts_t *o, cf_inst_t *in) {
  uint32_t f = info->features;
  uint32_t need = in->c->features;
  if (o->launcher == CF_LAUNCH_THREAD) need |= UL_FEATURE_THREAD_RANKS;
  if (o->launcher == CF_LAUNCH_PROCESS) need |= UL_FEATURE_PROCESS_RANKS;
  if (o->launcher == CF_LAUNCH_MPI && !(f & (UL_FEATURE_PROCESS_RANKS | UL_FEATURE_MULTI_NODE)))
    need |= UL_FEATURE_PROCESS_RANKS;
  uint32_t missing = need & ~f;
  if (missing) {
    uint32_t bit = missing & -missing;
    snprintf(in->skip, sizeof in->skip, "backend does not declare %s", cf_feature_name(bit));
    return;
  }
  if (info->max_ranks > 0 && in->nranks > info->max_ranks) {
    snprintf(in->skip, sizeof in->skip, "backend supports at most %d ranks", info->max_ranks);
    return;
  }
  if (in->coll >= 0 && in->coll != UL_COLL_SENDRECV && !(info->collectives & (1u << in->coll))) {
    snprintf(in->skip, sizeof in->skip, "backend does not declare collective %s",
             cf_coll_name(in->coll));
    return;
  }
  if (in->dtype >= 0 && !(info->dtypes & (1u << in->dtype))) {
    snprintf(in->skip, sizeof in->skip, "backend does not declare dtype %s",
             cf_dtype_name(in->dtype));
    return;
  }
  if (in->op >= 0) {
    if (!(info->ops & (1u << in->op))) {
      snprintf(in->skip, sizeof in->skip, "backend does not declare op %s", cf_op_name(in->op));
      return;
    }
    if (in->dtype >= 0 && !(info->reduce_dtypes & (1u << in->dtype))) {
      snprintf(in->skip, sizeof in->skip, "backend does not declare reductions on %s",
               cf_dtype_name(in->dtype));
      return;
    }
  }
}

static void cf_emit(void *arg, const cf_inst_t *proto) {
  cf_emit_state_t *st = arg;
  cf_plan_t *p = st->p;
  if (p->ninst == st->cap) {
    int ncap = st->cap ? st->cap * 2 : 1024;
    cf_inst_t *n = realloc(p->insts, sizeof(cf_inst_t) * (size_t)ncap);
    if (!n) {
      st->oom = 1;
      return;
    }
    p->insts = n;
    st->cap = ncap;
  }
  cf_inst_t *in = &p->insts[p->ninst++];
  *in = *proto;
  in->nranks = p->nranks;
  size_t len = strlen(in->name);
  snprintf(in->name + len, sizeof in->name - len, "/ranks=%d", p->nranks);
  in->selected = cf_filter_match(st->o->filter, in->name);
  in->skip[0] = 0;
  cf_caps_reason(st->info, st->o, in);
  if (in->selected && !in->skip[0]) p->nrun++;
}

int cf_plan_build(const cf_opts_t *o, const ul_backend_info_t *info, int nranks, cf_plan_t *p) {
  memset(p, 0, sizeof *p);
  p->nranks = nranks;
  cf_emit_state_t st = {o, info, p, 0, 0};
  for (int c = 0; c < cf_ncases; c++) {
    const cf_case_t *cs = &cf_cases[c];
    if (nranks < cs->min_ranks || (cs->max_ranks > 0 && nranks > cs->max_ranks)) continue;
    cs->expand(cs, nranks, o, info, cf_emit, &st);
  }
  if (st.oom) return -1;
  p->res = calloc((size_t)(p->ninst ? p->ninst : 1), sizeof(cf_result_t));
  return p->res ? 0 : -1;
}

void cf_plan_free(cf_plan_t *p) {
  free(p->insts);
  free(p->res);
  memset(p, 0, sizeof *p);
}

void cf_merge(const cf_rec_t *recs, int nranks, cf_result_t *out) {
  int first_fail = -1, nfail = 0, skip = -1;
  double ms = 0;
  for (int r = 0; r < nranks; r++) {
    if (recs[r].ms > ms) ms = recs[r].ms;
    if (recs[r].status == CF_FAIL) {
      if (first_fail < 0) first_fail = r;
      nfail++;
    } else if (recs[r].status == CF_SKIP && skip < 0) {
      skip = r;
    }
  }
  out->ms = ms;
  if (first_fail >= 0) {
    out->status = CF_FAIL;
    size_t k = (size_t)snprintf(out->msg, sizeof out->msg, "%s", recs[first_fail].msg);
    if (nfail > 1 && k < sizeof out->msg) {
      k += (size_t)snprintf(out->msg + k, sizeof out->msg - k, " [also failing on rank");
      for (int r = first_fail + 1; r < nranks && k < sizeof out->msg; r++)
        if (recs[r].status == CF_FAIL)
          k += (size_t)snprintf(out->msg + k, sizeof out->msg - k, " %d", r);
      if (k < sizeof out->msg) snprintf(out->msg + k, sizeof out->msg - k, "]");
    }
  } else if (skip >= 0) {
    out->status = CF_SKIP;
    snprintf(out->msg, sizeof out->msg, "%s", recs[skip].msg);
  } else {
    out->status = CF_PASS;
    out->msg[0] = 0;
  }
}
