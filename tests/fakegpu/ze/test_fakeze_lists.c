/* The fake Level Zero loader: copies are exact, command lists order by barriers and
 * events, lost devices. See test_fakeze.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <level_zero/ze_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fakeze.h"
#include "test_fakeze.h"

/* ------------------------------------------------------------------ copies */

Test(fakeze, copies_host_device_device_host) {
  fx_t f;
  fx_init(&f);
  const size_t n = (1 << 20) + 13;
  unsigned char *src = malloc(n), *out = fx_host_alloc(&f, n);
  fill_pattern(src, n, 3);
  memset(out, 0, n);
  void *d0 = fx_dev_alloc(&f, 0, n), *d1 = fx_dev_alloc(&f, 1, n);
  ze_command_list_handle_t l0 = fx_list(&f, 0, 1, 0), l1 = fx_list(&f, 1, 0, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l0, d0, src, n, NULL, 0, NULL)); /* pageable -> device */
  ZE_OK(zeCommandListAppendBarrier(l0, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(l0, d1, d0, n, f.ev[0], 0, NULL)); /* device -> peer */
  /* the other device's list waits for the peer copy through the event */
  ZE_OK(zeCommandListAppendMemoryCopy(l1, out, d1, n, f.ev[1], 1, &f.ev[0]));
  ZE_OK(zeEventHostSynchronize(f.ev[1], UINT64_MAX));
  cr_assert_eq(memcmp(out, src, n), 0);
  /* interior pointers, odd sizes */
  memset(out, 0, n);
  ZE_OK(zeCommandListAppendMemoryCopy(l1, out + 1, (char *)d1 + 7, 1001, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l1));
  cr_assert_eq(memcmp(out + 1, src + 7, 1001), 0);
  cr_assert_eq(out[0], 0);
  cr_assert_eq(out[1002], 0);
  ZE_OK(zeCommandListDestroy(l0));
  ZE_OK(zeCommandListDestroy(l1));
  cr_assert_eq(fakeze_live_command_lists(), 0);
  ZE_OK(zeMemFree(f.ctx, d0));
  ZE_OK(zeMemFree(f.ctx, d1));
  ZE_OK(zeMemFree(f.ctx, out));
  free(src);
  cr_assert_eq(fakeze_device_lost(0) + fakeze_device_lost(1), 0);
  fx_fini(&f);
}

