/* Backend registry: plugin loading and refusal, stubs, probing, auto choice, info. */
#include <criterion/criterion.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ul_core.h"

#define PLUGIN_DIR UNILINK_TEST_BUILD_DIR "/test-plugins"

static char log_path[256];

static void setup(void) {
  snprintf(log_path, sizeof log_path, "/tmp/unilink-test-registry-%ld.txt", (long)getpid());
  unlink(log_path);
  setenv("UNILINK_DEBUG_FILE", log_path, 1);
  setenv("UNILINK_DEBUG", "warn", 1);
  unsetenv("UNILINK_DEBUG_SUBSYS");
  ul__log_reset();
  setenv("UNILINK_PLUGIN_PATH", PLUGIN_DIR, 1);
  ul__registry_reset();
}
static void teardown(void) {
  ul__registry_reset();
  unlink(log_path);
}

static int log_count(const char *needle) {
  FILE *f = fopen(log_path, "r");
  if (f == NULL) return 0;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  int c = 0;
  for (const char *p = buf; (p = strstr(p, needle)) != NULL; p += strlen(needle)) c++;
  return c;
}

static ul_backend_info_t query(const char *name) {
  ul_backend_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ul_result_t rc = ul_backend_query(name, &info);
  cr_assert_eq(rc, UL_OK, "query %s: %s (%s)", name, ul_result_name(rc), ul_last_error());
  return info;
}

TestSuite(registry, .init = setup, .fini = teardown);

/* ------------------------------------------------------------------ plugins */
Test(registry, good_plugin_is_loaded, .timeout = 20) {
  ul_backend_info_t info = query("testgood");
  cr_assert_str_eq(info.name, "testgood");
  cr_assert_str_eq(info.description, "test plugin: few ops, short table");
  cr_assert_eq(info.available, 1);
  cr_assert_str_eq(info.reason, "");
  cr_assert_eq(info.plugin, 1);
  char real[PATH_MAX];
  cr_assert_not_null(realpath(PLUGIN_DIR "/libunilink-testgood.so", real));
  cr_assert_str_eq(info.origin, real);
  cr_assert_str_eq(info.version, "testgood 1.2.3");
  cr_assert_eq(info.features, UL_FEATURE_THREAD_RANKS | UL_FEATURE_GENERIC_COLL | UL_FEATURE_P2P);
  /* Generic layer: all nine collectives and the two vector ones, plus send/recv from P2P. */
  cr_assert_eq(info.collectives, 0xfffu);
  cr_assert_eq(info.dtypes, (1u << UL_INT32) | (1u << UL_FP32));
  cr_assert_eq(info.reduce_dtypes, 1u << UL_FP32);
  cr_assert_eq(info.ops, (1u << UL_SUM) | (1u << UL_MAX));
  cr_assert_eq(info.max_ranks, 8);
  cr_assert_eq(log_count("testgood"), 0, "a good plugin must not warn");
}

Test(registry, missing_ops_are_stubs, .timeout = 20) {
  ul__backend_t *b = NULL;
  cr_assert_eq(ul__registry_find("testgood", &b), UL_OK, "%s", ul_last_error());
  cr_assert_not_null(b);
  /* Provided ops are the plugin's own. */
  cr_assert_not(ul__op_is_stub((const void *)b->ops.get_unique_id));
  cr_assert_not(ul__op_is_stub((const void *)b->ops.init));
  unsigned char payload[UL_BACKEND_ID_PAYLOAD_BYTES] = {0};
  cr_assert_eq(b->ops.get_unique_id(payload, sizeof payload), UL_OK);
  cr_assert_eq(payload[0], 0xA0);
  cr_assert_eq(payload[17], 0xA1);
  /* NULL inside struct_size: stub. */
  cr_assert(ul__op_is_stub((const void *)b->ops.comm_init));
  ul_backend_comm_t *bc = NULL;
  cr_assert_eq(b->ops.comm_init(NULL, &bc, NULL), UL_ERR_UNSUPPORTED);
  /* Non-NULL but past struct_size: never the plugin's function. */
  cr_assert(ul__op_is_stub((const void *)b->ops.comm_topology));
  cr_assert_eq(b->ops.comm_topology(NULL, 0, NULL), UL_ERR_UNSUPPORTED);
  cr_assert(ul__op_is_stub((const void *)b->ops.put));
  cr_assert_eq(b->ops.put(NULL, NULL, 0, 0, NULL, 0, NULL), UL_ERR_UNSUPPORTED);
  cr_assert(ul__op_is_stub((const void *)b->ops.annotate_call));
  cr_assert_eq(b->ops.annotate_call(NULL, NULL), UL_ERR_UNSUPPORTED);
  cr_assert(ul__op_is_stub((const void *)b->ops.fini));
  b->ops.fini(); /* a no-op, callable */
  /* Native collective table: present, every entry NULL. */
  cr_assert_not_null(b->ops.coll);
  cr_assert_null(b->coll.allreduce);
  cr_assert_null(b->coll.barrier);
  cr_assert_eq(b->ops.struct_size, sizeof(ul_backend_ops_t));
  /* Things that are not stubs. */
  cr_assert_not(ul__op_is_stub(NULL));
  cr_assert_not(ul__op_is_stub((const void *)ul_backend_count));
}

