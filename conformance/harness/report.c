/* Reporting: live progress on a terminal, the collective x datatype matrix, failures in
 * full, JSON and JUnit XML. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

static int cf_progress_shown;

void cf_progress(int force, int nranks, long done, long total, long fails) {
  static struct timespec last;
  if (!isatty(2)) return;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  long ms = (now.tv_sec - last.tv_sec) * 1000 + (now.tv_nsec - last.tv_nsec) / 1000000;
  if (!force && ms < 100) return;
  last = now;
  fprintf(stderr, "\r\033[Kranks=%d  %ld/%ld cases  %ld failed", nranks, done, total, fails);
  cf_progress_shown = 1;
}

void cf_progress_end(void) {
  if (cf_progress_shown && isatty(2)) fprintf(stderr, "\r\033[K");
  cf_progress_shown = 0;
}

static const char *cf_status_word(cf_status_t s) {
  switch (s) {
  case CF_PASS: return "pass";
  case CF_FAIL: return "fail";
  case CF_SKIP: return "skip";
  default: return "notrun";
  }
}

const char *cf_launcher_name(cf_launcher_t l) {
  static const char *names[] = {"thread", "process", "mpi"};
  return (l >= 0 && l <= CF_LAUNCH_MPI) ? names[l] : "unknown";
}

/* Matrix rows in a fixed order. */
static const char *cf_rows[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
                                "alltoall", "gather", "scatter", "barrier", "sendrecv",
                                "alltoallv", "allgatherv",
                                "onesided", "split", "streams", "errors"};
#define CF_NROWS ((int)(sizeof(cf_rows) / sizeof(cf_rows[0])))
#define CF_NCOLS (UL_DTYPE_COUNT + 1)

static int cf_row_index(const char *row) {
  for (int i = 0; i < CF_NROWS; i++)
    if (!strcmp(cf_rows[i], row)) return i;
  return CF_NROWS - 1;
}
static int cf_col_index(const cf_inst_t *in) {
  return (in->dtype >= 0 && in->dtype < UL_DTYPE_COUNT) ? in->dtype : UL_DTYPE_COUNT;
}

typedef struct cf_tally {
  long n[CF_NROWS][CF_NCOLS][4]; /* pass, fail, skip, notrun */
  long total[4];
  double seconds;
} cf_tally_t;

static int cf_slot(cf_status_t s) {
  return s == CF_PASS ? 0 : s == CF_FAIL ? 1 : s == CF_SKIP ? 2 : 3;
}

static void cf_tally(cf_plan_t *plans, int nplans, cf_tally_t *t) {
  memset(t, 0, sizeof *t);
  for (int k = 0; k < nplans; k++)
    for (int i = 0; i < plans[k].ninst; i++) {
      cf_inst_t *in = &plans[k].insts[i];
      if (!in->selected) continue;
      int s = cf_slot(plans[k].res[i].status);
      t->n[cf_row_index(in->row)][cf_col_index(in)][s]++;
      t->total[s]++;
      t->seconds += plans[k].res[i].ms / 1000.0;
    }
}

