/* unilink-conformance: shared types of the harness and the cases.
 * Public API only (unilink.h); never the backend contract or core internals. */
#ifndef CF_H
#define CF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unilink/unilink.h>

#define CF_MAX_RANKS 64
#define CF_MSG 480
#define CF_NAME 160
#define CF_GUARD 64 /* poisoned bytes after every buffer, checked for overruns */
#define CF_POISON 0xA5

typedef enum cf_status { CF_NONE = 0, CF_PASS = 1, CF_SKIP = 2, CF_FAIL = 3 } cf_status_t;

typedef enum cf_launcher { CF_LAUNCH_THREAD = 0, CF_LAUNCH_PROCESS = 1, CF_LAUNCH_MPI = 2 } cf_launcher_t;

/* Command-line options (shared by parent and children). */
typedef struct cf_opts {
  const char *backend;
  cf_launcher_t launcher;
  int ranks[16];
  int nranks_list;
  const char *filter;      /* comma-separated fnmatch globs, NULL = all */
  const char *json_path;
  const char *junit_path;
  int strict, quick, list, verbose;
  uint64_t seed;
  int timeout_ms;          /* communicator timeout */
  int use_ul_mem;          /* allocate collective buffers with ul_mem_alloc */
  /* hidden, process launcher children */
  int child_rank, child_nranks;
  int child_start;
  const char *child_id_hex, *child_ctl, *child_out;
} cf_opts_t;

struct cf_case;

/* One concrete test: a registered case with every parameter fixed. */
typedef struct cf_inst {
  char name[CF_NAME];
  const struct cf_case *c;
  int coll;      /* ul_coll_t, or -1 */
  int dtype;     /* ul_dtype_t, or -1 */
  int op;        /* ul_op_t, or -1 */
  size_t count;
  int root;
  int inplace;
  int nranks;
  int variant;   /* case-specific sub-pattern */
  int force_generic; /* run with UNILINK_ALGO=<coll>:ring and compare with native */
  const char *row; /* matrix row (collective or family) */
  const char *col; /* matrix column (dtype name or "-") */
  /* planning results (computed identically on every rank and the parent) */
  int selected;
  char skip[160];  /* non-empty: SKIP with this reason */
} cf_inst_t;

/* Harness-level out-of-band channel between ranks (never the library under test). */
typedef struct cf_oob cf_oob_t;

/* Per-rank execution context of one instance. */
typedef struct cf_ctx {
  ul_comm_t comm;
  int rank, nranks;
  const cf_inst_t *inst;
  const cf_opts_t *opts;
  const ul_backend_info_t *info;
  cf_oob_t *oob;
  uint64_t seed;    /* run seed mixed with the case name */
  /* outcome */
  cf_status_t status;
  char msg[CF_MSG];
  int broken;       /* communicator must be rebuilt before the next case */
  /* buffers to release after the case; each has a host shadow of the same size (the
   * buffer may be device memory the CPU must not touch: see cf_read/cf_upload) */
  void *bufs[16];
  unsigned char *shadow[16];
  size_t size[16];
  int nbufs;
  int ul_mem[16];
} cf_ctx_t;

typedef void (*cf_case_fn)(cf_ctx_t *ctx);
typedef void (*cf_emit_fn)(void *arg, const cf_inst_t *proto);

/* Registration table row. */
typedef struct cf_case {
  const char *pattern;  /* name pattern, for --list and docs */
  const char *family;   /* coll, p2p, onesided, split, streams, errors */
  uint32_t features;    /* UL_FEATURE_* required */
  int min_ranks, max_ranks; /* max 0 = no limit */
  cf_case_fn fn;
  /* Emit every instance of this case for one rank count. */
  void (*expand)(const struct cf_case *c, int nranks, const cf_opts_t *o,
                 const ul_backend_info_t *info, cf_emit_fn emit, void *arg);
  int coll;             /* ul_coll_t for collective rows, -1 otherwise */
  const char *row;      /* matrix row */
  int variant;          /* case-specific (e.g. which error) */
} cf_case_t;

extern const cf_case_t cf_cases[];
extern const int cf_ncases;

/* ---------------------------------------------------------------- oob (oob.c) */
int cf_oob_barrier(cf_oob_t *oob);
/* Every rank contributes `bytes` (<= CF_OOB_SLOT); all receive nranks records. 0 or -1. */
#define CF_OOB_SLOT 512
int cf_oob_allgather(cf_oob_t *oob, const void *mine, void *all, size_t bytes);
/* Rank 0's unique id to everyone. */
int cf_oob_bcast_id(cf_oob_t *oob, ul_unique_id_t *id);
int cf_oob_is_threads(cf_oob_t *oob);

/* ------------------------------------------------------------ data/verify */
typedef struct cf_gen {
  ul_dtype_t dtype;
  int op;          /* ul_op_t for reduction inputs, -1 for data movement */
  int nranks;
  uint64_t seed;
  /* reduction parameters */
  double lo, hi;   /* integer range for sum/min/max */
  int quarter;     /* values are multiples of 1/4 (fp32/fp64 sums) */
  int twos;        /* prod: ranks r < twos may contribute 2 */
  int neg;         /* prod: values may be negative */
  int kmax;        /* avg: zero-sum spread allowed */
  double blo, bhi; /* avg: base range */
  uint64_t rank_key[CF_MAX_RANKS + 1]; /* per-rank hash keys ([CF_MAX_RANKS]: rank-free) */
} cf_gen_t;

