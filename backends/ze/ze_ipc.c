/* SCM_RIGHTS descriptor exchange for the ze backend (see ze_ipc.h). */
#define _GNU_SOURCE
#include "ze_ipc.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double ulze_ipc_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static socklen_t ulze_ipc_addr(const char *name, struct sockaddr_un *a) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  size_t n = strlen(name);
  if (n > sizeof(a->sun_path) - 2) n = sizeof(a->sun_path) - 2;
  memcpy(a->sun_path + 1, name, n); /* sun_path[0] = 0: abstract namespace */
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Poll slice: 50 ms, so the abort flag and the deadline are seen promptly. */
static ul_result_t ulze_ipc_wait(int fd, short ev, double t0, int timeout_ms,
                                 const volatile int *abort_flag, const char *what, char *err,
                                 size_t errlen) {
  for (;;) {
    if (abort_flag && *abort_flag) {
      snprintf(err, errlen, "%s: communicator was aborted", what);
      return UL_ERR_ABORTED;
    }
    if (timeout_ms > 0 && ulze_ipc_now_ms() - t0 > timeout_ms) {
      snprintf(err, errlen, "%s: no peer within %d ms", what, timeout_ms);
      return UL_ERR_TIMEOUT;
    }
    struct pollfd p = {fd, ev, 0};
    int r = poll(&p, 1, 50);
    if (r > 0) return UL_OK;
    if (r < 0 && errno != EINTR) {
      snprintf(err, errlen, "%s: poll: %s", what, strerror(errno));
      return UL_ERR_SYSTEM;
    }
  }
}

int ulze_ipc_listen(const char *name, char *err, size_t errlen) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket(AF_UNIX): %s", strerror(errno));
    return -1;
  }
  struct sockaddr_un a;
  socklen_t len = ulze_ipc_addr(name, &a);
  if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 64) != 0) {
    snprintf(err, errlen, "bind/listen on @%s: %s", name, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

ul_result_t ulze_ipc_serve(int listen_fd, int fd_to_send, const int32_t *pids, int npids,
                           int nconn, int timeout_ms, const volatile int *abort_flag, char *err,
                           size_t errlen) {
  double t0 = ulze_ipc_now_ms();
  ul_result_t rc = UL_OK;
  int served = 0;
  while (served < nconn) {
    rc = ulze_ipc_wait(listen_fd, POLLIN, t0, timeout_ms, abort_flag, "IPC handle server", err,
                       errlen);
    if (rc != UL_OK) break;
    int s = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      snprintf(err, errlen, "accept: %s", strerror(errno));
      rc = UL_ERR_SYSTEM;
      break;
    }
    struct ucred cr;
    socklen_t crl = sizeof(cr);
    int ok = getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &crl) == 0 && cr.uid == geteuid();
    int member = 0;
    for (int i = 0; ok && i < npids; i++) member |= pids[i] == (int32_t)cr.pid;
    if (!ok || !member) { /* not one of our ranks: answer nothing */
      close(s);
      continue;
    }
    char byte = 'Z';
    struct iovec iov = {&byte, 1};
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(sizeof(int))];
    } u;
    memset(&u, 0, sizeof(u));
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = u.buf;
    m.msg_controllen = sizeof(u.buf);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd_to_send, sizeof(int));
    ssize_t w = sendmsg(s, &m, MSG_NOSIGNAL);
    close(s);
    if (w != 1) {
      snprintf(err, errlen, "sendmsg(SCM_RIGHTS): %s", strerror(errno));
      rc = UL_ERR_SYSTEM;
      break;
    }
    served++;
  }
  close(listen_fd);
  return rc;
}

ul_result_t ulze_ipc_fetch(const char *name, int timeout_ms, const volatile int *abort_flag,
                           int *fd_out, char *err, size_t errlen) {
  *fd_out = -1;
  double t0 = ulze_ipc_now_ms();
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    snprintf(err, errlen, "socket(AF_UNIX): %s", strerror(errno));
    return UL_ERR_SYSTEM;
  }
  struct sockaddr_un a;
  socklen_t len = ulze_ipc_addr(name, &a);
  while (connect(s, (struct sockaddr *)&a, len) != 0) {
    /* The listener exists before the board barrier; retry only transient refusals. */
    if (errno != ECONNREFUSED && errno != EAGAIN && errno != EINTR) {
      snprintf(err, errlen, "connect to @%s: %s", name, strerror(errno));
      close(s);
      return UL_ERR_SYSTEM;
    }
    if ((abort_flag && *abort_flag) || (timeout_ms > 0 && ulze_ipc_now_ms() - t0 > timeout_ms)) {
      snprintf(err, errlen, "connect to @%s: %s", name,
               abort_flag && *abort_flag ? "aborted" : "timed out");
      close(s);
      return abort_flag && *abort_flag ? UL_ERR_ABORTED : UL_ERR_TIMEOUT;
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  ul_result_t rc = ulze_ipc_wait(s, POLLIN, t0, timeout_ms, abort_flag, "IPC handle fetch", err,
                                 errlen);
  if (rc != UL_OK) {
    close(s);
    return rc;
  }
  char byte = 0;
  struct iovec iov = {&byte, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = u.buf;
  m.msg_controllen = sizeof(u.buf);
  ssize_t r = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
  close(s);
  struct cmsghdr *c = r == 1 ? CMSG_FIRSTHDR(&m) : NULL;
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
    snprintf(err, errlen, "recvmsg from @%s: no descriptor received (%s)", name,
             r < 0 ? strerror(errno) : "peer refused");
    return UL_ERR_SYSTEM;
  }
  memcpy(fd_out, CMSG_DATA(c), sizeof(int));
  return UL_OK;
}
