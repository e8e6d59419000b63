/* Pure helpers of unilink-bench (see bench_util.h). No libunilink calls here. */
#include "bench_util.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unilink/unilink.h" /* enum values only; nothing is linked */

static const char *const bench_op_names[BENCH_OP_COUNT] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
    "alltoall",  "gather",    "scatter",        "sendrecv", "hypercube",
    "alltoallv", "allgatherv"};

const char *bench_op_name(bench_op_t op) {
  return (op >= 0 && op < BENCH_OP_COUNT) ? bench_op_names[op] : NULL;
}

int bench_op_from_name(const char *name, bench_op_t *op) {
  /* Accept nccl-tests' binary stems too, so scripts can be ported by renaming. */
  static const struct { const char *alias; bench_op_t op; } aliases[] = {
      {"all_reduce", BENCH_ALLREDUCE},     {"all_gather", BENCH_ALLGATHER},
      {"reducescatter", BENCH_REDUCE_SCATTER}, {"bcast", BENCH_BROADCAST},
      {"all_to_all", BENCH_ALLTOALL},      {"send_recv", BENCH_SENDRECV},
      {"hyper_cube", BENCH_HYPERCUBE},     {"all_to_allv", BENCH_ALLTOALLV},
      {"all_gatherv", BENCH_ALLGATHERV},
  };
  if (!name || !op) return -1;
  for (int i = 0; i < BENCH_OP_COUNT; i++)
    if (strcmp(name, bench_op_names[i]) == 0) { *op = (bench_op_t)i; return 0; }
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(name, aliases[i].alias) == 0) { *op = aliases[i].op; return 0; }
  return -1;
}

int bench_op_reduces(bench_op_t op) {
  /* sendrecv prints the -o op like nccl-tests does, though nothing is reduced. */
  return op == BENCH_ALLREDUCE || op == BENCH_REDUCE_SCATTER || op == BENCH_REDUCE;
}

int bench_op_rooted(bench_op_t op) {
  return op == BENCH_BROADCAST || op == BENCH_REDUCE || op == BENCH_GATHER ||
         op == BENCH_SCATTER;
}

int bench_op_has_inplace(bench_op_t op) { return op != BENCH_ALLTOALL && op != BENCH_ALLTOALLV; }

void bench_counts(bench_op_t op, size_t bytes, size_t eltsize, int nranks, bench_counts_t *c) {
  memset(c, 0, sizeof *c);
  if (eltsize == 0 || nranks < 1) return;
  size_t count = bytes / eltsize;
  /* nccl-tests rounds per-rank blocks down to a multiple of 16 bytes for the
   * operations whose buffers hold nranks blocks (alignment of each block). */
  size_t align = eltsize < 16 ? 16 / eltsize : 1;
  size_t block = (count / (size_t)nranks) & ~(align - 1);
  size_t n = (size_t)nranks;
  switch (op) {
  case BENCH_ALLREDUCE:
  case BENCH_BROADCAST:
  case BENCH_REDUCE:
  case BENCH_SENDRECV:
    c->sendcount = c->recvcount = c->paramcount = count;
    break;
  case BENCH_ALLGATHER:
  case BENCH_GATHER:
  case BENCH_HYPERCUBE:
  case BENCH_ALLGATHERV:
    c->sendcount = block;
    c->recvcount = block * n;
    c->paramcount = block;
    c->send_inplace_off = block;
    break;
  case BENCH_REDUCE_SCATTER:
  case BENCH_SCATTER:
    c->sendcount = block * n;
    c->recvcount = block;
    c->paramcount = block;
    c->recv_inplace_off = block;
    break;
  case BENCH_ALLTOALL:
  case BENCH_ALLTOALLV:
    c->paramcount = block;
    c->sendcount = c->recvcount = block * n;
    break;
  default:
    break;
  }
}

size_t bench_row_bytes(const bench_counts_t *c, size_t eltsize) {
  size_t m = c->sendcount > c->recvcount ? c->sendcount : c->recvcount;
  return m * eltsize;
}

