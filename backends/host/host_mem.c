/* Memory of the host backend: ul_mem_alloc and windows.
 *
 * Thread mode: plain aligned heap memory (64 B, 2 MiB from 2 MiB up with a huge-page
 * hint); windows may use any memory and peers use each other's pointers directly.
 * Process mode: every allocation is its own 0600 segment named
 * "/unilink-<tag>-<pid>-m<n>", kept named until mem_free or comm_destroy so that one
 * allocation can back several windows; peers map the window's pages of it during
 * window registration.
 *
 * Window registration (collective) uses two barriers over the control area: ranks
 * publish their window (and rank 0 the signal array) before the first, map peers'
 * between the two, and check everyone's result after the second. Each step's status
 * has its own field, so a rank that already left for the next collective cannot
 * overwrite a field a slower rank is about to read. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "host.h"

static _Atomic uint64_t host_mem_serial; /* unique segment names within this process */

/* Thread-mode signal arrays are shared by every rank's window: the last one out frees. */
typedef struct host_sig_block {
  _Atomic int refs;
  char pad[HOST_CACHELINE - sizeof(int)];
  host_slot_t slots[];
} host_sig_block_t;

/* Segment names: "/unilink-<tag>-<pid>-<kind><n>" with n 32 random bits per segment
 * (nonzero), so that another user who reads /dev/shm cannot pre-create the next names
 * (a counter could be squatted: every alloc then failed with EEXIST). Returns n. */
static uint64_t host_mem_name(ul_backend_comm_t *c, char kind, char *name) {
  uint32_t n = 0;
  if (getrandom(&n, sizeof n, GRND_NONBLOCK) != (ssize_t)sizeof n) {
    /* no entropy yet: a counter mixed with the clock (splitmix64 finaliser) */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t z = atomic_fetch_add(&host_mem_serial, 1) * 0x9e3779b97f4a7c15ull ^
                 (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    n = (uint32_t)(z ^ (z >> 31));
  }
  if (n == 0) n = 1;
  snprintf(name, HOST_NAME_MAX_LEN, "/%s%s-%d-%c%llu", HOST_SHM_PREFIX, c->tag_hex, (int)getpid(),
           kind, (unsigned long long)n);
  return n;
}

/* Create a fresh segment of `kind`, retrying with new random names on a collision (a
 * name someone else already holds). */
static ul_result_t host_mem_create(ul_backend_comm_t *c, char kind, char *name, size_t size,
                                   void **addr, size_t *len, uint64_t *serial) {
  ul_result_t rc = UL_ERR_SYSTEM;
  for (int tries = 0; tries < 16; tries++) {
    uint64_t n = host_mem_name(c, kind, name);
    if (serial) *serial = n;
    rc = host_shm_create(c->handle, name, size, 1, addr, len);
    if (rc != UL_ERR_SYSTEM || errno != EEXIST) return rc;
  }
  return rc;
}

static ul_result_t host_mem_track(ul_backend_comm_t *c, const host_alloc_t *a) {
  ul_result_t rc = UL_OK;
  pthread_mutex_lock(&c->lock);
  if (c->nallocs == c->cap_allocs) {
    int cap = c->cap_allocs ? 2 * c->cap_allocs : 16;
    host_alloc_t *n = realloc(c->allocs, (size_t)cap * sizeof *n);
    if (!n) rc = UL_ERR_NO_MEMORY;
    else c->allocs = n, c->cap_allocs = cap;
  }
  if (rc == UL_OK) c->allocs[c->nallocs++] = *a;
  pthread_mutex_unlock(&c->lock);
  return rc;
}

static void host_mem_release(const host_alloc_t *a) {
  if (a->name[0]) {
    munmap(a->ptr, a->map_size);
    host_shm_unlink(a->name);
  } else {
    free(a->ptr);
  }
}

ul_result_t host_mem_alloc(ul_backend_comm_t *c, size_t size, void **ptr) {
  host_alloc_t a;
  memset(&a, 0, sizeof a);
  a.size = size;
  if (size == 0)
    return ul_backend_set_error(c->handle, UL_ERR_INVALID_ARG, "host: ul_mem_alloc of 0 bytes");
  if (c->threads) {
    size_t align = size >= HOST_HUGE_ALIGN ? HOST_HUGE_ALIGN : HOST_CACHELINE;
    if (size > SIZE_MAX - align)
      return ul_backend_set_error(c->handle, UL_ERR_NO_MEMORY,
                                  "host: ul_mem_alloc of %zu bytes is too large", size);
    a.map_size = (size + align - 1) / align * align;
    if (posix_memalign(&a.ptr, align, a.map_size) != 0)
      return ul_backend_set_error(c->handle, UL_ERR_NO_MEMORY,
                                  "host: rank %d: out of memory allocating %zu bytes", c->rank,
                                  size);
    if (align == HOST_HUGE_ALIGN) (void)madvise(a.ptr, a.map_size, MADV_HUGEPAGE);
  } else {
    UL_CHECK(host_mem_create(c, 'm', a.name, size, &a.ptr, &a.map_size, &a.serial));
  }
  if (host_mem_track(c, &a) != UL_OK) {
    host_mem_release(&a);
    return ul_backend_set_error(c->handle, UL_ERR_NO_MEMORY, "host: rank %d: out of memory",
                                c->rank);
  }
  *ptr = a.ptr;
  return UL_OK;
}

ul_result_t host_mem_free(ul_backend_comm_t *c, void *ptr) {
  host_alloc_t a;
  int found = 0;
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < c->nallocs; i++)
    if (c->allocs[i].ptr == ptr) {
      a = c->allocs[i];
      c->allocs[i] = c->allocs[--c->nallocs];
      found = 1;
      break;
    }
  pthread_mutex_unlock(&c->lock);
  if (!found)
    return ul_backend_set_error(c->handle, UL_ERR_INVALID_ARG,
                                "host: ul_mem_free: %p was not allocated by ul_mem_alloc on this "
                                "communicator",
                                ptr);
  host_mem_release(&a);
  return UL_OK;
}

