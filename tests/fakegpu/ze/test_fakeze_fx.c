/* Fixtures of the direct tests of the fake Level Zero loader (see test_fakeze.h). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <level_zero/ze_api.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fakeze.h"
#include "test_fakeze.h"

void fx_init(fx_t *f) {
  memset(f, 0, sizeof(*f));
  ZE_OK(zeInit(ZE_INIT_FLAG_GPU_ONLY));
  uint32_t n = 1;
  ZE_OK(zeDriverGet(&n, &f->drv));
  cr_assert_eq(n, 1);
  f->ndev = 8;
  ZE_OK(zeDeviceGet(f->drv, &f->ndev, f->dev));
  ze_context_desc_t cd = {ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
  ZE_OK(zeContextCreate(f->drv, &cd, &f->ctx));
  ze_event_pool_desc_t pd = {ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL,
                             ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 8};
  ZE_OK(zeEventPoolCreate(f->ctx, &pd, 0, NULL, &f->pool));
  for (uint32_t i = 0; i < 8; i++) {
    ze_event_desc_t ed = {ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, i, ZE_EVENT_SCOPE_FLAG_HOST,
                          ZE_EVENT_SCOPE_FLAG_HOST};
    ZE_OK(zeEventCreate(f->pool, &ed, &f->ev[i]));
  }
}

void fx_fini(fx_t *f) {
  for (int i = 0; i < 8; i++) ZE_OK(zeEventDestroy(f->ev[i]));
  ZE_OK(zeEventPoolDestroy(f->pool));
  ZE_OK(zeContextDestroy(f->ctx));
  cr_assert_eq(fakeze_live_events(), 0);
  cr_assert_eq(fakeze_live_event_pools(), 0);
  cr_assert_eq(fakeze_live_contexts(), 0);
  cr_assert_eq(fakeze_spec_violations(), 0);
}

ze_command_list_handle_t fx_list(fx_t *f, int dev, uint32_t ordinal, int sync) {
  ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, ordinal, 0, 0,
                                sync ? ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS
                                     : ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
                                ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t l = NULL;
  ZE_OK(zeCommandListCreateImmediate(f->ctx, f->dev[dev], &qd, &l));
  return l;
}

void *fx_dev_alloc(fx_t *f, int dev, size_t n) {
  ze_device_mem_alloc_desc_t d = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  void *p = NULL;
  ZE_OK(zeMemAllocDevice(f->ctx, &d, n, 64, f->dev[dev], &p));
  return p;
}

void *fx_host_alloc(fx_t *f, size_t n) {
  ze_host_mem_alloc_desc_t d = {ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, NULL, 0};
  void *p = NULL;
  ZE_OK(zeMemAllocHost(f->ctx, &d, n, 64, &p));
  return p;
}

/* Everything appended so far completes; the result of waiting on it. */
ze_result_t fx_sync(fx_t *f, ze_command_list_handle_t l) {
  ze_result_t r = zeCommandListAppendBarrier(l, f->ev[7], 0, NULL);
  if (r != ZE_RESULT_SUCCESS) return r;
  r = zeEventHostSynchronize(f->ev[7], UINT64_MAX);
  zeEventHostReset(f->ev[7]);
  return r;
}
void touch_in_child(void *p, int write) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would turn the fault into an exit */
    if (write)
      *(volatile char *)p = 1;
    else
      (void)*(volatile char *)p;
    _exit(0);
  }
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "a CPU %s of device memory did not fault",
            write ? "store" : "load");
}

void fill_pattern(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed * 7u + (i >> 8)) & 0xff);
}