void cf_gen_init(cf_gen_t *g, ul_dtype_t dtype, int op, int nranks, uint64_t seed);
/* Element `index` of rank `rank`'s input, as dtype bytes. */
void cf_gen_elem(const cf_gen_t *g, int rank, size_t index, void *out);
/* Reduction input as a double (exactly representable in dtype). */
double cf_gen_value(const cf_gen_t *g, int rank, size_t index);
/* Host memory host[0..count) gets elements index0.. of rank (cf_fill stages it). */
void cf_gen_fill(const cf_gen_t *g, int rank, size_t index0, size_t count, void *host);
/* Reference reduction over all ranks of element `index`, in double. */
double cf_ref_reduce(const cf_gen_t *g, size_t index);

/* Expected element at position i of a result buffer. */
typedef void (*cf_expect_fn)(void *arg, size_t i, void *elem);
/* Copy got[0..count) (a cf_alloc buffer) back and compare it bit for bit against
 * expect(); with `tol` > 0 (avg on floats) an element passes when |got - expected| <= tol.
 * First mismatch -> FAIL in ctx (rank, buffer, index, expected, got). Returns 0 on match. */
int cf_verify(cf_ctx_t *ctx, const char *what, const void *got, size_t count, ul_dtype_t dt,
              cf_expect_fn expect, void *arg, double tol);
/* Tolerance for avg of this generator (0 = exact). */
double cf_avg_tolerance(const cf_gen_t *g);

/* Buffers: count*dtype bytes plus a poisoned guard; released after the case.
 *
 * Every buffer the harness gives to the library may be device memory (ul_mem_alloc on a
 * GPU backend), which the CPU must never load or store. So each buffer has a host shadow
 * of the same size: inputs are written into the shadow and copied in with ul_mem_copy,
 * results are copied back into the shadow with ul_mem_copy and checked there. The same
 * path serves malloc buffers (on host backends ul_mem_copy is a memcpy). Pointers into a
 * buffer (a slot, an offset) are accepted everywhere a buffer is. A failed staging copy
 * is a FAIL of the case; the functions below then return -1 / NULL. */
void *cf_alloc(cf_ctx_t *ctx, size_t bytes);        /* ul_mem_alloc or malloc, per --mem */
void *cf_alloc_window(cf_ctx_t *ctx, size_t bytes); /* always ul_mem_alloc (windows) */
/* Seeded inputs: elements index0.. of rank, written to buf[0..count) through the shadow. */
int cf_fill(cf_ctx_t *ctx, const cf_gen_t *g, int rank, size_t index0, size_t count, void *buf);
/* `bytes` host bytes from src into the buffer at p. */
int cf_write(cf_ctx_t *ctx, void *p, const void *src, size_t bytes);
/* Copy [p, p+bytes) back; returns its host shadow (valid until the next staging of that
 * range), or NULL after a FAIL. */
const void *cf_read(cf_ctx_t *ctx, const void *p, size_t bytes);
/* Copy [p, p+bytes) back into host memory at dst. */
int cf_load(cf_ctx_t *ctx, void *dst, const void *p, size_t bytes);
/* Set [p, p+bytes) to CF_POISON (ul_mem_set). */
int cf_poison(cf_ctx_t *ctx, void *p, size_t bytes);
int cf_check_poison(cf_ctx_t *ctx, const char *what, const void *p, size_t bytes);
int cf_check_guard(cf_ctx_t *ctx, const char *what, const void *p, size_t bytes);
void cf_free_all(cf_ctx_t *ctx);

/* --------------------------------------------------------------- outcome */
void cf_fail(cf_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cf_skip(cf_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Check a call's result; on error record FAIL (UNSUPPORTED from a declared feature is a
 * failure too) and mark the comm broken for timeout/abort/peer loss. Returns 0 if OK. */
int cf_check_rc(cf_ctx_t *ctx, ul_result_t rc, const char *call);
/* Harness-level sync around a forced algorithm (UNILINK_ALGO) for thread ranks. */
void cf_algo_env_set(cf_ctx_t *ctx, const char *value);
void cf_algo_env_clear(cf_ctx_t *ctx);

/* ------------------------------------------------------------- helpers */
uint64_t cf_hash64(uint64_t x);
uint64_t cf_str_hash(const char *s);
int cf_dtype_is_float(ul_dtype_t d);
int cf_dtype_is_signed(ul_dtype_t d);
const char *cf_dtype_name(int d);
const char *cf_op_name(int op);
const char *cf_coll_name(int coll);
/* Counts used by the collective matrix for one rank count (see docs/conformance.md). */
int cf_counts(int nranks, int quick, size_t *out, int max);
/* Roots {0, last, middle}, deduplicated. */
int cf_roots(int nranks, int quick, int *out);

#endif
