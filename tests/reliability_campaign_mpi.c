/* SIGKILL campaign under mpirun (issue 16): randomized from a printed seed, bounded (30
 * trials), on the mpi backend or (--backend host) on host process ranks bootstrapped
 * through MPI (ul_bootstrap_mpi("host")), where the mpi plugin's exit handler must not
 * wait in MPI_Finalize for the dead rank either. Each trial starts `mpirun -np 3|4` of this program; every rank
 * loops over one collective (allreduce, broadcast, allgather, alltoall or barrier; small
 * or 1 MiB messages) and one of them SIGKILLs itself from a second thread at a random
 * moment, usually inside an MPI call. Every survivor must return UL_ERR_PEER_LOST naming
 * the killed rank within the communicator's timeout, shrink to the survivors and finish one
 * exact allreduce there (ul_comm_shrink), destroy its communicators and exit
 * (mpirun must end), no process of the trial may be left, and no /dev/shm entry made by
 * the trial may remain (unilink's segments and the MPI's own shared-memory files).
 *
 *   reliability_campaign_mpi campaign [--backend mpi|host] IMPL LAUNCHER [LAUNCHER FLAGS...]
 *     IMPL: openmpi or mpich (which launcher flags keep the survivors alive).
 *     UNILINK_TEST_SEED replays a campaign; UNILINK_TEST_TRIALS changes the count.
 *   reliability_campaign_mpi rank DIR VICTIM KIND COUNT DELAY_MS BACKEND   (under mpirun)
 *
 * Exit: 0 all trials passed, 1 a trial failed, 77 skipped (the reason is printed). */
#define _GNU_SOURCE
#define UL_RELIABILITY_NO_CRITERION
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include "reliability_util.h"

#define TRIALS 30
#define TIMEOUT_MS 3000     /* communicator timeout: detection must come well before it */
#define LOOP_LIMIT_MS 6000  /* a survivor that never sees the loss stops here and fails */
#define TRIAL_WALL_MS 20000 /* an mpirun still running after this is a hang */

enum { C_ALLREDUCE, C_BROADCAST, C_ALLGATHER, C_ALLTOALL, C_BARRIER, C_KINDS };
static const char *const coll_name[C_KINDS] = {"allreduce", "broadcast", "allgather",
                                               "alltoall", "barrier"};

