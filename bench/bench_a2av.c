/* nccl-tests' alltoallv traffic patterns (see bench_a2av.h). Written from nccl-tests'
 * documented behaviour (src/alltoallv.cu header comment and its formulas), not copied. */
#include "bench_a2av.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define A2AV_ALIGN(x) ((x) & ~(size_t)15) /* per-peer blocks are multiples of 16 bytes */

void bench_a2av_init(bench_a2av_t *p) {
  memset(p, 0, sizeof *p);
  p->spread = 1.0;
  p->scale = 1.0;
}

void bench_a2av_free(bench_a2av_t *p) {
  free(p->bytes);
  p->bytes = NULL;
  p->dim = 0;
}

static int a2av_number(const char *name, const char *text, double *out, char *err, size_t errsz) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || isnan(v)) {
    snprintf(err, errsz, "%s=\"%s\" is not a number", name, text);
    return -1;
  }
  *out = v;
  return 0;
}

int bench_a2av_parse_matrix(bench_a2av_t *p, const char *text, const char *name, char *err,
                            size_t errsz) {
  size_t rows = 0, cols = 0, in_row = 0, n = 0, cap = 0;
  size_t *cells = NULL;
  for (const char *s = text;;) {
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\f' || *s == '\v') s++;
    if (*s == '\n' || *s == '\0') {
      if (in_row) {
        if (rows == 0) cols = in_row;
        else if (in_row != cols) {
          snprintf(err, errsz, "alltoallv traffic matrix %s: row %zu has %zu values, row 1 has %zu",
                   name, rows + 1, in_row, cols);
          free(cells);
          return -1;
        }
        rows++;
        in_row = 0;
      }
      if (*s == '\0') break;
      s++;
      continue;
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE || (*end && !isspace((unsigned char)*end)) || isnan(v)) {
      snprintf(err, errsz, "alltoallv traffic matrix %s: row %zu, column %zu is not a number",
               name, rows + 1, in_row + 1);
      free(cells);
      return -1;
    }
    if (v < 0) {
      snprintf(err, errsz, "alltoallv traffic matrix %s: row %zu, column %zu is negative (%g)",
               name, rows + 1, in_row + 1, v);
      free(cells);
      return -1;
    }
    long double scaled = (long double)v * (long double)p->scale;
    if (scaled >= (long double)SIZE_MAX) {
      snprintf(err, errsz, "alltoallv traffic matrix %s: row %zu, column %zu times scale %g "
               "overflows", name, rows + 1, in_row + 1, p->scale);
      free(cells);
      return -1;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      size_t *grown = realloc(cells, cap * sizeof *cells);
      if (!grown) {
        snprintf(err, errsz, "alltoallv traffic matrix %s: out of memory", name);
        free(cells);
        return -1;
      }
      cells = grown;
    }
    cells[n++] = A2AV_ALIGN((size_t)scaled);
    in_row++;
    s = end;
  }
  if (rows == 0) {
    snprintf(err, errsz, "alltoallv traffic matrix %s is empty", name);
    free(cells);
    return -1;
  }
  if (rows != cols) {
    snprintf(err, errsz, "alltoallv traffic matrix %s must be square, it is %zu x %zu", name,
             rows, cols);
    free(cells);
    return -1;
  }
  free(p->bytes);
  p->bytes = cells;
  p->dim = (int)rows;
  p->matrix = 1;
  snprintf(p->file, sizeof p->file, "%s", name);
  return 0;
}

