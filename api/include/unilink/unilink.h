/**
 * @file unilink.h
 * @brief unilink public API: one C API for peer transfers and collectives on
 *        any interconnect (host shared memory, MPI, NCCL/NVLink, CUDA, Level Zero,
 *        and a modeled interconnect).
 *
 * Conventions
 * - Every function returns ::ul_result_t; ::UL_OK is 0 and errors are negative.
 * - Bad arguments return ::UL_ERR_INVALID_ARG, write nothing and leave the
 *   communicator usable; ul_comm_last_error() says which argument and why.
 * - Operations are stream ordered (as in NCCL): they are enqueued on a
 *   ::ul_stream_t and complete at ul_stream_synchronize(). A NULL stream means
 *   "run now and return when done" on backends without device queues (host,
 *   mpi, sim); device backends (nccl, cuda, ze) then use their default stream
 *   and synchronize before returning.
 * - In-place operation is requested by pointer aliasing, with NCCL's rules
 *   (documented on each collective). Any other overlap of send and receive
 *   buffers is rejected with ::UL_ERR_INVALID_ARG.
 * - The library never calls abort() or exit().
 */
#ifndef UNILINK_H
#define UNILINK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define UL_API
#else
#define UL_API __attribute__((visibility("default")))
#endif

/** Library version. */
#define UL_VERSION_MAJOR 0
#define UL_VERSION_MINOR 1
#define UL_VERSION_PATCH 0
#define UL_VERSION_CODE (UL_VERSION_MAJOR * 10000 + UL_VERSION_MINOR * 100 + UL_VERSION_PATCH)

/* ------------------------------------------------------------------------- */
/* Result codes                                                               */
/* ------------------------------------------------------------------------- */

/**
 * The one list of result codes: X(name, value, message).
 * Generates the ::ul_result_t enum, ul_result_name() and ul_result_string().
 */
#define UL_RESULT_MAP(X)                                                                         \
  X(UL_OK, 0, "success")                                                                         \
  X(UL_ERR_INVALID_ARG, -1, "invalid argument")                                                  \
  X(UL_ERR_INVALID_USAGE, -2, "invalid usage (call sequence or object state)")                   \
  X(UL_ERR_UNSUPPORTED, -3, "operation not supported by this backend")                           \
  X(UL_ERR_UNAVAILABLE, -4, "backend unavailable on this machine")                               \
  X(UL_ERR_NO_MEMORY, -5, "out of memory")                                                       \
  X(UL_ERR_TIMEOUT, -6, "timed out waiting for peers")                                           \
  X(UL_ERR_PEER_LOST, -7, "a peer rank was lost")                                                \
  X(UL_ERR_ABORTED, -8, "communicator was aborted")                                              \
  X(UL_ERR_MISMATCH, -9, "ranks called the operation with different arguments")                  \
  X(UL_ERR_SYSTEM, -10, "operating system error")                                                \
  X(UL_ERR_BACKEND, -11, "backend (vendor library) error")                                       \
  X(UL_ERR_VERSION, -12, "incompatible version")                                                 \
  X(UL_ERR_NOT_FOUND, -13, "not found")                                                          \
  X(UL_ERR_INTERNAL, -14, "internal error")                                                      \
  X(UL_ERR_REVOKED, -15, "communicator was revoked")                                             \
  X(UL_IN_PROGRESS, 1, "operation in progress")

typedef enum ul_result {
#define UL__RESULT_ENUM(name, value, msg) name = value,
  UL_RESULT_MAP(UL__RESULT_ENUM)
#undef UL__RESULT_ENUM
} ul_result_t;

/** Symbolic name of a result code ("UL_ERR_TIMEOUT"); "UL_UNKNOWN_RESULT" otherwise. */
UL_API const char *ul_result_name(ul_result_t result);
/** One-line message for a result code; "unknown result code" otherwise. */
UL_API const char *ul_result_string(ul_result_t result);

/* ------------------------------------------------------------------------- */
/* Datatypes and reduction operators                                          */
/* ------------------------------------------------------------------------- */

/** Element types. Numbering is part of the ABI. */
typedef enum ul_dtype {
  UL_INT8 = 0,
  UL_UINT8 = 1,
  UL_INT32 = 2,
  UL_UINT32 = 3,
  UL_INT64 = 4,
  UL_UINT64 = 5,
  UL_FP16 = 6,     /**< IEEE 754 binary16 */
  UL_BF16 = 7,     /**< bfloat16 */
  UL_FP32 = 8,
  UL_FP64 = 9,
  UL_FP8_E4M3 = 10, /**< OCP FP8 E4M3 (no infinities, 0x7f/0xff = NaN) */
  UL_FP8_E5M2 = 11, /**< OCP FP8 E5M2 (IEEE-like) */
  UL_DTYPE_COUNT = 12
} ul_dtype_t;

