/* Pure unilink <-> NCCL translation (backends/nccl/nccl_map.c): dtype/op mapping,
 * unsupported combinations, ncclResult_t mapping with NCCL's message kept, and the
 * argument translation of collectives. Needs nccl.h at build time, never a GPU. */
#include <criterion/criterion.h>
#include <string.h>
#include <unilink/unilink.h>

#ifdef UNILINK_HAVE_NCCL_MAP
#include "nccl_map.h"

Test(nccl_map, dtype_table, .timeout = 10) {
  static const struct { ul_dtype_t ul; ncclDataType_t nc; } t[] = {
      {UL_INT8, ncclInt8},       {UL_UINT8, ncclUint8},       {UL_INT32, ncclInt32},
      {UL_UINT32, ncclUint32},   {UL_INT64, ncclInt64},       {UL_UINT64, ncclUint64},
      {UL_FP16, ncclFloat16},    {UL_BF16, ncclBfloat16},     {UL_FP32, ncclFloat32},
      {UL_FP64, ncclFloat64},    {UL_FP8_E4M3, ncclFloat8e4m3}, {UL_FP8_E5M2, ncclFloat8e5m2}};
  cr_assert_eq(sizeof(t) / sizeof(t[0]), UL_DTYPE_COUNT);
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    ncclDataType_t out = (ncclDataType_t)-1;
    cr_assert_eq(ulnccl_dtype(t[i].ul, &out), UL_OK, "dtype %d", (int)t[i].ul);
    cr_assert_eq(out, t[i].nc, "dtype %d -> %d, want %d", (int)t[i].ul, (int)out, (int)t[i].nc);
  }
  ncclDataType_t keep = ncclInt32;
  cr_assert_eq(ulnccl_dtype(UL_DTYPE_COUNT, &keep), UL_ERR_INVALID_ARG);
  cr_assert_eq(ulnccl_dtype((ul_dtype_t)-1, &keep), UL_ERR_INVALID_ARG);
  cr_assert_eq(keep, ncclInt32, "output untouched on error");
}

Test(nccl_map, op_table, .timeout = 10) {
  ncclRedOp_t o;
  cr_assert_eq(ulnccl_op(UL_SUM, &o), UL_OK); cr_assert_eq(o, ncclSum);
  cr_assert_eq(ulnccl_op(UL_PROD, &o), UL_OK); cr_assert_eq(o, ncclProd);
  cr_assert_eq(ulnccl_op(UL_MIN, &o), UL_OK); cr_assert_eq(o, ncclMin);
  cr_assert_eq(ulnccl_op(UL_MAX, &o), UL_OK); cr_assert_eq(o, ncclMax);
  cr_assert_eq(ulnccl_op(UL_AVG, &o), UL_OK); cr_assert_eq(o, ncclAvg);
  o = ncclSum;
  cr_assert_eq(ulnccl_op(UL_OP_COUNT, &o), UL_ERR_INVALID_ARG);
  cr_assert_eq(o, ncclSum);
}

/* L1: fp8 data movement runs on every GPU; only fp8 reductions need sm90 (on every rank:
 * the backend passes the communicator's oldest GPU), and NCCL >= 2.24. */
