/* Datatype, operator and collective names; element store/load through double.
 * The fp16/bf16/fp8 <-> float conversions are in reduce.c (they are inlined into the
 * reduction loops there); this file uses their out-of-line ul__* versions. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "float_convert.h"
#include "ul_core.h"

static const struct {
  const char *name;
  size_t size;
  bool is_float;
} dtype_info[UL_DTYPE_COUNT] = {
    [UL_INT8] = {"int8", 1, false},         [UL_UINT8] = {"uint8", 1, false},
    [UL_INT32] = {"int32", 4, false},       [UL_UINT32] = {"uint32", 4, false},
    [UL_INT64] = {"int64", 8, false},       [UL_UINT64] = {"uint64", 8, false},
    [UL_FP16] = {"fp16", 2, true},          [UL_BF16] = {"bf16", 2, true},
    [UL_FP32] = {"fp32", 4, true},          [UL_FP64] = {"fp64", 8, true},
    [UL_FP8_E4M3] = {"fp8_e4m3", 1, true}, [UL_FP8_E5M2] = {"fp8_e5m2", 1, true},
};

/* Other spellings accepted by ul_dtype_from_name: nccl-tests (-d), NCCL enum tails,
 * numpy/torch-style names. Matched case-insensitively. */
static const struct {
  const char *alias;
  ul_dtype_t dtype;
} dtype_aliases[] = {
    {"char", UL_INT8},           {"i8", UL_INT8},
    {"uchar", UL_UINT8},         {"u8", UL_UINT8},
    {"int", UL_INT32},           {"i32", UL_INT32},
    {"uint", UL_UINT32},         {"u32", UL_UINT32},
    {"i64", UL_INT64},           {"u64", UL_UINT64},
    {"half", UL_FP16},           {"float16", UL_FP16},        {"f16", UL_FP16},
    {"bfloat16", UL_BF16},       {"bfloat", UL_BF16},
    {"float", UL_FP32},          {"float32", UL_FP32},        {"f32", UL_FP32},
    {"double", UL_FP64},         {"float64", UL_FP64},        {"f64", UL_FP64},
    {"f8e4m3", UL_FP8_E4M3},     {"fp8e4m3", UL_FP8_E4M3},    {"float8e4m3", UL_FP8_E4M3},
    {"float8_e4m3", UL_FP8_E4M3}, {"float8_e4m3fn", UL_FP8_E4M3}, {"e4m3", UL_FP8_E4M3},
    {"f8e5m2", UL_FP8_E5M2},     {"fp8e5m2", UL_FP8_E5M2},    {"float8e5m2", UL_FP8_E5M2},
    {"float8_e5m2", UL_FP8_E5M2}, {"e5m2", UL_FP8_E5M2},
};

static const char *const op_names[UL_OP_COUNT] = {
    [UL_SUM] = "sum", [UL_PROD] = "prod", [UL_MIN] = "min", [UL_MAX] = "max", [UL_AVG] = "avg",
};

