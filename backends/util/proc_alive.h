/* Is a process of this machine still running? Shared by the backends that watch their
 * peers' processes (host: shared-memory ranks; mpi: ranks on the same node). */
#ifndef UL_BACKEND_PROC_ALIVE_H
#define UL_BACKEND_PROC_ALIVE_H
#include <sys/types.h>

/* A pidfd for pid (close-on-exec), or -1 where the kernel has none: it sees the exit
 * even of a zombie and is immune to pid reuse. */
int ulbu_pid_open(pid_t pid);
/* 1 while pid runs, 0 once it exited (zombies count as exited); pidfd may be -1. */
int ulbu_pid_alive(pid_t pid, int pidfd);
/* An id of this process's pid namespace (its /proc/self/ns/pid inode; 0 if unknown):
 * equal host names are not enough to compare pids, containers share them. */
unsigned long long ulbu_pid_namespace(void);

#endif
