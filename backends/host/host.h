/* Private types of the host backend: ranks as threads of one process, or as processes
 * of one node, over shared memory.
 *
 * Memory layout decisions (see docs in each file):
 * - Unique id payload: "ulh1" magic, 16-byte random token, creator uid, 8-byte random
 *   tag. Segment names derive from the tag ("/unilink-<taghex>"), never from the token,
 *   so listing /dev/shm does not reveal the token that the control segment checks.
 * - Control segment: created 0600 by the first rank, unlinked as soon as every rank
 *   arrived, kept mapped for the communicator's life (barriers, window exchange,
 *   per-rank abort flags).
 * - Process-mode ul_mem_alloc segments stay named until mem_free/comm_destroy (so the
 *   same allocation can back several windows); their names carry the creator pid
 *   ("/unilink-<tag>-<pid>-m<n>") so a sweep removes the ones a killed job left.
 * - Window signal counters: one array of nranks x nsig 64-byte slots per window,
 *   created by rank 0 (heap in thread mode, a segment unlinked once every rank mapped
 *   it in process mode). */
#ifndef UL_HOST_H
#define UL_HOST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/proc_alive.h"
#include "ul_core.h"

#define HOST_ID_MAGIC "ulh1"
#define HOST_TOKEN_BYTES 16
#define HOST_TAG_BYTES 8
/* Payload offsets inside the backend part of the unique id. */
#define HOST_ID_OFF_MAGIC 0
#define HOST_ID_OFF_TOKEN 4
#define HOST_ID_OFF_UID (HOST_ID_OFF_TOKEN + HOST_TOKEN_BYTES)
#define HOST_ID_OFF_TAG (HOST_ID_OFF_UID + 4)
#define HOST_ID_USED (HOST_ID_OFF_TAG + HOST_TAG_BYTES)

#define HOST_SHM_PREFIX "unilink-" /* as listed in /dev/shm */
#define HOST_NAME_MAX_LEN 64
#define HOST_CTRL_MAGIC 0x756c686f73746331ULL /* "ulhostc1" */
#define HOST_CTRL_VERSION 4u /* 2: revoke and shrink fields; 3: self_addr; 4: cpu */
#define HOST_CACHELINE 64
#define HOST_HUGE_ALIGN (2u << 20)

/* One futex-waitable 64-bit counter on its own cache line. */
typedef struct host_slot {
  _Atomic uint64_t value;
  _Atomic uint32_t waiters; /* threads/processes sleeping in futex on value */
  uint32_t pad0;
  char pad[HOST_CACHELINE - 16];
} __attribute__((aligned(HOST_CACHELINE))) host_slot_t;

/* Per-rank part of the control segment. */
typedef struct host_ctrl_rank {
  _Atomic int32_t present; /* 1 once the rank has joined */
  int32_t pid;
  int32_t cpu;             /* the one CPU the rank's process may run on; -1: several */
  _Atomic int32_t aborted; /* the rank ran comm_abort */
  int32_t status;          /* window exchange step 1 (publish): UL_OK or the rank's error */
  int32_t status2;         /* window exchange step 2 (map peers) */
  _Atomic int32_t left;    /* the rank destroyed its communicator: it will not come back */
  /* Shrink (host_recover.c): the k of the rank's k-th ul_comm_shrink once it is in it;
   * member = k when the coordinator of shrink k kept it, with its new rank. */
  _Atomic uint32_t shrink_epoch;
  _Atomic uint32_t shrink_member;
  int32_t shrink_new_rank;
  /* Window exchange (valid between the registration barriers). */
  char seg_name[HOST_NAME_MAX_LEN]; /* process mode: segment holding the window */
  uint64_t seg_offset;              /* window base - segment base */
  uint64_t win_size;
  uint64_t base_addr; /* the rank's own address of the window */
  /* The rank's own address of this word, written before it arrives: peers read it back
   * with process_vm_readv to learn whether they may (host_peer.c, peer_copy_ready). */
  uint64_t self_addr;
} __attribute__((aligned(HOST_CACHELINE))) host_ctrl_rank_t;

