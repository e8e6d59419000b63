/* The registration table: {name pattern, family, required features, min/max ranks, fn,
 * expander, collective, matrix row, variant}. Adding a case = one row here plus its
 * function; the harness derives SKIPs from the features/collective/dtype/op fields. */
#include "cases.h"

#define F_P2P UL_FEATURE_P2P
#define F_OS UL_FEATURE_ONE_SIDED
#define F_SPLIT UL_FEATURE_SPLIT
#define F_STREAMS UL_FEATURE_STREAMS

const cf_case_t cf_cases[] = {
    /* collectives: <coll>/<dtype>[/<op>][/root=R]/count=N/<inplace|outofplace>[/algo=ring] */
    {"allreduce/<dtype>/<op>/count=<n>/<place>", "coll", 0, 1, 0, cf_case_coll, cf_expand_coll,
     UL_COLL_ALLREDUCE, "allreduce", 0},
    {"reduce/<dtype>/<op>/root=<r>/count=<n>/<place>", "coll", 0, 1, 0, cf_case_coll,
     cf_expand_coll, UL_COLL_REDUCE, "reduce", 0},
    {"reduce_scatter/<dtype>/<op>/count=<n>/<place>", "coll", 0, 1, 0, cf_case_coll,
     cf_expand_coll, UL_COLL_REDUCE_SCATTER, "reduce_scatter", 0},
    {"broadcast/<dtype>/root=<r>/count=<n>/<place>", "coll", 0, 1, 0, cf_case_coll,
     cf_expand_coll, UL_COLL_BROADCAST, "broadcast", 0},
    {"allgather/<dtype>/count=<n>/<place>", "coll", 0, 1, 0, cf_case_coll, cf_expand_coll,
     UL_COLL_ALLGATHER, "allgather", 0},
    {"alltoall/<dtype>/count=<n>/outofplace", "coll", 0, 1, 0, cf_case_coll, cf_expand_coll,
     UL_COLL_ALLTOALL, "alltoall", 0},
    {"gather/<dtype>/root=<r>/count=<n>/<place>", "coll", 0, 1, 0, cf_case_coll, cf_expand_coll,
     UL_COLL_GATHER, "gather", 0},
    {"scatter/<dtype>/root=<r>/count=<n>/<place>", "coll", 0, 1, 0, cf_case_coll,
     cf_expand_coll, UL_COLL_SCATTER, "scatter", 0},
    /* counts: the largest per-peer block; blocks are irregular (zeros included) and lie
     * out of order with gaps */
    {"alltoallv/<dtype>/count=<n>/outofplace", "coll", 0, 1, 0, cf_case_coll, cf_expand_coll,
     UL_COLL_ALLTOALLV, "alltoallv", 0},
    {"allgatherv/<dtype>/count=<n>/<place>", "coll", 0, 1, 0, cf_case_coll, cf_expand_coll,
     UL_COLL_ALLGATHERV, "allgatherv", 0},
    {"barrier", "coll", 0, 1, 0, cf_case_barrier, cf_expand_single, UL_COLL_BARRIER, "barrier", 0},
    /* point to point */
    {"p2p/ring/<dtype>/count=<n>", "p2p", F_P2P, 1, 0, cf_case_p2p, cf_expand_p2p,
     UL_COLL_SENDRECV, "sendrecv", CF_P2P_RING},
    {"p2p/allpairs/<dtype>/count=<n>", "p2p", F_P2P, 1, 0, cf_case_p2p, cf_expand_p2p,
     UL_COLL_SENDRECV, "sendrecv", CF_P2P_ALLPAIRS},
    {"p2p/self/<dtype>/count=<n>", "p2p", F_P2P, 1, 0, cf_case_p2p, cf_expand_p2p,
     UL_COLL_SENDRECV, "sendrecv", CF_P2P_SELF},
    {"p2p/zerobyte/fp32/count=0", "p2p", F_P2P, 1, 0, cf_case_p2p, cf_expand_p2p,
     UL_COLL_SENDRECV, "sendrecv", CF_P2P_ZERO},
    {"p2p/pingpong/<dtype>/count=<n>", "p2p", F_P2P, 2, 0, cf_case_p2p, cf_expand_p2p,
     UL_COLL_SENDRECV, "sendrecv", CF_P2P_PINGPONG},
    /* one-sided */
    {"onesided/put/bytes=<n>", "onesided", F_OS, 1, 0, cf_case_onesided, cf_expand_onesided, -1,
     "onesided", CF_OS_PUT},
    {"onesided/get/bytes=<n>", "onesided", F_OS, 1, 0, cf_case_onesided, cf_expand_onesided, -1,
     "onesided", CF_OS_GET},
    {"onesided/signal", "onesided", F_OS, 1, 0, cf_case_onesided, cf_expand_onesided, -1,
     "onesided", CF_OS_SIGNAL},
    /* communicator split */
    {"split/evenodd", "split", F_SPLIT, 1, 0, cf_case_split, cf_expand_single, -1, "split",
     CF_SPLIT_EVENODD},
    {"split/reversed", "split", F_SPLIT, 1, 0, cf_case_split, cf_expand_single, -1, "split",
     CF_SPLIT_REVERSED},
    {"split/nocolor", "split", F_SPLIT, 1, 0, cf_case_split, cf_expand_single, -1, "split",
     CF_SPLIT_NOCOLOR},
    /* streams */
    {"streams/two-streams", "streams", F_STREAMS, 1, 0, cf_case_streams, cf_expand_single, -1,
     "streams", CF_STREAMS_TWO},
    {"streams/ordered", "streams", F_STREAMS, 1, 0, cf_case_streams, cf_expand_single, -1,
     "streams", CF_STREAMS_ORDERED},
    /* invalid arguments */
    {"errors/<collective error>", "errors", 0, 1, 0, cf_case_errors, cf_expand_errors, -1,
     "errors", CF_ERR_COLL},
    {"errors/<p2p error>", "errors", F_P2P, 1, 0, cf_case_errors, cf_expand_errors, -1, "errors",
     CF_ERR_P2P},
    {"errors/<one-sided error>", "errors", F_OS, 1, 0, cf_case_errors, cf_expand_errors, -1,
     "errors", CF_ERR_ONESIDED},
    {"errors/<split error>", "errors", F_SPLIT, 1, 0, cf_case_errors, cf_expand_errors, -1,
     "errors", CF_ERR_SPLIT},
    {"errors/<vector collective error>", "errors", 0, 1, 0, cf_case_errors, cf_expand_errors, -1,
     "errors", CF_ERR_VCOLL},
};
const int cf_ncases = (int)(sizeof(cf_cases) / sizeof(cf_cases[0]));
