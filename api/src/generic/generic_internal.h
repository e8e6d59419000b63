/* Shared between the generic layer's files only. */
#ifndef UL_GENERIC_INTERNAL_H
#define UL_GENERIC_INTERNAL_H

#include "generic.h"

#define UL__NBUF 2 /* buffers per slot: chunk k+1 lands while chunk k is consumed */
#define UL__SIG_DATA(g, j) (j)
#define UL__SIG_CREDIT(g, j) ((g)->n + (j))
#define UL__SIG_SYNC(g, j) (2 * (g)->n + (j))
#define UL__SIG_READY(g, j) (3 * (g)->n + (j)) /* rank j staged what we read from it */
#define UL__SIG_DONE(g, j) (4 * (g)->n + (j)) /* rank j finished reading our staging */
#define UL__SIG_LL(g, j) (5 * (g)->n + (j)) /* rank j wrote its flagged lines to us */
/* root j wrote its broadcast lines to us; not for packed ones where the backend has
 * wait_word (ul__line_broadcast) */
#define UL__SIG_LB(g, j) (6 * (g)->n + (j))
#define UL__SIG_LB_CREDIT(g, j) (7 * (g)->n + (j)) /* rank j read UL__LB_CREDIT more of our lines */
/* rank j wrote its gather or reduce lines to us, its root; only where the backend has
 * no wait_word (ul__line_gather) */
#define UL__SIG_LG(g, j) (8 * (g)->n + (j))
#define UL__SIG_LG_CREDIT(g, j) (9 * (g)->n + (j)) /* root j read UL__LB_CREDIT more of our lines */
/* Never signalled: a wait for 0 on it is only the backend's check of aborted and lost
 * peers. A signal that a peer raises on every call would do too, but the check would then
 * read a line the peer writes each call: two cache-line transfers per call for nothing. */
#define UL__SIG_LIVE(g) (10 * (g)->n)
#define UL__NSIG_GENERIC(n) (10 * (n) + 16)

#define UL__UNTUNED ((size_t)-1)
#define UL__STAGED_MAX_BYTES ((size_t)1 << 20) /* largest staging area a rank keeps */

/* Flagged lines (algo_staged.c, ul__line_small): per source rank and epoch parity,
 * UL__LL_LINES cache lines of an 8-byte epoch and UL__LL_PAYLOAD bytes of data. */
#define UL__LL_LINE 64
#define UL__LL_PAYLOAD (UL__LL_LINE - 8)
#define UL__LL_LINES 74 /* 4144 bytes a peer: a 4 KiB allreduce */
#define UL__LL_MAX_BYTES (UL__LL_LINES * UL__LL_PAYLOAD)
#define UL__LL_REGION(n) ((size_t)(n) * 2 * UL__LL_LINES * UL__LL_LINE)
/* Rooted lines (ul__line_broadcast, ul__line_gather): in every rank's scratch, 2n rings
 * of UL__LB_RING lines, each written by one rank: ring r < n by root r's broadcasts and
 * scatters, ring n + r by rank r's gathers and reduces to this rank. Each ring's
 * collectives fill it in order, those of 28 bytes or less packed several to a line, larger
 * ones a slot of UL__LB_LINES lines each (end to end when ranks outnumber cores, see
 * bcast_place); readers return a credit every UL__LB_CREDIT lines
 * they finish. Up to UL__LB_LINES lines (1 KiB): beyond it the root's stores into lines
 * its readers hold cost more than readers pulling a staged copy (np2, b2b: 2 KiB
 * 1.66-1.72 us against 1.24-2.04, 4 KiB 2.2-2.6 against 1.1-1.3; 512 B 0.7-1.0 against
 * 1.0-1.4). A broadcast moves the cursor at most 2 * UL__LB_LINES - 1 lines (to the next
 * slot and across it), so with UL__LB_RING >= 2 * UL__LB_LINES + UL__LB_CREDIT a root
 * never waits for a credit its readers could only return after reading that very
 * broadcast. */
