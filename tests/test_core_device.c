/* The core on a device-memory backend: it never loads or stores device memory itself
 * (split, window registration and check mode stage their data through mem_copy), it
 * refuses pageable host buffers with a sentence, "auto" never picks a device backend,
 * and a split child stays on its parent's device. The backend here keeps its "device"
 * memory in fakemem (tests/fakegpu/common), which the CPU cannot touch: any core
 * dereference is a SIGSEGV, exactly as on a GPU. ul_mem_copy/ul_mem_set on host. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakemem.h"
#include "ul_core.h"

/* ------------------------------------------------------- fake device backend */
typedef struct dev_comm {
  int device;
  int allgathers;
} dev_comm_t;
static int g_natives;   /* native collectives that ran */
static int g_last_device;

static ul_result_t dev_init(char *reason, size_t len) { return UL_OK; }
static ul_result_t dev_caps(ul_backend_caps_t *caps) {
  caps->features = UL_FEATURE_THREAD_RANKS | UL_FEATURE_DEVICE_MEMORY | UL_FEATURE_NATIVE_COLL |
                   UL_FEATURE_SPLIT | UL_FEATURE_ONE_SIDED;
  caps->flags = 0; /* device memory, no host streams */
  caps->dtypes = caps->reduce_dtypes = ~0u;
  caps->ops = ~0u;
  caps->native_colls = (1u << UL_COLL_ALLGATHER) | (1u << UL_COLL_ALLREDUCE);
  return UL_OK;
}
static ul_result_t dev_id(unsigned char *p, size_t n) {
  memset(p, 7, n);
  return UL_OK;
}
static ul_result_t dev_comm_init(const ul_backend_comm_args_t *a, ul_backend_comm_t **out,
                                 ul_backend_comm_props_t *props) {
  dev_comm_t *c = calloc(1, sizeof *c);
  /* Like cuda with no device configured: the backend picks one (here 3) and says so. */
  c->device = a->device == UL_CONFIG_UNDEF ? 3 + a->rank : a->device;
  g_last_device = c->device;
  props->device = c->device;
  snprintf(props->path, sizeof props->path, "fake-device");
  *out = (ul_backend_comm_t *)c;
  return UL_OK;
}
static ul_result_t dev_comm_destroy(ul_backend_comm_t *c) {
  free(c);
  return UL_OK;
}
static ul_result_t dev_comm_noop(ul_backend_comm_t *c) { return UL_OK; }
static ul_result_t dev_alloc(ul_backend_comm_t *c, size_t n, void **p) {
  return fakemem_alloc(n, ((dev_comm_t *)c)->device, p) == 0 ? UL_OK : UL_ERR_NO_MEMORY;
}
static ul_result_t dev_free(ul_backend_comm_t *c, void *p) {
  return fakemem_free(p) == 0 ? UL_OK : UL_ERR_INVALID_ARG;
}
static ul_result_t dev_kind(ul_backend_comm_t *c, const void *p, size_t n,
                            ul_backend_mem_kind_t *kind) {
  *kind = fakemem_find(p, n, NULL) == 0 ? UL_BACKEND_MEM_DEVICE : UL_BACKEND_MEM_HOST;
  return UL_OK;
}
/* What the device would see: its own memory through the private alias, host memory as is
 * (copies only: kernels below refuse host pointers as a GPU would fault on them). */
static void *view(const void *p, size_t n) {
  void *v = fakemem_view(p, n, NULL);
  return v ? v : (void *)p;
}
static ul_result_t dev_copy(ul_backend_comm_t *c, void *dst, const void *src, size_t n,
                            ul_backend_stream_t *s) {
  memmove(view(dst, n), view(src, n), n);
  return UL_OK;
}
static ul_result_t dev_set(ul_backend_comm_t *c, void *dst, int v, size_t n,
                           ul_backend_stream_t *s) {
  memset(view(dst, n), v, n);
  return UL_OK;
}
/* One rank: allgather is a copy, but only between device buffers. */
static ul_result_t dev_allgather(ul_backend_comm_t *c, const void *s, void *r, size_t count,
                                 ul_dtype_t dt, ul_backend_stream_t *bs) {
  size_t n = count * ul_dtype_size(dt);
  void *vs = fakemem_view(s, n, NULL), *vr = fakemem_view(r, n, NULL);
  if (!vs || !vr) return UL_ERR_BACKEND; /* a GPU kernel would fault on a host pointer */
  memmove(vr, vs, n);
  g_natives++;
  return UL_OK;
}
static ul_result_t dev_allreduce(ul_backend_comm_t *c, const void *s, void *r, size_t count,
                                 ul_dtype_t dt, ul_op_t op, ul_backend_stream_t *bs) {
  return dev_allgather(c, s, r, count, dt, bs);
}
static ul_result_t dev_window(ul_backend_comm_t *c, void *base, size_t size, int extra,
                              ul_backend_window_t **out, void **bases) {
  *out = (ul_backend_window_t *)base;
  return UL_OK;
}
static ul_result_t dev_window_free(ul_backend_comm_t *c, ul_backend_window_t *w) { return UL_OK; }