double bench_alg_bytes(bench_op_t op, size_t paramcount, size_t eltsize, int nranks) {
  double base = (double)paramcount * (double)eltsize;
  switch (op) {
  case BENCH_ALLGATHER:
  case BENCH_REDUCE_SCATTER:
  case BENCH_ALLTOALL:
  case BENCH_GATHER:
  case BENCH_SCATTER:
  case BENCH_ALLTOALLV:
  case BENCH_ALLGATHERV:
    return base * nranks;
  case BENCH_HYPERCUBE: /* nccl-tests src/hypercube.cu: count * (n-1), factor 1 */
    return base * (nranks - 1);
  default:
    return base;
  }
}

double bench_bw_factor(bench_op_t op, int nranks) {
  if (nranks < 1) return 0.0;
  double n = nranks;
  switch (op) {
  case BENCH_ALLREDUCE:
    return 2.0 * (n - 1.0) / n;
  case BENCH_ALLGATHER:
  case BENCH_REDUCE_SCATTER:
  case BENCH_ALLTOALL:
  case BENCH_GATHER:  /* nccl-tests src/gather.cu: (n-1)/n, not 1 */
  case BENCH_SCATTER: /* nccl-tests src/scatter.cu: (n-1)/n */
  case BENCH_ALLTOALLV:
  case BENCH_ALLGATHERV:
    return (n - 1.0) / n;
  case BENCH_HYPERCUBE:
    return 1.0;
  case BENCH_BROADCAST:
  case BENCH_REDUCE:
  case BENCH_SENDRECV:
    return 1.0;
  default:
    return 0.0;
  }
}

void bench_bw(bench_op_t op, size_t paramcount, size_t eltsize, double sec, int nranks,
              double *algbw, double *busbw) {
  double a = sec > 0 ? bench_alg_bytes(op, paramcount, eltsize, nranks) / 1.0e9 / sec : 0.0;
  if (algbw) *algbw = a;
  if (busbw) *busbw = a * bench_bw_factor(op, nranks);
}

/* Bytes one call reads (every input once) and writes (every output once), in units of
 * S (the algbw bytes), per docs/bench.md "Roofline". */
static void roof_terms(bench_op_t op, int nranks, double *in, double *out) {
  double n = nranks < 1 ? 1 : nranks;
  *in = *out = 0.0;
  switch (op) {
  case BENCH_ALLREDUCE: /* n inputs of S, n outputs of S */
  case BENCH_ALLTOALL:  /* S = a rank's whole buffer: n read, n written */
  case BENCH_ALLTOALLV:
  case BENCH_SENDRECV: /* every rank reads S and some other rank writes S */
    *in = *out = n;
    break;
  case BENCH_REDUCE_SCATTER: /* n inputs of S, n blocks of S/n */
  case BENCH_REDUCE:         /* n inputs, root's S */
    *in = n;
    *out = 1.0;
    break;
  case BENCH_ALLGATHER: /* n blocks of S/n, n outputs of S */
  case BENCH_ALLGATHERV:
  case BENCH_BROADCAST: /* root's S, n outputs */
    *in = 1.0;
    *out = n;
    break;
  case BENCH_HYPERCUBE: /* S = (n-1) blocks: n blocks read, n*n written */
    if (n > 1) {
      *in = n / (n - 1.0);
      *out = n * n / (n - 1.0);
    }
    break;
  case BENCH_GATHER: /* S is root's buffer: read once, written once */
  case BENCH_SCATTER:
    *in = *out = 1.0;
    break;
  default:
    break;
  }
}

double bench_roof_traffic(bench_op_t op, int nranks) {
  double in, out;
  roof_terms(op, nranks, &in, &out);
  return in + out;
}

double bench_roof_inputs(bench_op_t op, int nranks) {
  double in, out;
  roof_terms(op, nranks, &in, &out);
  return in;
}

double bench_roof_busbw(bench_op_t op, int nranks, double membw_gbs) {
  double t = bench_roof_traffic(op, nranks);
  if (t <= 0) return 0.0;
  return bench_bw_factor(op, nranks) / t * membw_gbs;
}

double bench_roof_at(const bench_roof_t *roof, double inputs) {
  if (!roof || roof->n <= 0) return 0.0;
  double g = roof->gbs[0];
  for (int i = 1; i < roof->n; i++)
    if ((double)roof->bytes[i] <= inputs && roof->gbs[i] > 0) g = roof->gbs[i];
  return g;
}