static const char *const coll_names[UL_COLL_COUNT] = {
    [UL_COLL_ALLREDUCE] = "allreduce",
    [UL_COLL_BROADCAST] = "broadcast",
    [UL_COLL_REDUCE] = "reduce",
    [UL_COLL_ALLGATHER] = "allgather",
    [UL_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [UL_COLL_ALLTOALL] = "alltoall",
    [UL_COLL_GATHER] = "gather",
    [UL_COLL_SCATTER] = "scatter",
    [UL_COLL_BARRIER] = "barrier",
    [UL_COLL_SENDRECV] = "sendrecv",
    [UL_COLL_ALLTOALLV] = "alltoallv",
    [UL_COLL_ALLGATHERV] = "allgatherv",
};

/* The enums are ints that callers may fill from anything; compare as unsigned so
 * negative values are rejected too. */
bool ul__dtype_valid(ul_dtype_t d) { return (unsigned)d < (unsigned)UL_DTYPE_COUNT; }
bool ul__op_valid(ul_op_t op) { return (unsigned)op < (unsigned)UL_OP_COUNT; }
bool ul__dtype_is_float(ul_dtype_t d) { return ul__dtype_valid(d) && dtype_info[d].is_float; }

size_t ul_dtype_size(ul_dtype_t dtype) {
  return ul__dtype_valid(dtype) ? dtype_info[dtype].size : 0;
}

const char *ul_dtype_name(ul_dtype_t dtype) {
  return ul__dtype_valid(dtype) ? dtype_info[dtype].name : NULL;
}

const char *ul_op_name(ul_op_t op) { return ul__op_valid(op) ? op_names[op] : NULL; }

const char *ul_coll_name(ul_coll_t coll) {
  return (unsigned)coll < (unsigned)UL_COLL_COUNT ? coll_names[coll] : NULL;
}

ul_result_t ul_dtype_from_name(const char *name, ul_dtype_t *dtype) {
  if (!name || !dtype)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_dtype_from_name: %s is NULL",
                                !name ? "name" : "dtype");
  for (int d = 0; d < UL_DTYPE_COUNT; d++) {
    if (strcasecmp(name, dtype_info[d].name) == 0) {
      *dtype = (ul_dtype_t)d;
      return UL_OK;
    }
  }
  for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++) {
    if (strcasecmp(name, dtype_aliases[i].alias) == 0) {
      *dtype = dtype_aliases[i].dtype;
      return UL_OK;
    }
  }
  return ul__set_thread_error(UL_ERR_INVALID_ARG,
                              "ul_dtype_from_name: unknown datatype \"%.64s\" (expected int8, "
                              "uint8, int32, uint32, int64, uint64, fp16, bf16, fp32, fp64, "
                              "fp8_e4m3, fp8_e5m2 or an nccl-tests name such as float, half, "
                              "bfloat16, f8e4m3)",
                              name);
}

ul_result_t ul_op_from_name(const char *name, ul_op_t *op) {
  if (!name || !op)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_op_from_name: %s is NULL",
                                !name ? "name" : "op");
  for (int o = 0; o < UL_OP_COUNT; o++) {
    if (strcasecmp(name, op_names[o]) == 0) {
      *op = (ul_op_t)o;
      return UL_OK;
    }
  }
  return ul__set_thread_error(UL_ERR_INVALID_ARG,
                              "ul_op_from_name: unknown reduction op \"%.64s\" (expected sum, "
                              "prod, min, max or avg)",
                              name);
}

/* double -> float rounded to odd: the float nearest to v truncated toward zero, with
 * the last bit set when inexact. Rounding that float to nearest even into any format of
 * at most 22 significant bits with float's exponent range or less gives the correctly
 * rounded result of v (a direct double -> float -> fp16 could round twice wrongly). */
static float dtype_round_to_odd(double v) {
  float f = (float)v;
  if (!isfinite(f) || (double)f == v) return f;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if (u & 1u) return f;
  /* f is the even neighbour: the other neighbour toward v is odd. */
  return nextafterf(f, v > (double)f ? INFINITY : -INFINITY);
}

/* Integer stores: truncate toward zero, then wrap modulo 2^64 (and then modulo the
 * width), i.e. what a C cast does for an in-range value. Only values whose truncation
 * lies in [-2^63, 2^64) are accepted. */
static ul_result_t dtype_to_u64(double value, uint64_t *out) {
  if (!(value >= -0x1p63) || !(value < 0x1p64)) { /* NaN fails both */
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_value_store: %g cannot be stored as an integer (NaN, "
                                "infinite or outside [-2^63, 2^64))",
                                value);
  }
  double t = trunc(value);
  if (t >= 0x1p63)
    *out = (uint64_t)t;
  else
    *out = (uint64_t)(int64_t)t; /* two's complement wrap of negatives */
  return UL_OK;
}

