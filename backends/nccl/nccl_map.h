/* Pure translation between unilink and NCCL: datatypes, reduction ops, result codes,
 * error sentences, collective buffer sizes. No NCCL function is called here (only
 * nccl.h types), so the unit tests link it without libnccl and without a GPU. */
#ifndef UL_NCCL_MAP_H
#define UL_NCCL_MAP_H

#include <nccl.h>
#include <stddef.h>
#include <unilink/unilink.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The oldest NCCL the plugin loads with: 2.18.1 brought ncclCommSplit, the newest entry
 * point linked directly. Everything newer (ncclMemAlloc 2.19.1, ncclCommWindowRegister
 * 2.27.3, ncclAlltoAll/Gather/Scatter 2.28.3) is looked up at run time; see
 * nccl_symbols.txt and the unit.nccl_symbols test. */
#define ULNCCL_MIN_VERSION 21801
#define ULNCCL_V(x, y, z) ((x) * 10000 + (y) * 100 + (z))
/* fp8 enumerators exist in nccl.h from 2.24.3 on. */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22403
#define ULNCCL_HEADER_HAS_FP8 1
#else
#define ULNCCL_HEADER_HAS_FP8 0
#endif

/* Where the unique id's payload keeps NCCL's id (our payload is 192 bytes). */
#define ULNCCL_ID_MAGIC 0x4e43434cu /* "NCCL" */
typedef struct ulnccl_id_payload {
  unsigned magic;
  unsigned version;        /* NCCL_VERSION_CODE of the creator */
  ncclUniqueId nccl_id;    /* 128 bytes */
} ulnccl_id_payload_t;

/* ul_dtype_t -> ncclDataType_t. UL_ERR_INVALID_ARG for an unknown dtype;
 * UL_ERR_UNSUPPORTED for fp8 when built against a header without it. */
ul_result_t ulnccl_dtype(ul_dtype_t dtype, ncclDataType_t *out);
/* ul_op_t -> ncclRedOp_t. UL_ERR_INVALID_ARG for an unknown op. */
ul_result_t ulnccl_op(ul_op_t op, ncclRedOp_t *out);

/* UL_OK when the runtime NCCL (version code, e.g. 22809) is >= ULNCCL_MIN_VERSION, else
 * UL_ERR_UNAVAILABLE with "this NCCL is 2.17.1; the nccl backend needs NCCL >= 2.18.1". */
ul_result_t ulnccl_version_supported(int nccl_version, char *why, size_t why_len);
/* Can this NCCL (runtime version code, e.g. 22809) move dtype? bf16 needs NCCL >= 2.10;
 * fp8 needs NCCL >= 2.24 (and headers >= 2.24.3 at build time). Data movement does not
 * depend on the GPU (sm_major is ignored). UL_OK or UL_ERR_UNSUPPORTED with the reason. */
ul_result_t ulnccl_dtype_supported(ul_dtype_t dtype, int nccl_version, int sm_major, char *why,
                                   size_t why_len);
/* Same for a (dtype, op) pair used in a reduction: also avg needs NCCL >= 2.10 and fp8
 * reductions need sm >= 90 on every rank (sm_major: the communicator's oldest GPU;
 * <= 0 = unknown, not checked). */
ul_result_t ulnccl_reduction_supported(ul_dtype_t dtype, ul_op_t op, int nccl_version,
                                       int sm_major, char *why, size_t why_len);
/* Bit masks (1u << ul_dtype_t) of dtypes NCCL moves / reduces (sum) for that version & sm. */
unsigned ulnccl_dtype_mask(int nccl_version, int sm_major);
unsigned ulnccl_reduce_dtype_mask(int nccl_version, int sm_major);

/* ncclResult_t -> ul_result_t: Success -> OK; UnhandledCudaError -> BACKEND;
 * SystemError -> SYSTEM; InternalError -> BACKEND; InvalidArgument -> INVALID_ARG;
 * InvalidUsage -> INVALID_USAGE; RemoteError -> PEER_LOST; InProgress -> IN_PROGRESS;
 * unknown -> BACKEND. */
ul_result_t ulnccl_result(ncclResult_t rc);
/* "ncclAllReduce failed: <ncclGetErrorString> (ncclResult_t N)[: <ncclGetLastError>]". */
void ulnccl_format_error(char *buf, size_t len, const char *call, ncclResult_t rc,
                         const char *error_string, const char *last_error);

/* Bytes read from sendbuf and written to recvbuf by a collective (NCCL count
 * conventions: allgather count = sendcount, reduce_scatter count = recvcount,
 * alltoall/gather/scatter count = per-rank block). */
void ulnccl_coll_bytes(ul_coll_t coll, size_t count, size_t elem_size, int nranks,
                       size_t *send_bytes, size_t *recv_bytes);
/* Is the call in place by NCCL's pointer-aliasing rule? */
int ulnccl_coll_in_place(ul_coll_t coll, const void *sendbuf, const void *recvbuf, size_t count,
                         size_t elem_size, int rank, int root);
/* Buffers handed to NCCL: where our API allows NULL (broadcast sendbuf off root,
 * reduce recvbuf off root, gather recvbuf / scatter sendbuf off root), substitute the
 * other buffer so NCCL's pointer checks pass; NCCL never touches it there. */
void ulnccl_coll_buffers(ul_coll_t coll, int rank, int root, const void **sendbuf,
                         void **recvbuf);

/* One ncclSend (is_send 1) or ncclRecv of a grouped point-to-point fallback. */
typedef struct ulnccl_p2p {
  int is_send;
  int peer;
  void *buf; /* block of `block` bytes */
} ulnccl_p2p_t;
/* alltoall / gather / scatter as ncclSend/ncclRecv inside one group, for NCCL < 2.28.3
 * (block = count * elem_size). Fills out (room for 2 * nranks) and returns the entry
 * count; the root's own block moves by a send/recv to itself unless in place. */
int ulnccl_p2p_plan(ul_coll_t coll, int rank, int nranks, int root, size_t block,
                    const void *sendbuf, void *recvbuf, ulnccl_p2p_t *out);

/* One ncclSend/ncclRecv of a vector collective: count elements at buf. */
typedef struct ulnccl_vp2p {
  int is_send;
  int peer;
  void *buf;
  size_t count;
} ulnccl_vp2p_t;
/* alltoallv (sdispls non-NULL) or allgatherv (sdispls NULL: every peer gets sendbuf's
 * scounts[0] elements) as grouped ncclSend/ncclRecv. Counts and displacements in
 * elements of elem_size bytes. Zero-count blocks are left out (the peer leaves out the
 * matching one); the own block moves by a send/recv to itself unless in place.
 * Fills out (room for 2 * nranks) and returns the entry count. */
int ulnccl_vplan(int rank, int nranks, size_t elem_size, const void *sendbuf,
                 const size_t *scounts, const size_t *sdispls, void *recvbuf,
                 const size_t *rcounts, const size_t *rdispls, ulnccl_vp2p_t *out);

#ifdef __cplusplus
}
#endif
#endif
