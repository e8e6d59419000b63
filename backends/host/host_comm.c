/* Communicators of the host backend: unique ids, rendezvous through a control segment
 * named from the id, comm_init_all inside one process, destroy/abort, topology.
 *
 * Rendezvous: the first rank to arrive creates "/unilink-<tag>" (0600, O_EXCL), fills
 * the header and publishes it by storing the magic last. Others open it, check owner,
 * mode and token, then claim their rank slot. One atomic word counts arrivals; a rank
 * that gives up (timeout, abort) turns it into HOST_ARRIVE_FAILED so nobody proceeds
 * with a rank missing. The rank whose arrival completes the count unlinks the name:
 * from then on the segment lives only in the ranks' mappings, so a killed job leaves
 * nothing behind. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "host.h"

/* How long a waiter polls before it reads the clock: ~1.3 us, longer than a peer's
 * cross-core signal (~0.2-1 us). The wait used to yield right after it: 32 pauses of
 * 19.5 ns (the reference EPYC VM) spun 0.6 us and a synchronized 8-byte broadcast waited
 * into the yields, 4.1 us against 1.4 us with 64 pauses. So the spin is a time budget,
 * turned into pauses by timing them once per process. Ranks pinned each to a CPU of its
 * own then poll on between pauses, the others between yields (host_wait.c, decision
 * 0021); ranks outnumbering CPUs spin only 8 pauses, because the peer they wait for
 * needs the core (2000 pauses: 70-120 us per allreduce, docs/performance.md). */

static double host_pause_ns_value;
static pthread_once_t host_pause_once = PTHREAD_ONCE_INIT;

static void host_pause_measure(void) {
  struct timespec t0, t1;
  double best = 1e9;
  for (int r = 0; r < 3; r++) { /* best of 3: a preemption only makes one slower */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 1000; i++) ul_backend_cpu_pause();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1000;
    if (ns < best) best = ns;
  }
  host_pause_ns_value = best < 1 ? 1 : best > 200 ? 200 : best;
}

double host_pause_ns(void) {
  pthread_once(&host_pause_once, host_pause_measure);
  return host_pause_ns_value;
}

static ul_result_t host_comm_random(ul_comm_t h, unsigned char *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = getrandom(buf + got, len - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    got += (size_t)n;
  }
  if (got == len) return UL_OK;
  /* Kernels without getrandom: the same pool through the device file. */
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    while (got < len) {
      ssize_t n = read(fd, buf + got, len - got);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        break;
      }
      got += (size_t)n;
    }
    close(fd);
  }
  if (got == len) return UL_OK;
  char eb[128];
  return ul_backend_set_error(h, UL_ERR_SYSTEM, "host: getrandom for the unique id token: %s",
                              host_errstr(errno, eb, sizeof eb));
}

static void host_comm_hex(const unsigned char *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = 0;
}

ul_result_t host_get_unique_id(unsigned char *payload, size_t payload_bytes) {
  if (!payload || payload_bytes < HOST_ID_USED)
    return ul_backend_set_error(NULL, UL_ERR_INVALID_ARG,
                                "host: unique id payload needs %d bytes, got %zu", HOST_ID_USED,
                                payload ? payload_bytes : 0);
  host_shm_sweep_stale();
  unsigned char rnd[HOST_TOKEN_BYTES + HOST_TAG_BYTES];
  UL_CHECK(host_comm_random(NULL, rnd, sizeof rnd));
  memset(payload, 0, payload_bytes);
  memcpy(payload + HOST_ID_OFF_MAGIC, HOST_ID_MAGIC, 4);
  memcpy(payload + HOST_ID_OFF_TOKEN, rnd, HOST_TOKEN_BYTES);
  uint32_t uid = (uint32_t)geteuid();
  memcpy(payload + HOST_ID_OFF_UID, &uid, 4);
  memcpy(payload + HOST_ID_OFF_TAG, rnd + HOST_TOKEN_BYTES, HOST_TAG_BYTES);
  return UL_OK;
}