static uint64_t rng_next(uint64_t *s) { /* splitmix64: reproducible from the seed */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* ------------------------------------------------------------ rank side */
static ul_result_t one_call(int kind, float *s, float *r, size_t count, ul_comm_t c) {
  switch (kind) {
  case C_ALLREDUCE: return ul_allreduce(s, r, count, UL_FP32, UL_SUM, c, NULL);
  case C_BROADCAST: return ul_broadcast(s, r, count, UL_FP32, 0, c, NULL);
  case C_ALLGATHER: return ul_allgather(s, r, count, UL_FP32, c, NULL);
  case C_ALLTOALL: return ul_alltoall(s, r, count, UL_FP32, c, NULL);
  default: return ul_barrier(c, NULL);
  }
}

static char g_dir[256];
static int g_delay_ms;

static int write_file(const char *name, const char *text) {
  char path[320];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

/* The victim: sleep, note the time, die. */
static void *killer(void *arg) {
  (void)arg;
  sleep_ms(g_delay_ms);
  char line[64];
  snprintf(line, sizeof line, "%.3f\n", now_ms());
  write_file("killed", line);
  kill(getpid(), SIGKILL);
  return NULL;
}

/* "unilink-<tag>": the prefix of a host job's /dev/shm segments, from its unique id
 * (core header of 64 bytes, then "ulh1", a 16-byte token, the uid, the 8-byte tag). */
static int host_job_prefix(const ul_unique_id_t *id, char *out, size_t len) {
  if (memcmp(id->internal + 64, "ulh1", 4) != 0) return -1; /* layout changed */
  int n = snprintf(out, len, "unilink-");
  for (int i = 0; i < 8 && n > 0 && (size_t)n < len; i++)
    n += snprintf(out + n, len - (size_t)n, "%02x", (unsigned char)id->internal[64 + 24 + i]);
  return 0;
}

static int rank_main(int argc, char **argv) {
  if (argc != 8) return 2;
  const char *backend = argv[7];
  snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
  int victim = atoi(argv[3]), kind = atoi(argv[4]);
  size_t count = (size_t)strtoull(argv[5], NULL, 10);
  g_delay_ms = atoi(argv[6]);
  ul_unique_id_t id;
  int rank = -1, n = 0;
  ul_result_t rc = ul_bootstrap_mpi(backend, &id, &rank, &n);
  if (rc != UL_OK) {
    fprintf(stderr, "ul_bootstrap_mpi: %s: %s\n", ul_result_name(rc), ul_last_error());
    return 2;
  }
  char prefix[64];
  if (!strcmp(backend, "host") && rank == 0) {
    if (host_job_prefix(&id, prefix, sizeof prefix) != 0) {
      fprintf(stderr, "host unique id layout changed: update host_job_prefix\n");
      return 2;
    }
    write_file("prefix", prefix);
  }
  ul_comm_t c = NULL;
  ul_config_t cfg = cfg_ms(TIMEOUT_MS);
  rc = ul_comm_init_rank(&c, &cfg, n, id, rank);
  if (rc != UL_OK) {
    fprintf(stderr, "rank %d init: %s: %s\n", rank, ul_result_name(rc), ul_last_error());
    return 2;
  }
  size_t elems = count * (size_t)n;
  float *s = malloc(elems * sizeof *s), *r = malloc(elems * sizeof *r);
  if (!s || !r) return 2;
  for (size_t k = 0; k < elems; k++) s[k] = (float)(k % 7);
  /* Everyone is in before the clock starts, so the kill lands inside the loop. */
  rc = ul_barrier(c, NULL);
  pthread_t th;
  if (rc == UL_OK && rank == victim && pthread_create(&th, NULL, killer, NULL) != 0) return 2;
  double start = now_ms();
  long iters = 0;
  while (rc == UL_OK && now_ms() - start < LOOP_LIMIT_MS) {
    rc = one_call(kind, s, r, count, c);
    iters++;
  }
  double returned = now_ms();
  char line[1024];
  snprintf(line, sizeof line, "%d %s %.3f %ld\n%.900s\n", (int)getpid(), ul_result_name(rc),
           returned, iters, ul_comm_last_error(c));
  char name[32];
  snprintf(name, sizeof name, "r%d", rank);
  write_file(name, line);
  /* The survivors finish the job on a shrunk communicator: exactly the other ranks,
   * old-rank order kept, an exact integer sum of who took part. */
  char shrunk[256] = "shrink not tried";
  if (rc == UL_ERR_PEER_LOST) {
    ul_comm_t sc = NULL;
    ul_result_t src = ul_comm_shrink(c, &sc, NULL);
    int nr = -1, nn = 0;
    int32_t bit = 1 << rank, sum = 0, want = 0;
    for (int q = 0; q < n; q++)
      if (q != victim) want += 1 << q;
    if (src == UL_OK) {
      ul_comm_rank(sc, &nr);
      ul_comm_size(sc, &nn);
      src = ul_allreduce(&bit, &sum, 1, UL_INT32, UL_SUM, sc, NULL);
    }
    int want_rank = rank < victim ? rank : rank - 1;
    snprintf(shrunk, sizeof shrunk, "shrink=%s rank=%d/%d sum=%d want=%d/%d/%d %.120s",
             src == UL_OK && nn == n - 1 && nr == want_rank && sum == want ? "ok" : "bad", nr, nn,
             (int)sum, want_rank, n - 1, (int)want,
             src == UL_OK ? "" : (sc ? ul_comm_last_error(sc) : ul_comm_last_error(c)));
    if (sc) ul_comm_destroy(sc);
  }
  ul_result_t d = ul_comm_destroy(c);
  free(s);
  free(r);
  snprintf(name, sizeof name, "r%d.exit", rank);
  char exitline[320];
  snprintf(exitline, sizeof exitline, "%s %s\n", d == UL_OK ? "destroyed" : "destroy failed",
           shrunk);
  write_file(name, exitline);
  return rc == UL_ERR_PEER_LOST && names_rank(strchr(line, '\n') + 1, victim) ? 0 : 3;
}

/* ---------------------------------------------------------- driver side */
typedef struct trial {
  int n, victim, kind, delay_ms;
  size_t count; /* per rank block, elements */
} trial_t;

/* /dev/shm entries, newline separated, sorted as readdir gives them. */
static char *shm_list(void) {
  size_t cap = 4096, used = 0;
  char *out = malloc(cap);
  if (!out) return NULL;
  out[0] = 0;
  DIR *d = opendir("/dev/shm");
  if (!d) return out;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.') continue;
    size_t l = strlen(de->d_name);
    if (used + l + 2 > cap) {
      char *bigger = realloc(out, cap = 2 * cap + l);
      if (!bigger) break;
      out = bigger;
    }
    memcpy(out + used, de->d_name, l);
    used += l;
    out[used++] = '\n';
    out[used] = 0;
  }
  closedir(d);
  return out;
}

static int in_list(const char *list, const char *name) {
  size_t l = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p++)
    if ((p == list || p[-1] == '\n') && p[l] == '\n') return 1;
  return 0;
}

