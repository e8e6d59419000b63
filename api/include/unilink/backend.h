/**
 * @file backend.h
 * @brief The backend contract: one versioned ops struct per backend.
 *
 * A backend is a table of function pointers (::ul_backend_ops_t). Built-in backends
 * are compiled into libunilink; plugins are shared objects named
 * `libunilink-<name>.so` that export one function, `ul_backend_entry`, returning
 * their table. The core:
 *  - refuses a table whose ABI major differs from ::UL_BACKEND_ABI_MAJOR;
 *  - treats every op beyond `struct_size`, and every NULL op, as absent and
 *    replaces it with a stub returning ::UL_ERR_UNSUPPORTED (backends never need
 *    NULL checks, the core never calls NULL);
 *  - validates every argument before calling a backend, so backends may assume
 *    valid ranks, non-overlapping buffers (except the documented in-place cases),
 *    known dtypes/ops and counts whose byte size fits in size_t.
 *
 * Two kinds of backend share one core:
 *  - native-collective backends (nccl, mpi) fill ::ul_backend_coll_ops_t;
 *  - peer-copy backends (host, cuda, ze, sim) provide windows, put/get,
 *    signal/wait and a local reduce; the core's generic algorithm layer turns those
 *    into every collective and into send/recv.
 *
 * Streams: a backend either has native streams (stream_* ops) or declares
 * ::UL_BACKEND_HOST_STREAMS, in which case the core runs each stream as a worker
 * thread and calls the backend with `stream == NULL`, meaning "do it now, in this
 * thread, and return when it is done".
 */
#ifndef UNILINK_BACKEND_H
#define UNILINK_BACKEND_H

#include <stdarg.h>
#include <unilink/unilink.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UL_BACKEND_ABI_MAJOR 1
#define UL_BACKEND_ABI_MINOR 7
#define UL_BACKEND_ABI_VERSION ((UL_BACKEND_ABI_MAJOR << 16) | UL_BACKEND_ABI_MINOR)
#define UL_BACKEND_ABI_MAJOR_OF(v) ((uint32_t)(v) >> 16)

/** Backend-private objects; the core only passes them back. */
typedef struct ul_backend_comm ul_backend_comm_t;
typedef struct ul_backend_stream ul_backend_stream_t;
typedef struct ul_backend_window ul_backend_window_t;

/** Backend flags (ul_backend_caps_t::flags). */
#define UL_BACKEND_HOST_STREAMS (1u << 0) /**< core runs streams on worker threads */
#define UL_BACKEND_HOST_MEMORY (1u << 1)  /**< buffers are host memory the core may touch */

/** What a pointer is, as far as the backend can tell (ops mem_kind). */
typedef enum ul_backend_mem_kind {
  UL_BACKEND_MEM_UNKNOWN = 0,    /**< the backend cannot tell */
  UL_BACKEND_MEM_HOST = 1,       /**< pageable host memory the device cannot address */
  UL_BACKEND_MEM_HOST_MAPPED = 2,/**< host memory the device can address (pinned, mapped) */
  UL_BACKEND_MEM_DEVICE = 3,     /**< device memory of this communicator's device */
  UL_BACKEND_MEM_PEER_DEVICE = 4 /**< device memory of another device of this process */
} ul_backend_mem_kind_t;

/** Static capabilities of a backend, filled by query_caps. */
typedef struct ul_backend_caps {
  size_t struct_size;      /**< set by the core */
  uint32_t features;       /**< UL_FEATURE_* of unilink.h */
  uint32_t flags;          /**< UL_BACKEND_* */
  uint32_t native_colls;   /**< bit (1u << ul_coll_t) per native collective */
  uint32_t dtypes;         /**< bit per dtype usable in data movement */
  uint32_t reduce_dtypes;  /**< bit per dtype usable in reductions */
  uint32_t ops;            /**< bit per ul_op_t supported */
  int max_ranks;           /**< 0 = no limit */
  char version[64];        /**< vendor library version, if any */
} ul_backend_caps_t;