int bench_a2av_from_env(bench_a2av_t *p, char *err, size_t errsz) {
  bench_a2av_init(p);
  const char *e = getenv("NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY");
  if (e) p->print_summary = atoi(e) != 0;
  e = getenv("NCCL_TESTS_ALLTOALLV_SPREAD");
  if (e && a2av_number("NCCL_TESTS_ALLTOALLV_SPREAD", e, &p->spread, err, errsz)) return -1;
  p->spread = p->spread < 0 ? 0 : p->spread > 1 ? 1 : p->spread;
  e = getenv("NCCL_TESTS_ALLTOALLV_MATRIX_SCALE");
  if (e && a2av_number("NCCL_TESTS_ALLTOALLV_MATRIX_SCALE", e, &p->scale, err, errsz)) return -1;
  p->scale = p->scale < 0 ? 0 : p->scale;
  e = getenv("NCCL_TESTS_ALLTOALLV_MATRIX_FILE");
  if (!e) return 0;
  FILE *f = fopen(e, "rb");
  if (!f) {
    snprintf(err, errsz, "NCCL_TESTS_ALLTOALLV_MATRIX_FILE=%s: cannot open: %s", e, strerror(errno));
    return -1;
  }
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 8192;
      char *grown = realloc(text, cap);
      if (!grown) {
        free(text);
        fclose(f);
        snprintf(err, errsz, "NCCL_TESTS_ALLTOALLV_MATRIX_FILE=%s: out of memory", e);
        return -1;
      }
      text = grown;
    }
    size_t got = fread(text + len, 1, 4096, f);
    len += got;
    if (got < 4096) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(text);
    snprintf(err, errsz, "NCCL_TESTS_ALLTOALLV_MATRIX_FILE=%s: read error", e);
    return -1;
  }
  text[len] = '\0';
  int rc = bench_a2av_parse_matrix(p, text, e, err, errsz);
  free(text);
  if (rc) bench_a2av_init(p);
  return rc;
}

size_t bench_a2av_peer_bytes(const bench_a2av_t *p, int i, int j, int nranks, size_t total) {
  if (p->matrix) return p->bytes[(size_t)i * (size_t)p->dim + (size_t)j];
  if (nranks == 1) return A2AV_ALIGN(total);
  /* a blend of an even share and a share that grows with the distance j - i (mod n):
   * the distances 0..n-1 sum to n(n-1)/2, so every rank still sends `total` in all */
  double dist = (double)((j - i + nranks) % nranks);
  double even = (double)total / nranks;
  double far = dist * (double)total / ((double)nranks * (nranks - 1) / 2.0);
  return A2AV_ALIGN((size_t)((1.0 - p->spread) * even + p->spread * far));
}

void bench_a2av_max_counts(const bench_a2av_t *p, size_t eltsize, int nranks, size_t total,
                           size_t *maxsend, size_t *maxrecv) {
  size_t ms = 0, mr = 0;
  /* generated patterns are the same for every rank shifted: rank 0 stands for all */
  int rows = p->matrix ? nranks : 1;
  for (int i = 0; i < rows; i++) {
    size_t s = 0, r = 0;
    for (int j = 0; j < nranks; j++) {
      s += bench_a2av_peer_bytes(p, i, j, nranks, total) / eltsize;
      r += bench_a2av_peer_bytes(p, j, i, nranks, total) / eltsize;
    }
    ms = s > ms ? s : ms;
    mr = r > mr ? r : mr;
  }
  *maxsend = ms;
  *maxrecv = p->matrix ? mr : ms;
}

void bench_a2av_rank_counts(const bench_a2av_t *p, size_t eltsize, int nranks, int me,
                            size_t total, size_t *v) {
  size_t n = (size_t)nranks, sd = 0, rd = 0;
  for (int j = 0; j < nranks; j++) {
    size_t sc = bench_a2av_peer_bytes(p, me, j, nranks, total) / eltsize;
    size_t rc = bench_a2av_peer_bytes(p, j, me, nranks, total) / eltsize;
    size_t off = 0;
    for (int k = 0; k < me; k++) off += bench_a2av_peer_bytes(p, j, k, nranks, total) / eltsize;
    v[j] = sc;
    v[n + j] = sd;
    v[2 * n + j] = rc;
    v[3 * n + j] = rd;
    v[4 * n + j] = off;
    sd += sc;
    rd += rc;
  }
}
