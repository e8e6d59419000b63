/* Generic layer plumbing: the scratch window, flow-controlled channels between ranks,
 * barriers and pointer publication for direct algorithms.
 *
 * Scratch layout on every rank:
 *   [mailbox: 128 B, this rank's published buffer pointers (direct algorithms)]
 *   [slots: nranks x slot_bytes; slot j receives chunks from rank j, NBUF buffers each]
 *   [work: chunk_bytes, local accumulator]
 *   [one-shot staging: 2 x oneshot_bytes]
 *   [headers: n x NBUF words; word (j, b): length of the p2p message whose first chunk
 *    rank j put in buffer b of slot j (host-memory scratch only)]
 * Signal indices of the scratch window (counters only grow; state below tracks them):
 *   DATA(j) = j        chunk from rank j landed in my slot j
 *   CREDIT(j) = n + j  rank j released a buffer of its slot for me
 *   SYNC(j) = 2n + j   barrier arrivals of rank j
 */
#define _GNU_SOURCE
#include "generic.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "generic_internal.h"

int ul__generic_available(ul_comm_t comm) { return comm->generic != NULL; }

/* One word of a sysfs file of CPU 0's cache index i ("2", "Unified", "1024K"). */
static int cache_word(int i, const char *name, char *out, size_t len) {
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i, name);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int ok = fgets(out, (int)len, f) != NULL;
  fclose(f);
  return ok ? 0 : -1;
}

/* A data cache of CPU 0 (level 2 or 3) from sysfs (every rank reads the same CPU, where
 * a hybrid machine's cores differ), else glibc's figure, else 0. */
static size_t generic_cache_bytes(int want) {
  for (int i = 0; i < 8; i++) {
    char level[8], type[16], size[32];
    if (cache_word(i, "level", level, sizeof level) || atoi(level) != want ||
        cache_word(i, "type", type, sizeof type) || !strncmp(type, "Instruction", 11) ||
        cache_word(i, "size", size, sizeof size))
      continue;
    char *end;
    unsigned long long v = strtoull(size, &end, 10);
    if (*end == 'K') v <<= 10;
    else if (*end == 'M') v <<= 20;
    if (v) return (size_t)v;
  }
  long v = sysconf(want == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE);
  return v > 0 ? (size_t)v : 0;
}

/* A bounce piece crosses the cache as three pieces at once (the peer's, arriving in a
 * channel slot; this rank's input it is reduced with; the result it sends on): a quarter
 * of the level-2 cache holds them with room to spare. Measured on the reference VM (L2
 * 1 MiB, np2 allreduce, malloc buffers, 4-64 MiB, interleaved rounds): 256 and 512 KiB
 * alike (4 rounds, both methods), 128 KiB up to 30% slower, 64 KiB up to 70%, 1 MiB
 * (the whole L2) 1.1-2.2x slower. Never more than a channel chunk, which holds the
 * piece; at least 16 KiB. */
size_t ul__piece_bytes(size_t chunk_bytes, size_t l2_bytes) {
  size_t p = l2_bytes / 4 & ~(size_t)4095;
  if (!l2_bytes || p > chunk_bytes) return chunk_bytes;
  return p < 16384 ? (chunk_bytes < 16384 ? chunk_bytes : 16384) : p;
}

/* Ranks in separate processes whose scratch is shared memory: can they read and write
 * each other's private buffers with the backend's single-copy peer ops (the host
 * backend's cross-memory attach)? Permission is per pair, so every rank asks its backend
 * and the ranks agree on the answer: a path that one rank cannot take must not be chosen
 * by the others. The ranks also agree on the core count, on which selection depends. One
 * barrier, once per comm; the mailbox fields read after it are never rewritten. */
static ul_result_t generic_probe_processes(ul__generic_t *g) {
  ul_comm_t comm = g->comm;
  const ul_backend_ops_t *o = &comm->backend->ops;
  ul__mailbox_t *mb = (ul__mailbox_t *)g->scratch;
  int ok = 0;
  if (ul__param_get_int(UL__P_CMA) != 0 && !ul__op_is_stub((const void *)o->peer_copy_ready) &&
      !ul__op_is_stub((const void *)o->peer_read) && !ul__op_is_stub((const void *)o->peer_write) &&
      o->peer_copy_ready(comm->bcomm, &ok) != UL_OK)
    ok = 0;
  mb->cma_ok = ok != 0;
  mb->ncpu = g->ncpu;
  mb->l2_bytes = g->l2_bytes;
  mb->llc_bytes = g->llc_bytes;
  UL_CHECK(ul__generic_barrier(g->comm, NULL, "generic layer setup"));
  int all = 1;
  for (int p = 0; p < g->n; p++) {
    const ul__mailbox_t *pm = (const ul__mailbox_t *)g->peer_bases[p];
    if (!pm->cma_ok) all = 0;
    /* Selection depends on it: every rank must use the same value. */
    if (pm->ncpu > 0 && pm->ncpu < g->ncpu) g->ncpu = pm->ncpu;
    if (pm->l2_bytes < g->l2_bytes) g->l2_bytes = pm->l2_bytes; /* so are pieces */
    if (pm->llc_bytes < g->llc_bytes) g->llc_bytes = pm->llc_bytes; /* and single copies */
  }
  g->cma = all;
  g->opname = NULL;
  return UL_OK;
}

