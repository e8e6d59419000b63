/* The host backend's memory-and-transport floor (backend ABI 1.4): single copies into and
 * out of a peer process's private memory with cross-memory attach (process_vm_readv /
 * process_vm_writev), and copies with streaming stores. The generic layer's direct
 * algorithms use them between process ranks whose user buffers are not mapped; it keeps
 * the algorithms, this file keeps the system calls.
 *
 * Cross-memory attach needs ptrace permission over the peer (same user; Yama's
 * ptrace_scope may forbid it): peer_copy_ready tries it on every peer by reading back the
 * word each rank published at comm_init (host_ctrl_rank_t.self_addr). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "host.h"

ul_result_t host_peer_copy_ready(ul_backend_comm_t *c, int *ready) {
  int ok = 1;
  for (int p = 0; p < c->nranks && ok; p++) {
    if (p == c->rank) continue;
    uint64_t remote = c->ctrl->ranks[p].self_addr, got = 0;
    struct iovec l = {&got, sizeof got}, r = {(void *)(uintptr_t)remote, sizeof got};
    if (remote == 0 || process_vm_readv(c->pids[p], &l, 1, &r, 1, 0) != (ssize_t)sizeof got ||
        got != remote)
      ok = 0;
  }
  *ready = ok;
  return UL_OK;
}

/* A copy with `peer` failed with EFAULT (its buffer vanished: it left the operation,
 * typically because it saw another rank die first) or ESRCH (it is gone). Name the ranks
 * known lost -- the pidfd check sees an exited rank even while it is an unreaped zombie,
 * which kill(pid, 0) does not: UL_ERR_PEER_LOST. UL_OK when none is known lost (the
 * caller reports the system error). */
static ul_result_t peer_lost(ul_backend_comm_t *c, int peer, int write, int err) {
  int lost[64], nlost = 0;
  host_comm_failed_ranks(c, lost, 64, &nlost);
  if (nlost <= 0) {
    if (err != ESRCH) return UL_OK;
    lost[0] = peer; /* the kernel says the peer's process is gone */
    nlost = 1;
  }
  char names[160] = "";
  size_t used = 0;
  for (int k = 0; k < nlost && k < 64 && used + 16 < sizeof names; k++)
    used += (size_t)snprintf(names + used, sizeof names - used, "%srank %d (pid %d)",
                             k ? ", " : "", lost[k], (int)c->pids[lost[k]]);
  return ul_backend_set_error(c->handle, UL_ERR_PEER_LOST,
                              "host: peer %s lost (aborted, destroyed its communicator or "
                              "exited); %s rank %d failed: %s",
                              names, write ? "process_vm_writev to" : "process_vm_readv from",
                              peer, strerror(err));
}

/* The kernel may move fewer bytes than asked (it stops at a fault or a page limit): loop
 * on the rest. */
static ul_result_t peer_xfer(ul_backend_comm_t *c, int peer, void *local, void *remote,
                             size_t bytes, int write) {
  if (peer < 0 || peer >= c->nranks)
    return ul_backend_set_error(c->handle, UL_ERR_INVALID_ARG,
                                "host: peer_%s with peer %d of %d ranks",
                                write ? "write" : "read", peer, c->nranks);
  pid_t pid = c->pids[peer];
  char *l = local, *r = remote;
  while (bytes) {
    struct iovec li = {l, bytes}, ri = {r, bytes};
    ssize_t got = write ? process_vm_writev(pid, &li, 1, &ri, 1, 0)
                        : process_vm_readv(pid, &li, 1, &ri, 1, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      int err = got < 0 ? errno : EIO;
      if (err == EFAULT || err == ESRCH) {
        ul_result_t lost = peer_lost(c, peer, write, err);
        if (lost != UL_OK) return lost;
      }
      return ul_backend_set_error(c->handle, err == ESRCH ? UL_ERR_PEER_LOST : UL_ERR_SYSTEM,
                                  "host: %s of %zu bytes %s rank %d (pid %d) failed: %s",
                                  write ? "process_vm_writev" : "process_vm_readv", bytes,
                                  write ? "to" : "from", peer, (int)pid, strerror(err));
    }
    l += got;
    r += got;
    bytes -= (size_t)got;
  }
  return UL_OK;
}

ul_result_t host_peer_read(ul_backend_comm_t *c, int peer, void *local, const void *remote,
                           size_t bytes) {
  return peer_xfer(c, peer, local, (void *)remote, bytes, 0);
}

ul_result_t host_peer_write(ul_backend_comm_t *c, int peer, void *remote, const void *local,
                            size_t bytes) {
  return peer_xfer(c, peer, (void *)local, remote, bytes, 1);
}

/* memcpy with non-temporal stores: no read-for-ownership of the destination lines. */
ul_result_t host_copy_stream(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                             ul_backend_stream_t *s) {
  (void)c;
  (void)s;
  return ul_copy_stream_local(dst, src, bytes);
}
