/* Helpers shared by backend plugins (cuda, nccl, ze): the pieces whose logic is the
 * same in each, so that each exists once. Error sentences start with the backend's
 * "who" ("cuda backend") so messages read exactly as each backend wrote them. */
#ifndef UL_BACKEND_UTIL_H
#define UL_BACKEND_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <unilink/backend.h>

#include "wait.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ waiting */

/* The GPU backends' backoff (wait.h): yield for the first millisecond (latency), then
 * sleep 20 us between polls (CPU). */
#define ULBU_GPU_YIELD_MS 1.0
#define ULBU_GPU_SLEEP_NS 20000L

/* A waiter with the GPU backends' backoff. */
ulbu_waiter_t ulbu_gpu_waiter(void *arg, ul_result_t (*check)(void *, double, const char *),
                              ul_result_t (*expired)(void *, int, const char *), int timeout_ms);
/* UL_ERR_ABORTED with "rank R: <what>: communicator was aborted". */
ul_result_t ulbu_aborted_error(ul_comm_t core, int rank, const char *what);
/* UL_ERR_TIMEOUT with "rank R: <what> did not complete within T ms". */
ul_result_t ulbu_timeout_error(ul_comm_t core, int rank, const char *what, int timeout_ms);

/* ------------------------------------------------------------- signal cells */

/* Host-visible signal cells: one 64-bit counter per (signal index, sender) in memory
 * every rank maps, written only by its sender, so no cross-device atomics are needed.
 * A signal's count is the sum of its n cells (acquire: the data behind a count read
 * is visible to the reads that follow). */
uint64_t ulbu_cells_sum(const void *cells, int n);
/* Wait until the count of the cells reaches value, with the backend's waiter; progress
 * (may be NULL) runs between polls (this rank's own undelivered signals may be what a
 * peer waits for). A timeout says "rank R: signal I of the window stayed at S < V for
 * T ms". */
ul_result_t ulbu_cells_wait(const ulbu_waiter_t *w, ul_comm_t core, int rank, int index,
                            const void *cells, int n, uint64_t value, void (*progress)(void *),
                            void *progress_arg);

/* --------------------------------------------------------------- allocations */

/* The ul_mem_alloc allocations of one communicator: pointer, size and a tag the
 * backend gives meaning to (e.g. which allocator made it), under a mutex. */
typedef struct ulbu_alloc {
  void *ptr;
  size_t size;
  int tag;
  struct ulbu_alloc *next;
} ulbu_alloc_t;

typedef struct ulbu_alloc_list {
  pthread_mutex_t lock;
  ulbu_alloc_t *head;
} ulbu_alloc_list_t;

void ulbu_alloc_list_init(ulbu_alloc_list_t *l);
/* Record ptr. UL_ERR_NO_MEMORY ("<who>: out of memory") when the record cannot be made
 * (the caller still owns ptr then). */
ul_result_t ulbu_alloc_add(ulbu_alloc_list_t *l, ul_comm_t core, const char *who, void *ptr,
                           size_t size, int tag);
/* Take ptr out of the list. UL_ERR_INVALID_ARG with "<who>: ul_mem_free: <ptr> was not
 * allocated by ul_mem_alloc on this communicator" when it is not there; else UL_OK and
 * *tag (if non-NULL) gets its tag. */
ul_result_t ulbu_alloc_remove(ulbu_alloc_list_t *l, ul_comm_t core, const char *who, void *ptr,
                              int *tag);
/* Offset of ptr inside the recorded allocation holding it; 0 when none holds it. */
uint64_t ulbu_alloc_offset(ulbu_alloc_list_t *l, const void *ptr);
/* Hand every remaining allocation to release (communicator teardown), then destroy
 * the mutex. release may be NULL. */
void ulbu_alloc_list_destroy(ulbu_alloc_list_t *l, void (*release)(void *ptr, int tag, void *arg),
                             void *arg);

/* --------------------------------------------------------------- unique ids */

