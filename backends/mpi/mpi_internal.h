/* Internal interfaces of the mpi backend plugin (libunilink-mpi.so). */
#ifndef UL_MPI_INTERNAL_H
#define UL_MPI_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <unilink/backend.h>

#define MPI_BACKEND_VISIBLE __attribute__((visibility("default")))

/* Implementation tag shared with unilink/mpi.h: an application built against one MPI
 * must not hand its MPI_Comm to a plugin built against another. */
#if defined(OPEN_MPI) && OPEN_MPI
#define UL_MPI_IMPL_SELF 1
#elif defined(MPICH_VERSION)
#define UL_MPI_IMPL_SELF 2
#else
#define UL_MPI_IMPL_SELF 3
#endif

/* One rank's communicator. */
struct ul_backend_comm {
  ul_comm_t ucomm;                /* core handle, for error sentences */
  MPI_Comm comm;                  /* our own duplicate: all traffic goes here */
  int rank, nranks;
  int timeout_ms;                 /* 0 = forever */
  const volatile int *abort_flag; /* core's flag; nonzero after ul_comm_abort */
  volatile int dead;              /* set by comm_abort */
  int *node_of;                   /* per rank: comm rank of its node leader */
  char (*host_of)[MPI_MAX_PROCESSOR_NAME];
  pid_t *pid_of;                  /* per rank: its process id */
  int *pidfd_of;                  /* per rank: pidfd when it runs beside us, -2 when it runs on
                                     another node or pid namespace (liveness unknown), -1 when
                                     beside us without a pidfd */
  volatile int lost_rank;         /* first rank seen dead, -1 none */
  MPI_Comm ctl;                   /* duplicate for revoke notices and the shrink agreement */
  int ctl_ready;                  /* ctl's MPI_Comm_idup completed: it may be probed */
  unsigned char *ctl_buf;         /* shrink messages: nranks * (nranks + 2) bytes */
  volatile int revoked;           /* ul_comm_revoke here or a peer's notice seen */
  uint32_t shrinks;               /* ul_comm_shrink calls so far */
  pthread_mutex_t lock;           /* guards the group request list and allocations */
  int group_depth;
  MPI_Request *reqs;
  int *req_count;                 /* per request: elements a receive expects, -1 a send */
  MPI_Datatype *req_dt;           /* per request: its datatype (MPI_Get_count) */
  int nreqs, reqs_cap;
  ul_result_t group_rc;           /* first error of an open group */
  void **allocs;                  /* MPI_Alloc_mem blocks handed out by mem_alloc */
  int nallocs, allocs_cap;
};

/* One registered window: the user's memory and a separate window of signal counters. */
struct ul_backend_window {
  MPI_Win data;
  MPI_Win sig;
  uint64_t *sigbase; /* local counters (MPI_Win_allocate) */
  int nsignals;
};

/* Process-wide state. */
typedef struct mpi_global {
  int we_initialised; /* we called MPI_Init_thread: finalize at exit */
  int thread_level;   /* provided level */
  int blocking;       /* UNILINK_MPI_BLOCKING: blocking MPI calls (no timeout/abort) */
  int64_t chunk;      /* largest element count per MPI call (UNILINK_MPI_CHUNK) */
  MPI_Op user_ops[UL_DTYPE_COUNT][UL_OP_COUNT]; /* MPI_OP_NULL where built-in */
  volatile int trouble; /* a wait timed out, a peer was lost or a comm aborted: MPI_Finalize
                           could wait forever for a dead peer, so exit skips it */
} mpi_global_t;
extern mpi_global_t mpi_g;

/* The unique id's payload: MPI is the bootstrap, the id only carries a job token. */
#define MPI_ID_MAGIC "ULMPIID1"
typedef struct mpi_id_payload {
  char magic[8];
  uint32_t impl;       /* UL_MPI_IMPL_SELF of the creator */
  uint32_t world_size; /* informational */
  uint64_t job_hash;   /* mpi_job_hash() of the creator; 0 unknown */
  unsigned char token[32];
} mpi_id_payload_t;
_Static_assert(sizeof(mpi_id_payload_t) <= UL_BACKEND_ID_PAYLOAD_BYTES, "payload too large");

/* mpi_init.c: process-wide state, MPI's initialisation, datatypes and operations */
ul_result_t mpi_backend_ensure(char *reason, size_t reason_len);
int mpi_launched(void);
uint64_t mpi_job_hash(void); /* the launcher's job, 0 unknown */
ul_result_t mpi_backend_init(char *reason, size_t reason_len);
void mpi_backend_fini(void);
ul_result_t mpi_backend_query_caps(ul_backend_caps_t *caps);
ul_result_t mpi_backend_get_unique_id(unsigned char *payload, size_t payload_bytes);
MPI_Datatype mpi_dtype_of(ul_dtype_t d);
MPI_Op mpi_op_of(ul_dtype_t d, ul_op_t op);

