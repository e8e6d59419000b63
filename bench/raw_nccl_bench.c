/* raw_nccl_bench: raw NCCL against unilink's nccl backend, like for like, in one process on
 * one GPU: the same libnccl (one copy loaded), the same cudaStream_t (unilink wraps it with
 * ul_stream_wrap_native), one rank each (NCCL refuses two ranks on one GPU), so the
 * difference is the wrapper's cost per call, not a link. Raw buffers come from cudaMalloc,
 * unilink's from ul_mem_alloc; inputs are written with cudaMemcpy / ul_mem_copy and every
 * result is read back and checked once.
 *
 * Two timing methods, each for both sides:
 *   pipelined  nccl-tests' method: warm-up, then N calls back to back between two clock
 *              reads and one stream synchronize (raw: cudaStreamSynchronize, unilink:
 *              ul_stream_synchronize on the wrapped stream); us per call = time / N.
 *   sync       one synchronize after every call (raw: cudaStreamSynchronize; unilink:
 *              ul_stream_synchronize), and "null": unilink on the NULL stream (done on
 *              return), against the raw sync figure.
 * Rounds are interleaved (raw first in even rounds, unilink first in odd ones) and each
 * figure is the median of the rounds.
 *
 *   raw_nccl_bench [-C allreduce,allgather,sendrecv] [-s 8,1K,64K,1M,16M,128M] [-r 3]
 *                  [-d DEVICE] [-q (quick: iterations / 10)]
 * Output: '#' comment lines, then one row per (mode, coll, size):
 *   mode coll bytes raw_us ul_us diff_us ratio
 * and a last line "raw-nccl-bench: RESULT PASS|FAIL rows=.. failed=.. nccl=.. ".
 * Exit: 0 all rows measured and results right, 1 a row failed, 2 setup error, 3 no GPU. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unilink/unilink.h>

#define MAXSIZES 16
#define MAXROUNDS 15
enum { C_ALLREDUCE, C_ALLGATHER, C_SENDRECV, C_N };
static const char *k_coll[C_N] = {"allreduce", "allgather", "sendrecv"};
enum { M_PIPE, M_SYNC, M_NULL, M_N };
static const char *k_mode[M_N] = {"pipelined", "sync", "null"};

static cudaStream_t g_s;
static ncclComm_t g_raw;
static ul_comm_t g_ul;
static ul_stream_t g_us;
static void *g_rs, *g_rr, *g_ls, *g_lr; /* raw send/recv (cudaMalloc), unilink (ul_mem_alloc) */
static int g_failed_rows;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'K': case 'k': v *= 1024; break;
  case 'M': case 'm': v *= 1024.0 * 1024; break;
  case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  default: break;
  }
  return (size_t)v;
}

/* One raw call on g_s. Returns 0 or prints the NCCL error. */
static int raw_call(int coll, size_t count) {
  ncclResult_t r;
  if (coll == C_ALLREDUCE) {
    r = ncclAllReduce(g_rs, g_rr, count, ncclFloat, ncclSum, g_raw, g_s);
  } else if (coll == C_ALLGATHER) {
    r = ncclAllGather(g_rs, g_rr, count, ncclFloat, g_raw, g_s);
  } else {
    r = ncclGroupStart();
    if (r == ncclSuccess) r = ncclSend(g_rs, count, ncclFloat, 0, g_raw, g_s);
    if (r == ncclSuccess) r = ncclRecv(g_rr, count, ncclFloat, 0, g_raw, g_s);
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess) r = e;
  }
  if (r != ncclSuccess) {
    fprintf(stderr, "raw_nccl_bench: raw %s: %s\n", k_coll[coll], ncclGetErrorString(r));
    return 1;
  }
  return 0;
}

static int ul_call(int coll, size_t count, ul_stream_t st) {
  ul_result_t r;
  if (coll == C_ALLREDUCE) {
    r = ul_allreduce(g_ls, g_lr, count, UL_FP32, UL_SUM, g_ul, st);
  } else if (coll == C_ALLGATHER) {
    r = ul_allgather(g_ls, g_lr, count, UL_FP32, g_ul, st);
  } else {
    r = ul_group_start();
    if (r == UL_OK) r = ul_send(g_ls, count, UL_FP32, 0, g_ul, st);
    if (r == UL_OK) r = ul_recv(g_lr, count, UL_FP32, 0, g_ul, st);
    ul_result_t e = ul_group_end();
    if (r == UL_OK) r = e;
  }
  if (r != UL_OK) {
    fprintf(stderr, "raw_nccl_bench: unilink %s: %s: %s\n", k_coll[coll], ul_result_name(r),
            ul_comm_last_error(g_ul));
    return 1;
  }
  return 0;
}