void bench_roof_merge(bench_roof_t *into, const bench_roof_t *other) {
  if (!other || other->n <= 0) return;
  if (into->n <= 0) {
    *into = *other;
    return;
  }
  /* both measured the same working sets (bench_measure_roof's fixed ladder) */
  for (int i = 0; i < into->n && i < other->n; i++)
    if (into->bytes[i] == other->bytes[i] && other->gbs[i] > into->gbs[i])
      into->gbs[i] = other->gbs[i];
  if (other->cpus > into->cpus) into->cpus = other->cpus;
}

double bench_roof_pct(const bench_roof_t *roof, bench_op_t op, int nranks, size_t bytes,
                      double busbw) {
  double inputs = bench_roof_inputs(op, nranks) * (double)bytes;
  double top = bench_roof_busbw(op, nranks, bench_roof_at(roof, inputs));
  return top > 0 ? busbw / top * 100.0 : -1;
}

int bench_parse_size(const char *text, size_t *out) {
  if (!text || !out) return -1;
  while (isspace((unsigned char)*text)) text++;
  if (*text == '-' || *text == '\0') return -1;
  char *end = NULL;
  double v = strtod(text, &end);
  if (end == text || !(v >= 0) || isinf(v)) return -1;
  while (isspace((unsigned char)*end)) end++;
  double unit = 1;
  switch (*end) {
  case 'k': case 'K': unit = 1024.0; end++; break;
  case 'm': case 'M': unit = 1024.0 * 1024.0; end++; break;
  case 'g': case 'G': unit = 1024.0 * 1024.0 * 1024.0; end++; break;
  case '\0': break;
  default: return -1;
  }
  /* Optional trailing B ("64MB") for convenience; nothing else. */
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0') return -1;
  v *= unit;
  if (v >= 18446744073709551615.0) return -1;
  *out = (size_t)v;
  return 0;
}

void bench_format_num(double value, int width, char *out, size_t outsz) {
  if (!out || outsz == 0) return;
  /* widest precision that still fits the column, then an exponent (nccl-tests' rule) */
  char tmp[512];
  for (int prec = 2; prec >= 0; prec--) {
    int len = snprintf(tmp, sizeof tmp, "%*.*f", width, prec, value);
    if (len <= width) { snprintf(out, outsz, "%s", tmp); return; }
  }
  snprintf(out, outsz, "%*.*e", width, width >= 7 ? 1 : 0, value);
}

static int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double bench_nearest_rank(const double *sorted, int n, int pct) {
  int idx = (n * pct + 99) / 100 - 1;
  if (idx < 0) idx = 0;
  if (idx > n - 1) idx = n - 1;
  return sorted[idx];
}

int bench_stats(const double *x, int n, bench_stats_t *s) {
  if (!x || !s || n < 1) return -1;
  double *v = malloc(sizeof(double) * (size_t)n);
  if (!v) return -1;
  memcpy(v, x, sizeof(double) * (size_t)n);
  qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
  memset(s, 0, sizeof *s);
  s->n = n;
  s->min = v[0];
  s->max = v[n - 1];
  s->median = v[n / 2];
  s->p95 = bench_nearest_rank(v, n, 95);
  s->p99 = bench_nearest_rank(v, n, 99);
  double sum = 0;
  for (int i = 0; i < n; i++) sum += v[i];
  s->mean = sum / n;
  double var = 0;
  for (int i = 0; i < n; i++) var += (v[i] - s->mean) * (v[i] - s->mean);
  s->stdev = sqrt(var / n);
  s->cv_pct = s->mean > 0 ? s->stdev / s->mean * 100.0 : 0.0;
  free(v);
  return 0;
}

double bench_dtype_exact_max(int dtype) {
  switch (dtype) {
  case UL_INT8: return 127;
  case UL_UINT8: return 255;
  case UL_FP16: return 2048;     /* 11-bit significand */
  case UL_BF16: return 256;      /* 8-bit significand */
  case UL_FP8_E4M3: return 16;   /* 4-bit significand */
  case UL_FP8_E5M2: return 8;    /* 3-bit significand */
  default: return 1000000;       /* int32/64, fp32/64: far from any limit */
  }
}

uint64_t bench_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t bench_hash(const bench_gen_t *g, int rank, size_t idx) {
  return bench_mix64(g->seed * 0x100000001B3ull ^ bench_mix64((uint64_t)idx) ^
                     ((uint64_t)(uint32_t)(rank + 1) << 40));
}

