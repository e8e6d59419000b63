/* Fake device memory for the fake vendor runtimes (tests only).
 *
 * A device allocation is a memfd mapped twice: the caller gets a PROT_NONE alias, so
 * any CPU load or store through it faults exactly as it would on a discrete GPU; the
 * fake runtime reads and writes through a private read-write alias. Several fake
 * runtimes of one process share one table, so this file is compiled into exactly one
 * shared object per runtime family (the fake libcudart, the fake libze_loader). */
#ifndef UNILINK_FAKEMEM_H
#define UNILINK_FAKEMEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fakemem_region {
  void *pub;      /* what the application sees (PROT_NONE) */
  void *priv;     /* the runtime's own alias (read-write) */
  size_t size;    /* bytes */
  int fd;         /* the memfd (owner) or the imported descriptor */
  int device;     /* owning fake device */
  int imported;   /* 1: mapped from another allocation (IPC), not freed by fakemem_free */
  pid_t owner_pid;/* process that allocated it */
} fakemem_region_t;

/* Allocate @size bytes (>0) on fake @device. 0 or an errno value. */
int fakemem_alloc(size_t size, int device, void **pub);
/* Free an allocation by its base (also unmaps an imported one). 0 or EINVAL. */
int fakemem_free(void *pub);
/* Region that holds all of [ptr, ptr+bytes) (bytes 0 counts as 1). 0 or ENOENT. */
int fakemem_find(const void *ptr, size_t bytes, fakemem_region_t *out);
/* The private alias of [ptr, ptr+bytes), or NULL when that range is not inside one
 * fake allocation; *device (if not NULL) is the owning device. */
void *fakemem_view(const void *ptr, size_t bytes, int *device);
/* Map allocation @fd (a memfd of process @pid, or of this process when pid is
 * getpid()) of @size bytes as a new imported region of @device. 0 or an errno value. */
int fakemem_import(pid_t pid, int fd, size_t size, int device, void **pub);
/* Number of live regions (owned + imported): leak checks in tests. */
int fakemem_live(void);

#ifdef __cplusplus
}
#endif
#endif