Test(fakeze, fill) {
  fx_t f;
  fx_init(&f);
  const size_t n = 10000;
  unsigned char *d = fx_dev_alloc(&f, 0, n), *out = fx_host_alloc(&f, n);
  ze_command_list_handle_t copy = fx_list(&f, 0, 1, 0), comp = fx_list(&f, 0, 0, 0);
  uint8_t b = 0xab;
  ZE_OK(zeCommandListAppendMemoryFill(copy, d, &b, 1, n, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(copy, NULL, 0, NULL));
  uint32_t w = 0x04030201;
  ZE_OK(zeCommandListAppendMemoryFill(copy, d + 4, &w, 4, 10, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(copy, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(copy, out, d, n, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, copy));
  const unsigned char want[] = {0xab, 0xab, 0xab, 0xab, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 0xab};
  cr_assert_eq(memcmp(out, want, sizeof(want)), 0);
  for (size_t i = sizeof(want); i < n; i++) cr_assert_eq(out[i], 0xab, "byte %zu", i);
  /* a copy engine fills with at most 4-byte patterns; compute engines take 128 */
  uint64_t q = 0x0807060504030201ull;
  cr_assert_eq(zeCommandListAppendMemoryFill(copy, d, &q, 8, 16, NULL, 0, NULL), ZE_RESULT_ERROR_INVALID_SIZE);
  cr_assert_eq(fakeze_spec_violations(), 1);
  ZE_OK(zeCommandListAppendMemoryFill(comp, d, &q, 8, 16, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(comp, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(comp, out, d, 16, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, comp));
  cr_assert_eq(memcmp(out, &q, 8), 0);
  cr_assert_eq(memcmp(out + 8, &q, 8), 0);
  ZE_OK(zeCommandListDestroy(copy));
  ZE_OK(zeCommandListDestroy(comp));
  ZE_OK(zeMemFree(f.ctx, d));
  ZE_OK(zeMemFree(f.ctx, out));
  for (int i = 0; i < 8; i++) zeEventDestroy(f.ev[i]);
  zeEventPoolDestroy(f.pool);
  zeContextDestroy(f.ctx);
}

/* A chain of dependent copies d[0] -> d[1] -> ... -> d[K-1] with random delays. */
static void run_chain(fx_t *f, int barriers) {
  enum { K = 24, N = 4096 };
  unsigned char *src = fx_host_alloc(f, N), *out = fx_host_alloc(f, N);
  fill_pattern(src, N, 11);
  memset(out, 0, N);
  void *d[K];
  for (int i = 0; i < K; i++) d[i] = fx_dev_alloc(f, 0, N);
  ze_command_list_handle_t l = fx_list(f, 0, 1, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l, d[0], src, N, NULL, 0, NULL));
  for (int i = 1; i < K; i++) {
    if (barriers) ZE_OK(zeCommandListAppendBarrier(l, NULL, 0, NULL));
    ZE_OK(zeCommandListAppendMemoryCopy(l, d[i], d[i - 1], N, NULL, 0, NULL));
  }
  if (barriers) ZE_OK(zeCommandListAppendBarrier(l, NULL, 0, NULL));
  ZE_OK(zeCommandListAppendMemoryCopy(l, out, d[K - 1], N, NULL, 0, NULL));
  ZE_OK(fx_sync(f, l));
  cr_assert_eq(memcmp(out, src, N), 0, "the chain lost its data");
  ZE_OK(zeCommandListDestroy(l));
  for (int i = 0; i < K; i++) ZE_OK(zeMemFree(f->ctx, d[i]));
  ZE_OK(zeMemFree(f->ctx, src));
  ZE_OK(zeMemFree(f->ctx, out));
}

Test(fakeze, in_order_with_delays) {
  setenv("FAKEGPU_DELAY_US", "300", 1);
  setenv("FAKEGPU_SEED", "7", 1);
  fx_t f;
  fx_init(&f);
  run_chain(&f, 0); /* default: each command executes after the one before */
  fx_fini(&f);
}

Test(fakeze, reorder_mode_keeps_barrier_order) {
  setenv("FAKEGPU_DELAY_US", "100", 1);
  setenv("FAKEGPU_ZE_REORDER", "1", 1);
  fx_t f;
  fx_init(&f);
  run_chain(&f, 1);
  fx_fini(&f);
}

Test(fakeze, reorder_mode_reorders_without_barriers) {
  /* Sixteen queued copies into one host byte, no barrier between them: the last one
   * appended must not always be the last one run. Appends are queued while the worker
   * is held in a wait on an event, so the whole batch is there when it resumes. */
  setenv("FAKEGPU_ZE_REORDER", "1", 1);
  fx_t f;
  fx_init(&f);
  unsigned char *vals = fx_host_alloc(&f, 16), *out = fx_host_alloc(&f, 1);
  for (int i = 0; i < 16; i++) vals[i] = (unsigned char)i;
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  int not_last = 0;
  for (int round = 0; round < 20 && !not_last; round++) {
    ZE_OK(zeCommandListAppendWaitOnEvents(l, 1, &f.ev[0]));
    for (int i = 0; i < 16; i++) ZE_OK(zeCommandListAppendMemoryCopy(l, out, vals + i, 1, NULL, 0, NULL));
    ZE_OK(zeEventHostSignal(f.ev[0]));
    ZE_OK(fx_sync(&f, l));
    ZE_OK(zeEventHostReset(f.ev[0]));
    not_last = *out != 15;
  }
  cr_assert(not_last, "FAKEGPU_ZE_REORDER=1 never reordered unordered copies");
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, vals));
  ZE_OK(zeMemFree(f.ctx, out));
  fx_fini(&f);
}

Test(fakeze, commands_run_asynchronously) {
  fx_t f;
  fx_init(&f);
  unsigned char *h = fx_host_alloc(&f, 64), *o = fx_host_alloc(&f, 64);
  memset(h, 5, 64);
  memset(o, 0, 64);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  /* The list is held on an event only the host signals: appends behind it must still
   * return (a blocking append would hang here until the test times out). */
  ZE_OK(zeCommandListAppendWaitOnEvents(l, 1, &f.ev[0]));
  for (int i = 0; i < 10; i++) ZE_OK(zeCommandListAppendMemoryCopy(l, o, h, 64, NULL, 0, NULL));
  usleep(10000);
  cr_assert_eq(o[0], 0, "a copy ran before the list's wait was satisfied");
  ZE_OK(zeEventHostSignal(f.ev[0]));
  ZE_OK(fx_sync(&f, l));
  cr_assert_eq(o[63], 5);
  ZE_OK(zeCommandListDestroy(l));
  /* a synchronous-mode list completes each command before the append returns */
  l = fx_list(&f, 0, 1, 1);
  memset(h, 9, 64);
  ZE_OK(zeCommandListAppendMemoryCopy(l, o, h, 64, NULL, 0, NULL));
  cr_assert_eq(o[0], 9);
  cr_assert_eq(o[63], 9);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, h));
  ZE_OK(zeMemFree(f.ctx, o));
  fx_fini(&f);
}

