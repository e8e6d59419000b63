/* cuda backend: communicator lifecycle (init, init_all, finalize, destroy, abort,
 * topology) and native CUDA streams. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <unilink/backend.h>

#include "backend_util.h"
#include "gpu_common.h"
#include "gpu_stream.h"
#include "gpu_topo.h"
#ifdef UNILINK_CUDA_KERNELS
#include "cuda_kernels.h"
#endif
#include "cuda_internal.h"

int cuda_ndev; /* set by cuda_init (cuda_backend.c) */

ul_result_t cuda_get_unique_id(unsigned char *payload, size_t bytes) {
  return ulbu_token_id_make(payload, bytes, CUDA_ID_MAGIC, "cuda backend");
}

static void cuda_alloc_release(void *ptr, int tag, void *arg) {
  (void)tag, (void)arg;
  cudaFree(ptr);
}

/* Local teardown: every window still registered (the generic layer never deregisters
 * its scratch window), every allocation, the stream and the board. */
static void cuda_comm_free(ul_backend_comm_t *c) {
  if (!c) return;
  int prev = -1;
  int entered = c->device >= 0 && c->device < cuda_ndev && cuda_enter(c, &prev) == UL_OK;
  if (c->internal) {
    /* Our queued work never waits for a peer (waits are host polls), so it ends; let
     * it finish before the segments and windows it copies into go away. */
    cudaStreamSynchronize(c->internal);
    cudaStreamDestroy(c->internal);
  }
  pthread_mutex_lock(&c->win_lock);
  ul_backend_window_t *w = c->windows;
  c->windows = NULL;
  pthread_mutex_unlock(&c->win_lock);
  while (w) {
    ul_backend_window_t *next = w->next;
    cuda_window_free(c, w);
    w = next;
  }
  if (c->sig_ev) cudaEventDestroy(c->sig_ev);
  ulbu_alloc_list_destroy(&c->allocs, cuda_alloc_release, NULL);
  ulbu_board_leave(&c->board);
  if (entered) cuda_leave(c, prev);
  pthread_mutex_destroy(&c->win_lock);
  pthread_mutex_destroy(&c->sig_lock);
  free(c->idents);
  free(c->peer_dev);
  free(c);
}

/* One rank's init. init_abort (comm_init_all: set when a sibling rank failed) makes the
 * board waits give up early; NULL for ul_comm_init_rank. */
