/* Counts this process's sched_yield calls, for tests of where waits yield (decision
 * 0021). A test binary's own definition comes before libc's for every caller, the
 * library's inlined and shared-object waits included. Include it in one file of a test
 * binary. */
#ifndef UL_TEST_YIELD_COUNT_H
#define UL_TEST_YIELD_COUNT_H

#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

static atomic_long yields_seen;

int sched_yield(void) {
  atomic_fetch_add(&yields_seen, 1);
  return (int)syscall(SYS_sched_yield);
}

#endif
