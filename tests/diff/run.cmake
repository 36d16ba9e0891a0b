# The differential test with fresh cases: Python tensordict (tests/diff/gen.py) writes CASES
# random cases with seed SEED, and tensordict_diff replays them. Prints a TENSORDICT_SKIPPED line
# (CTest marks the test skipped) only when Python tensordict is not installed.
execute_process(COMMAND "${PYTHON}" -c "import tensordict" RESULT_VARIABLE has_td OUTPUT_QUIET ERROR_QUIET)
if(NOT has_td EQUAL 0)
  message("TENSORDICT_SKIPPED: Python tensordict is not installed")
  return()
endif()
file(MAKE_DIRECTORY "${WORK_DIR}")
set(cases "${WORK_DIR}/cases_seed${SEED}.json")
execute_process(COMMAND "${PYTHON}" "${GENERATOR}" --seed "${SEED}" --cases "${CASES}" --out "${cases}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the case generator failed")
endif()
execute_process(COMMAND "${REPLAY}" "${cases}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "C++ and Python tensordict disagree (cases in ${cases})")
endif()