Test(registry, abi_mismatch_is_refused_and_listed, .timeout = 20) {
  ul_backend_info_t info = query("testabi");
  cr_assert_eq(info.available, 0);
  cr_assert_not_null(strstr(info.reason, "built for backend ABI 2.x, this libunilink speaks 1.x"),
                     "%s", info.reason);
  cr_assert_not_null(strstr(info.reason, "testabi"), "%s", info.reason);
  cr_assert_eq(info.plugin, 1);
  cr_assert_eq(log_count("WARN INIT refused plugin \"testabi\""), 1);
  ul__backend_t *b = NULL;
  cr_assert_eq(ul__registry_find("testabi", &b), UL_ERR_UNAVAILABLE);
  cr_assert_null(b);
  cr_assert_not_null(strstr(ul_last_error(), "ABI 2.x"), "%s", ul_last_error());
  /* Loading the same file again reports the refusal, without a second entry. */
  int n = ul_backend_count();
  cr_assert_eq(ul__registry_load_plugin(PLUGIN_DIR "/libunilink-testabi.so"), UL_ERR_VERSION);
  cr_assert_eq(ul_backend_count(), n);
}

Test(registry, refused_name_can_be_taken_by_a_valid_table, .timeout = 20) {
  /* e.g. a fixed plugin in a later folder behind a broken one: the valid one is used. */
  cr_assert_eq(query("testabi").available, 0);
  static const ul_backend_ops_t fixed = {.abi_version = UL_BACKEND_ABI_VERSION,
                                         .struct_size = sizeof(ul_backend_ops_t),
                                         .name = "testabi"};
  cr_assert_eq(ul__registry_add(&fixed, NULL, NULL), UL_OK, "%s", ul_last_error());
  ul_backend_info_t info = query("testabi");
  cr_assert_eq(info.available, 1);
  cr_assert_str_eq(info.origin, "built-in");
}

Test(registry, short_table_is_refused, .timeout = 20) {
  ul_backend_info_t info = query("testshort");
  cr_assert_eq(info.available, 0);
  cr_assert_not_null(strstr(info.reason, "smaller than the"), "%s", info.reason);
  cr_assert_eq(log_count("refused plugin \"testshort\""), 1);
  cr_assert_eq(ul__registry_load_plugin(PLUGIN_DIR "/libunilink-testshort.so"), UL_ERR_VERSION);
}

Test(registry, unavailable_reason_surfaces, .timeout = 20) {
  ul_backend_info_t info = query("testunavail");
  cr_assert_eq(info.available, 0);
  cr_assert_str_eq(info.reason, "testunavail: no frobnicator device found (error 42)");
  /* Static caps are still reported. */
  cr_assert_eq(info.collectives, 1u << UL_COLL_ALLREDUCE);
  cr_assert_eq(info.dtypes, 1u << UL_FP16);
  ul__backend_t *b = NULL;
  cr_assert_eq(ul__registry_find("testunavail", &b), UL_ERR_UNAVAILABLE);
  cr_assert_not_null(strstr(ul_last_error(), "no frobnicator device found"), "%s",
                     ul_last_error());
  /* Highest priority, but unavailable: auto never picks it. */
  const char *a = ul_backend_auto();
  cr_assert(a == NULL || strcmp(a, "testunavail") != 0);
  cr_assert_eq(log_count("testunavail"), 0, "unavailable is not a warning");
}