static const ul_backend_coll_ops_t dev_coll = {
    .struct_size = sizeof(ul_backend_coll_ops_t), .allgather = dev_allgather,
    .allreduce = dev_allreduce};
static const ul_backend_ops_t dev_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "fakedevice",
    .description = "test: device-memory backend on fakemem",
    .priority = 1000, /* above host: auto must still not pick it */
    .init = dev_init,
    .query_caps = dev_caps,
    .get_unique_id = dev_id,
    .comm_init = dev_comm_init,
    .comm_destroy = dev_comm_destroy,
    .comm_abort = dev_comm_noop,
    .comm_finalize = dev_comm_noop,
    .mem_alloc = dev_alloc,
    .mem_free = dev_free,
    .mem_kind = dev_kind,
    .mem_copy = dev_copy,
    .mem_set = dev_set,
    .window_register = dev_window,
    .window_deregister = dev_window_free,
    .coll = &dev_coll,
};

static void setup(void) {
  setenv("UNILINK_PLUGIN_PATH", "/nonexistent", 1);
  unsetenv("UNILINK_BACKEND");
  unsetenv("UNILINK_CHECK");
  ul__registry_reset();
  cr_assert_eq(ul__registry_add(&dev_ops, NULL, NULL), UL_OK, "%s", ul_last_error());
  g_natives = 0;
}
static void teardown(void) { ul__registry_reset(); }
TestSuite(core_device, .init = setup, .fini = teardown, .timeout = 30);

static ul_comm_t dev_comm1(int check) {
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("fakedevice", &id), UL_OK, "%s", ul_last_error());
  ul_config_t cfg = UL_CONFIG_INIT;
  cfg.check = check;
  ul_comm_t c = NULL;
  cr_assert_eq(ul_comm_init_rank(&c, &cfg, 1, id, 0), UL_OK, "%s", ul_last_error());
  return c;
}

Test(core_device, auto_never_picks_a_device_backend) {
  cr_assert_str_eq(ul_backend_auto(), "host");
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id(NULL, &id), UL_OK);
  ul_comm_t c;
  cr_assert_eq(ul_comm_init_rank(&c, NULL, 1, id, 0), UL_OK, "%s", ul_last_error());
  const char *name;
  ul_comm_backend(c, &name);
  cr_assert_str_eq(name, "host");
  int x = 5, y = 0;
  cr_assert_eq(ul_allreduce(&x, &y, 1, UL_INT32, UL_SUM, c, NULL), UL_OK);
  ul_call_info_t info = {.struct_size = sizeof info};
  cr_assert_eq(ul_comm_last_call(c, &info), UL_OK);
  cr_assert(strstr(info.selection, "auto: host") != NULL, "selection: %s", info.selection);
  ul_comm_destroy(c);
  /* Asked for device memory: the device backend. */
  cr_assert_eq(ul_get_unique_id("auto:device", &id), UL_OK, "%s", ul_last_error());
  cr_assert_eq(ul_comm_init_rank(&c, NULL, 1, id, 0), UL_OK, "%s", ul_last_error());
  ul_comm_backend(c, &name);
  cr_assert_str_eq(name, "fakedevice");
  ul_comm_destroy(c);
}

Test(core_device, host_buffer_is_refused_and_nothing_runs) {
  ul_comm_t c = dev_comm1(0);
  int x = 5, y = 0;
  cr_assert_eq(ul_allreduce(&x, &y, 1, UL_INT32, UL_SUM, c, NULL), UL_ERR_INVALID_ARG);
  cr_assert(strstr(ul_comm_last_error(c), "sendbuf") && strstr(ul_comm_last_error(c), "host memory"),
            "%s", ul_comm_last_error(c));
  cr_assert_eq(g_natives, 0);
  cr_assert_eq(y, 0);
  void *d = NULL;
  cr_assert_eq(ul_mem_alloc(c, 64, &d), UL_OK);
  cr_assert_eq(ul_allreduce(d, &y, 1, UL_INT32, UL_SUM, c, NULL), UL_ERR_INVALID_ARG);
  cr_assert(strstr(ul_comm_last_error(c), "recvbuf"), "%s", ul_comm_last_error(c));
  cr_assert_eq(ul_comm_get_error(c), UL_OK, "an argument error is not sticky");
  /* Device buffers through ul_mem_copy: runs, exact. */
  cr_assert_eq(ul_mem_copy(d, &x, sizeof x, c, NULL), UL_OK);
  cr_assert_eq(ul_allreduce(d, (char *)d + 32, 1, UL_INT32, UL_SUM, c, NULL), UL_OK,
               "%s", ul_comm_last_error(c));
  cr_assert_eq(ul_mem_copy(&y, (char *)d + 32, sizeof y, c, NULL), UL_OK);
  cr_assert_eq(y, 5);
  cr_assert_eq(ul_mem_free(c, d), UL_OK);
  ul_comm_destroy(c);
}

