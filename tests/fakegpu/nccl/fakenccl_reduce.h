/* Element arithmetic of the fake NCCL: NCCL 2.28's reduction semantics per datatype
 * (src/device/reduce_kernel.h and hostToDevRedOp in src/enqueue.cc, read for semantics),
 * computed on the host. */
#ifndef UNILINK_FAKENCCL_REDUCE_H
#define UNILINK_FAKENCCL_REDUCE_H

#include <stddef.h>
#include <stdint.h>

/* The device-side operation NCCL turns a ncclRedOp_t into. */
typedef enum {
  FN_OP_SUM,
  FN_OP_PROD,
  FN_OP_MIN,
  FN_OP_MAX,
  FN_OP_PREMULSUM,  /* each input times a scalar, then summed (float avg, user premulsum) */
  FN_OP_SUMPOSTDIV, /* summed, then divided by nranks (integer avg) */
} fn_devop_t;

typedef struct {
  fn_devop_t op;
  uint64_t scalar;  /* PREMULSUM: the scalar's bits in the datatype; SUMPOSTDIV: divisor */
} fn_redop_t;

/* Bytes of an ncclDataType_t, 0 when unknown. */
size_t fn_type_size(int dtype);
/* dst[i] = op over k of srcs[k][i], k = 0..nsrc-1 in order, for i < n elements. */
void fn_reduce(int dtype, fn_redop_t op, const void *const *srcs, int nsrc, void *dst, size_t n);
/* The bits of 1/nranks in @dtype as NCCL computes the avg scalar. */
uint64_t fn_avg_scalar(int dtype, int nranks);
/* Half and bfloat16 encode/decode (round to nearest even), exposed for tests. */
uint16_t fn_half_from_double(double x);
double fn_half_to_double(uint16_t h);
uint16_t fn_bf16_from_double(double x);
double fn_bf16_to_double(uint16_t b);

#endif