/* mpi_wait.c: errors, the one polling wait, watching peers and revoke notices */
/* Map an MPI error code to a unilink result and record the sentence on c (NULL: thread). */
ul_result_t mpi_error_set(ul_backend_comm_t *c, int mpirc, const char *call);
/* Poll requests to completion honouring c's timeout and abort flag (c NULL: timeout_ms). */
ul_result_t mpi_waitall(ul_backend_comm_t *c, int n, MPI_Request *reqs, const char *call,
                        int timeout_ms);
/* One idle step of a polling wait (abort, revoke, lost peer, timeout, back-off); UL_OK:
 * poll again. */
ul_result_t mpi_wait_idle(ul_backend_comm_t *c, const char *call, int timeout_ms, double t0,
                          unsigned *spins);
double mpi_now_ms(void); /* CLOCK_MONOTONIC */
/* A peer rank this process can watch (same node and pid namespace) that has exited, or -1.
 * Records it in c->lost_rank and marks MPI as troubled. */
int mpi_find_lost_peer(ul_backend_comm_t *c);
/* After the node map: the peers' pids, a pidfd for those that run beside us. */
ul_result_t mpi_comm_liveness_setup(ul_backend_comm_t *c);
/* "rank 1 (pid 123), rank 3 (pid 456)": every watched peer that has exited. */
void mpi_lost_peers_text(ul_backend_comm_t *c, char *buf, size_t len);
/* The control duplicate (revoke, shrink). */
ul_result_t mpi_comm_ctl_setup(ul_backend_comm_t *c);
/* 1 once this rank revoked c or a peer's revoke notice arrived (polls the notice). */
int mpi_revoke_seen(ul_backend_comm_t *c);

/* mpi_comm.c */
ul_backend_comm_t *mpi_comm_new(const ul_backend_comm_args_t *args);
/* Common tail of comm_init, comm_split and shrink: c->comm is ours. */
ul_result_t mpi_comm_setup(ul_backend_comm_t *c, ul_backend_comm_props_t *props);
/* The next comm_init on this thread builds on mc (valid = 1) instead of MPI_COMM_WORLD. */
void mpi_comm_stage(int valid, MPI_Comm mc);
ul_result_t mpi_backend_comm_init(const ul_backend_comm_args_t *args, ul_backend_comm_t **out,
                                  ul_backend_comm_props_t *props);
ul_result_t mpi_backend_comm_split(ul_backend_comm_t *parent, int color, int key,
                                   const ul_backend_comm_args_t *args, ul_backend_comm_t **out,
                                   ul_backend_comm_props_t *props);
ul_result_t mpi_backend_comm_finalize(ul_backend_comm_t *c);
ul_result_t mpi_backend_comm_destroy(ul_backend_comm_t *c);
ul_result_t mpi_backend_comm_abort(ul_backend_comm_t *c);
ul_result_t mpi_backend_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out);

/* mpi_recover.c */
ul_result_t mpi_comm_revoke(ul_backend_comm_t *c);
ul_result_t mpi_comm_failed_ranks(ul_backend_comm_t *c, int *ranks, int max, int *count);
ul_result_t mpi_comm_shrink(ul_backend_comm_t *c, const ul_backend_comm_args_t *args,
                            ul_backend_comm_t **out, ul_backend_comm_props_t *props,
                            int *new_rank, int *new_nranks);

/* mpi_coll.c */
extern const ul_backend_coll_ops_t mpi_coll_ops;
ul_result_t mpi_p2p_send(ul_backend_comm_t *c, const void *buf, size_t count, ul_dtype_t dtype,
                         int peer, ul_backend_stream_t *s);
ul_result_t mpi_p2p_recv(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                         int peer, ul_backend_stream_t *s);
ul_result_t mpi_p2p_group_start(ul_backend_comm_t *c);
ul_result_t mpi_p2p_group_end(ul_backend_comm_t *c, ul_backend_stream_t *s);

/* mpi_vcoll.c */
ul_result_t mpi_coll_alltoallv(ul_backend_comm_t *c, const void *sendbuf,
                               const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                               const size_t *recvcounts, const size_t *rdispls, ul_dtype_t dtype,
                               ul_backend_stream_t *s);
ul_result_t mpi_coll_allgatherv(ul_backend_comm_t *c, const void *sendbuf, size_t sendcount,
                                void *recvbuf, const size_t *recvcounts, const size_t *displs,
                                ul_dtype_t dtype, ul_backend_stream_t *s);

/* mpi_rma.c */
ul_result_t mpi_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr);
ul_result_t mpi_mem_free(ul_backend_comm_t *c, void *ptr);
ul_result_t mpi_win_register(ul_backend_comm_t *c, void *base, size_t size, int extra_signals,
                             ul_backend_window_t **out, void **peer_bases);
ul_result_t mpi_win_deregister(ul_backend_comm_t *c, ul_backend_window_t *w);
ul_result_t mpi_rma_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t offset,
                        const void *src, size_t bytes, ul_backend_stream_t *s);
ul_result_t mpi_rma_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t offset,
                        void *dst, size_t bytes, ul_backend_stream_t *s);
ul_result_t mpi_rma_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                           ul_backend_stream_t *s);
ul_result_t mpi_rma_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                uint64_t value, ul_backend_stream_t *s);
ul_result_t mpi_rma_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                uint64_t *value);

#endif