void cf_report_text(const cf_opts_t *o, const ul_backend_info_t *info, cf_plan_t *plans,
                    int nplans) {
  cf_tally_t t;
  cf_tally(plans, nplans, &t);
  printf("unilink-conformance %s: backend %s (%s%s%s), launcher %s, ranks", ul_version_string(),
         info->name ? info->name : o->backend, info->origin[0] ? info->origin : "?",
         info->version[0] ? ", " : "", info->version, cf_launcher_name(o->launcher));
  for (int k = 0; k < nplans; k++) printf("%s%d", k ? "," : " ", plans[k].nranks);
  printf(", seed %llu%s%s\n", (unsigned long long)o->seed, o->quick ? ", quick" : "",
         o->strict ? ", strict" : "");
  if (o->verbose)
    for (int k = 0; k < nplans; k++)
      for (int i = 0; i < plans[k].ninst; i++) {
        cf_inst_t *in = &plans[k].insts[i];
        if (!in->selected) continue;
        cf_result_t *r = &plans[k].res[i];
        printf("  %-6s %s%s%s\n", cf_status_word(r->status), in->name, r->msg[0] ? "  " : "",
               r->msg);
      }
  /* Matrix: only the columns that have cases. */
  int usecol[CF_NCOLS] = {0};
  for (int r = 0; r < CF_NROWS; r++)
    for (int c = 0; c < CF_NCOLS; c++)
      for (int s = 0; s < 4; s++) usecol[c] |= t.n[r][c][s] != 0;
  printf("\n%-15s", "pass/fail/skip");
  for (int c = 0; c < CF_NCOLS; c++)
    if (usecol[c]) printf(" %11s", c < UL_DTYPE_COUNT ? cf_dtype_name(c) : "-");
  printf("\n");
  for (int r = 0; r < CF_NROWS; r++) {
    long any = 0;
    for (int c = 0; c < CF_NCOLS; c++)
      for (int s = 0; s < 4; s++) any += t.n[r][c][s];
    if (!any) continue;
    printf("%-15s", cf_rows[r]);
    for (int c = 0; c < CF_NCOLS; c++) {
      if (!usecol[c]) continue;
      long *v = t.n[r][c];
      if (!v[0] && !v[1] && !v[2] && !v[3]) {
        printf(" %11s", ".");
        continue;
      }
      char cell[32];
      snprintf(cell, sizeof cell, "%ld/%ld/%ld", v[0], v[1] + v[3], v[2]);
      printf(" %11s", cell);
    }
    printf("\n");
  }
  /* World-level problems, then failures in full. */
  for (int k = 0; k < nplans; k++)
    if (plans[k].world_error[0])
      printf("\nERROR ranks=%d: %s\n", plans[k].nranks, plans[k].world_error);
  if (t.total[1]) {
    printf("\nFAILURES (%ld):\n", t.total[1]);
    for (int k = 0; k < nplans; k++)
      for (int i = 0; i < plans[k].ninst; i++) {
        cf_inst_t *in = &plans[k].insts[i];
        cf_result_t *r = &plans[k].res[i];
        if (in->selected && r->status == CF_FAIL) printf("FAIL %s\n     %s\n", in->name, r->msg);
      }
  }
  if (t.total[3]) {
    printf("\nNOT RUN (%ld):", t.total[3]);
    int shown = 0;
    for (int k = 0; k < nplans; k++)
      for (int i = 0; i < plans[k].ninst && shown < 20; i++)
        if (plans[k].insts[i].selected && plans[k].res[i].status == CF_NONE) {
          printf("%s %s", shown ? "," : "", plans[k].insts[i].name);
          shown++;
        }
    printf("%s\n", t.total[3] > shown ? ", ..." : "");
  }
  /* Skips grouped by reason. */
  if (t.total[2]) {
    enum { MAXR = 32 };
    const char *reason[MAXR];
    long cnt[MAXR];
    int nr = 0;
    long other = 0;
    for (int k = 0; k < nplans; k++)
      for (int i = 0; i < plans[k].ninst; i++) {
        if (!plans[k].insts[i].selected || plans[k].res[i].status != CF_SKIP) continue;
        const char *m = plans[k].res[i].msg;
        int j;
        for (j = 0; j < nr; j++)
          if (!strcmp(reason[j], m)) break;
        if (j < nr) cnt[j]++;
        else if (nr < MAXR) { reason[nr] = m; cnt[nr++] = 1; }
        else other++;
      }
    printf("\nSKIPPED (%ld), by reason:\n", t.total[2]);
    for (int j = 0; j < nr; j++) printf("  %6ld  %s\n", cnt[j], reason[j]);
    if (other) printf("  %6ld  (other reasons)\n", other);
  }
  printf("\nsummary: %ld cases: %ld passed, %ld failed, %ld skipped, %ld not run\n",
         t.total[0] + t.total[1] + t.total[2] + t.total[3], t.total[0], t.total[1], t.total[2],
         t.total[3]);
}

/* ------------------------------------------------------------- JSON */
static void cf_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p == '\n') fputs("\\n", f);
    else if (*p == '\t') fputs("\\t", f);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else if (*p >= 0x80) fputc('?', f); /* keep the file valid UTF-8 */
    else fputc(*p, f);
  }
  fputc('"', f);
}

