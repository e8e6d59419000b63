/* Staged algorithms for small messages: each rank copies its input into its own shared
 * scratch, one READY/DONE signal exchange synchronises, and readers take what they need
 * straight from the peers' scratch (needs every peer's scratch load/store reachable). */
#include <string.h>

#include "generic_internal.h"

/* Small messages with one synchronisation, when every rank's scratch is load/store
 * reachable (threads, or processes over shared memory): each rank stages its input in
 * its own scratch (a slot chosen by epoch), announces the epoch to every peer, waits
 * for theirs and reduces all n inputs straight from the peers' scratch, in rank order
 * (identical results everywhere). Staging makes the input private to the operation, so
 * there is no closing barrier: a rank rewrites a slot only once every peer has
 * acknowledged (DONE) the epoch that last used it. */
/* Where epoch k stages sb bytes, in every rank's scratch (a pure function of k and sb,
 * which all ranks share). Tiny operations rotate over UL__STAGE_SLOTS slots, so a rank
 * (a broadcast root, say) may run up to 16 operations ahead of its readers, which then
 * catch up without a context switch per operation when ranks outnumber cores; larger
 * ones alternate between the two halves by epoch parity. */
static void staging_slots(const ul__generic_t *g, uint64_t k, size_t sb, int *first, int *count) {
  if (sb <= g->oneshot_bytes * 2 / UL__STAGE_SLOTS) {
    *first = (int)(k % UL__STAGE_SLOTS);
    *count = 1;
  } else {
    *first = (int)(k & 1) * (UL__STAGE_SLOTS / 2);
    *count = UL__STAGE_SLOTS / 2;
  }
}

static size_t staging_offset(const ul__generic_t *g, uint64_t k, size_t sb) {
  int first, count;
  staging_slots(g, k, sb, &first, &count);
  return g->oneshot_off + (size_t)first * (g->oneshot_bytes * 2 / UL__STAGE_SLOTS);
}

/* Does rank r read rank q's staging in this small operation? Broadcast and scatter
 * readers read only the root's; the root of reduce and gather reads every peer's and
 * nobody reads its; the others read every peer's. Signals go only where a read needs them: READY
 * from q to each reader, DONE from each reader back to q. Every rank knows the whole
 * pattern, so it counts how many signals each peer owes it (ready_expect, done_expect)
 * instead of numbering epochs: a broadcast costs the root n-1 signals and the others
 * one, not 2(n-1) each. */
static int staged_reads(const ul__coll_args_t *a, int r, int q) {
  if (r == q) return 0;
  switch (a->coll) {
  case UL_COLL_BROADCAST:
  case UL_COLL_SCATTER: return q == a->root;
  case UL_COLL_REDUCE:
  case UL_COLL_GATHER: return r == a->root;
  default: return 1;
  }
}

/* Does only the root stage (it alone has an input)? */
static int root_alone_stages(const ul__coll_args_t *a) {
  return a->coll == UL_COLL_BROADCAST || a->coll == UL_COLL_SCATTER;
}

/* Before this rank writes its staging for epoch k: every reader must have finished
 * reading whatever was staged last in those slots (its DONE count reached what it was
 * owed then). Usually already true (one load per peer); it bounds how far a rank runs
 * ahead of its readers. Then record what this operation's readers will owe. */
static ul_result_t staging_reusable(algo_ctx_t *x, uint64_t k, size_t sb) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me, first, count;
  staging_slots(g, k, sb, &first, &count);
  for (int i = 1; i < n; i++) {
    int p = (me + i) % n;
    uint64_t need = 0;
    for (int s = first; s < first + count; s++)
      if (g->slot_need[s * n + p] > need) need = g->slot_need[s * n + p];
    if (need) UL_CHECK(ul__gwait(g, UL__SIG_DONE(g, p), need, p, x->bs));
  }
  for (int p = 0; p < n; p++) {
    if (staged_reads(x->a, p, me)) g->done_expect[p]++;
    for (int s = first; s < first + count; s++) g->slot_need[s * n + p] = g->done_expect[p];
  }
  return UL_OK;
}

/* Signal idx to every peer that reads this rank's staging (readers = 1) or whose
 * staging this rank reads (readers = 0). */
static ul_result_t staged_signal(algo_ctx_t *x, int readers, int idx) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  for (int i = 1; i < n; i++) {
    int p = (me + i) % n;
    if (readers ? staged_reads(x->a, p, me) : staged_reads(x->a, me, p))
      UL_CHECK(x->o->signal(BC(x), g->win, p, idx, x->bs));
  }
  return UL_OK;
}