static int raw_sync(void) {
  cudaError_t e = cudaStreamSynchronize(g_s);
  if (e != cudaSuccess) fprintf(stderr, "raw_nccl_bench: cudaStreamSynchronize: %s\n", cudaGetErrorString(e));
  return e != cudaSuccess;
}

static int ul_sync(void) {
  ul_result_t r = ul_stream_synchronize(g_us);
  if (r != UL_OK)
    fprintf(stderr, "raw_nccl_bench: ul_stream_synchronize: %s: %s\n", ul_result_name(r),
            ul_comm_last_error(g_ul));
  return r != UL_OK;
}

/* us per call, or -1 on error. side 0 raw, 1 unilink. */
static double measure(int side, int mode, int coll, size_t count, int iters) {
  int warm = iters / 10 > 2 ? iters / 10 : 2, err = 0;
  ul_stream_t st = mode == M_NULL ? NULL : g_us;
  for (int i = 0; i < warm && !err; i++) err = side ? ul_call(coll, count, st) : raw_call(coll, count);
  if (!err && mode != M_NULL) err = side ? ul_sync() : raw_sync();
  if (err) return -1;
  double t0 = now_us();
  for (int i = 0; i < iters && !err; i++) {
    err = side ? ul_call(coll, count, st) : raw_call(coll, count);
    if (!err && mode == M_SYNC) err = side ? ul_sync() : raw_sync();
  }
  if (!err && mode == M_PIPE) err = side ? ul_sync() : raw_sync();
  double t = now_us() - t0;
  return err ? -1 : t / iters;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  double t[MAXROUNDS];
  for (int i = 0; i < n; i++) {
    if (v[i] < 0) return -1;
    t[i] = v[i];
  }
  qsort(t, (size_t)n, sizeof t[0], cmp_d);
  return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* Write the input pattern, run one call per side, read back, compare (1 rank: recv = send). */
static int check_results(int coll, size_t count, const float *host, float *back) {
  size_t bytes = count * sizeof(float);
  int bad = 0;
  /* on g_s: it is non-blocking, so a cudaMemset on the legacy stream would not be ordered */
  if (cudaMemsetAsync(g_rr, 0, bytes, g_s) != cudaSuccess ||
      ul_mem_set(g_lr, 0, bytes, g_ul, NULL) != UL_OK) {
    fprintf(stderr, "raw_nccl_bench: clearing receive buffers failed\n");
    return 1;
  }
  if (raw_call(coll, count) || raw_sync() ||
      cudaMemcpy(back, g_rr, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
    return 1;
  if (memcmp(back, host, bytes)) {
    fprintf(stderr, "raw_nccl_bench: raw %s: wrong result at %zu bytes\n", k_coll[coll], bytes);
    bad = 1;
  }
  if (ul_call(coll, count, g_us) || ul_sync()) return 1;
  ul_result_t r = ul_mem_copy(back, g_lr, bytes, g_ul, NULL);
  if (r != UL_OK) {
    fprintf(stderr, "raw_nccl_bench: ul_mem_copy(D2H): %s: %s\n", ul_result_name(r), ul_comm_last_error(g_ul));
    return 1;
  }
  if (memcmp(back, host, bytes)) {
    fprintf(stderr, "raw_nccl_bench: unilink %s: wrong result at %zu bytes\n", k_coll[coll], bytes);
    bad = 1;
  }
  return bad;
}

int main(int argc, char **argv) {
  size_t sizes[MAXSIZES];
  int nsizes = 0, rounds = 3, dev = 0, quick = 0, colls[C_N] = {1, 1, 1};
  const char *size_list = "8,1K,64K,1M,16M,128M";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-C") && i + 1 < argc) {
      const char *l = argv[++i];
      for (int c = 0; c < C_N; c++) colls[c] = strstr(l, k_coll[c]) != NULL;
    } else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
      size_list = argv[++i];
    } else if (!strcmp(argv[i], "-r") && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "-d") && i + 1 < argc) {
      dev = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "-q")) {
      quick = 1;
    } else {
      fprintf(stderr, "usage: raw_nccl_bench [-C allreduce,allgather,sendrecv] "
                      "[-s 8,1K,64K,1M,16M,128M] [-r ROUNDS] [-d DEVICE] [-q]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > MAXROUNDS) rounds = 3;
  char *sl = strdup(size_list);
  for (char *t = strtok(sl, ","); t && nsizes < MAXSIZES; t = strtok(NULL, ",")) {
    size_t b = parse_size(t);
    sizes[nsizes++] = b < sizeof(float) ? sizeof(float) : b / sizeof(float) * sizeof(float);
  }
  free(sl);
  setvbuf(stdout, NULL, _IOLBF, 0);
  size_t maxb = 0;
  for (int i = 0; i < nsizes; i++) maxb = sizes[i] > maxb ? sizes[i] : maxb;

  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev <= dev) {
    printf("raw-nccl-bench: RESULT SKIP no CUDA device %d (%s)\n", dev,
           ce != cudaSuccess ? cudaGetErrorString(ce) : "too few devices");
    return 3;
  }
  int ver = 0;
  ncclGetVersion(&ver);
  Dl_info dli;
  const char *nccl_file = dladdr((void *)ncclAllReduce, &dli) && dli.dli_fname ? dli.dli_fname : "?";
  if (cudaSetDevice(dev) != cudaSuccess || cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking) != cudaSuccess) {
    printf("raw-nccl-bench: RESULT FAIL cannot create a stream on device %d\n", dev);
    return 2;
  }
  ncclUniqueId nid;
  ncclResult_t nr = ncclGetUniqueId(&nid);
  if (nr == ncclSuccess) nr = ncclCommInitRank(&g_raw, 1, nid, 0);
  if (nr != ncclSuccess) {
    printf("raw-nccl-bench: RESULT FAIL ncclCommInitRank: %s\n", ncclGetErrorString(nr));
    return 2;
  }
  ul_unique_id_t uid;
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.backend = "nccl";
  cfg.device = dev;
  cfg.timeout_ms = 15000;
  cfg.name = "raw_nccl_bench";
  ul_result_t ur = ul_get_unique_id("nccl", &uid);
  if (ur == UL_OK) ur = ul_comm_init_rank(&g_ul, &cfg, 1, uid, 0);
  if (ur == UL_OK) ur = ul_stream_wrap_native(g_ul, (void *)g_s, &g_us);
  if (ur != UL_OK) {
    printf("raw-nccl-bench: RESULT FAIL unilink nccl comm/stream: %s: %s\n", ul_result_name(ur),
           g_ul ? ul_comm_last_error(g_ul) : ul_last_error());
    return ur == UL_ERR_UNAVAILABLE ? 3 : 2;
  }
  ul_backend_info_t bi;
  memset(&bi, 0, sizeof bi);
  bi.struct_size = sizeof bi;
  ul_backend_query("nccl", &bi);
  /* buffers for the largest size; allgather with one rank receives count elements too */
  if (cudaMalloc(&g_rs, maxb) != cudaSuccess || cudaMalloc(&g_rr, maxb) != cudaSuccess ||
      ul_mem_alloc(g_ul, maxb, &g_ls) != UL_OK || ul_mem_alloc(g_ul, maxb, &g_lr) != UL_OK) {
    printf("raw-nccl-bench: RESULT FAIL cannot allocate 4 x %zu bytes of device memory\n", maxb);
    return 2;
  }
  float *host = malloc(maxb), *back = malloc(maxb);
  for (size_t i = 0; i < maxb / sizeof(float); i++) host[i] = (float)(i % 8191) * 0.5f - 1000.0f;
  if (cudaMemcpyAsync(g_rs, host, maxb, cudaMemcpyHostToDevice, g_s) != cudaSuccess ||
      cudaStreamSynchronize(g_s) != cudaSuccess ||
      (ur = ul_mem_copy(g_ls, host, maxb, g_ul, NULL)) != UL_OK) {
    printf("raw-nccl-bench: RESULT FAIL filling inputs (cudaMemcpy / ul_mem_copy: %s)\n", ul_result_name(ur));
    return 2;
  }
  printf("# raw NCCL vs unilink nccl backend: 1 rank on device %d, one cudaStream_t, fp32 sum\n", dev);
  printf("# NCCL %d.%d.%d (%s); unilink nccl backend version: %s\n", ver / 10000, (ver % 10000) / 100,
         ver % 100, nccl_file, bi.version[0] ? bi.version : "?");
  printf("# us per call, median of %d interleaved rounds; pipelined = back to back + one sync, "
         "sync = sync per call, null = unilink NULL stream vs raw sync\n", rounds);

  /* correctness once per collective at 1 MiB (or the largest size below it) */
  size_t ccount = (maxb < (1u << 20) ? maxb : (1u << 20)) / sizeof(float);
  int check_bad = 0;
  for (int c = 0; c < C_N; c++)
    if (colls[c] && check_results(c, ccount, host, back)) {
      check_bad++;
      printf("# check %s: FAIL\n", k_coll[c]);
    } else if (colls[c]) {
      printf("# check %s: ok (raw and unilink results equal the input, %zu bytes)\n", k_coll[c],
             ccount * sizeof(float));
    }
  ul_call_info_t ci;
  memset(&ci, 0, sizeof ci);
  ci.struct_size = sizeof ci;
  if (ul_comm_last_call(g_ul, &ci) == UL_OK)
    printf("# unilink last call: %s algorithm=%s path=%s\n", ci.backend, ci.algorithm, ci.path);

  static double t[M_N][C_N][MAXSIZES][2][MAXROUNDS];
  for (int r = 0; r < rounds; r++)
    for (int c = 0; c < C_N; c++) {
      if (!colls[c]) continue;
      for (int si = 0; si < nsizes; si++) {
        size_t bytes = sizes[si], count = bytes / sizeof(float);
        int pipe_it = bytes <= (64u << 10) ? 1000 : bytes <= (1u << 20) ? 200 : 50;
        int sync_it = bytes <= (64u << 10) ? 200 : 20;
        if (quick) {
          pipe_it = pipe_it / 10 > 5 ? pipe_it / 10 : 5;
          sync_it = sync_it / 10 > 3 ? sync_it / 10 : 3;
        }
        for (int k = 0; k < 2; k++) {
          int side = (r % 2) ? 1 - k : k; /* interleave which side goes first */
          t[M_PIPE][c][si][side][r] = measure(side, M_PIPE, c, count, pipe_it);
          t[M_SYNC][c][si][side][r] = measure(side, M_SYNC, c, count, sync_it);
          t[M_NULL][c][si][side][r] = side ? measure(1, M_NULL, c, count, sync_it) : 0;
        }
      }
    }

  printf("# %-9s %-9s %10s %10s %10s %10s %8s\n", "mode", "coll", "bytes", "raw_us", "ul_us",
         "diff_us", "ratio");
  int rows = 0;
  for (int m = 0; m < M_N; m++)
    for (int c = 0; c < C_N; c++) {
      if (!colls[c]) continue;
      for (int si = 0; si < nsizes; si++) {
        double raw = median(t[m == M_NULL ? M_SYNC : m][c][si][0], rounds);
        double ul = median(t[m][c][si][1], rounds);
        rows++;
        if (raw < 0 || ul < 0) {
          g_failed_rows++;
          printf("%-11s %-9s %10zu %10s %10s %10s %8s\n", k_mode[m], k_coll[c], sizes[si],
                 raw < 0 ? "error" : "-", ul < 0 ? "error" : "-", "-", "-");
          continue;
        }
        printf("%-11s %-9s %10zu %10.2f %10.2f %10.2f %8.3f\n", k_mode[m], k_coll[c], sizes[si], raw,
               ul, ul - raw, raw > 0 ? ul / raw : 0.0);
      }
    }
  int fail = g_failed_rows || check_bad;
  printf("raw-nccl-bench: RESULT %s rows=%d failed=%d checks_failed=%d nccl=%d.%d.%d\n",
         fail ? "FAIL" : "PASS", rows, g_failed_rows, check_bad, ver / 10000, (ver % 10000) / 100,
         ver % 100);
  ul_stream_destroy(g_us);
  ul_mem_free(g_ul, g_ls);
  ul_mem_free(g_ul, g_lr);
  if (ul_comm_finalize(g_ul) == UL_OK) ul_comm_destroy(g_ul);
  else ul_comm_abort(g_ul);
  cudaFree(g_rs);
  cudaFree(g_rr);
  ncclCommDestroy(g_raw);
  cudaStreamDestroy(g_s);
  free(host);
  free(back);
  return fail ? 1 : 0;
}
