# Command-line contract: exit codes 2 (usage) and 3 (backend unavailable), --list, --filter.
# Usage: cmake -DEXE=<unilink-conformance> -P cli_check.cmake
function(expect_rc want)
  execute_process(COMMAND ${EXE} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL want)
    message(FATAL_ERROR "'${ARGN}' exited ${rc}, expected ${want}:\n${out}${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
  set(last_err "${err}" PARENT_SCOPE)
endfunction()

expect_rc(2 --no-such-option)
expect_rc(2 --backend host --ranks 0)
expect_rc(2 --backend host --launcher teleport)
expect_rc(2 --backend host --seed)
expect_rc(2 --backend host --timeout-ms 4294967396) # would wrap to 100 as an int
expect_rc(2 --backend host --timeout-ms 50)
expect_rc(3 --backend no-such-backend)
if(NOT last_err MATCHES "no-such-backend")
  message(FATAL_ERROR "exit 3 must name the backend:\n${last_err}")
endif()

expect_rc(0 --backend host --ranks 4 --list --filter "allreduce/fp32/sum/count=7/*")
if(NOT last_out STREQUAL "allreduce/fp32/sum/count=7/outofplace/ranks=4\nallreduce/fp32/sum/count=7/inplace/ranks=4\n")
  message(FATAL_ERROR "--list/--filter printed:\n${last_out}")
endif()
expect_rc(0 --backend host --ranks 3 --list --filter "reduce/int8/max/*/count=1/inplace/*,!*/root=1/*")
if(NOT last_out MATCHES "reduce/int8/max/root=0/count=1/inplace/ranks=3"
   OR NOT last_out MATCHES "reduce/int8/max/root=2/count=1/inplace/ranks=3"
   OR last_out MATCHES "root=1/")
  message(FATAL_ERROR "roots 0/last/middle with an exclusion printed:\n${last_out}")
endif()
# a filter that selects nothing runs nothing: its own exit status, so CI cannot go green
expect_rc(4 --backend host --ranks 2 --filter "no-such-case")