ul_result_t ul__generic_init(ul_comm_t comm) {
  comm->generic = NULL;
  const ul_backend_ops_t *o = &comm->backend->ops;
  /* Native-collective backends (mpi, nccl) run without the generic layer: it would cost
   * a window and scratch per communicator they do not need. */
  if (!(comm->backend->caps.features & UL_FEATURE_GENERIC_COLL)) return UL_OK;
  if (ul__op_is_stub((const void *)o->window_register) || ul__op_is_stub((const void *)o->put) ||
      ul__op_is_stub((const void *)o->signal) || ul__op_is_stub((const void *)o->wait_signal) ||
      ul__op_is_stub((const void *)o->mem_alloc))
    return UL_OK; /* native-only backend: no generic layer */
  int n = comm->nranks;
  ul__generic_t *g = calloc(1, sizeof *g);
  if (!g) return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "generic layer: out of memory");
  g->comm = comm;
  g->n = n;
  g->me = comm->rank;
  size_t chunk = (size_t)ul__param_get_int(UL__P_CHUNK_BYTES);
  if (chunk < 4096) chunk = 4096;
  /* Keep scratch bounded for many ranks: at most ~8 MiB of slots per rank. */
  while (chunk > 16384 && (size_t)n * UL__NBUF * chunk > ((size_t)8 << 20)) chunk /= 2;
  chunk &= ~(size_t)63;
  g->chunk_bytes = chunk;
  g->slot_bytes = UL__NBUF * chunk;
  _Static_assert(sizeof(ul__mailbox_t) <= UL__MAILBOX_BYTES, "mailbox outgrew its room");
  g->slots_off = UL__MAILBOX_BYTES;
  g->work_off = g->slots_off + (size_t)n * g->slot_bytes;
  /* One-shot staging: two buffers (even/odd epochs) that peers read in place, so a
   * small allreduce needs a single synchronisation (see algo_staged.c). */
  ul_result_t rc = ul__tuning_load(g, ul__param_get_str(UL__P_TUNING_FILE));
  if (rc != UL_OK) {
    ul__generic_fini_state(g);
    return rc;
  }
  size_t os = (size_t)ul__param_get_int(UL__P_ONESHOT_BYTES);
  if (os < ul__tuning_staging_bytes(g)) os = ul__tuning_staging_bytes(g);
  if (os > UL__STAGED_MAX_BYTES) os = UL__STAGED_MAX_BYTES;
  os = (os + 63) & ~(size_t)63;
  g->oneshot_off = g->work_off + chunk;
  g->oneshot_bytes = os;
  g->hdr_off = g->oneshot_off + 2 * os;
  g->ll_off = g->hdr_off + (((size_t)n * UL__NBUF * sizeof(uint64_t) + 63) & ~(size_t)63);
  g->lb_off = g->ll_off + UL__LL_REGION(n);
  g->scratch_size = g->lb_off + UL__LB_REGION(n);
  g->sent = calloc((size_t)n, sizeof *g->sent);
  g->recvd = calloc((size_t)n, sizeof *g->recvd);
  g->peer_bases = calloc((size_t)n, sizeof *g->peer_bases);
  g->zsend = calloc((size_t)n, sizeof *g->zsend);
  g->zrecv = calloc((size_t)n, sizeof *g->zrecv);
  g->outs = calloc((size_t)n, sizeof *g->outs);
  g->ready_expect = calloc((size_t)n, sizeof *g->ready_expect);
  g->done_expect = calloc((size_t)n, sizeof *g->done_expect);
  g->slot_need = calloc((size_t)n * UL__STAGE_SLOTS, sizeof *g->slot_need);
  g->lb = calloc(2 * (size_t)n, sizeof *g->lb);
  if (!g->sent || !g->recvd || !g->peer_bases || !g->zsend || !g->zrecv || !g->outs ||
      !g->ready_expect ||
      !g->done_expect || !g->slot_need || !g->lb) {
    ul__generic_fini_state(g);
    return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "generic layer: out of memory");
  }
  rc = o->mem_alloc(comm->bcomm, g->scratch_size, &g->scratch);
  if (rc != UL_OK) {
    ul__generic_fini_state(g);
    if (rc == UL_ERR_UNSUPPORTED) return UL_OK;
    return rc;
  }
  /* Peers read our mailbox; heap scratch (threads) is not zeroed. Host memory only: a
   * device scratch has no host-visible mailbox (shared_scratch is then 0). */
  if (comm->backend->caps.flags & UL_BACKEND_HOST_MEMORY) {
    memset(g->scratch, 0, UL__MAILBOX_BYTES);
    /* epoch 0: nothing written */
    memset((char *)g->scratch + g->ll_off, 0, UL__LL_REGION(n) + UL__LB_REGION(n));
  }
  rc = o->window_register(comm->bcomm, g->scratch, g->scratch_size, UL__NSIG_GENERIC(n), &g->win,
                          g->peer_bases);
  if (rc != UL_OK) {
    o->mem_free(comm->bcomm, g->scratch);
    g->scratch = NULL;
    ul__generic_fini_state(g);
    if (rc == UL_ERR_UNSUPPORTED) return UL_OK;
    return rc;
  }
  g->can_poll = !ul__op_is_stub((const void *)o->read_signal);
  g->copy_stream = !ul__op_is_stub((const void *)o->copy_stream);
  g->reduce_stream = !ul__op_is_stub((const void *)o->reduce_stream);
  g->wait_word = !ul__op_is_stub((const void *)o->wait_word);
  /* The mailbox, staging and direct paths are CPU loads/stores: they need host memory
   * (cuda p2p peer_bases are device pointers even when ranks share a process). */
  g->shared_scratch = (comm->backend->caps.flags & UL_BACKEND_HOST_MEMORY) != 0;
  for (int p = 0; p < n; p++)
    if (g->peer_bases[p] == NULL) g->shared_scratch = 0;
  g->load_store = comm->props.load_store_peers && g->shared_scratch;
  g->zcopy = !g->load_store && g->shared_scratch &&
             !ul__op_is_stub((const void *)o->mem_export) &&
             !ul__op_is_stub((const void *)o->mem_import) &&
             ul__param_get_int(UL__P_ZERO_COPY) != 0;
  /* Process-wide, so thread ranks agree; process ranks agree in the probe below. */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  g->ncpu = ncpu > 0 ? (int)ncpu : 1;
  g->l2_bytes = generic_cache_bytes(2);
  int64_t llc = ul__param_get_int(UL__P_LLC_BYTES);
  g->llc_bytes = llc < 0 ? generic_cache_bytes(3) : (size_t)llc;
  comm->generic = g;
  if (!g->load_store && g->shared_scratch && n > 1) {
    rc = generic_probe_processes(g);
    if (rc != UL_OK) {
      /* Peers may be gone: no collective deregistration; comm_destroy frees the window. */
      comm->generic = NULL;
      o->mem_free(comm->bcomm, g->scratch);
      ul__generic_fini_state(g);
      return rc;
    }
  }
  g->oversubscribed = n > g->ncpu;
  g->piece_bytes = ul__piece_bytes(g->chunk_bytes, g->l2_bytes);
  UL_INFO("INIT",
          "generic layer: chunk %zu B, bounce piece %zu B (L2 %zu B, L3 %zu B), scratch %zu "
          "B/rank, direct %s, single-copy %s, zero-copy %s",
          g->chunk_bytes, g->piece_bytes, g->l2_bytes, g->llc_bytes, g->scratch_size,
          g->load_store ? "yes" : "no", g->cma ? "yes" : "no",
          g->zcopy ? "for ul_mem_alloc buffers" : "no");
  return UL_OK;
}

