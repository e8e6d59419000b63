/* ze backend helpers (backends/ze/ze_common.c): every ze_result_t of the installed
 * Level Zero header maps to a ul_result_t and keeps its name and raw value in the error
 * sentence. No Intel GPU or driver needed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unilink/unilink.h>

#ifdef UNILINK_HAVE_ZE_COMMON
#include "ze_common.h"

#ifdef UNILINK_ZE_API_HEADER
#include UNILINK_ZE_API_HEADER

/* Every enumerator of ze_result_t in the header this project builds against, with the
 * ul_result_t it must become. */
static const struct {
  ze_result_t ze;
  const char *name;
  ul_result_t ul;
} cases[] = {
    {ZE_RESULT_SUCCESS, "ZE_RESULT_SUCCESS", UL_OK},
    {ZE_RESULT_NOT_READY, "ZE_RESULT_NOT_READY", UL_IN_PROGRESS},
    {ZE_RESULT_ERROR_DEVICE_LOST, "ZE_RESULT_ERROR_DEVICE_LOST", UL_ERR_BACKEND},
    {ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY", UL_ERR_NO_MEMORY},
    {ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", UL_ERR_NO_MEMORY},
    {ZE_RESULT_ERROR_MODULE_BUILD_FAILURE, "ZE_RESULT_ERROR_MODULE_BUILD_FAILURE", UL_ERR_BACKEND},
    {ZE_RESULT_ERROR_MODULE_LINK_FAILURE, "ZE_RESULT_ERROR_MODULE_LINK_FAILURE", UL_ERR_BACKEND},
    {ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET, "ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET", UL_ERR_BACKEND},
    {ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE, "ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE", UL_ERR_UNAVAILABLE},
    {ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX, "ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX", UL_ERR_NOT_FOUND},
    {ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE, "ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE", UL_ERR_NOT_FOUND},
    {ZE_RESULT_EXP_ERROR_REMOTE_DEVICE, "ZE_RESULT_EXP_ERROR_REMOTE_DEVICE", UL_ERR_NOT_FOUND},
    {ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS, "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS", UL_ERR_UNAVAILABLE},
    {ZE_RESULT_ERROR_NOT_AVAILABLE, "ZE_RESULT_ERROR_NOT_AVAILABLE", UL_ERR_UNAVAILABLE},
    {ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE, "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE", UL_ERR_UNAVAILABLE},
    {ZE_RESULT_WARNING_DROPPED_DATA, "ZE_RESULT_WARNING_DROPPED_DATA", UL_ERR_BACKEND},
    {ZE_RESULT_ERROR_UNINITIALIZED, "ZE_RESULT_ERROR_UNINITIALIZED", UL_ERR_UNAVAILABLE},
    {ZE_RESULT_ERROR_UNSUPPORTED_VERSION, "ZE_RESULT_ERROR_UNSUPPORTED_VERSION", UL_ERR_VERSION},
    {ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE", UL_ERR_UNSUPPORTED},
    {ZE_RESULT_ERROR_INVALID_ARGUMENT, "ZE_RESULT_ERROR_INVALID_ARGUMENT", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "ZE_RESULT_ERROR_INVALID_NULL_HANDLE", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE, "ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE", UL_ERR_INVALID_USAGE},
    {ZE_RESULT_ERROR_INVALID_NULL_POINTER, "ZE_RESULT_ERROR_INVALID_NULL_POINTER", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_SIZE, "ZE_RESULT_ERROR_INVALID_SIZE", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_UNSUPPORTED_SIZE, "ZE_RESULT_ERROR_UNSUPPORTED_SIZE", UL_ERR_UNSUPPORTED},
    {ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT, "ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT", UL_ERR_UNSUPPORTED},
    {ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT, "ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT", UL_ERR_INVALID_USAGE},
    {ZE_RESULT_ERROR_INVALID_ENUMERATION, "ZE_RESULT_ERROR_INVALID_ENUMERATION", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION, "ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION", UL_ERR_UNSUPPORTED},
    {ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT, "ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT", UL_ERR_UNSUPPORTED},
    {ZE_RESULT_ERROR_INVALID_NATIVE_BINARY, "ZE_RESULT_ERROR_INVALID_NATIVE_BINARY", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_GLOBAL_NAME, "ZE_RESULT_ERROR_INVALID_GLOBAL_NAME", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_KERNEL_NAME, "ZE_RESULT_ERROR_INVALID_KERNEL_NAME", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_FUNCTION_NAME, "ZE_RESULT_ERROR_INVALID_FUNCTION_NAME", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION, "ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION, "ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX, "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE, "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE, "ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED, "ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED", UL_ERR_INVALID_USAGE},
    {ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE, "ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE", UL_ERR_INVALID_ARG},
    {ZE_RESULT_ERROR_OVERLAPPING_REGIONS, "ZE_RESULT_ERROR_OVERLAPPING_REGIONS", UL_ERR_INVALID_ARG},
    {ZE_RESULT_WARNING_ACTION_REQUIRED, "ZE_RESULT_WARNING_ACTION_REQUIRED", UL_ERR_BACKEND},
    {ZE_RESULT_ERROR_UNKNOWN, "ZE_RESULT_ERROR_UNKNOWN", UL_ERR_BACKEND},
};

Test(ze_map, every_result_of_the_header_enum, .timeout = 10) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cr_assert_eq(ulze_result((uint32_t)cases[i].ze), cases[i].ul, "%s -> %s", cases[i].name,
                 ul_result_name(ulze_result((uint32_t)cases[i].ze)));
    cr_assert_str_eq(ulze_result_name((uint32_t)cases[i].ze), cases[i].name);
  }
}

/* Parse the installed header itself: any enumerator this list misses (a newer header)
 * still must have a name in the backend's table, with its value. */
Test(ze_map, every_result_parsed_from_the_header, .timeout = 10) {
  FILE *f = fopen(UNILINK_ZE_API_HEADER, "r");
  cr_assert_not_null(f, "cannot open %s", UNILINK_ZE_API_HEADER);
  char line[512];
  int in_enum = 0, seen = 0;
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "typedef enum _ze_result_t")) in_enum = 1;
    else if (in_enum && strstr(line, "} ze_result_t;")) break;
    if (!in_enum) continue;
    char name[128];
    unsigned long value;
    if (sscanf(line, " %127[A-Z0-9_] = %li", name, (long *)&value) == 2 ||
        sscanf(line, " %127[A-Z0-9_] = %lx", name, &value) == 2) {
      if (strcmp(name, "ZE_RESULT_FORCE_UINT32") == 0) continue;
      const char *n = ulze_result_name((uint32_t)value);
      cr_assert_not_null(n, "%s (0x%lx) has no name in the ze backend table", name, value);
      cr_assert_str_eq(n, name, "value 0x%lx", value);
      ul_result_t ul = ulze_result((uint32_t)value);
      if (value == 0) cr_assert_eq(ul, UL_OK);
      else cr_assert_neq(ul, UL_OK, "%s must not map to UL_OK", name);
      seen++;
    }
  }
  fclose(f);
  cr_assert_geq(seen, (int)(sizeof cases / sizeof cases[0]), "parsed only %d enumerators", seen);
}
#endif

