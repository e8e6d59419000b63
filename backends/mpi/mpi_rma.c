/* mpi backend: memory, windows and one-sided operations over MPI RMA.
 *
 * A unilink window is two MPI windows: the user's memory (MPI_Win_create, byte
 * displacements) and a window of uint64 signal counters per rank (MPI_Win_allocate).
 * Both stay in a passive-target epoch (MPI_Win_lock_all) for their whole life. A put
 * or get is flushed (remote completion) before it returns, so a later signal to the
 * same peer is ordered after it; a signal is an atomic MPI_Accumulate(MPI_SUM) on the
 * peer's counter; wait_signal polls the local counter with MPI_Fetch_and_op(MPI_NO_OP),
 * the read that is atomic with respect to those accumulates. */
#define _GNU_SOURCE
#include "mpi_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "wait.h"

ul_result_t mpi_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  if ((unsigned long long)size > (unsigned long long)(((size_t)-1) >> 1))
    return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: %zu bytes is too large",
                                c->rank, size);
  pthread_mutex_lock(&c->lock);
  ul_result_t r = UL_OK;
  if (c->nallocs == c->allocs_cap) {
    int cap = c->allocs_cap ? c->allocs_cap * 2 : 16;
    void **n = realloc(c->allocs, (size_t)cap * sizeof *n);
    if (!n) r = ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: out of memory", c->rank);
    else {
      c->allocs = n;
      c->allocs_cap = cap;
    }
  }
  void *p = NULL;
  if (r == UL_OK) {
    int rc = MPI_Alloc_mem((MPI_Aint)size, MPI_INFO_NULL, &p);
    if (rc != MPI_SUCCESS) r = mpi_error_set(c, rc, "MPI_Alloc_mem");
    else c->allocs[c->nallocs++] = p;
  }
  pthread_mutex_unlock(&c->lock);
  if (r == UL_OK) *ptr = p;
  return r;
}

ul_result_t mpi_mem_free(ul_backend_comm_t *c, void *ptr) {
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < c->nallocs; i++) {
    if (c->allocs[i] == ptr) {
      c->allocs[i] = c->allocs[--c->nallocs];
      pthread_mutex_unlock(&c->lock);
      int rc = MPI_Free_mem(ptr);
      return rc == MPI_SUCCESS ? UL_OK : mpi_error_set(c, rc, "MPI_Free_mem");
    }
  }
  pthread_mutex_unlock(&c->lock);
  return ul_backend_set_error(c->ucomm, UL_ERR_INVALID_ARG,
                              "rank %d: ul_mem_free: %p was not allocated by ul_mem_alloc on this "
                              "communicator",
                              c->rank, ptr);
}

static void mpi_win_free_all(ul_backend_window_t *w) {
  if (w->data != MPI_WIN_NULL) MPI_Win_free(&w->data);
  if (w->sig != MPI_WIN_NULL) MPI_Win_free(&w->sig);
  free(w);
}

/* Open MPI 4's osc/rdma names the node-shared state file of a window after the
 * communicator's context id alone, and sibling communicators of one split share that
 * id: windows created on them at the same time open one file (attach fails with ENOENT
 * once the other leader unlinks it, or two windows share lock state). Open MPI 5 adds
 * the leader's pid to the name. Until then the node leaders take turns: each holds a
 * per-user lock file from before MPI_Win_create until after MPI_Win_allocate, and the
 * file is unlinked inside those calls, so the next leader starts clean. */
#if UL_MPI_IMPL_SELF == 1 && defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION < 5
#define MPI_OSC_SERIALIZE 1
#else
#define MPI_OSC_SERIALIZE 0
#endif

/* Waiting for the node's window-creation turn: the lock, the abort flag, the timeout. */
typedef struct mpi_osc_turn {
  ul_backend_comm_t *c;
  int fd;
  int unusable; /* flock failed for good: go ahead unserialized */
  const char *path;
} mpi_osc_turn_t;

static ul_result_t mpi_osc_turn_poll(void *arg) {
  mpi_osc_turn_t *t = arg;
  if (flock(t->fd, LOCK_EX | LOCK_NB) == 0) return UL_OK;
  if (errno == EWOULDBLOCK || errno == EINTR) return UL_IN_PROGRESS;
  t->unusable = 1;
  return UL_ERR_SYSTEM;
}