/* Arrival word: count of arrived ranks, or HOST_ARRIVE_FAILED once a rank gave up. */
#define HOST_ARRIVE_FAILED (1ULL << 62)

typedef struct host_ctrl {
  _Atomic uint64_t magic; /* stored last (release) by the creator */
  uint32_t version;
  uint32_t nranks;
  uint32_t uid;
  int32_t creator_pid; /* for the stale-segment sweep */
  uint64_t total_size;
  unsigned char token[HOST_TOKEN_BYTES];
  host_slot_t arrived;
  host_slot_t barrier;          /* monotonic: barrier k done when value >= k * nranks */
  char win_sig_name[HOST_NAME_MAX_LEN]; /* process mode: signal segment of a window */
  uint64_t win_sig_ptr;         /* thread mode: heap signal array of a window */
  uint64_t win_sig_bytes;
  _Atomic int32_t revoked;      /* ul_comm_revoke on any rank: every wait returns REVOKED */
  int32_t shrink_new_nranks;    /* decision of the last shrink (valid once decided) */
  _Atomic uint32_t shrink_decided; /* k once shrink k's survivors are written */
  unsigned char shrink_id[HOST_ID_USED]; /* unique id of the shrunk communicator */
  host_ctrl_rank_t ranks[];
} host_ctrl_t;

/* What a blocking wait checks between futex slices. */
typedef struct host_waiter {
  const volatile int *abort_flag; /* core's flag, may be NULL */
  const _Atomic int *dead;        /* our own comm_abort flag, may be NULL */
  int timeout_ms;                 /* 0 = forever */
  int spin;                       /* pause iterations before the clock starts */
  int oversubscribed;             /* more ranks than CPUs: yield, spin less */
  int pinned_apart;               /* each rank on a CPU of its own: poll, never yield */
  int shared;                     /* futex without FUTEX_PRIVATE_FLAG */
  host_ctrl_t *ctrl;              /* peers' abort flags; NULL: none */
  int nranks, self;
  const pid_t *pids;              /* process liveness (NULL in thread mode) */
  const int *pidfds;              /* -1 where unavailable */
} host_waiter_t;

/* Why a wait failed. */
typedef struct host_wait_fail {
  int rank;      /* lost rank, -1 if none */
  pid_t pid;
  int aborted;   /* 1: the peer aborted rather than died */
  int elapsed_ms;
} host_wait_fail_t;

/* One ul_mem_alloc allocation. */
typedef struct host_alloc {
  void *ptr;
  size_t size;     /* requested */
  size_t map_size; /* mapped / allocated */
  char name[HOST_NAME_MAX_LEN]; /* process mode segment name; "" in thread mode */
  uint64_t serial;              /* process mode: the n of the name */
} host_alloc_t;

/* A peer's mem_alloc segment mapped here for zero-copy collectives (process mode). */
typedef struct host_import {
  int peer;
  uint64_t handle; /* creator pid << 32 | serial */
  void *addr;
  size_t len;
  uint64_t used; /* LRU stamp */
} host_import_t;

/* A peer mapping owned by a window (process mode). */
typedef struct host_map {
  void *addr;
  size_t len;
} host_map_t;

struct ul_backend_window {
  struct ul_backend_window *next; /* comm's list, for comm_abort and destroy */
  int nranks, self, nsig;
  host_slot_t *sig;        /* nranks * nsig slots; [p * nsig + i] = rank p's signal i */
  size_t sig_bytes;
  int sig_heap;            /* thread mode: rank 0 owns the heap array */
  int sig_owner;           /* this rank frees/unlinks it */
  int futex_shared;
  void **peer_bases;       /* nranks */
  size_t *peer_sizes;      /* nranks */
  host_map_t *maps;        /* nranks (process mode), addr NULL where none */
};