/** Reduction operators, one meaning on every backend (docs/reliability.md). avg = sum,
 *  then divided once by the number of ranks (integers: C division, truncated toward
 *  zero, -7 / 2 = -3). Integer sum/avg wrap modulo 2^bits (never saturate). min/max on
 *  floats: NaN if any input is NaN, and -0 < +0. fp16/bf16/fp8 round per step: each
 *  combination of two partial results is computed in float and rounded to the dtype
 *  (nearest even), as NCCL does in half precision; the order of the steps depends on
 *  the algorithm and the rank count, so a sum that is not exact in the dtype may differ
 *  in the last place between backends, algorithms or rank counts (every rank of one
 *  call gets the same value). */
typedef enum ul_op {
  UL_SUM = 0,
  UL_PROD = 1,
  UL_MIN = 2,
  UL_MAX = 3,
  UL_AVG = 4,
  UL_OP_COUNT = 5
} ul_op_t;

/** Size in bytes of one element; 0 for an unknown dtype. */
UL_API size_t ul_dtype_size(ul_dtype_t dtype);
/** Short name ("fp32", "bf16", "fp8_e4m3"); NULL for an unknown dtype. */
UL_API const char *ul_dtype_name(ul_dtype_t dtype);
/** Short name ("sum", "avg"); NULL for an unknown op. */
UL_API const char *ul_op_name(ul_op_t op);
/** Parse a dtype name (also accepts nccl-tests names: float, half, bfloat16, int32 ...).
 *  @return UL_OK, or UL_ERR_INVALID_ARG for an unknown name or NULL argument. */
UL_API ul_result_t ul_dtype_from_name(const char *name, ul_dtype_t *dtype);
/** Parse an op name. @return UL_OK or UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_op_from_name(const char *name, ul_op_t *op);
/** Store @p value as one element of @p dtype at @p dst, rounding to nearest even
 *  (saturating to the largest finite value for fp8 e4m3; integers truncate and wrap
 *  as a C cast of an in-range value). @return UL_OK or UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_value_store(ul_dtype_t dtype, void *dst, double value);
/** Load one element of @p dtype from @p src as a double (exact for every dtype except
 *  64-bit integers beyond 2^53). Returns 0 for an unknown dtype or NULL src. */
UL_API double ul_value_load(ul_dtype_t dtype, const void *src);

/* ------------------------------------------------------------------------- */
/* Handles                                                                    */
/* ------------------------------------------------------------------------- */

/** A group of ranks on one backend, one device per rank. */
typedef struct ul_comm *ul_comm_t;
/** An ordering queue on a communicator's backend and device. */
typedef struct ul_stream *ul_stream_t;
/** Memory registered with all ranks of a communicator, for one-sided operations. */
typedef struct ul_window *ul_window_t;

/* ------------------------------------------------------------------------- */
/* Configuration                                                              */
/* ------------------------------------------------------------------------- */

/** Value of an int field that means "let the library decide". */
#define UL_CONFIG_UNDEF INT32_MIN

/**
 * Communicator configuration. Always start from ::UL_CONFIG_INIT; fields left
 * at their initial value mean "let the library decide". Precedence: an explicit
 * field wins over the matching UNILINK_* environment variable, which wins over
 * the default. The library reads only the fields that fit in struct_size, so
 * programs built against an older header keep working.
 */
typedef struct ul_config {
  size_t struct_size;    /**< sizeof(ul_config_t), set by UL_CONFIG_INIT */
  const char *backend;   /**< backend name or "auto"; NULL: UNILINK_BACKEND, else auto */
  int32_t timeout_ms;    /**< wait limit for any blocking wait; 0 = wait forever
                              (not recommended); UNDEF: UNILINK_TIMEOUT_MS, else 300000 */
  int32_t check;         /**< 1: compare arguments across ranks before each collective
                              (UNILINK_CHECK); UNDEF: environment, else 0 */
  int32_t device;        /**< device index for this rank; UNDEF: backend decides */
  int32_t blocking;      /**< 1 (UNDEF): calls return when done. 0: nonblocking mode, as
                              NCCL's config.blocking = 0: ul_comm_init_rank returns
                              UL_IN_PROGRESS with *comm set and creates the communicator in
                              the background; collectives and send/recv without a stream
                              are queued on the communicator's own stream and return
                              UL_IN_PROGRESS. Poll ul_comm_get_async_error until it is not
                              UL_IN_PROGRESS; abort from any thread. */
  const char *name;      /**< label used in logs; NULL: none */
} ul_config_t;

/** Initializer: every field "let the library decide". */
#define UL_CONFIG_INIT                                                                           \
  {                                                                                              \
    sizeof(ul_config_t), NULL, UL_CONFIG_UNDEF, UL_CONFIG_UNDEF, UL_CONFIG_UNDEF,                \
        UL_CONFIG_UNDEF, NULL                                                                    \
  }

/* ------------------------------------------------------------------------- */
/* Backends                                                                   */
/* ------------------------------------------------------------------------- */

/** Collective kinds (bit positions of ul_backend_info_t::collectives). */
typedef enum ul_coll {
  UL_COLL_ALLREDUCE = 0,
  UL_COLL_BROADCAST = 1,
  UL_COLL_REDUCE = 2,
  UL_COLL_ALLGATHER = 3,
  UL_COLL_REDUCE_SCATTER = 4,
  UL_COLL_ALLTOALL = 5,
  UL_COLL_GATHER = 6,
  UL_COLL_SCATTER = 7,
  UL_COLL_BARRIER = 8,
  UL_COLL_SENDRECV = 9, /**< point to point, for reporting */
  UL_COLL_ALLTOALLV = 10,
  UL_COLL_ALLGATHERV = 11,
  UL_COLL_COUNT = 12
} ul_coll_t;

