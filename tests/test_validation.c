// UNILINK_TEST_LINK_SHARED
/* Every validation rule of the public API: the call returns UL_ERR_INVALID_ARG, says
 * which argument and why, writes nothing, and the communicator stays usable. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include <unilink/unilink.h>

static ul_comm_t comm;
static int32_t sendb[64], recvb[64];

static void setup(void) {
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("host", &id), UL_OK, "%s", ul_last_error());
  cr_assert_eq(ul_comm_init_rank(&comm, NULL, 1, id, 0), UL_OK, "%s", ul_last_error());
  for (int i = 0; i < 64; i++) sendb[i] = i + 1, recvb[i] = -5;
}

static void teardown(void) { ul_comm_destroy(comm); }

/* The call failed as invalid, said something naming `word`, and changed nothing. */
static void expect_invalid(ul_result_t rc, const char *word) {
  cr_expect_eq(rc, UL_ERR_INVALID_ARG, "expected UL_ERR_INVALID_ARG, got %s", ul_result_name(rc));
  const char *msg = ul_comm_last_error(comm);
  cr_expect(strstr(msg, word) != NULL, "error text '%s' should mention '%s'", msg, word);
  for (int i = 0; i < 64; i++) {
    cr_expect_eq(recvb[i], -5, "recvbuf[%d] was written", i);
    cr_expect_eq(sendb[i], i + 1, "sendbuf[%d] was written", i);
  }
  /* still usable */
  int32_t x = 3, y = 0;
  cr_expect_eq(ul_allreduce(&x, &y, 1, UL_INT32, UL_SUM, comm, NULL), UL_OK, "%s", ul_comm_last_error(comm));
  cr_expect_eq(y, 3);
}

TestSuite(validation, .init = setup, .fini = teardown, .timeout = 30);

Test(validation, null_comm) {
  cr_expect_eq(ul_allreduce(sendb, recvb, 4, UL_INT32, UL_SUM, NULL, NULL), UL_ERR_INVALID_ARG);
  cr_expect(strstr(ul_last_error(), "comm") != NULL, "%s", ul_last_error());
}