Test(registry, unloadable_file_is_listed_unavailable, .timeout = 20) {
  char dir[] = "/tmp/unilink-test-plugins-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/libunilink-broken.so", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("not an ELF file\n", f);
  fclose(f);
  char pp[PATH_MAX * 2];
  snprintf(pp, sizeof pp, "%s:%s", dir, PLUGIN_DIR);
  setenv("UNILINK_PLUGIN_PATH", pp, 1);
  ul__registry_reset();
  ul_backend_info_t info = query("broken");
  cr_assert_eq(info.available, 0);
  cr_assert_not_null(strstr(info.reason, "could not be loaded"), "%s", info.reason);
  query("testgood"); /* later folders still scanned */
  unlink(path);
  rmdir(dir);
}

Test(registry, plugins_only_from_the_path, .timeout = 20) {
  unsetenv("UNILINK_PLUGIN_PATH");
  ul__registry_reset();
  ul_backend_info_t info;
  info.struct_size = sizeof info;
  cr_assert_eq(ul_backend_query("testgood", &info), UL_ERR_NOT_FOUND);
  cr_assert_not_null(strstr(ul_last_error(), "unknown backend \"testgood\""), "%s",
                     ul_last_error());
  ul__backend_t *b;
  cr_assert_eq(ul__registry_find("testgood", &b), UL_ERR_NOT_FOUND);
  /* Empty components and missing folders are ignored. */
  setenv("UNILINK_PLUGIN_PATH", "::/nonexistent-unilink-dir:" PLUGIN_DIR ":", 1);
  ul__registry_reset();
  query("testgood");
}

/* ------------------------------------------------------------ added tables */
static int counted_init_calls, counted_fini_calls, counted_caps_calls;
static ul_result_t counted_init(char *reason, size_t len) {
  __atomic_add_fetch(&counted_init_calls, 1, __ATOMIC_SEQ_CST);
  usleep(20000); /* widen the race window for the concurrency test */
  return UL_OK;
}
static void counted_fini(void) { counted_fini_calls++; }
static ul_result_t counted_caps(ul_backend_caps_t *caps) {
  counted_caps_calls++;
  cr_assert_eq(caps->struct_size, sizeof *caps);
  caps->features = UL_FEATURE_NATIVE_COLL;
  return UL_OK;
}
static ul_result_t counted_allreduce(ul_backend_comm_t *c, const void *s, void *r, size_t n,
                                     ul_dtype_t d, ul_op_t o, ul_backend_stream_t *st) {
  return UL_OK;
}
static ul_result_t counted_broadcast(ul_backend_comm_t *c, const void *s, void *r, size_t n,
                                     ul_dtype_t d, int root, ul_backend_stream_t *st) {
  return UL_OK;
}
static ul_result_t counted_reduce(ul_backend_comm_t *c, const void *s, void *r, size_t n,
                                  ul_dtype_t d, ul_op_t o, int root, ul_backend_stream_t *st) {
  return UL_OK;
}

/* An "older" coll table: struct_size covers allreduce and broadcast only. */
static const ul_backend_coll_ops_t counted_coll = {
    .struct_size = offsetof(ul_backend_coll_ops_t, reduce),
    .allreduce = counted_allreduce,
    .broadcast = counted_broadcast,
    .reduce = counted_reduce, /* past struct_size: must be ignored */
};

static const ul_backend_ops_t counted_ops = {
    .abi_version = UL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ul_backend_ops_t),
    .name = "counted",
    .description = "counts its probes",
    .priority = INT_MIN,
    .init = counted_init,
    .fini = counted_fini,
    .query_caps = counted_caps,
    .coll = &counted_coll,
};

Test(registry, probe_once_then_fini_at_reset, .timeout = 20) {
  cr_assert_eq(ul__registry_add(&counted_ops, NULL, NULL), UL_OK, "%s", ul_last_error());
  cr_assert_eq(counted_init_calls, 0, "probing is lazy");
  ul_backend_info_t info = query("counted");
  cr_assert_eq(info.available, 1);
  cr_assert_str_eq(info.origin, "built-in");
  cr_assert_eq(info.plugin, 0);
  query("counted");
  ul__backend_t *b;
  cr_assert_eq(ul__registry_find("counted", &b), UL_OK);
  cr_assert_eq(counted_init_calls, 1);
  cr_assert_eq(counted_caps_calls, 1);
  ul__registry_reset();
  cr_assert_eq(counted_fini_calls, 1);
  /* Tables added by hand are forgotten; plugins are found again. */
  ul_backend_info_t gone = {.struct_size = sizeof gone};
  cr_assert_eq(ul_backend_query("counted", &gone), UL_ERR_NOT_FOUND);
  query("testgood");
}

