/* The generic algorithm layer: collectives and send/recv built from a peer-copy
 * backend's windows, put, signal/wait and local reduce. */
#ifndef UL_GENERIC_H
#define UL_GENERIC_H

#include "../ul_core.h"

/* Per-communicator state; NULL-safe when the backend offers no windows. */
UL__HIDDEN ul_result_t ul__generic_init(ul_comm_t comm);
UL__HIDDEN void ul__generic_fini(ul_comm_t comm);
/* 1 when this communicator can run generic algorithms. */
UL__HIDDEN int ul__generic_available(ul_comm_t comm);

/* Run one collective with the named algorithm (NULL: choose). Fills info->algorithm,
 * info->reason. Backend stream bs is NULL for host streams. */
UL__HIDDEN ul_result_t ul__generic_collective(ul_comm_t comm, const ul__coll_args_t *a,
                                              const char *forced, ul_backend_stream_t *bs,
                                              ul_call_info_t *info);

/* One point-to-point operation of a group. */
typedef struct ul__p2p_op {
  int is_send;
  void *buf;
  size_t bytes;
  int peer;
} ul__p2p_op_t;
UL__HIDDEN ul_result_t ul__generic_p2p(ul_comm_t comm, ul__p2p_op_t *ops, int nops,
                                       ul_backend_stream_t *bs);
/* All ranks: a barrier on the generic layer's signals. */
UL__HIDDEN ul_result_t ul__generic_barrier(ul_comm_t comm, ul_backend_stream_t *bs,
                                           const char *what);
/* Names of algorithms (for validation of UNILINK_ALGO). */
UL__HIDDEN int ul__generic_algo_known(ul_coll_t coll, const char *name);

/* coll.c: per-communicator turn order */
UL__HIDDEN void *ul__turn_create(void);
UL__HIDDEN void ul__turn_destroy(void *t);

#endif