#define UL__LB_LINES 19
#define UL__LB_RING (16 * UL__LB_LINES)
#define UL__LB_CREDIT (4 * UL__LB_LINES)
#define UL__LB_MAX_BYTES (UL__LB_LINES * UL__LL_PAYLOAD)
#define UL__LB_REGION(n) (2 * (size_t)(n) * UL__LB_RING * UL__LL_LINE)
_Static_assert(UL__LB_RING >= 2 * UL__LB_LINES + UL__LB_CREDIT, "broadcast ring too small");
/* A gather's or reduce's slot (ul__line_gather): twice the broadcast's. Each writer's
 * stores go to one reader, whose reads of a ring the prefetcher streams; at 2 KiB a rank
 * the lines beat staging in both methods (np2, medians of 3 rounds, us, b2b / sync:
 * gather 4 KiB 0.71 / 1.39 against 1.07 / 1.53, reduce 2 KiB 0.76 / 1.51 against 1.02 /
 * 1.63; decision 0022). The same bound as the broadcast's, and whole slots in the ring. */
#define UL__LG_LINES (2 * UL__LB_LINES)
#define UL__LG_MAX_BYTES (UL__LG_LINES * UL__LL_PAYLOAD)
_Static_assert(UL__LB_RING >= 2 * UL__LG_LINES + UL__LB_CREDIT, "gather ring too small");
_Static_assert(UL__LB_RING % UL__LG_LINES == 0, "gather slots must tile the ring");

/* Per root, where its line broadcasts (or the gathers to it) stand; alike on every rank,
 * as every rank sees the same collectives, and alike for every ring a gather's writers
 * fill, as they write the same sizes (ul__line_broadcast, ul__line_gather). */
typedef struct ul__lb_state {
  uint64_t count;   /* collectives made so far: the next one is flagged count + 1 */
  uint64_t signalled; /* broadcasts the root signals (UL__SIG_LB): the signal's count */
  uint64_t line;    /* cursor: absolute line number (ring position line % UL__LB_RING) */
  size_t off;       /* cursor: payload bytes of that line already used */
  /* A rank is writer or reader of a given ring, never both: */
  uint64_t credits_known;    /* writer: credits its readers are known to have returned */
  uint64_t credits_returned; /* reader: credits it has returned to the root */
} ul__lb_state_t;

typedef struct ul__mailbox {
  const void *send;
  void *recv;
  uint64_t seq;
  int32_t cma_ok; /* init probe: the backend's peer_read/peer_write reach every peer */
  int32_t ncpu;   /* init probe: CPUs online as this rank sees them */
  uint64_t l2_bytes; /* init probe: its level-2 cache (0: unknown) */
  uint64_t llc_bytes; /* init probe: its last-level cache (0: unknown) */
  /* Zero-copy: send/recv lie in mem_alloc memory peers can map (handle 0: no). */
  uint64_t send_handle, recv_handle;
  uint64_t send_offset, recv_offset;
  uint64_t entered; /* collectives this rank has entered (names absent ranks on timeout) */
  const size_t *vec; /* direct alltoallv between threads: this rank's sdispls */
} ul__mailbox_t;
#define UL__STAGE_SLOTS 16 /* small staging slots: 2 x oneshot_bytes split in 16 */
#define UL__MAILBOX_BYTES 128 /* room reserved at the start of the scratch */

