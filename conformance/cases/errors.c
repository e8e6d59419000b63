/* Invalid arguments: each must return UL_ERR_INVALID_ARG, leave every buffer as it was
 * (they are poisoned, copied back after the call and checked), leave a non-empty ul_comm_last_error, and leave the
 * communicator usable (a valid call on it afterwards must be correct). */
#include <stdint.h>
#include <stdlib.h>

#include "cases.h"

typedef struct err_def {
  const char *name;
  int group;     /* CF_ERR_* : which registry row (features) */
  int min_ranks;
} err_def_t;

enum {
  E_NULL_SEND, E_NULL_RECV, E_COUNT_OVERFLOW, E_ALLGATHER_TOTAL_OVERFLOW, E_BAD_DTYPE,
  E_BAD_DTYPE_COUNT, E_BAD_OP, E_BAD_OP_COUNT, E_BCAST_ROOT_NEG, E_REDUCE_ROOT_N,
  E_GATHER_ROOT_N, E_SCATTER_ROOT_NEG, E_OVERLAP_ALLREDUCE, E_OVERLAP_ALLGATHER,
  E_OVERLAP_REDUCE_SCATTER, E_ALLTOALL_ALIAS, E_NULL_COMM,
  E_SEND_PEER_NEG, E_RECV_PEER_N, E_SEND_NULL,
  E_PUT_RANGE, E_PUT_OFFSET_OVERFLOW, E_GET_RANGE, E_PUT_PEER_N, E_SIGNAL_INDEX, E_SIGNAL_NEG,
  E_WAIT_INDEX,
  E_SPLIT_COLOR,
  E_COUNT
};

static const err_def_t err_defs[E_COUNT] = {
    [E_NULL_SEND] = {"allreduce-null-sendbuf", CF_ERR_COLL, 1},
    [E_NULL_RECV] = {"allreduce-null-recvbuf", CF_ERR_COLL, 1},
    [E_COUNT_OVERFLOW] = {"allreduce-count-overflow", CF_ERR_COLL, 1},
    [E_ALLGATHER_TOTAL_OVERFLOW] = {"allgather-total-size-overflow", CF_ERR_COLL, 2},
    [E_BAD_DTYPE] = {"allreduce-unknown-dtype", CF_ERR_COLL, 1},
    [E_BAD_DTYPE_COUNT] = {"allreduce-dtype-count", CF_ERR_COLL, 1},
    [E_BAD_OP] = {"allreduce-unknown-op", CF_ERR_COLL, 1},
    [E_BAD_OP_COUNT] = {"allreduce-op-count", CF_ERR_COLL, 1},
    [E_BCAST_ROOT_NEG] = {"broadcast-root-negative", CF_ERR_COLL, 1},
    [E_REDUCE_ROOT_N] = {"reduce-root-nranks", CF_ERR_COLL, 1},
    [E_GATHER_ROOT_N] = {"gather-root-nranks", CF_ERR_COLL, 1},
    [E_SCATTER_ROOT_NEG] = {"scatter-root-negative", CF_ERR_COLL, 1},
    [E_OVERLAP_ALLREDUCE] = {"allreduce-partial-overlap", CF_ERR_COLL, 1},
    [E_OVERLAP_ALLGATHER] = {"allgather-partial-overlap", CF_ERR_COLL, 1},
    [E_OVERLAP_REDUCE_SCATTER] = {"reduce_scatter-partial-overlap", CF_ERR_COLL, 1},
    [E_ALLTOALL_ALIAS] = {"alltoall-inplace", CF_ERR_COLL, 2},
    [E_NULL_COMM] = {"null-comm", CF_ERR_COLL, 1},
    [E_SEND_PEER_NEG] = {"send-peer-negative", CF_ERR_P2P, 1},
    [E_RECV_PEER_N] = {"recv-peer-nranks", CF_ERR_P2P, 1},
    [E_SEND_NULL] = {"send-null-buffer", CF_ERR_P2P, 1},
    [E_PUT_RANGE] = {"put-beyond-window", CF_ERR_ONESIDED, 1},
    [E_PUT_OFFSET_OVERFLOW] = {"put-offset-overflow", CF_ERR_ONESIDED, 1},
    [E_GET_RANGE] = {"get-beyond-window", CF_ERR_ONESIDED, 1},
    [E_PUT_PEER_N] = {"put-peer-nranks", CF_ERR_ONESIDED, 1},
    [E_SIGNAL_INDEX] = {"signal-index-too-large", CF_ERR_ONESIDED, 1},
    [E_SIGNAL_NEG] = {"signal-index-negative", CF_ERR_ONESIDED, 1},
    [E_WAIT_INDEX] = {"wait-signal-index-too-large", CF_ERR_ONESIDED, 1},
    [E_SPLIT_COLOR] = {"split-color-below-nocolor", CF_ERR_SPLIT, 1},
};

