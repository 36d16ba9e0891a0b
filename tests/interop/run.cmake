# Writes the C++ saves (a test case of tensordict_tests) and has Python tensordict load and check
# them. Prints a TENSORDICT_SKIPPED line (CTest marks the test skipped) when Python tensordict
# is not installed.
set(out "${WORK_DIR}/interop")
file(REMOVE_RECURSE "${out}")
file(MAKE_DIRECTORY "${out}")
execute_process(COMMAND "${PYTHON}" -c "import tensordict" RESULT_VARIABLE has_td OUTPUT_QUIET ERROR_QUIET)
if(NOT has_td EQUAL 0)
  # CMake before 3.29 has no cmake_language(EXIT): a marker line tells CTest it skipped.
  message("TENSORDICT_SKIPPED: Python tensordict is not installed")
  return()
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E env "TENSORDICT_INTEROP_OUT=${out}"
                        "${TESTS}" "-tc=interop: the saves Python checks"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "writing the C++ saves failed")
endif()
execute_process(COMMAND "${PYTHON}" "${SCRIPT}" "${out}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "Python tensordict did not load the C++ saves correctly")
endif()
