# Helpers shared by backend folders.
# unilink_resolve_backend(<name> <found-bool> <reason> OUT_VAR): applies AUTO|ON|OFF.
function(unilink_resolve_backend name found reason out)
  string(TOUPPER ${name} N)
  set(mode ${UNILINK_WITH_${N}})
  if(mode STREQUAL "OFF")
    set(${out} FALSE PARENT_SCOPE)
  elseif(found)
    set(${out} TRUE PARENT_SCOPE)
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "UNILINK_WITH_${N}=ON but ${reason}")
  else()
    message(STATUS "unilink: ${name} backend not built: ${reason}")
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# unilink_builtin_backend(<name> SOURCES...): compile into libunilink.
function(unilink_builtin_backend name)
  target_sources(unilink_core PRIVATE ${ARGN})
  set_property(GLOBAL APPEND PROPERTY UNILINK_BUILTIN_BACKENDS ${name})
endfunction()

# unilink_plugin_backend(<name> SOURCES...): libunilink-<name>.so, dlopen'ed by the core.
function(unilink_plugin_backend name)
  add_library(unilink-${name} MODULE ${ARGN})
  target_link_libraries(unilink-${name} PRIVATE unilink)
  target_include_directories(unilink-${name} PRIVATE ${CMAKE_SOURCE_DIR}/api/include)
  set_target_properties(unilink-${name} PROPERTIES PREFIX "lib" C_VISIBILITY_PRESET hidden)
  set_property(GLOBAL APPEND PROPERTY UNILINK_PLUGIN_TARGETS unilink-${name})
endfunction()

# Unit tests live in tests/, which is configured after backends/: these attach a
# backend's helper library to a test, or order a test after the plugin it loads, once
# the test target exists (deferred to the end of the top directory).
function(unilink_test_link test lib)
  cmake_language(EVAL CODE "cmake_language(DEFER DIRECTORY \"${CMAKE_SOURCE_DIR}\" CALL
    unilink_test_link_now \"${test}\" \"${lib}\")")
endfunction()
function(unilink_test_link_now test lib)
  if(TARGET ${test})
    target_link_libraries(${test} PRIVATE ${lib})
  endif()
endfunction()
function(unilink_test_depends test dep)
  cmake_language(EVAL CODE "cmake_language(DEFER DIRECTORY \"${CMAKE_SOURCE_DIR}\" CALL
    unilink_test_depends_now \"${test}\" \"${dep}\")")
endfunction()
function(unilink_test_depends_now test dep)
  if(TARGET ${test} AND TARGET ${dep})
    add_dependencies(${test} ${dep})
  endif()
endfunction()
