/* Internals of the fake Level Zero loader shared by its source files (fakeze.c,
 * fakeze_mem.c, fakeze_event.c, fakeze_cmdlist.c). */
#ifndef UNILINK_FAKEZE_INT_H
#define UNILINK_FAKEZE_INT_H

#include <level_zero/ze_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FZ_EXPORT __attribute__((visibility("default")))
#define FZ_MAX_DEV 64
#define FZ_MAX_SUB 8
#define FZ_MAX_FILL 128
#define FZ_MAGIC_DRV 0x465a4452u
#define FZ_MAGIC_DEV 0x465a4456u
#define FZ_MAGIC_CTX 0x465a4358u
#define FZ_MAGIC_LIST 0x465a434cu
#define FZ_MAGIC_POOL 0x465a5050u
#define FZ_MAGIC_EVENT 0x465a4556u
#define FZ_MAGIC_VERTEX 0x465a5658u
#define FZ_MAGIC_EDGE 0x465a4547u
#define FZ_MAGIC_IPC 0x46434950u /* inside an IPC handle */

/* ------------------------------------------------------------------ objects */

struct _ze_fabric_vertex_handle_t {
  uint32_t magic;
  int dev;
};

struct _ze_fabric_edge_handle_t {
  uint32_t magic;
  int a, b; /* root device indexes, a < b */
};

struct _ze_device_handle_t {
  uint32_t magic;
  int idx;  /* flat index: roots 0..G-1, then the sub-devices */
  int root; /* root device index (itself for a root) */
  int sub;  /* -1 for a root device */
  _Atomic int lost;
  struct _ze_fabric_vertex_handle_t vertex;
};

struct _ze_driver_handle_t {
  uint32_t magic;
};

struct _ze_context_handle_t {
  uint32_t magic;
};

enum { FZ_EV_RESET = 0, FZ_EV_SIGNALED = 1, FZ_EV_LOST = 2 };

struct _ze_event_handle_t {
  uint32_t magic;
  struct _ze_event_pool_handle_t *pool;
  uint32_t index;
  int created;
  _Atomic int state;
};

struct _ze_event_pool_handle_t {
  uint32_t magic;
  ze_context_handle_t ctx;
  uint32_t count;
  ze_event_pool_flags_t flags;
  int destroyed;
  int refs; /* queued commands that name one of its events (g_ev_mu) */
  struct _ze_event_handle_t *ev;
};

enum { FZ_CMD_COPY, FZ_CMD_FILL, FZ_CMD_BARRIER, FZ_CMD_SIGNAL, FZ_CMD_WAIT, FZ_CMD_RESET };

typedef struct fz_cmd {
  int kind;
  void *dst;
  const void *src;
  size_t size;
  unsigned char pattern[FZ_MAX_FILL];
  size_t pattern_size;
  ze_event_handle_t signal; /* signalled (or reset, FZ_CMD_RESET) when done */
  uint32_t nwait;
  ze_event_handle_t *wait;
  struct fz_cmd *next;
} fz_cmd_t;

struct _ze_command_list_handle_t {
  uint32_t magic;
  ze_context_handle_t ctx;
  struct _ze_device_handle_t *dev;
  uint32_t ordinal;
  int sync;        /* ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS: appends wait for completion */
  size_t max_fill; /* maxMemoryFillPatternSize of its group */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* queue changed / commands retired */
  fz_cmd_t *head, *tail;
  uint64_t appended, retired;
  _Atomic int closing;
  _Atomic int lost;
  _Atomic int in_append; /* detects appends from two threads at once */
  unsigned rng;
  pthread_t th;
  fz_cmd_t *batch[16]; /* the commands the worker is running (under mu) */
  int nbatch;
  struct _ze_command_list_handle_t *gprev, *gnext; /* g_lists */
};

typedef struct fz_alloc {
  void *base;
  size_t size;
  ze_memory_type_t type;
  ze_context_handle_t ctx;
  int dev; /* reported device index, -1 none */
  int ipc; /* opened with zeMemOpenIpcHandle */
  uint64_t id;
} fz_alloc_t;

/* What an IPC handle carries. The descriptor comes first: the ze backend ships
 * data[0..3] over SCM_RIGHTS and writes the receiver's own number back there. */
typedef struct fz_ipc {
  int32_t fd;
  uint32_t magic;
  uint64_t size;
  int32_t device; /* physical owner (flat index) */
  int32_t pid;    /* exporter, for messages */
  uint64_t id;
} fz_ipc_t;
_Static_assert(sizeof(fz_ipc_t) <= ZE_MAX_IPC_HANDLE_SIZE, "IPC handle too small");

#define FZ_CHECK_INIT()                                                  \
  do {                                                                   \
    if (!atomic_load(&g_inited)) return ZE_RESULT_ERROR_UNINITIALIZED;   \
  } while (0)

/* fakeze.c: state (see there) */
extern _Atomic int g_inited;
extern int g_ngpu, g_nsub, g_ndev;
extern unsigned g_delay_us, g_seed;
extern int g_reorder, g_copy_group, g_fabric, g_pageable, g_have_vm;
extern struct _ze_device_handle_t g_dev[FZ_MAX_DEV * (1 + FZ_MAX_SUB)];
extern pthread_mutex_t g_ev_mu;
extern pthread_cond_t g_ev_cv;
extern _Atomic int g_live_lists, g_live_pools, g_live_events, g_live_ctx, g_dropped, g_violations;
extern _Atomic int g_ipc_out;
extern pthread_mutex_t g_lists_mu;
extern struct _ze_command_list_handle_t *g_lists;
extern pthread_rwlock_t g_mem_rw;

/* fakeze.c: helpers */
void fz_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fz_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
struct _ze_device_handle_t *fz_dev(ze_device_handle_t h);
int fz_can_access(int a, int b);
uint32_t fz_ngroups(void);
void fz_group(uint32_t ordinal, ze_command_queue_group_properties_t *g);
int fz_ctx_ok(ze_context_handle_t c);

/* fakeze_mem.c: the allocation table */
int fz_alloc_find(const void *ptr, fz_alloc_t *out);

/* fakeze_event.c */
void fz_pool_free(ze_event_pool_handle_t p);
int fz_ev_ok(ze_event_handle_t e);
void fz_ev_set(ze_event_handle_t e, int state);

#endif
