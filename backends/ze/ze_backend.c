/* ze backend: Level Zero peer copies under the core's generic algorithm layer.
 *
 * Ranks: one per Level Zero GPU device of the first driver that has one, or one per
 * sub-device (tile) with UNILINK_ZE_SUBDEVICES=1. Every rank of a process shares one
 * context, so devices of one process copy to each other directly; ranks in other
 * processes export their window memory with zeMemGetIpcHandle, the dma-buf descriptor
 * inside travels over a Unix socket with SCM_RIGHTS (ze_ipc.c), and the importer opens
 * it with zeMemOpenIpcHandle.
 *
 * Data movement: immediate command lists on a copy-only engine group (COPY flag without
 * COMPUTE; a compute group that can copy when no such group exists). A ul_stream_t is one
 * such list. Level Zero does not order commands in a list by itself, so a barrier
 * (zeCommandListAppendBarrier) goes between dependent commands.
 *
 * Signals: host-memory counters in a POSIX shm segment per rank and window, one cell per
 * (index, sender) so that only the sender writes a cell. ul_signal appends a barrier that
 * signals a host-visible event once every earlier command of the list has completed and
 * its writes are globally visible; when the event is seen signalled (a progress thread
 * per communicator, or any wait of this backend), the host adds one to the peer's cell.
 * Signals are delivered in issue order per list and per cell (ze_progress); a stalled
 * list does not hold back unrelated signals of other lists. Waits run on the host with
 * the timeout and the abort flag, so no device work can hang on a lost peer.
 *
 * Threads: every operation holds its list's lock while it appends (and, on the NULL
 * stream, while it waits), because a command list must not be appended to from two
 * threads at once.
 *
 * Teardown: the communicator keeps every window and stream it made; destroy waits (with
 * a bound, even after an abort) for the device to finish every list, then closes opened
 * IPC mappings, returns exported IPC handles, and frees lists, events and memory. If the
 * device does not finish in time, lists and memory are leaked rather than freed under it.
 *
 * Local reductions (v1): staged through host memory: both operands are copied to pinned
 * host buffers (zeMemAllocHost), reduced with ul_reduce_local, copied back. Correct for
 * every dtype and op, not fast; device kernels are future work.
 *
 * Bootstrap: a POSIX shm "board" named by random bytes of the unique id (0600, unlinked
 * once every rank joined) with a barrier and one slot per rank. Ranks share one host.
 *
 * Files, each using only those below it: ze_backend.c (the ops table), ze_comm.c
 * (communicators: bootstrap, topology, teardown), ze_mem.c (allocations, windows, IPC,
 * ul_mem_copy/set), ze_p2p.c (put/get/signals, host-staged local math), ze_wait.c
 * (errors, waits, the board exchange, command lists, events, signal delivery, streams),
 * ze_driver.c (process: driver, devices, context, unique id), ze_internal.h (types). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ze_internal.h"

static const ul_backend_ops_t ze_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "ze",
    .description = "Level Zero IPC handles and copy engines under the generic collective layer; "
                   "local reductions staged through host memory (v1)",
    .priority = 45,
    .init = ze_init,
    .fini = ze_fini,
    .query_caps = ze_query_caps,
    .get_unique_id = ze_get_unique_id,
    .comm_init = ze_comm_init,
    .comm_init_all = ze_comm_init_all,
    .comm_finalize = ze_comm_finalize,
    .comm_destroy = ze_comm_destroy,
    .comm_abort = ze_comm_abort,
    .comm_topology = ze_comm_topology,
    .stream_create = ze_stream_create,
    .stream_wrap = ze_stream_wrap,
    .stream_destroy = ze_stream_destroy,
    .stream_synchronize = ze_stream_synchronize,
    .stream_query = ze_stream_query,
    .mem_alloc = ze_mem_alloc,
    .mem_free = ze_mem_free,
    .window_register = ze_window_register,
    .window_deregister = ze_window_deregister,
    .put = ze_put,
    .get = ze_get,
    .signal = ze_signal,
    .wait_signal = ze_wait_signal,
    .read_signal = ze_read_signal,
    .reduce_local = ze_reduce_local,
    .scale_avg = ze_scale_avg,
    .copy_local = ze_copy_local,
    .mem_kind = ze_mem_kind,
    .mem_copy = ze_mem_copy,
    .mem_set = ze_mem_set,
};

__attribute__((visibility("default"))) const ul_backend_ops_t *ul_backend_entry(void) {
  return &ze_ops;
}
