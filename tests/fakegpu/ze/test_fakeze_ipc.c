/* The fake Level Zero loader: IPC across processes and in one, and which loader
 * generation this build is. See test_fakeze.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <level_zero/ze_api.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fakeze.h"
#include "test_fakeze.h"

/* ---------------------------------------------------------------------- IPC */

static void send_fd(int sock, int fd, const void *data, size_t len) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  struct iovec io = {(void *)data, len};
  struct msghdr m = {0};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof(cbuf);
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  cr_assert_eq(sendmsg(sock, &m, 0), (ssize_t)len);
}

static int recv_fd(int sock, void *data, size_t len) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  struct iovec io = {data, len};
  struct msghdr m = {0};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof(cbuf);
  if (recvmsg(sock, &m, 0) != (ssize_t)len) return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

/* The importer: a separate process with its own driver state, as the ze backend's
 * process ranks are. Exit status 0 = every check passed. */
static int ipc_child(int sock) {
  /* Shift descriptor numbers so the received one differs from the sender's. */
  int pad[5];
  for (int i = 0; i < 5; i++) pad[i] = dup(0);
  fx_t f;
  fx_init(&f);
  ze_ipc_mem_handle_t h;
  int fd = recv_fd(sock, h.data, sizeof(h.data));
  if (fd < 0) return 10;
  int sender_fd;
  memcpy(&sender_fd, h.data, sizeof(int));
  if (sender_fd == fd) return 11;
  void *p = NULL;
  /* The handle as sent names the sender's descriptor number: not valid here. */
  if (fcntl(sender_fd, F_GETFD) < 0 &&
      zeMemOpenIpcHandle(f.ctx, f.dev[1], h, 0, &p) != ZE_RESULT_ERROR_INVALID_ARGUMENT)
    return 12;
  memcpy(h.data, &fd, sizeof(int)); /* as the backend does */
  if (zeMemOpenIpcHandle(f.ctx, f.dev[1], h, 0, &p) != ZE_RESULT_SUCCESS) return 13;
  close(fd); /* the mapping does not need our descriptor */
  if (fakeze_open_ipc() != 1 || fakeze_live_allocations() != 0) return 14;
  ze_memory_allocation_properties_t mp = {.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES};
  ze_device_handle_t dh = NULL;
  if (zeMemGetAllocProperties(f.ctx, p, &mp, &dh) || mp.type != ZE_MEMORY_TYPE_DEVICE || dh != f.dev[1])
    return 15;
  unsigned char *buf = fx_host_alloc(&f, 65536), want[65536];
  fill_pattern(want, sizeof(want), 5);
  ze_command_list_handle_t l = fx_list(&f, 1, 1, 0);
  zeCommandListAppendMemoryCopy(l, buf, p, 65536, NULL, 0, NULL);
  if (fx_sync(&f, l) != ZE_RESULT_SUCCESS) return 16;
  if (memcmp(buf, want, sizeof(want)) != 0) return 17;
  /* write back through the import: the exporter sees it */
  memset(buf, 0x5c, 65536);
  zeCommandListAppendMemoryCopy(l, p, buf, 65536, NULL, 0, NULL);
  if (fx_sync(&f, l) != ZE_RESULT_SUCCESS) return 18;
  zeCommandListDestroy(l);
  if (zeMemCloseIpcHandle(f.ctx, p) != ZE_RESULT_SUCCESS) return 19;
  if (fakeze_open_ipc() != 0) return 20;
  zeMemFree(f.ctx, buf);
  char ok = 1;
  if (write(sock, &ok, 1) != 1) return 21;
  for (int i = 0; i < 5; i++) close(pad[i]);
  return 0;
}

Test(fakeze, ipc_across_processes) {
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  pid_t pid = fork(); /* before any driver state exists in this process */
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(sv[0]);
    _exit(ipc_child(sv[1]));
  }
  close(sv[1]);
  fx_t f;
  fx_init(&f);
  unsigned char src[65536], *out;
  fill_pattern(src, sizeof(src), 5);
  void *d = fx_dev_alloc(&f, 0, sizeof(src));
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l, d, src, sizeof(src), NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l));
  ze_ipc_mem_handle_t h;
  cr_assert_eq(zeMemGetIpcHandle(f.ctx, (char *)d + 64, &h), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(fakeze_spec_violations(), 1);
  ZE_OK(zeMemGetIpcHandle(f.ctx, d, &h));
  int fd;
  memcpy(&fd, h.data, sizeof(int)); /* the descriptor is the first int */
  cr_assert_geq(fd, 0);
  send_fd(sv[0], fd, h.data, sizeof(h.data));
  char ok = 0;
  cr_assert_eq(read(sv[0], &ok, 1), 1, "the importer failed");
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "importer check %d failed", WEXITSTATUS(st));
  out = fx_host_alloc(&f, sizeof(src));
  ZE_OK(zeCommandListAppendMemoryCopy(l, out, d, sizeof(src), NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l));
  for (size_t i = 0; i < sizeof(src); i++) cr_assert_eq(out[i], 0x5c, "byte %zu", i);
#ifdef FAKEZE_NEWER_LOADER
  cr_assert_eq(fakeze_ipc_handles_out(), 1);
  ZE_OK(zeMemPutIpcHandle(f.ctx, h));