static ul_result_t cuda_comm_init_on(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                     ul_backend_comm_props_t *props,
                                     const volatile int *init_abort) {
  *out = NULL;
  ulbu_token_id_t p;
  ul_result_t prc = ulbu_token_id_read(a, CUDA_ID_MAGIC, "cuda backend", "cuda", &p);
  if (prc != UL_OK) return prc;
  ulgpu_path_t want;
  const char *ptxt = ul_backend_param_str("CUDA_PATH", "auto",
                                          "cuda backend data path: auto | p2p (peer access, NVLink "
                                          "or PCIe P2P) | staged (through pinned host memory)");
  if (ulgpu_parse_path(ptxt, &want) != UL_OK)
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "cuda backend: UNILINK_CUDA_PATH='%s' is not auto, p2p or staged",
                                ptxt);
  ul_backend_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  c->core = a->comm;
  c->rank = a->rank;
  c->nranks = a->nranks;
  c->timeout_ms = a->timeout_ms;
  c->abort_flag = a->abort_flag;
  c->init_abort = init_abort;
  cuda_waiter_init(c);
  /* The caller's device exactly (ul_comm_split passes the parent's); only an unset
   * device falls back to rank % visible devices. */
  c->device = a->device != UL_CONFIG_UNDEF ? a->device : (cuda_ndev ? a->rank % cuda_ndev : 0);
  ulbu_alloc_list_init(&c->allocs);
  pthread_mutex_init(&c->win_lock, NULL);
  pthread_mutex_init(&c->sig_lock, NULL);
  ul_result_t rc = UL_OK, st = UL_OK;
  cuda_slot_t mine, *all = NULL;
  cudaError_t e;
  int prev = -1, entered = 0;
  c->idents = calloc((size_t)c->nranks, sizeof(*c->idents));
  c->peer_dev = calloc((size_t)c->nranks, sizeof(int));
  all = calloc((size_t)c->nranks, sizeof(*all));
  if (!c->idents || !c->peer_dev || !all) {
    rc = ul_backend_set_error(a->comm, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
    goto fail;
  }
  if ((rc = ulbu_board_join(&c->board, &cuda_board_conf, &c->waiter, c->core, c->rank, c->nranks,
                           p.token)) != UL_OK)
    goto fail;
  /* Local setup; its status goes into the first allgather so that every rank fails
   * together when one cannot start. */
  memset(&mine, 0, sizeof(mine));
  if (c->device < 0 || c->device >= cuda_ndev) {
    st = ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                              "cuda backend: device %d out of range (%d visible)", c->device,
                              cuda_ndev);
  } else if ((st = cuda_enter(c, &prev)) == UL_OK) {
    entered = 1;
    /* Blocking stream: ordered after the caller's legacy default stream (header). */
    if ((e = cudaStreamCreateWithFlags(&c->internal, cudaStreamDefault)) != cudaSuccess)
      st = cuda_fail(c, "cudaStreamCreateWithFlags", e);
    else if ((st = ulgpu_ident_get(c->device, &mine.ident)) != UL_OK)
      st = ul_backend_set_error(a->comm, st, "cuda backend: cannot read GPU %d", c->device);
  }
  cuda_status(c, &mine, st);
  if ((rc = cuda_allgather(c, &mine, all, "comm init")) != UL_OK) goto fail;
  if ((rc = cuda_agree(c, all, "comm init")) != UL_OK) goto fail;
  /* Which peers can this GPU reach with peer access? Peer access is enabled here,
   * before the path is agreed, so that a GPU pair that claims access but cannot enable
   * it (too many peers on PCIe) makes the communicator staged instead of failing. */
  mine.p2p_ok = 1;
  c->same_process = 1;
  for (int r = 0; r < c->nranks; r++) {
    c->idents[r] = all[r].ident;
    if (all[r].ident.pid != mine.ident.pid) c->same_process = 0;
    if (all[r].ident.host_hash != mine.ident.host_hash && st == UL_OK)
      st = ul_backend_set_error(a->comm, UL_ERR_UNSUPPORTED,
                                "cuda backend: rank %d is on another host; the cuda backend "
                                "connects GPUs of one host (use nccl or mpi)", r);
    char bus[32];
    snprintf(bus, sizeof(bus), "%04x:%02x:%02x.0", (unsigned)all[r].ident.pci_domain,
             (unsigned)all[r].ident.pci_bus, (unsigned)all[r].ident.pci_dev);
    int d = -1;
    if (cudaDeviceGetByPCIBusId(&d, bus) != cudaSuccess) {
      cudaGetLastError();
      d = -1;
    }
    c->peer_dev[r] = d;
    if (r == c->rank || d == c->device) continue;
    int can = 0;
    if (d < 0 || cudaDeviceCanAccessPeer(&can, c->device, d) != cudaSuccess || !can) {
      cudaGetLastError();
      mine.p2p_ok = 0;
      continue;
    }
    if (want == ULGPU_PATH_STAGED) continue;
    e = cudaDeviceEnablePeerAccess(d, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError(); /* clear, it is fine */
    } else if (e != cudaSuccess) {
      cudaGetLastError();
      ul_backend_log(UL_LOG_INFO, "cuda", "rank %d GPU %d: cudaDeviceEnablePeerAccess(%d): %s",
                     c->rank, c->device, d, cudaGetErrorString(e));
      mine.p2p_ok = 0;
    }
  }
  /* Agree on the path: p2p only if every rank reaches every peer. */
  cuda_status(c, &mine, st);
  if ((rc = cuda_allgather(c, &mine, all, "comm init")) != UL_OK) goto fail;
  if ((rc = cuda_agree(c, all, "comm init")) != UL_OK) goto fail;
  int all_p2p = 1;
  for (int r = 0; r < c->nranks; r++) all_p2p &= all[r].p2p_ok;
  char why[160];
  /* Same inputs on every rank: the same answer, no agreement needed. */
  if ((rc = ulgpu_choose_path(want, all_p2p, &c->path, why, sizeof(why))) != UL_OK) {
    rc = ul_backend_set_error(a->comm, rc, "cuda backend: %s", why);
    goto fail;
  }
  ul_backend_log(UL_LOG_INFO, "cuda", "rank %d GPU %d: path %s (%s)", c->rank, c->device,
                 ulgpu_path_name(c->path), why);
  free(all);
  if (props) {
    /* Pointers of one rank are usable by the others only within one process, with
     * peer access (UVA); the core still moves them through copy_local/reduce_local. */
    props->load_store_peers = c->same_process && c->path == ULGPU_PATH_P2P;
    snprintf(props->path, sizeof(props->path), "%s", ulgpu_path_name(c->path));
    /* The device actually used (ul_comm_device; ul_comm_split keeps the child on it). */
    if (props->struct_size >= offsetof(ul_backend_comm_props_t, device) + sizeof(props->device))
      props->device = c->device;
  }
  c->init_abort = NULL; /* points into comm_init_all's frame */
  if (entered) cuda_leave(c, prev);
  *out = c;
  return UL_OK;