Test(nccl_map, fp8_moves_anywhere_reduces_on_sm90, .timeout = 10) {
  char why[200];
  cr_assert_eq(ulnccl_dtype_supported(UL_FP8_E4M3, 22809, 9, why, sizeof why), UL_OK);
  cr_assert_eq(ulnccl_dtype_supported(UL_FP8_E5M2, 22809, 10, why, sizeof why), UL_OK);
  cr_assert_eq(ulnccl_dtype_supported(UL_FP8_E4M3, 22809, 8, why, sizeof why), UL_OK);
  cr_assert_eq(ulnccl_dtype_supported(UL_FP8_E5M2, 22809, 7, why, sizeof why), UL_OK);
  cr_assert_eq(ulnccl_reduction_supported(UL_FP8_E4M3, UL_SUM, 22809, 9, why, sizeof why), UL_OK);
  cr_assert_eq(ulnccl_reduction_supported(UL_FP8_E4M3, UL_SUM, 22809, 8, why, sizeof why),
               UL_ERR_UNSUPPORTED);
  cr_assert(strstr(why, "compute capability 9.0") != NULL, "why: %s", why);
  cr_assert(strstr(why, "sm8") != NULL, "why: %s", why);
  cr_assert(strstr(why, "data movement works") != NULL, "why: %s", why);
  cr_assert_eq(ulnccl_reduction_supported(UL_FP8_E5M2, UL_MAX, 22809, 7, why, sizeof why),
               UL_ERR_UNSUPPORTED);
  cr_assert_eq(ulnccl_dtype_supported(UL_FP8_E5M2, 22305, 9, why, sizeof why), UL_ERR_UNSUPPORTED);
  cr_assert(strstr(why, "2.24") != NULL, "why: %s", why);
  cr_assert_eq(ulnccl_reduction_supported(UL_FP8_E5M2, UL_SUM, 22305, 9, why, sizeof why),
               UL_ERR_UNSUPPORTED);
  /* device unknown: only the library version decides */
  cr_assert_eq(ulnccl_reduction_supported(UL_FP8_E4M3, UL_SUM, 22809, 0, why, sizeof why), UL_OK);
  cr_assert_eq(ulnccl_dtype_supported(UL_BF16, 20907, 8, why, sizeof why), UL_ERR_UNSUPPORTED);
  cr_assert_eq(ulnccl_dtype_supported(UL_BF16, 21000, 8, why, sizeof why), UL_OK);
  cr_assert_eq(ulnccl_dtype_supported(UL_FP32, 20000, 7, why, sizeof why), UL_OK);
  cr_assert_eq(why[0], '\0');
  cr_assert_eq(ulnccl_reduction_supported(UL_FP32, UL_AVG, 20907, 8, why, sizeof why),
               UL_ERR_UNSUPPORTED);
  cr_assert_eq(ulnccl_reduction_supported(UL_FP32, UL_AVG, 21000, 8, why, sizeof why), UL_OK);
  cr_assert_eq(ulnccl_reduction_supported(UL_FP32, UL_OP_COUNT, 22809, 9, why, sizeof why),
               UL_ERR_INVALID_ARG);
}

Test(nccl_map, dtype_masks, .timeout = 10) {
  unsigned all = (1u << UL_DTYPE_COUNT) - 1;
  unsigned fp8 = (1u << UL_FP8_E4M3) | (1u << UL_FP8_E5M2);
  cr_assert_eq(ulnccl_dtype_mask(22809, 9), all);
  cr_assert_eq(ulnccl_dtype_mask(22809, 8), all, "fp8 moves on sm8x");
  cr_assert_eq(ulnccl_reduce_dtype_mask(22809, 9), all);
  cr_assert_eq(ulnccl_reduce_dtype_mask(22809, 8), all & ~fp8);
  cr_assert_eq(ulnccl_dtype_mask(22305, 9), all & ~fp8);
  cr_assert_eq(ulnccl_dtype_mask(20900, 8), all & ~fp8 & ~(1u << UL_BF16));
}

/* H7: the oldest NCCL the plugin claims, and the sentence for an older one. */
Test(nccl_map, minimum_version, .timeout = 10) {
  char why[200];
  cr_assert_eq(ULNCCL_MIN_VERSION, 21801);
  cr_assert_eq(ulnccl_version_supported(21801, why, sizeof why), UL_OK);
  cr_assert_eq(why[0], '\0');
  cr_assert_eq(ulnccl_version_supported(22809, why, sizeof why), UL_OK);
  cr_assert_eq(ulnccl_version_supported(21706, why, sizeof why), UL_ERR_UNAVAILABLE);
  cr_assert_str_eq(why, "this NCCL is 2.17.6; the nccl backend needs NCCL >= 2.18.1");
}

/* The fp8 enumerators are used only when the header has them (compile guard). */
Test(nccl_map, fp8_header_guard, .timeout = 10) {
  cr_assert_eq(ULNCCL_HEADER_HAS_FP8, NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 3));
}

