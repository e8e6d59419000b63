/* Process liveness by pid (see proc_alive.h). */
#define _GNU_SOURCE
#include "proc_alive.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int ulbu_pid_open(pid_t pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    (void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    return (int)fd;
  }
#endif
  return -1;
}

/* A zombie still answers kill(pid, 0), so also look at its state. */
static int pid_is_zombie(pid_t pid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* the command name may contain spaces or ')' */
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

int ulbu_pid_alive(pid_t pid, int pidfd) {
  if (pidfd >= 0) {
    /* A pidfd becomes readable when the process exits (zombie included). */
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    int r = poll(&p, 1, 0);
    if (r >= 0) return r == 0;
  }
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  return !pid_is_zombie(pid);
}

unsigned long long ulbu_pid_namespace(void) {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return ((unsigned long long)st.st_dev << 32) ^ (unsigned long long)st.st_ino;
}