struct ul_backend_comm {
  ul_comm_t handle; /* core handle for ul_backend_set_error (may be NULL) */
  int rank, nranks;
  int threads;      /* 1: all ranks in this process (load_store_peers) */
  int timeout_ms;
  const volatile int *abort_flag;
  _Atomic int dead; /* set by comm_abort */
  int spin;
  int oversubscribed; /* ranks outnumber online CPUs */
  int pinned_apart;   /* process ranks pinned each to its own CPU (host_wait.c) */
  /* Control area: a mapping of the control segment, or a heap block shared by the
   * ranks of one comm_init_all (refcounted). */
  host_ctrl_t *ctrl;
  size_t ctrl_size;
  int ctrl_shared;          /* futexes on ctrl need FUTEX without PRIVATE */
  _Atomic int *heap_refs;   /* comm_init_all: shared refcount, else NULL */
  struct host_attach *attach; /* comm_init: this process's shared mapping of ctrl */
  uint64_t barrier_epoch;
  pid_t *pids;              /* nranks */
  int *pidfds;              /* nranks, -1 where none */
  char tag_hex[2 * HOST_TAG_BYTES + 1];
  pthread_mutex_t lock;     /* allocs and windows */
  host_alloc_t *allocs;
  int nallocs, cap_allocs;
  struct ul_backend_window *windows;
  host_import_t *imports;   /* guarded by lock */
  int nimports, cap_imports;
  uint64_t import_clock;
  uint32_t shrinks;         /* ul_comm_shrink calls on this communicator so far */
};

/* ---- host_shm.c ---- */
ul_result_t host_shm_create(ul_comm_t h, const char *name, size_t size, int populate,
                            void **addr, size_t *map_size);
ul_result_t host_shm_map(ul_comm_t h, const char *name, size_t offset, size_t len,
                         void **addr, size_t *map_len, void **base);
void host_shm_unlink(const char *name);
void host_shm_sweep_stale(void);
size_t host_page_size(void);
/* A waiter's default spin: HOST_SPIN_BUDGET_NS of pauses, or HOST_SPIN_OVERSUBSCRIBED
 * when ranks outnumber CPUs (the peer we wait for needs our core). */
#define HOST_SPIN_BUDGET_NS 1300.0
#define HOST_SPIN_OVERSUBSCRIBED 8
/* Nanoseconds one ul_backend_cpu_pause takes here (measured once per process, best of
 * 3 loops of 1000, clamped to 1-200). */
double host_pause_ns(void);
const char *host_errstr(int err, char *buf, size_t len);

/* ---- host_wait.c ---- */
/* Wait until slot->value >= target. UL_OK, UL_ERR_TIMEOUT, UL_ERR_ABORTED or
 * UL_ERR_PEER_LOST (fail says who); sets no error sentence. staged: the peers staged
 * data behind the value, so a peer's abort fails the wait even once the value is
 * reached; 0 for barriers, where arriving is all a peer contributes. */
ul_result_t host_wait_geq(const host_waiter_t *w, host_slot_t *slot, uint64_t target,
                          int staged, host_wait_fail_t *fail);
/* The first rank other than self whose abort flag is set in ctrl, or -1: the check
 * host_wait_geq makes first when data is staged. */
int host_aborted_peer(const host_ctrl_t *ctrl, int nranks, int self);
/* Wait until *word >= target, a word its writer stores without waking anyone: polled
 * between short sleeps, with host_wait_geq's checks; nothing staged behind it. */
ul_result_t host_wait_word_geq(const host_waiter_t *w, const _Atomic uint64_t *word,
                               uint64_t target, host_wait_fail_t *fail);
/* Add to slot->value (release) and wake sleepers. Returns the previous value. */
uint64_t host_slot_add(host_slot_t *slot, uint64_t delta, int shared);
void host_slot_wake(host_slot_t *slot, int shared);
void host_waiter_for_comm(const ul_backend_comm_t *c, host_waiter_t *w, int ctrl_word);
/* Collective barrier over the control area. */
ul_result_t host_comm_barrier(ul_backend_comm_t *c, const char *what);
/* Error sentence for a failed wait on comm c, "what" describes the wait. */
ul_result_t host_wait_error(const ul_backend_comm_t *c, ul_result_t rc,
                            const host_wait_fail_t *fail, const char *what);

