/* Helpers shared by the cuda backend's tests under the fake CUDA runtime
 * (test_cuda_backend*.c): thread ranks, the fake's leak counters, and the bodies that
 * several tests reuse. Defined in test_cuda_backend_fx.c, the bodies in
 * test_cuda_backend.c. */
#ifndef UNILINK_TEST_CUDA_BACKEND_H
#define UNILINK_TEST_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <unilink/unilink.h>

#define TIMEOUT_MS 20000
#define MAXR 4

double now_ms(void);

extern int g_timeout_ms; /* a test expecting a hang before its fix lowers it */

ul_config_t cfg_on(int device);

/* ------------------------------------------------------------ thread ranks */

typedef struct rank_ctx rank_ctx_t;
typedef void (*rank_body_t)(rank_ctx_t *);
struct rank_ctx {
  int rank, nranks, device; /* device UL_CONFIG_UNDEF: backend decides */
  ul_unique_id_t id;
  ul_comm_t comm;
  ul_result_t init_rc;
  rank_body_t body;
  int bad;           /* body's failure count */
  char why[512];     /* first failure */
  void *arg;
};

void rank_fail(rank_ctx_t *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define RFAIL(x, ...)                                                                          \
  do {                                                                                         \
    rank_fail((x), __VA_ARGS__);                                                               \
    return;                                                                                    \
  } while (0)

#define RCHECK(x, rc, what)                                                                    \
  do {                                                                                         \
    ul_result_t r_ = (rc);                                                                     \
    if (r_ != UL_OK) {                                                                         \
      rank_fail((x), "rank %d: %s: %s: %s", (x)->rank, (what), ul_result_name(r_),             \
                ul_comm_last_error((x)->comm));                                                \
      return;                                                                                  \
    }                                                                                          \
  } while (0)

void *rank_main(void *arg);
/* Init n thread ranks (devices[r], or UNDEF when devices is NULL) and run body in each;
 * comms stay alive for the caller (destroy_all). */
void run_threads(rank_ctx_t *x, int n, const int *devices, rank_body_t body, void *arg);
void destroy_all(rank_ctx_t *x, int n);

/* The fake's leak counters, all of them at once. */
typedef struct counts {
  int allocs, registered, pinned, ipc, streams, events;
} counts_t;

counts_t counts_now(void);
int counts_equal(counts_t a, counts_t b, char *buf, size_t len);

/* test_cuda_backend.c: allreduce, exact result */
typedef struct ar_arg {
  size_t count;
  int iters;
  int use_stream; /* 1: a ul_stream_create stream (then synchronize), 0: NULL stream */
} ar_arg_t;

int32_t ar_value(int rank, size_t i, int it);
/* Device buffers in and out through ul_mem_copy, exact int32 sum. */
void ar_body(rank_ctx_t *x);
/* test_cuda_backend.c: the bytes of staged send/recv messages */
uint8_t sr_byte(int from, int msg, size_t i);
/* test_cuda_backend.c: a group of @n communicators' allreduces from this thread, each
 * kernel on its comm's GPU */
void drive_group(ul_comm_t *comms, int n, size_t count);
/* test_cuda_backend.c: a one-sided get on the staged path */
void staged_get_body(rank_ctx_t *x);

#endif