/** Name of a collective kind ("allreduce"); NULL if unknown. */
UL_API const char *ul_coll_name(ul_coll_t coll);

/** Feature flags of a backend (ul_backend_info_t::features). */
#define UL_FEATURE_THREAD_RANKS (1u << 0)   /**< ranks as threads of one process */
#define UL_FEATURE_PROCESS_RANKS (1u << 1)  /**< ranks as processes on one node */
#define UL_FEATURE_MULTI_NODE (1u << 2)     /**< ranks on several nodes */
#define UL_FEATURE_INIT_ALL (1u << 3)       /**< ul_comm_init_all */
#define UL_FEATURE_SPLIT (1u << 4)          /**< ul_comm_split */
#define UL_FEATURE_STREAMS (1u << 5)        /**< ul_stream_create */
#define UL_FEATURE_P2P (1u << 6)            /**< ul_send / ul_recv */
#define UL_FEATURE_ONE_SIDED (1u << 7)      /**< windows, put/get/signal */
#define UL_FEATURE_DEVICE_MEMORY (1u << 8)  /**< buffers must be device memory */
#define UL_FEATURE_MODELED (1u << 9)        /**< times are modeled, not measured */
#define UL_FEATURE_GENERIC_COLL (1u << 10)  /**< collectives from the generic layer */
#define UL_FEATURE_NATIVE_COLL (1u << 11)   /**< native collectives */

/** What a backend is and whether it can run here. */
typedef struct ul_backend_info {
  size_t struct_size;            /**< set by caller to sizeof(ul_backend_info_t) */
  const char *name;              /**< "host", "nccl", ... */
  const char *description;       /**< one line */
  int available;                 /**< 1 if it can create communicators here */
  char reason[256];              /**< why not available (empty when available) */
  uint32_t features;             /**< UL_FEATURE_* */
  uint32_t collectives;          /**< bit (1u << ul_coll_t) for each supported collective */
  uint32_t dtypes;               /**< bit (1u << ul_dtype_t) for each supported dtype */
  uint32_t ops;                  /**< bit (1u << ul_op_t) for each supported op */
  uint32_t reduce_dtypes;        /**< dtypes supported in reductions */
  int max_ranks;                 /**< largest communicator; 0 = no limit */
  int plugin;                    /**< 1 if loaded from a plugin file */
  char origin[256];              /**< "built-in" or the plugin path */
  char version[64];              /**< backend/vendor version string, if known */
} ul_backend_info_t;

/** Number of registered backends (built-in and plugins found). */
UL_API int ul_backend_count(void);
/** Describe backend @p index (0..ul_backend_count()-1).
 *  @return UL_OK; UL_ERR_INVALID_ARG for a NULL info, bad index or struct_size. */
UL_API ul_result_t ul_backend_get_info(int index, ul_backend_info_t *info);
/** Describe a backend by name. @return UL_OK, UL_ERR_NOT_FOUND, UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_backend_query(const char *name, ul_backend_info_t *info);
/** Name of the backend "auto" resolves to (the best available one), or NULL. */
UL_API const char *ul_backend_auto(void);

/* ------------------------------------------------------------------------- */
/* Communicators                                                              */
/* ------------------------------------------------------------------------- */

#define UL_UNIQUE_ID_BYTES 256
/** Opaque bootstrap blob; create on one rank, ship to all ranks out of band. */
typedef struct ul_unique_id {
  char internal[UL_UNIQUE_ID_BYTES];
} ul_unique_id_t;

/** Create a unique id for a new communicator on @p backend (NULL or "auto": see
 *  UNILINK_BACKEND). The id names the backend and carries its bootstrap data.
 *  "auto" picks the highest-priority available backend that works on host memory
 *  (host, mpi, sim): a program passing malloc buffers never lands on a GPU backend.
 *  "auto:device" picks the best available device-memory backend (nccl, cuda, ze).
 *  @return UL_OK; UL_ERR_INVALID_ARG (NULL id); UL_ERR_NOT_FOUND (unknown backend);
 *          UL_ERR_UNAVAILABLE (backend cannot run here; ul_last_error() says why). */
UL_API ul_result_t ul_get_unique_id(const char *backend, ul_unique_id_t *id);

/** Create the communicator of rank @p rank among @p nranks. Every rank calls it with
 *  the same id; it returns when all ranks have joined (or timeout_ms passed).
 *  @p config may be NULL (all defaults). The backend is the one named in the id.
 *  @return UL_OK; UL_ERR_INVALID_ARG (NULL comm, nranks < 1, rank out of range,
 *          corrupted id, bad config); UL_ERR_UNAVAILABLE; UL_ERR_TIMEOUT (peers did not
 *          join); UL_ERR_NO_MEMORY; UL_ERR_SYSTEM. On error *comm is set to NULL. */