typedef struct ul__generic {
  ul_comm_t comm;
  int n, me;
  ul_backend_window_t *win;
  void *scratch;
  size_t scratch_size, slot_bytes, chunk_bytes, slots_off, work_off;
  /* bounce algorithms' piece: chunk_bytes, or a quarter of the level-2 cache when that
   * is smaller (the same on every rank: min over process ranks) */
  size_t piece_bytes;
  size_t l2_bytes; /* level-2 cache, 0: unknown (min over process ranks) */
  size_t llc_bytes; /* last-level cache or UNILINK_LLC_BYTES, 0: unknown (min over ranks) */
  void **peer_bases;
  uint64_t *sent;  /* chunks sent to each peer */
  uint64_t *recvd; /* chunks consumed from each peer */
  uint64_t sync_epoch;
  int load_store; /* direct algorithms allowed */
  int can_poll;   /* backend has read_signal */
  uint64_t seq;   /* sequence number of the running operation */
  int shared_scratch; /* every peer's scratch is host load/store reachable */
  int cma;            /* user buffers private, but the backend's peer_read/write reach them */
  int zcopy;          /* backend maps peers' mem_alloc memory (mem_export/import) */
  int ncpu;           /* CPUs online, the same on every rank (min over process ranks) */
  /* ranks outnumber ncpu: a waiter's peer needs its core, and work done by every rank
   * in parallel elsewhere runs in turn (selection and spinning change) */
  int oversubscribed;
  const void **zsend; /* per peer: its published send buffer mapped here, or NULL */
  void **zrecv;       /* per peer: its published recv buffer mapped here, or NULL */
  void **outs;        /* n entries: a piece's outputs for one streaming reduction */
  int zpeers;         /* peers whose buffers the last publish mapped (zero-copy) */
  size_t oneshot_off, oneshot_bytes; /* staging area of 2 x oneshot_bytes per rank */
  size_t hdr_off; /* n x NBUF words: the length of the p2p message a chunk starts */
  uint64_t oneshot_epoch;            /* one-shot operations run so far */
  size_t ll_off;                     /* flagged lines, UL__LL_REGION(n) bytes */
  /* [thread placement][collective]: staged limit measured on this machine (tuning.c);
   * UL__UNTUNED: the built-in limit */
  size_t staged_max[2][UL_COLL_COUNT];
  /* [collective]: process ranks with private buffers bounce from this nccl-tests size on
   * and single-copy below it, as measured on this machine (tuning.c); UL__UNTUNED: not
   * measured (decision 0014: every size, or none when ranks outnumber cores) */
  size_t bounce_from[UL_COLL_COUNT];
  uint64_t ll_epoch;                 /* flagged-line operations run so far */
  size_t lb_off;                     /* rooted lines, UL__LB_REGION(n) bytes */
  ul__lb_state_t *lb; /* 2n: [root] its broadcasts and scatters, [n + root] gathers to it */
  /* The 2 staging buffers are also UL__STAGE_SLOTS small slots, so tiny operations can
   * run further ahead of slow readers. Signals owed (algo_staged.c, staged_reads): */
  uint64_t *ready_expect; /* per peer: READY signals it has owed this rank so far */
  uint64_t *done_expect;  /* per peer: DONE signals (its reads of our staging) so far */
  uint64_t *slot_need;    /* [slot * n + peer]: its DONE count before we rewrite the slot */
  const char *opname;
  uint64_t coll_seq; /* collectives entered on this communicator (the same on all ranks) */
  int in_coll;       /* inside one: a timeout lists the ranks that have not entered it */
  /* Per collective, the last selection's reason text, formatted once per (algorithm,
   * bytes) instead of on every call: a small collective costs a few hundred nanoseconds,
   * snprintf a hundred, and code alternating two collectives (a barrier and a broadcast)
   * would otherwise format on every call. */
  struct {
    const void *algo; /* chosen for this many bytes: selection runs once per size */
    size_t bytes;
    size_t len; /* of text */
    char text[192];
  } reason[UL_COLL_COUNT];
  int copy_stream;   /* backend has copy_stream (streaming stores for large outputs) */
  int reduce_stream; /* backend has reduce_stream (reduce straight into streamed outputs) */
  int wait_word;     /* backend has wait_word (wait on a scratch word a peer stores) */
} ul__generic_t;

/* One collective call as an algorithm sees it (algo_*.c, algorithms.c, vcoll.c). */
typedef struct ul__algo_ctx {
  ul__generic_t *g;
  ul_comm_t c;
  const ul_backend_ops_t *o;
  const ul__coll_args_t *a;
  ul_backend_stream_t *bs;
  size_t esize;
  ul_op_t rop; /* op used for the reduction itself (avg -> sum) */
  int host;    /* buffers are host memory: the layer may load/store them itself */
  int cma;     /* direct algorithm between processes: mapped (zero-copy) or single-copy */
  int zc;      /* after publish: every peer's buffers are mapped here (zero-copy) */
  int nt_pull; /* after publish: pulled output is large, store it streaming */
  /* after publish: some buffer peers would reach is not mapped anywhere (malloc), so
   * the direct algorithm runs this bounce one through the scratch instead (algo_bounce.c) */
  ul_result_t (*bounce)(struct ul__algo_ctx *x);
  int forced; /* UNILINK_ALGO named the algorithm: no handing over */
  /* after publish: it would have bounced but for the tuning file's bounce_from */
  size_t single_below;
  /* after publish: it would have bounced but ranks outnumber CPUs and the tuning file
   * has no bounce_from for them (the reason then says how to measure one) */
  int unmeasured;
  /* after publish: it would have bounced, but no tuning file measured this collective
   * and every rank's buffers fit in the last-level cache */
  int single_in_cache;
} algo_ctx_t;

#define BC(x) ((x)->c->bcomm)
#define COPY(x, dst, src, nbytes) (x)->o->copy_local(BC(x), (dst), (src), (nbytes), (x)->bs)

static inline char *at(const void *base, size_t elems, size_t esize) {
  return (char *)base + elems * esize;
}

/* generic.c: the bounce algorithms' piece for a channel chunk and a level-2 cache (0:
 * unknown), in bytes. */
