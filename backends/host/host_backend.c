/* The host backend's table: the embedded default and the reference every other
 * backend is checked against. A peer-copy backend: the core's generic layer builds
 * collectives and send/recv from these windows, puts and signals. */
#include <stdio.h>
#include <string.h>

#include "host.h"

static ul_result_t host_backend_init(char *reason, size_t reason_len) {
  if (reason && reason_len) reason[0] = 0;
  return UL_OK; /* shared memory and threads are always there on Linux */
}

static void host_backend_fini(void) {}

static ul_result_t host_backend_query_caps(ul_backend_caps_t *caps) {
  caps->features = UL_FEATURE_THREAD_RANKS | UL_FEATURE_PROCESS_RANKS | UL_FEATURE_INIT_ALL |
                   UL_FEATURE_SPLIT | UL_FEATURE_STREAMS | UL_FEATURE_P2P |
                   UL_FEATURE_ONE_SIDED | UL_FEATURE_GENERIC_COLL;
  caps->flags = UL_BACKEND_HOST_STREAMS | UL_BACKEND_HOST_MEMORY;
  caps->native_colls = 0;
  caps->dtypes = (1u << UL_DTYPE_COUNT) - 1;
  caps->reduce_dtypes = (1u << UL_DTYPE_COUNT) - 1;
  caps->ops = (1u << UL_OP_COUNT) - 1;
  caps->max_ranks = 0;
  caps->version[0] = 0;
  return UL_OK;
}

const ul_backend_ops_t ul_backend_host = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "host",
    .description = "threads of one process or processes of one node, over shared memory",
    .priority = 10,
    .init = host_backend_init,
    .fini = host_backend_fini,
    .query_caps = host_backend_query_caps,
    .get_unique_id = host_get_unique_id,
    .comm_init = host_comm_init,
    .comm_init_all = host_comm_init_all,
    .comm_finalize = host_comm_finalize,
    .comm_destroy = host_comm_destroy,
    .comm_abort = host_comm_abort,
    .comm_revoke = host_comm_revoke,
    .comm_shrink = host_comm_shrink,
    .comm_failed_ranks = host_comm_failed_ranks,
    .comm_topology = host_comm_topology,
    .mem_alloc = host_mem_alloc,
    .mem_export = host_mem_export,
    .mem_import = host_mem_import,
    .mem_free = host_mem_free,
    .window_register = host_window_register,
    .window_deregister = host_window_deregister,
    .put = host_put,
    .get = host_get,
    .signal = host_signal,
    .wait_signal = host_wait_signal,
    .read_signal = host_read_signal,
    .wait_word = host_wait_word,
    .reduce_local = host_reduce_local,
    .scale_avg = host_scale_avg,
    .copy_local = host_copy_local,
    .peer_copy_ready = host_peer_copy_ready,
    .peer_read = host_peer_read,
    .peer_write = host_peer_write,
    .copy_stream = host_copy_stream,
    .reduce_stream = host_reduce_stream,
};
