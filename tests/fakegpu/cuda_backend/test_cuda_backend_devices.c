/* The cuda backend under the fake CUDA runtime: ul_comm_init_all, the device each
 * communicator runs on, split, two streams, ul_mem_copy/ul_mem_set and pageable memory.
 * See test_cuda_backend.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unilink/unilink.h>

#include "fakecuda.h"
#include "test_cuda_backend.h"

/* ---------------------------------------------------- ul_comm_init_all */

Test(cuda_backend, init_all_two_devices) {
  counts_t before = counts_now();
  ul_comm_t comms[2] = {NULL, NULL};
  int devs[2] = {2, 1};
  ul_config_t cfg = cfg_on(UL_CONFIG_UNDEF);
  ul_result_t rc = ul_comm_init_all(comms, &cfg, 2, devs);
  cr_assert_eq(rc, UL_OK, "ul_comm_init_all: %s: %s", ul_result_name(rc), ul_last_error());
  for (int r = 0; r < 2; r++) {
    int rank = -1, size = -1, dev = -1;
    cr_assert_eq(ul_comm_rank(comms[r], &rank), UL_OK);
    cr_assert_eq(ul_comm_size(comms[r], &size), UL_OK);
    cr_assert_eq(ul_comm_device(comms[r], &dev), UL_OK);
    cr_assert_eq(rank, r);
    cr_assert_eq(size, 2);
    cr_assert_eq(dev, devs[r]);
  }
  drive_group(comms, 2, 300001);
  for (int r = 0; r < 2; r++) cr_assert_eq(ul_comm_destroy(comms[r]), UL_OK);
  char buf[256];
  cr_assert(counts_equal(before, counts_now(), buf, sizeof buf), "%s", buf);
}

Test(cuda_backend, init_all_bad_device_fails_promptly) {
  ul_comm_t comms[3] = {NULL, NULL, NULL};
  int devs[3] = {0, 1, 7}; /* the fake has 4 GPUs */
  ul_config_t cfg = cfg_on(UL_CONFIG_UNDEF);
  double t0 = now_ms();
  ul_result_t rc = ul_comm_init_all(comms, &cfg, 3, devs);
  double dt = now_ms() - t0;
  cr_assert_eq(rc, UL_ERR_INVALID_ARG, "ul_comm_init_all: %s: %s", ul_result_name(rc),
               ul_last_error());
  cr_assert(dt < TIMEOUT_MS / 4, "took %.0f ms", dt);
  cr_assert(strstr(ul_last_error(), "device 7") != NULL, "error: %s", ul_last_error());
  for (int r = 0; r < 3; r++) cr_assert_null(comms[r]);
  cr_assert_eq(fakecuda_live_streams(), 0);
  cr_assert_eq(fakecuda_registered_ranges(), 0);
}

/* M6 for init: a rank asking for a GPU that does not exist makes every rank fail at
 * once, each naming the cause, instead of the others waiting for their timeout. */
Test(cuda_backend, init_failure_agreed) {
  g_timeout_ms = 8000;
  rank_ctx_t x[2];
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("cuda", &id), UL_OK);
  pthread_t th[2];
  int devs[2] = {0, 7};
  double t0 = now_ms();
  for (int r = 0; r < 2; r++) {
    memset(&x[r], 0, sizeof x[r]);
    x[r].rank = r;
    x[r].nranks = 2;
    x[r].device = devs[r];
    x[r].id = id;
    cr_assert_eq(pthread_create(&th[r], NULL, rank_main, &x[r]), 0);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  double dt = now_ms() - t0;
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(x[r].init_rc, UL_ERR_INVALID_ARG, "rank %d: %s", r, ul_result_name(x[r].init_rc));
    cr_assert(strstr(x[r].why, "device 7") != NULL, "rank %d: %s", r, x[r].why);
  }
  cr_assert(strstr(x[0].why, "rank 1") != NULL, "rank 0: %s", x[0].why);
  cr_assert(dt < g_timeout_ms / 2, "the failure took %.0f ms", dt);
}

/* ------------------------------------------------ devices: exact, split */

