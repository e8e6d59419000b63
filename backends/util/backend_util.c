/* Helpers shared by backend plugins (see backend_util.h). */
#define _GNU_SOURCE
#include "backend_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ waiting */

ulbu_waiter_t ulbu_gpu_waiter(void *arg, ul_result_t (*check)(void *, double, const char *),
                              ul_result_t (*expired)(void *, int, const char *), int timeout_ms) {
  ulbu_waiter_t w = {.arg = arg,
                     .check = check,
                     .expired = expired,
                     .timeout_ms = timeout_ms,
                     .yield_ms = ULBU_GPU_YIELD_MS,
                     .sleep_ns = ULBU_GPU_SLEEP_NS};
  return w;
}

ul_result_t ulbu_aborted_error(ul_comm_t core, int rank, const char *what) {
  return ul_backend_set_error(core, UL_ERR_ABORTED, "rank %d: %s: communicator was aborted", rank,
                              what);
}

ul_result_t ulbu_timeout_error(ul_comm_t core, int rank, const char *what, int timeout_ms) {
  return ul_backend_set_error(core, UL_ERR_TIMEOUT, "rank %d: %s did not complete within %d ms",
                              rank, what, timeout_ms);
}

/* ------------------------------------------------------------- signal cells */

uint64_t ulbu_cells_sum(const void *cells, int n) {
  const uint64_t *c = cells;
  uint64_t sum = 0;
  for (int r = 0; r < n; r++) sum += __atomic_load_n(&c[r], __ATOMIC_ACQUIRE);
  return sum;
}

typedef struct ulbu_cells_cond {
  const void *cells;
  int n;
  uint64_t value;
  void (*progress)(void *);
  void *progress_arg;
} ulbu_cells_cond_t;

static ul_result_t ulbu_cells_poll(void *arg) {
  ulbu_cells_cond_t *x = arg;
  if (ulbu_cells_sum(x->cells, x->n) >= x->value) return UL_OK;
  if (x->progress) x->progress(x->progress_arg);
  return UL_IN_PROGRESS;
}

ul_result_t ulbu_cells_wait(const ulbu_waiter_t *w, ul_comm_t core, int rank, int index,
                            const void *cells, int n, uint64_t value, void (*progress)(void *),
                            void *progress_arg) {
  ulbu_cells_cond_t x = {cells, n, value, progress, progress_arg};
  const ulbu_cond_t cond = {ulbu_cells_poll, NULL, &x};
  ul_result_t rc = ulbu_wait(w, &cond, "ul_wait_signal", NULL);
  if (rc == UL_ERR_TIMEOUT)
    return ul_backend_set_error(core, rc,
                                "rank %d: signal %d of the window stayed at %llu < %llu for %d ms",
                                rank, index, (unsigned long long)ulbu_cells_sum(cells, n),
                                (unsigned long long)value, w->timeout_ms);
  return rc;
}

/* --------------------------------------------------------------- allocations */

void ulbu_alloc_list_init(ulbu_alloc_list_t *l) {
  pthread_mutex_init(&l->lock, NULL);
  l->head = NULL;
}

ul_result_t ulbu_alloc_add(ulbu_alloc_list_t *l, ul_comm_t core, const char *who, void *ptr,
                           size_t size, int tag) {
  ulbu_alloc_t *a = calloc(1, sizeof(*a));
  if (!a) return ul_backend_set_error(core, UL_ERR_NO_MEMORY, "%s: out of memory", who);
  a->ptr = ptr;
  a->size = size;
  a->tag = tag;
  pthread_mutex_lock(&l->lock);
  a->next = l->head;
  l->head = a;
  pthread_mutex_unlock(&l->lock);
  return UL_OK;
}

ul_result_t ulbu_alloc_remove(ulbu_alloc_list_t *l, ul_comm_t core, const char *who, void *ptr,
                              int *tag) {
  pthread_mutex_lock(&l->lock);
  ulbu_alloc_t **pp = &l->head, *a = NULL;
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->ptr == ptr) {
      a = *pp;
      *pp = a->next;
      break;
    }
  pthread_mutex_unlock(&l->lock);
  if (!a)
    return ul_backend_set_error(core, UL_ERR_INVALID_ARG,
                                "%s: ul_mem_free: %p was not allocated by ul_mem_alloc on this "
                                "communicator", who, ptr);
  if (tag) *tag = a->tag;
  free(a);
  return UL_OK;
}

