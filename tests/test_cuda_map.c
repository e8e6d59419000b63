/* Pure helpers of the NVIDIA backends (backends/cuda/gpu_common.c): cudaError_t
 * mapping with the message kept, and the UNILINK_CUDA_PATH choice. No GPU needed. */
#include <criterion/criterion.h>
#include <string.h>
#include <unilink/unilink.h>

#ifdef UNILINK_HAVE_GPU_COMMON
#include <driver_types.h>

#include "gpu_common.h"

Test(cuda_map, cuda_errors, .timeout = 10) {
  cr_assert_eq(ulgpu_cuda_result(cudaSuccess), UL_OK);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorNotReady), UL_IN_PROGRESS);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorMemoryAllocation), UL_ERR_NO_MEMORY);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorInsufficientDriver), UL_ERR_UNAVAILABLE);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorNoDevice), UL_ERR_UNAVAILABLE);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorStubLibrary), UL_ERR_UNAVAILABLE);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorSystemDriverMismatch), UL_ERR_UNAVAILABLE);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorInvalidValue), UL_ERR_INVALID_ARG);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorInvalidDevice), UL_ERR_INVALID_ARG);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorPeerAccessUnsupported), UL_ERR_UNSUPPORTED);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorNoKernelImageForDevice), UL_ERR_UNSUPPORTED);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorLaunchTimeout), UL_ERR_TIMEOUT);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorIllegalAddress), UL_ERR_BACKEND);
  cr_assert_eq(ulgpu_cuda_result(cudaErrorLaunchFailure), UL_ERR_BACKEND);
  cr_assert_eq(ulgpu_cuda_result(99999), UL_ERR_BACKEND);
}

Test(cuda_map, cuda_error_sentence, .timeout = 10) {
  char buf[128];
  ulgpu_format_cuda_error(buf, sizeof buf, "cudaGetDeviceCount", 35,
                          "CUDA driver version is insufficient for CUDA runtime version");
  cr_assert_str_eq(buf, "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA "
                        "runtime version (code 35)");
  ulgpu_format_cuda_error(buf, sizeof buf, NULL, 100, NULL);
  cr_assert_str_eq(buf, "cuda: unknown CUDA error (code 100)");
}

Test(cuda_map, parse_path, .timeout = 10) {
  ulgpu_path_t p = ULGPU_PATH_STAGED;
  cr_assert_eq(ulgpu_parse_path("auto", &p), UL_OK); cr_assert_eq(p, ULGPU_PATH_AUTO);
  cr_assert_eq(ulgpu_parse_path("P2P", &p), UL_OK); cr_assert_eq(p, ULGPU_PATH_P2P);
  cr_assert_eq(ulgpu_parse_path("staged", &p), UL_OK); cr_assert_eq(p, ULGPU_PATH_STAGED);
  cr_assert_eq(ulgpu_parse_path("nvlink", &p), UL_ERR_INVALID_ARG);
  cr_assert_eq(p, ULGPU_PATH_STAGED, "unchanged on error");
  cr_assert_eq(ulgpu_parse_path(NULL, &p), UL_ERR_INVALID_ARG);
  cr_assert_str_eq(ulgpu_path_name(ULGPU_PATH_P2P), "p2p");
  cr_assert_str_eq(ulgpu_path_name(ULGPU_PATH_STAGED), "staged");
}

Test(cuda_map, choose_path, .timeout = 10) {
  char why[192];
  ulgpu_path_t p;
  cr_assert_eq(ulgpu_choose_path(ULGPU_PATH_AUTO, 1, &p, why, sizeof why), UL_OK);
  cr_assert_eq(p, ULGPU_PATH_P2P);
  cr_assert_eq(ulgpu_choose_path(ULGPU_PATH_AUTO, 0, &p, why, sizeof why), UL_OK);
  cr_assert_eq(p, ULGPU_PATH_STAGED);
  cr_assert(strstr(why, "no peer access") != NULL, "%s", why);
  cr_assert_eq(ulgpu_choose_path(ULGPU_PATH_STAGED, 1, &p, why, sizeof why), UL_OK);
  cr_assert_eq(p, ULGPU_PATH_STAGED);
  p = ULGPU_PATH_AUTO;
  cr_assert_eq(ulgpu_choose_path(ULGPU_PATH_P2P, 0, &p, why, sizeof why), UL_ERR_UNSUPPORTED);
  cr_assert_eq(p, ULGPU_PATH_AUTO, "unchanged on error");
  cr_assert(strstr(why, "UNILINK_CUDA_PATH=p2p") != NULL, "%s", why);
  cr_assert_eq(ulgpu_choose_path(ULGPU_PATH_P2P, 1, &p, why, sizeof why), UL_OK);
  cr_assert_eq(p, ULGPU_PATH_P2P);
}
#else
Test(cuda_map, not_built, .timeout = 10) {
  cr_skip_test("CUDA toolkit not configured: nothing to test");
}
#endif
