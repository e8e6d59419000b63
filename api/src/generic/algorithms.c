/* Selection of the generic collective algorithms over the channels and direct access of
 * generic.c. Each algorithm is written once, as rank arithmetic (pattern.c) plus calls to
 * the backend's put/signal/wait/reduce/copy, in one file per family (algo_direct.c,
 * algo_bounce.c, algo_staged.c, algo_pipelined.c, vcoll.c); the table below picks one per
 * call. */
#include <stdio.h>
#include <string.h>

#include "generic_internal.h"

/* The barrier is its own family: one signal each way, nothing to pipeline. */
static ul_result_t signal_barrier(algo_ctx_t *x) { return ul__generic_barrier(x->c, x->bs, NULL); }

/* ================================== selection ================================== */

/* What an algorithm needs of the communicator. */
enum {
  NEED_NONE = 0,
  NEED_DIRECT = 1, /* peers' user buffers reachable: load/store (threads) or single-copy */
  NEED_SHARED = 2, /* peers' scratch load/store reachable (shared memory) */
  NEED_LOAD_STORE = 3 /* peers' user buffers load/store reachable (threads) */
};

typedef struct algo_entry {
  ul_coll_t coll;
  char name[UL__ALGO_NAME_LEN]; /* an array: every call copies it, without a strlen */
  int needs;
  ul_result_t (*run)(algo_ctx_t *x);
} algo_entry_t;

/* In order of preference; the first one whose needs and size limits fit runs. */
static const algo_entry_t algorithms[] = {
    {UL_COLL_ALLREDUCE, "line", NEED_SHARED, ul__line_small},
    {UL_COLL_ALLREDUCE, "oneshot", NEED_SHARED, ul__staged_oneshot_allreduce},
    {UL_COLL_ALLREDUCE, "direct", NEED_DIRECT, ul__direct_allreduce},
    {UL_COLL_ALLREDUCE, "bounce", NEED_SHARED, ul__bounce_allreduce},
    {UL_COLL_ALLREDUCE, "oneshot-channel", NEED_NONE, ul__oneshot_allreduce},
    {UL_COLL_ALLREDUCE, "ring", NEED_NONE, ul__ring_allreduce},
    {UL_COLL_REDUCE_SCATTER, "line", NEED_SHARED, ul__line_small},
    {UL_COLL_REDUCE_SCATTER, "staged", NEED_SHARED, ul__staged_small},
    {UL_COLL_REDUCE_SCATTER, "direct", NEED_DIRECT, ul__direct_reduce_scatter},
    {UL_COLL_REDUCE_SCATTER, "bounce", NEED_SHARED, ul__bounce_reduce_scatter},
    {UL_COLL_REDUCE_SCATTER, "ring", NEED_NONE, ul__ring_reduce_scatter},
    {UL_COLL_ALLGATHER, "line", NEED_SHARED, ul__line_small},
    {UL_COLL_ALLGATHER, "staged", NEED_SHARED, ul__staged_small},
    {UL_COLL_ALLGATHER, "direct", NEED_DIRECT, ul__direct_allgather},
    {UL_COLL_ALLGATHER, "bounce", NEED_SHARED, ul__bounce_allgather},
    {UL_COLL_ALLGATHER, "ring", NEED_NONE, ul__ring_allgather},
    {UL_COLL_BROADCAST, "line", NEED_SHARED, ul__line_broadcast},
    {UL_COLL_BROADCAST, "staged", NEED_SHARED, ul__staged_small},
    {UL_COLL_BROADCAST, "direct", NEED_DIRECT, ul__direct_broadcast},
    {UL_COLL_BROADCAST, "bounce", NEED_SHARED, ul__bounce_broadcast},
    {UL_COLL_BROADCAST, "tree", NEED_NONE, ul__tree_broadcast},
    {UL_COLL_REDUCE, "line", NEED_SHARED, ul__line_gather},
    {UL_COLL_REDUCE, "staged", NEED_SHARED, ul__staged_small},
    {UL_COLL_REDUCE, "direct", NEED_DIRECT, ul__direct_reduce},
    {UL_COLL_REDUCE, "tree", NEED_NONE, ul__tree_reduce},
    {UL_COLL_ALLTOALL, "line", NEED_SHARED, ul__line_small},
    {UL_COLL_ALLTOALL, "staged", NEED_SHARED, ul__staged_small},
    {UL_COLL_ALLTOALL, "direct", NEED_DIRECT, ul__direct_alltoall},
    {UL_COLL_ALLTOALL, "bounce", NEED_SHARED, ul__bounce_alltoall},
    {UL_COLL_ALLTOALL, "pairwise", NEED_NONE, ul__pairwise_alltoall},
    {UL_COLL_GATHER, "line", NEED_SHARED, ul__line_gather},
    {UL_COLL_GATHER, "staged", NEED_SHARED, ul__staged_small},
    {UL_COLL_GATHER, "direct", NEED_DIRECT, ul__direct_gather},
    {UL_COLL_GATHER, "linear", NEED_NONE, ul__linear_gather},
    {UL_COLL_SCATTER, "line", NEED_SHARED, ul__line_broadcast},
    {UL_COLL_SCATTER, "staged", NEED_SHARED, ul__staged_small},
    {UL_COLL_SCATTER, "direct", NEED_DIRECT, ul__direct_scatter},
    {UL_COLL_SCATTER, "linear", NEED_NONE, ul__linear_scatter},
    {UL_COLL_BARRIER, "signal", NEED_NONE, signal_barrier},
    {UL_COLL_ALLTOALLV, "direct", NEED_LOAD_STORE, ul__direct_alltoallv},
    {UL_COLL_ALLTOALLV, "pairwise", NEED_NONE, ul__pairwise_alltoallv},
    {UL_COLL_ALLGATHERV, "direct", NEED_LOAD_STORE, ul__direct_allgatherv},
    {UL_COLL_ALLGATHERV, "pairwise", NEED_NONE, ul__pairwise_allgatherv},
};
#define NALGOS (sizeof algorithms / sizeof algorithms[0])

