/* File-descriptor exchange for Level Zero IPC handles between processes of one host.
 *
 * A ze_ipc_mem_handle_t holds a dma-buf file descriptor that is only valid in the
 * exporting process. We pass it with SCM_RIGHTS over a Unix socket in the abstract
 * namespace ("\0ulze-<token>-..."; no file left behind on any exit path). The name
 * derives from the communicator's random token and the server only answers peers whose
 * SO_PEERCRED uid is ours and whose pid is a rank of the communicator.
 * (pidfd_getfd was the alternative; it needs ptrace rights over the exporter, which
 * Yama's ptrace_scope=1, the common default, refuses between sibling processes.) */
#ifndef UL_ZE_IPC_H
#define UL_ZE_IPC_H

#include <stddef.h>
#include <stdint.h>
#include <unilink/unilink.h>

/* Listening socket named name (abstract). Returns the fd or -1 with a sentence in err. */
int ulze_ipc_listen(const char *name, char *err, size_t errlen);

/* Serve fd_to_send to nconn connecting peers whose pid is in pids[0..npids). Closes
 * listen_fd. Honours timeout_ms (0 = forever) and *abort_flag. */
ul_result_t ulze_ipc_serve(int listen_fd, int fd_to_send, const int32_t *pids, int npids,
                           int nconn, int timeout_ms, const volatile int *abort_flag, char *err,
                           size_t errlen);

/* Connect to name and receive one descriptor into *fd_out. */
ul_result_t ulze_ipc_fetch(const char *name, int timeout_ms, const volatile int *abort_flag,
                           int *fd_out, char *err, size_t errlen);

#endif
