/* The host backend with its streaming stores and single copies counted, registered as
 * "hostcount": tests assert which large collectives store straight into their outputs
 * (reduce_stream), which copy into other ranks' outputs, and who moves which bytes.
 * Register before forking process ranks: each child counts its own calls. */
#ifndef UL_TEST_HOST_COUNT_H
#define UL_TEST_HOST_COUNT_H

#include <criterion/criterion.h>

#include "ul_core.h"

static ul_backend_ops_t count_ops;
static _Atomic long stream_calls;
static ul_result_t (*host_reduce_stream)(ul_backend_comm_t *, void *const *, int, const void *,
                                         const void *, size_t, ul_dtype_t, ul_op_t,
                                         ul_backend_stream_t *);

/* Copies into another rank's output (the test's buffers, by rank): the copy
 * collectives spread by source. my_rank is the calling thread's rank. */
static _Atomic long cross_copies;
static _Atomic long copy_stream_calls; /* every streaming copy */
static _Thread_local int my_rank = -1;
static char *out_of_rank[3];
static size_t out_bytes;
static ul_result_t (*host_copy_stream)(ul_backend_comm_t *, void *, const void *, size_t,
                                       ul_backend_stream_t *);

static ul_result_t counted_copy_stream(ul_backend_comm_t *c, void *dst, const void *src,
                                       size_t bytes, ul_backend_stream_t *s) {
  copy_stream_calls++;
  for (int r = 0; r < 3; r++)
    if (r != my_rank && out_of_rank[r] && (char *)dst >= out_of_rank[r] &&
        (char *)dst < out_of_rank[r] + out_bytes)
      cross_copies++;
  return host_copy_stream(c, dst, src, bytes, s);
}

/* Bytes moved by single copies (cross-memory attach) this process started. */
static _Atomic long peer_read_bytes, peer_write_bytes;
static ul_result_t (*host_peer_read)(ul_backend_comm_t *, int, void *, const void *, size_t);
static ul_result_t (*host_peer_write)(ul_backend_comm_t *, int, void *, const void *, size_t);

static ul_result_t counted_peer_read(ul_backend_comm_t *c, int peer, void *local,
                                     const void *remote, size_t bytes) {
  peer_read_bytes += (long)bytes;
  return host_peer_read(c, peer, local, remote, bytes);
}

static ul_result_t counted_peer_write(ul_backend_comm_t *c, int peer, void *remote,
                                      const void *local, size_t bytes) {
  peer_write_bytes += (long)bytes;
  return host_peer_write(c, peer, remote, local, bytes);
}

/* Each signal this process sends, shown to a test's hook before it goes (NULL: none). */
static void (*signal_seen)(ul_backend_comm_t *, ul_backend_window_t *, int peer, int index);
static ul_result_t (*host_signal)(ul_backend_comm_t *, ul_backend_window_t *, int, int,
                                  ul_backend_stream_t *);

static ul_result_t seen_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                               ul_backend_stream_t *s) {
  if (signal_seen) signal_seen(c, w, peer, index);
  return host_signal(c, w, peer, index, s);
}

static ul_result_t counted_reduce_stream(ul_backend_comm_t *c, void *const *dst, int ndst,
                                         const void *a, const void *b, size_t count,
                                         ul_dtype_t dt, ul_op_t op, ul_backend_stream_t *s) {
  stream_calls++;
  return host_reduce_stream(c, dst, ndst, a, b, count, dt, op, s);
}

static void register_hostcount(void) {
  ul__backend_t *host = NULL;
  cr_assert_eq(ul__registry_find("host", &host), UL_OK, "%s", ul_last_error());
  cr_assert(!ul__op_is_stub((const void *)host->ops.reduce_stream));
  count_ops = host->ops;
  host_reduce_stream = host->ops.reduce_stream;
  count_ops.name = "hostcount";
  count_ops.description = "the host backend with its streaming stores counted";
  count_ops.reduce_stream = counted_reduce_stream;
  host_copy_stream = host->ops.copy_stream;
  count_ops.copy_stream = counted_copy_stream;
  host_peer_read = host->ops.peer_read;
  count_ops.peer_read = counted_peer_read;
  host_peer_write = host->ops.peer_write;
  count_ops.peer_write = counted_peer_write;
  host_signal = host->ops.signal;
  count_ops.signal = seen_signal;
  cr_assert_eq(ul__registry_add(&count_ops, NULL, NULL), UL_OK, "%s", ul_last_error());
}

#endif