static ul_result_t mpi_osc_turn_check(void *arg, double elapsed_ms, const char *what) {
  (void)elapsed_ms;
  mpi_osc_turn_t *t = arg;
  if (!(t->c->abort_flag && *t->c->abort_flag) && !t->c->dead) return UL_OK;
  return ul_backend_set_error(t->c->ucomm, UL_ERR_ABORTED,
                              "rank %d: %s abandoned: the communicator was aborted", t->c->rank,
                              what);
}

static ul_result_t mpi_osc_turn_expired(void *arg, int timeout_ms, const char *what) {
  mpi_osc_turn_t *t = arg;
  return ul_backend_set_error(t->c->ucomm, UL_ERR_TIMEOUT,
                              "rank %d: %s waited %d ms for %s (another window creation on "
                              "this node did not finish)",
                              t->c->rank, what, timeout_ms, t->path);
}

/* Take the node's window-creation turn (node leaders only); returns the open lock fd, or
 * -1 with *r set on timeout/abort, or -1 with *r UL_OK when no lock file can be used
 * (creation then goes ahead unserialized, as it would without this workaround). */
static int mpi_osc_turn_take(ul_backend_comm_t *c, ul_result_t *r) {
  *r = UL_OK;
  if (!MPI_OSC_SERIALIZE || c->node_of[c->rank] != c->rank) return -1;
  const char *dir = getenv("TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/unilink-mpi-osc.%u.lock", dir && *dir ? dir : "/tmp",
           (unsigned)getuid());
  int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    ul_backend_log(UL_LOG_WARN, "mpi",
                   "rank %d: cannot open %s (%s); window creation is not serialized against "
                   "Open MPI 4 sibling-communicator name clashes",
                   c->rank, path, strerror(errno));
    return -1;
  }
  mpi_osc_turn_t t = {c, fd, 0, path};
  const ulbu_waiter_t w = {.arg = &t,
                           .check = mpi_osc_turn_check,
                           .expired = mpi_osc_turn_expired,
                           .timeout_ms = c->timeout_ms,
                           .sleep_ns = 200000L};
  const ulbu_cond_t cond = {mpi_osc_turn_poll, NULL, &t};
  ul_result_t rc = ulbu_wait(&w, &cond, "window registration", NULL);
  if (rc == UL_OK) return fd;
  close(fd);
  if (!t.unusable) *r = rc;
  return -1;
}

static void mpi_osc_turn_give(int fd) {
  if (fd < 0) return;
  flock(fd, LOCK_UN);
  close(fd);
}

