# The cost model: link catalog, topologies, library tuners, cost and training estimator.
# Plain C over unilink.h enums and cJSON. Compiled into libunilink for the sim backend
# (backends/sim/CMakeLists.txt lists UNILINK_MODEL_SOURCES) and used by unilink-model and
# the bench through this folder's header, so no tool includes a backend's headers.
set(UNILINK_MODEL_DIR ${CMAKE_CURRENT_LIST_DIR})
# The parsers of user-written catalog and topology files, and what they need: the fuzz
# targets (fuzz/CMakeLists.txt) build exactly these, without the cost model.
set(UNILINK_MODEL_PARSER_SOURCES
  ${UNILINK_MODEL_DIR}/catalog.c
  ${UNILINK_MODEL_DIR}/topology_shape.c
  ${UNILINK_MODEL_DIR}/topology_write.c
  ${UNILINK_MODEL_DIR}/host_memory.c
  ${UNILINK_MODEL_DIR}/assumed_list.c)
set(UNILINK_MODEL_SOURCES
  ${UNILINK_MODEL_PARSER_SOURCES}
  ${UNILINK_MODEL_DIR}/topology_params.c
  ${UNILINK_MODEL_DIR}/cost.c
  ${UNILINK_MODEL_DIR}/tuner.c
  ${UNILINK_MODEL_DIR}/train.c)
