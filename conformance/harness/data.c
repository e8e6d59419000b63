/* Seeded inputs, reference results and bit-exact verification.
 *
 * Inputs are a pure function of (seed, rank, index) and are chosen per dtype and op so
 * that every partial result of every reduction order is exactly representable: the
 * reference (computed in double) is then the only right answer, bit for bit. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf.h"

uint64_t cf_hash64(uint64_t x) {
  /* splitmix64 finaliser: cheap, well mixed, deterministic across platforms */
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t cf_str_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static uint64_t cf_rank_key(uint64_t seed, int rank) {
  return cf_hash64(seed + 0x632BE59BD9B4E019ULL * (uint64_t)(rank + 1));
}

/* Element hash of (seed, rank, index); the per-rank key is cached in the generator. */
static inline uint64_t cf_elem_hash(const cf_gen_t *g, int rank, size_t index) {
  uint64_t key = (rank >= 0 && rank < CF_MAX_RANKS) ? g->rank_key[rank]
                 : rank < 0 ? g->rank_key[CF_MAX_RANKS] : cf_rank_key(g->seed, rank);
  return cf_hash64(key ^ (uint64_t)index);
}

int cf_dtype_is_float(ul_dtype_t d) {
  return d == UL_FP16 || d == UL_BF16 || d == UL_FP32 || d == UL_FP64 || d == UL_FP8_E4M3 ||
         d == UL_FP8_E5M2;
}
int cf_dtype_is_signed(ul_dtype_t d) {
  return d == UL_INT8 || d == UL_INT32 || d == UL_INT64 || cf_dtype_is_float(d);
}

/* Largest M such that every integer in [-M, M] (or [0, M]) is exact in the dtype. */
static double cf_exact_limit(ul_dtype_t d) {
  switch (d) {
  case UL_INT8: return 127;
  case UL_UINT8: return 255;
  case UL_INT32: return 2147483647.0;
  case UL_UINT32: return 4294967295.0;
  case UL_INT64: case UL_UINT64: case UL_FP64: return 9007199254740992.0;
  case UL_FP16: return 2048;
  case UL_BF16: return 256;
  case UL_FP32: return 16777216.0;
  case UL_FP8_E4M3: return 16;
  case UL_FP8_E5M2: return 8;
  default: return 0;
  }
}

/* Largest k with 2^k exact (and in range) for products. */
static int cf_prod_bits(ul_dtype_t d) {
  switch (d) {
  case UL_INT8: return 6;
  case UL_UINT8: return 7;
  case UL_INT32: return 30;
  case UL_UINT32: return 31;
  case UL_INT64: case UL_UINT64: return 52;
  case UL_FP16: return 15;
  case UL_FP8_E4M3: return 8;
  case UL_FP8_E5M2: return 15;
  default: return 64; /* bf16, fp32, fp64: exponent range is ample */
  }
}

/* Significand precision in bits (for the avg tolerance). */
static int cf_precision(ul_dtype_t d) {
  switch (d) {
  case UL_FP16: return 11;
  case UL_BF16: return 8;
  case UL_FP32: return 24;
  case UL_FP64: return 53;
  case UL_FP8_E4M3: return 4;
  case UL_FP8_E5M2: return 3;
  default: return 0;
  }
}