/* Tell this rank's readers its staging is written, and wait until the ranks it reads
 * from have written theirs. */
static ul_result_t staged_ready(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  UL_CHECK(staged_signal(x, 1, UL__SIG_READY(g, me)));
  for (int i = 1; i < n; i++) {
    int q = (me + n - i) % n;
    if (staged_reads(x->a, me, q))
      UL_CHECK(ul__gwait(g, UL__SIG_READY(g, q), ++g->ready_expect[q], q, x->bs));
  }
  return UL_OK;
}

/* Done reading: each rank read from may reuse its staging. */
static ul_result_t staged_done(algo_ctx_t *x) { return staged_signal(x, 0, UL__SIG_DONE(x->g, x->g->me)); }

UL__HIDDEN ul_result_t ul__staged_oneshot_allreduce(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n;
  size_t bytes = a->count * x->esize;
  if (n == 1) return ul__single_rank_allreduce(x);
  uint64_t k = ++g->oneshot_epoch;
  size_t boff = staging_offset(g, k, bytes);
  UL_CHECK(staging_reusable(x, k, bytes));
  UL_CHECK(COPY(x, (char *)g->scratch + boff, a->sendbuf, bytes));
  UL_CHECK(staged_ready(x));
  /* Our own input is read from the staged copy too: recvbuf may alias sendbuf. */
  UL_CHECK(REDUCE(x, a->recvbuf, (char *)g->peer_bases[0] + boff, (char *)g->peer_bases[1] + boff,
                  a->count));
  for (int r = 2; r < n; r++)
    UL_CHECK(REDUCE(x, a->recvbuf, a->recvbuf, (char *)g->peer_bases[r] + boff, a->count));
  UL_CHECK(staged_done(x));
  if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
  return UL_OK;
}

/* Bytes each rank stages for a small collective (what peers read from it). */
UL__HIDDEN size_t ul__staged_bytes(const algo_ctx_t *x) {
  const ul__coll_args_t *a = x->a;
  size_t b = a->count * x->esize;
  if (a->coll == UL_COLL_ALLTOALL || a->coll == UL_COLL_REDUCE_SCATTER ||
      a->coll == UL_COLL_SCATTER)
    b *= (size_t)x->g->n;
  return b;
}

/* The other small collectives on the same single-synchronisation staging as the
 * one-shot allreduce: stage the input, exchange epochs, read what we need from the
 * peers' staging buffers. A rooted collective synchronises only with its root: the
 * other ranks of a reduce or gather stage, signal the root and leave; those of a
 * broadcast or scatter wait for the root's signal alone. The root reads its own input
 * from its staging too, so in-place buffers need no case of their own. */
UL__HIDDEN ul_result_t ul__staged_small(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me;
  size_t sb = ul__staged_bytes(x), cb = a->count * x->esize;
  uint64_t k = ++g->oneshot_epoch;
  size_t boff = staging_offset(g, k, sb);
  /* A broadcast reads only the root's staging: the root waits for nobody, the others
   * for the root alone (a root runs ahead as far as staging_reusable lets it). */
  if (!root_alone_stages(a) || me == a->root) {
    UL_CHECK(staging_reusable(x, k, sb));
    UL_CHECK(COPY(x, (char *)g->scratch + boff, a->sendbuf, sb));
  }
  UL_CHECK(staged_ready(x));
#define STAGED(r) ((char *)g->peer_bases[r] + boff)
  switch (a->coll) {
  case UL_COLL_BROADCAST:
    UL_CHECK(COPY(x, a->recvbuf, STAGED(a->root), cb));
    break;
  case UL_COLL_ALLGATHER:
    for (int r = 0; r < n; r++) UL_CHECK(COPY(x, at(a->recvbuf, (size_t)r * a->count, x->esize), STAGED(r), cb));
    break;
  case UL_COLL_ALLTOALL:
    for (int r = 0; r < n; r++)
      UL_CHECK(COPY(x, at(a->recvbuf, (size_t)r * a->count, x->esize),
                    STAGED(r) + (size_t)me * cb, cb));
    break;
  case UL_COLL_SCATTER:
    UL_CHECK(COPY(x, a->recvbuf, STAGED(a->root) + (size_t)me * cb, cb));
    break;
  case UL_COLL_GATHER:
    if (me == a->root)
      for (int r = 0; r < n; r++)
        UL_CHECK(COPY(x, at(a->recvbuf, (size_t)r * a->count, x->esize), STAGED(r), cb));
    break;
  case UL_COLL_REDUCE:
    if (me != a->root) break;
    if (n == 1) UL_CHECK(COPY(x, a->recvbuf, STAGED(0), cb));
    else UL_CHECK(REDUCE(x, a->recvbuf, STAGED(0), STAGED(1), a->count));
    for (int r = 2; r < n; r++) UL_CHECK(REDUCE(x, a->recvbuf, a->recvbuf, STAGED(r), a->count));
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
    break;
  case UL_COLL_REDUCE_SCATTER: {
    size_t o = (size_t)me * cb;
    if (n == 1) UL_CHECK(COPY(x, a->recvbuf, STAGED(0) + o, cb));
    else UL_CHECK(REDUCE(x, a->recvbuf, STAGED(0) + o, STAGED(1) + o, a->count));
    for (int r = 2; r < n; r++) UL_CHECK(REDUCE(x, a->recvbuf, a->recvbuf, STAGED(r) + o, a->count));
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
    break;
  }
  default:
    return ul__comm_set_error(x->c, UL_ERR_INTERNAL, "staged: unexpected collective");
  }
#undef STAGED
  return staged_done(x);
}