void ul__generic_fini_state(ul__generic_t *g) {
  if (!g) return;
  free(g->sent);
  free(g->recvd);
  free(g->peer_bases);
  free(g->zsend);
  free(g->zrecv);
  free(g->outs);
  free(g->ready_expect);
  free(g->done_expect);
  free(g->slot_need);
  free(g->lb);
  free(g);
}

void ul__generic_fini(ul_comm_t comm) {
  ul__generic_t *g = comm->generic;
  if (!g) return;
  const ul_backend_ops_t *o = &comm->backend->ops;
  /* Destroy is local (the backend's comm_destroy frees the window): no collective
   * deregistration, so one thread may destroy all the ranks it created. Only readers of
   * our staging are waited for (done_expect: the reads each peer owes an acknowledgement
   * for), so this is short unless a peer died. */
  if (g->win && comm->sticky == UL_OK && !comm->abort_flag)
    for (int p = 0; p < g->n; p++) {
      if (p == g->me || g->done_expect[p] == 0) continue;
      if (o->wait_signal(comm->bcomm, g->win, UL__SIG_DONE(g, p), g->done_expect[p], NULL) !=
          UL_OK)
        break; /* a lost or aborted peer reads nothing more */
    }
  if (g->scratch) o->mem_free(comm->bcomm, g->scratch);
  comm->generic = NULL;
  ul__generic_fini_state(g);
}

/* ------------------------------------------------------------------ waits */