/* The unique-id payload of backends that bootstrap over a shared-memory board: a magic
 * and 16 random bytes that name the board. */
typedef struct ulbu_token_id {
  unsigned magic;
  unsigned char token[16];
} ulbu_token_id_t;

/* Fill payload (bytes, zeroed first) with a fresh token id. UL_ERR_SYSTEM ("<who>:
 * cannot read /dev/urandom") when no random bytes could be read. */
ul_result_t ulbu_token_id_make(unsigned char *payload, size_t bytes, unsigned magic,
                               const char *who);
/* Read the token id of comm args. UL_ERR_INVALID_ARG when too small ("<who>: id payload
 * too small") or of another backend ("<who>: the unique id was not made by the
 * <name> backend"). */
ul_result_t ulbu_token_id_read(const ul_backend_comm_args_t *a, unsigned magic, const char *who,
                               const char *name, ulbu_token_id_t *out);

/* ------------------------------------------------------------ shm segments */

/* Create a new POSIX shm segment of len bytes (O_EXCL, 0600). On failure: "<who>: shm
 * segment <name>: <errno>" (UL_ERR_SYSTEM) and no name left behind. */
ul_result_t ulbu_shm_create(ul_comm_t core, const char *who, const char *name, size_t len);
/* Map an existing segment read/write. UL_ERR_SYSTEM "<who>: open <name>: ..." or
 * "<who>: mmap <name>: ..." on failure. */
ul_result_t ulbu_shm_map(ul_comm_t core, const char *who, const char *name, size_t len, void **out);

/* -------------------------------------------------------------------- board */

/* Bootstrap of ranks on one host: a POSIX shm "board" named by the token (0600,
 * unlinked once every rank joined): a header with a barrier, then one slot per rank
 * for allgathers. */
#define ULBU_BOARD_HDR_BYTES 4096

typedef struct ulbu_board_hdr {
  _Atomic unsigned ready;
  _Atomic int joined;
  _Atomic unsigned bar_count;
  _Atomic unsigned bar_gen;
  int nranks;
} ulbu_board_hdr_t;

/* What differs between backends' boards (a static const table per backend). */
typedef struct ulbu_board_conf {
  const char *who;        /* "cuda backend": error sentences */
  const char *prefix;     /* "ulcuda": segment names "/<prefix>-<token>-..." */
  size_t slot_bytes;      /* bytes of one rank's slot */
  int rank0_unlinks;      /* rank 0 unlinks the name too (not only its creator) */
} ulbu_board_conf_t;

typedef struct ulbu_board {
  const ulbu_board_conf_t *conf;
  const ulbu_waiter_t *waiter; /* how this backend waits (timeout, abort, its sentences) */
  ul_comm_t core;
  int rank, nranks;
  char token_hex[33];
  ulbu_board_hdr_t *hdr;
  size_t len;
} ulbu_board_t;

/* Name of a segment of this board's family: "/<prefix>-<token>-<what><a>-<b>". */
void ulbu_board_name(const ulbu_board_t *b, char *buf, size_t len, const char *what, int a, int b2);
/* Create or join the board of token (collective over nranks ranks); every wait goes
 * through waiter (kept: it must outlive the board). */
ul_result_t ulbu_board_join(ulbu_board_t *b, const ulbu_board_conf_t *conf,
                            const ulbu_waiter_t *waiter,
                            ul_comm_t core, int rank, int nranks, const unsigned char token[16]);
/* Barrier over the board's ranks. */
ul_result_t ulbu_board_barrier(ulbu_board_t *b, const char *what);
/* Publish mine (slot_bytes at most) in this rank's slot, then copy every rank's slot
 * into all[r * bytes] (collective). */
ul_result_t ulbu_board_allgather(ulbu_board_t *b, const void *mine, void *all, size_t bytes,
                                 const char *what);
/* Unmap (communicator teardown); safe on a board that never joined. */
void ulbu_board_leave(ulbu_board_t *b);

#ifdef __cplusplus
}
#endif
#endif
