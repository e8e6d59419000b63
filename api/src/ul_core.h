/* Internal interfaces of the core (never installed). `ul__` prefix = internal. */
#ifndef UL_CORE_H
#define UL_CORE_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unilink/backend.h>
#include <unilink/unilink.h>

#define UL__HIDDEN __attribute__((visibility("hidden")))

/* CLOCK_MONOTONIC in milliseconds: the core's and the built-in backends' timeouts.
 * (Plugins, which do not see this header, have ulbu_now_ms in backends/util/wait.h.) */
static inline double ul__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Bounded string copy that always terminates: snprintf("%s") costs a formatter run, and
 * the per-call bookkeeping of a collective copies a few names on every call. */
static inline void ul__copy_str(char *dst, size_t size, const char *src) {
  if (size == 0) return;
  size_t n = strlen(src);
  if (n > size - 1) n = size - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* ---------------------------------------------------------------- logging */
/* log.c. Env: UNILINK_DEBUG=warn|info|trace, UNILINK_DEBUG_SUBSYS=INIT,COLL,...|^P2P,
 * UNILINK_DEBUG_FILE=path (%h host, %p pid). Lines: "host:pid:tid unilink LEVEL SUBSYS msg". */
UL__HIDDEN void ul__log(ul_log_level_t level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
UL__HIDDEN int ul__log_enabled(ul_log_level_t level, const char *subsys);
/* The most verbose level that may print (INT_MAX until the environment is read): a
 * UL_INFO or UL_TRACE above it costs a load, not a call (one runs in every collective). */
UL__HIDDEN extern int ul__log_max;
#define UL__LOG_ON(level, subsys)                                                                \
  ((int)(level) <= __atomic_load_n(&ul__log_max, __ATOMIC_RELAXED) &&                            \
   ul__log_enabled(level, subsys))
UL__HIDDEN void ul__log_reset(void); /* re-read the environment (tests) */

#define UL_WARN(subsys, ...) ul__log(UL_LOG_WARN, subsys, __VA_ARGS__)
#define UL_INFO(subsys, ...)                                                                     \
  do {                                                                                           \
    if (UL__LOG_ON(UL_LOG_INFO, subsys)) ul__log(UL_LOG_INFO, subsys, __VA_ARGS__);              \
  } while (0)
#define UL_TRACE(subsys, ...)                                                                    \
  do {                                                                                           \
    if (UL__LOG_ON(UL_LOG_TRACE, subsys)) ul__log(UL_LOG_TRACE, subsys, __VA_ARGS__);            \
  } while (0)

/* NCCLCHECK-style propagation that leaves an error trail in trace logs. */
#define UL_CHECK(expr)                                                                           \
  do {                                                                                           \
    ul_result_t ul__rc = (expr);                                                                 \
    if (ul__rc != UL_OK) {                                                                       \
      UL_TRACE("TRACE", "%s:%d -> %s", __FILE__, __LINE__, ul_result_name(ul__rc));              \
      return ul__rc;                                                                             \
    }                                                                                            \
  } while (0)
#define UL_CHECK_GOTO(expr, rcvar, label)                                                        \
  do {                                                                                           \
    (rcvar) = (expr);                                                                            \
    if ((rcvar) != UL_OK) {                                                                      \
      UL_TRACE("TRACE", "%s:%d -> %s", __FILE__, __LINE__, ul_result_name(rcvar));               \
      goto label;                                                                                \
    }                                                                                            \
  } while (0)

/* ------------------------------------------------------------- parameters */
/* param.c: one registry of UNILINK_* parameters (name without prefix, e.g. "TIMEOUT_MS").
 * Values are read from the environment on every call (cheap; tests change env). */
typedef enum ul__param_type { UL__PARAM_INT, UL__PARAM_STR } ul__param_type_t;
/* Parse an integer param; on malformed text warn (naming the variable and the text)
 * and return default. Accepts decimal, optional k/K/m/M/g/G suffix (x1024). */
UL__HIDDEN int64_t ul__param_int(const char *name, int64_t def, const char *help);
UL__HIDDEN const char *ul__param_str(const char *name, const char *def, const char *help);
/* Strict parse used by both of the above; UL_ERR_INVALID_ARG with a message in err. */
UL__HIDDEN ul_result_t ul__parse_int(const char *text, int64_t *out, char *err, size_t errlen);
/* Register every core parameter so unilink-info lists them even before first use. */
UL__HIDDEN void ul__params_register_core(void);
/* Typed reads of a parameter of param_list.h, with its one default: UL__P_<NAME>. */
#include "param_list.h"
typedef enum ul__param_id {
#define UL__PARAM_ID(n, t, d, o, h) UL__P_##n,
  UL_PARAM_LIST(UL__PARAM_ID)
#undef UL__PARAM_ID
  UL__P_COUNT
} ul__param_id_t;
UL__HIDDEN int64_t ul__param_get_int(ul__param_id_t id);
UL__HIDDEN const char *ul__param_get_str(ul__param_id_t id);
/* param_defs.c: the table of param_list.h (no env read, no logging) */
typedef struct ul__param_def {
  const char *name;
  ul__param_type_t type;
  const char *def;
  const char *owner;
  const char *help;
} ul__param_def_t;
UL__HIDDEN const ul__param_def_t *ul__param_def_at(int id); /* 0 <= id < UL__P_COUNT */
UL__HIDDEN const ul__param_def_t *ul__param_def_find(const char *key); /* NULL: not listed */
UL__HIDDEN const char *ul__param_default(ul__param_id_t id);  /* table text, no env read */
UL__HIDDEN int64_t ul__param_default_int(ul__param_id_t id);
/* fault.c, compiled once per UNILINK_TEST_HOOKS setting: 1 when the fault switches exist. */
UL__HIDDEN int ul__test_hooks_built(void);

/* Resolved configuration: config struct > UNILINK_* env > default. */
typedef struct ul__config {
  char backend[32];   /* "" = auto */
  int timeout_ms;     /* 0 = forever */
  int check;
  int device;         /* UL_CONFIG_UNDEF = backend decides */
  int blocking;       /* 0: nonblocking mode (init and stream-less calls return UL_IN_PROGRESS) */
  char name[64];
} ul__config_t;
/* config.c. UL_ERR_INVALID_ARG if cfg->struct_size is too small / absurd. */
UL__HIDDEN ul_result_t ul__config_resolve(const ul_config_t *cfg, ul__config_t *out);

/* ------------------------------------------------------------------ errors */
/* error.c: thread-local last error (no communicator). */
UL__HIDDEN ul_result_t ul__set_thread_error(ul_result_t rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
UL__HIDDEN void ul__vformat_error(char *buf, size_t len, const char *fmt, va_list ap);

/* --------------------------------------------------------------- registry */
/* registry.c: built-in backends (generated list) + plugins from UNILINK_PLUGIN_PATH
 * (colon separated folders) and the folder of libunilink itself. Tables are copied
 * into a full-size ul_backend_ops_t with absent ops replaced by stubs. */
typedef struct ul__backend {
  ul_backend_ops_t ops;     /* full, stub-filled copy */
  ul_backend_coll_ops_t coll; /* full, NULL-filled copy (NULL = not native) */
  ul_backend_caps_t caps;
  int probed;               /* init() called */
  ul_result_t status;       /* init() result */
  char reason[256];
  int plugin;
  char origin[256];
  void *dl_handle;
} ul__backend_t;

UL__HIDDEN int ul__registry_count(void);
UL__HIDDEN ul__backend_t *ul__registry_at(int index); /* probes on first use */
/* NULL/""/"auto": best available (highest priority). UL_ERR_NOT_FOUND / UNAVAILABLE
 * with a thread error sentence. */
UL__HIDDEN ul_result_t ul__registry_find(const char *name, ul__backend_t **out);
/* The first usable backend with bootstrap_bcast (ul_bootstrap_mpi, ul_comm_init_mpi). */
UL__HIDDEN ul_result_t ul__registry_find_bootstrap(ul__backend_t **out);
/* Validate and register a table (used for plugins and by tests). */
UL__HIDDEN ul_result_t ul__registry_add(const ul_backend_ops_t *ops, const char *origin,
                                        void *dl_handle);
/* Load one plugin file (tests). */
UL__HIDDEN ul_result_t ul__registry_load_plugin(const char *path);
/* Forget everything (tests): unload plugins, reset probing. */
UL__HIDDEN void ul__registry_reset(void);
/* Is this op of ops a stub (absent)? */
UL__HIDDEN bool ul__op_is_stub(const void *fnptr);
/* registry_stubs.c: every op of @o a stub; stubs for the ops past @declared bytes or NULL. */
UL__HIDDEN void ul__fill_all_stubs(ul_backend_ops_t *o);
UL__HIDDEN void ul__fill_missing_ops(ul_backend_ops_t *o, size_t declared);
/* registry_plugins.c: ".../libunilink-foo.so" -> "foo"; load every plugin file found
 * (registry lock held). registry.c: load one plugin file (registry lock held). */
UL__HIDDEN void ul__plugin_hint(const char *path, char *out, size_t len);
/* load() is registry.c's ul__load_plugin_locked: passed in, so discovery sits below it */
UL__HIDDEN void ul__load_plugins_locked(ul_result_t (*load)(const char *path));
UL__HIDDEN ul_result_t ul__load_plugin_locked(const char *path);

/* --------------------------------------------------------------- datatypes */
/* dtype.c + reduce.c */
UL__HIDDEN float ul__fp16_to_float(uint16_t h);
UL__HIDDEN uint16_t ul__float_to_fp16(float f);      /* round to nearest even */
UL__HIDDEN float ul__bf16_to_float(uint16_t h);
UL__HIDDEN uint16_t ul__float_to_bf16(float f);      /* round to nearest even */
UL__HIDDEN float ul__fp8e4m3_to_float(uint8_t v);
UL__HIDDEN uint8_t ul__float_to_fp8e4m3(float f);    /* RNE, saturate to 448 */
UL__HIDDEN float ul__fp8e5m2_to_float(uint8_t v);
UL__HIDDEN uint8_t ul__float_to_fp8e5m2(float f);    /* RNE, overflow -> inf */
UL__HIDDEN bool ul__dtype_is_float(ul_dtype_t d);
UL__HIDDEN bool ul__dtype_valid(ul_dtype_t d);
UL__HIDDEN bool ul__op_valid(ul_op_t op);

/* ------------------------------------------------------------ communicator */
#define UL__MAX_GROUP_OPS 4096

typedef struct ul__host_stream ul__host_stream_t; /* stream.c */

/* Flight recorder (flight.c): the last operations this rank ran on a communicator, as
 * PyTorch's NCCL flight recorder, so that a timeout says what each rank was doing.
 * Written by the rank's turn holder only (operations run one at a time per rank). */
#define UL__FLIGHT_LEN 32
#define UL__ALGO_NAME_LEN 24 /* the generic layer's names, the flight recorder's copies */
typedef struct ul__flight_entry {
  uint64_t seq;
  ul_coll_t coll;
  size_t bytes;
  int64_t start_ms, end_ms; /* CLOCK_MONOTONIC_COARSE: free next to an 8-byte call */
  ul_result_t rc;           /* UL_IN_PROGRESS while it runs */
  char algorithm[UL__ALGO_NAME_LEN];
} ul__flight_entry_t;
typedef struct ul__flight {
  ul__flight_entry_t e[UL__FLIGHT_LEN];
  uint64_t n; /* entries ever begun; e[(n - 1) % LEN] is the latest */
} ul__flight_t;

struct ul_comm {
  uint32_t magic; /* UL__COMM_MAGIC while alive */
  ul__backend_t *backend;
  ul_backend_comm_t *bcomm;
  ul_backend_comm_props_t props;
  ul__config_t config;
  int annotates; /* the backend amends call records (annotate_call is not the stub) */
  int rank, nranks;
  int device;
  volatile int abort_flag;
  volatile int in_flight; /* threads inside a call on this comm */
  ul_result_t sticky;     /* sticky error */
  uint64_t seq;           /* collective sequence number */
  char last_error[512];
  /* What the last call ran, and the record the call in its turn fills: it is published
   * by flipping last_call under the lock, so a call neither copies nor clears a whole
   * ul_call_info_t (a struct copy was a tenth of an 8-byte call's time). */
  ul_call_info_t calls[2];
  int last_call; /* index into calls of the last recorded call */
  struct ul__generic *generic; /* generic layer state (peer-copy backends) */
  void *lock;                  /* pthread_mutex_t* guarding last_error/last_call */
  /* Operations run in issue order whatever stream they were enqueued on, so every
   * rank executes the same sequence: a ticket is taken at issue, a turn at run. */
  uint64_t issue_ticket;
  uint64_t exec_ticket;
  void *turn; /* ul__turn_t* (coll.c) */
  /* comm_owner.c: UL__OWNER_NONE, UL__OWNER_SHARED or the owning thread (pthread_self).
   * owner_busy: the owner is in a call it began as owner (in_flight's part for it).
   * owner_crit: the owner is taking or ending its turn with plain stores. */
  uintptr_t owner;
  int owner_busy;
  int owner_crit;
  struct ul_window *windows; /* live windows, freed with the communicator */
  char options[28];          /* backend options ("dgx-h100" of "sim:dgx-h100"), for split */
  char selection[96];        /* how the backend was chosen (auto, named), for last_call */
  void *xchg_buf;            /* device scratch of ul__exchange on device backends */
  struct ul_stream *streams; /* live streams, released with the communicator */
  size_t xchg_cap;
  ul__flight_t flight;
  /* Nonblocking mode (config.blocking = 0): init runs on init_thread; init_state is
   * UL_IN_PROGRESS until it ends, then UL_OK or its error. Stream-less operations go to
   * nb_stream. */
  volatile int init_state;
  int init_thread_live;
  void *init_thread; /* pthread_t* */
  struct ul_stream *nb_stream;
};
#define UL__COMM_MAGIC 0x756c636dU /* "ulcm" */

struct ul_stream {
  uint32_t magic;
  ul_comm_t comm;
  ul_backend_stream_t *bstream; /* native streams */
  ul__host_stream_t *host;      /* host streams (worker thread) */
  struct ul_stream *next;       /* in comm->streams */
};
#define UL__STREAM_MAGIC 0x756c7374U
/* A stream whose communicator was destroyed: its queue is gone, every call but
 * ul_stream_destroy refuses it, ul_stream_destroy frees the handle. */
#define UL__STREAM_ORPHAN 0x756c6f72U

struct ul_window {
  uint32_t magic;
  ul_comm_t comm;
  ul_backend_window_t *bwin;
  void *base;
  size_t size;
  size_t *peer_sizes; /* nranks */
  void **peer_bases;  /* nranks; NULL where not load/store reachable */
  struct ul_window *next;
};
#define UL__WINDOW_MAGIC 0x756c7769U

/* Do [a, a+alen) and [b, b+blen) share a byte? Empty ranges never overlap. */
static inline int ul__overlap(const void *a, size_t alen, const void *b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  if (alen == 0 || blen == 0) return 0;
  return x < y + blen && y < x + alen;
}

/* comm_state.c (below every other core file) */
UL__HIDDEN ul_result_t ul__comm_set_error(ul_comm_t comm, ul_result_t rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
UL__HIDDEN bool ul__comm_valid(ul_comm_t comm); /* live and initialized: usable */
/* The error for a call on a handle that is not usable (fn: the public call's name):
 * UL_ERR_INVALID_USAGE while a nonblocking init runs, its error once it failed, else
 * UL_ERR_INVALID_ARG. */
UL__HIDDEN ul_result_t ul__comm_invalid(ul_comm_t comm, const char *fn);
/* The owner fast path (comm_owner.c, decision 0017). */
#define UL__OWNER_NONE ((uintptr_t)0)
#define UL__OWNER_SHARED ((uintptr_t)1)
/* Before this thread takes comm's turn (here = 1) or hands it to another thread
 * (here = 0): claim an unowned comm, or revoke another thread's ownership. A revocation
 * waits while the owner takes or ends a turn with plain stores (a few instructions),
 * never for its whole call. UL_OK, or UL_ERR_TIMEOUT (no sentence: UL__OWNER_STUCK)
 * past the communicator's timeout. Same for ul__owner_sync. */
UL__HIDDEN ul_result_t ul__owner_guard_slow(ul_comm_t comm, int here);
static inline ul_result_t ul__owner_guard(ul_comm_t comm, int here) {
  /* every call of an owned or shared communicator: no function call for those */
  uintptr_t o = __atomic_load_n(&comm->owner, __ATOMIC_ACQUIRE);
  if (o == UL__OWNER_SHARED || (here && o == (uintptr_t)pthread_self())) return UL_OK;
  return ul__owner_guard_slow(comm, here);
}
/* The sentence of that timeout (set by the caller, with the communicator's timeout). */
#define UL__OWNER_STUCK                                                                          \
  "the thread that drove this communicator stopped while taking or ending its turn (%d ms); "   \
  "another thread cannot use it"

/* Before reading what the owner publishes without the lock (the call record) from any
 * thread: revoke another thread's ownership (it publishes under the lock from then on). */
UL__HIDDEN ul_result_t ul__owner_sync(ul_comm_t comm);
/* Revoke any ownership without waiting (an abort waits for owner_busy itself). */
UL__HIDDEN void ul__owner_release(ul_comm_t comm);
/* The owner begins a call it may run with plain stores: 1 if so (then it takes its
 * ticket, ul__owner_crit_end, and at the end ul__owner_crit_begin again), 0 if comm is
 * not, or no longer, this thread's. The compiler fence keeps each store before the load
 * after it; a revoking thread's membarrier orders them in the machine. */
static inline int ul__owner_enter(ul_comm_t comm) {
  uintptr_t me = (uintptr_t)pthread_self();
  if (__atomic_load_n(&comm->owner, __ATOMIC_RELAXED) != me) return 0;
  __atomic_store_n(&comm->owner_busy, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&comm->owner_crit, 1, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&comm->owner, __ATOMIC_RELAXED) == me) return 1;
  __atomic_store_n(&comm->owner_crit, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->owner_busy, 0, __ATOMIC_RELEASE);
  return 0;
}
/* The owner, about to end its turn: 1 while it still owns comm (plain stores), 0 once
 * another thread has revoked it (the locked way, which wakes a waiting thread). */
static inline int ul__owner_crit_begin(ul_comm_t comm) {
  __atomic_store_n(&comm->owner_crit, 1, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  return __atomic_load_n(&comm->owner, __ATOMIC_RELAXED) == (uintptr_t)pthread_self();
}
static inline void ul__owner_crit_end(ul_comm_t comm) {
  __atomic_store_n(&comm->owner_crit, 0, __ATOMIC_RELEASE);
}
static inline void ul__owner_leave(ul_comm_t comm) {
  __atomic_store_n(&comm->owner_busy, 0, __ATOMIC_RELEASE);
}
/* in_flight += 1 unless a teardown claimed (or freed) comm; false: refuse the call */
UL__HIDDEN bool ul__comm_enter(ul_comm_t comm);
UL__HIDDEN bool ul__comm_alive(ul_comm_t comm); /* ours and not freed (maybe initializing) */
/* The registry of live handles: add (0 when out of memory), remove, claim for teardown
 * (0 claimed here, 1 another teardown has it, -1 not live; raise_abort sets the flag
 * under the lock while c is certainly alive). */
UL__HIDDEN int ul__comm_live_add(ul_comm_t c);
UL__HIDDEN void ul__comm_live_remove(ul_comm_t c);
UL__HIDDEN int ul__comm_live_claim(ul_comm_t c, int raise_abort);
UL__HIDDEN void ul__comm_lock(ul_comm_t c); /* guards last_error, last_call, streams */
UL__HIDDEN void ul__comm_unlock(ul_comm_t c);
UL__HIDDEN ul_call_info_t *ul__comm_call_record(ul_comm_t comm); /* the turn holder's */
/* Publish it as the last call; fast: the owner's call (comm_owner.c), without the lock. */
UL__HIDDEN void ul__comm_record_call(ul_comm_t comm, int fast);
/* an error that fails the communicator (sticky), not just the call */
UL__HIDDEN int ul__fatal_error(ul_result_t rc);
/* flight.c */
UL__HIDDEN void ul__flight_begin(ul_comm_t c, uint64_t seq, ul_coll_t coll, size_t bytes);
UL__HIDDEN void ul__flight_end(ul_comm_t c, ul_result_t rc, const ul_call_info_t *info);
/* "allreduce #3 8 B ok 0 ms, allreduce #4 8 B UL_ERR_TIMEOUT 800 ms": the last n entries. */
UL__HIDDEN void ul__flight_summary(const ul_comm_t c, int n, char *buf, size_t len);
/* UNILINK_DUMP_ON_TIMEOUT=<prefix>: every entry and the error, as JSON, to <prefix><rank>. */
UL__HIDDEN void ul__flight_dump(ul_comm_t c);
/* comm.c, for comm_recover.c: the steps of ul_comm_init_rank (alloc registers the handle
 * as live; fill_args: no id payload; finish_setup: the generic layer, collective). */
UL__HIDDEN ul_comm_t ul__comm_alloc(ul__backend_t *be, const ul__config_t *cfg, int rank,
                                    int nranks);
UL__HIDDEN void ul__comm_free(ul_comm_t c);
UL__HIDDEN void ul__comm_fill_args(ul_backend_comm_args_t *a, ul_comm_t c, const char *options);
UL__HIDDEN ul_result_t ul__comm_finish_setup(ul_comm_t c);
/* coll.c: allgather of core-owned host data (split colors, window sizes, check records)
 * over @comm. @all has nranks * bytes. Never touches the user's last-call record. On a
 * device-memory backend the data is staged through device scratch with mem_copy, since
 * such a backend's collectives take device memory only. @in_turn: the caller already
 * holds the communicator's turn (check mode inside a collective); else one is taken. */
UL__HIDDEN ul_result_t ul__exchange(ul_comm_t comm, const void *mine, void *all, size_t bytes,
                                    ul_backend_stream_t *bs, int in_turn);
/* mem.c: UL_ERR_INVALID_ARG with a sentence when @ptr is pageable host memory and the
 * backend works on device memory only (as far as the backend can tell). */
UL__HIDDEN ul_result_t ul__check_reachable(ul_comm_t comm, const char *fn, const char *what,
                                           const void *ptr, size_t bytes);
/* mem.c: free the exchange scratch (communicator teardown). */
UL__HIDDEN void ul__exchange_free(ul_comm_t comm);
/* stream_api.c: release the queues of every stream still open on @comm (teardown); the
 * handles become orphans that ul_stream_destroy frees. */
UL__HIDDEN void ul__streams_release_all(ul_comm_t comm);
/* window.c: unlink a window from its comm / free every window of a comm. */
UL__HIDDEN void ul__windows_free_all(ul_comm_t comm);

/* ------------------------------------------------------------ validation */
/* validate.c: every check the public calls make; each returns UL_OK or sets the comm's
 * error sentence (argument name and why) and returns UL_ERR_INVALID_ARG. */
typedef struct ul__coll_args {
  ul_coll_t coll;
  const void *sendbuf;
  void *recvbuf;
  size_t count; /* per the public call's meaning */
  ul_dtype_t dtype;
  ul_op_t op;
  int root;
  int peer;     /* send/recv */
  /* alltoallv / allgatherv (count = allgatherv's sendcount): per rank, in elements.
   * allgatherv uses rcounts/rdispls only. After submission they point into vblock, the
   * call's own copy, freed once the call ran (the caller's arrays may be gone by then). */
  const size_t *scounts, *sdispls, *rcounts, *rdispls;
  void *vblock;
} ul__coll_args_t;
/* fault.c: the test-only fault switch after a successful collective (a no-op unless the
 * build has UNILINK_TEST_HOOKS and UNILINK_FAULT names this collective). */
UL__HIDDEN void ul__fault_after_coll(ul_comm_t comm, const ul__coll_args_t *a);

/* Every field named: left implicit, GCC zeroes the rest with "rep stos", whose start-up
 * was 6% of a one-rank allreduce's call. */
#define UL__COLL_ARGS(k, s, r, n, dt, o, rt, pr)                                             \
  {.coll = (k), .sendbuf = (s), .recvbuf = (r), .count = (n), .dtype = (dt), .op = (o),       \
   .root = (rt), .peer = (pr), .scounts = NULL, .sdispls = NULL, .rcounts = NULL,             \
   .rdispls = NULL, .vblock = NULL}

UL__HIDDEN ul_result_t ul__validate_coll(ul_comm_t comm, const ul__coll_args_t *a,
                                         ul_stream_t stream);
/* validate.c: the v-collectives' checks (ul__validate_coll calls it). */
UL__HIDDEN ul_result_t ul__validate_vcoll(ul_comm_t comm, const ul__coll_args_t *a);
static inline int ul__is_vcoll(ul_coll_t c) {
  return c == UL_COLL_ALLTOALLV || c == UL_COLL_ALLGATHERV;
}
/* coll_v.c: give a validated v-collective its own copy of the count arrays (vblock);
 * largest per-peer block in elements (what ul_call_info_t::bytes reports). */
UL__HIDDEN ul_result_t ul__vcoll_own(ul_comm_t comm, ul__coll_args_t *a);
UL__HIDDEN size_t ul__vcoll_max_block(const ul__coll_args_t *a, int nranks);
/* coll.c: validate, then issue on the stream (or record in the open group). */
UL__HIDDEN ul_result_t ul__submit_coll(ul_comm_t comm, const ul__coll_args_t *a,
                                       ul_stream_t stream);

/* --------------------------------------------------------------- streams */
/* stream.c: host streams run queued closures on a worker thread, in order. */
typedef ul_result_t (*ul__task_fn)(void *arg);
UL__HIDDEN ul_result_t ul__host_stream_create(ul_comm_t comm, ul__host_stream_t **out);
UL__HIDDEN ul_result_t ul__host_stream_enqueue(ul__host_stream_t *s, ul__task_fn fn, void *arg,
                                               size_t arg_size);
UL__HIDDEN ul_result_t ul__host_stream_sync(ul__host_stream_t *s, int timeout_ms);
UL__HIDDEN ul_result_t ul__host_stream_query(ul__host_stream_t *s);
UL__HIDDEN void ul__host_stream_destroy(ul__host_stream_t *s);

/* ----------------------------------------------------- generic algorithms */
/* generic/: patterns (pure rank arithmetic) */
UL__HIDDEN int ul__ring_next(int rank, int nranks);
UL__HIDDEN int ul__ring_prev(int rank, int nranks);
/* Block that rank sends at ring step `step` of a reduce-scatter (block received is
 * ul__ring_rs_send_block(prev, ...)). After nranks-1 steps rank owns block (rank+1)%n. */
UL__HIDDEN int ul__ring_rs_send_block(int rank, int step, int nranks);
UL__HIDDEN int ul__ring_ag_send_block(int rank, int step, int nranks);
/* Binomial tree rooted at root: parent (-1 at root) and children (returns count). */
UL__HIDDEN int ul__tree_parent(int rank, int root, int nranks);
UL__HIDDEN int ul__tree_children(int rank, int root, int nranks, int *children, int max);
/* Recursive doubling: partner at step k (-1 if none); largest power of two <= n. */
UL__HIDDEN int ul__rd_partner(int rank, int step, int nranks);
UL__HIDDEN int ul__pow2_floor(int n);
/* Balanced split of count elements into nblocks: offset and length of block b. */
UL__HIDDEN void ul__block_range(size_t count, int nblocks, int b, size_t *off, size_t *len);

#endif