/* A failed wait (rc) for rank peer's `what` ("signal 3 to reach 7"): the error naming the
 * operation, the peer and, on a timeout between processes, every rank that never arrived. */
static ul_result_t ul__gwait_failed(ul__generic_t *g, ul_result_t rc, int peer, const char *what) {
  ul_comm_t c = g->comm;
  const char *opname = g->opname ? g->opname : "operation";
  if (rc == UL_ERR_TIMEOUT && g->in_coll && g->shared_scratch && !g->load_store) {
    /* The rank we waited for may itself be waiting (a ring): name the ranks that never
     * entered this collective, from their mailboxes. Process ranks only: our mapping of
     * a peer's scratch outlives the peer's destroy, a thread rank's heap scratch does not
     * (and thread ranks wait for each peer directly, naming it). */
    char absent[256];
    size_t len = 0;
    absent[0] = '\0';
    for (int p = 0; p < g->n && len + 16 < sizeof absent; p++) {
      const ul__mailbox_t *pm = (const ul__mailbox_t *)g->peer_bases[p];
      if (p != g->me && __atomic_load_n(&pm->entered, __ATOMIC_ACQUIRE) < g->coll_seq)
        len += (size_t)snprintf(absent + len, sizeof absent - len, "%s%d", len ? ", " : "", p);
    }
    if (len)
      return ul__comm_set_error(c, rc,
                                "%s #%llu timed out after %d ms: had not arrived: %s %s (this "
                                "rank waited for rank %d's %s)",
                                opname, (unsigned long long)g->seq, c->config.timeout_ms,
                                strchr(absent, ',') ? "ranks" : "rank", absent, peer, what);
  }
  if (rc == UL_ERR_TIMEOUT)
    return ul__comm_set_error(c, rc,
                              "%s #%llu timed out after %d ms: rank %d had not arrived (waited "
                              "for its %s)",
                              opname, (unsigned long long)g->seq, c->config.timeout_ms, peer, what);
  if (rc == UL_ERR_ABORTED)
    return ul__comm_set_error(c, rc, "%s #%llu: communicator aborted while waiting for rank %d",
                              opname, (unsigned long long)g->seq, peer);
  if (rc == UL_ERR_PEER_LOST) {
    char prev[512];
    snprintf(prev, sizeof prev, "%s", c->last_error);
    return ul__comm_set_error(c, rc, "%s #%llu: a peer was lost while waiting for rank %d (%s)", opname,
                              (unsigned long long)g->seq, peer, prev);
  }
  return rc;
}

/* Wait for a local signal; on failure, name the peer and the operation. */
ul_result_t ul__gwait(ul__generic_t *g, int idx, uint64_t value, int peer, ul_backend_stream_t *bs) {
  ul_comm_t c = g->comm;
  ul_result_t rc = c->backend->ops.wait_signal(c->bcomm, g->win, idx, value, bs);
  if (rc == UL_OK) return UL_OK;
  char what[64];
  snprintf(what, sizeof what, "signal %d to reach %llu", idx, (unsigned long long)value);
  return ul__gwait_failed(g, rc, peer, what);
}

ul_result_t ul__gwait_word(ul__generic_t *g, const void *word, uint64_t value, int peer,
                           ul_backend_stream_t *bs) {
  ul_comm_t c = g->comm;
  size_t offset = (size_t)((const char *)word - (const char *)g->scratch);
  ul_result_t rc = c->backend->ops.wait_word(c->bcomm, g->win, offset, value, bs);
  if (rc == UL_OK) return UL_OK;
  char what[64];
  snprintf(what, sizeof what, "line to reach %llu", (unsigned long long)value);
  return ul__gwait_failed(g, rc, peer, what);
}

/* --------------------------------------------------------------- channels */

size_t ul__slot_offset(ul__generic_t *g, int src, uint64_t chunk_no) {
  return g->slots_off + (size_t)src * g->slot_bytes + (size_t)(chunk_no % UL__NBUF) * g->chunk_bytes;
}

ul_result_t ul__ch_send_begin(ul__generic_t *g, int dst, void **ptr, ul_backend_stream_t *bs) {
  uint64_t k = g->sent[dst];
  if (k >= UL__NBUF) UL_CHECK(ul__gwait(g, UL__SIG_CREDIT(g, dst), k - UL__NBUF + 1, dst, bs));
  *ptr = g->shared_scratch ? (char *)g->peer_bases[dst] + ul__slot_offset(g, g->me, k) : NULL;
  return UL_OK;
}

ul_result_t ul__ch_send_end(ul__generic_t *g, int dst, ul_backend_stream_t *bs) {
  ul_comm_t c = g->comm;
  UL_CHECK(c->backend->ops.signal(c->bcomm, g->win, dst, UL__SIG_DATA(g, g->me), bs));
  g->sent[dst]++;
  return UL_OK;
}

