/* Pure unilink <-> NCCL translation (see nccl_map.h). */
#include "nccl_map.h"

#include <stdint.h>
#include <stdio.h>

_Static_assert(sizeof(ulnccl_id_payload_t) <= 192, "NCCL id must fit UL_BACKEND_ID_PAYLOAD_BYTES");

ul_result_t ulnccl_dtype(ul_dtype_t d, ncclDataType_t *out) {
  ncclDataType_t t;
  switch (d) {
  case UL_INT8: t = ncclInt8; break;
  case UL_UINT8: t = ncclUint8; break;
  case UL_INT32: t = ncclInt32; break;
  case UL_UINT32: t = ncclUint32; break;
  case UL_INT64: t = ncclInt64; break;
  case UL_UINT64: t = ncclUint64; break;
  case UL_FP16: t = ncclFloat16; break;
  case UL_BF16: t = ncclBfloat16; break;
  case UL_FP32: t = ncclFloat32; break;
  case UL_FP64: t = ncclFloat64; break;
#if ULNCCL_HEADER_HAS_FP8
  case UL_FP8_E4M3: t = ncclFloat8e4m3; break;
  case UL_FP8_E5M2: t = ncclFloat8e5m2; break;
#else
  case UL_FP8_E4M3: case UL_FP8_E5M2: return UL_ERR_UNSUPPORTED; /* header older than 2.24.3 */
#endif
  default: return UL_ERR_INVALID_ARG;
  }
  if (out) *out = t;
  return UL_OK;
}

ul_result_t ulnccl_op(ul_op_t op, ncclRedOp_t *out) {
  ncclRedOp_t r;
  switch (op) {
  case UL_SUM: r = ncclSum; break;
  case UL_PROD: r = ncclProd; break;
  case UL_MIN: r = ncclMin; break;
  case UL_MAX: r = ncclMax; break;
  case UL_AVG: r = ncclAvg; break;
  default: return UL_ERR_INVALID_ARG;
  }
  if (out) *out = r;
  return UL_OK;
}

/* Local names: this file links into unit tests before the core library. */
static const char *ulnccl_fp8_name(ul_dtype_t d) {
  return d == UL_FP8_E4M3 ? "fp8_e4m3" : "fp8_e5m2";
}

ul_result_t ulnccl_version_supported(int ver, char *why, size_t why_len) {
  if (why && why_len) why[0] = '\0';
  if (ver >= ULNCCL_MIN_VERSION) return UL_OK;
  if (why)
    snprintf(why, why_len, "this NCCL is %d.%d.%d; the nccl backend needs NCCL >= %d.%d.%d",
             ver / 10000, (ver / 100) % 100, ver % 100, ULNCCL_MIN_VERSION / 10000,
             (ULNCCL_MIN_VERSION / 100) % 100, ULNCCL_MIN_VERSION % 100);
  return UL_ERR_UNAVAILABLE;
}

ul_result_t ulnccl_dtype_supported(ul_dtype_t d, int ver, int sm_major, char *why,
                                   size_t why_len) {
  (void)sm_major; /* data movement of every dtype runs on every GPU (NCCL checks sm for
                     fp8 reductions only) */
  if (why && why_len) why[0] = '\0';
  ul_result_t m = ulnccl_dtype(d, NULL);
  if (m == UL_ERR_INVALID_ARG) {
    if (why) snprintf(why, why_len, "unknown dtype %d", (int)d);
    return UL_ERR_INVALID_ARG;
  }
  if (d == UL_BF16 && ver < ULNCCL_V(2, 10, 0)) {
    if (why) snprintf(why, why_len, "bf16 needs NCCL >= 2.10 (this NCCL is %d)", ver);
    return UL_ERR_UNSUPPORTED;
  }
  if (d == UL_FP8_E4M3 || d == UL_FP8_E5M2) {
    if (m != UL_OK) {
      if (why) snprintf(why, why_len, "%s needs a unilink built against NCCL >= 2.24.3 headers",
                        ulnccl_fp8_name(d));
      return UL_ERR_UNSUPPORTED;
    }
    if (ver < ULNCCL_V(2, 24, 0)) {
      if (why) snprintf(why, why_len, "%s needs NCCL >= 2.24 (this NCCL is %d)",
                        ulnccl_fp8_name(d), ver);
      return UL_ERR_UNSUPPORTED;
    }
  }
  return UL_OK;
}