/* ---- host_recover.c ---- */
ul_result_t host_comm_revoke(ul_backend_comm_t *c);
ul_result_t host_comm_failed_ranks(ul_backend_comm_t *c, int *ranks, int max, int *count);
ul_result_t host_comm_shrink(ul_backend_comm_t *c, const ul_backend_comm_args_t *args,
                             ul_backend_comm_t **out, ul_backend_comm_props_t *props,
                             int *new_rank, int *new_nranks);

/* ---- host_comm.c ---- */
/* Wake every waiter on c's control words and windows (abort, revoke); never blocks. */
void host_comm_wake_all(ul_backend_comm_t *c);
ul_result_t host_get_unique_id(unsigned char *payload, size_t payload_bytes);
ul_result_t host_comm_init(const ul_backend_comm_args_t *args, ul_backend_comm_t **out,
                           ul_backend_comm_props_t *props);
ul_result_t host_comm_init_all(const ul_backend_comm_args_t *args, int ndev,
                               ul_backend_comm_t **out, ul_backend_comm_props_t *props);
ul_result_t host_comm_finalize(ul_backend_comm_t *c);
ul_result_t host_comm_destroy(ul_backend_comm_t *c);
ul_result_t host_comm_abort(ul_backend_comm_t *c);
ul_result_t host_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out);

/* ---- host_mem.c ---- */
ul_result_t host_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr);
ul_result_t host_mem_free(ul_backend_comm_t *c, void *ptr);
ul_result_t host_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                 int extra_signals, ul_backend_window_t **out,
                                 void **peer_bases);
ul_result_t host_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w);
ul_result_t host_mem_export(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                            uint64_t *handle, size_t *offset);
ul_result_t host_mem_import(ul_backend_comm_t *c, int peer, uint64_t handle, void **base,
                            size_t *size);
/* comm_destroy: free every allocation and window left (no collective step). */
void host_mem_release_all(ul_backend_comm_t *c);

/* ---- host_p2p.c ---- */
ul_result_t host_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t offset,
                     const void *src, size_t bytes, ul_backend_stream_t *s);
ul_result_t host_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t offset,
                     void *dst, size_t bytes, ul_backend_stream_t *s);
ul_result_t host_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                        ul_backend_stream_t *s);
ul_result_t host_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                             uint64_t value, ul_backend_stream_t *s);
ul_result_t host_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                             uint64_t *value);
ul_result_t host_wait_word(ul_backend_comm_t *c, ul_backend_window_t *w, size_t offset,
                           uint64_t value, ul_backend_stream_t *s);
ul_result_t host_reduce_local(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                              size_t count, ul_dtype_t dtype, ul_op_t op,
                              ul_backend_stream_t *s);
ul_result_t host_reduce_stream(ul_backend_comm_t *c, void *const *dst, int ndst, const void *a,
                               const void *b, size_t count, ul_dtype_t dtype, ul_op_t op,
                               ul_backend_stream_t *s);
ul_result_t host_scale_avg(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                           int nranks, ul_backend_stream_t *s);
ul_result_t host_copy_local(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                            ul_backend_stream_t *s);

/* ---- host_peer.c: single copies with peer processes, streaming copies ---- */
ul_result_t host_peer_copy_ready(ul_backend_comm_t *c, int *ready);
ul_result_t host_peer_read(ul_backend_comm_t *c, int peer, void *local, const void *remote,
                           size_t bytes);
ul_result_t host_peer_write(ul_backend_comm_t *c, int peer, void *remote, const void *local,
                            size_t bytes);
ul_result_t host_copy_stream(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                             ul_backend_stream_t *s);

#endif