int ul__generic_algo_known(ul_coll_t coll, const char *name) {
  for (size_t i = 0; i < NALGOS; i++)
    if (algorithms[i].coll == coll && strcmp(algorithms[i].name, name) == 0) return 1;
  return 0;
}

static int is_line(const algo_entry_t *e) {
  return e->run == ul__line_small || e->run == ul__line_broadcast || e->run == ul__line_gather;
}

static int is_oneshot(const algo_entry_t *e) {
  return e->run == ul__oneshot_allreduce || e->run == ul__staged_oneshot_allreduce ||
         e->run == ul__staged_small || is_line(e);
}

/* What a one-shot algorithm's size limit counts: bytes per peer, staged bytes, or the
 * message. */
static size_t oneshot_bytes_of(const algo_entry_t *e, const algo_ctx_t *x, size_t bytes) {
  if (is_line(e)) return ul__line_bytes(x);
  if (e->run == ul__staged_small) return ul__staged_bytes(x);
  return bytes;
}

/* Aliases the ring/tree vocabulary users know from NCCL: a request for "ring" on a
 * collective whose channel algorithm has another name maps to it. */
static const algo_entry_t *find_algo(ul_coll_t coll, const char *name) {
  for (size_t i = 0; i < NALGOS; i++)
    if (algorithms[i].coll == coll && strcmp(algorithms[i].name, name) == 0) return &algorithms[i];
  if (strcmp(name, "ring") == 0 || strcmp(name, "generic") == 0)
    for (size_t i = 0; i < NALGOS; i++)
      if (algorithms[i].coll == coll && algorithms[i].needs == NEED_NONE &&
          !is_oneshot(&algorithms[i]))
        return &algorithms[i];
  return NULL;
}

