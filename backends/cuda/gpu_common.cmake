# Shared by backends/nccl and backends/cuda: find the CUDA toolkit (runtime only; the
# driver libcuda is never linked, so plugins load on machines without a driver) and
# build the pure helper library the unit tests link. Included by both folders (imported
# CUDA:: targets are directory-scoped, so the find runs in each).

if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit QUIET)

set(UNILINK_GPU_FOUND FALSE)
if(CUDAToolkit_FOUND AND TARGET CUDA::cudart)
  set(UNILINK_GPU_FOUND TRUE)
endif()
# Pure helpers (no CUDA calls): CUDA error mapping, NVLink parsing, path choice, and the
# link description shared with ze (backends/util/gpu_util.c).
if(UNILINK_GPU_FOUND AND NOT TARGET unilink_gpu_common)
  add_library(unilink_gpu_common STATIC ${CMAKE_SOURCE_DIR}/backends/cuda/gpu_common.c
    ${CMAKE_SOURCE_DIR}/backends/util/gpu_util.c)
  target_include_directories(unilink_gpu_common PUBLIC ${CMAKE_SOURCE_DIR}/backends/cuda
    ${CMAKE_SOURCE_DIR}/backends/util ${CMAKE_SOURCE_DIR}/api/include ${CUDAToolkit_INCLUDE_DIRS})
  set_target_properties(unilink_gpu_common PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_definitions(unilink_gpu_common INTERFACE UNILINK_HAVE_GPU_COMMON=1)
endif()