/* The one CPU this thread may run on; -1 when it may run on several. */
static int32_t host_comm_pinned_cpu(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return -1;
  for (int i = 0; i < CPU_SETSIZE; i++)
    if (CPU_ISSET(i, &set)) return i;
  return -1;
}

/* Is every rank pinned to a CPU no other rank of m shares (mpirun --bind-to core)? Then
 * no peer can run on a waiter's CPU, and a wait keeps it (host_wait.c). */
static int host_comm_pinned_apart(const host_ctrl_t *m, int nranks) {
  cpu_set_t seen;
  CPU_ZERO(&seen);
  for (int r = 0; r < nranks; r++) {
    int32_t cpu = m->ranks[r].cpu;
    if (cpu < 0 || cpu >= CPU_SETSIZE || CPU_ISSET(cpu, &seen)) return 0;
    CPU_SET(cpu, &seen);
  }
  return 1;
}

/* Remaining ms before deadline (0 deadline = forever -> 0); -1 when expired. */
static int host_comm_remaining(uint64_t deadline) {
  if (!deadline) return 0;
  uint64_t now = (uint64_t)ul__now_ms();
  if (now >= deadline) return -1;
  return (int)(deadline - now);
}

static void host_comm_nap(int *us) {
  struct timespec ts = {0, (long)*us * 1000};
  nanosleep(&ts, NULL);
  if (*us < 2000) *us *= 2; /* back off to 2 ms */
}

static int host_comm_token_equal(const unsigned char *a, const unsigned char *b) {
  unsigned char d = 0; /* constant time: no early exit on the first differing byte */
  for (int i = 0; i < HOST_TOKEN_BYTES; i++) d |= a[i] ^ b[i];
  return d == 0;
}

static size_t host_comm_ctrl_size(int nranks) {
  size_t page = host_page_size();
  size_t s = sizeof(host_ctrl_t) + (size_t)nranks * sizeof(host_ctrl_rank_t);
  return (s + page - 1) / page * page;
}

static int host_comm_spin(int oversubscribed) {
  int64_t spin = ul_backend_param_int(
      "HOST_SPIN", -1,
      "Host backend: pause iterations a waiter spins before its clock starts (-1: as many "
      "as take 1.3 us here, or 8 when ranks outnumber CPUs, whose waits then yield)");
  if (spin >= 0) return spin > 1000000 ? 1000000 : (int)spin;
  /* Oversubscribed: the peer we wait for needs our core, so give it up soon. */
  if (oversubscribed) return HOST_SPIN_OVERSUBSCRIBED;
  return (int)(HOST_SPIN_BUDGET_NS / host_pause_ns());
}

static ul_backend_comm_t *host_comm_alloc(const ul_backend_comm_args_t *a) {
  ul_backend_comm_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->pids = calloc((size_t)a->nranks, sizeof *c->pids);
  c->pidfds = malloc((size_t)a->nranks * sizeof *c->pidfds);
  if (!c->pids || !c->pidfds) {
    free(c->pids);
    free(c->pidfds);
    free(c);
    return NULL;
  }
  for (int i = 0; i < a->nranks; i++) c->pidfds[i] = -1;
  c->handle = a->comm;
  c->rank = a->rank;
  c->nranks = a->nranks;
  c->timeout_ms = a->timeout_ms > 0 ? a->timeout_ms : 0;
  c->abort_flag = a->abort_flag;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  c->oversubscribed = ncpu > 0 && a->nranks > ncpu;
  c->spin = host_comm_spin(c->oversubscribed);
  pthread_mutex_init(&c->lock, NULL);
  return c;
}

