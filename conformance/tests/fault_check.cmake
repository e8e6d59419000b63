# Runs the suite with the core's fault switch on a small allreduce subset and checks that
# it fails (exit 1) and that the report names rank, index, expected and got.
# Usage: cmake -DEXE=<unilink-conformance> -P fault_check.cmake
set(ENV{UNILINK_FAULT} "allreduce:offbyone")
execute_process(
  COMMAND ${EXE} --backend host --launcher thread --ranks 2
          --filter "allreduce/int32/sum/count=7/*,allreduce/fp32/sum/count=1023/*"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit status 1 with UNILINK_FAULT=allreduce:offbyone, got ${rc}")
endif()
foreach(re "FAIL allreduce/int32/sum/count=7/"
           "rank 0, recvbuf index 0: expected [-0-9]+ \\(0x[0-9a-f]+\\), got [-0-9]+ \\(0x[0-9a-f]+\\)"
           "FAIL allreduce/fp32/sum/count=1023/")
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "the report does not match '${re}'")
  endif()
endforeach()
if(out MATCHES "FAIL [^\n]*/ranks=2\n +rank 1")
  message(FATAL_ERROR "the fault is on rank 0 only; the report blames rank 1")
endif()
# Without the fault the same subset passes: the failure above came from the fault.
unset(ENV{UNILINK_FAULT})
execute_process(
  COMMAND ${EXE} --backend host --launcher thread --ranks 2
          --filter "allreduce/int32/sum/count=7/*,allreduce/fp32/sum/count=1023/*"
  RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2)
if(NOT rc2 EQUAL 0)
  message(FATAL_ERROR "without the fault the subset must pass (exit ${rc2}):\n${out2}${err2}")
endif()