void cf_gen_init(cf_gen_t *g, ul_dtype_t dtype, int op, int nranks, uint64_t seed) {
  memset(g, 0, sizeof(*g));
  g->dtype = dtype;
  g->op = op;
  g->nranks = nranks < 1 ? 1 : nranks;
  g->seed = seed;
  for (int r = 0; r < CF_MAX_RANKS; r++) g->rank_key[r] = cf_rank_key(seed, r);
  g->rank_key[CF_MAX_RANKS] = cf_rank_key(seed ^ 0xA76A76ULL, -1);
  int n = g->nranks;
  double L = cf_exact_limit(dtype);
  int sgn = cf_dtype_is_signed(dtype);
  switch (op) {
  case UL_SUM: {
    double a = floor(L / n);
    double cap = (dtype == UL_FP32) ? 65536.0 : 1048576.0;
    if (a > cap) a = cap;
    g->lo = sgn ? -a : 0;
    g->hi = a;
    g->quarter = (dtype == UL_FP32 || dtype == UL_FP64);
    break;
  }
  case UL_MIN:
  case UL_MAX: {
    double a = L;
    if (a > 1073741824.0) a = 1073741824.0;
    g->lo = sgn ? -a : 0;
    g->hi = a;
    if (dtype == UL_INT8) g->lo = -128;
    g->quarter = (dtype == UL_FP32 || dtype == UL_FP64);
    break;
  }
  case UL_PROD: {
    int b = cf_prod_bits(dtype);
    g->twos = b < n ? b : n;
    g->neg = sgn;
    break;
  }
  case UL_AVG: {
    /* v = b + k * (2r - n + 1): the spread sums to zero over ranks, so the average is
     * exactly b; partial sums stay within sum|v| <= n|b| + k*floor(n^2/2). */
    double S = floor((double)n * n / 2);
    if (sgn) {
      if (S + n <= L) {
        g->kmax = 1;
        g->bhi = floor((L - S) / n);
      } else {
        g->kmax = 0;
        g->bhi = floor(L / n);
      }
      if (g->bhi > 65536) g->bhi = 65536;
      g->blo = -g->bhi;
    } else {
      g->bhi = floor(L / n);
      if (g->bhi > 65536) g->bhi = 65536;
      g->kmax = (g->bhi >= n - 1) ? 1 : 0;
      g->blo = g->kmax ? n - 1 : 0;
    }
    break;
  }
  default:
    break;
  }
}

static inline double cf_uniform(uint64_t h, double lo, double hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1;
  /* multiply-high instead of a 64-bit modulo: same spread, a fraction of the cost */
  return lo + (double)(uint64_t)(((unsigned __int128)h * span) >> 64);
}

double cf_gen_value(const cf_gen_t *g, int rank, size_t index) {
  uint64_t h = cf_elem_hash(g, rank, index);
  switch (g->op) {
  case UL_SUM:
  case UL_MIN:
  case UL_MAX:
    if (g->quarter) return cf_uniform(h, g->lo * 4, g->hi * 4) / 4.0;
    return cf_uniform(h, g->lo, g->hi);
  case UL_PROD: {
    double v = (rank < g->twos && (h & 1)) ? 2.0 : 1.0;
    if (g->neg && (h & 2)) v = -v;
    return v;
  }
  case UL_AVG: {
    uint64_t hb = cf_elem_hash(g, -1, index); /* rank-independent */
    double b = cf_uniform(hb >> 1, g->blo, g->bhi);
    int k = g->kmax ? (int)(hb & 1) : 0;
    return b + k * (2 * rank - g->nranks + 1);
  }
  default:
    return 0;
  }
}

void cf_gen_elem(const cf_gen_t *g, int rank, size_t index, void *out) {
  if (g->op >= 0) {
    ul_value_store(g->dtype, out, cf_gen_value(g, rank, index));
    return;
  }
  /* Data movement: random bits, with the exponent's top bit cleared on floats so no
   * NaN/Inf appears (a backend may route data through float registers). */
  size_t sz = ul_dtype_size(g->dtype);
  uint64_t h = cf_elem_hash(g, rank, index);
  unsigned char b[8];
  for (size_t i = 0; i < sz; i++) b[i] = (unsigned char)(h >> (8 * i));
  if (cf_dtype_is_float(g->dtype)) b[sz - 1] &= (unsigned char)~0x40u;
  memcpy(out, b, sz);
}

void cf_gen_fill(const cf_gen_t *g, int rank, size_t index0, size_t count, void *host) {
  size_t sz = ul_dtype_size(g->dtype);
  unsigned char *p = host;
  for (size_t i = 0; i < count; i++) cf_gen_elem(g, rank, index0 + i, p + i * sz);
}

double cf_ref_reduce(const cf_gen_t *g, size_t index) {
  double acc = cf_gen_value(g, 0, index);
  for (int r = 1; r < g->nranks; r++) {
    double v = cf_gen_value(g, r, index);
    switch (g->op) {
    case UL_SUM: case UL_AVG: acc += v; break;
    case UL_PROD: acc *= v; break;
    case UL_MIN: acc = v < acc ? v : acc; break;
    case UL_MAX: acc = v > acc ? v : acc; break;
    default: break;
    }
  }
  if (g->op == UL_AVG) acc /= g->nranks;
  return acc;
}