static int needs_met(const ul__generic_t *g, int needs) {
  if (needs == NEED_DIRECT) return g->load_store || g->cma;
  if (needs == NEED_SHARED) return g->shared_scratch;
  if (needs == NEED_LOAD_STORE) return g->load_store;
  return 1;
}

/* Largest message each one-shot handles (ul__staged_small: counted in staged bytes). The
 * one-shot allreduce has every rank reduce all n inputs: n^2 x bytes of reads in all,
 * against n x bytes for direct. With a core per rank that runs in parallel; with ranks
 * outnumbering cores it runs in turn, so the limit shrinks by (cores/ranks)^2 (4 ranks
 * on 2 cores: 8 KiB; measured in docs/performance.md). */
static size_t oneshot_capacity(const ul__generic_t *g, const algo_entry_t *e) {
  if (e->run == ul__line_broadcast) return UL__LB_MAX_BYTES;
  if (e->run == ul__line_gather) return UL__LG_MAX_BYTES;
  if (e->run == ul__line_small) return UL__LL_MAX_BYTES;
  if (e->run == ul__staged_oneshot_allreduce || e->run == ul__staged_small) return g->oneshot_bytes;
  return g->chunk_bytes < 64 * 1024 ? g->chunk_bytes : 64 * 1024;
}

/* A limit measured on this machine (UNILINK_TUNING_FILE), or UL__UNTUNED. The file
 * counts nccl-tests' sizes; an allgather stages one block of them. */
static size_t tuned_limit(const ul__generic_t *g, const algo_entry_t *e) {
  if (e->run != ul__staged_oneshot_allreduce && e->run != ul__staged_small) return UL__UNTUNED;
  size_t t = g->staged_max[g->load_store != 0][e->coll];
  return t != UL__UNTUNED && e->coll == UL_COLL_ALLGATHER ? t / (size_t)g->n : t;
}

static size_t oneshot_limit(const ul__generic_t *g, const algo_entry_t *e) {
  size_t t = tuned_limit(g, e);
  if (t != UL__UNTUNED) return t < oneshot_capacity(g, e) ? t : oneshot_capacity(g, e);
  if (e->run == ul__staged_oneshot_allreduce && g->oversubscribed) {
    double f = (double)g->ncpu / g->n;
    return (size_t)((double)g->oneshot_bytes * f * f) & ~(size_t)63;
  }
  return oneshot_capacity(g, e);
}

/* Process ranks outnumbering CPUs move buffers smaller than one bounce piece through
 * shared scratch at once, without the direct algorithm's publishing: its barrier and its
 * closing one each wait until every rank has been scheduled, which cost more than the
 * bounce's second copy. The same on every rank (the size, the agreed CPU count and
 * piece) and for every buffer kind, since nothing is published to tell them apart. 4
 * ranks on 2 CPUs, medians of 2 rounds, us, direct / bounce, back to back and
 * synchronized: broadcast 64 KiB malloc 32.2 / 14.9 and 33.8 / 21.5, ul_mem_alloc 28.8 /
 * 14.7 and 32.2 / 17.7; alltoall 64 KiB malloc 64.0 / 20.0 and 62.0 / 25.8, ul_mem_alloc
 * 44.1 / 22.6 and 32.8 / 21.3; reduce_scatter 128 KiB malloc 68.6 / 26.8 and 57.6 / 38.9,
 * ul_mem_alloc 60.4 / 30.6 and 40.2 / 33.7. At a whole piece (256 KiB) ul_mem_alloc
 * buffers lost synchronized (alltoall 37.0 against 40.3, reduce_scatter 45.3 against
 * 48.5, broadcast 34.3-40.9 against 42.6-45.8), past it by up to 2x. Not the allreduce:
 * its zero-copy direct beat the bounce (ul_mem_alloc 64 KiB b2b 39.0 against 48.7), and
 * not allgather: within a piece it runs staged. */