/** Everything a backend needs to create one rank's communicator. */
typedef struct ul_backend_comm_args {
  size_t struct_size;
  ul_comm_t comm;                  /**< the core handle: for ul_backend_set_error */
  int rank;
  int nranks;
  int device;                      /**< UL_CONFIG_UNDEF: backend decides */
  const unsigned char *id_payload; /**< backend part of the unique id */
  size_t id_payload_bytes;         /**< UL_BACKEND_ID_PAYLOAD_BYTES */
  int timeout_ms;                  /**< 0 = forever */
  const volatile int *abort_flag;  /**< becomes nonzero when ul_comm_abort runs */
  const char *name;                /**< config name or NULL */
  const char *options;             /**< text after ':' in the backend name
                                        ("sim:dgx-h100" -> "dgx-h100"); "" if none */
} ul_backend_comm_args_t;

/** Bytes of the unique id available to the backend. */
#define UL_BACKEND_ID_PAYLOAD_BYTES 192

/** Per-communicator facts the generic algorithm layer uses (filled by comm_init). */
typedef struct ul_backend_comm_props {
  size_t struct_size;
  int load_store_peers;  /**< 1: a user buffer pointer of one rank is valid in every
                              rank (threads of one process): direct algorithms may read
                              and write peers' user buffers */
  char path[32];         /**< data path name reported by ul_comm_last_call ("threads") */
  int device;            /**< device this rank uses, when the backend chose it (ABI 1.1);
                              the core presets UL_CONFIG_UNDEF = "as configured" */
  int waits_keep_cpu;    /**< ABI 1.7: 1 when no peer can run on a rank's CPU (each rank
                              pinned to a CPU of its own): the core's own waits then poll
                              between pauses rather than yield, as yours should (decision
                              0021); the core presets 0 */
} ul_backend_comm_props_t;

/** Native collectives (all optional). Same argument meaning as the public calls,
 *  already validated; stream is NULL for host streams. */
typedef struct ul_backend_coll_ops {
  size_t struct_size;
  ul_result_t (*allreduce)(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                           size_t count, ul_dtype_t dtype, ul_op_t op, ul_backend_stream_t *s);
  ul_result_t (*broadcast)(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                           size_t count, ul_dtype_t dtype, int root, ul_backend_stream_t *s);
  ul_result_t (*reduce)(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf, size_t count,
                        ul_dtype_t dtype, ul_op_t op, int root, ul_backend_stream_t *s);
  ul_result_t (*allgather)(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                           size_t sendcount, ul_dtype_t dtype, ul_backend_stream_t *s);
  ul_result_t (*reduce_scatter)(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                                size_t recvcount, ul_dtype_t dtype, ul_op_t op,
                                ul_backend_stream_t *s);
  ul_result_t (*alltoall)(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf,
                          size_t count, ul_dtype_t dtype, ul_backend_stream_t *s);
  ul_result_t (*gather)(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf, size_t count,
                        ul_dtype_t dtype, int root, ul_backend_stream_t *s);
  ul_result_t (*scatter)(ul_backend_comm_t *c, const void *sendbuf, void *recvbuf, size_t count,
                         ul_dtype_t dtype, int root, ul_backend_stream_t *s);
  ul_result_t (*barrier)(ul_backend_comm_t *c, ul_backend_stream_t *s);
  /* ABI 1.2. Counts and displacements are in elements, nranks entries each, host
   * memory, valid until the op returns (a native backend that defers work past its
   * return copies what it needs). */
  ul_result_t (*alltoallv)(ul_backend_comm_t *c, const void *sendbuf, const size_t *sendcounts,
                           const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                           const size_t *rdispls, ul_dtype_t dtype, ul_backend_stream_t *s);
  ul_result_t (*allgatherv)(ul_backend_comm_t *c, const void *sendbuf, size_t sendcount,
                            void *recvbuf, const size_t *recvcounts, const size_t *displs,
                            ul_dtype_t dtype, ul_backend_stream_t *s);
} ul_backend_coll_ops_t;

