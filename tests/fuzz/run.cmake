# Runs the load-path fuzz target for SECONDS from a fresh corpus seeded with every save folder
# under DATA (the Python fixtures, serialized by the target's --serialize), every meta.json
# there on its own, and the target's own seeds (SEEDS). Fails on a crash, naming the input it
# left behind.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/corpus ${WORK_DIR}/seeds)
file(GLOB_RECURSE metas ${DATA}/meta.json)
file(GLOB own ${SEEDS}/*)
list(APPEND metas ${own})
set(i 0)
foreach(m ${metas})
  configure_file(${m} ${WORK_DIR}/seeds/seed${i} COPYONLY)
  math(EXPR i "${i} + 1")
endforeach()
file(GLOB saves LIST_DIRECTORIES true ${DATA}/python/*)
foreach(s ${saves})
  if(IS_DIRECTORY ${s})
    execute_process(COMMAND ${FUZZER} --serialize ${s} OUTPUT_FILE ${WORK_DIR}/seeds/seed${i} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "cannot serialize ${s} as a seed")
    endif()
    math(EXPR i "${i} + 1")
  endif()
endforeach()
message(STATUS "${i} seeds; fuzzing for ${SECONDS} s")
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
          -dict=${DICT} -artifact_prefix=${WORK_DIR}/ ${WORK_DIR}/corpus ${WORK_DIR}/seeds
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCH "Done [0-9]+ runs in [0-9]+ second" done "${err}")
message(STATUS "${done}")
if(NOT rc EQUAL 0)
  file(GLOB crashes ${WORK_DIR}/crash-* ${WORK_DIR}/leak-* ${WORK_DIR}/timeout-* ${WORK_DIR}/oom-*)
  message(FATAL_ERROR "the fuzz target failed (exit ${rc}); input: ${crashes}\n${err}")
endif()