/* ---------------------------------------------------------------- flagged lines */

/* The smallest collectives, where a call costs a few cache-line transfers and every extra
 * one shows: each rank writes its data for a peer straight into that peer's scratch, in
 * 64-byte lines that carry the epoch beside up to 56 bytes of payload (written last, with
 * release order), so a reader that sees the epoch has the data in the same transfer. No
 * staging copy and no acknowledgement: these collectives are symmetric (every rank waits
 * for every peer each epoch), so when a rank starts epoch k every peer has finished k-2,
 * and two sets of lines, by epoch parity, never overwrite data still to be read. A
 * reader that does not find its lines within a short spin falls back to the backend's
 * timed wait (timeouts, aborts, lost peers, sleeping when ranks outnumber cores) on the
 * line's flag itself (wait_word). No signal then: it is a locked add per peer, which
 * waits for the line stores before it (medians of 5-7 alternating rounds, 8-512 B
 * allreduce: 4 thread ranks 1.33-1.43x faster, np2 synchronized 1.00-1.42x, np4
 * 1.05-1.13x, np2 back to back unchanged). A backend without wait_word gets a signal per
 * epoch to each peer, after the lines, and its readers wait for that. */
#define LINE_SPIN 256

/* Whether a writer of flagged lines signals its readers after them, the same on every
 * rank: where the backend cannot wait on a line's flag itself (no wait_word), and for
 * broadcasts in slots of lines, whose signal paces the root (ul__line_broadcast). */
static int lines_signalled(const ul__generic_t *g, int slotted_broadcast) {
  return !g->wait_word || slotted_broadcast;
}

static char *line_at(const ul__generic_t *g, void *base, int src, uint64_t k, int i) {
  return (char *)base + g->ll_off +
         (((size_t)src * 2 + (size_t)(k & 1)) * UL__LL_LINES + (size_t)i) * UL__LL_LINE;
}

/* b bytes from src into the lines from `line` on, the first from payload byte off on
 * (then b fits in it), each stamped with flag: payload first, then the flag (release
 * order). A line's flag only grows, so a reader waits for its flag or a later one. */
static void lines_write(char *line, size_t off, uint64_t flag, const void *src, size_t b) {
  const char *s = src;
  for (; b > 0; line += UL__LL_LINE, off = 0) {
    size_t m = b < UL__LL_PAYLOAD - off ? b : UL__LL_PAYLOAD - off;
    /* a full line's constant size compiles to moves; a libc call per line cost a third
     * of a 512 B allreduce */
    if (m == UL__LL_PAYLOAD) memcpy(line + sizeof(uint64_t), s, UL__LL_PAYLOAD);
    else memcpy(line + sizeof(uint64_t) + off, s, m);
    __atomic_store_n((uint64_t *)line, flag, __ATOMIC_RELEASE);
    s += m;
    b -= m;
  }
}