/** The backend table. Append new ops at the end only (struct_size gates them). */
typedef struct ul_backend_ops {
  uint32_t abi_version;     /**< UL_BACKEND_ABI_VERSION */
  size_t struct_size;       /**< sizeof(ul_backend_ops_t) the backend was built with */
  const char *name;         /**< short, lowercase, unique: "host" */
  const char *description;  /**< one line */
  int priority;             /**< for "auto": higher wins among available backends */

  /* --- lifecycle --------------------------------------------------------- */
  /** Probe once per process. UL_OK if usable; UL_ERR_UNAVAILABLE with a sentence in
   *  @p reason (e.g. "cudaGetDeviceCount: no CUDA-capable device is detected (100)"). */
  ul_result_t (*init)(char *reason, size_t reason_len);
  void (*fini)(void);
  ul_result_t (*query_caps)(ul_backend_caps_t *caps);

  /* --- communicators ----------------------------------------------------- */
  /** Fill payload[0..UL_BACKEND_ID_PAYLOAD_BYTES) with fresh bootstrap data. */
  ul_result_t (*get_unique_id)(unsigned char *payload, size_t payload_bytes);
  /** Join rank args->rank; blocks until all ranks joined or timeout. */
  ul_result_t (*comm_init)(const ul_backend_comm_args_t *args, ul_backend_comm_t **out,
                           ul_backend_comm_props_t *props);
  /** Create args[0..ndev) in one call (args[i].rank == i). */
  ul_result_t (*comm_init_all)(const ul_backend_comm_args_t *args, int ndev,
                               ul_backend_comm_t **out, ul_backend_comm_props_t *props);
  /** Native split (optional: the core otherwise splits through a new unique id). */
  ul_result_t (*comm_split)(ul_backend_comm_t *parent, int color, int key,
                            const ul_backend_comm_args_t *args, ul_backend_comm_t **out,
                            ul_backend_comm_props_t *props);
  /** Complete outstanding work (collective). */
  ul_result_t (*comm_finalize)(ul_backend_comm_t *c);
  /** Free local resources. Called once, after every other call on c returned. */
  ul_result_t (*comm_destroy)(ul_backend_comm_t *c);
  /** Wake every waiter on c and mark it dead; must not block and must not free
   *  (comm_destroy follows once the waiters have left). */
  ul_result_t (*comm_abort)(ul_backend_comm_t *c);
  /** Describe the link to @p peer. */
  ul_result_t (*comm_topology)(ul_backend_comm_t *c, int peer, ul_link_info_t *out);

  /* --- native streams (absent with UL_BACKEND_HOST_STREAMS) -------------- */
  ul_result_t (*stream_create)(ul_backend_comm_t *c, ul_backend_stream_t **out);
  ul_result_t (*stream_wrap)(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out);
  ul_result_t (*stream_destroy)(ul_backend_stream_t *s);
  ul_result_t (*stream_synchronize)(ul_backend_stream_t *s, int timeout_ms);
  ul_result_t (*stream_query)(ul_backend_stream_t *s);

  /* --- memory ------------------------------------------------------------ */
  ul_result_t (*mem_alloc)(ul_backend_comm_t *c, size_t size, void **ptr);
  ul_result_t (*mem_free)(ul_backend_comm_t *c, void *ptr);
  /** Collective. @p peer_bases has nranks entries: set [p] to the address at which this
   *  process can load/store peer p's window, or leave NULL when it cannot. Each window
   *  has UL_WINDOW_SIGNALS + @p extra_signals signal counters per rank, starting at 0. */
  ul_result_t (*window_register)(ul_backend_comm_t *c, void *base, size_t size,
                                 int extra_signals, ul_backend_window_t **out,
                                 void **peer_bases);
  ul_result_t (*window_deregister)(ul_backend_comm_t *c, ul_backend_window_t *w);

  /* --- data movement (enqueue on s; s NULL: now) ------------------------- */
  ul_result_t (*put)(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t offset,
                     const void *src, size_t bytes, ul_backend_stream_t *s);
  ul_result_t (*get)(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t offset,
                     void *dst, size_t bytes, ul_backend_stream_t *s);
  /** Add 1 to @p peer's signal @p index once earlier puts to peer are visible. */
  ul_result_t (*signal)(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                        ul_backend_stream_t *s);
  /** Wait until the local signal @p index >= value; honour timeout and abort flag
   *  (UL_ERR_TIMEOUT / UL_ERR_ABORTED / UL_ERR_PEER_LOST). */
  ul_result_t (*wait_signal)(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                             uint64_t value, ul_backend_stream_t *s);
  /** Current value of the local signal @p index (host-visible backends only). */
  ul_result_t (*read_signal)(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                             uint64_t *value);
  /** dst = a op b elementwise (dst may alias a or b); avg is treated as sum. */
  ul_result_t (*reduce_local)(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                              size_t count, ul_dtype_t dtype, ul_op_t op,
                              ul_backend_stream_t *s);
  /** Scale for avg: buf[i] /= nranks (integer division for integer types). */
  ul_result_t (*scale_avg)(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                           int nranks, ul_backend_stream_t *s);
  ul_result_t (*copy_local)(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                            ul_backend_stream_t *s);

  /* --- native point to point (native-collective backends) ---------------- */
  ul_result_t (*send)(ul_backend_comm_t *c, const void *buf, size_t count, ul_dtype_t dtype,
                      int peer, ul_backend_stream_t *s);
  ul_result_t (*recv)(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                      int peer, ul_backend_stream_t *s);
  ul_result_t (*group_start)(ul_backend_comm_t *c);
  ul_result_t (*group_end)(ul_backend_comm_t *c, ul_backend_stream_t *s);

  /* --- native collectives (NULL: generic layer only) --------------------- */
  const ul_backend_coll_ops_t *coll;

  /* --- introspection ----------------------------------------------------- */
  /** Called by the core after each successful operation with the core's record of
   *  it; a backend may amend it (modeled_us, algorithm, path). Optional. */
  ul_result_t (*annotate_call)(ul_backend_comm_t *c, ul_call_info_t *info);

  /* --- peer mapping of mem_alloc memory (optional; process ranks) ---------- */
  /** Local. If [ptr, ptr+bytes) lies inside one allocation of this comm's mem_alloc that
   *  peers can map, set *handle (never 0) and *offset (of ptr within it); else
   *  UL_ERR_UNSUPPORTED, which only means "no zero-copy for this buffer". */
  ul_result_t (*mem_export)(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                            uint64_t *handle, size_t *offset);
  /** Local. Map peer @p peer's exported allocation @p handle into this process and set
   *  *base (its first byte here) and *size. The backend caches mappings, so a buffer
   *  used again costs a lookup; they live until comm_destroy or until the backend drops
   *  them after the owner freed them. */
  ul_result_t (*mem_import)(ul_backend_comm_t *c, int peer, uint64_t handle, void **base,
                            size_t *size);

  /* --- memory kinds and host<->device movement (device backends) ---------- */
  /** Local. Classify @p ptr (the whole range [ptr, ptr+bytes)) for this comm: see
   *  ul_backend_mem_kind_t. Absent: the core treats every pointer as UL_BACKEND_MEM_UNKNOWN. */
  ul_result_t (*mem_kind)(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                          ul_backend_mem_kind_t *kind);
  /** dst <- src, either side host or device memory (direction inferred), ordered on s.
   *  Absent on a UL_BACKEND_HOST_MEMORY backend: the core uses memcpy. */
  ul_result_t (*mem_copy)(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                          ul_backend_stream_t *s);
  /** dst[0..bytes) <- (unsigned char)value, host or device memory, ordered on s. */
  ul_result_t (*mem_set)(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                         ul_backend_stream_t *s);

  /* --- recovery (ABI 1.3, optional: absent -> ul_comm_revoke/shrink give
   *     UL_ERR_UNSUPPORTED) ------------------------------------------------- */
  /** Make every rank's current and later waits on c return UL_ERR_REVOKED (this rank's
   *  and, through the backend's own channel, every peer's). Must not block and must not
   *  free; may be called from any thread, also while other threads wait on c; idempotent. */
  ul_result_t (*comm_revoke)(ul_backend_comm_t *c);
  /** Collective over the surviving ranks of c (revoked, failed or healthy): agree on the
   *  alive set, bounded by args->timeout_ms, then create this rank's communicator among
   *  the survivors. args carries the new core handle (args->comm), device, timeout, abort
   *  flag, name and options; args->rank/nranks/id_payload are ignored: the agreement
   *  decides *new_rank (old-rank order among survivors) and *new_nranks. */
  ul_result_t (*comm_shrink)(ul_backend_comm_t *c, const ul_backend_comm_args_t *args,
                             ul_backend_comm_t **out, ul_backend_comm_props_t *props,
                             int *new_rank, int *new_nranks);
  /** Local, non-blocking: the ranks of c this rank knows are lost, ascending (up to max
   *  in ranks), their number in *count. */
  ul_result_t (*comm_failed_ranks)(ul_backend_comm_t *c, int *ranks, int max, int *count);

  /* --- launcher bootstrap (ABI 1.3, optional): a backend that reaches every process of
   *     an MPI launcher's job lets the core run ul_bootstrap_mpi and ul_comm_init_mpi for
   *     any backend; the core asks whichever backend has these (no lookup by name) ------ */
  /** Broadcast len bytes of buf from rank 0 of the job (impl 0: every process the
   *  launcher started; else the application communicator given by its Fortran handle
   *  fcomm, built with the MPI whose unilink/mpi.h tag is impl); buf NULL: only report
   *  this process's *rank and the job's *nranks. Collective; bounded by the backend's
   *  timeout. */
  ul_result_t (*bootstrap_bcast)(int impl, int64_t fcomm, void *buf, size_t len, int *rank,
                                 int *nranks);
  /** on = 1: the next comm_init on this thread builds on that application communicator
   *  instead of the whole job; on = 0: drop it. */
  ul_result_t (*bootstrap_stage)(int impl, int64_t fcomm, int on);

  /* --- memory and transport floor (ABI 1.4, optional): single copies into and out of a
   *     peer process's private memory, and streaming stores. Absent: the generic layer
   *     reaches peers' private buffers only through windows (direct algorithms then need
   *     load/store peers or mem_export mappings) and copies with copy_local ----------- */
  /** Local, non-blocking, may be called more than once: *ready = 1 when peer_read and
   *  peer_write reach every peer of c from this rank (between processes: the kernel lets
   *  this process access the peers' memory), else 0. Permissions are per pair, so ranks
   *  may disagree: a caller that needs one answer agrees on it with the other ranks. */
  ul_result_t (*peer_copy_ready)(ul_backend_comm_t *c, int *ready);
  /** Local: local[0..bytes) <- remote, an address in peer @p peer's own address space (its
   *  private host memory, no window needed), in one copy; never waits for the peer. A
   *  lost peer (its memory vanished because it aborted, destroyed c or exited) gives
   *  UL_ERR_PEER_LOST with a sentence naming the lost ranks; any other failure (a bad
   *  address of a live peer) UL_ERR_SYSTEM naming the peer and the system error. */
  ul_result_t (*peer_read)(ul_backend_comm_t *c, int peer, void *local, const void *remote,
                           size_t bytes);
  /** Local: remote[0..bytes) <- local, remote in peer @p peer's address space; as
   *  peer_read. Visible to the peer once the caller's next signal (or barrier) is. */
  ul_result_t (*peer_write)(ul_backend_comm_t *c, int peer, void *remote, const void *local,
                            size_t bytes);
  /** copy_local for large outputs the caller will not read soon: stores that bypass the
   *  cache (non-temporal) where the backend has them, ordered before the op returns (so
   *  before any later signal). Absent: the core uses copy_local. */
  ul_result_t (*copy_stream)(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                             ul_backend_stream_t *s);

  /* --- streaming reduction (ABI 1.5, optional) ----------------------------- */
  /** reduce_local for large outputs nobody reads soon, into @p ndst outputs at once:
   *  dst[i] = a op b for each, one pass over the inputs, stores that bypass the cache,
   *  ordered before the op returns. An output is exactly an input or overlaps neither;
   *  outputs do not overlap each other.
   *  Absent: the core reduces into a cache-sized work area and copies it out with
   *  copy_stream (on the 2-core EPYC VM: allreduce np2 64 MiB 1.5-1.7x slower). */
  ul_result_t (*reduce_stream)(ul_backend_comm_t *c, void *const *dst, int ndst, const void *a,
                               const void *b, size_t count, ul_dtype_t dtype, ul_op_t op,
                               ul_backend_stream_t *s);

  /* --- waiting on a window word (ABI 1.6, optional) ------------------------ */
  /** wait_signal for a word a peer stores rather than a signal it adds to: wait until the
   *  64-bit word at byte @p offset of this rank's own window (8-byte aligned; a peer
   *  writes it through peer_bases with release-ordered stores and sends no signal) is
   *  >= value, with wait_signal's spin, backoff, timeout and failures (UL_ERR_TIMEOUT /
   *  UL_ERR_ABORTED, the communicator's own abort included / UL_ERR_PEER_LOST). The load
   *  that sees the value has acquire order. Host-visible backends only. Absent: the
   *  generic layer sends a signal after such stores and waits for it (decision 0015). */
  ul_result_t (*wait_word)(ul_backend_comm_t *c, ul_backend_window_t *w, size_t offset,
                           uint64_t value, ul_backend_stream_t *s);
} ul_backend_ops_t;