static void host_comm_free(ul_backend_comm_t *c) {
  if (!c) return;
  for (int i = 0; i < c->nranks; i++)
    if (c->pidfds[i] >= 0) close(c->pidfds[i]);
  free(c->pids);
  free(c->pidfds);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* Thread ranks of one process share one mapping of the control segment: one address
 * for every atomic (what ThreadSanitizer and private futexes need) and one mapping
 * instead of nranks. Entries belong to the process that made them (fork copies the
 * table; a child ignores its parent's entries) and close once the rendezvous ended, so
 * a later communicator with the same name never joins a finished one. */
typedef struct host_attach {
  struct host_attach *next;
  char name[HOST_NAME_MAX_LEN];
  host_ctrl_t *ctrl;
  size_t size;
  int refs;
  int closed;
  pid_t pid;
} host_attach_t;

static pthread_mutex_t host_attach_lock = PTHREAD_MUTEX_INITIALIZER;
static host_attach_t *host_attach_list;
static pthread_once_t host_attach_once = PTHREAD_ONCE_INIT;

/* fork() while another thread holds the lock must not leave the child locked. */
static void host_attach_prepare(void) { pthread_mutex_lock(&host_attach_lock); }
static void host_attach_parent(void) { pthread_mutex_unlock(&host_attach_lock); }
static void host_attach_child(void) { pthread_mutex_init(&host_attach_lock, NULL); }
static void host_attach_setup(void) {
  pthread_atfork(host_attach_prepare, host_attach_parent, host_attach_child);
}

static host_attach_t *host_attach_find(const char *name) {
  pid_t me = getpid();
  for (host_attach_t *e = host_attach_list; e; e = e->next)
    if (!e->closed && e->pid == me && strcmp(e->name, name) == 0) return e;
  return NULL;
}

/* Called with the lock held. NULL when out of memory (the mapping is then released). */
static host_attach_t *host_attach_add(const char *name, host_ctrl_t *m, size_t size) {
  host_attach_t *e = calloc(1, sizeof *e);
  if (!e) {
    munmap(m, size);
    return NULL;
  }
  snprintf(e->name, sizeof e->name, "%s", name);
  e->ctrl = m;
  e->size = size;
  e->refs = 1;
  e->pid = getpid();
  e->next = host_attach_list;
  host_attach_list = e;
  return e;
}

static void host_attach_close(host_attach_t *e) {
  pthread_mutex_lock(&host_attach_lock);
  e->closed = 1;
  pthread_mutex_unlock(&host_attach_lock);
}

static void host_attach_release(host_attach_t *e) {
  pthread_mutex_lock(&host_attach_lock);
  int last = --e->refs == 0;
  if (last)
    for (host_attach_t **pp = &host_attach_list; *pp; pp = &(*pp)->next)
      if (*pp == e) {
        *pp = e->next;
        break;
      }
  pthread_mutex_unlock(&host_attach_lock);
  if (last) {
    munmap(e->ctrl, e->size);
    free(e);
  }
}

/* Check an initialised header against what this rank was given. */
static ul_result_t host_comm_verify_ctrl(const ul_backend_comm_args_t *a, const char *name,
                                         const host_ctrl_t *m, size_t len,
                                         const unsigned char *token) {
  ul_comm_t h = a->comm;
  if (!host_comm_token_equal(m->token, token))
    return ul_backend_set_error(h, UL_ERR_INVALID_ARG,
                                "host: rank %d: the token in this unique id does not match "
                                "rendezvous segment %s; this process does not hold the "
                                "communicator's id",
                                a->rank, name);
  if (m->version != HOST_CTRL_VERSION)
    return ul_backend_set_error(h, UL_ERR_VERSION,
                                "host: rank %d: rendezvous segment %s has layout version %u, this "
                                "library uses %u",
                                a->rank, name, m->version, HOST_CTRL_VERSION);
  if (m->nranks != (uint32_t)a->nranks || len < host_comm_ctrl_size(a->nranks))
    return ul_backend_set_error(h, UL_ERR_INVALID_ARG,
                                "host: rank %d was given nranks=%d but the communicator was "
                                "created with nranks=%u",
                                a->rank, a->nranks, m->nranks);
  return UL_OK;
}

/* Open or create the control segment; on success *out holds a reference to an
 * initialised mapping whose token matched. */
static ul_result_t host_comm_open_ctrl(const ul_backend_comm_args_t *a, const char *name,
                                       const unsigned char *token, uint64_t deadline,
                                       host_attach_t **out) {
  ul_comm_t h = a->comm;
  char eb[128];
  size_t want = host_comm_ctrl_size(a->nranks);
  int nap = 50;
  pthread_once(&host_attach_once, host_attach_setup);
  for (;;) {
    if (a->abort_flag && *a->abort_flag)
      return ul_backend_set_error(h, UL_ERR_ABORTED,
                                  "host: rank %d: communicator aborted during rendezvous", a->rank);
    host_attach_t *e = NULL;
    int fd;
    pthread_mutex_lock(&host_attach_lock);
    e = host_attach_find(name);
    if (e) {
      e->refs++;
      pthread_mutex_unlock(&host_attach_lock);
      goto attached;
    }
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
      (void)fchmod(fd, 0600);
      host_ctrl_t *m = MAP_FAILED;
      if (ftruncate(fd, (off_t)want) == 0)
        m = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      int err = errno;
      close(fd);
      if (m == MAP_FAILED) {
        pthread_mutex_unlock(&host_attach_lock);
        shm_unlink(name);
        return ul_backend_set_error(h, UL_ERR_SYSTEM,
                                    "host: rank %d: creating rendezvous segment %s: %s", a->rank,
                                    name, host_errstr(err, eb, sizeof eb));
      }
      m->version = HOST_CTRL_VERSION;
      m->nranks = (uint32_t)a->nranks;
      m->uid = (uint32_t)geteuid();
      m->creator_pid = (int32_t)getpid();
      m->total_size = want;
      memcpy(m->token, token, HOST_TOKEN_BYTES);
      atomic_store_explicit(&m->magic, HOST_CTRL_MAGIC, memory_order_release);
      e = host_attach_add(name, m, want);
      pthread_mutex_unlock(&host_attach_lock);
      if (!e) {
        shm_unlink(name);
        return ul_backend_set_error(h, UL_ERR_NO_MEMORY, "host: rank %d: out of memory", a->rank);
      }
      *out = e;
      return UL_OK;
    }
    if (errno != EEXIST) {
      int err = errno;
      pthread_mutex_unlock(&host_attach_lock);
      return ul_backend_set_error(h, UL_ERR_SYSTEM, "host: rank %d: shm_open(%s): %s", a->rank,
                                  name, host_errstr(err, eb, sizeof eb));
    }
    fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
      int err = errno;
      pthread_mutex_unlock(&host_attach_lock);
      if (err != ENOENT)
        return ul_backend_set_error(h, UL_ERR_SYSTEM, "host: rank %d: shm_open(%s): %s", a->rank,
                                    name, host_errstr(err, eb, sizeof eb));
      continue; /* unlinked between our two opens (a failed rendezvous): start over */
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      close(fd);
      pthread_mutex_unlock(&host_attach_lock);
      return ul_backend_set_error(h, UL_ERR_SYSTEM, "host: rank %d: fstat(%s): %s", a->rank, name,
                                  host_errstr(err, eb, sizeof eb));
    }
    /* Someone else's segment under our name: refuse rather than trust its contents. */
    if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
      close(fd);
      pthread_mutex_unlock(&host_attach_lock);
      return ul_backend_set_error(h, UL_ERR_SYSTEM,
                                  "host: rank %d: rendezvous segment %s belongs to uid %u with "
                                  "mode %03o; expected uid %u and mode 0600",
                                  a->rank, name, (unsigned)st.st_uid,
                                  (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
    }
    if ((size_t)st.st_size < sizeof(host_ctrl_t)) {
      /* Its creator (another process) has not sized it yet. */
      close(fd);
      pthread_mutex_unlock(&host_attach_lock);
      if (host_comm_remaining(deadline) < 0)
        return ul_backend_set_error(h, UL_ERR_TIMEOUT,
                                    "host: rank %d: rendezvous segment %s was not initialised "
                                    "within %d ms (its creator may have died)",
                                    a->rank, name, a->timeout_ms);
      host_comm_nap(&nap);
      continue;
    }
    {
      size_t len = (size_t)st.st_size;
      host_ctrl_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      int err = errno;
      close(fd);
      if (m == MAP_FAILED) {
        pthread_mutex_unlock(&host_attach_lock);
        return ul_backend_set_error(h, UL_ERR_SYSTEM, "host: rank %d: mmap(%s): %s", a->rank,
                                    name, host_errstr(err, eb, sizeof eb));
      }
      e = host_attach_add(name, m, len);
      pthread_mutex_unlock(&host_attach_lock);
      if (!e)
        return ul_backend_set_error(h, UL_ERR_NO_MEMORY, "host: rank %d: out of memory", a->rank);
    }
  attached:;
    /* The creator fills the header after sizing it: wait for the magic. */
    host_ctrl_t *m = e->ctrl;
    int inner = 50;
    while (atomic_load_explicit(&m->magic, memory_order_acquire) != HOST_CTRL_MAGIC) {
      if (host_comm_remaining(deadline) < 0 || (a->abort_flag && *a->abort_flag)) break;
      host_comm_nap(&inner);
    }
    if (atomic_load_explicit(&m->magic, memory_order_acquire) != HOST_CTRL_MAGIC) {
      host_attach_release(e);
      if (a->abort_flag && *a->abort_flag) continue; /* reported at the loop top */
      return ul_backend_set_error(h, UL_ERR_TIMEOUT,
                                  "host: rank %d: rendezvous segment %s was not initialised within "
                                  "%d ms (its creator may have died)",
                                  a->rank, name, a->timeout_ms);
    }
    ul_result_t rc = host_comm_verify_ctrl(a, name, m, e->size, token);
    if (rc != UL_OK) {
      host_attach_release(e);
      return rc;
    }
    *out = e;
    return UL_OK;
  }
}

/* Turn the arrival count into FAILED unless everyone already arrived.
 * Returns 1 when the rendezvous completed after all. */
static int host_comm_give_up(host_ctrl_t *m, int nranks) {
  uint64_t v = atomic_load(&m->arrived.value);
  for (;;) {
    if (v == (uint64_t)nranks) return 1;
    if (v & HOST_ARRIVE_FAILED) return 0;
    if (atomic_compare_exchange_weak(&m->arrived.value, &v, v | HOST_ARRIVE_FAILED)) {
      host_slot_wake(&m->arrived, 1);
      return 0;
    }
  }
}

ul_result_t host_comm_init(const ul_backend_comm_args_t *args, ul_backend_comm_t **out,
                           ul_backend_comm_props_t *props) {
  ul_comm_t h = args->comm;
  *out = NULL;
  if (args->nranks < 1 || args->rank < 0 || args->rank >= args->nranks)
    return ul_backend_set_error(h, UL_ERR_INVALID_ARG, "host: rank %d out of range for %d ranks",
                                args->rank, args->nranks);
  if (args->options && args->options[0])
    return ul_backend_set_error(h, UL_ERR_INVALID_ARG,
                                "host: unknown backend option '%s' (\"host:%s\"): the host "
                                "backend takes no options",
                                args->options, args->options);
  const unsigned char *id = args->id_payload;
  if (!id || args->id_payload_bytes < HOST_ID_USED ||
      memcmp(id + HOST_ID_OFF_MAGIC, HOST_ID_MAGIC, 4) != 0)
    return ul_backend_set_error(h, UL_ERR_INVALID_ARG,
                                "host: the unique id is not a host backend id (corrupted?)");
  uint32_t uid;
  memcpy(&uid, id + HOST_ID_OFF_UID, 4);
  if (uid != (uint32_t)geteuid())
    return ul_backend_set_error(h, UL_ERR_INVALID_ARG,
                                "host: the unique id was created by uid %u but this process runs "
                                "as uid %u; host ranks must run as one user",
                                uid, (unsigned)geteuid());
  host_shm_sweep_stale();

  ul_backend_comm_t *c = host_comm_alloc(args);
  if (!c)
    return ul_backend_set_error(h, UL_ERR_NO_MEMORY, "host: rank %d: out of memory", args->rank);
  host_comm_hex(id + HOST_ID_OFF_TAG, HOST_TAG_BYTES, c->tag_hex);
  char name[HOST_NAME_MAX_LEN];
  snprintf(name, sizeof name, "/%s%s", HOST_SHM_PREFIX, c->tag_hex);
  uint64_t deadline = c->timeout_ms ? (uint64_t)ul__now_ms() + (uint64_t)c->timeout_ms : 0;

  host_attach_t *att = NULL;
  ul_result_t rc = host_comm_open_ctrl(args, name, id + HOST_ID_OFF_TOKEN, deadline, &att);
  if (rc != UL_OK) {
    /* A token or nranks mismatch means we are not part of this job: leave its segment. */
    if (rc != UL_ERR_INVALID_ARG && rc != UL_ERR_VERSION && rc != UL_ERR_SYSTEM)
      shm_unlink(name);
    host_comm_free(c);
    return rc;
  }
  c->attach = att;
  c->ctrl = att->ctrl;
  c->ctrl_size = att->size;
  host_ctrl_t *m = c->ctrl;
  c->ctrl_shared = 1; /* process ranks map it at their own addresses: futexes key on the file */
  host_ctrl_rank_t *me = &m->ranks[c->rank];
  int32_t zero = 0;
  me->pid = (int32_t)getpid();
  me->cpu = host_comm_pinned_cpu();
  me->self_addr = (uint64_t)(uintptr_t)&me->self_addr;
  if (!atomic_compare_exchange_strong(&me->present, &zero, 1)) {
    rc = ul_backend_set_error(h, UL_ERR_INVALID_ARG,
                              "host: rank %d joined twice (two callers used the same rank with "
                              "one unique id)",
                              c->rank);
    goto fail_nounlink;
  }
  /* Count ourselves in, unless a rank already gave up. */
  uint64_t v = atomic_load(&m->arrived.value);
  for (;;) {
    if (v & HOST_ARRIVE_FAILED) {
      rc = ul_backend_set_error(h, UL_ERR_TIMEOUT,
                                "host: rank %d: another rank gave up on rendezvous %s before this "
                                "rank arrived",
                                c->rank, name);
      goto fail;
    }
    if (atomic_compare_exchange_weak(&m->arrived.value, &v, v + 1)) break;
  }
  if (v + 1 == (uint64_t)c->nranks) {
    shm_unlink(name); /* everyone holds a mapping now */
    host_slot_wake(&m->arrived, 1);
  } else {
    host_waiter_t w;
    memset(&w, 0, sizeof w);
    w.abort_flag = args->abort_flag;
    w.dead = &c->dead;
    w.spin = c->spin;
    w.shared = 1;
    w.nranks = c->nranks;
    w.self = c->rank;
    int rem = host_comm_remaining(deadline);
    w.timeout_ms = rem < 0 ? 1 : rem;
    host_wait_fail_t fail;
    rc = host_wait_geq(&w, &m->arrived, (uint64_t)c->nranks, 1, &fail);
    if (rc != UL_OK && host_comm_give_up(m, c->nranks)) rc = UL_OK;
    if (rc == UL_OK && (atomic_load(&m->arrived.value) & HOST_ARRIVE_FAILED)) {
      rc = ul_backend_set_error(h, UL_ERR_TIMEOUT,
                                "host: rank %d: another rank gave up on rendezvous %s", c->rank,
                                name);
      goto fail;
    }
    if (rc != UL_OK) {
      char missing[256];
      size_t len = 0;
      int nmissing = 0;
      missing[0] = 0;
      for (int r = 0; r < c->nranks; r++) {
        if (atomic_load(&m->ranks[r].present)) continue;
        nmissing++;
        if (len + 16 < sizeof missing)
          len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", len ? ", " : "",
                                  r);
        else if (len + 5 < sizeof missing && missing[len - 1] != '.')
          len += (size_t)snprintf(missing + len, sizeof missing - len, ", ...");
      }
      if (rc == UL_ERR_TIMEOUT)
        rc = ul_backend_set_error(h, rc,
                                  "host: rank %d: rendezvous timed out after %d ms: %d of %d "
                                  "ranks did not arrive (ranks %s)",
                                  c->rank, c->timeout_ms, nmissing, c->nranks, missing);
      else
        rc = ul_backend_set_error(h, rc,
                                  "host: rank %d: communicator aborted during rendezvous (ranks "
                                  "%s had not arrived)",
                                  c->rank, missing);
      goto fail;
    }
  }

  /* Everyone arrived: threads of one process, or processes? */
  pid_t self = getpid();
  int threads = 1;
  for (int r = 0; r < c->nranks; r++) {
    c->pids[r] = (pid_t)m->ranks[r].pid;
    if (c->pids[r] != self) threads = 0;
  }
  c->threads = threads;
  /* Not thread ranks: the thread that waits later need not be the one that joined. */
  c->pinned_apart = !threads && host_comm_pinned_apart(m, c->nranks);
  c->ctrl_shared = !threads; /* thread ranks share this process's one mapping */
  if (!threads)
    for (int r = 0; r < c->nranks; r++)
      if (c->pids[r] != self) c->pidfds[r] = ulbu_pid_open(c->pids[r]);
  host_attach_close(att); /* rendezvous over: nobody may join this segment any more */
  props->load_store_peers = threads;
  props->waits_keep_cpu = c->pinned_apart;
  snprintf(props->path, sizeof props->path, "%s", threads ? "threads" : "shm");
  ul_backend_log(UL_LOG_INFO, "host", "rank %d/%d joined %s (%s)", c->rank, c->nranks, name,
                 threads ? "threads" : "processes");
  *out = c;
  return UL_OK;

fail:
  shm_unlink(name);
  host_attach_close(att);
fail_nounlink:
  host_attach_release(att);
  host_comm_free(c);
  return rc;
}