static int read_text(const char *dir, const char *name, char *buf, size_t len) {
  char path[320];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t got = read(fd, buf, len - 1);
  close(fd);
  if (got < 0) return -1;
  buf[got] = 0;
  return 0;
}

/* Does a running process map or hold open `path`? Then the file is a live job's (other
 * MPI jobs share /dev/shm on a CI machine), not one the trial left behind. */
static int file_in_use(const char *path) {
  DIR *d = opendir("/proc");
  if (!d) return 0;
  struct dirent *de;
  int used = 0;
  char name[300], line[1024];
  while (!used && (de = readdir(d)) != NULL) {
    if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
    snprintf(name, sizeof name, "/proc/%s/maps", de->d_name);
    FILE *f = fopen(name, "r");
    while (f && !used && fgets(line, sizeof line, f)) used = strstr(line, path) != NULL;
    if (f) fclose(f);
    snprintf(name, sizeof name, "/proc/%s/fd", de->d_name);
    DIR *fd = used ? NULL : opendir(name);
    struct dirent *fe;
    while (fd && !used && (fe = readdir(fd)) != NULL) {
      char link[600], target[400];
      snprintf(link, sizeof link, "%s/%s", name, fe->d_name);
      ssize_t n = readlink(link, target, sizeof target - 1);
      if (n > 0) {
        target[n] = 0;
        used = strcmp(target, path) == 0;
      }
    }
    if (fd) closedir(fd);
  }
  closedir(d);
  return used;
}

/* Occurrences of needle in the file dir/name (read up to 256 KiB). */
static int count_in_file(const char *dir, const char *name, const char *needle) {
  size_t cap = 256 * 1024;
  char *buf = malloc(cap);
  if (!buf || read_text(dir, name, buf, cap) != 0) {
    free(buf);
    return 0;
  }
  int n = 0;
  for (const char *p = buf; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  free(buf);
  return n;
}

static void rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *de;
    char path[600];
    while ((de = readdir(d)) != NULL)
      if (de->d_name[0] != '.') {
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
      }
    closedir(d);
  }
  rmdir(dir);
}

typedef struct stats {
  int passed, failed, hangs, leaks;
  double lat_max, lat_sum;
  int lat_n;
  double exit_max; /* kill to mpirun's end */
} stats_t;