void cf_expand_errors(const cf_case_t *c, int n, const cf_opts_t *o,
                      const ul_backend_info_t *info, cf_emit_fn emit, void *arg) {
  if (c->variant == CF_ERR_VCOLL) {
    for (int e = 0; e < CF_NVERR; e++) {
      if (n < cf_verr_min_ranks[e]) continue;
      cf_inst_t in = cf_proto(c);
      in.variant = e;
      snprintf(in.name, sizeof in.name, "errors/%s", cf_verr_names[e]);
      emit(arg, &in);
    }
    return;
  }
  for (int e = 0; e < E_COUNT; e++) {
    if (err_defs[e].group != c->variant || n < err_defs[e].min_ranks) continue;
    cf_inst_t in = cf_proto(c);
    in.variant = e;
    snprintf(in.name, sizeof in.name, "errors/%s", err_defs[e].name);
    emit(arg, &in);
  }
}

/* The call must be rejected as an invalid argument, with a sentence. */
static int err_expect(cf_ctx_t *ctx, ul_result_t rc, const char *call, ul_comm_t comm) {
  if (rc != UL_ERR_INVALID_ARG) {
    cf_fail(ctx, "rank %d: %s returned %s, expected UL_ERR_INVALID_ARG", ctx->rank, call,
            ul_result_name(rc));
    if (rc != UL_ERR_UNSUPPORTED) ctx->broken = 1; /* it may have started communicating */
    return -1;
  }
  const char *m = comm ? ul_comm_last_error(comm) : ul_last_error();
  if (!m || !*m) {
    cf_fail(ctx, "rank %d: %s returned UL_ERR_INVALID_ARG but %s is empty", ctx->rank, call,
            comm ? "ul_comm_last_error(comm)" : "ul_last_error()");
    return -1;
  }
  return 0;
}

/* The communicator must still work: no sticky error, and a valid allreduce is exact. */
static void err_after(cf_ctx_t *ctx) {
  ul_result_t st = ul_comm_get_error(ctx->comm);
  if (st != UL_OK) {
    cf_fail(ctx, "rank %d: the communicator holds error %s after a rejected call", ctx->rank,
            ul_result_name(st));
    ctx->broken = 1;
    return;
  }
  cf_gen_t g;
  cf_gen_init(&g, UL_INT32, UL_SUM, ctx->nranks, ctx->seed ^ 77);
  int32_t *in = cf_alloc(ctx, 7 * sizeof(int32_t)), *out = cf_alloc(ctx, 7 * sizeof(int32_t));
  if (!in || !out || cf_fill(ctx, &g, ctx->rank, 0, 7, in) ||
      cf_poison(ctx, out, 7 * sizeof(int32_t)))
    return;
  if (cf_check_rc(ctx, ul_allreduce(in, out, 7, UL_INT32, UL_SUM, ctx->comm, NULL),
                  "valid ul_allreduce after the rejected call"))
    return;
  cf_exp_t x = {.g = &g};
  cf_verify(ctx, "recvbuf of the valid allreduce after the rejected call", out, 7, UL_INT32,
            cf_exp_reduce, &x, 0);
}

#define ECALL(expr, what, comm) err_expect(ctx, (expr), what, comm)