/* The allocation holding [base, base+size), or NULL. Copies it to *out. */
static int host_mem_find(ul_backend_comm_t *c, const void *base, size_t size, host_alloc_t *out) {
  int found = 0;
  uintptr_t b = (uintptr_t)base;
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < c->nallocs && !found; i++) {
    uintptr_t p = (uintptr_t)c->allocs[i].ptr;
    if (b >= p && b - p <= c->allocs[i].size && size <= c->allocs[i].size - (b - p)) {
      *out = c->allocs[i];
      found = 1;
    }
  }
  pthread_mutex_unlock(&c->lock);
  return found;
}

/* ------------------------------------------------ zero-copy peer mappings
 * A process rank's ul_mem_alloc memory is a named segment, so a peer can map it and
 * read or write the rank's collective buffers in place, as threads do. The handle is
 * the creator's pid and the segment's serial, from which the name follows. Mappings are
 * cached per communicator (a training loop reuses its buffers); on a miss, mappings of
 * segments their owner has since freed (unlinked) are dropped, and the least recently
 * used one goes when the cache is full, so a freed buffer's pages do not stay pinned by
 * peers for long. */

ul_result_t host_mem_export(ul_backend_comm_t *c, const void *ptr, size_t bytes,
                            uint64_t *handle, size_t *offset) {
  host_alloc_t a;
  if (c->threads || !ptr || !host_mem_find(c, ptr, bytes, &a) || !a.name[0])
    return UL_ERR_UNSUPPORTED;
  *handle = (uint64_t)(uint32_t)getpid() << 32 | (a.serial & 0xffffffffu);
  *offset = (size_t)((uintptr_t)ptr - (uintptr_t)a.ptr);
  return UL_OK;
}

static void host_import_name(const ul_backend_comm_t *c, uint64_t handle, char *name) {
  snprintf(name, HOST_NAME_MAX_LEN, "/%s%s-%d-m%llu", HOST_SHM_PREFIX, c->tag_hex,
           (int)(handle >> 32), (unsigned long long)(handle & 0xffffffffu));
}

/* Drop mappings of segments that no longer exist (their owner freed them). c->lock held. */
static void host_import_purge(ul_backend_comm_t *c) {
  for (int i = 0; i < c->nimports;) {
    char name[HOST_NAME_MAX_LEN], path[HOST_NAME_MAX_LEN + 16];
    host_import_name(c, c->imports[i].handle, name);
    snprintf(path, sizeof path, "/dev/shm%s", name);
    if (access(path, F_OK) != 0) {
      munmap(c->imports[i].addr, c->imports[i].len);
      c->imports[i] = c->imports[--c->nimports];
    } else {
      i++;
    }
  }
}