ul_result_t ul__ch_send(ul__generic_t *g, int dst, const void *src, size_t bytes,
                        ul_backend_stream_t *bs) {
  ul_comm_t c = g->comm;
  void *slot;
  UL_CHECK(ul__ch_send_begin(g, dst, &slot, bs));
  if (bytes)
    UL_CHECK(c->backend->ops.put(c->bcomm, g->win, dst, ul__slot_offset(g, g->me, g->sent[dst]),
                                 src, bytes, bs));
  return ul__ch_send_end(g, dst, bs);
}

ul_result_t ul__ch_recv_begin(ul__generic_t *g, int src, void **ptr, ul_backend_stream_t *bs) {
  uint64_t k = g->recvd[src];
  UL_CHECK(ul__gwait(g, UL__SIG_DATA(g, src), k + 1, src, bs));
  *ptr = (char *)g->scratch + ul__slot_offset(g, src, k);
  return UL_OK;
}

ul_result_t ul__ch_recv_end(ul__generic_t *g, int src, ul_backend_stream_t *bs) {
  ul_comm_t c = g->comm;
  UL_CHECK(c->backend->ops.signal(c->bcomm, g->win, src, UL__SIG_CREDIT(g, g->me), bs));
  g->recvd[src]++;
  return UL_OK;
}

/* --------------------------------------------------------------- barriers */

ul_result_t ul__generic_barrier(ul_comm_t comm, ul_backend_stream_t *bs, const char *what) {
  ul__generic_t *g = comm->generic;
  if (!g) return UL_ERR_UNSUPPORTED;
  if (g->n == 1) return UL_OK;
  if (what) g->opname = what;
  ul_comm_t c = comm;
  uint64_t epoch = ++g->sync_epoch;
  /* Ranks outnumbering CPUs gather at rank 0, which releases the others: every rank but
   * 0 still signals every peer (rank 0 last, so all counters stand as in the symmetric
   * barrier and either form may follow the other), rank 0 signals once all have arrived,
   * and the others wait for rank 0 alone. Rank 0 then leaves first, while the others
   * wait to be scheduled, so a call from rank 0 right after (a broadcast from the
   * coordinating rank) has started when they leave. Symmetric, the last rank to arrive
   * leaves first and a reader that arrived last waited for a root that had to be
   * scheduled: 4 ranks on 2 CPUs, barrier then an 8 B broadcast from rank 0, timed
   * alone: 12.5-13.9 us, against Open MPI's 0.2-0.7 (whose barrier lets rank 0 go
   * first: from rank 3 it took 10-23 us). With a CPU each, the symmetric barrier brings
   * ranks closer together (decision 0019). */
  int gather = g->oversubscribed;
  for (int i = 1; i < g->n && !(gather && g->me == 0); i++) {
    int p = (g->me + i) % g->n;
    if (gather && p == 0) continue;
    UL_CHECK(c->backend->ops.signal(c->bcomm, g->win, p, UL__SIG_SYNC(g, g->me), bs));
  }
  /* rank 0 last: its release then implies every rank has signalled every peer */
  if (gather && g->me != 0)
    UL_CHECK(c->backend->ops.signal(c->bcomm, g->win, 0, UL__SIG_SYNC(g, g->me), bs));
  for (int i = 1; i < g->n; i++) {
    int p = (g->me + g->n - i) % g->n;
    if (gather && g->me != 0 && p != 0) continue; /* rank 0's release says they arrived */
    ul_result_t rc = c->backend->ops.wait_signal(c->bcomm, g->win, UL__SIG_SYNC(g, p), epoch, bs);
    if (rc == UL_ERR_TIMEOUT && g->can_poll) {
      /* Name every rank that has not arrived, not just the first one we waited for. */
      char list[256] = "";
      size_t len = 0;
      int missing = 0;
      for (int q = 0; q < g->n; q++) {
        if (q == g->me) continue;
        uint64_t v = 0;
        /* gathering, rank 0 releases only after the others: named alone, if at all */
        if (gather && q == 0 && g->n > 2) continue;
        if (c->backend->ops.read_signal(c->bcomm, g->win, UL__SIG_SYNC(g, q), &v) == UL_OK &&
            v < epoch) {
          missing++;
          if (len < sizeof list - 8) len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", missing > 1 ? "," : "", q);
        }
      }
      if (gather && g->me != 0 && !missing) {
        missing = 1;
        ul__copy_str(list, sizeof list, "0");
      }
      return ul__comm_set_error(c, rc,
                                "%s #%llu timed out after %d ms: %d rank(s) had not arrived: %s",
                                g->opname ? g->opname : "barrier", (unsigned long long)g->seq,
                                c->config.timeout_ms, missing, list[0] ? list : "?");
    }
    if (rc != UL_OK) {
      g->opname = g->opname ? g->opname : "barrier";
      /* reuse gwait's sentences for abort/peer loss */
      return ul__gwait(g, UL__SIG_SYNC(g, p), epoch, p, bs);
    }
  }
  for (int p = 1; p < g->n && gather && g->me == 0; p++) /* the release */
    UL_CHECK(c->backend->ops.signal(c->bcomm, g->win, p, UL__SIG_SYNC(g, 0), bs));
  return UL_OK;
}

