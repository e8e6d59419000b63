/* UNILINK_TEST_LINK_SHARED
 * The shipped ze plugin (libunilink-ze.so, unmodified) on the fake Level Zero loader,
 * through the public API: collectives on device memory with thread and process ranks,
 * and what the plugin leaves behind in the driver once its communicators are gone.
 * Data goes in and out of device memory through the fake directly (a context and
 * command list of the test's own), so these tests do not depend on the plugin's
 * mem_copy. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <level_zero/ze_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unilink/unilink.h>
#include <unistd.h>

#include "fakeze.h"

#define UL_OKAY(call)                                                                       \
  do {                                                                                      \
    ul_result_t _r = (call);                                                                \
    cr_assert_eq(_r, UL_OK, "%s: %s (%s)", #call, ul_result_name(_r), ul_last_error());     \
  } while (0)

/* The test's own path to device memory. */
typedef struct stage {
  ze_context_handle_t ctx;
  ze_device_handle_t dev[8];
  ze_command_list_handle_t list[8];
  ze_event_pool_handle_t pool;
  ze_event_handle_t ev[8];
} stage_t;

static void stage_open(stage_t *s, int ndev) {
  memset(s, 0, sizeof(*s));
  cr_assert_eq(zeInit(ZE_INIT_FLAG_GPU_ONLY), ZE_RESULT_SUCCESS);
  ze_driver_handle_t drv;
  uint32_t n = 1;
  cr_assert_eq(zeDriverGet(&n, &drv), ZE_RESULT_SUCCESS);
  n = 8;
  cr_assert_eq(zeDeviceGet(drv, &n, s->dev), ZE_RESULT_SUCCESS);
  cr_assert_geq((int)n, ndev);
  ze_context_desc_t cd = {ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
  cr_assert_eq(zeContextCreate(drv, &cd, &s->ctx), ZE_RESULT_SUCCESS);
  ze_event_pool_desc_t pd = {ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL,
                             ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 8};
  cr_assert_eq(zeEventPoolCreate(s->ctx, &pd, 0, NULL, &s->pool), ZE_RESULT_SUCCESS);
  for (int i = 0; i < ndev; i++) {
    ze_event_desc_t ed = {ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, (uint32_t)i, 0, 0};
    cr_assert_eq(zeEventCreate(s->pool, &ed, &s->ev[i]), ZE_RESULT_SUCCESS);
    ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, 0, 0, 0,
                                  ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
                                  ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    cr_assert_eq(zeCommandListCreateImmediate(s->ctx, s->dev[i], &qd, &s->list[i]), ZE_RESULT_SUCCESS);
  }
}

static void stage_close(stage_t *s, int ndev) {
  for (int i = 0; i < ndev; i++) {
    zeCommandListDestroy(s->list[i]);
    zeEventDestroy(s->ev[i]);
  }
  zeEventPoolDestroy(s->pool);
  zeContextDestroy(s->ctx);
}

/* Copy on device @d's list and wait: 0 or the failing ze result. */
static int stage_copy(stage_t *s, int d, void *dst, const void *src, size_t n) {
  ze_result_t r = zeCommandListAppendMemoryCopy(s->list[d], dst, src, n, NULL, 0, NULL);
  if (r == ZE_RESULT_SUCCESS) r = zeCommandListAppendBarrier(s->list[d], s->ev[d], 0, NULL);
  if (r == ZE_RESULT_SUCCESS) r = zeEventHostSynchronize(s->ev[d], UINT64_MAX);
  zeEventHostReset(s->ev[d]);
  return (int)r;
}

static float input(int rank, size_t i) { return (float)((i % 1000) + 1000 * rank); }

/* One rank: allreduce (sum) and broadcast on ul_mem_alloc buffers, checked exactly.
 * 0 on success, else a step number (the message goes to stderr). */
static int rank_body(ul_comm_t comm, stage_t *s, int rank, int nranks, int dev, size_t count) {
  size_t bytes = count * sizeof(float);
  float *host = malloc(bytes), *want = malloc(bytes);
  void *send = NULL, *recv = NULL;
  int rc = 0;
  if (!host || !want) return 1;
  if (ul_mem_alloc(comm, bytes, &send) != UL_OK || ul_mem_alloc(comm, bytes, &recv) != UL_OK) {
    rc = 2;
    goto out;
  }
  for (size_t i = 0; i < count; i++) host[i] = input(rank, i);
  if (stage_copy(s, dev, send, host, bytes)) {
    rc = 3;
    goto out;
  }
  ul_result_t r = ul_allreduce(send, recv, count, UL_FP32, UL_SUM, comm, NULL);
  if (r != UL_OK) {
    fprintf(stderr, "rank %d: ul_allreduce: %s (%s)\n", rank, ul_result_name(r), ul_comm_last_error(comm));
    rc = 4;
    goto out;
  }
  memset(host, 0, bytes);
  if (stage_copy(s, dev, host, recv, bytes)) {
    rc = 5;
    goto out;
  }
  for (size_t i = 0; i < count; i++) {
    want[i] = 0;
    for (int q = 0; q < nranks; q++) want[i] += input(q, i);
  }
  if (memcmp(host, want, bytes) != 0) {
    fprintf(stderr, "rank %d: allreduce result wrong\n", rank);
    rc = 6;
    goto out;
  }
  r = ul_broadcast(send, recv, count, UL_FP32, nranks - 1, comm, NULL);
  if (r != UL_OK) {
    fprintf(stderr, "rank %d: ul_broadcast: %s (%s)\n", rank, ul_result_name(r), ul_comm_last_error(comm));
    rc = 7;
    goto out;
  }
  if (stage_copy(s, dev, host, recv, bytes)) {
    rc = 8;
    goto out;
  }
  for (size_t i = 0; i < count && !rc; i++)
    if (host[i] != input(nranks - 1, i)) {
      fprintf(stderr, "rank %d: broadcast element %zu = %g\n", rank, i, host[i]);
      rc = 9;
    }
out:
  if (send) ul_mem_free(comm, send);
  if (recv) ul_mem_free(comm, recv);
  free(host);
  free(want);
  return rc;
}

typedef struct job {
  ul_comm_t comm;
  stage_t *s;
  int rank, nranks;
  size_t count;
  int rc;
} job_t;

static void *job_main(void *arg) {
  job_t *j = arg;
  j->rc = rank_body(j->comm, j->s, j->rank, j->nranks, j->rank, j->count);
  ul_result_t r = ul_comm_finalize(j->comm); /* collective: every rank in its thread */
  if (r != UL_OK && !j->rc) {
    fprintf(stderr, "rank %d: ul_comm_finalize: %s (%s)\n", j->rank, ul_result_name(r),
            ul_comm_last_error(j->comm));
    j->rc = 20;
  }
  return NULL;
}

static void run_threads(int nranks, size_t count) {
  stage_t s;
  stage_open(&s, nranks);
  ul_comm_t comms[8];
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "ze";
  cfg.timeout_ms = 30000;
  UL_OKAY(ul_comm_init_all(comms, &cfg, nranks, NULL));
  job_t jobs[8];
  pthread_t th[8];
  for (int r = 0; r < nranks; r++) {
    jobs[r] = (job_t){comms[r], &s, r, nranks, count, -1};
    cr_assert_eq(pthread_create(&th[r], NULL, job_main, &jobs[r]), 0);
  }
  for (int r = 0; r < nranks; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < nranks; r++) cr_expect_eq(jobs[r].rc, 0, "rank %d failed at step %d", r, jobs[r].rc);
  for (int r = 0; r < nranks; r++) UL_OKAY(ul_comm_destroy(comms[r]));
  stage_close(&s, nranks);
  /* The plugin's context stays (it lives until the plugin is unloaded); nothing else. */
  cr_assert_eq(fakeze_live_allocations(), 0, "device/host allocations left behind");
  cr_assert_eq(fakeze_live_command_lists(), 0, "command lists left behind");
  cr_assert_eq(fakeze_live_event_pools(), 0, "event pools left behind");
  cr_assert_eq(fakeze_spec_violations(), 0);
  for (int d = 0; d < nranks; d++) cr_assert_eq(fakeze_device_lost(d), 0);
}

Test(fakeze_plugin, available) {
  ul_backend_info_t info = {.struct_size = sizeof(info)};
  UL_OKAY(ul_backend_query("ze", &info));
  cr_assert(info.available, "ze unavailable on the fake: %s", info.reason);
  cr_assert(strstr(info.version, "Level Zero API 1.4"), "version %s", info.version);
}

Test(fakeze_plugin, unavailable_without_driver) {
  setenv("FAKEGPU_ZE_NO_DEVICE", "1", 1);
  ul_backend_info_t info = {.struct_size = sizeof(info)};
  UL_OKAY(ul_backend_query("ze", &info));
  cr_assert_not(info.available);
  cr_assert(strstr(info.reason, "zeDriverGet"), "reason: %s", info.reason);
}

Test(fakeze_plugin, thread_ranks_2) { run_threads(2, 100000); }

Test(fakeze_plugin, thread_ranks_3_with_delays) {
  setenv("FAKEGPU_DELAY_US", "200", 1);
  setenv("FAKEGPU_SEED", "5", 1);
  run_threads(3, 20000);
}

Test(fakeze_plugin, thread_ranks_reordered) {
  /* Commands of a list between barriers run in any order: the plugin must order what
   * depends on what. */
  setenv("FAKEGPU_ZE_REORDER", "1", 1);
  setenv("FAKEGPU_DELAY_US", "50", 1);
  run_threads(2, 50000);
}

Test(fakeze_plugin, no_peer_access_is_refused) {
  setenv("FAKEGPU_P2P", "no", 1);
  ul_comm_t comms[2] = {0};
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "ze";
  cfg.timeout_ms = 20000;
  ul_result_t r = ul_comm_init_all(comms, &cfg, 2, NULL);
  cr_assert_eq(r, UL_ERR_UNSUPPORTED, "got %s", ul_result_name(r));
  cr_assert(strstr(ul_last_error(), "zeDeviceCanAccessPeer"), "error: %s", ul_last_error());
}

/* Process ranks: each child is one rank on device = rank; windows cross processes
 * through IPC handles. The child exits 0 when every check passed, 1..99 when a step
 * failed, 100..103 when the collectives worked but IPC resources outlived the
 * communicator (see the end). */
static int process_rank(ul_unique_id_t id, int rank, int nranks) {
  stage_t s;
  stage_open(&s, nranks);
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.timeout_ms = 30000;
  cfg.device = rank;
  ul_comm_t comm = NULL;
  ul_result_t r = ul_comm_init_rank(&comm, &cfg, nranks, id, rank);
  if (r != UL_OK) {
    fprintf(stderr, "rank %d: ul_comm_init_rank: %s (%s)\n", rank, ul_result_name(r), ul_last_error());
    return 1;
  }
  int rc = rank_body(comm, &s, rank, nranks, rank, 30000);
  if (rc) return 10 + rc;
  int opened = fakeze_open_ipc();
  if (ul_comm_finalize(comm) != UL_OK || ul_comm_destroy(comm) != UL_OK) return 30;
  stage_close(&s, nranks);
  if (fakeze_live_allocations() != 0 || fakeze_live_command_lists() != 0) return 31;
  if (fakeze_spec_violations() != 0) return 32;
  /* What outlives the communicator: 100 + 1 (IPC mappings still open, finding H4)
   * + 2 (IPC handles never put back with zeMemPutIpcHandle, newer loader, finding M7). */
  int left = fakeze_open_ipc(), out = fakeze_ipc_handles_out();
  if (left) fprintf(stderr, "rank %d: %d of %d IPC mappings still open after ul_comm_destroy\n",
                    rank, left, opened);
  if (out) fprintf(stderr, "rank %d: %d IPC handle(s) never put back\n", rank, out);
  return left || out ? 100 + (left ? 1 : 0) + (out ? 2 : 0) : 0;
}

static void run_processes(int nranks, int *status) {
  ul_unique_id_t id;
  UL_OKAY(ul_get_unique_id("ze", &id));
  pid_t pid[8];
  for (int r = 0; r < nranks; r++) {
    pid[r] = fork();
    cr_assert_geq(pid[r], 0);
    if (pid[r] == 0) _exit(process_rank(id, r, nranks));
  }
  for (int r = 0; r < nranks; r++) {
    int st = 0;
    cr_assert_eq(waitpid(pid[r], &st, 0), pid[r]);
    status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 200 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  }
}

Test(fakeze_plugin, process_ranks_2) {
  int st[2];
  run_processes(2, st);
  for (int r = 0; r < 2; r++)
    cr_assert(st[r] == 0 || (st[r] > 100 && st[r] < 104), "rank %d exited %d", r, st[r]);
}

/* Findings H4 and M7: windows (and so their zeMemOpenIpcHandle mappings) must not
 * outlive the communicator, and on a loader that has zeMemPutIpcHandle every exported
 * handle is put back. */
Test(fakeze_plugin, process_ranks_release_ipc_mappings) {
  int st[2];
  run_processes(2, st);
  for (int r = 0; r < 2; r++)
    cr_assert_eq(st[r], 0, "rank %d exited %d (101: IPC mappings left open, 102: IPC handles "
                 "not put back, 103: both)", r, st[r]);
}