/** Plugins export this symbol. */
typedef const ul_backend_ops_t *(*ul_backend_entry_fn)(void);
#define UL_BACKEND_ENTRY_SYMBOL "ul_backend_entry"

/** One step of a busy wait: tells the core a spin is under way (saves power, frees the
 *  sibling hyperthread). The one definition for the core and every backend's waits. */
static inline void ul_backend_cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#else
  __asm__ __volatile__("" ::: "memory");
#endif
}

/* ------------------------------------------------------------------------- */
/* Core services for backends (exported by libunilink)                        */
/* ------------------------------------------------------------------------- */

/** Record the error sentence of @p comm (thread-local last error when comm is NULL)
 *  and return @p result, so backends write `return ul_backend_set_error(...)`. */
UL_API ul_result_t ul_backend_set_error(ul_comm_t comm, ul_result_t result, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** 1 once any communicator of this process, on any backend, has seen a lost peer, a
 *  timeout, a revoke or an abort (ul_comm_abort included); else 0. A launcher plugin
 *  reads it at exit: a job-wide finalize (MPI_Finalize) would wait for a peer that may be
 *  gone. Any thread. */
UL_API int ul_backend_failure_seen(void);

/** Log levels of UNILINK_DEBUG. */
typedef enum ul_log_level {
  UL_LOG_NONE = 0,
  UL_LOG_WARN = 1,
  UL_LOG_INFO = 2,
  UL_LOG_TRACE = 3
} ul_log_level_t;

/** Log through the core (UNILINK_DEBUG / UNILINK_DEBUG_SUBSYS / UNILINK_DEBUG_FILE).
 *  @p subsys is one of INIT, COLL, P2P, MEM, BACKEND, TUNING, ENV, BOOTSTRAP or the
 *  backend's name. */
UL_API void ul_backend_log(ul_log_level_t level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** 1 when a message at that level/subsystem would be printed. */
UL_API int ul_backend_log_enabled(ul_log_level_t level, const char *subsys);

/** The core's local reduction kernels: dst = a op b (dst may alias a or b), op avg
 *  reduces as sum. For host memory. @return UL_OK or UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_reduce_local(void *dst, const void *a, const void *b, size_t count,
                                   ul_dtype_t dtype, ul_op_t op);
/** The core's streaming reduction: dst[0..ndst) each = a op b (op avg reduces as sum),
 *  in one pass over the inputs, whole aligned 64-byte lines stored with non-temporal
 *  (cache-bypassing) stores, ordered before the call returns. For large outputs nobody
 *  reads soon. An output is exactly a or b (in place) or overlaps neither, and outputs
 *  do not overlap each other (else UL_ERR_INVALID_ARG, nothing written); outputs not at
 *  dst[0]'s offset modulo 16 bytes get ordinary stores. For host memory. */
UL_API ul_result_t ul_reduce_stream_local(void *const *dst, int ndst, const void *a,
                                          const void *b, size_t count, ul_dtype_t dtype,
                                          ul_op_t op);
/** The core's streaming copy: memcpy whose whole 16-byte-aligned 64-byte lines of dst are
 *  stored with non-temporal stores, ordered before the call returns (dst == src: nothing;
 *  otherwise no overlap). For host memory. @return UL_OK or UL_ERR_INVALID_ARG (NULL with
 *  bytes > 0). */
UL_API ul_result_t ul_copy_stream_local(void *dst, const void *src, size_t bytes);
/** The core's avg scaling: buf[i] = buf[i] / nranks (computed in the dtype's
 *  arithmetic: float through float/double with correct rounding, integers truncate). */
UL_API ul_result_t ul_scale_avg_local(void *buf, size_t count, ul_dtype_t dtype, int nranks);

/** Define (once) and read an integer parameter UNILINK_<name> with help text; shown by
 *  unilink-info. Malformed values are reported with a warning and the default is used. */
UL_API int64_t ul_backend_param_int(const char *name, int64_t default_value, const char *help);
/** Same for a string parameter; returns the default when unset. */
UL_API const char *ul_backend_param_str(const char *name, const char *default_value,
                                        const char *help);

#ifdef __cplusplus
}
#endif
#endif /* UNILINK_BACKEND_H */
