/* Fake device memory: see fakemem.h. */
#define _GNU_SOURCE
#include "fakemem.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fakemem_region_t *g_regions;
static int g_count, g_cap;

static int map_twice(int fd, size_t size, void **pub, void **priv) {
  *priv = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (*priv == MAP_FAILED) return errno;
  /* The application's alias: mapped, so addresses are unique and stable, but not
   * accessible, so a CPU touch is a SIGSEGV as on a GPU without HMM. */
  *pub = mmap(NULL, size, PROT_NONE, MAP_SHARED, fd, 0);
  if (*pub == MAP_FAILED) {
    int e = errno;
    munmap(*priv, size);
    return e;
  }
  return 0;
}

static int add_region(const fakemem_region_t *r) {
  pthread_mutex_lock(&g_lock);
  if (g_count == g_cap) {
    int cap = g_cap ? 2 * g_cap : 64;
    fakemem_region_t *n = realloc(g_regions, (size_t)cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&g_lock);
      return ENOMEM;
    }
    g_regions = n;
    g_cap = cap;
  }
  g_regions[g_count++] = *r;
  pthread_mutex_unlock(&g_lock);
  return 0;
}

/* A freed allocation's addresses stay reserved (inaccessible) for the next
 * RETIRED_MAX frees, as a GPU's virtual addresses are never handed to host malloc: a
 * copy that reads freed device memory then faults every time. Unmapped at once, the
 * hole could be refilled by any host mmap (ASan's allocator, another thread) before the
 * copy runs, and the copy would succeed by chance. Called with g_lock held. */
enum { RETIRED_MAX = 256 };
static struct {
  void *base;
  size_t size;
} g_retired[RETIRED_MAX];
static unsigned g_retired_next;

static void retire_address(void *pub, size_t size) {
  void *r = mmap(pub, size, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (r == MAP_FAILED) {
    munmap(pub, size);
    return;
  }
  unsigned i = g_retired_next++ % RETIRED_MAX;
  if (g_retired[i].base) munmap(g_retired[i].base, g_retired[i].size);
  g_retired[i].base = pub;
  g_retired[i].size = size;
}

static void raise_fd_limit_once(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

static void raise_fd_limit(void) {
  /* One descriptor per allocation: the conformance suite makes many. Allocations come
   * from several threads at once. */
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, raise_fd_limit_once);
}

int fakemem_alloc(size_t size, int device, void **pub) {
  fakemem_region_t r = {0};
  if (!pub || size == 0) return EINVAL;
  raise_fd_limit();
  int fd = memfd_create("unilink-fake-device", MFD_CLOEXEC);
  if (fd < 0) return errno;
  if (ftruncate(fd, (off_t)size) != 0) {
    int e = errno;
    close(fd);
    return e;
  }
  int e = map_twice(fd, size, &r.pub, &r.priv);
  if (e) {
    close(fd);
    return e;
  }
  r.size = size;
  r.fd = fd;
  r.device = device;
  r.owner_pid = getpid();
  if ((e = add_region(&r)) != 0) {
    munmap(r.pub, size);
    munmap(r.priv, size);
    close(fd);
    return e;
  }
  *pub = r.pub;
  return 0;
}

int fakemem_import(pid_t pid, int fd, size_t size, int device, void **pub) {
  fakemem_region_t r = {0};
  char path[64];
  if (!pub || size == 0 || fd < 0) return EINVAL;
  raise_fd_limit();
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
  int mine = open(path, O_RDWR | O_CLOEXEC);
  if (mine < 0) return errno;
  int e = map_twice(mine, size, &r.pub, &r.priv);
  if (e) {
    close(mine);
    return e;
  }
  r.size = size;
  r.fd = mine;
  r.device = device;
  r.imported = 1;
  r.owner_pid = pid;
  if ((e = add_region(&r)) != 0) {
    munmap(r.pub, size);
    munmap(r.priv, size);
    close(mine);
    return e;
  }
  *pub = r.pub;
  return 0;
}

int fakemem_free(void *pub) {
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < g_count; i++) {
    if (g_regions[i].pub == pub) {
      fakemem_region_t r = g_regions[i];
      g_regions[i] = g_regions[--g_count];
      retire_address(r.pub, r.size);
      pthread_mutex_unlock(&g_lock);
      munmap(r.priv, r.size);
      close(r.fd);
      return 0;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return EINVAL;
}

int fakemem_find(const void *ptr, size_t bytes, fakemem_region_t *out) {
  uintptr_t p = (uintptr_t)ptr, n = bytes ? bytes : 1;
  int rc = ENOENT;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < g_count; i++) {
    uintptr_t b = (uintptr_t)g_regions[i].pub;
    if (p >= b && p - b < g_regions[i].size && n <= g_regions[i].size - (p - b)) {
      if (out) *out = g_regions[i];
      rc = 0;
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

void *fakemem_view(const void *ptr, size_t bytes, int *device) {
  fakemem_region_t r;
  if (fakemem_find(ptr, bytes, &r) != 0) return NULL;
  if (device) *device = r.device;
  return (char *)r.priv + ((const char *)ptr - (const char *)r.pub);
}

int fakemem_live(void) {
  pthread_mutex_lock(&g_lock);
  int n = g_count;
  pthread_mutex_unlock(&g_lock);
  return n;
}