/* H7 fallback for NCCL < 2.28.3: alltoall/gather/scatter as grouped send/recv. */
Test(nccl_map, p2p_fallback_plans, .timeout = 10) {
  ulnccl_p2p_t p[8];
  char sb[4 * 16] = {0}, rb[4 * 16] = {0};
  int n = ulnccl_p2p_plan(UL_COLL_ALLTOALL, 1, 3, 0, 16, sb, rb, p);
  cr_assert_eq(n, 6);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(p[2 * i].is_send, 1);
    cr_assert_eq(p[2 * i].peer, i);
    cr_assert_eq(p[2 * i].buf, sb + 16 * i);
    cr_assert_eq(p[2 * i + 1].is_send, 0);
    cr_assert_eq(p[2 * i + 1].peer, i);
    cr_assert_eq(p[2 * i + 1].buf, rb + 16 * i);
  }
  /* gather, non-root: one send of its block to the root */
  n = ulnccl_p2p_plan(UL_COLL_GATHER, 2, 3, 1, 16, sb, rb, p);
  cr_assert_eq(n, 1);
  cr_assert_eq(p[0].is_send, 1); cr_assert_eq(p[0].peer, 1); cr_assert_eq(p[0].buf, sb);
  /* gather, root 1: its own send + one receive per rank into its block */
  n = ulnccl_p2p_plan(UL_COLL_GATHER, 1, 3, 1, 16, sb, rb, p);
  cr_assert_eq(n, 4);
  cr_assert_eq(p[0].is_send, 1); cr_assert_eq(p[0].peer, 1);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(p[1 + i].is_send, 0);
    cr_assert_eq(p[1 + i].peer, i);
    cr_assert_eq(p[1 + i].buf, rb + 16 * i);
  }
  /* gather in place on the root: nothing moves for its own block */
  n = ulnccl_p2p_plan(UL_COLL_GATHER, 1, 3, 1, 16, rb + 16, rb, p);
  cr_assert_eq(n, 2);
  cr_assert_eq(p[0].peer, 0); cr_assert_eq(p[1].peer, 2);
  cr_assert_eq(p[0].is_send, 0); cr_assert_eq(p[1].is_send, 0);
  /* scatter, root 0: one send per rank, then its own receive */
  n = ulnccl_p2p_plan(UL_COLL_SCATTER, 0, 3, 0, 16, sb, rb, p);
  cr_assert_eq(n, 4);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(p[i].is_send, 1);
    cr_assert_eq(p[i].peer, i);
    cr_assert_eq(p[i].buf, sb + 16 * i);
  }
  cr_assert_eq(p[3].is_send, 0); cr_assert_eq(p[3].peer, 0); cr_assert_eq(p[3].buf, rb);
  /* scatter, non-root: one receive */
  n = ulnccl_p2p_plan(UL_COLL_SCATTER, 2, 3, 0, 16, NULL, rb, p);
  cr_assert_eq(n, 1);
  cr_assert_eq(p[0].is_send, 0); cr_assert_eq(p[0].peer, 0); cr_assert_eq(p[0].buf, rb);
  /* scatter in place on the root */
  n = ulnccl_p2p_plan(UL_COLL_SCATTER, 0, 3, 0, 16, sb, sb, p);
  cr_assert_eq(n, 2);
  cr_assert_eq(p[0].peer, 1); cr_assert_eq(p[1].peer, 2);
  cr_assert_eq(ulnccl_p2p_plan(UL_COLL_ALLREDUCE, 0, 3, 0, 16, sb, rb, p), 0);
}

Test(nccl_map, every_result_code, .timeout = 10) {
  cr_assert_eq(ulnccl_result(ncclSuccess), UL_OK);
  cr_assert_eq(ulnccl_result(ncclUnhandledCudaError), UL_ERR_BACKEND);
  cr_assert_eq(ulnccl_result(ncclSystemError), UL_ERR_SYSTEM);
  cr_assert_eq(ulnccl_result(ncclInternalError), UL_ERR_BACKEND);
  cr_assert_eq(ulnccl_result(ncclInvalidArgument), UL_ERR_INVALID_ARG);
  cr_assert_eq(ulnccl_result(ncclInvalidUsage), UL_ERR_INVALID_USAGE);
  cr_assert_eq(ulnccl_result(ncclRemoteError), UL_ERR_PEER_LOST);
  cr_assert_eq(ulnccl_result(ncclInProgress), UL_IN_PROGRESS);
  cr_assert_eq(ulnccl_result(ncclNumResults), UL_ERR_BACKEND);
  cr_assert_eq(ulnccl_result((ncclResult_t)1234), UL_ERR_BACKEND);
}

Test(nccl_map, error_sentence_keeps_nccl_message, .timeout = 10) {
  char buf[256];
  ulnccl_format_error(buf, sizeof buf, "ncclAllReduce", ncclRemoteError,
                      "remote process exited or there was a network error",
                      "NET/IB : Got completion from peer 10.0.0.2 with status=12");
  cr_assert_str_eq(buf, "ncclAllReduce failed: remote process exited or there was a network "
                        "error (ncclResult_t 6): NET/IB : Got completion from peer 10.0.0.2 "
                        "with status=12");
  ulnccl_format_error(buf, sizeof buf, "ncclCommInitRankConfig", ncclSystemError, NULL, "");
  cr_assert_str_eq(buf, "ncclCommInitRankConfig failed: unknown NCCL error (ncclResult_t 2)");
  char tiny[16];
  ulnccl_format_error(tiny, sizeof tiny, "ncclSend", ncclInternalError, "internal error", "x");
  cr_assert_eq(strlen(tiny), sizeof tiny - 1, "truncated, still terminated");
}