UL_API ul_result_t ul_comm_init_rank(ul_comm_t *comm, const ul_config_t *config, int nranks,
                                     ul_unique_id_t id, int rank);

/** Create @p ndev communicators in one call, one per device (rank i uses devlist[i],
 *  or device i when devlist is NULL: config->device + i when that is set), for one
 *  process driving several devices. An entry of devlist is a device index >= 0 or
 *  UL_CONFIG_UNDEF (the backend decides); any other negative value is refused.
 *  Backend from config->backend / UNILINK_BACKEND / auto.
 *  @return as ul_comm_init_rank (UL_ERR_INVALID_ARG also for a bad devlist entry, with
 *          comms untouched); UL_ERR_UNSUPPORTED if the backend cannot. */
UL_API ul_result_t ul_comm_init_all(ul_comm_t *comms, const ul_config_t *config, int ndev,
                                    const int *devlist);

/** Color that makes a rank take no part in the new communicator. */
#define UL_SPLIT_NOCOLOR (-1)

/** Collective over @p comm: ranks with the same color form a new communicator,
 *  ordered by key then by old rank. UL_SPLIT_NOCOLOR gives *newcomm = NULL.
 *  @p config NULL inherits the parent's.
 *  @return UL_OK; UL_ERR_INVALID_ARG (NULL comm/newcomm, color < -1);
 *          UL_ERR_UNSUPPORTED; UL_ERR_TIMEOUT. */
UL_API ul_result_t ul_comm_split(ul_comm_t comm, int color, int key, ul_comm_t *newcomm,
                                 const ul_config_t *config);

/** Complete all operations issued on @p comm, including work queued on its streams
 *  (collective). Then destroy is local.
 *  @return UL_OK; UL_ERR_INVALID_ARG; the first error of queued work; the
 *  communicator's error if it has one. */
UL_API ul_result_t ul_comm_finalize(ul_comm_t comm);
/** Free local resources of @p comm. NULL is accepted (no-op). Streams still open on it
 *  finish their queued work (bounded by the timeout) and are released; their handles then
 *  accept only ul_stream_destroy. @return UL_OK; UL_ERR_INVALID_ARG for a handle that is
 *  not a live communicator. */
UL_API ul_result_t ul_comm_destroy(ul_comm_t comm);
/** Abort: release every thread blocked on @p comm (they return UL_ERR_ABORTED) and
 *  free local resources without waiting for peers. Safe from any thread and any
 *  state; always returns promptly. Idempotent: racing aborts (a watchdog and the main
 *  thread) make one teardown, each returns UL_OK. @return UL_OK; UL_ERR_INVALID_ARG for
 *  NULL or a handle already freed. */
UL_API ul_result_t ul_comm_abort(ul_comm_t comm);

/** Rank of the caller in @p comm. @return UL_OK or UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_comm_rank(ul_comm_t comm, int *rank);
/** Number of ranks. @return UL_OK or UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_comm_size(ul_comm_t comm, int *size);
/** Backend name. @return UL_OK or UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_comm_backend(ul_comm_t comm, const char **name);
/** Device index used by this rank (-1 for host). @return UL_OK or UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_comm_device(ul_comm_t comm, int *device);
/** The communicator's sticky error (UL_OK if none): set by a timeout, a lost peer or
 *  an abort, reported by every later call until destroy. */
UL_API ul_result_t ul_comm_get_error(ul_comm_t comm);

/* ------------------------------------------------------------------------- */
/* Recovery after a lost rank (ULFM's revoke/shrink, NCCL's ncclCommShrink)   */
/* ------------------------------------------------------------------------- */

/** Revoke @p comm on every rank: each rank's current and later operations on it return
 *  UL_ERR_REVOKED (sticky: ul_comm_get_error reports it), so every rank leaves the
 *  operation it is in with one error, even ranks not waiting on the lost one. Does not
 *  block and may be called from any thread; idempotent. Only ul_comm_shrink,
 *  ul_comm_failed_ranks, ul_comm_abort, ul_comm_destroy and the queries (rank, size,
 *  errors) still work on a revoked communicator.
 *  @return UL_OK (also when already revoked); UL_ERR_INVALID_ARG (not a live
 *          communicator); UL_ERR_UNSUPPORTED (the backend cannot; the sentence says). */
UL_API ul_result_t ul_comm_revoke(ul_comm_t comm);

/** Collective over the survivors of @p comm (every rank not lost): they agree on which
 *  ranks are alive and each gets *newcomm, a communicator of exactly those ranks,
 *  renumbered in old-rank order (old ranks 0,2,3 alive -> new 0,1,2). Works on a revoked
 *  communicator and on one whose sticky error is UL_ERR_PEER_LOST or UL_ERR_TIMEOUT; on
 *  a healthy one it gives a communicator of the same ranks. @p comm itself stays as it
 *  is (destroy it afterwards). @p config NULL inherits comm's configuration. Bounded by
 *  the timeout: it never blocks forever.
 *  @return UL_OK; UL_ERR_INVALID_ARG (NULL comm/newcomm, bad config); UL_ERR_UNSUPPORTED
 *          (the backend cannot shrink); UL_ERR_TIMEOUT (the survivors did not agree in
 *          time); UL_ERR_ABORTED. On error *newcomm is NULL. */
