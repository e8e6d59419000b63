/* backends/util/wait.h, the one timed wait of every backend: a condition already
 * reached, one reached by another thread, the timeout (the backend's result, after about
 * the set time), the abort flag seen by the backend's check, a failing check, a failing
 * poll. Timing asserts are generous bounds: the machine may be loaded. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "../backends/util/wait.h"

typedef struct flag_cond {
  atomic_int set;   /* the condition */
  atomic_int polls; /* how often it was polled */
} flag_cond_t;

static ul_result_t flag_poll(void *arg) {
  flag_cond_t *f = arg;
  atomic_fetch_add(&f->polls, 1);
  return atomic_load(&f->set) ? UL_OK : UL_IN_PROGRESS;
}

/* What a backend's callbacks saw: the checks, the abort flag, the timeout's arguments. */
typedef struct fake_backend {
  atomic_int abort_flag;
  int checks;
  int expired_calls;
  int expired_timeout_ms;
  const char *expired_what;
  ul_result_t fail_check_with; /* UL_OK: the check passes */
  int fail_after;              /* checks that pass before the failure */
} fake_backend_t;

static ul_result_t fake_check(void *arg, double elapsed_ms, const char *what) {
  (void)elapsed_ms;
  (void)what;
  fake_backend_t *b = arg;
  b->checks++;
  if (atomic_load(&b->abort_flag)) return UL_ERR_ABORTED;
  if (b->fail_check_with != UL_OK && b->checks > b->fail_after) return b->fail_check_with;
  return UL_OK;
}

static ul_result_t fake_expired(void *arg, int timeout_ms, const char *what) {
  fake_backend_t *b = arg;
  b->expired_calls++;
  b->expired_timeout_ms = timeout_ms;
  b->expired_what = what;
  return UL_ERR_TIMEOUT;
}

static ulbu_waiter_t waiter(fake_backend_t *b, int timeout_ms) {
  ulbu_waiter_t w = {.arg = b,
                     .check = fake_check,
                     .expired = fake_expired,
                     .timeout_ms = timeout_ms,
                     .spin = 16,
                     .yield_ms = 1.0,
                     .sleep_ns = 100000L};
  return w;
}

Test(backend_wait, condition_already_true_returns_at_once, .timeout = 10) {
  fake_backend_t b = {0};
  flag_cond_t f = {1, 0};
  ulbu_waiter_t w = waiter(&b, 1000);
  ulbu_cond_t cond = {flag_poll, NULL, &f};
  double el = -1;
  cr_assert_eq(ulbu_wait(&w, &cond, "ready", &el), UL_OK);
  cr_assert_eq(atomic_load(&f.polls), 1, "polled once");
  cr_assert_eq(b.checks, 0, "no backoff, no check");
  cr_assert_eq(el, 0.0, "the spin never ended");
}

static void *set_later(void *arg) {
  flag_cond_t *f = arg;
  struct timespec ts = {0, 20 * 1000000L};
  nanosleep(&ts, NULL);
  atomic_store(&f->set, 1);
  return NULL;
}

Test(backend_wait, condition_set_by_another_thread, .timeout = 10) {
  fake_backend_t b = {0};
  flag_cond_t f = {0, 0};
  ulbu_waiter_t w = waiter(&b, 5000);
  ulbu_cond_t cond = {flag_poll, NULL, &f};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, set_later, &f), 0);
  double el = -1;
  ul_result_t rc = ulbu_wait(&w, &cond, "set later", &el);
  pthread_join(t, NULL);
  cr_assert_eq(rc, UL_OK);
  cr_assert_eq(b.expired_calls, 0);
  cr_assert_gt(b.checks, 0, "the backend's check ran while waiting");
  cr_assert_gt(el, 5.0, "waited for the other thread (%.3f ms)", el);
  cr_assert_lt(el, 4000.0, "woke up well before the timeout (%.3f ms)", el);
}

/* A condition whose block callback is used for the sleep phase. */
typedef struct block_cond {
  flag_cond_t f;
  int blocks;
} block_cond_t;

static ul_result_t block_poll(void *arg) { return flag_poll(&((block_cond_t *)arg)->f); }

static void block_sleep(void *arg, long ns) {
  block_cond_t *x = arg;
  x->blocks++;
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  nanosleep(&ts, NULL);
}

Test(backend_wait, timeout_returns_the_backend_result_after_about_the_set_time, .timeout = 10) {
  fake_backend_t b = {0};
  block_cond_t x = {{0, 0}, 0};
  ulbu_waiter_t w = waiter(&b, 100);
  ulbu_cond_t cond = {block_poll, block_sleep, &x};
  double t0 = ulbu_now_ms();
  ul_result_t rc = ulbu_wait(&w, &cond, "never", NULL);
  double took = ulbu_now_ms() - t0;
  cr_assert_eq(rc, UL_ERR_TIMEOUT);
  cr_assert_eq(b.expired_calls, 1, "the backend's timeout sentence was asked for once");
  cr_assert_eq(b.expired_timeout_ms, 100);
  cr_assert_str_eq(b.expired_what, "never");
  cr_assert_geq(took, 99.0, "not before the timeout (%.3f ms)", took);
  cr_assert_lt(took, 3000.0, "not long after it (%.3f ms)", took);
  cr_assert_gt(x.blocks, 0, "slept through the condition's block callback");
}