Test(ze_map, newer_and_unknown_values, .timeout = 10) {
  /* codes of later headers, named by value */
  cr_assert_str_eq(ulze_result_name(0x7800001cu), "ZE_RESULT_ERROR_INVALID_KERNEL_HANDLE");
  cr_assert_eq(ulze_result(0x7800001cu), UL_ERR_INVALID_ARG);
  cr_assert_eq(ulze_result(0x78000020u), UL_ERR_UNAVAILABLE);
  cr_assert_eq(ulze_result(0x7ff00006u), UL_IN_PROGRESS);
  /* unknown values: backend error, no name */
  cr_assert_eq(ulze_result(0x12345u), UL_ERR_BACKEND);
  cr_assert_null(ulze_result_name(0x12345u));
  cr_assert_eq(ulze_result(0x7fffffffu), UL_ERR_BACKEND);
}

Test(ze_map, error_sentence_keeps_name_and_raw_value, .timeout = 10) {
  char buf[160];
  ulze_format_error(buf, sizeof buf, "zeInit", 0x78000001u, "no Level Zero driver found");
  cr_assert_str_eq(buf, "zeInit: ZE_RESULT_ERROR_UNINITIALIZED (0x78000001): no Level Zero driver found");
  ulze_format_error(buf, sizeof buf, "zeMemAllocDevice", 0x70000003u, NULL);
  cr_assert_str_eq(buf, "zeMemAllocDevice: ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (0x70000003)");
  ulze_format_error(buf, sizeof buf, NULL, 0x42u, "");
  cr_assert_str_eq(buf, "ze: ZE_RESULT_<unknown> (0x00000042)");
  char small[8];
  ulze_format_error(small, sizeof small, "zeInit", 0x78000001u, NULL);
  cr_assert_str_eq(small, "zeInit:", "truncated, NUL-terminated");
}
#else
Test(ze_map, not_built, .timeout = 10) { cr_skip_test("ze helpers not configured: nothing to test"); }
#endif