/* b bytes from the lines from `line` on (this rank's scratch; the first from payload
 * byte off on, as lines_write), written by rank q with flag (or later ones), into dst. A
 * line not there within a short spin: the timed wait for q's signal sig to reach
 * sig_value (q signals after writing its lines), or with sig < 0 (q sends no signal) the
 * backend's timed wait on the line's flag itself (wait_word). */
static ul_result_t lines_read(algo_ctx_t *x, const char *line, size_t off, uint64_t flag, int q,
                              int sig, uint64_t sig_value, void *dst, size_t b) {
  ul__generic_t *g = x->g;
  char *d = dst;
  for (int i = 0; b > 0; i++, line += UL__LL_LINE, off = 0) {
    size_t m = b < UL__LL_PAYLOAD - off ? b : UL__LL_PAYLOAD - off;
    int spin = g->oversubscribed ? 0 : LINE_SPIN; /* the peer needs our core */
    while (__atomic_load_n((const uint64_t *)line, __ATOMIC_ACQUIRE) < flag && spin-- > 0)
      ul_backend_cpu_pause();
    if (__atomic_load_n((const uint64_t *)line, __ATOMIC_ACQUIRE) < flag) {
      if (sig < 0) {
        UL_CHECK(ul__gwait_word(g, line, flag, q, x->bs));
      } else {
        UL_CHECK(ul__gwait(g, sig, sig_value, q, x->bs));
        if (__atomic_load_n((const uint64_t *)line, __ATOMIC_ACQUIRE) < flag)
          return ul__comm_set_error(x->c, UL_ERR_INTERNAL,
                                    "%s: rank %d's signal reached %llu but its line %d holds "
                                    "%llu, not %llu",
                                    g->opname, q, (unsigned long long)sig_value, i,
                                    (unsigned long long)__atomic_load_n((const uint64_t *)line,
                                                                        __ATOMIC_ACQUIRE),
                                    (unsigned long long)flag);
      }
    }
    if (m == UL__LL_PAYLOAD) memcpy(d, line + sizeof(uint64_t), UL__LL_PAYLOAD); /* as above */
    else memcpy(d, line + sizeof(uint64_t) + off, m);
    d += m;
    b -= m;
  }
  return UL_OK;
}

/* Rank q's data for epoch k, from this rank's own scratch into dst. */
static ul_result_t line_pull(algo_ctx_t *x, int q, uint64_t k, void *dst, size_t b) {
  int sig = lines_signalled(x->g, 0) ? UL__SIG_LL(x->g, q) : -1;
  return lines_read(x, line_at(x->g, x->g->scratch, q, k, 0), 0, k, q, sig, k, dst, b);
}

/* Bytes a rank sends each peer in ul__line_small. */
UL__HIDDEN size_t ul__line_bytes(const algo_ctx_t *x) { return x->a->count * x->esize; }

UL__HIDDEN ul_result_t ul__line_small(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me;
  size_t cb = ul__line_bytes(x);
  int blocks = a->coll == UL_COLL_ALLTOALL || a->coll == UL_COLL_REDUCE_SCATTER;
  if (n == 1 && a->coll == UL_COLL_ALLREDUCE) return ul__single_rank_allreduce(x);
  /* We write into peers' scratch before any wait: first make sure none has aborted (a
   * thread rank's scratch goes with its communicator). A wait for a value already reached
   * is the backend's check of aborted and lost peers and nothing more. */
  if (n > 1) UL_CHECK(ul__gwait(g, UL__SIG_LIVE(g), 0, (me + 1) % n, x->bs));
  uint64_t k = ++g->ll_epoch;
  for (int i = 1; i < n; i++) {
    int p = (me + i) % n;
    lines_write(line_at(g, g->peer_bases[p], me, k, 0), 0, k,
                blocks ? at(a->sendbuf, (size_t)p * a->count, x->esize) : a->sendbuf, cb);
  }
  for (int i = 1; i < n && lines_signalled(g, 0); i++)
    UL_CHECK(x->o->signal(BC(x), g->win, (me + i) % n, UL__SIG_LL(g, me), x->bs));
  if (a->coll == UL_COLL_ALLGATHER || a->coll == UL_COLL_ALLTOALL) {
    for (int r = 0; r < n; r++) {
      char *dst = at(a->recvbuf, (size_t)r * a->count, x->esize);
      if (r != me) UL_CHECK(line_pull(x, r, k, dst, cb));
      else if (blocks) UL_CHECK(ul__copy_if_needed(x, dst, at(a->sendbuf, (size_t)me * a->count, x->esize), a->count));
      else UL_CHECK(ul__copy_if_needed(x, dst, a->sendbuf, a->count));
    }
    return UL_OK;
  }
  /* allreduce, reduce_scatter: reduce all n inputs in rank order (the same result on
   * every rank), in cache-line-aligned temporaries: recvbuf may alias sendbuf */
  _Alignas(64) char acc[UL__LL_MAX_BYTES], in[UL__LL_MAX_BYTES];
  const char *mine = blocks ? at(a->sendbuf, (size_t)me * a->count, x->esize) : a->sendbuf;
  for (int r = 0; r < n; r++) {
    const char *src = mine;
    if (r != me) {
      UL_CHECK(line_pull(x, r, k, r == 0 ? acc : in, cb));
      src = r == 0 ? acc : in;
    }
    if (r == 0) {
      if (src != acc) memcpy(acc, src, cb);
    } else {
      UL_CHECK(REDUCE(x, acc, acc, src, a->count));
    }
  }
  memcpy(a->recvbuf, acc, cb);
  if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
  return UL_OK;
}