/* One trial: 0 passed, 1 failed (why is printed). */
static int run_trial(int no, const trial_t *t, uint64_t seed, char **launcher, int nl,
                     const char *self, const char *backend, stats_t *st) {
  char dir[] = "/tmp/ul-mpikill-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char np[16], victim[16], kind[16], count[32], delay[16];
  snprintf(np, sizeof np, "%d", t->n);
  snprintf(victim, sizeof victim, "%d", t->victim);
  snprintf(kind, sizeof kind, "%d", t->kind);
  snprintf(count, sizeof count, "%zu", t->count);
  snprintf(delay, sizeof delay, "%d", t->delay_ms);
  char *argv[64];
  int a = 0;
  for (int i = 0; i < nl && a < 48; i++) argv[a++] = launcher[i];
  char *tail[] = {"-np", np,    (char *)self, "rank", dir,
                  victim, kind, count,        delay,  (char *)backend, NULL};
  for (int i = 0; tail[i]; i++) argv[a++] = tail[i];
  argv[a] = NULL;
  char *before = shm_list();
  double t0 = now_ms();
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0) {
    setpgid(0, 0);
    char log[320];
    snprintf(log, sizeof log, "%s/launcher.log", dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  setpgid(pid, pid);
  int status = 0, hang = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (now_ms() - t0 > TRIAL_WALL_MS) {
      hang = 1;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    sleep_ms(5);
  }
  double ended = now_ms();
  char why[2048] = "", text[2048];
  size_t wl = 0;
#define WHY(...) (wl += (size_t)snprintf(why + wl, wl < sizeof why ? sizeof why - wl : 0, __VA_ARGS__))
  if (hang) WHY(" mpirun still running after %d ms (killed);", TRIAL_WALL_MS);
  double killed = 0;
  if (read_text(dir, "killed", text, sizeof text) == 0) killed = strtod(text, NULL);
  else WHY(" the victim never reached its kill;");
  pid_t pids[4] = {0};
  double worst = 0;
  for (int i = 0; i < t->n; i++) {
    if (i == t->victim) continue;
    char name[32];
    snprintf(name, sizeof name, "r%d", i);
    if (read_text(dir, name, text, sizeof text) != 0) {
      WHY(" rank %d wrote no report (killed by the launcher?);", i);
      continue;
    }
    int p = 0;
    char res[64] = "";
    double ret = 0;
    long iters = 0;
    sscanf(text, "%d %63s %lf %ld", &p, res, &ret, &iters);
    pids[i] = p;
    const char *msg = strchr(text, '\n');
    msg = msg ? msg + 1 : "";
    if (strcmp(res, "UL_ERR_PEER_LOST") != 0 || !names_rank(msg, t->victim))
      WHY(" rank %d returned %s after %ld calls: %.300s;", i, res, iters, msg);
    if (killed > 0) {
      double lat = ret - killed;
      if (lat > worst) worst = lat;
      if (lat > TIMEOUT_MS) WHY(" rank %d returned %.0f ms after the kill (bound %d);", i, lat, TIMEOUT_MS);
      st->lat_sum += lat;
      st->lat_n++;
      if (lat > st->lat_max) st->lat_max = lat;
    }
    snprintf(name, sizeof name, "r%d.exit", i);
    if (read_text(dir, name, text, sizeof text) != 0 || strncmp(text, "destroyed", 9) != 0)
      WHY(" rank %d did not destroy its communicator;", i);
    else if (!strstr(text, "shrink=ok"))
      WHY(" rank %d did not finish on the shrunk communicator: %.200s;", i, text + 10);
  }
  if (killed > 0 && ended - killed > st->exit_max) st->exit_max = ended - killed;
  /* MPI_Finalize would wait for the dead rank: every survivor's exit must skip it, on
   * the mpi backend and on host ranks that only bootstrapped through MPI alike (the mpi
   * plugin's exit handler says so on stderr, which mpirun forwards). */
  int survivors = 0;
  for (int i = 0; i < t->n; i++) survivors += pids[i] > 0;
  int skipped = count_in_file(dir, "launcher.log", "exiting without MPI_Finalize");
  if (!hang && skipped < survivors)
    WHY(" %d of %d survivors exited through MPI_Finalize (which may wait for the dead rank);",
        survivors - skipped, survivors);
  /* Nothing of the trial may run on: the launcher's group and every survivor are gone. */
  sleep_ms(20);
  if (kill(-pid, 0) == 0) {
    WHY(" processes of the trial outlived mpirun;");
    kill(-pid, SIGKILL);
  }
  for (int i = 0; i < t->n; i++)
    if (pids[i] > 0 && kill(pids[i], 0) == 0) WHY(" rank %d (pid %d) still runs;", i, (int)pids[i]);
  /* A host job's segments all start with its prefix: none may be left. */
  if (read_text(dir, "prefix", text, sizeof text) == 0 && text[0]) {
    char list[512];
    int left = job_segments(text, list, sizeof list);
    if (left) WHY(" %d segment(s) of the job left: %s;", left, list);
  } else if (!strcmp(backend, "host")) {
    WHY(" rank 0 wrote no job prefix;");
  }
  /* Every /dev/shm entry that appeared during the trial and is still there is a leak,
   * unless it belongs to another job running meanwhile: unilink segments name their
   * creator's pid, the MPI's files are checked by name after a second look. */
  char *after = shm_list();
  int leaks = 0;
  if (before && after) {
    for (char *p = after; *p;) {
      char *e = strchr(p, '\n');
      *e = 0;
      if (!in_list(before, p)) {
        int ours = 0;
        for (int i = 0; i < t->n; i++) {
          char pat[32];
          snprintf(pat, sizeof pat, "-%d-", (int)pids[i]);
          if (pids[i] > 0 && strstr(p, pat)) ours = 1;
        }
        /* Another job's file is mapped or open by its live processes (and disappears
         * when that job ends); ours are not: every process of the trial is gone. */
        if (!ours) {
          sleep_ms(200);
          char path[320];
          snprintf(path, sizeof path, "/dev/shm/%s", p);
          struct stat sb;
          ours = stat(path, &sb) == 0 && strstr(p, "unilink-") == NULL && !file_in_use(path);
        }
        if (ours) {
          leaks++;
          WHY(" /dev/shm/%s left;", p);
          char path[320];
          snprintf(path, sizeof path, "/dev/shm/%s", p);
          unlink(path);
        }
      }
      *e = '\n';
      p = e + 1;
    }
  }
  free(before);
  free(after);
  st->hangs += hang;
  st->leaks += leaks;
  int failed = why[0] != 0;
  if (failed) {
    fprintf(stderr,
            "trial %d (seed %llu): np %d, %s of %zu floats, rank %d killed %d ms into the loop:%s\n",
            no, (unsigned long long)seed, t->n, coll_name[t->kind], t->count, t->victim,
            t->delay_ms, why);
    if (read_text(dir, "launcher.log", text, sizeof text) == 0)
      fprintf(stderr, "  launcher output: %.1500s\n", text);
  } else {
    printf("trial %2d: np %d %-9s %7zu floats, rank %d killed at %2d ms: survivors "
           "returned UL_ERR_PEER_LOST naming it after <= %.1f ms and finished on the shrunk "
           "communicator; mpirun ended %.0f ms after "
           "the kill\n",
           no, t->n, coll_name[t->kind], t->count, t->victim, t->delay_ms, worst,
           ended - killed);
  }
  rm_dir(dir);
  return failed;
}

/* Probe rank (no MPI): rank 1 dies by SIGKILL, rank 0 notes that it outlived it. */
static int probe_main(int argc, char **argv) {
  if (argc != 3) return 2;
  const char *rv = getenv("OMPI_COMM_WORLD_RANK");
  if (!rv) rv = getenv("PMI_RANK");
  int rank = rv ? atoi(rv) : -1;
  snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
  if (rank == 1) kill(getpid(), SIGKILL);
  sleep_ms(1000);
  return rank == 0 ? (write_file("alive", "1\n") == 0 ? 0 : 2) : 0;
}

/* Does this launcher keep the other ranks running when one is killed by a signal? Hydra
 * in Debian's MPICH 4.0 does not, even with -disable-auto-cleanup (it does after a plain
 * exit): there the campaign has nothing to test. */
static int launcher_keeps_survivors(char **launcher, int nl, const char *self) {
  char dir[] = "/tmp/ul-mpiprobe-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char *argv[64];
  int a = 0;
  for (int i = 0; i < nl && a < 48; i++) argv[a++] = launcher[i];
  char *tail[] = {"-np", "2", (char *)self, "probe", dir, NULL};
  for (int i = 0; tail[i]; i++) argv[a++] = tail[i];
  argv[a] = NULL;
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  int status = 0;
  double t0 = now_ms();
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (now_ms() - t0 > TRIAL_WALL_MS) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    sleep_ms(10);
  }
  char text[16];
  int alive = read_text(dir, "alive", text, sizeof text) == 0;
  rm_dir(dir);
  return alive;
}

