/* Logging: level and subsystem parsing, line format, file expansion, errno, threads. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ul_core.h"

static char log_path[256];

/* Point the log at a fresh file of this process and re-read the environment. */
static void log_to_file(const char *level, const char *subsys) {
  snprintf(log_path, sizeof log_path, "/tmp/unilink-test-log-%ld.txt", (long)getpid());
  unlink(log_path);
  setenv("UNILINK_DEBUG_FILE", "/tmp/unilink-test-log-%p.txt", 1);
  if (level) setenv("UNILINK_DEBUG", level, 1); else unsetenv("UNILINK_DEBUG");
  if (subsys) setenv("UNILINK_DEBUG_SUBSYS", subsys, 1); else unsetenv("UNILINK_DEBUG_SUBSYS");
  ul__log_reset();
}

static char *read_log(void) {
  FILE *f = fopen(log_path, "r");
  if (f == NULL) return strdup("");
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return strdup(buf);
}

static int count_lines_with(const char *text, const char *needle) {
  int n = 0;
  const char *p = text;
  while ((p = strstr(p, needle)) != NULL) {
    n++;
    p += strlen(needle);
  }
  return n;
}

static void fini_log(void) { unlink(log_path); }

TestSuite(log, .fini = fini_log);

Test(log, line_format_and_pid_expansion, .timeout = 10) {
  log_to_file("info", NULL);
  ul__log(UL_LOG_INFO, "INIT", "hello %d", 5);
  char *text = read_log();
  char host[64];
  gethostname(host, sizeof host);
  host[sizeof host - 1] = '\0';
  char *dot = strchr(host, '.');
  if (dot) *dot = '\0';
  char prefix[128];
  snprintf(prefix, sizeof prefix, "%s:%ld:", host, (long)getpid());
  cr_assert_eq(strncmp(text, prefix, strlen(prefix)), 0, "line: %s", text);
  long tid = 0;
  char rest[128] = "";
  cr_assert_eq(sscanf(text + strlen(prefix), "%ld %127[^\n]", &tid, rest), 2, "line: %s", text);
  cr_assert_gt(tid, 0);
  cr_assert_str_eq(rest, "unilink INFO INIT hello 5");
  cr_assert_eq(count_lines_with(text, "\n"), 1);
  free(text);
}

Test(log, host_expansion, .timeout = 10) {
  char host[64];
  gethostname(host, sizeof host);
  host[sizeof host - 1] = '\0';
  char *dot = strchr(host, '.');
  if (dot) *dot = '\0';
  setenv("UNILINK_DEBUG_FILE", "/tmp/unilink-test-log-%h-%p-100%%.txt", 1);
  setenv("UNILINK_DEBUG", "warn", 1);
  ul__log_reset();
  UL_WARN("INIT", "host file");
  snprintf(log_path, sizeof log_path, "/tmp/unilink-test-log-%s-%ld-100%%.txt", host,
           (long)getpid());
  char *text = read_log();
  cr_assert_not_null(strstr(text, "unilink WARN INIT host file"), "%s: %s", log_path, text);
  free(text);
}

Test(log, default_level_is_warn, .timeout = 10) {
  log_to_file(NULL, NULL);
  cr_assert_eq(ul__log_enabled(UL_LOG_WARN, "INIT"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "INIT"), 0);
  cr_assert_eq(ul__log_enabled(UL_LOG_TRACE, "INIT"), 0);
  UL_INFO("INIT", "not shown");
  UL_WARN("COLL", "shown");
  char *text = read_log();
  cr_assert_null(strstr(text, "not shown"));
  cr_assert_not_null(strstr(text, "WARN COLL shown"));
  free(text);
}

Test(log, levels, .timeout = 10) {
  log_to_file("TRACE", NULL); /* case-insensitive */
  cr_assert_eq(ul__log_enabled(UL_LOG_TRACE, "COLL"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_NONE, "COLL"), 0);
  log_to_file("info", NULL);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "COLL"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_TRACE, "COLL"), 0);
  log_to_file("none", NULL);
  cr_assert_eq(ul__log_enabled(UL_LOG_WARN, "COLL"), 0);
  UL_WARN("COLL", "silenced");
  char *text = read_log();
  cr_assert_str_eq(text, "");
  free(text);
}