ul_result_t mpi_win_register(ul_backend_comm_t *c, void *base, size_t size, int extra_signals,
                             ul_backend_window_t **out, void **peer_bases) {
  *out = NULL;
  ul_backend_window_t *w = calloc(1, sizeof *w);
  if (!w) return ul_backend_set_error(c->ucomm, UL_ERR_NO_MEMORY, "rank %d: out of memory", c->rank);
  w->data = MPI_WIN_NULL;
  w->sig = MPI_WIN_NULL;
  w->nsignals = UL_WINDOW_SIGNALS + (extra_signals > 0 ? extra_signals : 0);
  ul_result_t r = UL_OK;
  int turn = -1, rc;
  if (MPI_OSC_SERIALIZE) {
    /* Everyone learns whether every leader got its turn before entering the blocking
     * MPI_Win_create, so a leader's timeout cannot strand its peers inside it. */
    turn = mpi_osc_turn_take(c, &r);
    int ok = r == UL_OK, all_ok = 0;
    MPI_Request req;
    rc = MPI_Iallreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->comm, &req);
    ul_result_t ar = rc == MPI_SUCCESS
                         ? mpi_waitall(c, 1, &req, "MPI_Iallreduce (window_register)", c->timeout_ms)
                         : mpi_error_set(c, rc, "MPI_Iallreduce");
    if (r == UL_OK && ar != UL_OK) r = ar;
    if (r == UL_OK && !all_ok)
      r = ul_backend_set_error(c->ucomm, UL_ERR_TIMEOUT,
                               "rank %d: window registration abandoned: a node leader of this "
                               "communicator could not take its window-creation turn",
                               c->rank);
    if (r != UL_OK) goto fail;
  }
  rc = MPI_Win_create(size ? base : NULL, (MPI_Aint)size, 1, MPI_INFO_NULL, c->comm, &w->data);
  if (rc != MPI_SUCCESS) {
    /* MPI_ERR_WIN here means this MPI has no one-sided component for these processes
     * (Open MPI 4 with only the self BTL, or TCP without osc/ucx): one-sided is then
     * unsupported, which also lets the core go on without its generic layer. */
    int cls = 0;
    MPI_Error_class(rc, &cls);
    r = mpi_error_set(c, rc, "MPI_Win_create");
    if (cls == MPI_ERR_WIN)
      r = ul_backend_set_error(c->ucomm, UL_ERR_UNSUPPORTED,
                               "rank %d: one-sided operations are not available in this MPI "
                               "configuration (MPI_Win_create: invalid window); with Open MPI "
                               "try OMPI_MCA_osc=ucx,rdma,sm",
                               c->rank);
    goto fail;
  }
  MPI_Win_set_errhandler(w->data, MPI_ERRORS_RETURN);
  rc = MPI_Win_allocate((MPI_Aint)w->nsignals * (MPI_Aint)sizeof(uint64_t), (int)sizeof(uint64_t),
                        MPI_INFO_NULL, c->comm, &w->sigbase, &w->sig);
  if (rc != MPI_SUCCESS) {
    r = mpi_error_set(c, rc, "MPI_Win_allocate (signals)");
    goto fail;
  }
  MPI_Win_set_errhandler(w->sig, MPI_ERRORS_RETURN);
  mpi_osc_turn_give(turn);
  turn = -1;
  /* Counters start at 0 everywhere before any peer may add to them: zero, make the
   * stores public, then a barrier. */
  memset(w->sigbase, 0, (size_t)w->nsignals * sizeof(uint64_t));
  rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, w->sig);
  if (rc == MPI_SUCCESS) rc = MPI_Win_sync(w->sig);
  if (rc == MPI_SUCCESS) rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, w->data);
  if (rc != MPI_SUCCESS) {
    r = mpi_error_set(c, rc, "MPI_Win_lock_all");
    goto fail;
  }
  MPI_Request req;
  rc = MPI_Ibarrier(c->comm, &req);
  r = rc == MPI_SUCCESS ? mpi_waitall(c, 1, &req, "MPI_Ibarrier (window_register)", c->timeout_ms)
                        : mpi_error_set(c, rc, "MPI_Ibarrier");
  if (r != UL_OK) goto fail;
  /* Only our own memory is load/store reachable; peers are reached through MPI. */
  peer_bases[c->rank] = base;
  *out = w;
  return UL_OK;
fail:
  mpi_osc_turn_give(turn);
  mpi_win_free_all(w);
  return r;
}

ul_result_t mpi_win_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  int rc1 = MPI_Win_unlock_all(w->data);
  int rc2 = MPI_Win_unlock_all(w->sig);
  int rc3 = MPI_Win_free(&w->data);
  int rc4 = MPI_Win_free(&w->sig);
  free(w);
  int rc = rc1 != MPI_SUCCESS ? rc1 : rc2 != MPI_SUCCESS ? rc2 : rc3 != MPI_SUCCESS ? rc3 : rc4;
  return rc == MPI_SUCCESS ? UL_OK : mpi_error_set(c, rc, "MPI_Win_free");
}

static ul_result_t mpi_rma_xfer(ul_backend_comm_t *c, ul_backend_window_t *w, int peer,
                                size_t offset, void *local, size_t bytes, int is_put) {
  if (c->dead || (c->abort_flag && *c->abort_flag))
    return ul_backend_set_error(c->ucomm, UL_ERR_ABORTED, "rank %d: %s refused: aborted", c->rank,
                                is_put ? "put" : "get");
  size_t max = (size_t)mpi_g.chunk;
  for (size_t off = 0; off < bytes;) {
    size_t n = bytes - off < max ? bytes - off : max;
    char *p = (char *)local + off;
    MPI_Aint disp = (MPI_Aint)(offset + off);
    int rc = is_put ? MPI_Put(p, (int)n, MPI_BYTE, peer, disp, (int)n, MPI_BYTE, w->data)
                    : MPI_Get(p, (int)n, MPI_BYTE, peer, disp, (int)n, MPI_BYTE, w->data);
    if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, is_put ? "MPI_Put" : "MPI_Get");
    off += n;
  }
  int rc = MPI_Win_flush(peer, w->data);
  return rc == MPI_SUCCESS ? UL_OK : mpi_error_set(c, rc, "MPI_Win_flush");
}

ul_result_t mpi_rma_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t offset,
                        const void *src, size_t bytes, ul_backend_stream_t *s) {
  (void)s;
  return bytes ? mpi_rma_xfer(c, w, peer, offset, (void *)src, bytes, 1) : UL_OK;
}