ul_result_t host_mem_import(ul_backend_comm_t *c, int peer, uint64_t handle, void **base,
                            size_t *size) {
  if (c->threads || peer < 0 || peer >= c->nranks || handle == 0 ||
      (pid_t)(handle >> 32) != c->pids[peer])
    return UL_ERR_UNSUPPORTED;
  ul_result_t rc = UL_OK;
  pthread_mutex_lock(&c->lock);
  c->import_clock++;
  for (int i = 0; i < c->nimports; i++)
    if (c->imports[i].peer == peer && c->imports[i].handle == handle) {
      c->imports[i].used = c->import_clock;
      *base = c->imports[i].addr;
      *size = c->imports[i].len;
      pthread_mutex_unlock(&c->lock);
      return UL_OK;
    }
  host_import_purge(c);
  /* Room for every peer's send and receive buffers of one call, and some reuse. */
  int cap = 4 * c->nranks + 32;
  if (c->nimports >= cap) {
    int lru = 0;
    for (int i = 1; i < c->nimports; i++)
      if (c->imports[i].used < c->imports[lru].used) lru = i;
    munmap(c->imports[lru].addr, c->imports[lru].len);
    c->imports[lru] = c->imports[--c->nimports];
  }
  if (c->nimports == c->cap_imports) {
    int ncap = c->cap_imports ? 2 * c->cap_imports : 16;
    host_import_t *n = realloc(c->imports, (size_t)ncap * sizeof *n);
    if (!n) rc = UL_ERR_NO_MEMORY;
    else c->imports = n, c->cap_imports = ncap;
  }
  if (rc == UL_OK) {
    char name[HOST_NAME_MAX_LEN];
    host_import_name(c, handle, name);
    host_import_t im = {peer, handle, NULL, 0, c->import_clock};
    void *b = NULL;
    /* A failure here only costs the zero-copy path: the caller falls back to single-copy
     * (the sentence host_shm_map records is replaced by the next error, if any). */
    rc = host_shm_map(NULL, name, 0, 0, &im.addr, &im.len, &b);
    if (rc == UL_OK) {
      c->imports[c->nimports++] = im;
      *base = b;
      *size = im.len;
    }
  }
  pthread_mutex_unlock(&c->lock);
  return rc == UL_OK ? UL_OK : UL_ERR_UNSUPPORTED;
}

static void host_import_release_all(ul_backend_comm_t *c) {
  for (int i = 0; i < c->nimports; i++) munmap(c->imports[i].addr, c->imports[i].len);
  free(c->imports);
  c->imports = NULL;
  c->nimports = c->cap_imports = 0;
}

/* Free what this rank holds of a window. */
static void host_window_free(ul_backend_window_t *w) {
  if (!w) return;
  if (w->maps)
    for (int p = 0; p < w->nranks; p++)
      if (w->maps[p].addr) munmap(w->maps[p].addr, w->maps[p].len);
  if (w->sig) {
    if (w->sig_heap) {
      host_sig_block_t *b =
          (host_sig_block_t *)((char *)w->sig - offsetof(host_sig_block_t, slots));
      if (atomic_fetch_sub(&b->refs, 1) == 1) free(b);
    } else {
      munmap(w->sig, w->sig_bytes);
    }
  }
  free(w->peer_bases);
  free(w->peer_sizes);
  free(w->maps);
  free(w);
}