int cf_report_json(const char *path, const cf_opts_t *o, const ul_backend_info_t *info,
                   cf_plan_t *plans, int nplans) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  cf_tally_t t;
  cf_tally(plans, nplans, &t);
  fprintf(f, "{\n  \"tool\": \"unilink-conformance\",\n  \"version\": ");
  cf_json_str(f, ul_version_string());
  fprintf(f, ",\n  \"backend\": ");
  cf_json_str(f, info->name ? info->name : o->backend);
  fprintf(f, ",\n  \"backend_origin\": ");
  cf_json_str(f, info->origin);
  fprintf(f, ",\n  \"launcher\": \"%s\",\n  \"seed\": %llu,\n  \"quick\": %s,\n  \"strict\": %s,\n",
          cf_launcher_name(o->launcher), (unsigned long long)o->seed, o->quick ? "true" : "false",
          o->strict ? "true" : "false");
  fprintf(f, "  \"ranks\": [");
  for (int k = 0; k < nplans; k++) fprintf(f, "%s%d", k ? ", " : "", plans[k].nranks);
  fprintf(f, "],\n  \"summary\": {\"total\": %ld, \"pass\": %ld, \"fail\": %ld, \"skip\": %ld, "
          "\"notrun\": %ld},\n",
          t.total[0] + t.total[1] + t.total[2] + t.total[3], t.total[0], t.total[1], t.total[2],
          t.total[3]);
  fprintf(f, "  \"errors\": [");
  int ne = 0;
  for (int k = 0; k < nplans; k++)
    if (plans[k].world_error[0]) {
      fprintf(f, "%s{\"ranks\": %d, \"message\": ", ne++ ? ", " : "", plans[k].nranks);
      cf_json_str(f, plans[k].world_error);
      fprintf(f, "}");
    }
  fprintf(f, "],\n  \"matrix\": {");
  int firstrow = 1;
  for (int r = 0; r < CF_NROWS; r++) {
    int firstcol = 1;
    for (int c = 0; c < CF_NCOLS; c++) {
      long *v = t.n[r][c];
      if (!v[0] && !v[1] && !v[2] && !v[3]) continue;
      if (firstcol) {
        fprintf(f, "%s\n    \"%s\": {", firstrow ? "" : ",", cf_rows[r]);
        firstrow = 0;
      }
      fprintf(f, "%s\"%s\": {\"pass\": %ld, \"fail\": %ld, \"skip\": %ld, \"notrun\": %ld}",
              firstcol ? "" : ", ", c < UL_DTYPE_COUNT ? cf_dtype_name(c) : "-", v[0], v[1],
              v[2], v[3]);
      firstcol = 0;
    }
    if (!firstcol) fprintf(f, "}");
  }
  fprintf(f, "\n  },\n  \"cases\": [");
  int first = 1;
  for (int k = 0; k < nplans; k++)
    for (int i = 0; i < plans[k].ninst; i++) {
      cf_inst_t *in = &plans[k].insts[i];
      cf_result_t *r = &plans[k].res[i];
      if (!in->selected) continue;
      fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
      first = 0;
      cf_json_str(f, in->name);
      fprintf(f, ", \"family\": ");
      cf_json_str(f, in->c->family);
      fprintf(f, ", \"collective\": ");
      cf_json_str(f, in->row);
      fprintf(f, ", \"dtype\": ");
      cf_json_str(f, in->dtype >= 0 ? cf_dtype_name(in->dtype) : "-");
      fprintf(f, ", \"op\": ");
      cf_json_str(f, in->op >= 0 ? cf_op_name(in->op) : "-");
      fprintf(f, ", \"ranks\": %d, \"status\": \"%s\", \"seconds\": %.3f, \"message\": ",
              in->nranks, cf_status_word(r->status), r->ms / 1000.0);
      cf_json_str(f, r->msg);
      fprintf(f, "}");
    }
  fprintf(f, "\n  ]\n}\n");
  return fclose(f) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------- JUnit */
static void cf_xml_str(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
    switch (*p) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&apos;", f); break;
    default:
      /* XML 1.0 forbids most control characters; keep the file valid UTF-8 too */
      if ((*p < 0x20 && *p != '\n' && *p != '\t' && *p != '\r') || *p >= 0x80) fputc('?', f);
      else fputc(*p, f);
    }
  }
}

/* The run's settings, repeated in every suite: junit-10 has properties per suite only, and
 * a merged file must still say which seed, launcher and backend produced each suite. */
static void cf_junit_properties(FILE *f, const cf_opts_t *o, const char *bname,
                                const char *origin) {
  char seed[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
  const char *kv[][2] = {{"seed", seed},
                         {"launcher", cf_launcher_name(o->launcher)},
                         {"backend", bname},
                         {"backend_origin", origin ? origin : ""},
                         {"version", ul_version_string()},
                         {"quick", o->quick ? "true" : "false"},
                         {"strict", o->strict ? "true" : "false"}};
  fprintf(f, "    <properties>\n");
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
    fprintf(f, "      <property name=\"%s\" value=\"", kv[i][0]);
    cf_xml_str(f, kv[i][1]);
    fprintf(f, "\"/>\n");
  }
  fprintf(f, "    </properties>\n");
}

/* "conformance.<backend>.<launcher>.<row>": thread and process runs of one backend stay
 * apart when CI merges their files. */
static void cf_junit_suite_id(FILE *f, const char *bname, const cf_opts_t *o, const char *row) {
  cf_xml_str(f, bname);
  fprintf(f, ".%s.%s", cf_launcher_name(o->launcher), row);
}