void bench_gen_init(bench_gen_t *g, int dtype, int op, int nranks, uint64_t seed, int reducing) {
  memset(g, 0, sizeof *g);
  g->dtype = dtype;
  g->op = op;
  g->nranks = nranks < 1 ? 1 : nranks;
  g->seed = seed;
  g->reducing = reducing;
  double m = bench_dtype_exact_max(dtype);
  double n = g->nranks;
  g->maxv = m;
  g->any_k = m < 1000 ? m : 1000;
  g->sum_k = floor(m / n);
  /* avg: inputs b + 2*((idx+r) mod n) sum to n*b + n(n-1); keep that <= M */
  double base = floor(m / n) - (n - 1);
  if (base >= 0) {
    g->avg_base = base < 1000 ? base : 1000;
  } else {
    g->avg_base = -1;
    g->avg_same = floor(m / n);
  }
  int twos = 0;
  while (twos < 62 && ldexp(1.0, twos + 1) <= m) twos++;
  g->prod_twos = twos < g->nranks ? twos : g->nranks;
}

double bench_gen_value(const bench_gen_t *g, int rank, size_t idx) {
  if (!g->reducing) return (double)(bench_hash(g, rank, idx) % (uint64_t)(g->any_k + 1));
  uint64_t n = (uint64_t)g->nranks;
  switch (g->op) {
  case UL_SUM:
    if (g->sum_k < 1) return ((idx % n) == (uint64_t)rank) ? 1.0 : 0.0;
    return (double)(bench_hash(g, rank, idx) % (uint64_t)(g->sum_k + 1));
  case UL_AVG:
    if (g->avg_base < 0)
      return (double)(bench_hash(g, -1, idx) % (uint64_t)(g->avg_same + 1));
    return (double)(bench_hash(g, -1, idx) % (uint64_t)(g->avg_base + 1)) +
           2.0 * (double)((idx + (uint64_t)rank) % n);
  case UL_PROD: {
    /* the number of ranks contributing a 2 depends on idx only, so it is <= prod_twos */
    uint64_t twos = bench_hash(g, -1, idx) % (uint64_t)(g->prod_twos + 1);
    return ((idx + (uint64_t)rank) % n) < twos ? 2.0 : 1.0;
  }
  default: /* min, max */
    return (double)(bench_hash(g, rank, idx) % (uint64_t)(g->any_k + 1));
  }
}

double bench_gen_reduced(const bench_gen_t *g, size_t idx) {
  double acc = bench_gen_value(g, 0, idx);
  for (int r = 1; r < g->nranks; r++) {
    double v = bench_gen_value(g, r, idx);
    switch (g->op) {
    case UL_PROD: acc *= v; break;
    case UL_MIN: acc = v < acc ? v : acc; break;
    case UL_MAX: acc = v > acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  if (g->op == UL_AVG) acc /= g->nranks;
  return acc;
}

double bench_json_value(double v) {
  char buf[512];
  if (v != v) return v;
  snprintf(buf, sizeof buf, "%.6f", v);
  return strtod(buf, NULL);
}

void bench_stats_json_values(bench_stats_t *s) {
  double *f[] = {&s->min, &s->max, &s->mean, &s->median, &s->p95, &s->p99, &s->stdev, &s->cv_pct};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) *f[i] = bench_json_value(*f[i]);
}

int bench_json_escape(const char *in, char *out, size_t outsz) {
  if (!out || outsz == 0) return -1;
  size_t o = 0;
  if (!in) in = "";
  for (; *in; in++) {
    unsigned char ch = (unsigned char)*in;
    char tmp[8];
    const char *piece = tmp;
    if (ch == '"') piece = "\\\"";
    else if (ch == '\\') piece = "\\\\";
    else if (ch == '\n') piece = "\\n";
    else if (ch == '\t') piece = "\\t";
    else if (ch < 0x20 || ch >= 0x7f) snprintf(tmp, sizeof tmp, "\\u%04x", ch);
    else { tmp[0] = (char)ch; tmp[1] = '\0'; }
    size_t len = strlen(piece);
    if (o + len + 1 > outsz) { out[o] = '\0'; return -1; }
    memcpy(out + o, piece, len);
    o += len;
  }
  out[o] = '\0';
  return 0;
}