static void host_window_unlist(ul_backend_comm_t *c, ul_backend_window_t *w) {
  pthread_mutex_lock(&c->lock);
  for (ul_backend_window_t **pp = &c->windows; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  pthread_mutex_unlock(&c->lock);
}

/* Segments named by ranks that died are never unlinked by them: when a peer is gone,
 * sweep every segment whose creator no longer exists. */
static void host_mem_unlink_dead(ul_backend_comm_t *c) {
  if (c->threads) return;
  pid_t self = getpid();
  for (int p = 0; p < c->nranks; p++)
    if (c->pids[p] != self && !ulbu_pid_alive(c->pids[p], c->pidfds[p])) {
      host_shm_sweep_stale();
      return;
    }
}

ul_result_t host_window_register(ul_backend_comm_t *c, void *base, size_t size,
                                 int extra_signals, ul_backend_window_t **out,
                                 void **peer_bases) {
  *out = NULL;
  if (extra_signals < 0 || extra_signals > (1 << 24))
    return ul_backend_set_error(c->handle, UL_ERR_INVALID_ARG,
                                "host: window extra_signals %d out of range", extra_signals);
  int n = c->nranks, self = c->rank;
  ul_backend_window_t *w = calloc(1, sizeof *w);
  if (w) {
    w->peer_bases = calloc((size_t)n, sizeof *w->peer_bases);
    w->peer_sizes = calloc((size_t)n, sizeof *w->peer_sizes);
    w->maps = calloc((size_t)n, sizeof *w->maps);
  }
  ul_result_t mine = UL_OK; /* this rank's result of the step */
  if (!w || !w->peer_bases || !w->peer_sizes || !w->maps) {
    mine = ul_backend_set_error(c->handle, UL_ERR_NO_MEMORY, "host: rank %d: out of memory",
                                c->rank);
    if (w) host_window_free(w);
    w = NULL;
  }
  int nsig = UL_WINDOW_SIGNALS + extra_signals;
  size_t sig_bytes = (size_t)n * (size_t)nsig * sizeof(host_slot_t);
  if (w) {
    w->nranks = n;
    w->self = self;
    w->nsig = nsig;
    w->futex_shared = !c->threads;
    w->sig_heap = c->threads;
  }
  host_ctrl_t *m = c->ctrl;
  host_ctrl_rank_t *slot = &m->ranks[self];
  char signame[HOST_NAME_MAX_LEN] = "";

  /* Step 1: publish. */
  slot->seg_name[0] = 0;
  slot->seg_offset = 0;
  slot->win_size = size;
  slot->base_addr = (uint64_t)(uintptr_t)base;
  if (mine == UL_OK && !c->threads && size > 0) {
    host_alloc_t a;
    if (!host_mem_find(c, base, size, &a))
      mine = ul_backend_set_error(c->handle, UL_ERR_UNSUPPORTED,
                                  "host backend with process ranks: window memory must come "
                                  "from ul_mem_alloc (rank %d: [%p, +%zu) is not inside an "
                                  "allocation of this communicator)",
                                  self, base, size);
    else {
      memcpy(slot->seg_name, a.name, HOST_NAME_MAX_LEN);
      slot->seg_offset = (uint64_t)((uintptr_t)base - (uintptr_t)a.ptr);
    }
  }
  if (self == 0) m->win_sig_ptr = 0; /* never leave a previous window's array visible */
  if (mine == UL_OK && self == 0) {
    if (c->threads) {
      host_sig_block_t *b = aligned_alloc(HOST_CACHELINE, sizeof *b + sig_bytes);
      if (!b) {
        mine = ul_backend_set_error(c->handle, UL_ERR_NO_MEMORY,
                                    "host: out of memory for %zu bytes of window signals",
                                    sig_bytes);
      } else {
        memset(b, 0, sizeof *b + sig_bytes);
        atomic_store(&b->refs, n);
        w->sig = b->slots;
        m->win_sig_ptr = (uint64_t)(uintptr_t)b->slots;
      }
    } else {
      void *addr;
      size_t len;
      mine = host_mem_create(c, 'w', signame, sig_bytes, &addr, &len, NULL);
      if (mine == UL_OK) {
        w->sig = addr;
        w->sig_bytes = len;
        memcpy(m->win_sig_name, signame, HOST_NAME_MAX_LEN);
      }
    }
    m->win_sig_bytes = sig_bytes;
  }
  slot->status = mine;
  ul_result_t rc = host_comm_barrier(c, "window registration (exchange)");
  if (rc != UL_OK) {
    host_shm_unlink(signame);
    host_window_free(w);
    return rc;
  }

  /* Step 2: everyone published; map the peers. */
  ul_result_t step1 = UL_OK;
  int bad = -1;
  for (int p = 0; p < n && step1 == UL_OK; p++)
    if (m->ranks[p].status != UL_OK) step1 = (ul_result_t)m->ranks[p].status, bad = p;
  ul_result_t mapped = UL_OK;
  if (step1 == UL_OK) {
    pid_t me = getpid();
    for (int p = 0; p < n && mapped == UL_OK; p++) {
      host_ctrl_rank_t *r = &m->ranks[p];
      w->peer_sizes[p] = (size_t)r->win_size;
      if (p == self) w->peer_bases[p] = base;
      else if (r->win_size == 0) w->peer_bases[p] = NULL;
      else if (c->threads || c->pids[p] == me) w->peer_bases[p] = (void *)(uintptr_t)r->base_addr;
      else {
        char pname[HOST_NAME_MAX_LEN];
        memcpy(pname, r->seg_name, HOST_NAME_MAX_LEN);
        pname[HOST_NAME_MAX_LEN - 1] = 0;
        mapped = host_shm_map(c->handle, pname, (size_t)r->seg_offset, (size_t)r->win_size,
                              &w->maps[p].addr, &w->maps[p].len, &w->peer_bases[p]);
      }
    }
    if (mapped == UL_OK && self != 0) {
      if (c->threads) {
        w->sig = (host_slot_t *)(uintptr_t)m->win_sig_ptr;
      } else {
        char sname[HOST_NAME_MAX_LEN];
        void *mapaddr, *sbase;
        size_t len;
        memcpy(sname, m->win_sig_name, HOST_NAME_MAX_LEN);
        sname[HOST_NAME_MAX_LEN - 1] = 0;
        mapped = host_shm_map(c->handle, sname, 0, (size_t)m->win_sig_bytes, &mapaddr, &len,
                              &sbase);
        if (mapped == UL_OK) w->sig = sbase, w->sig_bytes = len;
      }
    }
  } else if (w && c->threads && self != 0 && m->win_sig_ptr) {
    /* Take our reference anyway so that the array is freed exactly once. */
    w->sig = (host_slot_t *)(uintptr_t)m->win_sig_ptr;
  }
  slot->status2 = mapped;
  rc = host_comm_barrier(c, "window registration (mapping)");
  if (self == 0) host_shm_unlink(signame); /* every rank mapped it, or gave up */
  if (rc == UL_OK && step1 != UL_OK) {
    rc = step1;
    if (bad != self) {
      if (rc == UL_ERR_UNSUPPORTED)
        ul_backend_set_error(c->handle, rc,
                             "host backend with process ranks: window memory must come from "
                             "ul_mem_alloc (rank %d's window does not)",
                             bad);
      else
        ul_backend_set_error(c->handle, rc, "host: window registration failed on rank %d", bad);
    }
  }
  for (int p = 0; p < n && rc == UL_OK; p++)
    if (m->ranks[p].status2 != UL_OK) {
      rc = (ul_result_t)m->ranks[p].status2;
      if (p != self)
        ul_backend_set_error(c->handle, rc,
                             "host: rank %d: window registration failed on rank %d: it could "
                             "not map its peers' memory",
                             self, p);
    }
  if (rc != UL_OK) {
    host_window_free(w);
    return rc;
  }
  for (int p = 0; p < n; p++) peer_bases[p] = w->peer_bases[p];
  pthread_mutex_lock(&c->lock);
  w->next = c->windows;
  c->windows = w;
  pthread_mutex_unlock(&c->lock);
  *out = w;
  return UL_OK;
}

ul_result_t host_window_deregister(ul_backend_comm_t *c, ul_backend_window_t *w) {
  /* No peer may still be writing into our memory or signals when we unmap. */
  ul_result_t rc = host_comm_barrier(c, "window deregistration");
  host_window_unlist(c, w);
  host_window_free(w);
  if (rc == UL_ERR_PEER_LOST) host_mem_unlink_dead(c);
  return rc;
}

void host_mem_release_all(ul_backend_comm_t *c) {
  pthread_mutex_lock(&c->lock);
  ul_backend_window_t *w = c->windows;
  c->windows = NULL;
  host_alloc_t *allocs = c->allocs;
  int nallocs = c->nallocs;
  c->allocs = NULL;
  c->nallocs = c->cap_allocs = 0;
  pthread_mutex_unlock(&c->lock);
  while (w) {
    ul_backend_window_t *next = w->next;
    host_window_free(w);
    w = next;
  }
  for (int i = 0; i < nallocs; i++) host_mem_release(&allocs[i]);
  free(allocs);
  host_import_release_all(c);
  host_mem_unlink_dead(c);
}
