/* mpi backend communicators: creation on MPI_COMM_WORLD or a staged application
 * communicator, split, finalize, destroy, abort and the node map. */
#define _GNU_SOURCE
#include "mpi_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Communicator staged by the bootstrap_stage op (mpi_backend.c) for the next comm_init on this thread
 * (ul_comm_init_mpi: build on the user's MPI_Comm instead of MPI_COMM_WORLD). */
static __thread int mpi_staged_valid;
static __thread MPI_Comm mpi_staged_comm;

void mpi_comm_stage(int valid, MPI_Comm mc) {
  mpi_staged_comm = mc;
  mpi_staged_valid = valid;
}

/* ------------------------------------------------------- communicators */
static void mpi_comm_free_struct(ul_backend_comm_t *c) {
  if (!c) return;
  free(c->node_of);
  free(c->host_of);
  if (c->pidfd_of)
    for (int r = 0; r < c->nranks; r++)
      if (c->pidfd_of[r] >= 0) close(c->pidfd_of[r]);
  free(c->pidfd_of);
  free(c->pid_of);
  free(c->ctl_buf);
  free(c->reqs);
  free(c->req_count);
  free(c->req_dt);
  free(c->allocs);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

ul_backend_comm_t *mpi_comm_new(const ul_backend_comm_args_t *args) {
  ul_backend_comm_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->ucomm = args->comm;
  c->timeout_ms = args->timeout_ms;
  c->abort_flag = args->abort_flag;
  c->comm = MPI_COMM_NULL;
  c->ctl = MPI_COMM_NULL;
  c->lost_rank = -1;
  pthread_mutex_init(&c->lock, NULL);
  return c;
}

/* Node map: ranks that share memory (MPI_COMM_TYPE_SHARED) get the same node id, the
 * comm rank of their node's first rank; host names go along for the descriptions. */
static ul_result_t mpi_comm_topology_setup(ul_backend_comm_t *c) {
  int n = c->nranks;
  c->node_of = calloc((size_t)n, sizeof *c->node_of);
  c->host_of = calloc((size_t)n, sizeof *c->host_of);
  if (!c->node_of || !c->host_of)
    return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: out of memory", c->rank);
  MPI_Comm node = MPI_COMM_NULL;
  int rc = MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Comm_split_type");
  int leader = c->rank;
  MPI_Request req;
  rc = MPI_Ibcast(&leader, 1, MPI_INT, 0, node, &req);
  ul_result_t r = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Ibcast", c->timeout_ms)
                                    : mpi_error_set(c, rc, "MPI_Ibcast");
  MPI_Comm_free(&node);
  if (r != UL_OK) return r;
  char me[MPI_MAX_PROCESSOR_NAME] = "";
  int len = 0;
  MPI_Get_processor_name(me, &len);
  MPI_Request reqs[2];
  rc = MPI_Iallgather(&leader, 1, MPI_INT, c->node_of, 1, MPI_INT, c->comm, &reqs[0]);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Iallgather");
  rc = MPI_Iallgather(me, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, c->host_of, MPI_MAX_PROCESSOR_NAME,
                      MPI_CHAR, c->comm, &reqs[1]);
  if (rc != MPI_SUCCESS) {
    mpi_waitall(c, 1, reqs, "MPI_Iallgather", c->timeout_ms);
    return mpi_error_set(c, rc, "MPI_Iallgather");
  }
  r = mpi_waitall(c, 2, reqs, "MPI_Iallgather", c->timeout_ms);
  for (int i = 0; i < n; i++) c->host_of[i][MPI_MAX_PROCESSOR_NAME - 1] = '\0';
  return r == UL_OK ? mpi_comm_liveness_setup(c) : r;
}

/* Common tail of comm_init and comm_split: c->comm is ours. */
ul_result_t mpi_comm_setup(ul_backend_comm_t *c, ul_backend_comm_props_t *props) {
  int rc = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(c->comm, &c->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(c->comm, &c->nranks);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Comm_set_errhandler");
  mpi_g.blocking = (int)ul_backend_param_int(
      "MPI_BLOCKING", 0,
      "mpi backend: 1 = use blocking MPI collectives (MPI's tuned algorithms) instead of "
      "nonblocking ones polled with the timeout and abort flag; waits then ignore both");
  mpi_g.chunk = ul_backend_param_int(
      "MPI_CHUNK", INT_MAX,
      "mpi backend: largest element count per MPI call; longer allreduce/broadcast/reduce, "
      "send/recv and put/get are split (MPI counts are int)");
  if (mpi_g.chunk < 1 || mpi_g.chunk > INT_MAX) mpi_g.chunk = INT_MAX;
  ul_result_t r = mpi_comm_topology_setup(c);
  if (r == UL_OK) r = mpi_comm_ctl_setup(c);
  if (r != UL_OK) return r;
  if (props) {
    props->load_store_peers = 0;
    snprintf(props->path, sizeof props->path, "mpi");
  }
  return UL_OK;
}

/* comm_init: the ranks are the processes of MPI_COMM_WORLD (or of the communicator
 * staged by ul_comm_init_mpi). Every rank takes part in the agreement below even when
 * its own arguments are wrong, so all ranks fail together instead of some hanging. */
ul_result_t mpi_backend_comm_init(const ul_backend_comm_args_t *args,
                                         ul_backend_comm_t **out, ul_backend_comm_props_t *props) {
  *out = NULL;
  MPI_Comm base = MPI_COMM_WORLD;
  const char *base_name = "MPI_COMM_WORLD";
  if (mpi_staged_valid) {
    base = mpi_staged_comm;
    base_name = "the MPI communicator given to ul_comm_init_mpi";
    mpi_staged_valid = 0;
  }
  ul_backend_comm_t *c = mpi_comm_new(args);
  if (!c) return ul_backend_set_error(args->comm, UL_ERR_NO_MEMORY, "mpi: out of memory");
  int brank = 0, bsize = 0;
  MPI_Comm_rank(base, &brank);
  MPI_Comm_size(base, &bsize);
  c->rank = brank;
  c->nranks = bsize;

  /* Local checks first; they become a vote. */
  char why[320] = "";
  mpi_id_payload_t p;
  memcpy(&p, args->id_payload, sizeof p);
  uint64_t myjob = mpi_job_hash();
  if (memcmp(p.magic, MPI_ID_MAGIC, 8) != 0)
    snprintf(why, sizeof why, "the unique id was not made by the mpi backend (corrupted id)");
  else if (p.impl != UL_MPI_IMPL_SELF)
    snprintf(why, sizeof why, "the unique id was made by a plugin built for another MPI");
  else if (p.job_hash && myjob && p.job_hash != myjob)
    snprintf(why, sizeof why, "the unique id was made in another MPI job");
  else if (args->nranks != bsize || args->rank != brank)
    snprintf(why, sizeof why,
             "rank %d of %d does not match this process (rank %d of %d in %s): with the mpi "
             "backend the ranks are the MPI processes; use ul_comm_split for subsets",
             args->rank, args->nranks, brank, bsize, base_name);

  MPI_Request req;
  int rc = MPI_Comm_idup(base, &c->comm, &req);
  ul_result_t r = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Comm_idup", c->timeout_ms)
                                    : mpi_error_set(c, rc, "MPI_Comm_idup");
  if (r != UL_OK) goto fail;
  rc = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    r = mpi_error_set(c, rc, "MPI_Comm_set_errhandler");
    goto fail;
  }
  /* Compare every rank's token with rank 0's and vote (MINLOC names the first bad rank). */
  unsigned char root_token[sizeof p.token];
  memcpy(root_token, p.token, sizeof root_token);
  rc = MPI_Ibcast(root_token, (int)sizeof root_token, MPI_BYTE, 0, c->comm, &req);
  r = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Ibcast", c->timeout_ms)
                        : mpi_error_set(c, rc, "MPI_Ibcast");
  if (r != UL_OK) goto fail;
  if (!why[0] && memcmp(root_token, p.token, sizeof root_token) != 0)
    snprintf(why, sizeof why,
             "the unique id differs from rank 0's (another ul_get_unique_id call's id)");
  struct {
    int ok, rank;
  } vote = {why[0] ? 0 : 1, brank}, result;
  rc = MPI_Iallreduce(&vote, &result, 1, MPI_2INT, MPI_MINLOC, c->comm, &req);
  r = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Iallreduce", c->timeout_ms)
                        : mpi_error_set(c, rc, "MPI_Iallreduce");
  if (r != UL_OK) goto fail;
  if (why[0]) {
    r = ul_backend_set_error(args->comm, UL_ERR_INVALID_ARG, "rank %d: mpi comm_init: %s",
                             brank, why);
    goto fail;
  }
  if (!result.ok) {
    r = ul_backend_set_error(args->comm, UL_ERR_INVALID_ARG,
                             "rank %d: mpi comm_init failed on rank %d (its unique id or "
                             "rank/nranks did not match; see that rank's error)",
                             brank, result.rank);
    goto fail;
  }
  r = mpi_comm_setup(c, props);
  if (r != UL_OK) goto fail;
  *out = c;
  return UL_OK;
fail:
  if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  mpi_comm_free_struct(c);
  return r;
}

ul_result_t mpi_backend_comm_split(ul_backend_comm_t *parent, int color, int key,
                                          const ul_backend_comm_args_t *args,
                                          ul_backend_comm_t **out,
                                          ul_backend_comm_props_t *props) {
  *out = NULL;
  MPI_Comm nc = MPI_COMM_NULL;
  int rc = MPI_Comm_split(parent->comm, color == UL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key,
                          &nc);
  if (rc != MPI_SUCCESS) return mpi_error_set(parent, rc, "MPI_Comm_split");
  if (nc == MPI_COMM_NULL) return UL_OK;
  ul_backend_comm_t *c = mpi_comm_new(args);
  if (!c) {
    MPI_Comm_free(&nc);
    return ul_backend_set_error(args->comm, UL_ERR_NO_MEMORY, "mpi: out of memory");
  }
  c->comm = nc;
  ul_result_t r = mpi_comm_setup(c, props);
  if (r == UL_OK && args->nranks > 0 && (args->rank != c->rank || args->nranks != c->nranks))
    r = ul_backend_set_error(args->comm, UL_ERR_INTERNAL,
                             "mpi: MPI_Comm_split made rank %d of %d, the core expected %d of %d",
                             c->rank, c->nranks, args->rank, args->nranks);
  if (r != UL_OK) {
    MPI_Comm_free(&c->comm);
    mpi_comm_free_struct(c);
    return r;
  }
  *out = c;
  return UL_OK;
}

ul_result_t mpi_backend_comm_finalize(ul_backend_comm_t *c) {
  /* Every operation completes before it returns; finalize only waits for the peers. */
  MPI_Request req;
  int rc = MPI_Ibarrier(c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Ibarrier");
  return mpi_waitall(c, 1, &req, "MPI_Ibarrier (comm_finalize)", c->timeout_ms);
}

ul_result_t mpi_backend_comm_destroy(ul_backend_comm_t *c) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) {
    for (int i = 0; i < c->nallocs; i++) MPI_Free_mem(c->allocs[i]);
    /* After an abort or a timeout, operations may still be pending: MPI frees the
     * communicator once they finish; our struct no longer matters to them except for
     * requests left in an open group, which we release here. */
    for (int i = 0; i < c->nreqs; i++)
      if (c->reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&c->reqs[i]);
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    if (c->ctl != MPI_COMM_NULL) MPI_Comm_free(&c->ctl);
  }
  mpi_comm_free_struct(c);
  return UL_OK;
}

ul_result_t mpi_backend_comm_abort(ul_backend_comm_t *c) {
  c->dead = 1; /* pollers see it and return UL_ERR_ABORTED; nothing here blocks */
  mpi_g.trouble = 1;
  return UL_OK;
}

ul_result_t mpi_backend_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  memset(out, 0, sizeof *out);
  out->peer = peer;
  out->source = UL_SOURCE_NONE;
  if (peer == c->rank) {
    out->kind = UL_LINK_SELF;
    snprintf(out->description, sizeof out->description, "self");
  } else if (c->node_of[peer] == c->node_of[c->rank]) {
    out->kind = UL_LINK_SHM;
    snprintf(out->description, sizeof out->description, "shm (same host %.60s, MPI)",
             c->host_of[peer]);
  } else {
    out->kind = UL_LINK_NETWORK;
    snprintf(out->description, sizeof out->description, "network (host %.60s, MPI)",
             c->host_of[peer]);
  }
  return UL_OK;
}

