/* Does this libunilink honour UNILINK_FAULT? Built twice (tests/CMakeLists.txt): against
 * the library of this build and against the same objects with the fault switch compiled
 * out (what a default or Release build installs). Usage: fault_hooks_check on|off
 * "off": the result is exact, ul_build_option_get says test_hooks=off and no
 * UNILINK_FAULT parameter is listed. "on": the fault fires (element 0 is off by one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unilink/unilink.h>

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "on") && strcmp(argv[1], "off"))) {
    fprintf(stderr, "usage: %s on|off\n", argv[0]);
    return 2;
  }
  int want_on = strcmp(argv[1], "on") == 0;
  setenv("UNILINK_FAULT", "allreduce:offbyone", 1);
  const char *hooks = "?";
  for (int i = 0; i < ul_build_option_count(); i++) {
    const char *k, *v;
    if (ul_build_option_get(i, &k, &v) == UL_OK && strcmp(k, "test_hooks") == 0) hooks = v;
  }
  int listed = 0;
  for (int i = 0; i < ul_param_count(); i++) {
    ul_param_info_t p;
    if (ul_param_get(i, &p) == UL_OK && strcmp(p.name, "UNILINK_FAULT") == 0) listed = 1;
  }
  ul_unique_id_t id;
  ul_comm_t c;
  int32_t in[2] = {10, 20}, out[2] = {0, 0};
  if (ul_get_unique_id("host", &id) != UL_OK || ul_comm_init_rank(&c, NULL, 1, id, 0) != UL_OK) {
    fprintf(stderr, "init failed: %s\n", ul_last_error());
    return 1;
  }
  ul_result_t rc = ul_allreduce(in, out, 2, UL_INT32, UL_SUM, c, NULL);
  ul_comm_destroy(c);
  printf("test_hooks=%s UNILINK_FAULT listed=%d allreduce={%d,%d} rc=%s\n", hooks, listed,
         out[0], out[1], ul_result_name(rc));
  int ok = rc == UL_OK && out[1] == 20 && strcmp(hooks, want_on ? "on" : "off") == 0 &&
           listed == want_on && out[0] == (want_on ? 11 : 10);
  if (!ok) fprintf(stderr, "FAIL: expected the fault switch to be %s\n", argv[1]);
  return ok ? 0 : 1;
}