int cf_report_junit(const char *path, const cf_opts_t *o, const ul_backend_info_t *info,
                    cf_plan_t *plans, int nplans) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  cf_tally_t t;
  cf_tally(plans, nplans, &t);
  const char *bname = info->name ? info->name : o->backend;
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  /* junit-10 allows no skipped count on <testsuites>; each <testsuite> carries its own. */
  fprintf(f, "<testsuites name=\"unilink-conformance\" tests=\"%ld\" failures=\"%ld\" "
          "errors=\"%ld\" time=\"%.3f\">\n",
          t.total[0] + t.total[1] + t.total[2] + t.total[3], t.total[1], t.total[3], t.seconds);
  for (int row = 0; row < CF_NROWS; row++) {
    long n[4] = {0};
    double secs = 0;
    for (int c = 0; c < CF_NCOLS; c++)
      for (int s = 0; s < 4; s++) n[s] += t.n[row][c][s];
    if (!n[0] && !n[1] && !n[2] && !n[3]) continue;
    for (int k = 0; k < nplans; k++)
      for (int i = 0; i < plans[k].ninst; i++)
        if (plans[k].insts[i].selected && cf_row_index(plans[k].insts[i].row) == row)
          secs += plans[k].res[i].ms / 1000.0;
    fprintf(f, "  <testsuite name=\"conformance.");
    cf_junit_suite_id(f, bname, o, cf_rows[row]);
    fprintf(f, "\" tests=\"%ld\" failures=\"%ld\" errors=\"%ld\" skipped=\"%ld\" "
            "time=\"%.3f\">\n", n[0] + n[1] + n[2] + n[3], n[1], n[3], n[2], secs);
    cf_junit_properties(f, o, bname, info->origin);
    for (int k = 0; k < nplans; k++)
      for (int i = 0; i < plans[k].ninst; i++) {
        cf_inst_t *in = &plans[k].insts[i];
        cf_result_t *r = &plans[k].res[i];
        if (!in->selected || cf_row_index(in->row) != row) continue;
        fprintf(f, "    <testcase classname=\"");
        cf_junit_suite_id(f, bname, o, cf_rows[row]);
        fprintf(f, "\" name=\"");
        cf_xml_str(f, in->name);
        fprintf(f, "\" time=\"%.3f\"", r->ms / 1000.0);
        if (r->status == CF_PASS) {
          fprintf(f, "/>\n");
          continue;
        }
        const char *tag = r->status == CF_FAIL ? "failure" : r->status == CF_SKIP ? "skipped"
                                                                                : "error";
        fprintf(f, ">\n      <%s message=\"", tag);
        cf_xml_str(f, r->status == CF_NONE ? "not run" : r->msg);
        if (r->status == CF_SKIP) {
          fprintf(f, "\"/>\n    </testcase>\n");
          continue;
        }
        fprintf(f, "\" type=\"%s\">", r->status == CF_FAIL ? "wrong-result" : "not-run");
        cf_xml_str(f, r->status == CF_NONE ? "not run: the run was aborted before this case"
                                           : r->msg);
        fprintf(f, "</%s>\n    </testcase>\n", tag);
      }
    fprintf(f, "  </testsuite>\n");
  }
  fprintf(f, "</testsuites>\n");
  return fclose(f) == 0 ? 0 : -1;
}

/* A backend that cannot run still leaves a report: CI then shows one error, not a missing
 * file (which most JUnit consumers treat as "no tests", i.e. green). */
int cf_report_junit_unavailable(const char *path, const cf_opts_t *o, const char *why) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const char *bname = o->backend ? o->backend : "auto";
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<testsuites name=\"unilink-conformance\" tests=\"1\" failures=\"0\" errors=\"1\" "
             "time=\"0.000\">\n  <testsuite name=\"conformance.");
  cf_junit_suite_id(f, bname, o, "backend");
  fprintf(f, "\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"0.000\">\n");
  cf_junit_properties(f, o, bname, "");
  fprintf(f, "    <testcase classname=\"");
  cf_junit_suite_id(f, bname, o, "backend");
  fprintf(f, "\" name=\"available\" time=\"0.000\">\n      <error message=\"");
  cf_xml_str(f, why);
  fprintf(f, "\" type=\"backend-unavailable\">backend ");
  cf_xml_str(f, bname);
  fprintf(f, " is unavailable: ");
  cf_xml_str(f, why);
  fprintf(f, "</error>\n    </testcase>\n  </testsuite>\n</testsuites>\n");
  return fclose(f) == 0 ? 0 : -1;
}