/* ------------------------------------------------------------------ events */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

Test(fakeze, event_host_semantics) {
  fx_t f;
  fx_init(&f);
  ze_event_handle_t e = f.ev[0];
  cr_assert_eq(zeEventQueryStatus(e), ZE_RESULT_NOT_READY);
  cr_assert_eq(zeEventHostSynchronize(e, 0), ZE_RESULT_NOT_READY);
  double t0 = now_ms();
  cr_assert_eq(zeEventHostSynchronize(e, 30ull * 1000 * 1000), ZE_RESULT_NOT_READY);
  cr_assert_geq(now_ms() - t0, 29.0);
  ZE_OK(zeEventHostSignal(e));
  ZE_OK(zeEventQueryStatus(e));
  ZE_OK(zeEventHostSynchronize(e, 0));
  ZE_OK(zeEventHostSignal(e)); /* signalling twice is allowed */
  ZE_OK(zeEventHostReset(e));
  cr_assert_eq(zeEventQueryStatus(e), ZE_RESULT_NOT_READY);
  /* same index twice: refused */
  ze_event_desc_t ed = {ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, 0, 0, 0};
  ze_event_handle_t dup = NULL;
  cr_assert_eq(zeEventCreate(f.pool, &ed, &dup), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  ed.index = 8;
  cr_assert_eq(zeEventCreate(f.pool, &ed, &dup), ZE_RESULT_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(fakeze_spec_violations(), 1);
  for (int i = 0; i < 8; i++) ZE_OK(zeEventDestroy(f.ev[i]));
  ZE_OK(zeEventPoolDestroy(f.pool));
  ZE_OK(zeContextDestroy(f.ctx));
}

Test(fakeze, device_waits_on_events) {
  fx_t f;
  fx_init(&f);
  unsigned char *h = fx_host_alloc(&f, 16), *o = fx_host_alloc(&f, 16);
  memset(h, 7, 16);
  memset(o, 0, 16);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  /* the copy waits for ev0, which only the host signals */
  ZE_OK(zeCommandListAppendMemoryCopy(l, o, h, 16, f.ev[1], 1, &f.ev[0]));
  ZE_OK(zeCommandListAppendBarrier(l, f.ev[2], 0, NULL));
  usleep(30000);
  cr_assert_eq(zeEventQueryStatus(f.ev[1]), ZE_RESULT_NOT_READY);
  cr_assert_eq(zeEventQueryStatus(f.ev[2]), ZE_RESULT_NOT_READY);
  cr_assert_eq(o[0], 0, "the copy ran before its wait event was signalled");
  ZE_OK(zeEventHostSignal(f.ev[0]));
  ZE_OK(zeEventHostSynchronize(f.ev[2], UINT64_MAX));
  ZE_OK(zeEventQueryStatus(f.ev[1]));
  cr_assert_eq(o[15], 7);
  /* wait-on-events, signal-event and event-reset commands */
  ZE_OK(zeEventHostReset(f.ev[0]));
  ZE_OK(zeCommandListAppendWaitOnEvents(l, 1, &f.ev[0]));
  ZE_OK(zeCommandListAppendSignalEvent(l, f.ev[3]));
  ZE_OK(zeCommandListAppendEventReset(l, f.ev[1]));
  ZE_OK(zeCommandListAppendBarrier(l, f.ev[4], 0, NULL));
  usleep(20000);
  cr_assert_eq(zeEventQueryStatus(f.ev[3]), ZE_RESULT_NOT_READY);
  ZE_OK(zeEventQueryStatus(f.ev[1]));
  ZE_OK(zeEventHostSignal(f.ev[0]));
  ZE_OK(zeEventHostSynchronize(f.ev[4], UINT64_MAX));
  ZE_OK(zeEventQueryStatus(f.ev[3]));
  cr_assert_eq(zeEventQueryStatus(f.ev[1]), ZE_RESULT_NOT_READY);
  /* appending with a NULL wait list but a count */
  cr_assert_eq(zeCommandListAppendBarrier(l, NULL, 1, NULL), ZE_RESULT_ERROR_INVALID_SIZE);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, h));
  ZE_OK(zeMemFree(f.ctx, o));
  fx_fini(&f);
}