Test(log, malformed_level_warns_once_and_falls_back, .timeout = 10) {
  log_to_file("loud", NULL);
  cr_assert_eq(ul__log_enabled(UL_LOG_WARN, "INIT"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "INIT"), 0);
  for (int i = 0; i < 5; i++) UL_INFO("INIT", "x");
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "INIT"), 0);
  char *text = read_log();
  cr_assert_eq(count_lines_with(text, "\"loud\""), 1, "%s", text);
  cr_assert_not_null(strstr(text, "WARN ENV UNILINK_DEBUG=\"loud\""), "%s", text);
  cr_assert_eq(count_lines_with(text, "\n"), 1, "%s", text);
  free(text);
}

Test(log, subsystem_include_list, .timeout = 10) {
  log_to_file("info", " init , COLL ");
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "INIT"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "COLL"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "P2P"), 0);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "host"), 0);
  /* Warnings are never filtered by subsystem. */
  cr_assert_eq(ul__log_enabled(UL_LOG_WARN, "P2P"), 1);
}

Test(log, subsystem_negation, .timeout = 10) {
  log_to_file("info", "^P2P,MEM");
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "P2P"), 0);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "MEM"), 0);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "INIT"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "host"), 1);
  log_to_file("info", "^ALL");
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "INIT"), 0);
  cr_assert_eq(ul__log_enabled(UL_LOG_WARN, "INIT"), 1);
}

Test(log, subsystem_backend_names, .timeout = 10) {
  log_to_file("info", "host");
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "host"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "sim"), 0);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "INIT"), 0);
  /* BACKEND selects every backend's own subsystem, but no other core subsystem. */
  log_to_file("info", "BACKEND");
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "host"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "nccl"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "BACKEND"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "COLL"), 0);
  log_to_file("info", "ALL");
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "COLL"), 1);
  cr_assert_eq(ul__log_enabled(UL_LOG_INFO, "anything"), 1);
}

Test(log, backend_entry_points, .timeout = 10) {
  log_to_file("info", "sim");
  cr_assert_eq(ul_backend_log_enabled(UL_LOG_INFO, "sim"), 1);
  cr_assert_eq(ul_backend_log_enabled(UL_LOG_INFO, "host"), 0);
  ul_backend_log(UL_LOG_INFO, "sim", "modeled %s", "nvlink4");
  ul_backend_log(UL_LOG_INFO, "host", "filtered");
  char *text = read_log();
  cr_assert_not_null(strstr(text, "unilink INFO sim modeled nvlink4\n"), "%s", text);
  cr_assert_null(strstr(text, "filtered"));
  free(text);
}

Test(log, errno_is_preserved, .timeout = 10) {
  log_to_file("trace", NULL);
  errno = EINTR;
  ul__log(UL_LOG_WARN, "INIT", "w");
  cr_assert_eq(errno, EINTR);
  errno = ENOSPC;
  ul_backend_log(UL_LOG_TRACE, "host", "t");
  cr_assert_eq(errno, ENOSPC);
  errno = EBADF;
  (void)ul_backend_log_enabled(UL_LOG_INFO, "x");
  ul__log_reset();
  cr_assert_eq(errno, EBADF);
}

Test(log, unwritable_file_falls_back_to_stderr, .timeout = 10) {
  cr_redirect_stderr();
  setenv("UNILINK_DEBUG_FILE", "/nonexistent-dir-unilink/log.txt", 1);
  setenv("UNILINK_DEBUG", "warn", 1);
  ul__log_reset();
  UL_WARN("INIT", "still logged");
  fflush(stderr);
  cr_assert_stderr_neq_str("");
}

#define NTHREADS 4
#define NLINES 200

static void *log_many(void *arg) {
  long id = (long)arg;
  for (int i = 0; i < NLINES; i++) UL_INFO("COLL", "thread %ld line %d end", id, i);
  return NULL;
}

Test(log, concurrent_lines_stay_whole, .timeout = 30) {
  log_to_file("info", "COLL");
  pthread_t t[NTHREADS];
  for (long i = 0; i < NTHREADS; i++) pthread_create(&t[i], NULL, log_many, (void *)i);
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  char *text = read_log();
  cr_assert_eq(count_lines_with(text, "\n"), NTHREADS * NLINES);
  cr_assert_eq(count_lines_with(text, " unilink INFO COLL thread "), NTHREADS * NLINES);
  cr_assert_eq(count_lines_with(text, " end\n"), NTHREADS * NLINES);
  free(text);
}
