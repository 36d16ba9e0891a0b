# Builds TARGET, a compile-fail test, in BUILD_DIR: it must fail to compile with exactly one
# error, and the output must match EXPECT (the regex on the source's first line). A cascade of
# follow-on errors after the first is a failure of this test too.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REPLACE ";" "," all "${out}${err}")  # a ';' in a message would split the list below
if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but must not")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "${TARGET} failed without the expected message '${EXPECT}':\n${all}")
endif()
string(REGEX MATCHALL "[^\n]*: error: [^\n]*" errors "${all}")
list(LENGTH errors n)
if(NOT n EQUAL 1)
  list(JOIN errors "\n" shown)
  message(FATAL_ERROR "${TARGET}: ${n} errors, where one is expected:\n${shown}")
endif()
message(STATUS "${TARGET}: one error, as expected")
