/* The stub ops of the backend registry (registry.c): every op of ul_backend_ops_t has
 * one returning UL_ERR_UNSUPPORTED, which stands in for what a table leaves out. */
#include <stddef.h>

#include "ul_core.h"

/* ------------------------------------------------------------------ stubs */
/* One stub per op signature: calling through a function pointer of another type is
 * undefined behaviour, so every stub has exactly the type of the ops it stands for. */
static ul_result_t ul__stub_init(char *reason, size_t reason_len) { return UL_ERR_UNSUPPORTED; }
static void ul__stub_fini(void) {}
static ul_result_t ul__stub_query_caps(ul_backend_caps_t *caps) { return UL_ERR_UNSUPPORTED; }
static ul_result_t ul__stub_get_unique_id(unsigned char *p, size_t n) { return UL_ERR_UNSUPPORTED; }
static ul_result_t ul__stub_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **o,
                                      ul_backend_comm_props_t *p) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_comm_init_all(const ul_backend_comm_args_t *a, int n,
                                          ul_backend_comm_t **o, ul_backend_comm_props_t *p) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_comm_split(ul_backend_comm_t *c, int color, int key,
                                       const ul_backend_comm_args_t *a, ul_backend_comm_t **o,
                                       ul_backend_comm_props_t *p) {
  return UL_ERR_UNSUPPORTED;
}
/* comm_finalize, comm_destroy, comm_abort, group_start */
static ul_result_t ul__stub_comm(ul_backend_comm_t *c) { return UL_ERR_UNSUPPORTED; }
static ul_result_t ul__stub_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *o) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_stream_create(ul_backend_comm_t *c, ul_backend_stream_t **o) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_stream_wrap(ul_backend_comm_t *c, void *n, ul_backend_stream_t **o) {
  return UL_ERR_UNSUPPORTED;
}
/* stream_destroy, stream_query */
static ul_result_t ul__stub_stream(ul_backend_stream_t *s) { return UL_ERR_UNSUPPORTED; }
static ul_result_t ul__stub_stream_sync(ul_backend_stream_t *s, int timeout_ms) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_mem_free(ul_backend_comm_t *c, void *ptr) { return UL_ERR_UNSUPPORTED; }
static ul_result_t ul__stub_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                            int extra, ul_backend_window_t **o, void **bases) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                                size_t off, const void *src, size_t bytes,
                                ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                                size_t off, void *dst, size_t bytes, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                                   int index, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                        uint64_t value, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                        uint64_t *value) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_reduce_local(ul_backend_comm_t *c, void *dst, const void *a,
                                         const void *b, size_t count, ul_dtype_t dtype,
                                         ul_op_t op, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_scale_avg(ul_backend_comm_t *c, void *buf, size_t count,
                                      ul_dtype_t dtype, int nranks, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_copy_local(ul_backend_comm_t *c, void *dst, const void *src,
                                       size_t bytes, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_send(ul_backend_comm_t *c, const void *buf, size_t count,
                                 ul_dtype_t dtype, int peer, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_recv(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                                 int peer, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_group_end(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_mem_export(ul_backend_comm_t *c, const void *p, size_t n, uint64_t *h,
                                       size_t *off) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_mem_import(ul_backend_comm_t *c, int peer, uint64_t h, void **base,
                                       size_t *size) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_annotate_call(ul_backend_comm_t *c, ul_call_info_t *info) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_mem_kind(ul_backend_comm_t *c, const void *p, size_t n,
                                     ul_backend_mem_kind_t *kind) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_mem_copy(ul_backend_comm_t *c, void *dst, const void *src,
                                     size_t bytes, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_mem_set(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                                    ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_comm_shrink(ul_backend_comm_t *c, const ul_backend_comm_args_t *a,
                                        ul_backend_comm_t **o, ul_backend_comm_props_t *p,
                                        int *r, int *n) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_comm_failed_ranks(ul_backend_comm_t *c, int *r, int m, int *n) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_bootstrap_bcast(int impl, int64_t fcomm, void *buf, size_t len,
                                            int *rank, int *nranks) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_bootstrap_stage(int impl, int64_t fcomm, int on) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_peer_copy_ready(ul_backend_comm_t *c, int *ready) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_peer_read(ul_backend_comm_t *c, int peer, void *l, const void *r,
                                      size_t n) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_peer_write(ul_backend_comm_t *c, int peer, void *r, const void *l,
                                       size_t n) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_copy_stream(ul_backend_comm_t *c, void *dst, const void *src,
                                        size_t n, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_reduce_stream(ul_backend_comm_t *c, void *const *dst, int nd,
                                          const void *a, const void *b, size_t n, ul_dtype_t t,
                                          ul_op_t op, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}
static ul_result_t ul__stub_wait_word(ul_backend_comm_t *c, ul_backend_window_t *w, size_t off,
                                      uint64_t v, ul_backend_stream_t *s) {
  return UL_ERR_UNSUPPORTED;
}

/* Every op of ul_backend_ops_t and its stub. The assignment in UL__FILL_OP is type
 * checked, so a stub with the wrong signature fails to compile. */
#define UL__OPS_LIST(X)                           \
  X(init, ul__stub_init)                          \
  X(fini, ul__stub_fini)                          \
  X(query_caps, ul__stub_query_caps)              \
  X(get_unique_id, ul__stub_get_unique_id)        \
  X(comm_init, ul__stub_comm_init)                \
  X(comm_init_all, ul__stub_comm_init_all)        \
  X(comm_split, ul__stub_comm_split)              \
  X(comm_finalize, ul__stub_comm)                 \
  X(comm_destroy, ul__stub_comm)                  \
  X(comm_abort, ul__stub_comm)                    \
  X(comm_topology, ul__stub_comm_topology)        \
  X(stream_create, ul__stub_stream_create)        \
  X(stream_wrap, ul__stub_stream_wrap)            \
  X(stream_destroy, ul__stub_stream)              \
  X(stream_synchronize, ul__stub_stream_sync)     \
  X(stream_query, ul__stub_stream)                \
  X(mem_alloc, ul__stub_mem_alloc)                \
  X(mem_free, ul__stub_mem_free)                  \
  X(window_register, ul__stub_window_register)    \
  X(window_deregister, ul__stub_window_deregister) \
  X(put, ul__stub_put)                            \
  X(get, ul__stub_get)                            \
  X(signal, ul__stub_signal)                      \
  X(wait_signal, ul__stub_wait_signal)            \
  X(read_signal, ul__stub_read_signal)            \
  X(reduce_local, ul__stub_reduce_local)          \
  X(scale_avg, ul__stub_scale_avg)                \
  X(copy_local, ul__stub_copy_local)              \
  X(send, ul__stub_send)                          \
  X(recv, ul__stub_recv)                          \
  X(group_start, ul__stub_comm)                   \
  X(group_end, ul__stub_group_end)                \
  X(annotate_call, ul__stub_annotate_call)        \
  X(mem_export, ul__stub_mem_export)              \
  X(mem_import, ul__stub_mem_import)              \
  X(mem_kind, ul__stub_mem_kind)                  \
  X(mem_copy, ul__stub_mem_copy)                  \
  X(mem_set, ul__stub_mem_set)                    \
  X(comm_revoke, ul__stub_comm)                   \
  X(comm_shrink, ul__stub_comm_shrink)            \
  X(comm_failed_ranks, ul__stub_comm_failed_ranks) \
  X(bootstrap_bcast, ul__stub_bootstrap_bcast)    \
  X(bootstrap_stage, ul__stub_bootstrap_stage)    \
  X(peer_copy_ready, ul__stub_peer_copy_ready)    \
  X(peer_read, ul__stub_peer_read)                \
  X(peer_write, ul__stub_peer_write)              \
  X(copy_stream, ul__stub_copy_stream)            \
  X(reduce_stream, ul__stub_reduce_stream)        \
  X(wait_word, ul__stub_wait_word)

static const void *const ul__stubs[] = {
#define UL__STUB_ADDR(field, stub) (const void *)stub,
    UL__OPS_LIST(UL__STUB_ADDR)
#undef UL__STUB_ADDR
};

bool ul__op_is_stub(const void *fnptr) {
  if (fnptr == NULL) return false;
  for (size_t i = 0; i < sizeof ul__stubs / sizeof ul__stubs[0]; i++)
    if (ul__stubs[i] == fnptr) return true;
  return false;
}

/* Every op of @o a stub. */
void ul__fill_all_stubs(ul_backend_ops_t *o) {
#define UL__STUB_SET(field, stub) o->field = stub;
  UL__OPS_LIST(UL__STUB_SET)
#undef UL__STUB_SET
}

/* Stubs for the ops of @o that its table does not declare (past @declared, the table's
 * struct_size) or leaves NULL. */
void ul__fill_missing_ops(ul_backend_ops_t *o, size_t declared) {
#define UL__FILL_OP(field, stub)                                                          \
  if (offsetof(ul_backend_ops_t, field) + sizeof(o->field) > declared || o->field == NULL) \
    o->field = stub;
  UL__OPS_LIST(UL__FILL_OP)
#undef UL__FILL_OP
}