/* ------------------------------------------------------------ broadcast lines */

/* A small broadcast has one writer, so the symmetric argument above (no
 * acknowledgement) does not hold: a root may run ahead of its readers. Each root's
 * broadcasts fill a ring of UL__LB_RING lines in every reader's scratch in order, each
 * line flagged with the count of the last broadcast written into it; small ones share
 * lines (up to seven 8-byte broadcasts a line and its transfer), larger ones take a slot
 * of lines each (bcast_place), and a root runs up to a ring of lines ahead (Open MPI's
 * shared-memory fastbox packs small messages the same way). Where each broadcast goes
 * follows from the sizes alone, which every rank sees alike. Readers return a credit
 * signal every UL__LB_CREDIT lines they finish, and the root waits for credits only when
 * it comes round to a line it has not been told is free. A reader's call is then a line
 * transfer per 56 bytes, or a share of one, and a local copy; the root's, its stores and
 * a signal per reader. Not for packed broadcasts: a signal is a locked add, which waits
 * until the stores before it reach the readers that hold those lines, and that wait was
 * most of the root's call. Their readers wait on the line's flag instead (the backend's
 * wait_word; a backend without it gets the signal). np2 back to
 * back, medians of 7 alternating rounds: 8 B 0.22 -> 0.13 us. Multi-line broadcasts keep
 * the signal: without its wait the root's stores into the next slot meet the readers
 * still pulling this one (64 B 0.28 -> 0.33, 512 B 0.32 -> 0.60). */
/* A broadcast small enough to share a line with another. */
static int bcast_packed(size_t b) { return 2 * b <= UL__LL_PAYLOAD; }

/* Where the next broadcast of b bytes goes: its first line and payload offset. It moves
 * the cursor s. One small enough to share a line with another (28 bytes or less) goes
 * into what is left of the current line, or the next line; any other starts the next slot
 * of UL__LB_LINES lines (the ring holds a whole number of them, so none runs past its
 * end). Longer broadcasts laid end to end were slower (np2 b2b, 512 B 0.45-0.46 us
 * against 0.34-0.37 a slot each; 2 thread ranks, 32-64 B 0.37-0.39 against 0.31-0.32):
 * the reader's prefetch of the lines after the ones it reads takes the next broadcast's
 * lines from under the root's stores. Unless end_to_end (ranks outnumber cores, alike on
 * every rank): root and readers then run mostly in turn, so no prefetch races the root,
 * and a slot each left room for 16 broadcasts in the ring before the root waited for
 * credits from readers that need its core. End to end (a broadcast that would cross the
 * ring's end starts it again), 4 ranks on 2 cores, b2b, medians of 5 alternating rounds:
 * processes 32-256 B 2.1-2.2 us -> 0.36-0.73, 512 B 1.83 -> 1.32 (7 rounds), 1 KiB 1.02x;
 * threads 32-128 B 2.0-2.4x, 512 B-1 KiB 1.03-1.14x. */