Test(fakeze, destroy_list_waiting_on_event_drops_commands) {
  fx_t f;
  fx_init(&f);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendWaitOnEvents(l, 1, &f.ev[0]));
  ZE_OK(zeCommandListAppendBarrier(l, f.ev[1], 0, NULL));
  usleep(10000);
  ZE_OK(zeCommandListDestroy(l)); /* must not hang */
  cr_assert_eq(fakeze_dropped_commands(), 2);
  cr_assert_eq(zeEventQueryStatus(f.ev[1]), ZE_RESULT_NOT_READY);
  cr_assert_eq(fakeze_live_command_lists(), 0);
  fx_fini(&f);
}

/* -------------------------------------------------------------- lost device */

Test(fakeze, copy_without_peer_access_loses_the_device) {
  setenv("FAKEGPU_P2P", "no", 1);
  fx_t f;
  fx_init(&f);
  ze_bool_t can = 1;
  ZE_OK(zeDeviceCanAccessPeer(f.dev[0], f.dev[1], &can));
  cr_assert_eq(can, 0);
  void *d0 = fx_dev_alloc(&f, 0, 4096), *d1 = fx_dev_alloc(&f, 1, 4096);
  ze_command_list_handle_t l1 = fx_list(&f, 1, 1, 0), l0 = fx_list(&f, 0, 1, 0);
  /* held on ev2 so that both commands are queued before the fault happens */
  ZE_OK(zeCommandListAppendWaitOnEvents(l1, 1, &f.ev[2]));
  ZE_OK(zeCommandListAppendMemoryCopy(l1, d1, d0, 4096, f.ev[0], 0, NULL));
  ZE_OK(zeCommandListAppendBarrier(l1, f.ev[1], 0, NULL)); /* queued behind the fault */
  ZE_OK(zeEventHostSignal(f.ev[2]));
  cr_assert_eq(zeEventHostSynchronize(f.ev[0], UINT64_MAX), ZE_RESULT_ERROR_DEVICE_LOST);
  cr_assert_eq(zeEventHostSynchronize(f.ev[1], UINT64_MAX), ZE_RESULT_ERROR_DEVICE_LOST);
  cr_assert_eq(zeEventQueryStatus(f.ev[1]), ZE_RESULT_ERROR_DEVICE_LOST);
  cr_assert_eq(zeCommandListAppendBarrier(l1, NULL, 0, NULL), ZE_RESULT_ERROR_DEVICE_LOST);
  cr_assert_eq(fakeze_device_lost(1), 1);
  cr_assert_eq(fakeze_device_lost(0), 0);
  /* device 0 is fine: its own memory and host memory */
  unsigned char *h = fx_host_alloc(&f, 16);
  ZE_OK(zeCommandListAppendMemoryCopy(l0, h, d0, 16, NULL, 0, NULL));
  ZE_OK(fx_sync(&f, l0));
  ZE_OK(zeCommandListDestroy(l0));
  ZE_OK(zeCommandListDestroy(l1));
  ZE_OK(zeMemFree(f.ctx, d0));
  ZE_OK(zeMemFree(f.ctx, d1));
  ZE_OK(zeMemFree(f.ctx, h));
  fx_fini(&f);
}