ul_result_t ul_value_store(ul_dtype_t dtype, void *dst, double value) {
  if (!ul__dtype_valid(dtype))
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_value_store: unknown dtype %d",
                                (int)dtype);
  if (!dst) return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_value_store: dst is NULL");
  if (!ul__dtype_is_float(dtype)) {
    uint64_t u = 0;
    ul_result_t rc = dtype_to_u64(value, &u);
    if (rc != UL_OK) return rc;
    /* Little or big endian alike: store the low bytes as the typed value. */
    switch (dtype) {
    case UL_INT8: { int8_t v = (int8_t)(uint8_t)u; memcpy(dst, &v, 1); break; }
    case UL_UINT8: { uint8_t v = (uint8_t)u; memcpy(dst, &v, 1); break; }
    case UL_INT32: { int32_t v = (int32_t)(uint32_t)u; memcpy(dst, &v, 4); break; }
    case UL_UINT32: { uint32_t v = (uint32_t)u; memcpy(dst, &v, 4); break; }
    case UL_INT64: { int64_t v = (int64_t)u; memcpy(dst, &v, 8); break; }
    default: memcpy(dst, &u, 8); break; /* UL_UINT64 */
    }
    return UL_OK;
  }
  switch (dtype) {
  case UL_FP64: memcpy(dst, &value, 8); break;
  case UL_FP32: { float f = (float)value; memcpy(dst, &f, 4); break; }
  case UL_FP16: {
    uint16_t h = ul__float_to_fp16(dtype_round_to_odd(value));
    memcpy(dst, &h, 2);
    break;
  }
  case UL_BF16: {
    uint16_t h = ul__float_to_bf16(dtype_round_to_odd(value));
    memcpy(dst, &h, 2);
    break;
  }
  case UL_FP8_E4M3: {
    uint8_t v = ul__float_to_fp8e4m3(dtype_round_to_odd(value));
    memcpy(dst, &v, 1);
    break;
  }
  default: { /* UL_FP8_E5M2 */
    uint8_t v = ul__float_to_fp8e5m2(dtype_round_to_odd(value));
    memcpy(dst, &v, 1);
    break;
  }
  }
  return UL_OK;
}

double ul_value_load(ul_dtype_t dtype, const void *src) {
  if (!ul__dtype_valid(dtype) || !src) return 0.0;
  switch (dtype) {
  case UL_INT8: { int8_t v; memcpy(&v, src, 1); return v; }
  case UL_UINT8: { uint8_t v; memcpy(&v, src, 1); return v; }
  case UL_INT32: { int32_t v; memcpy(&v, src, 4); return v; }
  case UL_UINT32: { uint32_t v; memcpy(&v, src, 4); return v; }
  case UL_INT64: { int64_t v; memcpy(&v, src, 8); return (double)v; }
  case UL_UINT64: { uint64_t v; memcpy(&v, src, 8); return (double)v; }
  case UL_FP16: { uint16_t v; memcpy(&v, src, 2); return ul__fp16_to_float(v); }
  case UL_BF16: { uint16_t v; memcpy(&v, src, 2); return ul__bf16_to_float(v); }
  case UL_FP32: { float v; memcpy(&v, src, 4); return v; }
  case UL_FP64: { double v; memcpy(&v, src, 8); return v; }
  case UL_FP8_E4M3: { uint8_t v; memcpy(&v, src, 1); return ul__fp8e4m3_to_float(v); }
  default: { uint8_t v; memcpy(&v, src, 1); return ul__fp8e5m2_to_float(v); }
  }
}

/* ------------------------------------------- out-of-line conversions (core) */

float ul__fp16_to_float(uint16_t h) { return red_fp16_to_float(h); }
uint16_t ul__float_to_fp16(float f) { return red_float_to_fp16(f); }
float ul__bf16_to_float(uint16_t h) { return red_bf16_to_float(h); }
uint16_t ul__float_to_bf16(float f) { return red_float_to_bf16(f); }
float ul__fp8e4m3_to_float(uint8_t v) { return red_e4m3_to_float(v); }
uint8_t ul__float_to_fp8e4m3(float f) { return red_float_to_e4m3(f); }
float ul__fp8e5m2_to_float(uint8_t v) { return red_e5m2_to_float(v); }
uint8_t ul__float_to_fp8e5m2(float f) { return red_float_to_e5m2(f); }