Test(registry, coll_table_copied_within_its_size, .timeout = 20) {
  cr_assert_eq(ul__registry_add(&counted_ops, NULL, NULL), UL_OK);
  ul__backend_t *b;
  cr_assert_eq(ul__registry_find("counted", &b), UL_OK);
  cr_assert(b->coll.allreduce == counted_allreduce);
  cr_assert(b->coll.broadcast == counted_broadcast);
  cr_assert_null(b->coll.reduce);
  cr_assert_null(b->coll.barrier);
  cr_assert(b->ops.coll == &b->coll);
  ul_backend_info_t info = query("counted");
  cr_assert_eq(info.collectives, (1u << UL_COLL_ALLREDUCE) | (1u << UL_COLL_BROADCAST));
}

static void *query_counted(void *arg) {
  ul_backend_info_t info = {.struct_size = sizeof info};
  *(ul_result_t *)arg = ul_backend_query("counted", &info);
  return NULL;
}

Test(registry, concurrent_probe_runs_init_once, .timeout = 20) {
  cr_assert_eq(ul__registry_add(&counted_ops, NULL, NULL), UL_OK);
  pthread_t t[8];
  ul_result_t rc[8];
  for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, query_counted, &rc[i]);
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    cr_assert_eq(rc[i], UL_OK);
  }
  cr_assert_eq(counted_init_calls, 1);
}

static void *count_backends(void *arg) {
  *(int *)arg = ul_backend_count();
  return NULL;
}

Test(registry, concurrent_first_use_loads_once, .timeout = 20) {
  pthread_t t[8];
  int n[8];
  for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, count_backends, &n[i]);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  for (int i = 1; i < 8; i++) cr_assert_eq(n[i], n[0]);
  /* Each test plugin appears exactly once. */
  int seen = 0;
  for (int i = 0; i < n[0]; i++) {
    ul_backend_info_t info = {.struct_size = sizeof info};
    cr_assert_eq(ul_backend_get_info(i, &info), UL_OK);
    if (strcmp(info.name, "testgood") == 0) seen++;
  }
  cr_assert_eq(seen, 1);
}

static ul_result_t avail_init(char *reason, size_t len) { return UL_OK; }
static ul_result_t unavail_init(char *reason, size_t len) { return UL_ERR_BACKEND; }
#define TABLE(var, nm, prio, initfn)                                                  \
  static const ul_backend_ops_t var = {.abi_version = UL_BACKEND_ABI_VERSION,         \
                                       .struct_size = sizeof(ul_backend_ops_t),       \
                                       .name = nm,                                    \
                                       .priority = prio,                              \
                                       .init = initfn}
TABLE(t_alpha, "alpha", INT_MAX - 1, avail_init);
TABLE(t_beta, "beta", INT_MAX, avail_init);
TABLE(t_gamma, "gamma", INT_MAX, avail_init);
TABLE(t_delta, "delta", INT_MAX, unavail_init);

Test(registry, auto_picks_highest_available_priority, .timeout = 20) {
  cr_assert_eq(ul__registry_add(&t_delta, NULL, NULL), UL_OK);
  cr_assert_eq(ul__registry_add(&t_alpha, NULL, NULL), UL_OK);
  cr_assert_eq(ul__registry_add(&t_beta, NULL, NULL), UL_OK);
  cr_assert_eq(ul__registry_add(&t_gamma, NULL, NULL), UL_OK);
  cr_assert_str_eq(ul_backend_auto(), "beta"); /* tie with gamma: registered first */
  ul__backend_t *b;
  cr_assert_eq(ul__registry_find(NULL, &b), UL_OK);
  cr_assert_str_eq(b->ops.name, "beta");
  cr_assert_eq(ul__registry_find("auto", &b), UL_OK);
  cr_assert_str_eq(b->ops.name, "beta");
  cr_assert_eq(ul__registry_find("", &b), UL_OK);
  cr_assert_str_eq(b->ops.name, "beta");
  cr_assert_str_eq(query("auto").name, "beta");
  /* Options after ':' do not take part in the lookup; names are case-insensitive. */
  cr_assert_eq(ul__registry_find("alpha:some-option", &b), UL_OK);
  cr_assert_str_eq(b->ops.name, "alpha");
  cr_assert_eq(ul__registry_find("GAMMA", &b), UL_OK);
  cr_assert_str_eq(b->ops.name, "gamma");
  /* An init failure without a reason gets one. */
  ul_backend_info_t d = query("delta");
  cr_assert_eq(d.available, 0);
  cr_assert_str_eq(d.reason, "init returned UL_ERR_BACKEND (backend (vendor library) error)");
}

