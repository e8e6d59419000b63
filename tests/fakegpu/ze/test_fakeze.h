/* Fixtures shared by the direct tests of the fake Level Zero loader (test_fakeze*.c):
 * a driver, context, devices and eight host events; lists, allocations and waits on them
 * (test_fakeze_fx.c). */
#ifndef UNILINK_TEST_FAKEZE_H
#define UNILINK_TEST_FAKEZE_H

#include <level_zero/ze_api.h>
#include <stddef.h>
#include <stdint.h>

#define ZE_OK(call) cr_assert_eq((call), ZE_RESULT_SUCCESS, "%s", #call)

typedef struct fx {
  ze_driver_handle_t drv;
  ze_context_handle_t ctx;
  ze_device_handle_t dev[8];
  uint32_t ndev;
  ze_event_pool_handle_t pool;
  ze_event_handle_t ev[8];
} fx_t;

void fx_init(fx_t *f);
void fx_fini(fx_t *f);
ze_command_list_handle_t fx_list(fx_t *f, int dev, uint32_t ordinal, int sync);
void *fx_dev_alloc(fx_t *f, int dev, size_t n);
void *fx_host_alloc(fx_t *f, size_t n);
/* Everything appended so far completes; the result of waiting on it. */
ze_result_t fx_sync(fx_t *f, ze_command_list_handle_t l);
/* A CPU load or store of @p in a child process must fault (device memory). */
void touch_in_child(void *p, int write);
void fill_pattern(unsigned char *p, size_t n, unsigned seed);

#endif