uint64_t ulbu_alloc_offset(ulbu_alloc_list_t *l, const void *ptr) {
  uint64_t off = 0;
  pthread_mutex_lock(&l->lock);
  for (ulbu_alloc_t *a = l->head; a; a = a->next)
    if ((const char *)ptr >= (const char *)a->ptr && (const char *)ptr < (const char *)a->ptr + a->size) {
      off = (uint64_t)((const char *)ptr - (const char *)a->ptr);
      break;
    }
  pthread_mutex_unlock(&l->lock);
  return off;
}

void ulbu_alloc_list_destroy(ulbu_alloc_list_t *l, void (*release)(void *ptr, int tag, void *arg),
                             void *arg) {
  for (ulbu_alloc_t *a = l->head, *n; a; a = n) {
    n = a->next;
    if (release) release(a->ptr, a->tag, arg);
    free(a);
  }
  l->head = NULL;
  pthread_mutex_destroy(&l->lock);
}

/* --------------------------------------------------------------- unique ids */

ul_result_t ulbu_token_id_make(unsigned char *payload, size_t bytes, unsigned magic,
                               const char *who) {
  ulbu_token_id_t p;
  memset(&p, 0, sizeof(p));
  p.magic = magic;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, p.token, sizeof(p.token)) != (ssize_t)sizeof(p.token)) {
    if (fd >= 0) close(fd);
    return ul_backend_set_error(NULL, UL_ERR_SYSTEM, "%s: cannot read /dev/urandom", who);
  }
  close(fd);
  memset(payload, 0, bytes);
  memcpy(payload, &p, sizeof(p));
  return UL_OK;
}

ul_result_t ulbu_token_id_read(const ul_backend_comm_args_t *a, unsigned magic, const char *who,
                               const char *name, ulbu_token_id_t *out) {
  if (!a->id_payload || a->id_payload_bytes < sizeof(*out))
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG, "%s: id payload too small", who);
  memcpy(out, a->id_payload, sizeof(*out));
  if (out->magic != magic)
    return ul_backend_set_error(a->comm, UL_ERR_INVALID_ARG,
                                "%s: the unique id was not made by the %s backend", who, name);
  return UL_OK;
}

/* ------------------------------------------------------------ shm segments */

ul_result_t ulbu_shm_create(ul_comm_t core, const char *who, const char *name, size_t len) {
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
    ul_result_t rc = ul_backend_set_error(core, UL_ERR_SYSTEM, "%s: shm segment %s: %s", who, name,
                                          strerror(errno));
    if (fd >= 0) close(fd);
    shm_unlink(name);
    return rc;
  }
  close(fd);
  return UL_OK;
}

ul_result_t ulbu_shm_map(ul_comm_t core, const char *who, const char *name, size_t len, void **out) {
  int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0)
    return ul_backend_set_error(core, UL_ERR_SYSTEM, "%s: open %s: %s", who, name, strerror(errno));
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED)
    return ul_backend_set_error(core, UL_ERR_SYSTEM, "%s: mmap %s: %s", who, name, strerror(errno));
  *out = m;
  return UL_OK;
}

/* -------------------------------------------------------------------- board */

void ulbu_board_name(const ulbu_board_t *b, char *buf, size_t len, const char *what, int a, int b2) {
  snprintf(buf, len, "/%s-%s-%s%d-%d", b->conf->prefix, b->token_hex, what, a, b2);
}

typedef struct ulbu_board_gen {
  ulbu_board_hdr_t *h;
  unsigned gen;
} ulbu_board_gen_t;

static ul_result_t ulbu_board_gen_poll(void *arg) {
  ulbu_board_gen_t *x = arg;
  return atomic_load(&x->h->bar_gen) != x->gen ? UL_OK : UL_IN_PROGRESS;
}

ul_result_t ulbu_board_barrier(ulbu_board_t *b, const char *what) {
  ulbu_board_hdr_t *h = b->hdr;
  unsigned gen = atomic_load(&h->bar_gen);
  if (atomic_fetch_add(&h->bar_count, 1) == (unsigned)b->nranks - 1) {
    atomic_store(&h->bar_count, 0);
    atomic_fetch_add(&h->bar_gen, 1);
    return UL_OK;
  }
  ulbu_board_gen_t x = {h, gen};
  const ulbu_cond_t cond = {ulbu_board_gen_poll, NULL, &x};
  return ulbu_wait(b->waiter, &cond, what, NULL);
}