UL_API ul_result_t ul_comm_shrink(ul_comm_t comm, ul_comm_t *newcomm, const ul_config_t *config);

/** The ranks of @p comm this rank knows to be lost (dead processes, aborted or destroyed
 *  thread ranks), ascending: up to @p max of them in @p ranks (may be NULL when max is
 *  0), and their number in *count. Local, does not block.
 *  @return UL_OK; UL_ERR_INVALID_ARG (NULL count, max < 0, NULL ranks with max > 0);
 *          UL_ERR_UNSUPPORTED (the backend cannot tell). */
UL_API ul_result_t ul_comm_failed_ranks(ul_comm_t comm, int *ranks, int max, int *count);

/** Nonblocking mode's progress and errors (NCCL's ncclCommGetAsyncError): *async_error
 *  becomes UL_IN_PROGRESS while the communicator is being created or work queued by
 *  stream-less calls is pending, the first error of either (or the sticky error), else
 *  UL_OK. Never blocks, never enters the backend's waits: a watchdog thread can poll it
 *  and call ul_comm_abort. Works in blocking mode too (no queued work there).
 *  @return UL_OK; UL_ERR_INVALID_ARG (not a communicator, NULL async_error). */
UL_API ul_result_t ul_comm_get_async_error(ul_comm_t comm, ul_result_t *async_error);

/** The last error sentence for @p comm: what failed, which rank, which call and the
 *  vendor's own code. NULL comm: the calling thread's last error outside a
 *  communicator (e.g. from ul_get_unique_id). Never NULL; "" when none. */
UL_API const char *ul_comm_last_error(ul_comm_t comm);
/** Same as ul_comm_last_error(NULL). */
UL_API const char *ul_last_error(void);

/* ------------------------------------------------------------------------- */
/* Introspection                                                              */
/* ------------------------------------------------------------------------- */

/** Kind of link between two ranks. */
typedef enum ul_link_kind {
  UL_LINK_SELF = 0,
  UL_LINK_NVLINK = 1,
  UL_LINK_PCIE = 2,
  UL_LINK_SHM = 3,     /**< shared memory of one host (threads or processes) */
  UL_LINK_NETWORK = 4, /**< another host */
  UL_LINK_MODELED = 5, /**< a modeled link (sim backend) */
  UL_LINK_XELINK = 6,
  UL_LINK_UNKNOWN = 7
} ul_link_kind_t;

/** Where a link figure came from. */
typedef enum ul_link_source {
  UL_SOURCE_NONE = 0,     /**< no figure */
  UL_SOURCE_MEASURED = 1, /**< measured by unilink on this machine */
  UL_SOURCE_DRIVER = 2,   /**< reported by the vendor driver */
  UL_SOURCE_MODELED = 3,  /**< from the link catalog / model */
  UL_SOURCE_NOMINAL = 4   /**< a nominal figure for the link kind */
} ul_link_source_t;

/** What lies between the caller and one peer. */
typedef struct ul_link_info {
  int peer;                  /**< peer rank */
  ul_link_kind_t kind;
  int generation;            /**< e.g. 4 for NVLink 4 or PCIe Gen4; 0 unknown */
  int lanes;                 /**< links or lanes; 0 unknown */
  double bandwidth_gbps;     /**< GB/s per direction; 0 unknown */
  double latency_us;         /**< one-way latency; 0 unknown */
  ul_link_source_t source;   /**< where bandwidth/latency came from */
  char description[96];      /**< "nvlink4 x18", "shm (threads)", "pcie gen5 x16 (modeled)" */
} ul_link_info_t;

/** Fill @p links[0..size-1] with the link to each peer (links[i].peer == i).
 *  @p nlinks must be >= the communicator size.
 *  @return UL_OK; UL_ERR_INVALID_ARG (NULL, nlinks too small). */
UL_API ul_result_t ul_comm_topology(ul_comm_t comm, ul_link_info_t *links, int nlinks);

/** What the last operation on a communicator used, and why. */
typedef struct ul_call_info {
  size_t struct_size;     /**< set by caller to sizeof(ul_call_info_t) */
  uint64_t sequence;      /**< per-communicator sequence number of that call (1-based) */
  ul_coll_t coll;         /**< collective kind */
  char backend[32];       /**< backend that ran it */
  char algorithm[32];     /**< "native", "ring", "direct", "tree", "recursive_doubling", ... */
  char path[32];          /**< data path: "threads", "shm-copy", "cma", "zero-copy", "p2p", ... */
  int fallback;           /**< 1 if the first choice could not run */
  char reason[192];       /**< why this choice: size thresholds, override, fallback cause */
  size_t bytes;           /**< bytes per rank the call was sized by (count * dtype size;
                               alltoallv/allgatherv: the largest per-peer block) */
  double modeled_us;      /**< modeled duration (sim backend); 0 when not modeled */
  char selection[96];     /**< how the communicator's backend was chosen: "named: nccl",
                               "auto: host, the best available backend for host memory ..." */
} ul_call_info_t;

