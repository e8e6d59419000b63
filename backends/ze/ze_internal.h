/* ze backend internals: the types every file of the backend shares and the functions
 * they call across files. The design is described at the top of ze_backend.c. */
#ifndef UL_ZE_INTERNAL_H
#define UL_ZE_INTERNAL_H

#include <level_zero/ze_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <unilink/backend.h>

#include "backend_util.h"
#include "ze_common.h"
#include "ze_ipc.h"

#define ZE_ID_MAGIC 0x5a45424bu /* "ZEBK" */
#define ZE_SLOT_BYTES 512
#define ZE_NEVENTS 512
#define ZE_DRAIN_EVENT ZE_NEVENTS /* one more event in the pool, for teardown only */
#define ZE_DRAIN_MAX_MS 10000     /* longest teardown wait for the device */
#define ZE_MAX_DEVICES 64

/* ------------------------------------------------------------ process state */

typedef struct ze_devinfo {
  ze_device_handle_t h;
  int root, sub; /* sub = -1 for a root device */
  uint8_t uuid[16];
  double clock_mhz;
  uint32_t copy_ordinal;
  int copy_is_compute; /* no copy-only group: the copy runs on a compute engine */
  char name[64];
} ze_devinfo_t;

/* ze_backend.c: one driver and context per process, shared by every communicator. */
extern ze_driver_handle_t ze_drv;
extern ze_context_handle_t ze_ctx;
extern ze_devinfo_t ze_devs[ZE_MAX_DEVICES];
extern int ze_ndev;
extern int ze_have_bw_ext, ze_have_fabric_ext;

/* Newer loaders convert between IPC handles and descriptors; older ones do not export
 * these, then the descriptor is the first int of the handle (Intel's layout). */
typedef ze_result_t (*ze_fd_from_handle_fn)(ze_context_handle_t, ze_ipc_mem_handle_t, uint64_t *);
typedef ze_result_t (*ze_handle_from_fd_fn)(ze_context_handle_t, uint64_t, ze_ipc_mem_handle_t *);
extern ze_fd_from_handle_fn ze_fd_from_handle;
extern ze_handle_from_fd_fn ze_handle_from_fd;
/* zeMemPutIpcHandle (spec 1.6+; Debian's 1.4 headers lack it): returns an exported
 * handle to the driver, which may then close the descriptor inside it. */
typedef ze_result_t (*ze_put_ipc_fn)(ze_context_handle_t, ze_ipc_mem_handle_t);
extern ze_put_ipc_fn ze_put_ipc;

/* ------------------------------------------------------------------ types */

typedef struct ze_ident {
  uint64_t host_hash;
  int32_t pid;
  int32_t device;
  uint8_t uuid[16];
  int32_t root, sub;
} ze_ident_t;

typedef struct ze_slot {
  ze_ident_t ident;
  int32_t p2p_ok;
  int32_t has_ipc;
  uint8_t ipc[ZE_MAX_IPC_HANDLE_SIZE];
  uint64_t ipc_offset, raw_base, size;
  char why[160];
} ze_slot_t;
_Static_assert(sizeof(ze_slot_t) <= ZE_SLOT_BYTES, "slot too small");

struct ul_backend_stream {
  ul_backend_comm_t *c;
  ze_command_list_handle_t list;
  pthread_mutex_t lock; /* recursive: appends to list come from one thread at a time */
  struct ul_backend_stream *next; /* the communicator's streams (not the internal one) */
  int owned;
  int dirty;          /* commands since the last barrier */
  uint64_t ops;       /* commands appended so far */
  int probe;          /* event of stream_query, -1 none */
  uint64_t probe_ops; /* ops when the probe was appended */
  uint64_t done_ops;  /* ops known complete (a synchronize or a probe saw them finish) */
};

typedef struct ze_pending {
  int ev;
  int done; /* delivered (out of ring order, when another list was stalled) */
  _Atomic uint64_t *cell;
  ze_command_list_handle_t list;
} ze_pending_t;