static void *ulbu_board_slot(ulbu_board_t *b, int r) {
  return (char *)b->hdr + ULBU_BOARD_HDR_BYTES + (size_t)r * b->conf->slot_bytes;
}

ul_result_t ulbu_board_allgather(ulbu_board_t *b, const void *mine, void *all, size_t bytes,
                                 const char *what) {
  memcpy(ulbu_board_slot(b, b->rank), mine, bytes);
  ul_result_t rc = ulbu_board_barrier(b, what);
  if (rc != UL_OK) return rc;
  for (int r = 0; r < b->nranks; r++)
    memcpy((char *)all + (size_t)r * bytes, ulbu_board_slot(b, r), bytes);
  return ulbu_board_barrier(b, what); /* slots may be reused after everyone read them */
}

/* Opening the board another rank is creating, once it has its full size. */
typedef struct ulbu_board_open {
  const char *name;
  size_t len;
  int fd;
} ulbu_board_open_t;

static ul_result_t ulbu_board_open_poll(void *arg) {
  ulbu_board_open_t *x = arg;
  x->fd = shm_open(x->name, O_RDWR, 0600); /* the creator may not have made it yet */
  if (x->fd >= 0) {
    struct stat st;
    if (fstat(x->fd, &st) == 0 && (size_t)st.st_size >= x->len) return UL_OK;
    close(x->fd); /* nor sized it */
    x->fd = -1;
  }
  return UL_IN_PROGRESS;
}

static ul_result_t ulbu_board_ready_poll(void *arg) {
  ulbu_board_hdr_t *h = arg;
  return atomic_load(&h->ready) ? UL_OK : UL_IN_PROGRESS;
}

ul_result_t ulbu_board_join(ulbu_board_t *b, const ulbu_board_conf_t *conf,
                            const ulbu_waiter_t *waiter, ul_comm_t core, int rank, int nranks,
                            const unsigned char token[16]) {
  b->conf = conf;
  b->waiter = waiter;
  b->core = core;
  b->rank = rank;
  b->nranks = nranks;
  for (int i = 0; i < 16; i++) snprintf(b->token_hex + 2 * i, 3, "%02x", token[i]);
  char name[96];
  ulbu_board_name(b, name, sizeof(name), "board", 0, 0);
  b->len = ULBU_BOARD_HDR_BYTES + (size_t)b->nranks * b->conf->slot_bytes;
  int creator = 0;
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd >= 0) {
    creator = 1;
    if (ftruncate(fd, (off_t)b->len) != 0) {
      int err = errno;
      close(fd);
      shm_unlink(name);
      return ul_backend_set_error(b->core, UL_ERR_SYSTEM, "%s: ftruncate(%s): %s", b->conf->who, name,
                                  strerror(err));
    }
  } else {
    ulbu_board_open_t x = {name, b->len, -1};
    const ulbu_cond_t cond = {ulbu_board_open_poll, NULL, &x};
    ul_result_t rc = ulbu_wait(b->waiter, &cond, "joining the communicator", NULL);
    if (rc != UL_OK) return rc;
    fd = x.fd;
  }
  void *m = mmap(NULL, b->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    if (creator) shm_unlink(name);
    return ul_backend_set_error(b->core, UL_ERR_SYSTEM, "%s: mmap(%s): %s", b->conf->who, name,
                                strerror(errno));
  }
  b->hdr = m;
  if (creator) {
    b->hdr->nranks = b->nranks;
    atomic_store(&b->hdr->ready, 1);
  } else {
    const ulbu_cond_t cond = {ulbu_board_ready_poll, NULL, b->hdr};
    ul_result_t rc = ulbu_wait(b->waiter, &cond, "joining the communicator", NULL);
    if (rc != UL_OK) return rc;
    if (b->hdr->nranks != b->nranks)
      return ul_backend_set_error(b->core, UL_ERR_INVALID_ARG,
                                  "%s: rank %d joined with nranks %d but the communicator has %d",
                                  b->conf->who, b->rank, b->nranks, b->hdr->nranks);
  }
  atomic_fetch_add(&b->hdr->joined, 1);
  ul_result_t rc = ulbu_board_barrier(b, "joining the communicator");
  /* everyone has it mapped (or timed out) */
  if (creator || (b->conf->rank0_unlinks && b->rank == 0)) shm_unlink(name);
  return rc;
}

void ulbu_board_leave(ulbu_board_t *b) {
  if (b->hdr) munmap(b->hdr, b->len);
  b->hdr = NULL;
}