/** Describe the last operation issued on @p comm by the calling rank.
 *  @return UL_OK; UL_ERR_INVALID_ARG; UL_ERR_NOT_FOUND if nothing ran yet. */
UL_API ul_result_t ul_comm_last_call(ul_comm_t comm, ul_call_info_t *info);

/* ------------------------------------------------------------------------- */
/* Streams                                                                    */
/* ------------------------------------------------------------------------- */

/** Create an ordering queue on the communicator's backend and device. Operations on
 *  one stream run in issue order; different streams may overlap.
 *  @return UL_OK; UL_ERR_INVALID_ARG; UL_ERR_UNSUPPORTED; UL_ERR_NO_MEMORY. */
UL_API ul_result_t ul_stream_create(ul_comm_t comm, ul_stream_t *stream);
/** Wrap a native queue (cudaStream_t, ze_command_list_handle_t) the caller owns.
 *  @return UL_OK; UL_ERR_INVALID_ARG; UL_ERR_UNSUPPORTED on backends without one. */
UL_API ul_result_t ul_stream_wrap_native(ul_comm_t comm, void *native, ul_stream_t *stream);
/** Release @p stream. Returns promptly in every state and never waits for peers (as
 *  cudaStreamDestroy): the handle is invalid afterwards. Work still queued on it is not
 *  dropped: it runs in the background in issue order, and its errors are recorded on the
 *  communicator (ul_comm_last_error, sticky fatal errors, ul_comm_get_async_error); so
 *  its buffers must stay valid until ul_comm_finalize (which completes that work),
 *  ul_comm_destroy (which waits for it, bounded by the timeout) or ul_comm_abort (which
 *  stops it at once). Teardown in either order is safe and prompt: stream then abort, or
 *  abort/destroy then stream (the handle then only accepts ul_stream_destroy, which
 *  frees it). NULL is a no-op.
 *  @return UL_OK; the first error of already completed work not yet reported by
 *  ul_stream_synchronize/query; UL_ERR_INVALID_ARG for a handle that is not a stream. */
UL_API ul_result_t ul_stream_destroy(ul_stream_t stream);
/** Wait until everything enqueued on @p stream has completed.
 *  @return UL_OK; the first error of an enqueued operation; UL_ERR_TIMEOUT. */
UL_API ul_result_t ul_stream_synchronize(ul_stream_t stream);
/** UL_OK if all work completed, UL_IN_PROGRESS if not, or the first error. */
UL_API ul_result_t ul_stream_query(ul_stream_t stream);

/* ------------------------------------------------------------------------- */
/* Collectives                                                                */
/* ------------------------------------------------------------------------- */
/* Common errors of every collective: UL_ERR_INVALID_ARG for a NULL comm, a NULL
 * buffer with nonzero count, count * dtype size overflowing size_t, an unknown
 * dtype or op, an op not defined for the dtype, a root out of range, a stream of
 * another communicator, or buffers overlapping other than by the in-place rule;
 * UL_ERR_UNSUPPORTED if the backend lacks the dtype/op; UL_ERR_TIMEOUT,
 * UL_ERR_PEER_LOST, UL_ERR_ABORTED, UL_ERR_MISMATCH (check mode), or the
 * communicator's sticky error. */

/** recvbuf[i] = op over ranks of sendbuf[i], for i < count, on every rank.
 *  In place when sendbuf == recvbuf. */
UL_API ul_result_t ul_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                ul_dtype_t dtype, ul_op_t op, ul_comm_t comm, ul_stream_t stream);
/** Copy count elements from root's sendbuf to every rank's recvbuf. sendbuf is read on
 *  root only (may be NULL elsewhere, and is not written). In place when
 *  sendbuf == recvbuf on root. */
UL_API ul_result_t ul_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                ul_dtype_t dtype, int root, ul_comm_t comm, ul_stream_t stream);
/** Reduce into root's recvbuf (recvbuf may be NULL off root; off root it is neither
 *  read nor written). In place when sendbuf == recvbuf. */
UL_API ul_result_t ul_reduce(const void *sendbuf, void *recvbuf, size_t count, ul_dtype_t dtype,
                             ul_op_t op, int root, ul_comm_t comm, ul_stream_t stream);
/** recvbuf (nranks * sendcount) = concatenation of every rank's sendbuf (sendcount).
 *  In place when sendbuf == recvbuf + rank * sendcount * size. */
UL_API ul_result_t ul_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                ul_dtype_t dtype, ul_comm_t comm, ul_stream_t stream);
/** Reduce sendbuf (nranks * recvcount) across ranks; rank r gets block r in recvbuf.
 *  In place when recvbuf == sendbuf + rank * recvcount * size; then only that block
 *  changes, the other blocks keep this rank's input (MPI_IN_PLACE's scratch rule does
 *  not apply). */
UL_API ul_result_t ul_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                     ul_dtype_t dtype, ul_op_t op, ul_comm_t comm,
                                     ul_stream_t stream);
/** Block j (count elements) of sendbuf goes to rank j, landing in block `rank` of its
 *  recvbuf. Both buffers hold nranks * count. Not in place (sendbuf == recvbuf is
 *  UL_ERR_INVALID_ARG unless count is 0 or nranks is 1). */