struct ul_backend_comm {
  ul_comm_t core;
  int rank, nranks, device;
  int timeout_ms;
  const volatile int *abort_flag;
  volatile int dead;
  ze_device_handle_t dev;
  struct ul_backend_stream internal;
  int same_process;
  ulbu_waiter_t waiter; /* every wait: abort, delivery errors, timeout (ze_wait.c) */
  ulbu_board_t board; /* bootstrap: barrier and allgathers */
  ze_ident_t *idents;
  int *peer_dev; /* local device index of each peer, -1 if not visible */
  ul_link_info_t *links;
  unsigned win_seq;
  ulbu_alloc_list_t allocs; /* ul_mem_alloc memory */
  /* events and pending signals */
  ze_event_pool_handle_t pool;
  ze_event_handle_t ev[ZE_NEVENTS + 1]; /* + ZE_DRAIN_EVENT */
  int ev_free[ZE_NEVENTS];
  int ev_nfree;
  ze_pending_t pend[ZE_NEVENTS];
  uint64_t pend_head, pend_tail;
  ze_result_t async_err;
  pthread_mutex_t evlock;
  pthread_cond_t evcond;
  pthread_t progress;
  int progress_started, stop;
  /* host staging for reductions */
  pthread_mutex_t stage_lock;
  void *stage_a, *stage_b;
  size_t stage_bytes;
  /* everything destroy must release */
  pthread_mutex_t objlock;
  ul_backend_window_t *windows;
  struct ul_backend_stream *streams;
  char path[32];
};

typedef struct ze_peer_win {
  void *dev;       /* peer window in this process's address space */
  void *ipc_base;  /* opened IPC allocation (to close) */
  char *seg;       /* peer's signal segment mapped here */
} ze_peer_win_t;

struct ul_backend_window {
  void *base;
  size_t size;
  int nsig;
  size_t seg_len;
  ze_peer_win_t *peers;
  int exported; /* ipc came from zeMemGetIpcHandle: returned to the driver at free */
  ze_ipc_mem_handle_t ipc;
  void *alloc_base; /* the allocation ipc is of */
  struct ul_backend_window *next; /* the communicator's windows */
};

static inline int ze_aborted(ul_backend_comm_t *c) {
  return c->dead || (c->abort_flag && *c->abort_flag);
}

static inline struct ul_backend_stream *ze_st(ul_backend_comm_t *c, ul_backend_stream_t *s) {
  return s ? s : &c->internal;
}

/* ------------------------------------------- ze_wait.c: errors, waits, exchange */

/* Record "ze backend: <call>: <result>" on c and return the mapped result. */
ul_result_t ze_fail(ul_backend_comm_t *c, const char *call, ze_result_t r);
/* c->waiter: the GPU backoff, c's timeout, abort and a failed signal delivery. */
void ze_waiter_init(ul_backend_comm_t *c);
/* Publish *mine, then read every rank's slot into all[] (collective). */
ul_result_t ze_allgather(ul_backend_comm_t *c, const ze_slot_t *mine, ze_slot_t *all,
                         const char *what);

/* ------------------------------------------------------- ze_comm.c */
ul_result_t ze_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                         ul_backend_comm_props_t *props);
ul_result_t ze_comm_init_all(const ul_backend_comm_args_t *args, int ndev,
                             ul_backend_comm_t **out, ul_backend_comm_props_t *props);
ul_result_t ze_comm_finalize(ul_backend_comm_t *c);
ul_result_t ze_comm_destroy(ul_backend_comm_t *c);
ul_result_t ze_comm_abort(ul_backend_comm_t *c);
ul_result_t ze_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out);

/* ------------------------------------------------------- ze_wait.c: events, lists */

void ze_progress(ul_backend_comm_t *c);
/* 1 while a signal appended to list is not delivered yet. */
int ze_pending_on(ul_backend_comm_t *c, ze_command_list_handle_t list);
/* Queue a signal whose barrier signals event ev: one more in *cell once delivered. */
void ze_pend_add(ul_backend_comm_t *c, int ev, _Atomic uint64_t *cell,
                 ze_command_list_handle_t list);