static int bounces_unpublished(const algo_ctx_t *x) {
  const ul__generic_t *g = x->g;
  ul_coll_t coll = x->a->coll;
  return g->oversubscribed && !g->load_store && g->shared_scratch &&
         (coll == UL_COLL_BROADCAST || coll == UL_COLL_ALLTOALL ||
          coll == UL_COLL_REDUCE_SCATTER) &&
         ul__largest_buffer_bytes(x) < g->piece_bytes;
}

/* Every rank passes the same zero count: nothing to move and nothing to wait for (as
 * NCCL and MPI do). */
static ul_result_t zero_count_call(ul_call_info_t *info) {
  ul__copy_str(info->algorithm, sizeof info->algorithm, "none");
  ul__copy_str(info->reason, sizeof info->reason, "zero elements: no data, no synchronisation");
  return UL_OK;
}

/* Why the selection loop picked @p al for @p bytes, kept in g->reason[coll] until
 * either changes. */
static void selection_reason(algo_ctx_t *x, const algo_entry_t *al, size_t bytes) {
  ul__generic_t *g = x->g;
  char *r = g->reason[x->a->coll].text;
  size_t rl = sizeof g->reason[x->a->coll].text;
  char over[64] = ""; /* why not the one-shot allreduce */
  if (x->a->coll == UL_COLL_ALLREDUCE && g->shared_scratch && g->oneshot_bytes)
    snprintf(over, sizeof over, "%zu bytes > %zu one-shot limit; ", bytes,
             oneshot_limit(g, find_algo(UL_COLL_ALLREDUCE, "oneshot")));
  if (al->run == ul__line_broadcast || al->run == ul__line_gather) {
    const char *readers = al->run == ul__line_gather ? "the root's" : "readers'";
    snprintf(r, rl,
             "%zu bytes a rank <= %zu: written into %s scratch in flagged cache lines, small "
             "ones packed, no staging, %s credits every %d lines",
             ul__line_bytes(x), oneshot_capacity(g, al), readers, readers, UL__LB_CREDIT);
  }
  else if (al->run == ul__line_small)
    snprintf(r, rl,
             "%zu bytes a peer <= %d: written into peers' scratch in flagged cache lines, no "
             "staging, no acknowledgement",
             ul__line_bytes(x), UL__LL_MAX_BYTES);
  else if (al->run == ul__staged_oneshot_allreduce || al->run == ul__staged_small)
    snprintf(r, rl,
             "%zu bytes <= %zu (%s): staged in shared scratch, one synchronisation",
             al->run == ul__staged_small ? ul__staged_bytes(x) : bytes, oneshot_limit(g, al),
             tuned_limit(g, al) != UL__UNTUNED ? "measured here: UNILINK_TUNING_FILE"
             : oneshot_limit(g, al) < g->oneshot_bytes ? "UNILINK_ONESHOT_BYTES x (cores/ranks)^2"
                                                      : "UNILINK_ONESHOT_BYTES");
  else if ((al->needs == NEED_DIRECT || al->needs == NEED_LOAD_STORE) && g->load_store)
    snprintf(r, rl, "%sranks share an address space: direct reads/writes of peers' buffers%s",
             over, x->host && bytes >= UL__NT_MIN_BYTES ? ", streaming stores" : "");
  else if (al->needs == NEED_DIRECT)
    snprintf(r, rl,
             "%sprocess ranks: single-copy reads/writes of peers' buffers with the "
             "backend's peer_read/peer_write (host: process_vm_readv/writev)",
             over);
  else if (!strcmp(al->name, "bounce") && bounces_unpublished(x))
    snprintf(r, rl,
             "ranks outnumber CPUs, buffers < a %zu-byte piece: through shared scratch, "
             "not published (publishing's barriers wait for every rank to run)",
             g->piece_bytes);
  else if (x->a->coll == UL_COLL_BARRIER && g->oversubscribed)
    snprintf(r, rl, "barrier, ranks outnumber CPUs: every rank signals rank 0, which releases "
                    "them once all have arrived and leaves first (the only barrier of the "
                    "generic layer)");
  else if (x->a->coll == UL_COLL_BARRIER)
    snprintf(r, rl, "barrier: one signal to every peer, then wait for theirs (the only "
                    "barrier of the generic layer)");
  else if (x->a->coll == UL_COLL_ALLREDUCE)
    snprintf(r, rl, "%zu bytes %s %zu through scratch channels", bytes,
             is_oneshot(al) ? "<=" : ">",
             oneshot_limit(g, find_algo(UL_COLL_ALLREDUCE, "oneshot-channel")));
  else
    snprintf(r, rl, "peers not load/store reachable (path %s)", x->c->props.path);
  g->reason[x->a->coll].algo = al;
  g->reason[x->a->coll].bytes = bytes;
  g->reason[x->a->coll].len = strlen(r);
}

