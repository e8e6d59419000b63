# plugins.template: backends/template builds and loads with no edit outside its folder.
# The main project is configured as anyone would (-DUNILINK_WITH_TEMPLATE=ON, nothing else
# about the template), only libunilink-template.so is built, and CHECK (template_check.c)
# loads it through UNILINK_PLUGIN_PATH. Needs -DSRC, -DBIN (scratch build dir), -DCHECK,
# -DGEN (CMake generator).
foreach(v SRC BIN CHECK GEN)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "template_check.cmake: -D${v}= missing")
  endif()
endforeach()
# What the template folder itself must hold: nothing else is edited to add a backend.
foreach(f backend.cmake CMakeLists.txt README.md template_backend.c)
  if(NOT EXISTS ${SRC}/backends/template/${f})
    message(FATAL_ERROR "backends/template/${f} missing")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${BIN} -G ${GEN} -DCMAKE_BUILD_TYPE=Release
                        -DUNILINK_WITH_TEMPLATE=ON -DUNILINK_BUILD_TESTS=OFF
                        -DUNILINK_BUILD_CONFORMANCE=OFF -DUNILINK_BUILD_BENCH=OFF
                        -DUNILINK_BUILD_EXAMPLES=OFF -DUNILINK_BUILD_FUZZ=OFF
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configure with -DUNILINK_WITH_TEMPLATE=ON failed:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} --target unilink-template -j 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building unilink-template failed:\n${out}")
endif()
if(NOT EXISTS ${BIN}/lib/libunilink-template.so)
  message(FATAL_ERROR "${BIN}/lib/libunilink-template.so was not built")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env UNILINK_PLUGIN_PATH=${BIN}/lib ${CHECK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the template plugin did not behave as documented")
endif()