static void device_body(rank_ctx_t *x) {
  int dev = -1;
  RCHECK(x, ul_comm_device(x->comm, &dev), "ul_comm_device");
  if (dev != x->device) RFAIL(x, "rank %d: device %d, want %d", x->rank, dev, x->device);
  void *p = NULL;
  RCHECK(x, ul_mem_alloc(x->comm, 4096, &p), "ul_mem_alloc");
  struct cudaPointerAttributes at;
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess || at.type != cudaMemoryTypeDevice ||
      at.device != x->device)
    rank_fail(x, "rank %d: ul_mem_alloc memory is on device %d, want %d", x->rank, at.device,
              x->device);
  ul_mem_free(x->comm, p);
}

Test(cuda_backend, device_is_the_one_asked_for) {
  rank_ctx_t x[2];
  int devs[2] = {3, 2};
  run_threads(x, 2, devs, device_body, NULL);
  destroy_all(x, 2);
}

/* H3: a split child keeps its parent's GPU (reversed keys move every rank). Parent
 * devices are the backend's choice (rank % 4); no peer access, so a child on another
 * GPU than the parent's buffers would fault in its first kernel. */
static void split_body(rank_ctx_t *x) {
  int pdev = -1, cdev = -1, crank = -1;
  RCHECK(x, ul_comm_device(x->comm, &pdev), "ul_comm_device");
  if (pdev != x->rank) RFAIL(x, "rank %d: parent reports device %d, want %d", x->rank, pdev, x->rank);
  ul_comm_t child = NULL;
  RCHECK(x, ul_comm_split(x->comm, 0, x->nranks - x->rank, &child, NULL), "ul_comm_split");
  RCHECK(x, ul_comm_device(child, &cdev), "ul_comm_device");
  RCHECK(x, ul_comm_rank(child, &crank), "ul_comm_rank");
  if (crank != x->nranks - 1 - x->rank)
    rank_fail(x, "rank %d: child rank %d, want %d", x->rank, crank, x->nranks - 1 - x->rank);
  if (cdev != pdev) rank_fail(x, "rank %d: child on device %d, parent on %d", x->rank, cdev, pdev);
  void *p = NULL;
  struct cudaPointerAttributes at;
  memset(&at, 0, sizeof at);
  if (ul_mem_alloc(child, 64, &p) != UL_OK || cudaPointerGetAttributes(&at, p) != cudaSuccess ||
      at.device != pdev)
    rank_fail(x, "rank %d: child's ul_mem_alloc memory is on device %d, parent on %d", x->rank,
              at.device, pdev);
  if (p) ul_mem_free(child, p);
  /* The parent's buffers on the child communicator. */
  const size_t n = 5000;
  int32_t *h = malloc(n * sizeof(int32_t));
  void *din = NULL, *dout = NULL;
  RCHECK(x, ul_mem_alloc(x->comm, n * sizeof(int32_t), &din), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, n * sizeof(int32_t), &dout), "ul_mem_alloc");
  for (size_t i = 0; i < n; i++) h[i] = ar_value(x->rank, i, 0);
  RCHECK(x, ul_mem_copy(din, h, n * sizeof(int32_t), x->comm, NULL), "ul_mem_copy in");
  ul_result_t rc = ul_allreduce(din, dout, n, UL_INT32, UL_SUM, child, NULL);
  if (rc != UL_OK)
    RFAIL(x, "rank %d: allreduce on the child: %s: %s", x->rank, ul_result_name(rc),
          ul_comm_last_error(child));
  RCHECK(x, ul_mem_copy(h, dout, n * sizeof(int32_t), x->comm, NULL), "ul_mem_copy out");
  for (size_t i = 0; i < n; i++) {
    uint32_t want = 0;
    for (int r = 0; r < x->nranks; r++) want += (uint32_t)ar_value(r, i, 0);
    if ((uint32_t)h[i] != want) RFAIL(x, "rank %d: child allreduce element %zu wrong", x->rank, i);
  }
  ul_mem_free(x->comm, din);
  ul_mem_free(x->comm, dout);
  free(h);
  ul_comm_destroy(child);
}

Test(cuda_backend, split_child_keeps_parent_device) {
  setenv("FAKEGPU_P2P", "no", 1);
  rank_ctx_t x[3];
  run_threads(x, 3, NULL, split_body, NULL); /* devices rank % 4: 0, 1, 2 */
  destroy_all(x, 3);
}

/* Two streams of one communicator with collectives in flight at once (allreduce,
 * broadcast, allreduce, allgather alternating, as conformance streams/two-streams):
 * exact results. */