static ul_result_t generic_collective(ul_comm_t comm, const ul__coll_args_t *a, const char *forced,
                                      ul_backend_stream_t *bs, ul_call_info_t *info) {
  ul__generic_t *g = comm->generic;
  algo_ctx_t x = {.g = g, .c = comm, .o = &comm->backend->ops, .a = a, .bs = bs,
                  .esize = ul_dtype_size(a->dtype), .rop = a->op == UL_AVG ? UL_SUM : a->op,
                  .host = (comm->backend->caps.flags & UL_BACKEND_HOST_MEMORY) != 0,
                  .forced = forced != NULL};
  if (a->coll == UL_COLL_BARRIER) x.esize = 1;
  g->seq = comm->seq;
  g->opname = ul_coll_name(a->coll);
  size_t bytes = a->count * x.esize;
  /* alike on every rank */
  int zero = ul__is_vcoll(a->coll) ? ul__vcoll_zero(a, comm->nranks)
                                   : a->coll != UL_COLL_BARRIER && a->count == 0;
  const algo_entry_t *al = NULL;
  if (forced) {
    al = find_algo(a->coll, forced);
    if (!al)
      return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                                "UNILINK_ALGO asks for algorithm '%s' for %s, which the generic "
                                "layer does not have",
                                forced, ul_coll_name(a->coll));
    if (!needs_met(g, al->needs))
      return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                                "UNILINK_ALGO asks for '%s' for %s, but ranks of this "
                                "communicator cannot %s (path %s)",
                                forced, ul_coll_name(a->coll),
                                al->needs == NEED_SHARED
                                    ? "load/store each other's scratch memory"
                                : al->needs == NEED_LOAD_STORE
                                    ? "load/store each other's buffers (thread ranks only)"
                                    : "reach each other's buffers (no shared address space, no "
                                      "single-copy peer ops)",
                                comm->props.path);
    if (is_oneshot(al) && oneshot_bytes_of(al, &x, bytes) > oneshot_capacity(g, al))
      return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                                "UNILINK_ALGO asks for '%s' %s of %zu bytes; it handles at "
                                "most %zu",
                                al->name, ul_coll_name(a->coll), oneshot_bytes_of(al, &x, bytes),
                                oneshot_capacity(g, al));
    if (zero) return zero_count_call(info);
    ul__copy_str(info->reason, sizeof info->reason, "forced by UNILINK_ALGO");
  } else {
    if (zero) return zero_count_call(info); /* no selection: this is all such a call costs */
    /* the choice depends on the collective and its size alone (the communicator's
     * reach and limits are fixed): the last one for this size stands */
    if (g->reason[a->coll].bytes == bytes) al = g->reason[a->coll].algo;
    for (size_t i = 0; i < NALGOS && !al; i++) {
      const algo_entry_t *e = &algorithms[i];
      if (e->coll != a->coll) continue;
      if (!needs_met(g, e->needs)) continue;
      if (is_oneshot(e) && oneshot_bytes_of(e, &x, bytes) > oneshot_limit(g, e))
        continue;
      if (e->needs == NEED_DIRECT && bounces_unpublished(&x)) continue;
      al = e;
    }
    if (!al) return ul__comm_set_error(comm, UL_ERR_INTERNAL, "no generic algorithm for %s",
                                       ul_coll_name(a->coll));
    if (g->reason[a->coll].algo != al || g->reason[a->coll].bytes != bytes)
      selection_reason(&x, al, bytes);
    /* the text, snprintf'ed, fits info->reason */
    _Static_assert(sizeof g->reason[0].text <= sizeof info->reason, "reason text too long");
    memcpy(info->reason, g->reason[a->coll].text, g->reason[a->coll].len + 1);
  }
  /* Which data path this call took. */
  if (al->needs == NEED_DIRECT && !g->load_store) {
    x.cma = 1;
    ul__copy_str(info->path, sizeof info->path, "cma");
  } else if (!g->load_store && g->shared_scratch && a->coll != UL_COLL_BARRIER) {
    ul__copy_str(info->path, sizeof info->path, "shm-copy");
  }
  _Static_assert(sizeof al->name < sizeof info->algorithm, "algorithm name too long");
  memcpy(info->algorithm, al->name, sizeof al->name);
  info->algorithm[sizeof al->name] = '\0';
  ul_result_t rc = al->run(&x);
  if (x.bounce) { /* the direct algorithm handed over to a bounce one (algo_direct.c) */
    ul__copy_str(info->algorithm, sizeof info->algorithm, "bounce");
    ul__copy_str(info->path, sizeof info->path, "shm-copy");
    ul__copy_str(info->reason, sizeof info->reason,
                 "process ranks, buffers peers cannot map (not from ul_mem_alloc): cache-sized "
                 "pieces through shared scratch, two copies in cache instead of one "
                 "single-copy (process_vm_readv/writev) through memory");
    return rc;
  }
  if (x.cma && g->zpeers > 0)
    ul__copy_str(info->path, sizeof info->path, x.zc ? "zero-copy" : "zero-copy+cma");
  if (x.single_below)
    snprintf(info->reason, sizeof info->reason,
             "process ranks, buffers peers cannot map: single copies (process_vm_readv/"
             "writev) below UNILINK_TUNING_FILE's bounce_from %zu bytes",
             x.single_below);
  else if (x.single_in_cache)
    snprintf(info->reason, sizeof info->reason,
             "process ranks, buffers peers cannot map, all ranks' buffers within the "
             "%zu-byte last-level cache: single copies (process_vm_readv/writev), one copy "
             "in cache, not two",
             g->llc_bytes);
  else if (x.unmeasured && g->zpeers == 0) /* with mapped peers the path's reason below */
    ul__copy_str(info->reason, sizeof info->reason,
                 "ranks outnumber CPUs, buffers peers cannot map: single copies, as bouncing "
                 "is not measured for this rank count (bench/calibrate-host.sh writes a "
                 "UNILINK_TUNING_FILE)");
  else if (x.cma && g->zpeers > 0 && !forced)
    ul__copy_str(info->reason, sizeof info->reason,
                 x.zc ? "process ranks: all peers' buffers from ul_mem_alloc mapped and "
                        "read/written in place"
                      : "process ranks: some peers' buffers from ul_mem_alloc mapped and "
                        "read/written in place, the others single-copy "
                        "(the backend's peer_read/peer_write)");
  return rc;
}

ul_result_t ul__generic_collective(ul_comm_t comm, const ul__coll_args_t *a, const char *forced,
                                   ul_backend_stream_t *bs, ul_call_info_t *info) {
  ul__generic_t *g = comm->generic;
  if (!g)
    return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                              "%s: backend %s has neither a native implementation nor the "
                              "primitives of the generic layer",
                              ul_coll_name(a->coll), comm->backend->ops.name);
  /* Every rank calls every collective in order: the count is the same everywhere. */
  g->coll_seq++;
  if (g->shared_scratch)
    __atomic_store_n(&((ul__mailbox_t *)g->scratch)->entered, g->coll_seq, __ATOMIC_RELEASE);
  g->in_coll = 1;
  ul_result_t rc = generic_collective(comm, a, forced, bs, info);
  g->in_coll = 0;
  return rc;
}
