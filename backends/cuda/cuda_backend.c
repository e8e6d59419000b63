/* cuda backend: a peer-copy backend for the core's generic algorithm layer.
 *
 * Paths (UNILINK_CUDA_PATH=auto|p2p|staged, reported in props.path):
 *  - p2p: peer access (cudaDeviceEnablePeerAccess) and cudaMemcpyAsync between GPUs of
 *    one process, cudaIpcGetMemHandle/cudaIpcOpenMemHandle between processes: NVLink
 *    or PCIe P2P, whichever the machine has.
 *  - staged: no peer access. Each rank's window has a shadow in pinned host memory (a
 *    POSIX shm segment registered with cudaHostRegister in every process); put copies
 *    device -> the peer's shadow and logs the range; the peer copies the logged ranges
 *    shadow -> its device window when it observes the signal (on the internal stream;
 *    wait_signal makes the waiting stream wait for the latest drain, read_signal
 *    completes it before it returns the count, so a count seen by either means the data
 *    is in the device window for whatever stream reads it next). get copies
 *    straight from the peer's window (the driver stages a copy between GPUs without
 *    peer access): its own pointer in this process, else its IPC export opened on the
 *    peer's GPU (which must be visible here).
 *
 * Signals: counters in host-mapped pinned memory (the same shm segments), one cell
 * per (index, sender) so no cross-device atomics are needed: a sender stores its own
 * running count with a one-thread kernel after a system fence (the runtime has no
 * cudaStreamWriteValue; cuStreamWriteValue64 is driver API, which this plugin must not
 * link). The reader sums the cells. Waits happen on the host (polling the mapped
 * counters with the timeout and the abort flag) rather than in a spinning kernel, so
 * a lost peer can never leave a kernel hung on the GPU.
 *
 * Streams: a NULL stream is the communicator's internal stream, created blocking
 * (cudaStreamDefault), so it is ordered after work the caller issued on the legacy
 * default stream (stream 0: cudaMemcpy, cudaMemset, kernels launched without a stream)
 * and later legacy-stream work waits for it. Work on the caller's other streams
 * (cudaStreamNonBlocking ones, per-thread default streams) is the caller's to order:
 * synchronize it or pass that stream (ul_stream_wrap_native).
 *
 * Current device: every op that touches CUDA sets the communicator's device first and
 * restores the calling thread's device before it returns (cuda_enter/cuda_leave), so
 * one thread may drive several GPUs' communicators (the core's group helper threads
 * start on device 0) and a program's own device choice survives unilink calls.
 *
 * Bootstrap: a POSIX shm "board" named by random bytes of the unique id (0600,
 * unlinked once every rank joined) with a barrier and one slot per rank for the
 * allgathers of init and window registration. Ranks therefore share one host. Every
 * collective step agrees on success (a status in each slot), so a rank that fails
 * makes every rank fail at once instead of leaving them to time out. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <unilink/backend.h>

#include "backend_util.h"
#include "gpu_common.h"
#include "gpu_stream.h"
#include "gpu_topo.h"
#ifdef UNILINK_CUDA_KERNELS
#include "cuda_kernels.h"
#endif
#include "cuda_internal.h"

/* --------------------------------------------------------------- lifecycle */

static ul_result_t cuda_init(char *reason, size_t reason_len) {
  return ulgpu_device_count(reason, reason_len, &cuda_ndev);
}

static void cuda_fini(void) {}

static ul_result_t cuda_query_caps(ul_backend_caps_t *caps) {
  caps->features = UL_FEATURE_THREAD_RANKS | UL_FEATURE_PROCESS_RANKS | UL_FEATURE_STREAMS |
                   UL_FEATURE_P2P | UL_FEATURE_ONE_SIDED | UL_FEATURE_DEVICE_MEMORY |
                   UL_FEATURE_GENERIC_COLL | UL_FEATURE_SPLIT;
  caps->flags = 0; /* native CUDA streams; buffers are device memory */
  caps->native_colls = 0;
  caps->dtypes = (1u << UL_DTYPE_COUNT) - 1;
#ifdef UNILINK_CUDA_KERNELS
  caps->reduce_dtypes = (1u << UL_DTYPE_COUNT) - 1;
#else
  caps->reduce_dtypes = 0; /* built without nvcc: no device reduction kernels */
#endif
  caps->ops = (1u << UL_OP_COUNT) - 1;
  caps->max_ranks = 0;
  ulgpu_runtime_version(caps->version, sizeof(caps->version));
  return UL_OK;
}

static const ul_backend_ops_t cuda_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "cuda",
    .description = "CUDA peer copies (p2p: NVLink/PCIe peer access; staged: pinned host memory) "
                   "under the generic collective layer",
    .priority = 50,
    .init = cuda_init,
    .fini = cuda_fini,
    .query_caps = cuda_query_caps,
    .get_unique_id = cuda_get_unique_id,
    .comm_init = cuda_comm_init,
    .comm_init_all = cuda_comm_init_all,
    .comm_finalize = cuda_comm_finalize,
    .comm_destroy = cuda_comm_destroy,
    .comm_abort = cuda_comm_abort,
    .comm_topology = cuda_comm_topology,
    .stream_create = cuda_stream_create,
    .stream_wrap = cuda_stream_wrap,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_query = cuda_stream_query,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .window_register = cuda_window_register,
    .window_deregister = cuda_window_deregister,
    .put = cuda_put,
    .get = cuda_get,
    .signal = cuda_signal,
    .wait_signal = cuda_wait_signal,
    .read_signal = cuda_read_signal,
    .reduce_local = cuda_reduce_local,
    .scale_avg = cuda_scale_avg,
    .copy_local = cuda_copy_local,
    .mem_kind = cuda_mem_kind,
    .mem_copy = cuda_mem_copy,
    .mem_set = cuda_mem_set,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &cuda_ops;
}
