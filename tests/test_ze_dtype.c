/* ze backend dtype handling (backends/ze/ze_common.c): every dtype moves and reduces
 * (reductions are host-staged in v1) and the staging plan splits a reduction into
 * chunks of whole elements. No device needed. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <unilink/unilink.h>

#ifdef UNILINK_HAVE_ZE_COMMON
#include "ze_common.h"

Test(ze_dtype, every_dtype_supported, .timeout = 10) {
  uint32_t m = ulze_dtype_mask();
  cr_assert_eq(m, 0xfffu);
  for (int d = 0; d < UL_DTYPE_COUNT; d++) cr_assert(m & (1u << d), "dtype %d", d);
  cr_assert_eq(m >> UL_DTYPE_COUNT, 0u, "no bits beyond the known dtypes");
}

Test(ze_dtype, stage_plan_whole_elements, .timeout = 10) {
  size_t per = 0, n = 0;
  cr_assert_eq(ulze_stage_plan(10, UL_FP32, 16, &per, &n), UL_OK);
  cr_assert_eq(per, 4); cr_assert_eq(n, 3); /* 4 + 4 + 2 */
  cr_assert_eq(ulze_stage_plan(8, UL_FP32, 16, &per, &n), UL_OK);
  cr_assert_eq(per, 4); cr_assert_eq(n, 2);
  cr_assert_eq(ulze_stage_plan(3, UL_BF16, 5, &per, &n), UL_OK); /* 5 B hold 2 x 2 B */
  cr_assert_eq(per, 2); cr_assert_eq(n, 2);
  cr_assert_eq(ulze_stage_plan(7, UL_FP8_E5M2, 3, &per, &n), UL_OK);
  cr_assert_eq(per, 3); cr_assert_eq(n, 3);
  cr_assert_eq(ulze_stage_plan(0, UL_FP64, 4096, &per, &n), UL_OK);
  cr_assert_eq(per, 512); cr_assert_eq(n, 0);
  cr_assert_eq(ulze_stage_plan(1000003, UL_INT64, 4u << 20, &per, &n), UL_OK);
  cr_assert_eq(per, 524288); cr_assert_eq(n, 2);
}

Test(ze_dtype, stage_plan_rejects_bad_input_unchanged, .timeout = 10) {
  size_t per = 77, n = 88;
  cr_assert_eq(ulze_stage_plan(4, (ul_dtype_t)UL_DTYPE_COUNT, 4096, &per, &n), UL_ERR_INVALID_ARG);
  cr_assert_eq(ulze_stage_plan(4, UL_FP64, 7, &per, &n), UL_ERR_INVALID_ARG); /* < one element */
  cr_assert_eq(ulze_stage_plan(SIZE_MAX / 4, UL_FP64, 4096, &per, &n), UL_ERR_INVALID_ARG);
  cr_assert_eq(per, 77); cr_assert_eq(n, 88);
  cr_assert_eq(ulze_stage_plan(4, UL_FP32, 4096, NULL, &n), UL_ERR_INVALID_ARG);
}
#else
Test(ze_dtype, not_built, .timeout = 10) { cr_skip_test("ze helpers not configured: nothing to test"); }
#endif
