# Backend discovery: every folder backends/<name>/ holding a backend.cmake is a backend.
# Nothing central lists them; adding a backend is adding its folder (docs/backend-guide.md).
#
# backend.cmake is a descriptor, read before any target exists, with one call:
#   unilink_backend(NAME <name> DEFAULT AUTO|ON|OFF KIND builtin|plugin [ORDER <n>]
#                   [CHECK_FEATURES <UL_FEATURE_ suffix>...] [CHECK_REASON <text>...]
#                   [CHECK_DESCRIPTION <text>])
# NAME      the backend's name (lowercase; its option is UNILINK_WITH_<NAME>)
# DEFAULT   the option's default; AUTO builds it when its dependencies are found
# KIND      builtin (compiled into libunilink) or plugin (libunilink-<name>.so); the
#           folder's CMakeLists.txt must register it that way, which is checked
# ORDER     configure order, smaller first (default 100); built-in backends are listed to
#           the core in this order
# CHECK_*   what tests/test_vendor_plugins.c expects of a plugin: features it declares,
#           texts its reason names when it is unavailable, a text of its description

# Called by a descriptor: hands its fields to unilink_discover_backends.
function(unilink_backend)
  cmake_parse_arguments(B "" "NAME;DEFAULT;KIND;ORDER;CHECK_DESCRIPTION"
                        "CHECK_FEATURES;CHECK_REASON" ${ARGN})
  if(NOT B_NAME MATCHES "^[a-z][a-z0-9_]*$")
    message(FATAL_ERROR "${_ul_descriptor}: NAME '${B_NAME}' must be lowercase letters, digits, _")
  endif()
  if(NOT B_DEFAULT MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${_ul_descriptor}: DEFAULT must be AUTO, ON or OFF, not '${B_DEFAULT}'")
  endif()
  if(NOT B_KIND MATCHES "^(builtin|plugin)$")
    message(FATAL_ERROR "${_ul_descriptor}: KIND must be builtin or plugin, not '${B_KIND}'")
  endif()
  if(NOT DEFINED B_ORDER)
    set(B_ORDER 100)
  endif()
  foreach(f NAME DEFAULT KIND ORDER CHECK_DESCRIPTION CHECK_FEATURES CHECK_REASON)
    set(_ul_b_${f} "${B_${f}}" PARENT_SCOPE)
  endforeach()
endfunction()

# unilink_discover_backends(<dir>): reads <dir>/*/backend.cmake; sets UNILINK_BACKENDS
# (names in configure order) in the caller, one cache option UNILINK_WITH_<NAME> each,
# and per backend the global properties UNILINK_BACKEND_DIR_<name>, _KIND_, _CHECK_*.
function(unilink_discover_backends dir)
  file(GLOB _descs CONFIGURE_DEPENDS ${dir}/*/backend.cmake)
  set(_keyed "")
  foreach(_ul_descriptor IN LISTS _descs)
    foreach(f NAME DEFAULT KIND ORDER CHECK_DESCRIPTION CHECK_FEATURES CHECK_REASON)
      unset(_ul_b_${f})
    endforeach()
    include(${_ul_descriptor})
    if(NOT DEFINED _ul_b_NAME)
      message(FATAL_ERROR "${_ul_descriptor}: no unilink_backend(NAME ...) call")
    endif()
    get_filename_component(_d ${_ul_descriptor} DIRECTORY)
    get_property(_seen GLOBAL PROPERTY UNILINK_BACKEND_DIR_${_ul_b_NAME})
    if(_seen)
      message(FATAL_ERROR "backend '${_ul_b_NAME}' declared twice: ${_seen} and ${_d}")
    endif()
    set_property(GLOBAL PROPERTY UNILINK_BACKEND_DIR_${_ul_b_NAME} ${_d})
    foreach(f KIND CHECK_DESCRIPTION CHECK_FEATURES CHECK_REASON)
      set_property(GLOBAL PROPERTY UNILINK_BACKEND_${f}_${_ul_b_NAME} "${_ul_b_${f}}")
    endforeach()
    string(TOUPPER ${_ul_b_NAME} N)
    set(UNILINK_WITH_${N} ${_ul_b_DEFAULT} CACHE STRING "Build the ${_ul_b_NAME} backend: AUTO|ON|OFF")
    set_property(CACHE UNILINK_WITH_${N} PROPERTY STRINGS AUTO ON OFF)
    # Sort key: zero-padded order, then the name.
    string(LENGTH "${_ul_b_ORDER}" _len)
    math(EXPR _pad "6 - ${_len}")
    string(REPEAT "0" ${_pad} _zeros)
    list(APPEND _keyed "${_zeros}${_ul_b_ORDER}:${_ul_b_NAME}")
  endforeach()
  list(SORT _keyed)
  set(_names "")
  foreach(k IN LISTS _keyed)
    string(REGEX REPLACE "^[0-9]+:" "" n "${k}")
    list(APPEND _names ${n})
  endforeach()
  set(UNILINK_BACKENDS ${_names} PARENT_SCOPE)
endfunction()