static void two_streams_body(rank_ctx_t *x) {
  const size_t n = 65537, nb = 1023, ng = 7;
  const int iters = x->arg ? *(const int *)x->arg : 4;
  int nr = x->nranks, root = nr - 1;
  ul_stream_t s[2] = {NULL, NULL};
  int32_t *h = malloc(n * sizeof(int32_t) * 2);
  void *a_in, *a_out, *b_in, *b_out, *c_buf, *g_in, *g_out;
  if (!h) RFAIL(x, "out of memory");
  for (int k = 0; k < 2; k++) RCHECK(x, ul_stream_create(x->comm, &s[k]), "ul_stream_create");
  RCHECK(x, ul_mem_alloc(x->comm, nb * 4, &a_in), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, nb * 4, &a_out), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, n * 4, &b_in), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, n * 4, &b_out), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, nb, &c_buf), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, ng * 4, &g_in), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, ng * 4 * (size_t)nr, &g_out), "ul_mem_alloc");
  for (int it = 0; it < iters; it++) {
    for (size_t i = 0; i < n; i++) h[i] = ar_value(x->rank, i, it);
    RCHECK(x, ul_mem_copy(a_in, h, nb * 4, x->comm, NULL), "ul_mem_copy");
    RCHECK(x, ul_mem_copy(b_in, h, n * 4, x->comm, NULL), "ul_mem_copy");
    RCHECK(x, ul_mem_copy(g_in, h, ng * 4, x->comm, NULL), "ul_mem_copy");
    RCHECK(x, ul_mem_set(c_buf, x->rank == root ? 0x40 + it : 0, nb, x->comm, NULL), "ul_mem_set");
    /* enqueue everything before waiting for anything */
    RCHECK(x, ul_allreduce(a_in, a_out, nb, UL_INT32, UL_SUM, x->comm, s[0]), "allreduce s1");
    RCHECK(x, ul_broadcast(c_buf, c_buf, nb, UL_UINT8, root, x->comm, s[1]), "broadcast s2");
    RCHECK(x, ul_allreduce(b_in, b_out, n, UL_INT32, UL_SUM, x->comm, s[0]), "allreduce s1");
    RCHECK(x, ul_allgather(g_in, g_out, ng, UL_INT32, x->comm, s[1]), "allgather s2");
    for (int k = 0; k < 2; k++) RCHECK(x, ul_stream_synchronize(s[k]), "ul_stream_synchronize");
    RCHECK(x, ul_mem_copy(h, b_out, n * 4, x->comm, NULL), "ul_mem_copy out");
    for (size_t i = 0; i < n; i++) {
      uint32_t want = 0;
      for (int r = 0; r < nr; r++) want += (uint32_t)ar_value(r, i, it);
      if ((uint32_t)h[i] != want) RFAIL(x, "rank %d iteration %d: allreduce element %zu wrong", x->rank, it, i);
    }
    RCHECK(x, ul_mem_copy(h, g_out, ng * 4 * (size_t)nr, x->comm, NULL), "ul_mem_copy out");
    for (int r = 0; r < nr; r++)
      for (size_t i = 0; i < ng; i++)
        if (h[(size_t)r * ng + i] != ar_value(r, i, it))
          RFAIL(x, "rank %d iteration %d: allgather block %d element %zu wrong", x->rank, it, r, i);
    uint8_t *hb = (uint8_t *)h;
    RCHECK(x, ul_mem_copy(hb, c_buf, nb, x->comm, NULL), "ul_mem_copy out");
    for (size_t i = 0; i < nb; i++)
      if (hb[i] != 0x40 + it) RFAIL(x, "rank %d iteration %d: broadcast byte %zu wrong", x->rank, it, i);
  }
  for (int k = 0; k < 2; k++) RCHECK(x, ul_stream_destroy(s[k]), "ul_stream_destroy");
  ul_mem_free(x->comm, a_in), ul_mem_free(x->comm, a_out), ul_mem_free(x->comm, b_in);
  ul_mem_free(x->comm, b_out), ul_mem_free(x->comm, c_buf), ul_mem_free(x->comm, g_in);
  ul_mem_free(x->comm, g_out);
  free(h);
}

Test(cuda_backend, two_streams_in_flight) {
  setenv("FAKEGPU_DELAY_US", "800", 1);
  g_timeout_ms = 8000;
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, two_streams_body, NULL);
  destroy_all(x, 2);
}

/* --------------------------------------------- ul_mem_copy / ul_mem_set */