static void bcast_place(ul__lb_state_t *s, size_t b, int end_to_end, uint64_t slot,
                        uint64_t *line, size_t *off) {
  if (bcast_packed(b)) {
    if (b > UL__LL_PAYLOAD - s->off) {
      s->line++;
      s->off = 0;
    }
    *line = s->line;
    *off = s->off;
    s->off += b;
    return;
  }
  uint64_t nl = (b + UL__LL_PAYLOAD - 1) / UL__LL_PAYLOAD;
  uint64_t first = s->off == 0 ? s->line : s->line + 1; /* off 0: nothing written yet */
  if (!end_to_end) first = (first + slot - 1) / slot * slot;
  else if (first % UL__LB_RING + nl > UL__LB_RING) /* would cross the ring's end */
    first = (first / UL__LB_RING + 1) * UL__LB_RING;
  *line = first;
  *off = 0;
  s->line = first + nl - 1;
  s->off = b - (size_t)(nl - 1) * UL__LL_PAYLOAD;
}

/* What the root sends rank p: its whole input (broadcast) or block p of it (scatter). */
static const void *root_block(const algo_ctx_t *x, int p) {
  const ul__coll_args_t *a = x->a;
  return a->coll == UL_COLL_SCATTER ? at(a->sendbuf, (size_t)p * a->count, x->esize)
                                    : a->sendbuf;
}

/* Line `line` of ring `ring` (UL__LB_REGION) in the scratch at base. */
static char *rooted_line(const ul__generic_t *g, void *base, int ring, uint64_t line) {
  return (char *)base + g->lb_off +
         ((size_t)ring * UL__LB_RING + (size_t)(line % UL__LB_RING)) * UL__LL_LINE;
}

/* A writer of a ring, before writing its lines up to `last`: line `last` last held ring
 * round line last - UL__LB_RING, free once every reader has finished the lines up to it,
 * that is returned (last - UL__LB_RING + 1) / UL__LB_CREDIT credits, rounded up. Reader
 * p returns them on signal credit_sig + p; reader < 0: every peer reads. */
static ul_result_t rooted_credits_wait(algo_ctx_t *x, ul__lb_state_t *s, uint64_t last,
                                       int credit_sig, int reader) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  uint64_t need = last < UL__LB_RING ? 0
                                     : (last - UL__LB_RING + UL__LB_CREDIT) / UL__LB_CREDIT;
  if (need > s->credits_known) {
    for (int i = 1; i < n; i++) {
      int p = (me + i) % n;
      if (reader < 0 || p == reader) UL_CHECK(ul__gwait(g, credit_sig + p, need, p, x->bs));
    }
    s->credits_known = need;
  } else if (n > 1) {
    /* We write into peers' scratch: first make sure none has aborted (as ul__line_small). */
    UL_CHECK(ul__gwait(g, UL__SIG_LIVE(g), 0, reader < 0 ? (me + 1) % n : reader, x->bs));
  }
  return UL_OK;
}

/* A reader of a ring, having finished every line before `last` (the collectives after
 * this one start at last or later): a credit every UL__LB_CREDIT lines, on signal
 * credit_sig, to the ring's writer, or (writer < 0) to every peer. */
static ul_result_t rooted_credits_return(algo_ctx_t *x, ul__lb_state_t *s, uint64_t last,
                                         int credit_sig, int writer) {
  ul__generic_t *g = x->g;
  int n = g->n, me = g->me;
  while ((s->credits_returned + 1) * UL__LB_CREDIT <= last) {
    for (int i = 1; i < n; i++) {
      int p = (me + i) % n;
      if (writer < 0 || p == writer)
        UL_CHECK(x->o->signal(BC(x), g->win, p, credit_sig, x->bs));
    }
    s->credits_returned++;
  }
  return UL_OK;
}

/* A broadcast, or a scatter: the same lines in the same places of every reader's ring
 * (the places follow from the block size, which every rank sees alike), each reader's
 * holding its own block. */
UL__HIDDEN ul_result_t ul__line_broadcast(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me, root = a->root;
  size_t cb = ul__line_bytes(x), off;
  ul__lb_state_t *s = &g->lb[root];
  uint64_t j = s->count++, first;
  int signalled = lines_signalled(g, !bcast_packed(cb));
  if (signalled) s->signalled++;
  bcast_place(s, cb, g->oversubscribed, UL__LB_LINES, &first, &off);
  uint64_t last = s->line; /* the broadcast's lines: first .. last */
  if (me != root) {
    UL_CHECK(lines_read(x, rooted_line(g, g->scratch, root, first), off, j + 1, root,
                        signalled ? UL__SIG_LB(g, root) : -1, s->signalled, a->recvbuf, cb));
    return rooted_credits_return(x, s, last, UL__SIG_LB_CREDIT(g, me), root);
  }
  UL_CHECK(rooted_credits_wait(x, s, last, UL__SIG_LB_CREDIT(g, 0), -1));
  for (int i = 1; i < n; i++) {
    int p = (me + i) % n;
    lines_write(rooted_line(g, g->peer_bases[p], root, first), off, j + 1, root_block(x, p), cb);
  }
  if (signalled)
    for (int i = 1; i < n; i++)
      UL_CHECK(x->o->signal(BC(x), g->win, (me + i) % n, UL__SIG_LB(g, me), x->bs));
  return ul__copy_if_needed(x, a->recvbuf, root_block(x, me), a->count);
}