ul_result_t host_comm_init_all(const ul_backend_comm_args_t *args, int ndev,
                               ul_backend_comm_t **out, ul_backend_comm_props_t *props) {
  ul_comm_t h = ndev > 0 ? args[0].comm : NULL;
  if (ndev < 1)
    return ul_backend_set_error(h, UL_ERR_INVALID_ARG, "host: comm_init_all needs ndev >= 1");
  for (int i = 0; i < ndev; i++) out[i] = NULL;
  /* No name anywhere: one heap control block shared by the ndev ranks. */
  size_t size = host_comm_ctrl_size(ndev);
  host_ctrl_t *m = aligned_alloc(HOST_CACHELINE, size);
  _Atomic int *refs = malloc(sizeof *refs);
  if (!m || !refs) {
    free(m);
    free(refs);
    return ul_backend_set_error(h, UL_ERR_NO_MEMORY, "host: out of memory creating %d ranks",
                                ndev);
  }
  memset(m, 0, size);
  m->magic = HOST_CTRL_MAGIC;
  m->version = HOST_CTRL_VERSION;
  m->nranks = (uint32_t)ndev;
  m->uid = (uint32_t)geteuid();
  m->creator_pid = (int32_t)getpid();
  m->total_size = size;
  atomic_store(&m->arrived.value, (uint64_t)ndev);
  atomic_store(refs, ndev);
  for (int i = 0; i < ndev; i++) {
    ul_backend_comm_args_t a = args[i];
    a.nranks = ndev;
    a.rank = i;
    ul_backend_comm_t *c = host_comm_alloc(&a);
    if (!c) {
      for (int j = 0; j < i; j++) host_comm_free(out[j]), out[j] = NULL;
      free(m);
      free(refs);
      return ul_backend_set_error(args[i].comm, UL_ERR_NO_MEMORY, "host: out of memory");
    }
    m->ranks[i].pid = (int32_t)getpid();
    m->ranks[i].self_addr = (uint64_t)(uintptr_t)&m->ranks[i].self_addr;
    atomic_store(&m->ranks[i].present, 1);
    c->ctrl = m;
    c->ctrl_size = size;
    c->ctrl_shared = 0; /* one address for every rank: private futexes suffice */
    c->heap_refs = refs;
    c->threads = 1;
    for (int r = 0; r < ndev; r++) c->pids[r] = getpid();
    snprintf(c->tag_hex, sizeof c->tag_hex, "local");
    out[i] = c;
    props[i].load_store_peers = 1;
    snprintf(props[i].path, sizeof props[i].path, "threads");
  }
  return UL_OK;
}