double cf_avg_tolerance(const cf_gen_t *g) {
  if (g->op != UL_AVG || !cf_dtype_is_float(g->dtype)) return 0;
  double m = fmax(fabs(g->blo), fabs(g->bhi)) + g->kmax * (g->nranks - 1);
  if (m < 1) m = 1;
  int e = (int)floor(log2(m));
  /* n ulps of the largest input: covers sum-then-divide and premultiply-by-1/n. */
  return g->nranks * ldexp(1.0, e - (cf_precision(g->dtype) - 1));
}

/* --------------------------------------------------------------- verify */
static void cf_fmt_elem(char *out, size_t len, ul_dtype_t dt, const void *p) {
  size_t sz = ul_dtype_size(dt);
  const unsigned char *b = p;
  char hex[24];
  size_t k = 0;
  for (size_t i = sz; i-- > 0;) k += (size_t)snprintf(hex + k, sizeof(hex) - k, "%02x", b[i]);
  uint64_t u = 0;
  memcpy(&u, p, sz);
  if (dt == UL_INT64) snprintf(out, len, "%lld (0x%s)", (long long)(int64_t)u, hex);
  else if (dt == UL_UINT64) snprintf(out, len, "%llu (0x%s)", (unsigned long long)u, hex);
  else snprintf(out, len, "%.17g (0x%s)", ul_value_load(dt, p), hex);
}

int cf_verify(cf_ctx_t *ctx, const char *what, const void *got, size_t count, ul_dtype_t dt,
              cf_expect_fn expect, void *arg, double tol) {
  size_t sz = ul_dtype_size(dt);
  const unsigned char *g = cf_read(ctx, got, count * sz);
  if (!g) return -1;
  unsigned char e[8], first_e[8];
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < count; i++) {
    expect(arg, i, e);
    if (memcmp(e, g + i * sz, sz) == 0) continue;
    if (tol > 0) {
      double ge = ul_value_load(dt, g + i * sz), ee = ul_value_load(dt, e);
      if (isfinite(ge) && fabs(ge - ee) <= tol) continue;
    }
    if (bad++ == 0) {
      first = i;
      memcpy(first_e, e, sz);
    }
  }
  if (!bad) return 0;
  char es[64], gs[64];
  cf_fmt_elem(es, sizeof es, dt, first_e);
  cf_fmt_elem(gs, sizeof gs, dt, g + first * sz);
  cf_fail(ctx, "rank %d, %s index %zu: expected %s, got %s%s; %zu of %zu elements differ",
          ctx->rank, what, first, es, gs, tol > 0 ? " (beyond avg tolerance)" : "", bad, count);
  return -1;
}

/* ------------------------------------------------------------- buffers */
/* The buffer holding [p, p+bytes), or -1 (a harness bug: FAIL, never a CPU access). */
static int cf_buf_of(cf_ctx_t *ctx, const void *p, size_t bytes) {
  uintptr_t a = (uintptr_t)p;
  for (int i = 0; i < ctx->nbufs; i++) {
    uintptr_t base = (uintptr_t)ctx->bufs[i];
    if (a >= base && a - base <= ctx->size[i] && bytes <= ctx->size[i] - (a - base)) return i;
  }
  cf_fail(ctx, "rank %d: harness error: %zu bytes at %p are not inside a cf_alloc buffer",
          ctx->rank, bytes, p);
  return -1;
}

static unsigned char *cf_shadow_of(cf_ctx_t *ctx, const void *p, size_t bytes) {
  int i = cf_buf_of(ctx, p, bytes);
  return i < 0 ? NULL : ctx->shadow[i] + ((uintptr_t)p - (uintptr_t)ctx->bufs[i]);
}

/* Shadow -> buffer. NULL stream: the copy is complete when ul_mem_copy returns. */
static int cf_upload(cf_ctx_t *ctx, void *p, const unsigned char *host, size_t bytes) {
  return cf_check_rc(ctx, ul_mem_copy(p, host, bytes, ctx->comm, NULL),
                     "ul_mem_copy (harness: staging host data into a buffer)");
}

int cf_fill(cf_ctx_t *ctx, const cf_gen_t *g, int rank, size_t index0, size_t count, void *buf) {
  size_t bytes = count * ul_dtype_size(g->dtype);
  if (!bytes) return 0;
  unsigned char *h = cf_shadow_of(ctx, buf, bytes);
  if (!h) return -1;
  cf_gen_fill(g, rank, index0, count, h);
  return cf_upload(ctx, buf, h, bytes);
}