static int campaign_main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s campaign [--backend mpi|host] openmpi|mpich LAUNCHER [FLAGS...]\n",
            argv[0]);
    return 2;
  }
  const char *backend = "mpi";
  int first = 2;
  if (!strcmp(argv[2], "--backend")) {
    backend = argv[3];
    first = 4;
    if ((strcmp(backend, "mpi") && strcmp(backend, "host")) || argc < 6) {
      fprintf(stderr, "--backend takes mpi or host, then IMPL LAUNCHER\n");
      return 2;
    }
  }
  const char *impl = argv[first];
  char *launcher[48];
  int nl = 0;
  for (int i = first + 1; i < argc && nl < 40; i++) launcher[nl++] = argv[i];
  /* What keeps the survivors alive after one rank dies: Open MPI's mpirun aborts the
   * whole job unless told to recover; hydra's mpiexec cleans up every rank unless told
   * not to. */
  if (!strcmp(impl, "openmpi")) {
    launcher[nl++] = "--enable-recovery";
  } else if (!strcmp(impl, "mpich")) {
    launcher[nl++] = "-disable-auto-cleanup";
  } else {
    fprintf(stderr, "unknown MPI implementation '%s'\n", impl);
    return 2;
  }
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return 2;
  self[sl] = 0;
  if (!launcher_keeps_survivors(launcher, nl, self)) {
    printf("SKIP: %s (%s) terminates every other rank when one is killed by a signal, even "
           "with %s: no survivor to test (the openmpi campaign covers the backend)\n",
           launcher[0], impl, launcher[nl - 1]);
    return 77;
  }
  const char *env = getenv("UNILINK_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
  const char *tn = getenv("UNILINK_TEST_TRIALS");
  int trials = tn ? atoi(tn) : TRIALS;
  if (trials < 1 || trials > 1000) trials = TRIALS;
  printf("%s SIGKILL campaign under mpirun: %d trials, seed %llu (UNILINK_TEST_SEED replays), "
         "%s launcher %s\n",
         backend, trials, (unsigned long long)seed, impl, launcher[0]);
  fflush(stdout);
  uint64_t s = seed;
  stats_t st = {0};
  double t0 = now_ms();
  for (int no = 0; no < trials; no++) {
    trial_t t;
    t.n = 3 + (int)(rng_next(&s) % 2);
    t.victim = (int)(rng_next(&s) % (uint64_t)t.n);
    t.kind = (int)(rng_next(&s) % C_KINDS);
    t.count = rng_next(&s) % 2 ? 16 : ((size_t)1 << 18) / (size_t)t.n; /* small or 1 MiB */
    t.delay_ms = (int)(rng_next(&s) % 40);
    if (run_trial(no, &t, seed, launcher, nl, self, backend, &st)) st.failed++;
    else st.passed++;
    fflush(stdout);
  }
  printf("%s SIGKILL campaign under mpirun: %d/%d trials passed, hangs %d, leaks %d; detection latency "
         "(kill to survivor's return) max %.1f ms, mean %.1f ms over %d survivors; mpirun "
         "ended <= %.0f ms after a kill; %.1f s in all (seed %llu)\n",
         backend, st.passed, trials, st.hangs, st.leaks, st.lat_max,
         st.lat_n ? st.lat_sum / st.lat_n : 0.0, st.lat_n, st.exit_max,
         (now_ms() - t0) / 1e3, (unsigned long long)seed);
  return st.failed ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "rank")) return rank_main(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "campaign")) return campaign_main(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "probe")) return probe_main(argc, argv);
  fprintf(stderr, "usage: %s campaign [--backend mpi|host] openmpi|mpich LAUNCHER [FLAGS...]\n",
          argv[0]);
  return 2;
}
