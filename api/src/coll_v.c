/* The vector collectives' arguments (ul_alltoallv, ul_allgatherv: per-peer counts and
 * displacements, as MPI_Alltoallv / MPI_Allgatherv): the copy of the count arrays each
 * call carries (queued calls outlive the caller's arrays) and the largest block. */
#include <stdlib.h>
#include <string.h>

#include "ul_core.h"

ul_result_t ul__vcoll_own(ul_comm_t comm, ul__coll_args_t *a) {
  size_t n = (size_t)comm->nranks;
  int a2a = a->coll == UL_COLL_ALLTOALLV;
  size_t *v = malloc((a2a ? 4 : 2) * n * sizeof *v);
  if (!v)
    return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_%s: out of memory copying the counts",
                              ul_coll_name(a->coll));
  size_t *p = v;
  if (a2a) {
    memcpy(p, a->scounts, n * sizeof *p), a->scounts = p, p += n;
    memcpy(p, a->sdispls, n * sizeof *p), a->sdispls = p, p += n;
  }
  memcpy(p, a->rcounts, n * sizeof *p), a->rcounts = p, p += n;
  memcpy(p, a->rdispls, n * sizeof *p), a->rdispls = p;
  a->vblock = v;
  return UL_OK;
}

size_t ul__vcoll_max_block(const ul__coll_args_t *a, int nranks) {
  size_t m = a->coll == UL_COLL_ALLGATHERV ? a->count : 0;
  for (int j = 0; j < nranks; j++) {
    if (a->rcounts[j] > m) m = a->rcounts[j];
    if (a->scounts && a->scounts[j] > m) m = a->scounts[j];
  }
  return m;
}