int cf_write(cf_ctx_t *ctx, void *p, const void *src, size_t bytes) {
  if (!bytes) return 0;
  unsigned char *h = cf_shadow_of(ctx, p, bytes);
  if (!h) return -1;
  memcpy(h, src, bytes);
  return cf_upload(ctx, p, h, bytes);
}

const void *cf_read(cf_ctx_t *ctx, const void *p, size_t bytes) {
  static const unsigned char none[8];
  if (!bytes) return none;
  unsigned char *h = cf_shadow_of(ctx, p, bytes);
  if (!h) return NULL;
  if (cf_check_rc(ctx, ul_mem_copy(h, p, bytes, ctx->comm, NULL),
                  "ul_mem_copy (harness: copying a buffer back to check it)"))
    return NULL;
  return h;
}

int cf_load(cf_ctx_t *ctx, void *dst, const void *p, size_t bytes) {
  const void *h = cf_read(ctx, p, bytes);
  if (!h) return -1;
  if (bytes) memcpy(dst, h, bytes);
  return 0;
}

int cf_poison(cf_ctx_t *ctx, void *p, size_t bytes) {
  if (!p || !bytes) return 0;
  if (cf_buf_of(ctx, p, bytes) < 0) return -1;
  return cf_check_rc(ctx, ul_mem_set(p, CF_POISON, bytes, ctx->comm, NULL),
                     "ul_mem_set (harness: poisoning a buffer)");
}

int cf_check_poison(cf_ctx_t *ctx, const char *what, const void *p, size_t bytes) {
  const unsigned char *b = cf_read(ctx, p, bytes);
  if (!b) return -1;
  for (size_t i = 0; i < bytes; i++)
    if (b[i] != CF_POISON) {
      cf_fail(ctx, "rank %d, %s byte %zu was modified (0x%02x, expected untouched 0x%02x)",
              ctx->rank, what, i, b[i], CF_POISON);
      return -1;
    }
  return 0;
}

int cf_check_guard(cf_ctx_t *ctx, const char *what, const void *p, size_t bytes) {
  const unsigned char *b = cf_read(ctx, (const unsigned char *)p + bytes, CF_GUARD);
  if (!b) return -1;
  for (size_t i = 0; i < CF_GUARD; i++)
    if (b[i] != CF_POISON) {
      cf_fail(ctx, "rank %d, %s: write past the end (byte %zu after the last element)",
              ctx->rank, what, i);
      return -1;
    }
  return 0;
}

static void *cf_alloc_mem(cf_ctx_t *ctx, size_t bytes, int ulm) {
  if (ctx->nbufs >= (int)(sizeof(ctx->bufs) / sizeof(ctx->bufs[0]))) {
    cf_fail(ctx, "rank %d: harness error: more than %d buffers in one case", ctx->rank,
            (int)(sizeof(ctx->bufs) / sizeof(ctx->bufs[0])));
    return NULL;
  }
  size_t total = (bytes + CF_GUARD + 63) & ~(size_t)63;
  void *p = NULL;
  unsigned char *h = malloc(total);
  if (h) {
    if (ulm) {
      if (ul_mem_alloc(ctx->comm, total, &p) != UL_OK) p = NULL;
    } else {
      p = aligned_alloc(64, total);
    }
  }
  if (!p) {
    free(h);
    cf_fail(ctx, "rank %d: harness could not allocate %zu bytes", ctx->rank, total);
    return NULL;
  }
  ctx->ul_mem[ctx->nbufs] = ulm;
  ctx->shadow[ctx->nbufs] = h;
  ctx->size[ctx->nbufs] = total;
  ctx->bufs[ctx->nbufs++] = p;
  if (cf_poison(ctx, (char *)p + bytes, CF_GUARD)) return NULL; /* freed by cf_free_all */
  return p;
}

void *cf_alloc(cf_ctx_t *ctx, size_t bytes) { return cf_alloc_mem(ctx, bytes, ctx->opts->use_ul_mem); }

void *cf_alloc_window(cf_ctx_t *ctx, size_t bytes) { return cf_alloc_mem(ctx, bytes, 1); }

void cf_free_all(cf_ctx_t *ctx) {
  for (int i = 0; i < ctx->nbufs; i++) {
    if (ctx->ul_mem[i]) ul_mem_free(ctx->comm, ctx->bufs[i]);
    else free(ctx->bufs[i]);
    free(ctx->shadow[i]);
  }
  ctx->nbufs = 0;
}