fail:
  free(all);
  if (entered) cuda_leave(c, prev);
  cuda_comm_free(c);
  return rc;
}

ul_result_t cuda_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                           ul_backend_comm_props_t *props) {
  return cuda_comm_init_on(a, out, props, NULL);
}

/* comm_init_all: one process drives every rank (rank i on args[i].device). The ranks
 * join one board of a fresh token, each from its own thread (init is collective); a
 * rank that fails sets `failed`, which ends its siblings' waits at once. */
typedef struct cuda_init_job {
  ul_backend_comm_args_t a;
  ul_backend_comm_t *out;
  ul_backend_comm_props_t *props;
  volatile int *failed;
  ul_result_t rc;
} cuda_init_job_t;

static void *cuda_init_thread(void *arg) {
  cuda_init_job_t *j = arg;
  j->rc = cuda_comm_init_on(&j->a, &j->out, j->props, j->failed);
  if (j->rc != UL_OK) __atomic_store_n(j->failed, 1, __ATOMIC_RELEASE);
  return NULL;
}

ul_result_t cuda_comm_init_all(const ul_backend_comm_args_t *args, int ndev,
                               ul_backend_comm_t **out, ul_backend_comm_props_t *props) {
  for (int i = 0; i < ndev; i++) out[i] = NULL;
  unsigned char payload[UL_BACKEND_ID_PAYLOAD_BYTES];
  ul_result_t rc = cuda_get_unique_id(payload, sizeof(payload));
  if (rc != UL_OK)
    return ul_backend_set_error(args[0].comm, rc, "cuda backend: ul_comm_init_all: %s",
                                ul_last_error());
  cuda_init_job_t *jobs = calloc((size_t)ndev, sizeof(*jobs));
  pthread_t *th = calloc((size_t)ndev, sizeof(*th));
  int *started = calloc((size_t)ndev, sizeof(int));
  if (!jobs || !th || !started) {
    free(jobs), free(th), free(started);
    return ul_backend_set_error(args[0].comm, UL_ERR_NO_MEMORY, "cuda backend: out of memory");
  }
  volatile int failed = 0;
  for (int i = 0; i < ndev; i++) {
    jobs[i].a = args[i];
    jobs[i].a.id_payload = payload;
    jobs[i].a.id_payload_bytes = sizeof(payload);
    jobs[i].props = props ? &props[i] : NULL;
    jobs[i].failed = &failed;
    jobs[i].rc = UL_OK;
  }
  for (int i = 0; i < ndev; i++) {
    started[i] = pthread_create(&th[i], NULL, cuda_init_thread, &jobs[i]) == 0;
    if (!started[i]) {
      jobs[i].rc = ul_backend_set_error(args[i].comm, UL_ERR_SYSTEM,
                                        "cuda backend: ul_comm_init_all: cannot start a thread "
                                        "for rank %d",
                                        i);
      __atomic_store_n(&failed, 1, __ATOMIC_RELEASE);
    }
  }
  for (int i = 0; i < ndev; i++)
    if (started[i]) pthread_join(th[i], NULL);
  /* Report the rank that failed first: prefer a real cause over "aborted" siblings. */
  int first = -1;
  for (int i = 0; i < ndev; i++)
    if (jobs[i].rc != UL_OK && (first < 0 || (jobs[first].rc == UL_ERR_ABORTED &&
                                               jobs[i].rc != UL_ERR_ABORTED)))
      first = i;
  if (first >= 0) {
    rc = jobs[first].rc;
    for (int i = 0; i < ndev; i++) cuda_comm_free(jobs[i].out);
    if (first != 0) {
      char msg[512];
      snprintf(msg, sizeof(msg), "%s", ul_comm_last_error(args[first].comm));
      ul_backend_set_error(args[0].comm, rc, "%s", msg);
    }
  } else {
    for (int i = 0; i < ndev; i++) out[i] = jobs[i].out;
  }
  free(jobs), free(th), free(started);
  return rc;
}