static void memops_body(rank_ctx_t *x) {
  const size_t n = 100003;
  uint8_t *host = malloc(n), *pinned = NULL;
  void *d = NULL, *d2 = NULL;
  if (!host) RFAIL(x, "out of memory");
  RCHECK(x, ul_mem_alloc(x->comm, n, &d), "ul_mem_alloc");
  RCHECK(x, ul_mem_alloc(x->comm, n, &d2), "ul_mem_alloc");
  /* device memset, device -> pageable host */
  RCHECK(x, ul_mem_set(d, 0x5a, n, x->comm, NULL), "ul_mem_set device");
  memset(host, 0, n);
  RCHECK(x, ul_mem_copy(host, d, n, x->comm, NULL), "ul_mem_copy d->h");
  for (size_t i = 0; i < n; i++)
    if (host[i] != 0x5a) RFAIL(x, "ul_mem_set device: byte %zu is 0x%02x", i, host[i]);
  /* pageable host -> device -> device (offsets) -> pinned host, on a user stream */
  for (size_t i = 0; i < n; i++) host[i] = (uint8_t)(i * 7 + x->rank);
  ul_stream_t st = NULL;
  RCHECK(x, ul_stream_create(x->comm, &st), "ul_stream_create");
  if (cudaMallocHost((void **)&pinned, n) != cudaSuccess) RFAIL(x, "cudaMallocHost");
  memset(pinned, 0, n);
  RCHECK(x, ul_mem_copy(d, host, n, x->comm, st), "ul_mem_copy h->d");
  RCHECK(x, ul_mem_copy((char *)d2 + 1, (char *)d + 3, n - 3, x->comm, st), "ul_mem_copy d->d");
  RCHECK(x, ul_mem_set(d2, 0xc3, 1, x->comm, st), "ul_mem_set on stream");
  RCHECK(x, ul_mem_copy(pinned, d2, n, x->comm, st), "ul_mem_copy d->pinned");
  RCHECK(x, ul_stream_synchronize(st), "ul_stream_synchronize");
  if (pinned[0] != 0xc3) RFAIL(x, "byte 0 is 0x%02x, want 0xc3", pinned[0]);
  for (size_t i = 1; i + 2 < n; i++)
    if (pinned[i] != (uint8_t)((i + 2) * 7 + x->rank))
      RFAIL(x, "d->d copy: byte %zu is 0x%02x", i, pinned[i]);
  /* host memset through the backend (ordered on the stream) */
  RCHECK(x, ul_mem_set(pinned, 0x11, n, x->comm, st), "ul_mem_set pinned host");
  RCHECK(x, ul_mem_set(host, 0x22, n, x->comm, NULL), "ul_mem_set host");
  RCHECK(x, ul_stream_synchronize(st), "ul_stream_synchronize");
  for (size_t i = 0; i < n; i++)
    if (pinned[i] != 0x11 || host[i] != 0x22)
      RFAIL(x, "host ul_mem_set: byte %zu is 0x%02x/0x%02x", i, pinned[i], host[i]);
  RCHECK(x, ul_stream_destroy(st), "ul_stream_destroy");
  cudaFreeHost(pinned);
  ul_mem_free(x->comm, d);
  ul_mem_free(x->comm, d2);
  free(host);
}

Test(cuda_backend, mem_copy_and_mem_set) {
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, memops_body, NULL);
  destroy_all(x, 2);
}

/* The core asks mem_kind and refuses pageable host memory for a collective. */
static void pageable_body(rank_ctx_t *x) {
  int32_t *h = calloc(1024, sizeof(int32_t));
  void *d = NULL;
  RCHECK(x, ul_mem_alloc(x->comm, 1024 * sizeof(int32_t), &d), "ul_mem_alloc");
  ul_result_t rc = ul_allreduce(h, d, 1024, UL_INT32, UL_SUM, x->comm, NULL);
  if (rc != UL_ERR_INVALID_ARG)
    rank_fail(x, "rank %d: allreduce from pageable host memory returned %s", x->rank,
              ul_result_name(rc));
  ul_mem_free(x->comm, d);
  free(h);
}

Test(cuda_backend, collective_refuses_pageable_host_memory) {
  rank_ctx_t x[2];
  int devs[2] = {0, 1};
  run_threads(x, 2, devs, pageable_body, NULL);
  destroy_all(x, 2);
}