/* ------------------------------------------------------------- outcome */
void cf_fail(cf_ctx_t *ctx, const char *fmt, ...) {
  if (ctx->status == CF_FAIL) return; /* keep the first failure: it is the cause */
  ctx->status = CF_FAIL;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
  va_end(ap);
}

void cf_skip(cf_ctx_t *ctx, const char *fmt, ...) {
  if (ctx->status == CF_FAIL) return;
  ctx->status = CF_SKIP;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
  va_end(ap);
}

int cf_check_rc(cf_ctx_t *ctx, ul_result_t rc, const char *call) {
  if (rc == UL_OK) return 0;
  const char *le = ul_comm_last_error(ctx->comm);
  if (rc == UL_ERR_UNSUPPORTED)
    cf_fail(ctx, "rank %d: %s returned UL_ERR_UNSUPPORTED although the backend declares it "
            "supported: %s", ctx->rank, call, le);
  else
    cf_fail(ctx, "rank %d: %s returned %s: %s", ctx->rank, call, ul_result_name(rc), le);
  if (rc != UL_ERR_INVALID_ARG && rc != UL_ERR_UNSUPPORTED) ctx->broken = 1;
  if (ctx->comm && ul_comm_get_error(ctx->comm) != UL_OK) ctx->broken = 1;
  return -1;
}

/* UNILINK_ALGO is read by the core on every call; with thread ranks the environment is
 * shared, so rank 0 changes it while every rank waits at a harness barrier. */
void cf_algo_env_set(cf_ctx_t *ctx, const char *value) {
  if (cf_oob_is_threads(ctx->oob)) {
    cf_oob_barrier(ctx->oob);
    if (ctx->rank == 0) setenv("UNILINK_ALGO", value, 1);
    cf_oob_barrier(ctx->oob);
  } else {
    setenv("UNILINK_ALGO", value, 1);
  }
}

void cf_algo_env_clear(cf_ctx_t *ctx) {
  if (cf_oob_is_threads(ctx->oob)) {
    cf_oob_barrier(ctx->oob);
    if (ctx->rank == 0) unsetenv("UNILINK_ALGO");
    cf_oob_barrier(ctx->oob);
  } else {
    unsetenv("UNILINK_ALGO");
  }
}

/* ------------------------------------------------------------- naming */
const char *cf_dtype_name(int d) {
  static const char *n[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                            "fp16", "bf16", "fp32", "fp64", "fp8_e4m3", "fp8_e5m2"};
  return (d >= 0 && d < UL_DTYPE_COUNT) ? n[d] : "-";
}
const char *cf_op_name(int op) {
  static const char *n[] = {"sum", "prod", "min", "max", "avg"};
  return (op >= 0 && op < UL_OP_COUNT) ? n[op] : "-";
}
const char *cf_coll_name(int c) {
  static const char *n[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
                            "alltoall", "gather", "scatter", "barrier", "sendrecv",
                            "alltoallv", "allgatherv"};
  _Static_assert(sizeof n / sizeof n[0] == UL_COLL_COUNT, "a collective without a name");
  return (c >= 0 && c < UL_COLL_COUNT) ? n[c] : "-";
}

int cf_counts(int nranks, int quick, size_t *out, int max) {
  size_t full[] = {0, 1, 7, 1023, 65537, 0};
  int k = 0;
  size_t nd = (size_t)1000 * nranks + (nranks > 1 ? nranks - 1 : 1); /* remainder n-1 */
  if (quick) {
    size_t q[] = {0, 7, nranks > 1 ? nd : 1023};
    for (int i = 0; i < 3 && k < max; i++) out[k++] = q[i];
    return k;
  }
  full[5] = nd;
  for (int i = 0; i < 6 && k < max; i++) out[k++] = full[i];
  return k;
}

int cf_roots(int nranks, int quick, int *out) {
  int cand[3] = {0, nranks - 1, nranks / 2};
  int k = 0;
  for (int i = quick ? 1 : 0; i < (quick ? 2 : 3); i++) {
    int dup = 0;
    for (int j = 0; j < k; j++) dup |= out[j] == cand[i];
    if (!dup) out[k++] = cand[i];
  }
  return k;
}