ul_result_t ulnccl_reduction_supported(ul_dtype_t d, ul_op_t op, int ver, int sm_major,
                                       char *why, size_t why_len) {
  ul_result_t rc = ulnccl_dtype_supported(d, ver, sm_major, why, why_len);
  if (rc != UL_OK) return rc;
  if (ulnccl_op(op, NULL) != UL_OK) {
    if (why) snprintf(why, why_len, "unknown op %d", (int)op);
    return UL_ERR_INVALID_ARG;
  }
  if (op == UL_AVG && ver < ULNCCL_V(2, 10, 0)) {
    if (why) snprintf(why, why_len, "avg needs NCCL >= 2.10 (this NCCL is %d)", ver);
    return UL_ERR_UNSUPPORTED;
  }
  /* NCCL refuses fp8 reductions when any rank's GPU is older than sm90. */
  if ((d == UL_FP8_E4M3 || d == UL_FP8_E5M2) && sm_major > 0 && sm_major < 9) {
    if (why) snprintf(why, why_len,
                      "%s reductions need GPUs of compute capability 9.0 or newer (the oldest "
                      "GPU of this communicator is sm%d x); data movement works",
                      ulnccl_fp8_name(d), sm_major);
    return UL_ERR_UNSUPPORTED;
  }
  return UL_OK;
}

unsigned ulnccl_dtype_mask(int ver, int sm_major) {
  unsigned m = 0;
  for (int d = 0; d < UL_DTYPE_COUNT; d++)
    if (ulnccl_dtype_supported((ul_dtype_t)d, ver, sm_major, NULL, 0) == UL_OK) m |= 1u << d;
  return m;
}

unsigned ulnccl_reduce_dtype_mask(int ver, int sm_major) {
  unsigned m = 0;
  for (int d = 0; d < UL_DTYPE_COUNT; d++)
    if (ulnccl_reduction_supported((ul_dtype_t)d, UL_SUM, ver, sm_major, NULL, 0) == UL_OK)
      m |= 1u << d;
  return m;
}

ul_result_t ulnccl_result(ncclResult_t rc) {
  switch (rc) {
  case ncclSuccess: return UL_OK;
  case ncclUnhandledCudaError: return UL_ERR_BACKEND;
  case ncclSystemError: return UL_ERR_SYSTEM;
  case ncclInternalError: return UL_ERR_BACKEND;
  case ncclInvalidArgument: return UL_ERR_INVALID_ARG;
  case ncclInvalidUsage: return UL_ERR_INVALID_USAGE;
  case ncclRemoteError: return UL_ERR_PEER_LOST;
  case ncclInProgress: return UL_IN_PROGRESS;
  default: return UL_ERR_BACKEND;
  }
}

void ulnccl_format_error(char *buf, size_t len, const char *call, ncclResult_t rc,
                         const char *error_string, const char *last_error) {
  if (!buf || !len) return;
  int n = snprintf(buf, len, "%s failed: %s (ncclResult_t %d)", call ? call : "nccl",
                   (error_string && *error_string) ? error_string : "unknown NCCL error", (int)rc);
  if (last_error && *last_error && n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, ": %s", last_error);
}

void ulnccl_coll_bytes(ul_coll_t coll, size_t count, size_t es, int nranks, size_t *sb,
                       size_t *rb) {
  size_t n = (size_t)(nranks > 0 ? nranks : 1), s = count * es, r = count * es;
  switch (coll) {
  case UL_COLL_ALLGATHER: r = count * es * n; break;
  case UL_COLL_REDUCE_SCATTER: s = count * es * n; break;
  case UL_COLL_ALLTOALL: s = r = count * es * n; break;
  case UL_COLL_GATHER: r = count * es * n; break;
  case UL_COLL_SCATTER: s = count * es * n; break;
  case UL_COLL_BARRIER: s = r = 0; break;
  default: break;
  }
  if (sb) *sb = s;
  if (rb) *rb = r;
}