/* This rank's buffer as a zero-copy export (handle 0: peers use single-copy). */
static void generic_export(ul__generic_t *g, const void *buf, size_t bytes, uint64_t *handle,
                           uint64_t *offset) {
  ul_comm_t c = g->comm;
  size_t off = 0;
  *handle = 0;
  *offset = 0;
  if (buf && bytes && c->backend->ops.mem_export(c->bcomm, buf, bytes, handle, &off) == UL_OK)
    *offset = off;
  else
    *handle = 0;
}

/* Peer p's exported buffer mapped here, or NULL. */
static void *generic_import(ul__generic_t *g, int p, uint64_t handle, uint64_t offset) {
  ul_comm_t c = g->comm;
  void *base = NULL;
  size_t size = 0;
  if (!handle || c->backend->ops.mem_import(c->bcomm, p, handle, &base, &size) != UL_OK ||
      offset >= size)
    return NULL;
  return (char *)base + offset;
}

/* Publish this rank's buffers for direct algorithms and wait until all have. Afterwards
 * g->zsend/zrecv say where each peer's buffers are load/store reachable from here: the
 * peer's own addresses (threads), our mapping of its ul_mem_alloc segment (zero-copy
 * between processes), or NULL (single-copy through the kernel). */
ul_result_t ul__publish(ul__generic_t *g, const void *send, size_t send_bytes, void *recv,
                        size_t recv_bytes, ul_backend_stream_t *bs) {
  ul__mailbox_t *mb = (ul__mailbox_t *)g->scratch;
  mb->send = send;
  mb->recv = recv;
  mb->seq = g->seq;
  if (g->zcopy) {
    generic_export(g, send, send_bytes, &mb->send_handle, &mb->send_offset);
    generic_export(g, recv, recv_bytes, &mb->recv_handle, &mb->recv_offset);
  }
  UL_CHECK(ul__generic_barrier(g->comm, bs, NULL));
  g->zpeers = 0;
  for (int p = 0; p < g->n; p++) {
    const ul__mailbox_t *pm = ul__mailbox(g, p);
    if (p == g->me) {
      g->zsend[p] = send;
      g->zrecv[p] = recv;
    } else if (g->load_store) {
      g->zsend[p] = pm->send;
      g->zrecv[p] = pm->recv;
    } else if (g->zcopy) {
      g->zsend[p] = generic_import(g, p, pm->send_handle, pm->send_offset);
      g->zrecv[p] = generic_import(g, p, pm->recv_handle, pm->recv_offset);
      g->zpeers += g->zsend[p] != NULL || g->zrecv[p] != NULL;
    } else {
      g->zsend[p] = NULL;
      g->zrecv[p] = NULL;
    }
  }
  return UL_OK;
}

const ul__mailbox_t *ul__mailbox(ul__generic_t *g, int p) {
  return (const ul__mailbox_t *)g->peer_bases[p];
}

/* ------------------------------------------------------- point to point */

/* No operation progressed: pause, then look for lost peers and the timeout. *lost_op: a
 * pending operation whose peer is lost (-1: none); the caller fails it only if the pass
 * after this one makes no progress either, because a sender may deliver its last chunk
 * and then destroy its communicator while we sleep: its data is already in our slots. */
#define P2P_KEEP_CPU_SPINS 8192u