void *ze_progress_main(void *arg);
ul_result_t ze_event_get(ul_backend_comm_t *c, int *idx);
void ze_event_put(ul_backend_comm_t *c, int idx);
struct ul_backend_stream *ze_lock(ul_backend_comm_t *c, ul_backend_stream_t *s);
void ze_unlock(struct ul_backend_stream *st);
void ze_stream_lock_init(struct ul_backend_stream *st);
ul_result_t ze_order(ul_backend_comm_t *c, struct ul_backend_stream *st);
ul_result_t ze_copy(ul_backend_comm_t *c, struct ul_backend_stream *st, void *dst,
                    const void *src, size_t bytes, const char *what);
ul_result_t ze_list_sync(ul_backend_comm_t *c, struct ul_backend_stream *st, int timeout_ms);
ul_result_t ze_done(ul_backend_comm_t *c, ul_backend_stream_t *s);
ul_result_t ze_list_create(ul_backend_comm_t *c, ze_command_list_handle_t *out);
int ze_list_drain(ul_backend_comm_t *c, ze_command_list_handle_t list);
ul_result_t ze_stream_create(ul_backend_comm_t *c, ul_backend_stream_t **out);
ul_result_t ze_stream_wrap(ul_backend_comm_t *c, void *native, ul_backend_stream_t **out);
ul_result_t ze_stream_synchronize(ul_backend_stream_t *s, int timeout_ms);
ul_result_t ze_stream_query(ul_backend_stream_t *s);
ul_result_t ze_stream_destroy(ul_backend_stream_t *s);

/* ------------------------------------------------------- ze_mem.c */

ul_result_t ze_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr);
ul_result_t ze_mem_free(ul_backend_comm_t *c, void *ptr);
/* Free a window's host side; device_idle: also close IPC mappings and return exported
 * handles (only when no list can still touch them). */
void ze_window_free(ul_backend_comm_t *c, ul_backend_window_t *w, int device_idle);
ul_result_t ze_window_register(ul_backend_comm_t *c, void *base, size_t size, int extra_signals,
                               ul_backend_window_t **out, void **peer_bases);
ul_result_t ze_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w);
ul_result_t ze_mem_kind(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                        ul_backend_mem_kind_t *kind);
ul_result_t ze_mem_copy(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                        ul_backend_stream_t *s);
ul_result_t ze_mem_set(ul_backend_comm_t *c, void *dst, int value, size_t bytes,
                       ul_backend_stream_t *s);

/* ------------------------------------------------------- ze_p2p.c */

ul_result_t ze_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                   const void *src, size_t bytes, ul_backend_stream_t *s);
ul_result_t ze_get(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off, void *dst,
                   size_t bytes, ul_backend_stream_t *s);
ul_result_t ze_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, int index,
                      ul_backend_stream_t *s);
ul_result_t ze_wait_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                           uint64_t value, ul_backend_stream_t *s);
ul_result_t ze_read_signal(ul_backend_comm_t *c, ul_backend_window_t *w, int index,
                           uint64_t *value);
ul_result_t ze_reduce_local(ul_backend_comm_t *c, void *dst, const void *a, const void *b,
                            size_t count, ul_dtype_t dtype, ul_op_t op, ul_backend_stream_t *s);
ul_result_t ze_scale_avg(ul_backend_comm_t *c, void *buf, size_t count, ul_dtype_t dtype,
                         int nranks, ul_backend_stream_t *s);
ul_result_t ze_copy_local(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                          ul_backend_stream_t *s);
/* One copy on s (s NULL: the internal list, completed before returning). */
ul_result_t ze_copy_on(ul_backend_comm_t *c, void *dst, const void *src, size_t bytes,
                       ul_backend_stream_t *s, const char *what);

/* ------------------------------------------------------- ze_driver.c */

ul_result_t ze_init(char *reason, size_t reason_len);
void ze_fini(void);
ul_result_t ze_query_caps(ul_backend_caps_t *caps);
ul_result_t ze_get_unique_id(unsigned char *payload, size_t bytes);

#endif
