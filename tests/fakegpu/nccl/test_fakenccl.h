/* Helpers shared by the tests of the fake NCCL (test_fakenccl*.c): thread ranks, device
 * buffers, timing (test_fakenccl_fx.c). */
#ifndef UNILINK_TEST_FAKENCCL_H
#define UNILINK_TEST_FAKENCCL_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

double now_ms(void);

/* ---------------------------------------------------------------- thread ranks */

typedef struct {
  int rank, nranks, dev;
  ncclUniqueId id;
  void *arg;
  int (*fn)(int rank, int nranks, ncclComm_t comm, cudaStream_t st, void *arg);
  int blocking;
  int rc;
} rank_t;

/* Runs @fn on @n thread ranks, rank r on device r; every rank's return must be 0. */
void run_ranks(int n, int blocking, int (*fn)(int, int, ncclComm_t, cudaStream_t, void *),
               void *arg);

/* Thread-safe helpers (Criterion's asserts belong to the main thread). The legacy-stream
 * copy and memset are ordered before later work on other streams by a device sync, as
 * CUDA requires: a pageable cudaMemcpy may return before the data reaches the device. */
#define CHECK(x)                                                                                 \
  do {                                                                                           \
    if (!(x)) {                                                                                  \
      fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x);                             \
      abort();                                                                                   \
    }                                                                                            \
  } while (0)

void *dev_from(const void *host, size_t bytes);
void to_host(void *host, const void *dev, size_t bytes);

#endif