UL_API ul_result_t ul_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                               ul_dtype_t dtype, ul_comm_t comm, ul_stream_t stream);
/** Vector alltoall (MPI_Alltoallv): sendcounts[j] elements at sendbuf + sdispls[j]
 *  go to rank j, landing at its recvbuf + rdispls[rank]; recvcounts[j] elements from
 *  rank j land at recvbuf + rdispls[j]. Counts and displacements are in elements, one
 *  per rank, in host memory (the data buffers follow the backend's memory rules).
 *  sendcounts[j] on this rank must equal recvcounts[me] on rank j. Receive blocks must
 *  not overlap each other; not in place (send and receive ranges must not overlap). */
UL_API ul_result_t ul_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                const size_t *rdispls, ul_dtype_t dtype, ul_comm_t comm,
                                ul_stream_t stream);
/** Vector allgather (MPI_Allgatherv): rank j's sendcount elements land at
 *  recvbuf + displs[j] on every rank; recvcounts[j] (host memory, one per rank, equal on
 *  every rank) must equal rank j's sendcount. Receive blocks must not overlap. In place
 *  when sendbuf == recvbuf + displs[rank] * size. */
UL_API ul_result_t ul_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                 const size_t *recvcounts, const size_t *displs,
                                 ul_dtype_t dtype, ul_comm_t comm, ul_stream_t stream);
/** Root's recvbuf (nranks * count) gets every rank's sendbuf in rank order; recvbuf may
 *  be NULL off root (off root it is neither read nor written). In place when
 *  sendbuf == recvbuf + root * count * size on root. */
UL_API ul_result_t ul_gather(const void *sendbuf, void *recvbuf, size_t count, ul_dtype_t dtype,
                             int root, ul_comm_t comm, ul_stream_t stream);
/** Block r of root's sendbuf (nranks * count) goes to rank r's recvbuf; sendbuf may be
 *  NULL off root (off root it is not read); root's sendbuf is not written. In place
 *  when recvbuf == sendbuf + root * count * size on root. */
UL_API ul_result_t ul_scatter(const void *sendbuf, void *recvbuf, size_t count, ul_dtype_t dtype,
                              int root, ul_comm_t comm, ul_stream_t stream);
/** Returns (or completes on the stream) once every rank has entered it. */
UL_API ul_result_t ul_barrier(ul_comm_t comm, ul_stream_t stream);

/* ------------------------------------------------------------------------- */
/* Point to point                                                             */
/* ------------------------------------------------------------------------- */

/** Send count elements to @p peer. Matched in order with the peer's ul_recv from this
 *  rank with the same count and dtype. Concurrent sends and receives must be inside one
 *  ul_group_start/ul_group_end (as in NCCL); outside a group each call is its own group.
 *  A rank may send to itself inside a group. Counts that differ (in bytes): the receiver
 *  gets UL_ERR_MISMATCH (not sticky), its buffer holds the first min(sent, received)
 *  bytes (mpi, longer message: unspecified, as MPI leaves it) and nothing past it is
 *  written; the sender gets UL_OK. */
UL_API ul_result_t ul_send(const void *buf, size_t count, ul_dtype_t dtype, int peer,
                           ul_comm_t comm, ul_stream_t stream);
/** Receive count elements from @p peer. See ul_send. */
UL_API ul_result_t ul_recv(void *buf, size_t count, ul_dtype_t dtype, int peer, ul_comm_t comm,
                           ul_stream_t stream);
/** Start a group: later ul_send/ul_recv calls of this thread are deferred until
 *  ul_group_end. Groups nest; the outermost end runs them.
 *  @return UL_OK; UL_ERR_INVALID_USAGE when nested too deep. */
UL_API ul_result_t ul_group_start(void);
/** End a group and run (enqueue) its operations; all must be on one communicator and
 *  stream. @return UL_OK; UL_ERR_INVALID_USAGE without a matching start; the first
 *  error of the group (the whole group failed). */
UL_API ul_result_t ul_group_end(void);

/* ------------------------------------------------------------------------- */
/* Memory and one-sided operations                                            */
/* ------------------------------------------------------------------------- */

/** Allocate @p size bytes the backend can share with peers (device memory on GPU
 *  backends, a shared segment on host). Buffers from here give zero-copy paths.
 *  @return UL_OK; UL_ERR_INVALID_ARG (NULL ptr, size 0); UL_ERR_NO_MEMORY. */
UL_API ul_result_t ul_mem_alloc(ul_comm_t comm, size_t size, void **ptr);
/** Free memory from ul_mem_alloc. NULL is a no-op.
 *  @return UL_OK; UL_ERR_INVALID_ARG for a pointer not from ul_mem_alloc on comm. */
UL_API ul_result_t ul_mem_free(ul_comm_t comm, void *ptr);

/** Copy @p bytes from @p src to @p dst, each host or device memory of @p comm's
 *  device (or, on a GPU backend, of a peer device of this process): the direction is
 *  inferred as with cudaMemcpyDefault. Ordered on @p stream; NULL: done when it returns.
 *  This is how a program moves data in and out of ul_mem_alloc memory on device
 *  backends; on host, mpi and sim it is memcpy. Overlapping ranges are not allowed.
 *  @return UL_OK; UL_ERR_INVALID_ARG (NULL comm, NULL pointer with bytes > 0, ranges
 *          overlap, a pointer the backend cannot reach); the communicator's error. */
