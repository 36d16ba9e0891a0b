# Runs a fuzz target (FUZZER) for SECONDS from a fresh corpus seeded with every file in SEEDS.
# Fails on a crash, naming the input it left behind.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/corpus ${WORK_DIR}/seeds)
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${WORK_DIR}/seeds)
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
          -artifact_prefix=${WORK_DIR}/ ${WORK_DIR}/corpus ${WORK_DIR}/seeds
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCH "Done [0-9]+ runs in [0-9]+ second" done "${err}")
message(STATUS "${done}")
if(NOT rc EQUAL 0)
  file(GLOB crashes ${WORK_DIR}/crash-* ${WORK_DIR}/leak-* ${WORK_DIR}/timeout-* ${WORK_DIR}/oom-*)
  message(FATAL_ERROR "the fuzz target failed (exit ${rc}); input: ${crashes}\n${err}")
endif()