static void errors_coll(cf_ctx_t *ctx, int e) {
  int n = ctx->nranks, r = ctx->rank;
  ul_comm_t comm = ctx->comm;
  const size_t cnt = 7, big = 64;
  /* one poisoned arena holds every buffer, so "nothing changed" is one check */
  size_t arena_bytes = big * 8 * (size_t)n;
  unsigned char *arena = cf_alloc(ctx, arena_bytes);
  if (!arena || cf_poison(ctx, arena, arena_bytes)) return;
  unsigned char *a = arena, *b = arena + arena_bytes / 2;
  switch (e) {
  case E_NULL_SEND:
    ECALL(ul_allreduce(NULL, b, cnt, UL_INT32, UL_SUM, comm, NULL), "ul_allreduce(sendbuf NULL)", comm);
    break;
  case E_NULL_RECV:
    ECALL(ul_allreduce(a, NULL, cnt, UL_INT32, UL_SUM, comm, NULL), "ul_allreduce(recvbuf NULL)", comm);
    break;
  case E_COUNT_OVERFLOW:
    ECALL(ul_allreduce(a, b, SIZE_MAX, UL_FP32, UL_SUM, comm, NULL), "ul_allreduce(count SIZE_MAX)", comm);
    break;
  case E_ALLGATHER_TOTAL_OVERFLOW: {
    /* count * size fits, nranks * count * size (the receive buffer) does not */
    size_t c = SIZE_MAX / 4 / (size_t)n + 1;
    ECALL(ul_allgather(a, b, c, UL_FP32, comm, NULL), "ul_allgather(nranks*count*size overflows)", comm);
    break;
  }
  case E_BAD_DTYPE:
    ECALL(ul_allreduce(a, b, cnt, (ul_dtype_t)99, UL_SUM, comm, NULL), "ul_allreduce(dtype 99)", comm);
    break;
  case E_BAD_DTYPE_COUNT:
    ECALL(ul_allreduce(a, b, cnt, UL_DTYPE_COUNT, UL_SUM, comm, NULL), "ul_allreduce(dtype UL_DTYPE_COUNT)", comm);
    break;
  case E_BAD_OP:
    ECALL(ul_allreduce(a, b, cnt, UL_INT32, (ul_op_t)99, comm, NULL), "ul_allreduce(op 99)", comm);
    break;
  case E_BAD_OP_COUNT:
    ECALL(ul_allreduce(a, b, cnt, UL_INT32, UL_OP_COUNT, comm, NULL), "ul_allreduce(op UL_OP_COUNT)", comm);
    break;
  case E_BCAST_ROOT_NEG:
    ECALL(ul_broadcast(a, b, cnt, UL_INT32, -1, comm, NULL), "ul_broadcast(root -1)", comm);
    break;
  case E_REDUCE_ROOT_N:
    ECALL(ul_reduce(a, b, cnt, UL_INT32, UL_SUM, n, comm, NULL), "ul_reduce(root nranks)", comm);
    break;
  case E_GATHER_ROOT_N:
    ECALL(ul_gather(a, b, cnt, UL_INT32, n, comm, NULL), "ul_gather(root nranks)", comm);
    break;
  case E_SCATTER_ROOT_NEG:
    ECALL(ul_scatter(a, b, cnt, UL_INT32, -1, comm, NULL), "ul_scatter(root -1)", comm);
    break;
  case E_OVERLAP_ALLREDUCE:
    ECALL(ul_allreduce(a, a + 4, cnt, UL_INT32, UL_SUM, comm, NULL),
          "ul_allreduce(recvbuf = sendbuf + 1 element)", comm);
    break;
  case E_OVERLAP_ALLGATHER:
    /* the in-place slot is recvbuf + rank*count; one element past it overlaps but is not it */
    ECALL(ul_allgather(b + ((size_t)r * cnt + 1) * 4, b, cnt, UL_INT32, comm, NULL),
          "ul_allgather(sendbuf = in-place slot + 1 element)", comm);
    break;
  case E_OVERLAP_REDUCE_SCATTER:
    ECALL(ul_reduce_scatter(a, a + ((size_t)r * cnt + 1) * 4, cnt, UL_INT32, UL_SUM, comm, NULL),
          "ul_reduce_scatter(recvbuf = in-place slot + 1 element)", comm);
    break;
  case E_ALLTOALL_ALIAS:
    ECALL(ul_alltoall(a, a, cnt, UL_INT32, comm, NULL), "ul_alltoall(sendbuf == recvbuf)", comm);
    break;
  case E_NULL_COMM:
    ECALL(ul_allreduce(a, b, cnt, UL_INT32, UL_SUM, NULL, NULL), "ul_allreduce(comm NULL)", NULL);
    if (ctx->status != CF_FAIL)
      ECALL(ul_barrier(NULL, NULL), "ul_barrier(comm NULL)", NULL);
    break;
  }
  cf_check_poison(ctx, "buffers passed to the rejected call", arena, arena_bytes);
}

static void errors_p2p(cf_ctx_t *ctx, int e) {
  int n = ctx->nranks, r = ctx->rank;
  unsigned char *buf = cf_alloc(ctx, 64);
  if (!buf || cf_poison(ctx, buf, 64)) return;
  switch (e) {
  case E_SEND_PEER_NEG:
    ECALL(ul_send(buf, 7, UL_INT32, -1, ctx->comm, NULL), "ul_send(peer -1)", ctx->comm);
    break;
  case E_RECV_PEER_N:
    ECALL(ul_recv(buf, 7, UL_INT32, n, ctx->comm, NULL), "ul_recv(peer nranks)", ctx->comm);
    break;
  case E_SEND_NULL:
    ECALL(ul_send(NULL, 7, UL_INT32, (r + 1) % n, ctx->comm, NULL), "ul_send(buf NULL, count 7)",
          ctx->comm);
    break;
  }
  cf_check_poison(ctx, "buffer passed to the rejected call", buf, 64);
}