#endif
  cr_assert_eq(fakeze_ipc_handles_out(), 0);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, d));
  ZE_OK(zeMemFree(f.ctx, out));
  for (int i = 0; i < 8; i++) zeEventDestroy(f.ev[i]);
  zeEventPoolDestroy(f.pool);
  zeContextDestroy(f.ctx);
}

Test(fakeze, ipc_in_one_process) {
  fx_t f;
  fx_init(&f);
  void *d = fx_dev_alloc(&f, 0, 4096);
  ze_ipc_mem_handle_t h;
  ZE_OK(zeMemGetIpcHandle(f.ctx, d, &h));
  void *a = NULL, *b = NULL;
  ZE_OK(zeMemOpenIpcHandle(f.ctx, f.dev[0], h, 0, &a));
  ZE_OK(zeMemOpenIpcHandle(f.ctx, f.dev[0], h, 0, &b));
  cr_assert_neq(a, b, "each open returns its own pointer");
  cr_assert_neq(a, d);
  cr_assert_eq(fakeze_open_ipc(), 2);
  cr_assert_eq(zeMemFree(f.ctx, a), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(fakeze_spec_violations(), 1);
  touch_in_child(a, 1); /* the import is device memory too */
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  uint32_t v = 0xdeadbeef, o = 0;
  ZE_OK(zeCommandListAppendMemoryCopy(l, d, &v, 4, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(l, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(l, &o, b, 4, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l));
  cr_assert_eq(o, 0xdeadbeef);
  ZE_OK(zeMemCloseIpcHandle(f.ctx, a));
  ZE_OK(zeMemCloseIpcHandle(f.ctx, b));
  cr_assert_eq(zeMemCloseIpcHandle(f.ctx, b), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(fakeze_open_ipc(), 0);
#ifdef FAKEZE_NEWER_LOADER
  ZE_OK(zeMemPutIpcHandle(f.ctx, h));
#endif
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, d));
  for (int i = 0; i < 8; i++) zeEventDestroy(f.ev[i]);
  zeEventPoolDestroy(f.pool);
  zeContextDestroy(f.ctx);
}

/* ---------------------------------------------- which loader generation */

#ifndef FAKEZE_NEWER_LOADER
Test(fakeze, exports_the_1_8_12_surface_only) {
  /* The plugin looks these up at run time; the 1.8.12 loader has none of them. */
  cr_assert_eq(fakeze_newer_loader(), 0);
  cr_assert_null(dlsym(RTLD_DEFAULT, "zeMemPutIpcHandle"));
  cr_assert_null(dlsym(RTLD_DEFAULT, "zeMemGetFileDescriptorFromIpcHandleExp"));
  cr_assert_null(dlsym(RTLD_DEFAULT, "zeMemGetIpcHandleFromFileDescriptorExp"));
  cr_assert_not_null(dlsym(RTLD_DEFAULT, "zeMemGetIpcHandle"));
}
#else
Test(fakeze, newer_loader_handles_own_descriptors) {
  cr_assert_eq(fakeze_newer_loader(), 1);
  fx_t f;
  fx_init(&f);
  void *d = fx_dev_alloc(&f, 0, 4096);
  ze_ipc_mem_handle_t a, b;
  ZE_OK(zeMemGetIpcHandle(f.ctx, d, &a));
  ZE_OK(zeMemGetIpcHandle(f.ctx, d, &b));
  cr_assert_eq(fakeze_ipc_handles_out(), 2);
  uint64_t fa = 0, fb = 0;
  ZE_OK(zeMemGetFileDescriptorFromIpcHandleExp(f.ctx, a, &fa));
  ZE_OK(zeMemGetFileDescriptorFromIpcHandleExp(f.ctx, b, &fb));
  cr_assert_neq(fa, fb, "each handle holds a descriptor of its own");
  cr_assert_eq(memcmp(a.data, &(int){(int)fa}, sizeof(int)), 0);
  /* a handle rebuilt from the bare descriptor opens the same memory */
  ze_ipc_mem_handle_t c;
  ZE_OK(zeMemGetIpcHandleFromFileDescriptorExp(f.ctx, fb, &c));
  void *p = NULL;
  ZE_OK(zeMemOpenIpcHandle(f.ctx, f.dev[0], c, 0, &p));
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  uint64_t v = 0x1122334455667788ull, o = 0;
  ZE_OK(zeCommandListAppendMemoryCopy(l, d, &v, 8, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(l, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(l, &o, p, 8, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l));
  cr_assert_eq(o, v);
  ZE_OK(zeMemCloseIpcHandle(f.ctx, p));
  /* put closes the handle's descriptor; a second put of it is refused */
  ZE_OK(zeMemPutIpcHandle(f.ctx, a));
  cr_assert_eq(fcntl((int)fa, F_GETFD), -1);
  cr_assert_eq(zeMemPutIpcHandle(f.ctx, a), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(fakeze_spec_violations(), 1);
  ZE_OK(zeMemPutIpcHandle(f.ctx, b));
  cr_assert_eq(fakeze_ipc_handles_out(), 0);
  ze_ipc_mem_handle_t bad;
  cr_assert_eq(zeMemGetIpcHandleFromFileDescriptorExp(f.ctx, 1000000, &bad),
               ZE_RESULT_ERROR_INVALID_ARGUMENT);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, d));
  for (int i = 0; i < 8; i++) zeEventDestroy(f.ev[i]);
  zeEventPoolDestroy(f.pool);
  zeContextDestroy(f.ctx);
}
#endif
