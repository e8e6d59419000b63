/* The test-only fault switch (UNILINK_FAULT=<collective>:offbyone adds 1 to element 0 of
 * rank 0's result, so the conformance suite can prove it catches wrong results).
 * CMake compiles this file twice, with and without UNILINK_TEST_HOOKS, and links the
 * variant the build asks for: a default or Release library has no switch at all, and the
 * other variant lets a test prove that (tests/test_fault_hooks.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ul_core.h"

#ifdef UNILINK_TEST_HOOKS
int ul__test_hooks_built(void) { return 1; }

void ul__fault_after_coll(ul_comm_t c, const ul__coll_args_t *a) {
  /* Read once: the fault is chosen when the test process starts, and a getenv per call
   * would cost every collective ~100 ns. */
  static int fault_set = -1;
  int set = __atomic_load_n(&fault_set, __ATOMIC_RELAXED);
  if (set < 0) {
    const char *e = getenv("UNILINK_FAULT");
    set = e && e[0];
    __atomic_store_n(&fault_set, set, __ATOMIC_RELAXED);
  }
  if (!set || c->rank != 0 || a->count == 0 || a->recvbuf == NULL) return;
  if (!(c->backend->caps.flags & UL_BACKEND_HOST_MEMORY)) return;
  const char *f = ul__param_get_str(UL__P_FAULT);
  char want[48];
  snprintf(want, sizeof want, "%s:offbyone", ul_coll_name(a->coll));
  if (strcmp(f, want) != 0) return;
  double v = ul_value_load(a->dtype, a->recvbuf);
  ul_value_store(a->dtype, a->recvbuf, v + 1.0);
}
#else
int ul__test_hooks_built(void) { return 0; }

void ul__fault_after_coll(ul_comm_t c, const ul__coll_args_t *a) {
  (void)c;
  (void)a;
}
#endif