ul_result_t host_comm_finalize(ul_backend_comm_t *c) {
  (void)c; /* every operation completes before it returns: nothing is outstanding */
  return UL_OK;
}

ul_result_t host_comm_destroy(ul_backend_comm_t *c) {
  if (!c) return UL_OK;
  /* Peers that shrink later count us out at once instead of waiting for us. */
  atomic_store_explicit(&c->ctrl->ranks[c->rank].left, 1, memory_order_release);
  host_mem_release_all(c);
  if (c->heap_refs) {
    if (atomic_fetch_sub(c->heap_refs, 1) == 1) {
      free(c->ctrl);
      free((void *)c->heap_refs);
    }
  } else if (c->attach) {
    host_attach_release(c->attach);
  }
  host_comm_free(c);
  return UL_OK;
}

ul_result_t host_comm_abort(ul_backend_comm_t *c) {
  if (!c) return UL_OK;
  atomic_store(&c->dead, 1);
  /* Peers blocked on us see this between their sleep slices and stop waiting. */
  atomic_store_explicit(&c->ctrl->ranks[c->rank].aborted, 1, memory_order_release);
  host_comm_wake_all(c);
  return UL_OK;
}

void host_comm_wake_all(ul_backend_comm_t *c) {
  host_slot_wake(&c->ctrl->arrived, c->ctrl_shared);
  host_slot_wake(&c->ctrl->barrier, c->ctrl_shared);
  /* Never block: if the window list is busy, the waiters notice within one slice. */
  if (pthread_mutex_trylock(&c->lock) == 0) {
    for (ul_backend_window_t *w = c->windows; w; w = w->next)
      for (int i = 0; i < w->nsig; i++)
        host_slot_wake(&w->sig[(size_t)w->self * (size_t)w->nsig + (size_t)i], w->futex_shared);
    pthread_mutex_unlock(&c->lock);
  }
}

ul_result_t host_comm_topology(ul_backend_comm_t *c, int peer, ul_link_info_t *out) {
  if (peer < 0 || peer >= c->nranks)
    return ul_backend_set_error(c->handle, UL_ERR_INVALID_ARG,
                                "host: topology peer %d out of range for %d ranks", peer,
                                c->nranks);
  memset(out, 0, sizeof *out);
  out->peer = peer;
  out->source = UL_SOURCE_NONE; /* nothing measured: no invented numbers */
  if (peer == c->rank) {
    out->kind = UL_LINK_SELF;
    snprintf(out->description, sizeof out->description, "self");
  } else {
    out->kind = UL_LINK_SHM;
    snprintf(out->description, sizeof out->description, "%s",
             c->threads ? "shm (threads)" : "shm (processes)");
  }
  return UL_OK;
}

