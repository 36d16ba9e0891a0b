# Configures, builds and runs tests/fetchcontent, a consumer project that gets the library with
# one FetchContent block (SOURCE: this repository), in a clean WORK_DIR. TORCH_PREFIX: another
# libtorch (the PyPI wheel's torch.utils.cmake_prefix_path).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix_arg)
if(TORCH_PREFIX)
  set(prefix_arg "-DCMAKE_PREFIX_PATH=${TORCH_PREFIX}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/tests/fetchcontent -B ${WORK_DIR} -G ${GENERATOR}
  -DTENSORDICT_SOURCE=${SOURCE} -DCMAKE_BUILD_TYPE=Release ${prefix_arg} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the FetchContent consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the FetchContent consumer failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message("${out}")
if(rc OR NOT out MATCHES "leaves=2 activation=relu")
  message(FATAL_ERROR "the FetchContent consumer did not run as expected: ${rc}")
endif()
