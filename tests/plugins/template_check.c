/* plugins.template: the documented template backend (backends/template), built by the main
 * project from its folder alone, loads as a plugin through UNILINK_PLUGIN_PATH, makes ids
 * and one-rank communicators, and answers UL_ERR_UNSUPPORTED for every op it left NULL.
 * Exit 0 when all holds; otherwise prints the first broken promise and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unilink/unilink.h>

#define CHECK(cond, ...)                                                                         \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "template_check: %s failed: ", #cond);                                     \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fprintf(stderr, " (last error: %s)\n", ul_last_error());                                   \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

int main(void) {
  const char *dir = getenv("UNILINK_PLUGIN_PATH");
  CHECK(dir && *dir, "UNILINK_PLUGIN_PATH must name the plugin's folder");
  ul_backend_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(ul_backend_query("template", &info) == UL_OK, "query");
  CHECK(strcmp(info.name, "template") == 0, "name %s", info.name);
  CHECK(info.plugin == 1, "loaded as a plugin");
  CHECK(strstr(info.origin, dir) && strstr(info.origin, "libunilink-template.so"), "origin %s",
        info.origin);
  CHECK(info.available == 1, "available (reason: %s)", info.reason);
  CHECK(info.features == UL_FEATURE_THREAD_RANKS, "features 0x%x", info.features);
  CHECK(info.max_ranks == 1, "max ranks %d", info.max_ranks);

  ul_unique_id_t id;
  CHECK(ul_get_unique_id("template", &id) == UL_OK, "unique id");
  ul_comm_t two = NULL;
  ul_result_t rc = ul_comm_init_rank(&two, NULL, 2, id, 0);
  CHECK(rc == UL_ERR_UNSUPPORTED && two == NULL && strstr(ul_last_error(), "runs one"),
        "two ranks refused with a sentence: %s", ul_result_string(rc));
  ul_comm_t comm = NULL;
  CHECK(ul_comm_init_rank(&comm, NULL, 1, id, 0) == UL_OK, "one-rank communicator");

  /* Ops the template left NULL: the core's stubs answer, the library does not crash. */
  float x[4] = {1, 2, 3, 4}, y[4];
  rc = ul_allreduce(x, y, 4, UL_FP32, UL_SUM, comm, NULL);
  CHECK(rc == UL_ERR_UNSUPPORTED, "allreduce: %s", ul_result_string(rc));
  rc = ul_send(x, 4, UL_FP32, 0, comm, NULL);
  CHECK(rc == UL_ERR_UNSUPPORTED, "send: %s", ul_result_string(rc));
  ul_window_t win = NULL;
  rc = ul_window_register(comm, x, sizeof x, &win);
  CHECK(rc == UL_ERR_UNSUPPORTED, "window_register: %s", ul_result_string(rc));
  CHECK(ul_comm_destroy(comm) == UL_OK, "destroy");
  printf("template_check: libunilink-template.so from %s: loaded, ids, one-rank comm, "
         "unsupported ops refused\n", dir);
  return 0;
}