Test(fakeze, copy_past_the_end_loses_the_device) {
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 0, 4096);
  unsigned char *h = fx_host_alloc(&f, 8192);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l, h, d + 100, 4000, NULL, 0, NULL)); /* 100 too many */
  cr_assert_eq(fx_sync(&f, l), ZE_RESULT_ERROR_DEVICE_LOST);
  cr_assert_eq(fakeze_device_lost(0), 1);
  ze_device_mem_alloc_desc_t dd = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  void *x = NULL;
  cr_assert_eq(zeMemAllocDevice(f.ctx, &dd, 64, 0, f.dev[0], &x), ZE_RESULT_ERROR_DEVICE_LOST);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, d));
  ZE_OK(zeMemFree(f.ctx, h));
  fx_fini(&f);
}

Test(fakeze, copy_from_freed_memory_loses_the_device) {
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 0, 4096);
  unsigned char *h = fx_host_alloc(&f, 4096);
  ZE_OK(zeMemFree(f.ctx, d));
  void *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(gone, MAP_FAILED);
  munmap(gone, 4096);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l, h, gone, 4096, NULL, 0, NULL));
  cr_assert_eq(fx_sync(&f, l), ZE_RESULT_ERROR_DEVICE_LOST);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, h));
  fx_fini(&f);
}

Test(fakeze, free_under_a_queued_copy_is_reported_and_faults) {
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 0, 4096), *other = fx_dev_alloc(&f, 0, 4096);
  unsigned char *h = fx_host_alloc(&f, 4096);
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendWaitOnEvents(l, 1, &f.ev[0])); /* hold the list */
  ZE_OK(zeCommandListAppendMemoryCopy(l, h, d + 100, 10, NULL, 0, NULL));
  ZE_OK(zeMemFree(f.ctx, other)); /* untouched by the queued copy: fine */
  cr_assert_eq(fakeze_spec_violations(), 0);
  ZE_OK(zeMemFree(f.ctx, d));
  cr_assert_eq(fakeze_spec_violations(), 1, "freeing memory a queued copy reads was not reported");
  /* A host mapping made now (as ASan's allocator or another thread may) must not land on
   * the freed device addresses, or the copy would read it and succeed by chance. */
  void *host = mmap(d, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(host, MAP_FAILED);
  cr_assert_neq(host, (void *)d, "the freed device addresses were handed to a host mapping");
  ZE_OK(zeEventHostSignal(f.ev[0]));
  cr_assert_eq(fx_sync(&f, l), ZE_RESULT_ERROR_DEVICE_LOST); /* the copy reads freed memory */
  munmap(host, 4096);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, h));
  for (int i = 0; i < 8; i++) zeEventDestroy(f.ev[i]);
  zeEventPoolDestroy(f.pool);
  zeContextDestroy(f.ctx);
}

Test(fakeze, pageable_memory_can_be_refused) {
  setenv("FAKEGPU_ZE_PAGEABLE", "no", 1);
  fx_t f;
  fx_init(&f);
  char *d = fx_dev_alloc(&f, 0, 64);
  char stackbuf[64] = {0};
  ze_command_list_handle_t l = fx_list(&f, 0, 1, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(l, d, stackbuf, 64, NULL, 0, NULL));
  cr_assert_eq(fx_sync(&f, l), ZE_RESULT_ERROR_DEVICE_LOST);
  ZE_OK(zeCommandListDestroy(l));
  ZE_OK(zeMemFree(f.ctx, d));
  fx_fini(&f);
}
