/* POSIX shared-memory segments of the host backend: creation (0600, exclusive, pages
 * reserved up front), mapping of peers' segments, and the sweep of segments left by
 * killed jobs. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host.h"

size_t host_page_size(void) {
  long p = sysconf(_SC_PAGESIZE); /* cheap (auxv), and no shared cache to race on */
  return p > 0 ? (size_t)p : 4096;
}

const char *host_errstr(int err, char *buf, size_t len) {
  /* GNU strerror_r may return a static string instead of filling buf. */
  return strerror_r(err, buf, len);
}

/* ------------------------------------------------ proof of life for the sweep */
/* A process that creates segments first creates /dev/shm/unilink-L<pid>-<random> and
 * holds an exclusive flock on it until it exits (the kernel drops the lock however it
 * dies). The sweep removes a segment only if no lock file of its creator's pid is held:
 * unlike kill(pid, 0) this holds across PID namespaces sharing /dev/shm, where a pid
 * means another process or none. The file is created under a hidden name, locked, then
 * renamed, so a sweep never sees it unlocked. */
static pthread_mutex_t host_lock_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t host_lock_pid; /* process that holds host_lock_fd's lock (0: none; fork) */
static int host_lock_fd = -1;
static char host_lock_path[96];

static void host_shm_lock_unlink(void) {
  if (host_lock_pid == getpid() && host_lock_path[0]) unlink(host_lock_path);
}

static void host_shm_lock_ensure(void) {
  pthread_mutex_lock(&host_lock_mu);
  pid_t me = getpid();
  if (host_lock_pid != me) {
    /* a forked child: the parent's lock is not ours; make our own */
    if (host_lock_fd >= 0) close(host_lock_fd);
    host_lock_fd = -1;
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) r = (uint64_t)me * 2654435761u;
    char tmp[96];
    snprintf(tmp, sizeof tmp, "/dev/shm/.%sL%d-%016llx", HOST_SHM_PREFIX, (int)me,
             (unsigned long long)r);
    snprintf(host_lock_path, sizeof host_lock_path, "/dev/shm/%sL%d-%016llx", HOST_SHM_PREFIX,
             (int)me, (unsigned long long)r);
    int fd = open(tmp, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && rename(tmp, host_lock_path) == 0) {
      int first = host_lock_pid == 0;
      host_lock_fd = fd;
      host_lock_pid = me;
      if (first) atexit(host_shm_lock_unlink);
    } else {
      /* no proof of life: the sweep falls back to kill(pid, 0) for our segments */
      if (fd >= 0) close(fd);
      unlink(tmp);
      host_lock_path[0] = '\0';
      host_lock_pid = me;
    }
  }
  pthread_mutex_unlock(&host_lock_mu);
}

/* 1: some lock file of pid is held (alive), 0: lock files exist, none held (gone; they
 * are removed), -1: none exists (a creator without one: use kill). */
static int host_shm_lock_alive(int dirfd, pid_t pid) {
  char pre[48];
  int n = snprintf(pre, sizeof pre, "%sL%d-", HOST_SHM_PREFIX, (int)pid);
  int dfd = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* a dup would share
                                                                     the caller's offset */
  if (dfd < 0) return -1;
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return -1;
  }
  int st = -1;
  struct dirent *de;
  while (st != 1 && (de = readdir(d)) != NULL) {
    if (strncmp(de->d_name, pre, (size_t)n) != 0) continue;
    int fd = openat(dirfd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      st = 1;
    } else {
      unlinkat(dirfd, de->d_name, 0); /* its holder is gone */
      if (st < 0) st = 0;
    }
    close(fd);
  }
  closedir(d);
  return st;
}

static size_t host_shm_round(size_t size) {
  size_t align = size >= HOST_HUGE_ALIGN ? HOST_HUGE_ALIGN : host_page_size();
  return (size + align - 1) / align * align;
}

/* Map len bytes of fd; >= 2 MiB mappings start on a 2 MiB boundary so that huge pages
 * can back them where the kernel allows it. */
static void *host_shm_mmap(int fd, size_t len, off_t off, int populate) {
  int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  if (len < HOST_HUGE_ALIGN)
    return mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, off);
  size_t span = len + HOST_HUGE_ALIGN;
  char *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return MAP_FAILED;
  uintptr_t a = ((uintptr_t)r + HOST_HUGE_ALIGN - 1) & ~(uintptr_t)(HOST_HUGE_ALIGN - 1);
  void *m = mmap((void *)a, len, PROT_READ | PROT_WRITE, flags | MAP_FIXED, fd, off);
  if (m == MAP_FAILED) {
    int e = errno;
    munmap(r, span);
    errno = e;
    return MAP_FAILED;
  }
  if (a > (uintptr_t)r) munmap(r, a - (uintptr_t)r);
  size_t tail = (uintptr_t)r + span - (a + len);
  if (tail) munmap((void *)(a + len), tail);
  /* Best effort: tmpfs honours it when shmem_enabled allows. */
  (void)madvise(m, len, MADV_HUGEPAGE);
  return m;
}

