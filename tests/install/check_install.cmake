# Installs the build into a scratch prefix, then builds and runs a consumer project
# through find_package(unilink), and one through pkg-config, then runs the installed
# tools (unilink-info, unilink-bench, unilink-conformance) with no LD_LIBRARY_PATH and no
# UNILINK_PLUGIN_PATH, from the prefix and from a copy of it elsewhere ($ORIGIN RPATH), and
# the Python package from both with PYTHONPATH=<prefix>/<UNILINK_PYTHON_INSTALL_DIR>.
# -DHOOKS=ON|OFF is this build's UNILINK_TEST_HOOKS; the installed library must ignore
# UNILINK_FAULT either way (the install ships the hooks-off variant).
set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix} RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC}/consumer -B ${WORK}/b -DCMAKE_PREFIX_PATH=${prefix}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "find_package(unilink) failed:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/b RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "consumer build failed:\n${out}")
endif()
execute_process(COMMAND ${WORK}/b/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc OR NOT out MATCHES "consumer ok")
  message(FATAL_ERROR "consumer run failed (${rc}):\n${out}")
endif()
# pkg-config
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig:${prefix}/lib64/pkgconfig:${prefix}/lib/x86_64-linux-gnu/pkgconfig)
execute_process(COMMAND pkg-config --cflags --libs unilink RESULT_VARIABLE rc OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(rc)
  message(FATAL_ERROR "pkg-config unilink failed")
endif()
separate_arguments(flags)
execute_process(COMMAND cc ${SRC}/consumer/main.c ${flags} -o ${WORK}/pc-consumer RESULT_VARIABLE rc
                ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "pkg-config build failed: ${out}")
endif()
message(STATUS "find_package and pkg-config consumers built against ${prefix}")

# --- installed tools start on their own ---------------------------------------
# run_installed(<name> <exe-relative-to-prefix> args...): runs with a clean environment.
set(_clean ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH --unset=UNILINK_PLUGIN_PATH
    --unset=UNILINK_BACKEND --unset=UNILINK_FAULT)
function(run_installed root want_rc exe)
  execute_process(COMMAND ${_clean} ${root}/bin/${exe} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${want_rc}")
    message(FATAL_ERROR "installed ${exe} ${ARGN} exited ${rc} (want ${want_rc}):\n${out}\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()

find_program(READELF readelf)
if(READELF)
  file(GLOB _elves ${prefix}/bin/unilink-* ${prefix}/lib*/libunilink-*.so ${prefix}/lib/*/libunilink-*.so)
  foreach(e IN LISTS _elves)
    execute_process(COMMAND ${READELF} -d ${e} OUTPUT_VARIABLE dyn)
    if(dyn MATCHES "NEEDED.*libunilink.so" AND NOT dyn MATCHES "R(UN)?PATH[^\n]*\\$ORIGIN")
      message(FATAL_ERROR "${e} needs libunilink but has no $ORIGIN RPATH:\n${dyn}")
    endif()
  endforeach()
endif()

file(COPY ${prefix}/ DESTINATION ${WORK}/moved)
foreach(root ${prefix} ${WORK}/moved)
  run_installed(${root} 0 unilink-info)
  if(NOT last_out MATCHES "host +available")
    message(FATAL_ERROR "installed unilink-info does not list host as available:\n${last_out}")
  endif()
endforeach()
run_installed(${prefix} 0 unilink-info --build --json)
string(JSON _hooks GET "${last_out}" build test_hooks)
# The installed library never has the fault switch, whatever this build tests with
# (-DHOOKS): `cmake --install` ships the hooks-off variant (api/CMakeLists.txt).
set(_want off)
if(NOT _hooks STREQUAL _want)
  message(FATAL_ERROR "installed library reports test_hooks=${_hooks} (build: ${HOOKS}); an "
          "installed library must have the fault switch compiled out")
endif()
run_installed(${prefix} 0 unilink-bench allreduce -b 8 -e 64 -f 2 -t 2 -n 2 -w 1 --backend host)
if(NOT last_out MATCHES "# Avg bus bandwidth")
  message(FATAL_ERROR "installed unilink-bench printed no result:\n${last_out}")
endif()
set(_cf --backend host --launcher thread --ranks 2 --quick --filter "allreduce/int32/sum/*")
run_installed(${prefix} 0 unilink-conformance ${_cf})
# The fault switch is ignored by the installed library (an external program must never
# get a silently wrong result from a stray UNILINK_FAULT).
set(_fault_rc 0)
execute_process(COMMAND ${_clean} UNILINK_FAULT=allreduce:offbyone ${prefix}/bin/unilink-conformance ${_cf}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL _fault_rc)
  message(FATAL_ERROR "installed library with test_hooks=${_want} and UNILINK_FAULT set: "
          "conformance exited ${rc}, want ${_fault_rc}:\n${out}${err}")
endif()
message(STATUS "installed unilink-info, unilink-bench and unilink-conformance run without "
        "LD_LIBRARY_PATH (test_hooks=${_want}, UNILINK_FAULT exit ${rc})")

# --- the installed Python package ------------------------------------------------
# As docs/python.md says: PYTHONPATH=<prefix>/<UNILINK_PYTHON_INSTALL_DIR>, nothing else.
file(STRINGS ${BUILD}/CMakeCache.txt _py REGEX "^UNILINK_PYTHON(_INSTALL_DIR)?:")
set(_python "")
set(_pydir lib/python3/dist-packages)
foreach(l IN LISTS _py)
  if(l MATCHES "^UNILINK_PYTHON:[A-Z]+=(.+)$")
    set(_python "${CMAKE_MATCH_1}")
  elseif(l MATCHES "^UNILINK_PYTHON_INSTALL_DIR:[A-Z]+=(.+)$")
    set(_pydir "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(NOT EXISTS ${prefix}/${_pydir}/unilink/__init__.py)
  if(EXISTS ${BUILD}/python/unilink/__init__.py)
    message(FATAL_ERROR "the build has the Python package but the install has no "
            "${_pydir}/unilink")
  endif()
  message(STATUS "installed Python package: none built (UNILINK_WITH_PYTHON), not checked")
  return()
endif()
if(NOT _python OR _python MATCHES "NOTFOUND$")
  message(FATAL_ERROR "Python package installed but UNILINK_PYTHON is not in ${BUILD}/CMakeCache.txt")
endif()
foreach(root ${prefix} ${WORK}/moved)
  execute_process(COMMAND ${_clean} --unset=UNILINK_LIBRARY PYTHONPATH=${root}/${_pydir}
                          ${_python} ${SRC}/check_python.py ${root}
                  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc OR NOT out MATCHES "python ok")
    message(FATAL_ERROR "installed Python package under ${root} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endforeach()