Test(validation, null_sendbuf) { expect_invalid(ul_allreduce(NULL, recvb, 4, UL_INT32, UL_SUM, comm, NULL), "sendbuf"); }
Test(validation, null_recvbuf) { expect_invalid(ul_allreduce(sendb, NULL, 4, UL_INT32, UL_SUM, comm, NULL), "recvbuf"); }
Test(validation, count_overflow) {
  expect_invalid(ul_allreduce(sendb, recvb, SIZE_MAX / 2, UL_INT32, UL_SUM, comm, NULL), "overflow");
}
Test(validation, unknown_dtype) { expect_invalid(ul_allreduce(sendb, recvb, 4, (ul_dtype_t)99, UL_SUM, comm, NULL), "dtype"); }
Test(validation, unknown_op) { expect_invalid(ul_allreduce(sendb, recvb, 4, UL_INT32, (ul_op_t)42, comm, NULL), "op"); }
Test(validation, negative_dtype) { expect_invalid(ul_broadcast(sendb, recvb, 4, (ul_dtype_t)-1, 0, comm, NULL), "dtype"); }
Test(validation, root_out_of_range) {
  expect_invalid(ul_broadcast(sendb, recvb, 4, UL_INT32, 1, comm, NULL), "root");
  expect_invalid(ul_reduce(sendb, recvb, 4, UL_INT32, UL_SUM, -1, comm, NULL), "root");
  expect_invalid(ul_gather(sendb, recvb, 4, UL_INT32, 5, comm, NULL), "root");
  expect_invalid(ul_scatter(sendb, recvb, 4, UL_INT32, 1, comm, NULL), "root");
}
Test(validation, partial_overlap_allreduce) {
  expect_invalid(ul_allreduce(sendb, sendb + 1, 8, UL_INT32, UL_SUM, comm, NULL), "overlap");
}
Test(validation, wrong_inplace_offset_allgather) {
  /* one rank: in place needs sendbuf == recvbuf; recvbuf+1 overlaps otherwise */
  expect_invalid(ul_allgather(recvb + 1, recvb, 4, UL_INT32, comm, NULL), "in place");
}
Test(validation, alltoall_in_place_other_offset) {
  expect_invalid(ul_alltoall(sendb, sendb + 2, 4, UL_INT32, comm, NULL), "overlap");
}
Test(validation, peer_out_of_range) {
  expect_invalid(ul_send(sendb, 4, UL_INT32, 1, comm, NULL), "peer");
  expect_invalid(ul_recv(recvb, 4, UL_INT32, -1, comm, NULL), "peer");
}
Test(validation, send_null_buffer) { expect_invalid(ul_send(NULL, 4, UL_INT32, 0, comm, NULL), "buf"); }
Test(validation, count_zero_null_ok) {
  cr_expect_eq(ul_allreduce(NULL, NULL, 0, UL_INT32, UL_SUM, comm, NULL), UL_OK, "%s", ul_comm_last_error(comm));
}
Test(validation, stream_of_other_comm) {
  ul_unique_id_t id;
  ul_comm_t other;
  cr_assert_eq(ul_get_unique_id("host", &id), UL_OK);
  cr_assert_eq(ul_comm_init_rank(&other, NULL, 1, id, 0), UL_OK);
  ul_stream_t s;
  cr_assert_eq(ul_stream_create(other, &s), UL_OK);
  expect_invalid(ul_allreduce(sendb, recvb, 4, UL_INT32, UL_SUM, comm, s), "stream");
  ul_stream_destroy(s);
  ul_comm_destroy(other);
}
Test(validation, init_rank_args) {
  ul_unique_id_t id;
  ul_comm_t c = (ul_comm_t)1;
  cr_assert_eq(ul_get_unique_id("host", &id), UL_OK);
  cr_expect_eq(ul_comm_init_rank(NULL, NULL, 1, id, 0), UL_ERR_INVALID_ARG);
  cr_expect_eq(ul_comm_init_rank(&c, NULL, 0, id, 0), UL_ERR_INVALID_ARG);
  cr_expect(c == NULL);
  cr_expect_eq(ul_comm_init_rank(&c, NULL, 2, id, 2), UL_ERR_INVALID_ARG);
  cr_expect(strstr(ul_last_error(), "rank") != NULL, "%s", ul_last_error());
  memset(id.internal, 0x5a, 16);
  cr_expect_eq(ul_comm_init_rank(&c, NULL, 1, id, 0), UL_ERR_INVALID_ARG);
  cr_expect(strstr(ul_last_error(), "unique id") != NULL, "%s", ul_last_error());
  ul_config_t bad = UL_CONFIG_INIT;
  bad.struct_size = 3;
  cr_expect_eq(ul_get_unique_id("host", &id), UL_OK);
  cr_expect_eq(ul_comm_init_rank(&c, &bad, 1, id, 0), UL_ERR_INVALID_ARG);
}
Test(validation, unknown_backend) {
  ul_unique_id_t id;
  cr_expect_eq(ul_get_unique_id("no-such-backend", &id), UL_ERR_NOT_FOUND);
  cr_expect_eq(ul_get_unique_id("host", NULL), UL_ERR_INVALID_ARG);
}
Test(validation, split_args) {
  ul_comm_t sub;
  expect_invalid(ul_comm_split(comm, -5, 0, &sub, NULL), "color");
  expect_invalid(ul_comm_split(comm, 0, 0, NULL, NULL), "newcomm");
}
Test(validation, queries) {
  int x;
  expect_invalid(ul_comm_rank(comm, NULL), "NULL");
  cr_expect_eq(ul_comm_size(NULL, &x), UL_ERR_INVALID_ARG);
  ul_link_info_t links[1];
  expect_invalid(ul_comm_topology(comm, links, 0), "nlinks");
  ul_call_info_t info = {.struct_size = 1};
  expect_invalid(ul_comm_last_call(comm, &info), "struct_size");
}
Test(validation, memory_and_windows) {
  void *p;
  expect_invalid(ul_mem_alloc(comm, 0, &p), "size");
  expect_invalid(ul_mem_alloc(comm, 64, NULL), "ptr");
  ul_window_t w;
  cr_assert_eq(ul_mem_alloc(comm, 4096, &p), UL_OK, "%s", ul_comm_last_error(comm));
  cr_assert_eq(ul_window_register(comm, p, 4096, &w), UL_OK, "%s", ul_comm_last_error(comm));
  expect_invalid(ul_put(sendb, 64, 0, w, 4090, NULL), "outside");
  expect_invalid(ul_get(recvb, 64, 1, w, 0, NULL), "peer");
  expect_invalid(ul_put(NULL, 64, 0, w, 0, NULL), "NULL");
  expect_invalid(ul_signal(0, w, UL_WINDOW_SIGNALS, NULL), "index");
  expect_invalid(ul_wait_signal(w, -1, 1, NULL), "index");
  cr_expect_eq(ul_window_deregister(w), UL_OK);
  cr_expect_eq(ul_mem_free(comm, p), UL_OK);
}
Test(validation, group_misuse) {
  cr_expect_eq(ul_group_end(), UL_ERR_INVALID_USAGE);
}
Test(validation, result_names) {
  cr_expect_str_eq(ul_result_name(UL_ERR_TIMEOUT), "UL_ERR_TIMEOUT");
  cr_expect(strlen(ul_result_string(UL_ERR_PEER_LOST)) > 0);
}