ul_result_t host_shm_create(ul_comm_t h, const char *name, size_t size, int populate,
                            void **addr, size_t *map_size) {
  char eb[128];
  size_t len = host_shm_round(size ? size : 1);
  host_shm_lock_ensure(); /* before the first segment: the sweep's proof that we live */
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    ul_result_t r = ul_backend_set_error(h, UL_ERR_SYSTEM, "host: shm_open(%s, O_CREAT|O_EXCL): %s",
                                         name, host_errstr(e, eb, sizeof eb));
    errno = e; /* EEXIST: the caller may retry with another name */
    return r;
  }
  (void)fchmod(fd, 0600); /* umask can only remove bits; make the mode exact anyway */
  ul_result_t rc = UL_OK;
  int e;
  if (ftruncate(fd, (off_t)len) != 0) {
    e = errno;
    rc = ul_backend_set_error(h, e == ENOMEM || e == ENOSPC ? UL_ERR_NO_MEMORY : UL_ERR_SYSTEM,
                              "host: ftruncate(%s, %zu): %s", name, len,
                              host_errstr(e, eb, sizeof eb));
    goto fail;
  }
  /* Reserve the pages now: tmpfs would otherwise raise SIGBUS on first touch when
   * /dev/shm is full, long after this call returned success. */
  e = posix_fallocate(fd, 0, (off_t)len);
  if (e != 0 && e != EOPNOTSUPP && e != EINVAL) {
    rc = ul_backend_set_error(h, e == ENOSPC || e == ENOMEM ? UL_ERR_NO_MEMORY : UL_ERR_SYSTEM,
                              "host: cannot reserve %zu bytes of shared memory for %s: %s (is "
                              "/dev/shm large enough?)",
                              len, name, host_errstr(e, eb, sizeof eb));
    goto fail;
  }
  void *m = host_shm_mmap(fd, len, 0, populate);
  if (m == MAP_FAILED) {
    e = errno;
    rc = ul_backend_set_error(h, e == ENOMEM ? UL_ERR_NO_MEMORY : UL_ERR_SYSTEM,
                              "host: mmap(%s, %zu bytes): %s", name, len,
                              host_errstr(e, eb, sizeof eb));
    goto fail;
  }
  close(fd);
  *addr = m;
  *map_size = len;
  return UL_OK;
fail:
  close(fd);
  shm_unlink(name);
  return rc;
}

ul_result_t host_shm_map(ul_comm_t h, const char *name, size_t offset, size_t len,
                         void **addr, size_t *map_len, void **base) {
  char eb[128];
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    return ul_backend_set_error(h, UL_ERR_SYSTEM, "host: shm_open(%s) of a peer segment: %s", name,
                                host_errstr(e, eb, sizeof eb));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
    close(fd);
    return ul_backend_set_error(h, UL_ERR_SYSTEM,
                                "host: peer segment %s is not owned by this user (uid %u)", name,
                                (unsigned)geteuid());
  }
  if (len == 0) len = (uint64_t)st.st_size > offset ? (size_t)st.st_size - offset : 0; /* all */
  size_t page = host_page_size();
  size_t start = offset / page * page;
  size_t end = offset + len;
  if ((uint64_t)st.st_size < end) {
    close(fd);
    return ul_backend_set_error(h, UL_ERR_SYSTEM,
                                "host: peer segment %s holds %lld bytes, window needs %zu", name,
                                (long long)st.st_size, end);
  }
  size_t mlen = (end - start + page - 1) / page * page;
  void *m = host_shm_mmap(fd, mlen, (off_t)start, 1);
  int e = errno;
  close(fd);
  if (m == MAP_FAILED)
    return ul_backend_set_error(h, e == ENOMEM ? UL_ERR_NO_MEMORY : UL_ERR_SYSTEM,
                                "host: mmap of peer segment %s (%zu bytes): %s", name, mlen,
                                host_errstr(e, eb, sizeof eb));
  *addr = m;
  *map_len = mlen;
  *base = (char *)m + (offset - start);
  return UL_OK;
}

void host_shm_unlink(const char *name) {
  if (name && name[0]) (void)shm_unlink(name);
}

/* Creator pid of a segment: from the name ("unilink-<tag>-<pid>-<kind><n>") or, for a
 * control segment ("unilink-<tag>"), from its header. 0 when unknown. */
static pid_t host_shm_creator(const char *entry, int dirfd) {
  const char *p = entry + strlen(HOST_SHM_PREFIX);
  const char *dash = strchr(p, '-');
  if (dash) {
    char *end;
    long pid = strtol(dash + 1, &end, 10);
    return (end != dash + 1 && *end == '-' && pid > 0) ? (pid_t)pid : 0;
  }
  int fd = openat(dirfd, entry, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  host_ctrl_t hdr;
  pid_t pid = 0;
  if (pread(fd, &hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr &&
      atomic_load(&hdr.magic) == HOST_CTRL_MAGIC)
    pid = hdr.creator_pid;
  close(fd);
  return pid;
}

void host_shm_sweep_stale(void) {
  int dfd = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return;
  }
  uid_t me = geteuid();
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strncmp(de->d_name, HOST_SHM_PREFIX, strlen(HOST_SHM_PREFIX)) != 0) continue;
    if (de->d_name[strlen(HOST_SHM_PREFIX)] == 'L') {
      /* a lock file nobody holds: its process is gone */
      int fd = openat(dfd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) unlinkat(dfd, de->d_name, 0);
      if (fd >= 0) close(fd);
      continue;
    }
    struct stat st;
    if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != me)
      continue;
    pid_t pid = host_shm_creator(de->d_name, dfd);
    if (pid <= 0) continue;
    int lk = host_shm_lock_alive(dfd, pid);
    if (lk == 1 || (lk < 0 && ulbu_pid_alive(pid, -1))) continue;
    char name[300];
    snprintf(name, sizeof name, "/%s", de->d_name);
    if (shm_unlink(name) == 0)
      ul_backend_log(UL_LOG_INFO, "host", "removed stale segment %s (creator pid %d is gone)",
                     name, (int)pid);
  }
  closedir(d);
}