Test(nccl_map, collective_sizes, .timeout = 10) {
  size_t s, r;
  ulnccl_coll_bytes(UL_COLL_ALLGATHER, 5, 4, 3, &s, &r);
  cr_assert_eq(s, 20); cr_assert_eq(r, 60);
  ulnccl_coll_bytes(UL_COLL_REDUCE_SCATTER, 5, 2, 4, &s, &r);
  cr_assert_eq(s, 40); cr_assert_eq(r, 10);
  ulnccl_coll_bytes(UL_COLL_ALLREDUCE, 7, 8, 4, &s, &r);
  cr_assert_eq(s, 56); cr_assert_eq(r, 56);
  ulnccl_coll_bytes(UL_COLL_ALLTOALL, 3, 4, 2, &s, &r);
  cr_assert_eq(s, 24); cr_assert_eq(r, 24);
  ulnccl_coll_bytes(UL_COLL_GATHER, 3, 1, 5, &s, &r);
  cr_assert_eq(s, 3); cr_assert_eq(r, 15);
  ulnccl_coll_bytes(UL_COLL_SCATTER, 3, 1, 5, &s, &r);
  cr_assert_eq(s, 15); cr_assert_eq(r, 3);
  ulnccl_coll_bytes(UL_COLL_BARRIER, 9, 4, 2, &s, &r);
  cr_assert_eq(s, 0); cr_assert_eq(r, 0);
}

Test(nccl_map, in_place_rules, .timeout = 10) {
  static char buf[1024];
  /* allgather: send == recv + rank * sendcount * size */
  cr_assert(ulnccl_coll_in_place(UL_COLL_ALLGATHER, buf + 2 * 40, buf, 10, 4, 2, 0));
  cr_assert(!ulnccl_coll_in_place(UL_COLL_ALLGATHER, buf + 1 * 40, buf, 10, 4, 2, 0));
  /* reduce_scatter: recv == send + rank * recvcount * size */
  cr_assert(ulnccl_coll_in_place(UL_COLL_REDUCE_SCATTER, buf, buf + 3 * 16, 8, 2, 3, 0));
  cr_assert(!ulnccl_coll_in_place(UL_COLL_REDUCE_SCATTER, buf, buf, 8, 2, 3, 0));
  cr_assert(ulnccl_coll_in_place(UL_COLL_ALLREDUCE, buf, buf, 8, 4, 1, 0));
  cr_assert(!ulnccl_coll_in_place(UL_COLL_ALLREDUCE, buf, buf + 4, 8, 4, 1, 0));
  cr_assert(ulnccl_coll_in_place(UL_COLL_GATHER, buf + 1 * 12, buf, 3, 4, 0, 1));
  cr_assert(ulnccl_coll_in_place(UL_COLL_SCATTER, buf, buf + 2 * 12, 3, 4, 0, 2));
  cr_assert(!ulnccl_coll_in_place(UL_COLL_ALLTOALL, buf, buf, 3, 4, 0, 0));
  cr_assert(!ulnccl_coll_in_place(UL_COLL_ALLREDUCE, NULL, NULL, 3, 4, 0, 0));
}

Test(nccl_map, null_buffers_off_root, .timeout = 10) {
  static char sb[8], rb[8];
  const void *s = NULL;
  void *r = rb;
  ulnccl_coll_buffers(UL_COLL_BROADCAST, 1, 0, &s, &r);
  cr_assert_eq(s, rb, "broadcast off root: send replaced by recv");
  s = NULL;
  ulnccl_coll_buffers(UL_COLL_BROADCAST, 0, 0, &s, &r);
  cr_assert_null(s, "root keeps its arguments");
  s = sb;
  r = NULL;
  ulnccl_coll_buffers(UL_COLL_REDUCE, 2, 0, &s, &r);
  cr_assert_eq(r, sb);
  r = NULL;
  ulnccl_coll_buffers(UL_COLL_GATHER, 1, 0, &s, &r);
  cr_assert_eq(r, sb);
  s = NULL;
  r = rb;
  ulnccl_coll_buffers(UL_COLL_SCATTER, 1, 0, &s, &r);
  cr_assert_eq(s, rb);
  s = sb;
  r = rb;
  ulnccl_coll_buffers(UL_COLL_ALLREDUCE, 1, 0, &s, &r);
  cr_assert_eq(s, sb);
  cr_assert_eq(r, rb);
}

Test(nccl_map, id_fits_payload, .timeout = 10) {
  cr_assert_leq(sizeof(ulnccl_id_payload_t), 192);
  cr_assert_eq(sizeof(ncclUniqueId), 128);
}
#else
Test(nccl_map, not_built, .timeout = 10) {
  cr_skip_test("nccl backend not configured (no CUDA toolkit / NCCL): nothing to test");
}
#endif