UL__HIDDEN size_t ul__piece_bytes(size_t chunk_bytes, size_t l2_bytes);

/* vcoll.c: the vector collectives. direct: peers' buffers by load/store (threads);
 * pairwise: n-1 exchange steps over the channels. */
UL__HIDDEN ul_result_t ul__direct_alltoallv(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__pairwise_alltoallv(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__direct_allgatherv(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__pairwise_allgatherv(algo_ctx_t *x);
/* 1 when the call moves nothing on any rank (allgatherv: all recvcounts 0; alltoallv
 * cannot tell locally, so never). */
UL__HIDDEN int ul__vcoll_zero(const ul__coll_args_t *a, int nranks);

UL__HIDDEN void ul__generic_fini_state(ul__generic_t *g);
UL__HIDDEN ul_result_t ul__gwait(ul__generic_t *g, int idx, uint64_t value, int peer,
                                 ul_backend_stream_t *bs);
/* Wait until the 64-bit word at `word` in this rank's scratch, stored by rank peer
 * without a signal, reaches value (backend op wait_word; g->wait_word set). */
UL__HIDDEN ul_result_t ul__gwait_word(ul__generic_t *g, const void *word, uint64_t value, int peer,
                                      ul_backend_stream_t *bs);
UL__HIDDEN size_t ul__slot_offset(ul__generic_t *g, int src, uint64_t chunk_no);
UL__HIDDEN ul_result_t ul__ch_send(ul__generic_t *g, int dst, const void *src, size_t bytes,
                                   ul_backend_stream_t *bs);
/* A send written in place: _begin waits for the slot and gives its address (shared
 * scratch only, else NULL), the caller stores up to chunk_bytes there, _end publishes. */
UL__HIDDEN ul_result_t ul__ch_send_begin(ul__generic_t *g, int dst, void **ptr,
                                         ul_backend_stream_t *bs);
UL__HIDDEN ul_result_t ul__ch_send_end(ul__generic_t *g, int dst, ul_backend_stream_t *bs);
UL__HIDDEN ul_result_t ul__ch_recv_begin(ul__generic_t *g, int src, void **ptr,
                                         ul_backend_stream_t *bs);
UL__HIDDEN ul_result_t ul__ch_recv_end(ul__generic_t *g, int src, ul_backend_stream_t *bs);
/* send_bytes/recv_bytes: how much of each buffer peers may touch (zero-copy export). */
UL__HIDDEN ul_result_t ul__publish(ul__generic_t *g, const void *send, size_t send_bytes,
                                   void *recv, size_t recv_bytes, ul_backend_stream_t *bs);
UL__HIDDEN const ul__mailbox_t *ul__mailbox(ul__generic_t *g, int p);
/* tuning.c: read the limits of this rank count from UNILINK_TUNING_FILE (path; NULL or
 * "" = none); a file that cannot be read or parsed is an error naming the line. */
UL__HIDDEN ul_result_t ul__tuning_load(ul__generic_t *g, const char *setting);
/* The largest tuned staged limit (what the staging area must hold); 0 if none. */
UL__HIDDEN size_t ul__tuning_staging_bytes(const ul__generic_t *g);

/* Shared by the algorithm files (algo_direct.c, algo_staged.c, algo_pipelined.c). */
#define REDUCE(x, dst, p, q, cnt) \
  (x)->o->reduce_local(BC(x), (dst), (p), (q), (cnt), (x)->a->dtype, (x)->rop, (x)->bs)
/* dst[0..nout) each = p op q, streaming stores (the backend's reduce_stream). */
#define REDUCE_STREAM(x, out, nout, p, q, cnt)                                                \
  (x)->o->reduce_stream(BC(x), (out), (nout), (p), (q), (cnt), (x)->a->dtype, (x)->rop, (x)->bs)
#define SCALE(x, buf, cnt) \
  (x)->o->scale_avg(BC(x), (buf), (cnt), (x)->a->dtype, (x)->g->n, (x)->bs)

/* Outputs at least this large bypass the cache (streaming stores): the caller will not
 * read them soon and they would evict the inputs still to be read. Below it the result
 * stays in the shared cache, where the next iteration or consumer finds it. */
#define UL__NT_MIN_BYTES ((size_t)4 << 20)

/* Local copy of an output piece into a user buffer: streaming stores when nt (a large
 * output that would evict the inputs still to be read; the backend's copy_stream,
 * copy_local where it has none). */
static inline ul_result_t ul__out_copy(algo_ctx_t *x, void *dst, const void *src, size_t bytes,
                                       int nt) {
  if (dst == src || bytes == 0) return UL_OK;
  if (nt && x->host && x->g->copy_stream) return x->o->copy_stream(BC(x), dst, src, bytes, x->bs);
  return COPY(x, dst, src, bytes);
}

/* Whether the bounced allgather and alltoall store their outputs streaming: only when all
 * ranks' inputs and outputs together (rank_bytes each) overflow the last-level cache.
 * Below that the next call, or the caller, finds the outputs in the cache, where ordinary
 * stores cost no trip to memory (np2 allgather 4 MiB, medians of 5 interleaved rounds:
 * 198 -> 159 us, 8 MiB 392 -> 352, alltoall 192 -> 177 and 416 -> 399). The reductions
 * keep UL__NT_MIN_BYTES: their streaming pass writes every output while it reads the
 * inputs (decision 0016: allreduce 4 MiB 1.21x); so does broadcast, which measured no
 * gain (4-8 MiB 0.95-0.98x). Cache unknown: that size, counted on the outputs. */
static inline int ul__copy_outputs_stream(const algo_ctx_t *x, size_t out_bytes,
                                          size_t rank_bytes) {
  size_t llc = x->g->llc_bytes;
  if (!x->host) return 0;
  return llc ? rank_bytes * (size_t)x->g->n > llc : out_bytes >= UL__NT_MIN_BYTES;
}

static inline ul_result_t ul__copy_if_needed(algo_ctx_t *x, void *dst, const void *src,
                                             size_t cnt) {
  return ul__out_copy(x, dst, src, cnt * x->esize, 0);
}

/* Allreduce on one rank: a copy, and the avg scaling (by 1). */
static inline ul_result_t ul__single_rank_allreduce(algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  UL_CHECK(ul__copy_if_needed(x, a->recvbuf, a->sendbuf, a->count));
  if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
  return UL_OK;
}

/* The algorithms the selection table (algorithms.c) names, one file per family. */
/* algo_direct.c: peers' user buffers by load/store or single-copy. */
UL__HIDDEN ul_result_t ul__direct_allreduce(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__direct_reduce_scatter(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__direct_reduce(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__direct_allgather(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__direct_broadcast(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__direct_alltoall(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__direct_gather(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__direct_scatter(algo_ctx_t *x);
/* The larger of a call's send and receive buffers, in bytes (what bounce pieces cut). */
UL__HIDDEN size_t ul__largest_buffer_bytes(const algo_ctx_t *x);
/* algo_staged.c: small messages staged in shared scratch, one synchronisation. */
UL__HIDDEN ul_result_t ul__staged_oneshot_allreduce(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__staged_small(algo_ctx_t *x);
/* Bytes each rank stages for ul__staged_small (what peers read from it). */
UL__HIDDEN size_t ul__staged_bytes(const algo_ctx_t *x);
/* The tiniest symmetric collectives (allreduce, reduce_scatter, allgather, alltoall):
 * data pushed into peers' scratch in flagged cache lines, up to UL__LL_MAX_BYTES a peer
 * (ul__line_bytes). */
UL__HIDDEN ul_result_t ul__line_small(algo_ctx_t *x);
/* A small broadcast or scatter in flagged lines: per-root rings, credits in batches. */
UL__HIDDEN ul_result_t ul__line_broadcast(algo_ctx_t *x);
/* A small gather or reduce the same way: a ring per writer in the root's scratch. */
UL__HIDDEN ul_result_t ul__line_gather(algo_ctx_t *x);
UL__HIDDEN size_t ul__line_bytes(const algo_ctx_t *x);
/* algo_bounce.c: process ranks' private buffers, piece by piece through the channels
 * with every peer directly (what the direct algorithms do when peers cannot map them). */
UL__HIDDEN ul_result_t ul__bounce_allreduce(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__bounce_reduce_scatter(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__bounce_allgather(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__bounce_alltoall(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__bounce_broadcast(algo_ctx_t *x);
/* algo_pipelined.c: chunked ring/tree/linear/pairwise patterns over the channels. */
UL__HIDDEN ul_result_t ul__oneshot_allreduce(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__ring_allreduce(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__ring_reduce_scatter(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__ring_allgather(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__tree_broadcast(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__tree_reduce(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__linear_gather(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__linear_scatter(algo_ctx_t *x);
UL__HIDDEN ul_result_t ul__pairwise_alltoall(algo_ctx_t *x);

#endif
