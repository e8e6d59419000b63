/* Recovery after a lost rank, as ULFM's MPIX_Comm_revoke/MPIX_Comm_shrink and NCCL's
 * ncclCommShrink: revoke makes every rank leave the communicator with one error, shrink
 * lets the survivors agree on who is alive and gives them a working communicator.
 *
 * The core only validates, guards the handle against a racing teardown (in_flight, as
 * every call does) and builds the new communicator the way ul_comm_init_rank does; the
 * backend owns the agreement, since only it knows how to tell a lost rank (host: dead
 * pid, aborted or destroyed rank; mpi: its launcher's events). */
#include <stdio.h>
#include <string.h>

#include "generic/generic.h"
#include "ul_core.h"

static void comm_leave(ul_comm_t comm) {
  __atomic_sub_fetch(&comm->in_flight, 1, __ATOMIC_SEQ_CST);
}

UL_API ul_result_t ul_comm_revoke(ul_comm_t comm) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_comm_revoke");
  if (ul__op_is_stub((const void *)comm->backend->ops.comm_revoke))
    return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                              "ul_comm_revoke: backend %s cannot revoke a communicator (it has "
                              "no comm_revoke); use ul_comm_abort on every rank instead",
                              comm->backend->ops.name);
  if (!ul__comm_enter(comm))
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_comm_revoke: the communicator is being torn down");
  /* Sticky first, so that this rank's own later calls are refused even before the
   * backend's flag reaches the waiters. An abort stays the stronger state. */
  if (comm->sticky != UL_ERR_ABORTED) {
    __atomic_store_n(&comm->sticky, UL_ERR_REVOKED, __ATOMIC_SEQ_CST);
    ul__comm_set_error(comm, UL_ERR_REVOKED,
                       "ul_comm_revoke: this rank revoked the communicator; only "
                       "ul_comm_shrink, ul_comm_abort and ul_comm_destroy still work on it");
  }
  ul_result_t rc = comm->backend->ops.comm_revoke(comm->bcomm);
  comm_leave(comm);
  if (rc != UL_OK && comm->last_error[0] == '\0')
    ul__comm_set_error(comm, rc, "ul_comm_revoke: backend %s failed", comm->backend->ops.name);
  ul__set_thread_error(rc, "%s", rc == UL_OK ? "" : comm->last_error);
  return rc;
}

UL_API ul_result_t ul_comm_failed_ranks(ul_comm_t comm, int *ranks, int max, int *count) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_comm_failed_ranks");
  if (count == NULL)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "ul_comm_failed_ranks: count is NULL");
  if (max < 0 || (ranks == NULL && max > 0))
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                              "ul_comm_failed_ranks: max is %d with ranks %s (max must be >= 0, "
                              "and ranks non-NULL when max > 0)",
                              max, ranks ? "set" : "NULL");
  if (ul__op_is_stub((const void *)comm->backend->ops.comm_failed_ranks))
    return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                              "ul_comm_failed_ranks: backend %s cannot tell which ranks are lost",
                              comm->backend->ops.name);
  if (!ul__comm_enter(comm))
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_comm_failed_ranks: the communicator is being torn down");
  int n = 0;
  ul_result_t rc = comm->backend->ops.comm_failed_ranks(comm->bcomm, ranks, max, &n);
  comm_leave(comm);
  if (rc == UL_OK) *count = n;
  return rc;
}

UL_API ul_result_t ul_comm_shrink(ul_comm_t comm, ul_comm_t *newcomm, const ul_config_t *config) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_comm_shrink");
  if (newcomm == NULL)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "ul_comm_shrink: newcomm is NULL");
  *newcomm = NULL;
  const ul_backend_ops_t *o = &comm->backend->ops;
  if (ul__op_is_stub((const void *)o->comm_shrink))
    return ul__comm_set_error(comm, UL_ERR_UNSUPPORTED,
                              "ul_comm_shrink: backend %s cannot shrink a communicator (it has "
                              "no comm_shrink); abort it and create a new one from a fresh "
                              "unique id",
                              o->name);
  ul__config_t cfg = comm->config;
  if (config) {
    UL_CHECK(ul__config_resolve(config, &cfg));
    if (cfg.backend[0] && strcmp(cfg.backend, "auto") != 0 &&
        strncmp(cfg.backend, o->name, strlen(o->name)) != 0)
      return ul__comm_set_error(comm, UL_ERR_INVALID_ARG,
                                "ul_comm_shrink: config asks for backend '%s' but the "
                                "communicator runs on '%s'",
                                cfg.backend, o->name);
    if (cfg.device == UL_CONFIG_UNDEF) cfg.device = comm->config.device;
  }
  if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE))
    return ul__comm_set_error(comm, UL_ERR_ABORTED, "ul_comm_shrink: communicator aborted");
  if (!ul__comm_enter(comm))
    return ul__set_thread_error(UL_ERR_INVALID_ARG,
                                "ul_comm_shrink: the communicator is being torn down");
  /* Rank and size are placeholders until the agreement decides them. */
  ul_comm_t child = ul__comm_alloc(comm->backend, &cfg, comm->rank, comm->nranks);
  if (!child) {
    comm_leave(comm);
    return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_comm_shrink: out of memory");
  }
  memcpy(child->selection, comm->selection, sizeof child->selection);
  ul_backend_comm_args_t args;
  ul__comm_fill_args(&args, child, comm->options);
  int nr = -1, nn = 0;
  ul_result_t rc = o->comm_shrink(comm->bcomm, &args, &child->bcomm, &child->props, &nr, &nn);
  if (rc == UL_OK && (child->bcomm == NULL || nn < 1 || nn > comm->nranks || nr < 0 || nr >= nn))
    rc = ul__comm_set_error(child, UL_ERR_INTERNAL,
                            "backend %s: comm_shrink returned rank %d of %d (old size %d)",
                            o->name, nr, nn, comm->nranks);
  if (rc == UL_OK) {
    child->rank = nr;
    child->nranks = nn;
    rc = ul__comm_finish_setup(child);
    if (rc != UL_OK) {
      o->comm_abort(child->bcomm);
      ul__generic_fini(child);
    }
  }
  if (rc != UL_OK) {
    char why[sizeof child->last_error];
    snprintf(why, sizeof why, "%s", child->last_error[0] ? child->last_error : "no reason given");
    if (child->bcomm) o->comm_destroy(child->bcomm);
    ul__comm_free(child);
    comm_leave(comm);
    return ul__comm_set_error(comm, rc, "ul_comm_shrink: %s", why);
  }
  comm_leave(comm);
  UL_INFO("INIT", "rank %d/%d shrunk to rank %d/%d on backend %s", comm->rank, comm->nranks, nr,
          nn, o->name);
  *newcomm = child;
  return UL_OK;
}