/* A gather or reduce of up to UL__LG_MAX_BYTES a rank: the broadcast's lines the other
 * way. Each other rank writes its input into its own ring in the root's scratch, in the
 * places a broadcast of that size would take, in slots of UL__LG_LINES (bcast_place:
 * every writer's alike, as they write the same sizes), and leaves. The root reads the
 * rings in rank order, waiting on a line's flag where it is not there yet (no signal
 * where the backend has wait_word, even for calls of several lines: np2 back to back,
 * 128-512 B reduce 0.24-0.29 us with the signal, 0.21-0.25 without, medians of 3
 * alternating rounds; synchronized the same within 0.05 us), and returns credits to
 * every writer, as a broadcast's readers do to their root. The staged version
 * (ul__staged_small) had every writer copy into its staging, signal the root, and wait
 * for the root's acknowledgement before reusing the staging slot; here a writer's call
 * is its line stores and, every UL__LB_CREDIT lines, a check of the root's credit. A
 * reduce adds the inputs in rank order, as every other reduce does. */
UL__HIDDEN ul_result_t ul__line_gather(algo_ctx_t *x) {
  ul__generic_t *g = x->g;
  const ul__coll_args_t *a = x->a;
  int n = g->n, me = g->me, root = a->root;
  size_t cb = ul__line_bytes(x), off;
  ul__lb_state_t *s = &g->lb[n + root];
  uint64_t j = s->count++, first;
  int signalled = lines_signalled(g, 0); /* then every call: its signal count is j + 1 */
  bcast_place(s, cb, g->oversubscribed, UL__LG_LINES, &first, &off);
  uint64_t last = s->line; /* this call's lines in each ring: first .. last */
  if (me != root) {
    UL_CHECK(rooted_credits_wait(x, s, last, UL__SIG_LG_CREDIT(g, 0), root));
    lines_write(rooted_line(g, g->peer_bases[root], n + me, first), off, j + 1, a->sendbuf, cb);
    if (signalled) UL_CHECK(x->o->signal(BC(x), g->win, root, UL__SIG_LG(g, me), x->bs));
    return UL_OK;
  }
#define LINES_OF(r, dst)                                                                   \
  lines_read(x, rooted_line(g, g->scratch, n + (r), first), off, j + 1, (r),              \
             signalled ? UL__SIG_LG(g, r) : -1, j + 1, (dst), cb)
  if (a->coll == UL_COLL_GATHER) {
    /* our own block first: an in-place root's input may lie where a peer's block goes */
    UL_CHECK(ul__copy_if_needed(x, at(a->recvbuf, (size_t)me * a->count, x->esize), a->sendbuf,
                                a->count));
    for (int r = 0; r < n; r++)
      if (r != me) UL_CHECK(LINES_OF(r, at(a->recvbuf, (size_t)r * a->count, x->esize)));
  } else {
    /* in cache-line-aligned temporaries: recvbuf may alias sendbuf */
    _Alignas(64) char acc[UL__LG_MAX_BYTES], in[UL__LG_MAX_BYTES];
    if (me == 0) memcpy(acc, a->sendbuf, cb);
    else UL_CHECK(LINES_OF(0, acc));
    for (int r = 1; r < n; r++) {
      if (r != me) UL_CHECK(LINES_OF(r, in));
      UL_CHECK(REDUCE(x, acc, acc, r == me ? a->sendbuf : in, a->count));
    }
    memcpy(a->recvbuf, acc, cb);
    if (a->op == UL_AVG) UL_CHECK(SCALE(x, a->recvbuf, a->count));
  }
#undef LINES_OF
  return rooted_credits_return(x, s, last, UL__SIG_LG_CREDIT(g, me), -1);
}
