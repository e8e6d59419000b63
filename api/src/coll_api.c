/* The public collectives: each one packs its arguments and hands them to the one
 * submission path (coll.c), which validates, orders and runs them. */
#include "ul_core.h"

UL_API ul_result_t ul_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                ul_dtype_t dtype, ul_op_t op, ul_comm_t comm, ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0, 0);
  return ul__submit_coll(comm, &a, stream);
}

UL_API ul_result_t ul_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                ul_dtype_t dtype, int root, ul_comm_t comm, ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, UL_SUM, root, 0);
  return ul__submit_coll(comm, &a, stream);
}

UL_API ul_result_t ul_reduce(const void *sendbuf, void *recvbuf, size_t count, ul_dtype_t dtype,
                             ul_op_t op, int root, ul_comm_t comm, ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, 0);
  return ul__submit_coll(comm, &a, stream);
}

UL_API ul_result_t ul_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                ul_dtype_t dtype, ul_comm_t comm, ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, UL_SUM, 0, 0);
  return ul__submit_coll(comm, &a, stream);
}

UL_API ul_result_t ul_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                     ul_dtype_t dtype, ul_op_t op, ul_comm_t comm,
                                     ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0, 0);
  return ul__submit_coll(comm, &a, stream);
}

UL_API ul_result_t ul_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                               ul_dtype_t dtype, ul_comm_t comm, ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, UL_SUM, 0, 0);
  return ul__submit_coll(comm, &a, stream);
}

UL_API ul_result_t ul_gather(const void *sendbuf, void *recvbuf, size_t count, ul_dtype_t dtype,
                             int root, ul_comm_t comm, ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_GATHER, sendbuf, recvbuf, count, dtype, UL_SUM, root, 0);
  return ul__submit_coll(comm, &a, stream);
}

UL_API ul_result_t ul_scatter(const void *sendbuf, void *recvbuf, size_t count, ul_dtype_t dtype,
                              int root, ul_comm_t comm, ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_SCATTER, sendbuf, recvbuf, count, dtype, UL_SUM, root, 0);
  return ul__submit_coll(comm, &a, stream);
}

UL_API ul_result_t ul_barrier(ul_comm_t comm, ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_BARRIER, NULL, NULL, 0, UL_UINT8, UL_SUM, 0, 0);
  return ul__submit_coll(comm, &a, stream);
}

UL_API ul_result_t ul_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                const size_t *rdispls, ul_dtype_t dtype, ul_comm_t comm,
                                ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_ALLTOALLV, sendbuf, recvbuf, 0, dtype, UL_SUM, 0, 0);
  a.scounts = sendcounts, a.sdispls = sdispls, a.rcounts = recvcounts, a.rdispls = rdispls;
  return ul__submit_coll(comm, &a, stream);
}

UL_API ul_result_t ul_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                 const size_t *recvcounts, const size_t *displs,
                                 ul_dtype_t dtype, ul_comm_t comm, ul_stream_t stream) {
  ul__coll_args_t a = UL__COLL_ARGS(UL_COLL_ALLGATHERV, sendbuf, recvbuf, sendcount, dtype, UL_SUM, 0, 0);
  a.rcounts = recvcounts, a.rdispls = displs;
  return ul__submit_coll(comm, &a, stream);
}