static ul_result_t p2p_idle(ul__generic_t *g, unsigned *spins, struct timespec *deadline,
                            ul__p2p_op_t *ops, int nops, const unsigned char *fin, int *lost_op) {
  ul_comm_t c = g->comm;
  if (__atomic_load_n(&c->abort_flag, __ATOMIC_ACQUIRE))
    return ul__comm_set_error(c, UL_ERR_ABORTED, "group #%llu: communicator aborted",
                              (unsigned long long)g->seq);
  (*spins)++;
  /* With a CPU of its own a rank polls about 0.2 ms (8192 pauses of 20-40 ns and a pass
   * over the operations each) and never yields: a yield could only hand the CPU to an
   * unrelated task for its time slice (decision 0021). Otherwise a short spin, then
   * yields, which let a peer queued on our CPU run. */
  int keep_cpu = c->props.waits_keep_cpu == 1;
  if (*spins < (keep_cpu ? P2P_KEEP_CPU_SPINS : 200u)) {
    ul_backend_cpu_pause();
    return UL_OK;
  }
  if (!keep_cpu && *spins < 400) {
    sched_yield();
    return UL_OK;
  }
  struct timespec ts = {0, 50000};
  nanosleep(&ts, NULL);
  /* A pending peer that is lost will never answer: say so now, not at the timeout. */
  if ((*spins & 63) == 0 && !ul__op_is_stub((const void *)c->backend->ops.comm_failed_ranks)) {
    int lost[64], nlost = 0;
    if (c->backend->ops.comm_failed_ranks(c->bcomm, lost, 64, &nlost) == UL_OK)
      for (int i = 0; i < nops && *lost_op < 0; i++)
        for (int k = 0; k < nlost && k < 64 && !fin[i]; k++)
          if (ops[i].peer == lost[k]) *lost_op = i;
  }
  if (c->config.timeout_ms > 0 && (*spins & 63) == 0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > deadline->tv_sec ||
        (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec)) {
      char list[256] = "";
      size_t len = 0;
      for (int i = 0; i < nops && len < sizeof list - 24; i++)
        if (!fin[i])
          len += (size_t)snprintf(list + len, sizeof list - len, "%s%s %d", len ? ", " : "",
                                  ops[i].is_send ? "send to" : "recv from", ops[i].peer);
      return ul__comm_set_error(c, UL_ERR_TIMEOUT,
                                "group #%llu timed out after %d ms; pending: %s (those ranks had "
                                "not arrived)",
                                (unsigned long long)g->seq, c->config.timeout_ms, list);
    }
  }
  return UL_OK;
}