TABLE(t_dup1, "dup", 0, avail_init);
TABLE(t_dup2, "dup", 5, unavail_init);
TABLE(t_upper, "Upper", 0, avail_init);
TABLE(t_auto, "auto", 0, avail_init);
TABLE(t_noname, NULL, 0, avail_init);
TABLE(t_long, "abcdefghijklmnopqrstuvwxyz0123456", 0, avail_init);

Test(registry, table_validation, .timeout = 20) {
  cr_assert_eq(ul__registry_add(&t_dup1, NULL, NULL), UL_OK);
  cr_assert_eq(ul__registry_add(&t_dup2, "second", NULL), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "same name"), "%s", ul_last_error());
  ul_backend_info_t info = query("dup");
  cr_assert_eq(info.available, 1, "the first table of a name wins");
  ul__backend_t *b;
  cr_assert_eq(ul__registry_find("dup", &b), UL_OK);
  cr_assert_eq(b->ops.priority, 0);

  cr_assert_eq(ul__registry_add(&t_upper, NULL, NULL), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "lowercase"), "%s", ul_last_error());
  cr_assert_eq(ul__registry_add(&t_auto, NULL, NULL), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "reserved"), "%s", ul_last_error());
  cr_assert_eq(ul__registry_add(&t_noname, NULL, NULL), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "no name"), "%s", ul_last_error());
  cr_assert_eq(ul__registry_add(&t_long, NULL, NULL), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul__registry_add(NULL, NULL, NULL), UL_ERR_INVALID_ARG);

  ul_backend_ops_t abi = t_alpha;
  abi.name = "future";
  abi.abi_version = (3u << 16) | 7u;
  cr_assert_eq(ul__registry_add(&abi, NULL, NULL), UL_ERR_VERSION);
  cr_assert_not_null(strstr(ul_last_error(), "ABI 3.x, this libunilink speaks 1.x"), "%s",
                     ul_last_error());
  ul_backend_info_t f = query("future");
  cr_assert_eq(f.available, 0);

  /* A newer minor ABI with a bigger table is accepted; only known ops are read. */
  struct {
    ul_backend_ops_t ops;
    void *newer_op;
  } bigger = {.ops = t_alpha, .newer_op = (void *)1};
  bigger.ops.name = "bigger";
  bigger.ops.abi_version = UL_BACKEND_ABI_VERSION + 5;
  bigger.ops.struct_size = sizeof bigger;
  cr_assert_eq(ul__registry_add(&bigger.ops, NULL, NULL), UL_OK, "%s", ul_last_error());
  cr_assert_eq(query("bigger").available, 1);
}

static ul_result_t partial_put(ul_backend_comm_t *c, ul_backend_window_t *w, int peer, size_t off,
                               const void *src, size_t bytes, ul_backend_stream_t *s) {
  return UL_OK;
}

Test(registry, op_cut_by_struct_size_is_a_stub, .timeout = 20) {
  /* struct_size ends in the middle of put: half a pointer must never be used. */
  static ul_backend_coll_ops_t coll;
  coll.struct_size = offsetof(ul_backend_coll_ops_t, broadcast) + 2;
  coll.allreduce = counted_allreduce;
  coll.broadcast = counted_broadcast;
  ul_backend_ops_t t = t_alpha;
  t.name = "partial";
  t.put = partial_put;
  t.coll = &coll;
  t.struct_size = offsetof(ul_backend_ops_t, put) + 4;
  cr_assert_eq(ul__registry_add(&t, NULL, NULL), UL_OK, "%s", ul_last_error());
  ul__backend_t *b;
  cr_assert_eq(ul__registry_find("partial", &b), UL_OK);
  cr_assert(ul__op_is_stub((const void *)b->ops.put));
  cr_assert_not(ul__op_is_stub((const void *)b->ops.init));
  /* coll lies past struct_size: not read at all. */
  cr_assert_null(b->coll.allreduce);
  /* Now a full table whose coll table ends in the middle of broadcast. */
  t.name = "partialcoll";
  t.struct_size = sizeof t;
  cr_assert_eq(ul__registry_add(&t, NULL, NULL), UL_OK, "%s", ul_last_error());
  cr_assert_eq(ul__registry_find("partialcoll", &b), UL_OK);
  cr_assert(b->coll.allreduce == counted_allreduce);
  cr_assert_null(b->coll.broadcast);
  cr_assert(b->ops.put == partial_put);
}