UL_API ul_result_t ul_mem_copy(void *dst, const void *src, size_t bytes, ul_comm_t comm,
                               ul_stream_t stream);
/** Set @p bytes at @p dst (host or device memory, as ul_mem_copy) to the byte @p value.
 *  @return as ul_mem_copy. */
UL_API ul_result_t ul_mem_set(void *dst, int value, size_t bytes, ul_comm_t comm,
                              ul_stream_t stream);

/** Number of signal slots of every window. */
#define UL_WINDOW_SIGNALS 64

/** Collectively register [base, base+size) of every rank as a window. Each window has
 *  UL_WINDOW_SIGNALS 64-bit signal counters per rank, starting at 0. Backends may
 *  require memory from ul_mem_alloc (process ranks of host do).
 *  @return UL_OK; UL_ERR_INVALID_ARG; UL_ERR_UNSUPPORTED; UL_ERR_TIMEOUT. */
UL_API ul_result_t ul_window_register(ul_comm_t comm, void *base, size_t size,
                                      ul_window_t *window);
/** Collectively deregister. @return UL_OK; UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_window_deregister(ul_window_t window);

/** Write @p bytes from local @p src into @p peer's window at @p offset.
 *  Completes on the stream; ordered before a later ul_signal to the same peer on the
 *  same stream. @return UL_OK; UL_ERR_INVALID_ARG (range outside the peer's window,
 *  peer out of range, NULL). */
UL_API ul_result_t ul_put(const void *src, size_t bytes, int peer, ul_window_t window,
                          size_t offset, ul_stream_t stream);
/** Read @p bytes from @p peer's window at @p offset into local @p dst. */
UL_API ul_result_t ul_get(void *dst, size_t bytes, int peer, ul_window_t window, size_t offset,
                          ul_stream_t stream);
/** Add 1 to signal @p index of @p peer, after all earlier puts to that peer on the
 *  stream are visible. @return UL_OK; UL_ERR_INVALID_ARG (index >= UL_WINDOW_SIGNALS). */
UL_API ul_result_t ul_signal(int peer, ul_window_t window, int index, ul_stream_t stream);
/** Wait until the caller's signal @p index is >= @p value (counts accumulate over the
 *  window's life). @return UL_OK; UL_ERR_TIMEOUT naming the window and signal. */
UL_API ul_result_t ul_wait_signal(ul_window_t window, int index, uint64_t value,
                                  ul_stream_t stream);

/* ------------------------------------------------------------------------- */
/* Bootstrap over a launcher                                                  */
/* ------------------------------------------------------------------------- */

/** 1 if this process was started by mpirun/mpiexec/srun (OMPI_COMM_WORLD_SIZE,
 *  PMI_SIZE, PMIX_RANK or similar are set), else 0. */
UL_API int ul_launched_by_mpi(void);

/** For jobs started by mpirun: rank 0 creates a unique id for @p backend and every
 *  process receives it, over MPI (through the mpi plugin; MPI is initialised if
 *  needed and finalised at exit). Also returns this process's rank and the number
 *  of processes, ready for ul_comm_init_rank. No MPI header needed in user code.
 *  @return UL_OK; UL_ERR_INVALID_ARG; UL_ERR_UNAVAILABLE (no mpi plugin or not
 *  launched by MPI); errors of ul_get_unique_id. */
UL_API ul_result_t ul_bootstrap_mpi(const char *backend, ul_unique_id_t *id, int *rank,
                                    int *nranks);

/* ------------------------------------------------------------------------- */
/* Parameters and version                                                     */
/* ------------------------------------------------------------------------- */

/** One tunable parameter: its UNILINK_* name, current value and help text. */
typedef struct ul_param_info {
  const char *name;      /**< "UNILINK_TIMEOUT_MS" */
  const char *value;     /**< current value as text ("" when unset) */
  const char *default_value;
  const char *help;
} ul_param_info_t;

/** Number of parameters the core and loaded backends define. */
UL_API int ul_param_count(void);
/** Describe parameter @p index. @return UL_OK or UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_param_get(int index, ul_param_info_t *info);
/** Type ("int" or "string") and owner ("core", "generic", a backend name, "test", or
 *  "other" for a plugin's own) of parameter @p index; either pointer may be NULL. */
UL_API ul_result_t ul_param_kind(int index, const char **type, const char **owner);

/** Number of build options this library was compiled with (test hooks, sanitizers,
 *  backends, compiler, ...). */
UL_API int ul_build_option_count(void);
/** Name and value (static text) of build option @p index, e.g. "test_hooks" / "off".
 *  @return UL_OK or UL_ERR_INVALID_ARG. */
UL_API ul_result_t ul_build_option_get(int index, const char **name, const char **value);

/** Library version string "0.1.0". */
UL_API const char *ul_version_string(void);

#ifdef __cplusplus
}
#endif
#endif /* UNILINK_H */
