/* SCM_RIGHTS descriptor exchange for the ze backend (see ze_ipc.h). */
#define _GNU_SOURCE
#include "ze_ipc.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wait.h"

static socklen_t ulze_ipc_addr(const char *name, struct sockaddr_un *a) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  size_t n = strlen(name);
  if (n > sizeof(a->sun_path) - 2) n = sizeof(a->sun_path) - 2;
  memcpy(a->sun_path + 1, name, n); /* sun_path[0] = 0: abstract namespace */
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* The socket waits: their sentence goes to err (no communicator here), the abort flag
 * and the deadline are checked between polls. */
typedef struct ulze_ipc_waiting {
  int fd;
  short ev;
  const volatile int *abort_flag;
  const char *name; /* the peer's socket, for connect's sentences */
  const char *what;
  struct sockaddr_un a;
  socklen_t alen;
  char *err;
  size_t errlen;
} ulze_ipc_waiting_t;

static ul_result_t ulze_ipc_check(void *arg, double elapsed_ms, const char *what) {
  (void)elapsed_ms;
  ulze_ipc_waiting_t *x = arg;
  if (!x->abort_flag || !*x->abort_flag) return UL_OK;
  if (x->name) snprintf(x->err, x->errlen, "connect to @%s: aborted", x->name);
  else snprintf(x->err, x->errlen, "%s: communicator was aborted", what);
  return UL_ERR_ABORTED;
}

static ul_result_t ulze_ipc_expired(void *arg, int timeout_ms, const char *what) {
  ulze_ipc_waiting_t *x = arg;
  if (x->name) snprintf(x->err, x->errlen, "connect to @%s: timed out", x->name);
  else snprintf(x->err, x->errlen, "%s: no peer within %d ms", what, timeout_ms);
  return UL_ERR_TIMEOUT;
}

/* Readiness of fd without blocking; the block callback below does the sleeping. */
static ul_result_t ulze_ipc_ready(void *arg) {
  ulze_ipc_waiting_t *x = arg;
  struct pollfd p = {x->fd, x->ev, 0};
  int r = poll(&p, 1, 0);
  if (r > 0) return UL_OK;
  if (r < 0 && errno != EINTR) {
    snprintf(x->err, x->errlen, "%s: poll: %s", x->what, strerror(errno));
    return UL_ERR_SYSTEM;
  }
  return UL_IN_PROGRESS;
}

/* Sleep in poll itself, so readiness wakes us at once. */
static void ulze_ipc_block(void *arg, long ns) {
  ulze_ipc_waiting_t *x = arg;
  struct pollfd p = {x->fd, x->ev, 0};
  (void)poll(&p, 1, (int)((ns + 999999L) / 1000000L));
}

/* The listener exists before the board barrier: retry only transient refusals. */
static ul_result_t ulze_ipc_connected(void *arg) {
  ulze_ipc_waiting_t *x = arg;
  if (connect(x->fd, (struct sockaddr *)&x->a, x->alen) == 0) return UL_OK;
  if (errno == ECONNREFUSED || errno == EAGAIN || errno == EINTR) return UL_IN_PROGRESS;
  snprintf(x->err, x->errlen, "connect to @%s: %s", x->name, strerror(errno));
  return UL_ERR_SYSTEM;
}

/* Wait slices of 50 ms in poll (connect retries every millisecond), so the abort flag and
 * the deadline are seen promptly. */
static ul_result_t ulze_ipc_wait(ulze_ipc_waiting_t *x, int connecting, double t0, int timeout_ms,
                                 const char *what) {
  const ulbu_waiter_t w = {.arg = x,
                           .check = ulze_ipc_check,
                           .expired = ulze_ipc_expired,
                           .timeout_ms = timeout_ms,
                           .sleep_ns = connecting ? 1000000L : 50000000L};
  const ulbu_cond_t cond = connecting ? (ulbu_cond_t){ulze_ipc_connected, NULL, x}
                                      : (ulbu_cond_t){ulze_ipc_ready, ulze_ipc_block, x};
  x->what = what;
  return ulbu_wait_since(&w, &cond, what, t0);
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
  double t0 = ulbu_now_ms();
  ul_result_t rc = UL_OK;
  int served = 0;
  ulze_ipc_waiting_t x = {.fd = listen_fd, .ev = POLLIN, .abort_flag = abort_flag, .err = err,
                          .errlen = errlen};
  while (served < nconn) {
    rc = ulze_ipc_wait(&x, 0, t0, timeout_ms, "IPC handle server");
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
  double t0 = ulbu_now_ms();
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    snprintf(err, errlen, "socket(AF_UNIX): %s", strerror(errno));
    return UL_ERR_SYSTEM;
  }
  ulze_ipc_waiting_t x = {.fd = s, .ev = POLLIN, .abort_flag = abort_flag, .name = name,
                          .err = err, .errlen = errlen};
  x.alen = ulze_ipc_addr(name, &x.a);
  ul_result_t rc = ulze_ipc_wait(&x, 1, t0, timeout_ms, "connect");
  x.name = NULL; /* connected: the fetch's own sentences from here */
  if (rc == UL_OK)
    rc = ulze_ipc_wait(&x, 0, t0, timeout_ms, "IPC handle fetch");
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