Test(backend_wait, timeout_without_expired_callback_is_plain_timeout, .timeout = 10) {
  flag_cond_t f = {0, 0};
  ulbu_waiter_t w = {.timeout_ms = 20, .spin = 4, .yield_ms = 1.0, .sleep_ns = 100000L};
  ulbu_cond_t cond = {flag_poll, NULL, &f};
  cr_assert_eq(ulbu_wait(&w, &cond, "plain", NULL), UL_ERR_TIMEOUT);
}

static void *abort_later(void *arg) {
  fake_backend_t *b = arg;
  struct timespec ts = {0, 20 * 1000000L};
  nanosleep(&ts, NULL);
  atomic_store(&b->abort_flag, 1);
  return NULL;
}

Test(backend_wait, abort_flag_ends_the_wait_before_the_timeout, .timeout = 10) {
  fake_backend_t b = {0};
  flag_cond_t f = {0, 0};
  ulbu_waiter_t w = waiter(&b, 0); /* forever: only the abort ends it */
  ulbu_cond_t cond = {flag_poll, NULL, &f};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, abort_later, &b), 0);
  ul_result_t rc = ulbu_wait(&w, &cond, "aborted", NULL);
  pthread_join(t, NULL);
  cr_assert_eq(rc, UL_ERR_ABORTED);
  cr_assert_eq(b.expired_calls, 0);
}

Test(backend_wait, failing_check_ends_the_wait_with_its_result, .timeout = 10) {
  fake_backend_t b = {.fail_check_with = UL_ERR_PEER_LOST, .fail_after = 3};
  flag_cond_t f = {0, 0};
  ulbu_waiter_t w = waiter(&b, 5000);
  ulbu_cond_t cond = {flag_poll, NULL, &f};
  cr_assert_eq(ulbu_wait(&w, &cond, "peer lost", NULL), UL_ERR_PEER_LOST);
  cr_assert_eq(b.checks, 4, "stopped at the first failing check");
  cr_assert_eq(b.expired_calls, 0);
}

/* recheck: what was finished before the failure counts. */
static ul_result_t set_then_fail_check(void *arg, double elapsed_ms, const char *what) {
  (void)elapsed_ms;
  (void)what;
  atomic_store(&((flag_cond_t *)arg)->set, 1);
  return UL_ERR_PEER_LOST;
}

Test(backend_wait, recheck_after_a_failing_check_sees_a_finished_condition, .timeout = 10) {
  flag_cond_t f = {0, 0};
  ulbu_waiter_t w = {.arg = &f, .check = set_then_fail_check, .timeout_ms = 1000,
                     .yield_ms = 1.0, .sleep_ns = 100000L, .recheck = 1};
  ulbu_cond_t cond = {flag_poll, NULL, &f};
  cr_assert_eq(ulbu_wait(&w, &cond, "recheck", NULL), UL_OK);
  atomic_store(&f.set, 0);
  w.recheck = 0;
  cr_assert_eq(ulbu_wait(&w, &cond, "no recheck", NULL), UL_ERR_PEER_LOST);
}

static ul_result_t failing_poll(void *arg) {
  int *n = arg;
  return ++*n < 3 ? UL_IN_PROGRESS : UL_ERR_BACKEND;
}

Test(backend_wait, failing_poll_ends_the_wait_with_its_result, .timeout = 10) {
  fake_backend_t b = {0};
  int n = 0;
  ulbu_waiter_t w = waiter(&b, 5000);
  ulbu_cond_t cond = {failing_poll, NULL, &n};
  cr_assert_eq(ulbu_wait(&w, &cond, "poll fails", NULL), UL_ERR_BACKEND);
  cr_assert_eq(n, 3);
}

Test(backend_wait, wait_since_shares_one_deadline, .timeout = 10) {
  fake_backend_t b = {0};
  flag_cond_t f = {0, 0};
  ulbu_waiter_t w = waiter(&b, 1000);
  ulbu_cond_t cond = {flag_poll, NULL, &f};
  /* A later stage of a wait that began 990 ms ago has about 10 ms left, not 1000. */
  double t0 = ulbu_now_ms() - 990.0;
  double start = ulbu_now_ms();
  cr_assert_eq(ulbu_wait_since(&w, &cond, "stage two", t0), UL_ERR_TIMEOUT);
  double took = ulbu_now_ms() - start;
  cr_assert_lt(took, 900.0, "the first stage's time counted (%.3f ms)", took);
}