Test(core_device, split_window_and_check_mode_never_touch_device_memory) {
  ul_comm_t c = dev_comm1(1);
  ul_comm_t child = NULL;
  /* Before: split allgathered a host struct with the device backend's allgather. */
  cr_assert_eq(ul_comm_split(c, 0, 0, &child, NULL), UL_OK, "%s", ul_comm_last_error(c));
  cr_assert_not_null(child);
  int dev = -1;
  ul_comm_device(child, &dev);
  cr_assert_eq(dev, 3, "the child stays on the parent's device 3, got %d", dev);
  void *d = NULL;
  cr_assert_eq(ul_mem_alloc(c, 4096, &d), UL_OK);
  ul_window_t w = NULL;
  cr_assert_eq(ul_window_register(c, d, 4096, &w), UL_OK, "%s", ul_comm_last_error(c));
  int x = 9;
  cr_assert_eq(ul_mem_copy(d, &x, sizeof x, c, NULL), UL_OK);
  /* Check mode: the argument records are exchanged through device scratch. */
  cr_assert_eq(ul_allreduce(d, (char *)d + 64, 1, UL_INT32, UL_SUM, c, NULL), UL_OK, "%s",
               ul_comm_last_error(c));
  cr_assert_eq(ul_window_deregister(w), UL_OK);
  ul_comm_destroy(child);
  cr_assert_eq(ul_mem_free(c, d), UL_OK);
  ul_comm_destroy(c);
  cr_assert_eq(fakemem_live(), 0, "exchange scratch freed with the communicator");
}

Test(core_device, cpu_touch_of_fake_device_memory_faults, .signal = SIGSEGV) {
  void *p = NULL;
  cr_assert_eq(fakemem_alloc(64, 0, &p), 0);
  signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would turn the fault into an exit */
  *(volatile int *)p = 1;
}

/* ---------------------------------------------------- ul_mem_copy / ul_mem_set */
Test(core_device, mem_copy_and_set_on_host) {
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("host", &id), UL_OK);
  ul_comm_t c;
  cr_assert_eq(ul_comm_init_rank(&c, NULL, 1, id, 0), UL_OK, "%s", ul_last_error());
  unsigned char a[64], b[64];
  for (int i = 0; i < 64; i++) a[i] = (unsigned char)i, b[i] = 0xee;
  cr_assert_eq(ul_mem_copy(b, a, 64, c, NULL), UL_OK);
  cr_assert_arr_eq(a, b, 64);
  cr_assert_eq(ul_mem_set(b, 0x5a, 16, c, NULL), UL_OK);
  for (int i = 0; i < 64; i++) cr_assert_eq(b[i], i < 16 ? 0x5a : i);
  /* On a stream: ordered, done at synchronize. */
  ul_stream_t s;
  cr_assert_eq(ul_stream_create(c, &s), UL_OK);
  cr_assert_eq(ul_mem_set(b, 1, 64, c, s), UL_OK);
  cr_assert_eq(ul_mem_copy(b + 8, a, 8, c, s), UL_OK);
  cr_assert_eq(ul_stream_synchronize(s), UL_OK);
  for (int i = 0; i < 64; i++) cr_assert_eq(b[i], i >= 8 && i < 16 ? i - 8 : 1);
  ul_stream_destroy(s);
  /* Bad input: clear error, nothing changed. */
  unsigned char before[64];
  memcpy(before, b, 64);
  cr_assert_eq(ul_mem_copy(b, b + 8, 16, c, NULL), UL_ERR_INVALID_ARG);
  cr_assert(strstr(ul_comm_last_error(c), "overlap"), "%s", ul_comm_last_error(c));
  cr_assert_eq(ul_mem_copy(NULL, a, 4, c, NULL), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_mem_copy(b, NULL, 4, c, NULL), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_mem_set(NULL, 0, 4, c, NULL), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_mem_copy(b, a, 4, NULL, NULL), UL_ERR_INVALID_ARG);
  cr_assert_arr_eq(before, b, 64);
  cr_assert_eq(ul_mem_copy(NULL, NULL, 0, c, NULL), UL_OK, "zero bytes is a no-op");
  ul_comm_destroy(c);
}

/* A stream outliving its communicator: the communicator releases its queue, the handle
 * refuses work and ul_stream_destroy frees it (it read the freed communicator before). */
Test(core_device, stream_destroyed_after_its_communicator) {
  ul_unique_id_t id;
  cr_assert_eq(ul_get_unique_id("host", &id), UL_OK);
  ul_comm_t c;
  cr_assert_eq(ul_comm_init_rank(&c, NULL, 1, id, 0), UL_OK, "%s", ul_last_error());
  ul_stream_t s;
  cr_assert_eq(ul_stream_create(c, &s), UL_OK);
  int x = 1, y = 0;
  cr_assert_eq(ul_allreduce(&x, &y, 1, UL_INT32, UL_SUM, c, s), UL_OK);
  cr_assert_eq(ul_comm_destroy(c), UL_OK);
  cr_assert_eq(y, 1, "queued work finished before the communicator went away");
  cr_assert_eq(ul_stream_synchronize(s), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_stream_query(s), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_stream_destroy(s), UL_OK);
}