ul_result_t cuda_comm_finalize(ul_backend_comm_t *c) {
  ul_result_t rc = cuda_stream_wait(c, c->internal, c->timeout_ms);
  if (rc != UL_OK) return rc;
  return ulbu_board_barrier(&c->board, "comm finalize");
}

ul_result_t cuda_comm_destroy(ul_backend_comm_t *c) {
  cuda_comm_free(c);
  return UL_OK;
}

ul_result_t cuda_comm_abort(ul_backend_comm_t *c) {
  c->dead = 1;
  return UL_OK;
}

ul_result_t cuda_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  out->peer = peer;
  ulgpu_topology(&c->idents[c->rank], &c->idents[peer], peer == c->rank, out);
  return UL_OK;
}

/* ----------------------------------------------------------------- streams */

ul_result_t cuda_stream_create(ul_backend_comm_t *c, ul_backend_stream_t **out) {
  CUDA_ON_DEVICE(c, ulgpu_stream_create(c, c->core, "cuda backend", c->device, out));
}

ul_result_t cuda_stream_wrap(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out) {
  return ulgpu_stream_wrap(c, c->core, "cuda backend", native, out);
}

ul_result_t cuda_stream_synchronize(ul_backend_stream_t *s, int timeout_ms) {
  return cuda_stream_wait(s->c, s->s, timeout_ms);
}

ul_result_t cuda_stream_query(ul_backend_stream_t *s) {
  cudaError_t e = cudaStreamQuery(s->s);
  if (e == cudaErrorNotReady) return UL_IN_PROGRESS;
  if (e != cudaSuccess) return cuda_fail(s->c, "cudaStreamQuery", e);
  return UL_OK;
}

static ul_result_t cuda_stream_destroy_on(ul_backend_stream_t *s) {
  ul_result_t rc = s->c->dead ? UL_OK : cuda_stream_wait(s->c, s->s, s->c->timeout_ms);
  pthread_mutex_lock(&s->c->sig_lock);
  if (s->c->sig_have_last && s->c->sig_last == s->s) s->c->sig_have_last = 0; /* drained */
  pthread_mutex_unlock(&s->c->sig_lock);
  if (s->owned) cudaStreamDestroy(s->s);
  free(s);
  return rc;
}

ul_result_t cuda_stream_destroy(ul_backend_stream_t *s) {
  ul_backend_comm_t *c = s->c;
  CUDA_ON_DEVICE(c, cuda_stream_destroy_on(s));
}
