# Installs the project into a temporary prefix, then configures, builds and runs a consumer
# project that only knows `find_package(tensordict)`.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
  RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
# TORCH_PREFIX: another libtorch (the PyPI wheel's torch.utils.cmake_prefix_path); PACKAGE: an
# AOTInductor package the consumer then runs; EXPECT_LINK: a regex its link command must match.
set(prefixes ${WORK_DIR}/prefix)
if(TORCH_PREFIX)
  list(APPEND prefixes ${TORCH_PREFIX})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
  "-DCMAKE_PREFIX_PATH=${prefixes}" -DCMAKE_BUILD_TYPE=Release -DCONSUMER_PACKAGE=${PACKAGE}
  RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
if(EXPECT_LINK)
  file(READ ${WORK_DIR}/build/build.ninja ninja)
  string(REGEX MATCH "LINK_FLAGS = [^\n]*" link_flags "${ninja}")
  if(NOT link_flags MATCHES "${EXPECT_LINK}")
    message(FATAL_ERROR "the consumer's link flags do not match ${EXPECT_LINK}: ${link_flags}")
  endif()
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message("${out}")
if(rc OR NOT out MATCHES "leaves=2 activation=relu")
  message(FATAL_ERROR "the consumer did not run as expected: ${rc}")
endif()
