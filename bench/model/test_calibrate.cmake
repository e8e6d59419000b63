# model.calibrate: unilink-model calibrate reads what nccl-tests and unilink-bench write
# (-J), and refuses a file of another collective. Run as
#   cmake -DMODEL=unilink-model -DDATA=testdata -DOUT=dir -P test_calibrate.cmake
function(calib name expect_rc expect_re)
  execute_process(COMMAND ${MODEL} calibrate ${DATA}/${name} ${ARGN} --out ${OUT}/${name}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expect_rc OR NOT "${out}${err}" MATCHES "${expect_re}")
    message(FATAL_ERROR "calibrate ${name} ${ARGN}: exit ${rc} (want ${expect_rc}), "
                        "output does not match '${expect_re}':\n${out}${err}")
  endif()
  message(STATUS "ok: ${name} ${ARGN}: exit ${rc}")
endfunction()
file(MAKE_DIRECTORY ${OUT})
# nccl-tests 2.19: ranks from config.devices (one per process) x nthreads x ngpus
calib(nccl-tests-all_reduce-8xh100.json 0 "calibrated intra-node.*rms log error 0\\.0"
      --topology dgx-h100)
file(READ ${OUT}/nccl-tests-all_reduce-8xh100.json topo)
if(NOT topo MATCHES "calibrated to [^\"]*\\(allreduce, 8 ranks, 6 sizes\\)")
  message(FATAL_ERROR "written topology does not name the 8-rank fit:\n${topo}")
endif()
# another collective's file is refused for an allreduce calibration, and writes nothing
file(REMOVE ${OUT}/nccl-tests-all_gather-8xh100.json)
calib(nccl-tests-all_gather-8xh100.json 1 "measured allgather, but calibrating allreduce: refusing"
      --topology dgx-h100)
if(EXISTS ${OUT}/nccl-tests-all_gather-8xh100.json)
  message(FATAL_ERROR "a refused calibration wrote a topology")
endif()
# ... and read when that collective is asked for
calib(nccl-tests-all_gather-8xh100.json 0 "calibrated intra-node" --topology dgx-h100
      --collective all_gather)
# unilink-bench's own -J output (collective in config.operation, ranks in config.ranks)
calib(unilink-bench-allreduce-host.json 0 "calibrated intra-node" --topology pcie4-8gpu)
file(READ ${OUT}/unilink-bench-allreduce-host.json topo)
if(NOT topo MATCHES "\\(allreduce, 2 ranks, 5 sizes\\)")
  message(FATAL_ERROR "unilink-bench file: not read as 2 ranks, 5 sizes:\n${topo}")
endif()
# files of older versions: a top-level devices list, one entry per rank
calib(nccl-tests-old-all_reduce-4.json 0 "calibrated intra-node" --topology dgx-h100)
