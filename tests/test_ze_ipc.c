/* ze backend descriptor exchange (backends/ze/ze_ipc.c): a descriptor served over the
 * abstract Unix socket with SCM_RIGHTS arrives usable in the fetcher; strangers get
 * nothing; timeouts and the abort flag end both sides. No device needed (a pipe stands
 * in for the dma-buf of an IPC handle). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <unilink/unilink.h>

#ifdef UNILINK_HAVE_ZE_COMMON
#include "ze_ipc.h"

typedef struct serve_job {
  int lfd, fd;
  int32_t pids[2];
  int npids, nconn, timeout_ms;
  volatile int abort_flag;
  ul_result_t rc;
  char err[200];
} serve_job_t;

static void *serve_main(void *arg) {
  serve_job_t *j = arg;
  j->rc = ulze_ipc_serve(j->lfd, j->fd, j->pids, j->npids, j->nconn, j->timeout_ms,
                         &j->abort_flag, j->err, sizeof j->err);
  return NULL;
}

static void unique_name(char *buf, size_t len, const char *tag) {
  snprintf(buf, len, "ulze-test-%d-%s", (int)getpid(), tag);
}

Test(ze_ipc, descriptor_arrives_and_works, .timeout = 20) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  char name[64], err[200] = "";
  unique_name(name, sizeof name, "ok");
  serve_job_t j;
  memset(&j, 0, sizeof j);
  j.lfd = ulze_ipc_listen(name, err, sizeof err);
  cr_assert_geq(j.lfd, 0, "%s", err);
  j.fd = p[1];
  j.pids[0] = 1; /* not us */
  j.pids[1] = (int32_t)getpid();
  j.npids = 2;
  j.nconn = 2;
  j.timeout_ms = 5000;
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, serve_main, &j), 0);
  for (int k = 0; k < 2; k++) {
    int got = -1;
    cr_assert_eq(ulze_ipc_fetch(name, 5000, NULL, &got, err, sizeof err), UL_OK, "%s", err);
    cr_assert_geq(got, 0);
    cr_assert_neq(got, p[1], "a new descriptor number");
    char msg[2] = {(char)('a' + k), 0};
    cr_assert_eq(write(got, msg, 1), 1);
    close(got);
    char in = 0;
    cr_assert_eq(read(p[0], &in, 1), 1);
    cr_assert_eq(in, 'a' + k, "the received descriptor is the served pipe");
  }
  pthread_join(th, NULL);
  cr_assert_eq(j.rc, UL_OK, "%s", j.err);
  close(p[0]);
  close(p[1]);
}

Test(ze_ipc, stranger_gets_nothing_and_server_times_out, .timeout = 20) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  char name[64], err[200] = "";
  unique_name(name, sizeof name, "stranger");
  serve_job_t j;
  memset(&j, 0, sizeof j);
  j.lfd = ulze_ipc_listen(name, err, sizeof err);
  cr_assert_geq(j.lfd, 0, "%s", err);
  j.fd = p[1];
  j.pids[0] = 1; /* only "pid 1" may fetch */
  j.npids = 1;
  j.nconn = 1;
  j.timeout_ms = 300;
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, serve_main, &j), 0);
  int got = 77;
  ul_result_t rc = ulze_ipc_fetch(name, 2000, NULL, &got, err, sizeof err);
  cr_assert_eq(rc, UL_ERR_SYSTEM, "%s", err);
  cr_assert_eq(got, -1);
  cr_assert(strstr(err, "no descriptor") != NULL, "%s", err);
  pthread_join(th, NULL);
  cr_assert_eq(j.rc, UL_ERR_TIMEOUT, "%s", j.err);
  cr_assert(strstr(j.err, "300 ms") != NULL, "%s", j.err);
  close(p[0]);
  close(p[1]);
}

Test(ze_ipc, abort_and_missing_server, .timeout = 20) {
  char name[64], err[200] = "";
  unique_name(name, sizeof name, "abort");
  serve_job_t j;
  memset(&j, 0, sizeof j);
  j.lfd = ulze_ipc_listen(name, err, sizeof err);
  cr_assert_geq(j.lfd, 0, "%s", err);
  j.fd = 0;
  j.nconn = 1;
  j.timeout_ms = 0; /* forever: only the abort flag ends it */
  j.abort_flag = 1;
  serve_main(&j);
  cr_assert_eq(j.rc, UL_ERR_ABORTED, "%s", j.err);
  /* the listener is closed now: fetch times out */
  int got = 5;
  ul_result_t rc = ulze_ipc_fetch(name, 200, NULL, &got, err, sizeof err);
  cr_assert_eq(rc, UL_ERR_TIMEOUT, "%s", err);
  cr_assert_eq(got, -1);
  /* a second listener on a live name is refused */
  int a = ulze_ipc_listen(name, err, sizeof err);
  cr_assert_geq(a, 0, "%s", err);
  cr_assert_eq(ulze_ipc_listen(name, err, sizeof err), -1);
  cr_assert(strstr(err, "bind") != NULL, "%s", err);
  close(a);
}
#else
Test(ze_ipc, not_built, .timeout = 10) { cr_skip_test("ze helpers not configured: nothing to test"); }
#endif
