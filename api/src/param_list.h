/* The one definition of every UNILINK_* parameter the project ships: name (without the
 * prefix), type, default, owner and help. The library's lookups take defaults and help
 * from here (param.c), unilink-info lists it, and docs/user-guide.md's parameter table is
 * checked against unilink-info's listing, so nothing else keeps a copy.
 * X(NAME, TYPE, DEFAULT, OWNER, HELP): TYPE is INT or STR; DEFAULT is text (INT parsed
 * with ul__parse_int); OWNER is "core", "generic", a backend name or "test". A backend
 * may still register a parameter of its own (ul_backend_param_*): one not listed here. */
#ifndef UL_PARAM_LIST_H
#define UL_PARAM_LIST_H

#define UL_PARAM_LIST(X)                                                                       \
  X(BACKEND, STR, "auto", "core",                                                              \
    "backend for new communicators when the config names none: a backend name (\"host\", "     \
    "\"sim:dgx-h100\"), auto (best available host-memory backend) or auto:device (best "        \
    "device-memory backend)")                                                                  \
  X(TIMEOUT_MS, INT, "300000", "core",                                                         \
    "limit in milliseconds for every blocking wait (0 = wait forever)")                        \
  X(CHECK, INT, "0", "core",                                                                   \
    "1: compare count, dtype, op and root across ranks before each collective")                \
  X(DEBUG, STR, "warn", "core", "log level: none, warn, info or trace")                        \
  X(DEBUG_SUBSYS, STR, "ALL", "core",                                                          \
    "log subsystems, comma separated: INIT, COLL, P2P, MEM, BACKEND, TUNING, ENV, "            \
    "BOOTSTRAP, ALL or a backend name; a leading ^ excludes the list")                         \
  X(DEBUG_FILE, STR, "", "core",                                                               \
    "log to this file instead of stderr (%h = host name, %p = process id)")                    \
  X(DUMP_ON_TIMEOUT, STR, "", "core",                                                          \
    "on a timeout, write this rank's recent operations and the error as JSON to <value><rank> " \
    "(e.g. /tmp/ul-trace-)")                                                                   \
  X(PLUGIN_PATH, STR, "", "core",                                                              \
    "colon separated folders searched for libunilink-<name>.so backend plugins before the "    \
    "folder of libunilink and the install folder")                                             \
  X(ALGO, STR, "", "core",                                                                     \
    "force algorithms: <collective>:<algorithm>[,...], e.g. \"allreduce:ring,broadcast:tree\"; " \
    "a bare <algorithm> applies to every collective that has it; "                            \
    "algorithm is native, line, oneshot, staged, direct, bounce, ring, tree, pairwise, linear or " \
    "signal")                                                                                  \
  X(FAULT, STR, "", "test",                                                                    \
    "test builds only (UNILINK_TEST_HOOKS=ON): inject a fault, e.g. \"allreduce:offbyone\"")   \
  X(CHUNK_BYTES, INT, "262144", "generic",                                                     \
    "bytes per pipelined chunk of the generic algorithms (bounce pieces: at most a quarter "   \
    "of the level-2 cache)")                                                                   \
  X(LLC_BYTES, INT, "-1", "generic",                                                           \
    "last-level cache (bytes) the generic layer plans with: copy collectives of process "      \
    "ranks keep single copies while all ranks' buffers fit in it, bounced copies stream "      \
    "past it (-1: CPU 0's, from sysfs or glibc; 0: unknown, always bounce)")                   \
  X(ONESHOT_BYTES, INT, "32768", "generic",                                                    \
    "largest message (bytes) of the single-sync one-shot allreduce of the generic layer "      \
    "(0: off)")                                                                                \
  X(TUNING_FILE, STR, "auto", "generic",                                                       \
    "selection limits measured on this machine: auto (the table bench/calibrate-host.sh "      \
    "cached for this host, $XDG_CACHE_HOME or ~/.cache/unilink/host-tuning-<host name>.txt, "   \
    "read only when its machine-id line names this CPU model and CPU count), none (built-in "   \
    "limits) or a file. Lines '<collective> <ranks> process|thread <bytes>': the largest size " \
    "(as nccl-tests counts it) that runs staged; '<collective> <ranks> process bounce_from "    \
    "<bytes>': the smallest size at which private buffers of process ranks bounce through "    \
    "scratch (single copies below)")                                                           \
  X(CMA, INT, "1", "generic",                                                                  \
    "single-copy transfers between process ranks with process_vm_readv/writev (0: off, copy "  \
    "through shared memory)")                                                                  \
  X(ZERO_COPY, INT, "1", "generic",                                                            \
    "process ranks read and write each other's ul_mem_alloc buffers in place (0: single-copy " \
    "or staged only)")                                                                         \
  X(HOST_SPIN, INT, "-1", "host",                                                              \
    "pause iterations a waiter spins before its clock starts (-1: as many as take 1.3 us "     \
    "here, or 8 when ranks outnumber CPUs, whose waits then yield)")                           \
  X(SIM_TOPOLOGY, STR, "dgx-h100", "sim",                                                      \
    "topology the sim backend models: a preset (unilink-model topologies), <preset>x<N>, or "  \
    "a topology file")                                                                         \
  X(DATA_DIR, STR, "", "sim",                                                                  \
    "folder with links.json and topologies/ (default: the source tree or the install's "       \
    "share/unilink)")                                                                          \
  X(MPI_BLOCKING, INT, "0", "mpi",                                                             \
    "1: use blocking MPI collectives (MPI's tuned algorithms) instead of nonblocking ones "    \
    "polled with the timeout and abort flag; waits then ignore both")                          \
  X(MPI_CHUNK, INT, "2147483647", "mpi",                                                       \
    "largest element count per MPI call; longer allreduce/broadcast/reduce, send/recv and "    \
    "put/get are split (MPI counts are int)")                                                  \
  X(MPI_FINALIZE_AFTER_ERROR, INT, "0", "mpi",                                                 \
    "1: call MPI_Finalize at exit even after a communicator failed (may hang)")                \
  X(NCCL_NEW_API, INT, "1", "nccl",                                                            \
    "0: ignore NCCL entry points newer than 2.18.1 (ncclMemAlloc, window registration, "       \
    "ncclAlltoAll/Gather/Scatter) and use the fallbacks, as with an old NCCL")                 \
  X(NCCL_ABORT_WAIT_MS, INT, "500", "nccl",                                                    \
    "ms ul_comm_abort/destroy wait for ncclCommAbort before leaving it to a background "       \
    "thread")                                                                                  \
  X(NCCL_BLOCKING, INT, "0", "nccl",                                                           \
    "1: create NCCL communicators in blocking mode (no timeouts)")                             \
  X(CUDA_PATH, STR, "auto", "cuda",                                                            \
    "data path: auto | p2p (peer access, NVLink or PCIe P2P) | staged (through pinned host "   \
    "memory)")                                                                                 \
  X(ZE_SUBDEVICES, INT, "0", "ze", "1: one rank per sub-device (tile), 0: per root device")   \
  X(ZE_STAGE_BYTES, INT, "4194304", "ze",                                                      \
    "host staging buffer for local reductions (v1), bytes")

#endif