/* --------------------------------------------------------------- public info */
Test(registry, get_info_arguments, .timeout = 20) {
  int n = ul_backend_count();
  cr_assert_geq(n, 4); /* the four test plugins at least */
  ul_backend_info_t info = {.struct_size = sizeof info};
  cr_assert_eq(ul_backend_get_info(0, NULL), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_backend_get_info(-1, &info), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_backend_get_info(n, &info), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "out of range"), "%s", ul_last_error());
  info.struct_size = 4;
  cr_assert_eq(ul_backend_get_info(0, &info), UL_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(ul_last_error(), "struct_size"), "%s", ul_last_error());
  cr_assert_eq(ul_backend_query(NULL, &info), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul_backend_query("testgood", NULL), UL_ERR_INVALID_ARG);
  for (int i = 0; i < n; i++) {
    ul_backend_info_t all = {.struct_size = sizeof all};
    cr_assert_eq(ul_backend_get_info(i, &all), UL_OK);
    cr_assert_not_null(all.name);
    cr_assert_gt(strlen(all.origin), 0);
    cr_assert_eq(all.available ? all.reason[0] == '\0' : all.reason[0] != '\0', 1, "%s: %s",
                 all.name, all.reason);
  }
}

Test(registry, get_info_writes_only_struct_size_bytes, .timeout = 20) {
  int idx = -1;
  for (int i = 0; i < ul_backend_count(); i++) {
    ul_backend_info_t all = {.struct_size = sizeof all};
    ul_backend_get_info(i, &all);
    if (strcmp(all.name, "testgood") == 0) idx = i;
  }
  cr_assert_geq(idx, 0);
  /* An "older" caller whose struct ends after reason. */
  ul_backend_info_t info;
  memset(&info, 0x5a, sizeof info);
  const size_t older = offsetof(ul_backend_info_t, features);
  info.struct_size = older;
  cr_assert_eq(ul_backend_get_info(idx, &info), UL_OK);
  cr_assert_eq(info.struct_size, older);
  cr_assert_str_eq(info.name, "testgood");
  cr_assert_eq(info.available, 1);
  const unsigned char *tail = (const unsigned char *)&info + older;
  for (size_t i = 0; i < sizeof info - older; i++) cr_assert_eq(tail[i], 0x5a, "byte %zu", i);
}

Test(registry, registry_at_bounds, .timeout = 20) {
  int n = ul__registry_count();
  cr_assert_eq(n, ul_backend_count());
  cr_assert_null(ul__registry_at(-1));
  cr_assert_null(ul__registry_at(n));
  for (int i = 0; i < n; i++) {
    ul__backend_t *b = ul__registry_at(i);
    cr_assert_not_null(b);
    cr_assert_eq(b->probed, 1);
  }
  cr_assert_eq(ul__registry_load_plugin(NULL), UL_ERR_INVALID_ARG);
  cr_assert_eq(ul__registry_load_plugin("/nonexistent/libunilink-x.so"), UL_ERR_NOT_FOUND);
}

/* The same plugin found in two folders: the second copy is refused, and its record must
 * not point into the copy's strings, which dlclose unmaps (it crashed before). */
Test(registry, same_plugin_in_two_folders, .timeout = 20) {
  char dir[64], cmd[512];
  snprintf(dir, sizeof dir, "/tmp/unilink-dup-plugin-%ld", (long)getpid());
  snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/libunilink-testgood.so %s/", dir, PLUGIN_DIR, dir);
  cr_assert_eq(system(cmd), 0);
  char path[256];
  snprintf(path, sizeof path, "%s:%s", PLUGIN_DIR, dir);
  setenv("UNILINK_PLUGIN_PATH", path, 1);
  ul__registry_reset();
  int n = ul_backend_count(), found = 0, refused = 0;
  for (int i = 0; i < n; i++) {
    ul_backend_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    cr_assert_eq(ul_backend_get_info(i, &info), UL_OK);
    if (strcmp(info.name, "testgood") == 0) {
      found++;
      refused += strstr(info.reason, "same name") != NULL;
    }
  }
  cr_assert_eq(found, 2, "the used copy and the refused one are both listed");
  cr_assert_eq(refused, 1);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  system(cmd);
}
