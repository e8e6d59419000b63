/* Helpers of the process-rank reliability tests (test_reliability*.c): timing, fork
 * bookkeeping, the host id's segment prefix, and "does this sentence name rank r". */
#ifndef UL_TEST_RELIABILITY_UTIL_H
#define UL_TEST_RELIABILITY_UTIL_H
/* UL_RELIABILITY_NO_CRITERION: plain programs (the mpi campaign) get the helpers that do
 * not assert. */
#ifndef UL_RELIABILITY_NO_CRITERION
#include <criterion/criterion.h>
#endif
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <unilink/unilink.h>

/* Timeout of the communicators that are meant to time out: long enough that a loaded
 * 2-core machine still reaches every rank's call in time, short enough for CI. */
#define SHORT_MS 800
/* Allowed lateness of a timeout: the bound is timeout + 20 %. */
#define LATE_MS (SHORT_MS / 5)
#define LONG_MS 20000

static inline double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

#ifndef UL_RELIABILITY_NO_CRITERION
static inline ul_unique_id_t host_id(void) {
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("host", &id), UL_OK, "ul_get_unique_id: %s", ul_last_error());
  return id;
}

/* Layout knowledge the security and cleanup checks need: the core header of a unique
 * id is 64 bytes, then the host payload: "ulh1", a 16-byte token, the uid (4 bytes),
 * an 8-byte tag that names the job's /dev/shm segments ("unilink-<taghex>..."). The
 * magic check makes a layout change fail these tests instead of passing vacuously. */
#define ID_HOST_OFF 64
#define ID_TOKEN_OFF (ID_HOST_OFF + 4)
#define ID_TAG_OFF (ID_HOST_OFF + 24)

static inline void job_prefix(const ul_unique_id_t *id, char *out) {
  cr_assert_eq(memcmp(id->internal + ID_HOST_OFF, "ulh1", 4), 0,
               "host unique id layout changed: update ID_*_OFF in this test");
  int n = sprintf(out, "unilink-");
  for (int i = 0; i < 8; i++)
    n += sprintf(out + n, "%02x", (unsigned char)id->internal[ID_TAG_OFF + i]);
}
#endif

/* Names of /dev/shm entries of one job, joined by spaces; returns how many. */
static inline int job_segments(const char *prefix, char *list, size_t len) {
  DIR *d = opendir("/dev/shm");
  int n = 0;
  if (list && len) list[0] = 0;
  if (!d) return 0;
  struct dirent *de;
  size_t used = 0;
  while ((de = readdir(d)) != NULL)
    if (strncmp(de->d_name, prefix, strlen(prefix)) == 0) {
      n++;
      if (list && used + strlen(de->d_name) + 2 < len)
        used += (size_t)snprintf(list + used, len - used, "%s ", de->d_name);
    }
  closedir(d);
  return n;
}

/* Does the sentence name rank r: "rank r" as a word, or r inside the list that follows
 * "had not arrived:" (the generic barrier lists every absent rank)? */
static inline int names_rank(const char *msg, int r) {
  char want[32];
  snprintf(want, sizeof want, "rank %d", r);
  for (const char *p = strstr(msg, want); p; p = strstr(p + 1, want)) {
    char next = p[strlen(want)];
    if (!(next >= '0' && next <= '9')) return 1;
  }
  const char *l = strstr(msg, "had not arrived:");
  if (!l) return 0;
  l += strlen("had not arrived:");
  while (*l == ' ' || (*l >= 'a' && *l <= 'z')) l++; /* optional "rank"/"ranks" word */
  while (*l >= '0' && *l <= '9') {
    char *end;
    long v = strtol(l, &end, 10);
    if (v == r) return 1;
    l = end;
    while (*l == ',' || *l == ' ') l++;
  }
  return 0;
}

static inline ul_config_t cfg_ms(int timeout_ms) {
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms;
  return cfg;
}

/* Child-side check: print the sentence and leave with the step number. */
#define CHILD_CHECK(step, cond, ...)                                                             \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "step %d: ", step);                                                        \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                                         \
      _exit(step);                                                                               \
    }                                                                                            \
  } while (0)

static inline int wait_child(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

#endif