ul_result_t ul__generic_p2p(ul_comm_t comm, ul__p2p_op_t *ops, int nops, ul_backend_stream_t *bs) {
  ul__generic_t *g = comm->generic;
  if (!g) return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED, "send/recv not supported by backend %s",
                                    comm->backend->ops.name);
  const ul_backend_ops_t *o = &comm->backend->ops;
  g->opname = "group";
  /* per op: bytes moved, message length (a receive learns it from the header), started,
   * finished */
  size_t *done = calloc(2 * ((size_t)nops + 1), sizeof *done);
  unsigned char *fin = calloc(2 * ((size_t)nops + 1), 1);
  if (!done || !fin) {
    free(done);
    free(fin);
    return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "group: out of memory");
  }
  size_t *mlen = done + nops + 1;
  unsigned char *started = fin + nops + 1;
  ul_result_t rc = UL_OK;
  /* Self sends pair with self receives in order: a local copy. */
  int si = 0, ri = 0;
  for (;;) {
    while (si < nops && !(ops[si].is_send && ops[si].peer == g->me)) si++;
    while (ri < nops && !(!ops[ri].is_send && ops[ri].peer == g->me)) ri++;
    if (si >= nops || ri >= nops) break;
    if (ops[si].bytes != ops[ri].bytes) {
      rc = ul__comm_set_error(comm, UL_ERR_MISMATCH,
                              "group: send to self of %zu bytes matched with a receive from self "
                              "of %zu bytes: send and recv counts must be equal",
                              ops[si].bytes, ops[ri].bytes);
      goto out;
    }
    if (ops[si].bytes) UL_CHECK_GOTO(o->copy_local(comm->bcomm, ops[ri].buf, ops[si].buf, ops[si].bytes, bs), rc, out);
    fin[si] = fin[ri] = 1;
    si++;
    ri++;
  }
  for (int i = 0; i < nops; i++)
    if (ops[i].peer == g->me && !fin[i]) {
      rc = ul__comm_set_error(comm, UL_ERR_INVALID_USAGE, "group: %s self has no matching %s",
                              ops[i].is_send ? "send to" : "receive from",
                              ops[i].is_send ? "receive" : "send");
      goto out;
    }
  /* Framed messages (host-memory scratch): the first chunk of every message, a zero-byte
   * one included, carries the message's length in the receiver's header word, so a
   * receive of another length consumes exactly the sender's message (both sides stay in
   * step), copies at most its own count and ends in UL_ERR_MISMATCH (MPI's truncation
   * rule, also for short messages). Device scratch is not CPU-readable: there zero-byte
   * operations are complete by definition and lengths are not checked. */
  int framed = g->shared_scratch && g->can_poll;
  for (int i = 0; i < nops; i++) {
    mlen[i] = ops[i].bytes;
    if (ops[i].bytes == 0 && !framed) fin[i] = 1;
  }
  if (!g->can_poll) {
    /* No way to test signals: blocking order, sends first (bounded by NBUF chunks). */
    for (int i = 0; i < nops; i++) {
      if (fin[i]) continue;
      for (size_t off = 0; off < ops[i].bytes; off += g->chunk_bytes) {
        size_t len = ops[i].bytes - off < g->chunk_bytes ? ops[i].bytes - off : g->chunk_bytes;
        if (ops[i].is_send) {
          UL_CHECK_GOTO(ul__ch_send(g, ops[i].peer, (char *)ops[i].buf + off, len, bs), rc, out);
        } else {
          void *p;
          UL_CHECK_GOTO(ul__ch_recv_begin(g, ops[i].peer, &p, bs), rc, out);
          UL_CHECK_GOTO(o->copy_local(comm->bcomm, (char *)ops[i].buf + off, p, len, bs), rc, out);
          UL_CHECK_GOTO(ul__ch_recv_end(g, ops[i].peer, bs), rc, out);
        }
      }
      fin[i] = 1;
    }
    goto out;
  }
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += comm->config.timeout_ms / 1000;
  deadline.tv_nsec += (long)(comm->config.timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  unsigned spins = 0;
  int lost_op = -1;
  ul_result_t mismatch = UL_OK;
  for (;;) {
    int pending = 0, progress = 0;
    for (int i = 0; i < nops; i++) {
      if (fin[i]) continue;
      pending++;
      /* Operations to one peer in one direction progress in issue order. */
      int blocked = 0;
      for (int j = 0; j < i; j++)
        if (ops[j].peer == ops[i].peer && ops[j].is_send == ops[i].is_send && !fin[j]) blocked = 1;
      if (blocked) continue;
      size_t off = done[i];
      size_t len = mlen[i] - off < g->chunk_bytes ? mlen[i] - off : g->chunk_bytes;
      int peer = ops[i].peer;
      if (ops[i].is_send) {
        uint64_t k = g->sent[peer];
        if (k >= UL__NBUF) {
          uint64_t v = 0;
          UL_CHECK_GOTO(o->read_signal(comm->bcomm, g->win, UL__SIG_CREDIT(g, peer), &v), rc, out);
          if (v < k - UL__NBUF + 1) continue;
        }
        if (framed && off == 0) {
          /* ordered before the data signal by its seq_cst add */
          uint64_t *h = (uint64_t *)((char *)g->peer_bases[peer] + g->hdr_off);
          __atomic_store_n(&h[(size_t)g->me * UL__NBUF + k % UL__NBUF], (uint64_t)ops[i].bytes,
                           __ATOMIC_RELEASE);
        }
        UL_CHECK_GOTO(ul__ch_send(g, peer, (char *)ops[i].buf + off, len, bs), rc, out);
      } else {
        uint64_t v = 0;
        UL_CHECK_GOTO(o->read_signal(comm->bcomm, g->win, UL__SIG_DATA(g, peer), &v), rc, out);
        if (v < g->recvd[peer] + 1) continue;
        if (framed && off == 0 && !started[i]) {
          const uint64_t *h = (const uint64_t *)((char *)g->scratch + g->hdr_off);
          uint64_t sent = __atomic_load_n(&h[(size_t)peer * UL__NBUF + g->recvd[peer] % UL__NBUF],
                                          __ATOMIC_ACQUIRE);
          started[i] = 1;
          if (sent != ops[i].bytes) {
            if (mismatch == UL_OK)
              mismatch = ul__comm_set_error(
                  comm, UL_ERR_MISMATCH,
                  "group #%llu: recv of %zu bytes from rank %d matched a send of %llu bytes: "
                  "send and recv counts must be equal; the receive buffer holds the first %zu "
                  "bytes, nothing past it was written",
                  (unsigned long long)g->seq, ops[i].bytes, peer, (unsigned long long)sent,
                  (size_t)(sent < ops[i].bytes ? sent : ops[i].bytes));
            mlen[i] = (size_t)sent;
            len = mlen[i] < g->chunk_bytes ? mlen[i] : g->chunk_bytes;
          }
        }
        void *p = (char *)g->scratch + ul__slot_offset(g, peer, g->recvd[peer]);
        size_t room = off < ops[i].bytes ? ops[i].bytes - off : 0;
        size_t copy = len < room ? len : room;
        if (copy) UL_CHECK_GOTO(o->copy_local(comm->bcomm, (char *)ops[i].buf + off, p, copy, bs), rc, out);
        UL_CHECK_GOTO(ul__ch_recv_end(g, peer, bs), rc, out);
      }
      done[i] = off + len;
      if (done[i] >= mlen[i]) fin[i] = 1;
      progress = 1;
    }
    if (!pending) break;
    if (progress) {
      spins = 0;
      lost_op = -1;
      continue;
    }
    if (lost_op >= 0) {
      rc = ul__comm_set_error(comm, UL_ERR_PEER_LOST,
                              "group #%llu: peer rank %d was lost (aborted, destroyed its "
                              "communicator or exited) with a %s it pending",
                              (unsigned long long)g->seq, ops[lost_op].peer,
                              ops[lost_op].is_send ? "send to" : "receive from");
      goto out;
    }
    UL_CHECK_GOTO(p2p_idle(g, &spins, &deadline, ops, nops, fin, &lost_op), rc, out);
  }
  rc = mismatch;
out:
  free(done);
  free(fin);
  return rc;
}