ul_result_t mpi_rma_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t offset,
                        void *dst, size_t bytes, ul_backend_stream_t *s) {
  (void)s;
  return bytes ? mpi_rma_xfer(c, w, peer, offset, dst, bytes, 0) : UL_OK;
}

ul_result_t mpi_rma_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                           ul_backend_stream_t *s) {
  (void)s;
  if (c->dead || (c->abort_flag && *c->abort_flag))
    return ul_backend_set_error(c->ucomm, UL_ERR_ABORTED, "rank %d: signal refused: aborted",
                                c->rank);
  uint64_t one = 1;
  int rc = MPI_Accumulate(&one, 1, MPI_UINT64_T, peer, (MPI_Aint)index, 1, MPI_UINT64_T, MPI_SUM,
                          w->sig);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Accumulate (signal)");
  rc = MPI_Win_flush(peer, w->sig);
  return rc == MPI_SUCCESS ? UL_OK : mpi_error_set(c, rc, "MPI_Win_flush (signal)");
}

static ul_result_t mpi_rma_load_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                       uint64_t *value) {
  uint64_t cur = 0;
  int rc = MPI_Fetch_and_op(NULL, &cur, MPI_UINT64_T, c->rank, (MPI_Aint)index, MPI_NO_OP, w->sig);
  if (rc == MPI_SUCCESS) rc = MPI_Win_flush(c->rank, w->sig);
  if (rc != MPI_SUCCESS) return mpi_error_set(c, rc, "MPI_Fetch_and_op (signal read)");
  *value = cur;
  return UL_OK;
}

ul_result_t mpi_rma_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                uint64_t *value) {
  return mpi_rma_load_signal(c, w, index, value);
}

/* wait_signal: the local counter against the value, the abort flag, the timeout. */
typedef struct mpi_sig_wait {
  ul_backend_comm_t *c;
  ul_backend_window_t *w;
  int index;
  uint64_t value, cur;
} mpi_sig_wait_t;

static ul_result_t mpi_sig_poll(void *arg) {
  mpi_sig_wait_t *x = arg;
  ul_result_t r = mpi_rma_load_signal(x->c, x->w, x->index, &x->cur);
  if (r != UL_OK) return r;
  return x->cur >= x->value ? UL_OK : UL_IN_PROGRESS;
}

static ul_result_t mpi_sig_check(void *arg, double elapsed_ms, const char *what) {
  (void)elapsed_ms;
  (void)what;
  mpi_sig_wait_t *x = arg;
  if (!x->c->dead && !(x->c->abort_flag && *x->c->abort_flag)) return UL_OK;
  return ul_backend_set_error(x->c->ucomm, UL_ERR_ABORTED,
                              "rank %d: wait for signal %d abandoned: the communicator was "
                              "aborted",
                              x->c->rank, x->index);
}

static ul_result_t mpi_sig_expired(void *arg, int timeout_ms, const char *what) {
  (void)what;
  mpi_sig_wait_t *x = arg;
  return ul_backend_set_error(x->c->ucomm, UL_ERR_TIMEOUT,
                              "rank %d: wait_signal timed out after %d ms on window %p: "
                              "signal %d is %llu, waiting for %llu",
                              x->c->rank, timeout_ms, (void *)x->w, x->index,
                              (unsigned long long)x->cur, (unsigned long long)x->value);
}

ul_result_t mpi_rma_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                                uint64_t value, ul_backend_stream_t *s) {
  (void)s;
  mpi_sig_wait_t x = {c, w, index, value, 0};
  /* Short spins between yields for a second (ranks are often oversubscribed), then
   * sleeps, so idle ranks leave the cores to the others. */
  const ulbu_waiter_t wt = {.arg = &x,
                            .check = mpi_sig_check,
                            .expired = mpi_sig_expired,
                            .timeout_ms = c->timeout_ms,
                            .spin = 32,
                            .yield_ms = 1000.0,
                            .sleep_ns = 50000L};
  const ulbu_cond_t cond = {mpi_sig_poll, NULL, &x};
  ul_result_t r = ulbu_wait(&wt, &cond, "wait_signal", NULL);
  if (r != UL_OK) return r;
  /* Make the data that peers put before signalling visible to our loads. */
  int rc = MPI_Win_sync(w->data);
  return rc == MPI_SUCCESS ? UL_OK : mpi_error_set(c, rc, "MPI_Win_sync");
}