int ulnccl_coll_in_place(ul_coll_t coll, const void *send, const void *recv, size_t count,
                         size_t es, int rank, int root) {
  uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
  if (!send || !recv) return 0;
  switch (coll) {
  case UL_COLL_ALLREDUCE: case UL_COLL_BROADCAST: case UL_COLL_REDUCE:
    return s == r;
  case UL_COLL_ALLGATHER: return s == r + (uintptr_t)rank * count * es;
  case UL_COLL_REDUCE_SCATTER: return r == s + (uintptr_t)rank * count * es;
  case UL_COLL_GATHER: return s == r + (uintptr_t)root * count * es;
  case UL_COLL_SCATTER: return r == s + (uintptr_t)root * count * es;
  default: return 0;
  }
}

void ulnccl_coll_buffers(ul_coll_t coll, int rank, int root, const void **send, void **recv) {
  if (rank == root) return;
  switch (coll) {
  case UL_COLL_BROADCAST:
    if (!*send) *send = *recv;
    break;
  case UL_COLL_REDUCE:
    if (!*recv) *recv = (void *)*send;
    break;
  case UL_COLL_GATHER:
    if (!*recv) *recv = (void *)*send;
    break;
  case UL_COLL_SCATTER:
    if (!*send) *send = *recv;
    break;
  default: break;
  }
}

int ulnccl_p2p_plan(ul_coll_t coll, int rank, int nranks, int root, size_t block,
                    const void *send, void *recv, ulnccl_p2p_t *out) {
  int n = 0;
  const char *sb = (const char *)send;
  char *rb = (char *)recv;
  switch (coll) {
  case UL_COLL_ALLTOALL:
    for (int p = 0; p < nranks; p++) {
      out[n++] = (ulnccl_p2p_t){1, p, (void *)(sb + (size_t)p * block)};
      out[n++] = (ulnccl_p2p_t){0, p, rb + (size_t)p * block};
    }
    break;
  case UL_COLL_GATHER:
    /* In place on the root (send == its own block): nothing to move for itself. */
    if (!(rank == root && sb == rb + (size_t)root * block))
      out[n++] = (ulnccl_p2p_t){1, root, (void *)sb};
    if (rank == root)
      for (int p = 0; p < nranks; p++)
        if (p != root || sb != rb + (size_t)root * block)
          out[n++] = (ulnccl_p2p_t){0, p, rb + (size_t)p * block};
    break;
  case UL_COLL_SCATTER:
    if (rank == root)
      for (int p = 0; p < nranks; p++)
        if (p != root || rb != sb + (size_t)root * block)
          out[n++] = (ulnccl_p2p_t){1, p, (void *)(sb + (size_t)p * block)};
    if (!(rank == root && rb == sb + (size_t)root * block))
      out[n++] = (ulnccl_p2p_t){0, root, rb};
    break;
  default: break;
  }
  return n;
}

int ulnccl_vplan(int rank, int nranks, size_t elem_size, const void *send, const size_t *scounts,
                 const size_t *sdispls, void *recv, const size_t *rcounts, const size_t *rdispls,
                 ulnccl_vp2p_t *out) {
  int n = 0;
  const char *sb = (const char *)send;
  char *rb = (char *)recv;
  int gather = sdispls == NULL;
  /* allgatherv in place: the own block already sits at rdispls[rank] */
  int inplace = gather && sb == rb + rdispls[rank] * elem_size;
  for (int p = 0; p < nranks; p++) {
    size_t sc = gather ? scounts[0] : scounts[p];
    if (sc && !(p == rank && inplace))
      out[n++] = (ulnccl_vp2p_t){1, p, (void *)(sb + (gather ? 0 : sdispls[p] * elem_size)), sc};
    if (rcounts[p] && !(p == rank && inplace))
      out[n++] = (ulnccl_vp2p_t){0, p, rb + rdispls[p] * elem_size, rcounts[p]};
  }
  return n;
}