static void errors_onesided(cf_ctx_t *ctx, int e) {
  int n = ctx->nranks, r = ctx->rank, next = (r + 1) % n;
  const size_t W = 256;
  ul_window_t win = NULL;
  /* window memory from ul_mem_alloc, released by cf_free_all after the case */
  void *base = cf_alloc_window(ctx, W);
  if (!base || cf_poison(ctx, base, W)) return;
  if (cf_check_rc(ctx, ul_window_register(ctx->comm, base, W, &win), "ul_window_register")) return;
  unsigned char *local = cf_alloc(ctx, 64);
  if (local && !cf_poison(ctx, local, 64)) {
    switch (e) {
    case E_PUT_RANGE:
      ECALL(ul_put(local, 16, next, win, W - 8, NULL), "ul_put(offset+bytes past the window)", ctx->comm);
      break;
    case E_PUT_OFFSET_OVERFLOW:
      ECALL(ul_put(local, 16, next, win, SIZE_MAX - 4, NULL), "ul_put(offset SIZE_MAX-4)", ctx->comm);
      break;
    case E_GET_RANGE:
      ECALL(ul_get(local, 16, next, win, W, NULL), "ul_get(offset = window size)", ctx->comm);
      break;
    case E_PUT_PEER_N:
      ECALL(ul_put(local, 16, n, win, 0, NULL), "ul_put(peer nranks)", ctx->comm);
      break;
    case E_SIGNAL_INDEX:
      ECALL(ul_signal(next, win, UL_WINDOW_SIGNALS, NULL), "ul_signal(index UL_WINDOW_SIGNALS)", ctx->comm);
      break;
    case E_SIGNAL_NEG:
      ECALL(ul_signal(next, win, -1, NULL), "ul_signal(index -1)", ctx->comm);
      break;
    case E_WAIT_INDEX:
      ECALL(ul_wait_signal(win, UL_WINDOW_SIGNALS, 1, NULL), "ul_wait_signal(index UL_WINDOW_SIGNALS)", ctx->comm);
      break;
    }
    cf_check_poison(ctx, "local buffer passed to the rejected call", local, 64);
    /* the window must still work, and nobody's rejected put may have landed in it */
    int32_t v = r;
    if (ctx->status != CF_FAIL && !cf_write(ctx, local, &v, sizeof v) &&
        !cf_check_rc(ctx, ul_put(local, sizeof v, next, win, W - sizeof v, NULL), "valid ul_put") &&
        !cf_check_rc(ctx, ul_signal(next, win, 0, NULL), "valid ul_signal") &&
        !cf_check_rc(ctx, ul_wait_signal(win, 0, 1, NULL), "valid ul_wait_signal")) {
      int32_t got = 0;
      if (!cf_load(ctx, &got, (char *)base + W - sizeof v, sizeof got) && got != (r + n - 1) % n)
        cf_fail(ctx, "rank %d: valid put after rejected calls delivered %d, expected %d", r,
                (int)got, (r + n - 1) % n);
      cf_check_poison(ctx, "own window (rejected puts must not land)", base, W - sizeof v);
    }
  }
  cf_check_rc(ctx, ul_window_deregister(win), "ul_window_deregister");
}

void cf_case_errors(cf_ctx_t *ctx) {
  int e = ctx->inst->variant;
  if (cf_need(ctx, UL_COLL_ALLREDUCE, UL_INT32, UL_SUM)) return;
  if (ctx->inst->c->variant == CF_ERR_VCOLL) {
    cf_errors_vcoll(ctx, e);
    if (!ctx->broken && ctx->status != CF_SKIP) err_after(ctx);
    return;
  }
  switch (err_defs[e].group) {
  case CF_ERR_COLL: errors_coll(ctx, e); break;
  case CF_ERR_P2P: errors_p2p(ctx, e); break;
  case CF_ERR_ONESIDED: errors_onesided(ctx, e); break;
  case CF_ERR_SPLIT: {
    ul_comm_t nc = NULL;
    ECALL(ul_comm_split(ctx->comm, -2, ctx->rank, &nc, NULL), "ul_comm_split(color -2)", ctx->comm);
    if (nc) {
      cf_fail(ctx, "rank %d: a rejected ul_comm_split produced a communicator", ctx->rank);
      ul_comm_abort(nc);
    }
    break;
  }
  }
  if (!ctx->broken) err_after(ctx);
}
