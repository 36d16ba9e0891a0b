# Python tensordict.nn builds random models (tests/nn/make_fixtures.py, seed SEED) and the C++
# modules rebuilt from the same descriptions give the same numbers (tensordict_nn_compare).
# Prints a TENSORDICT_SKIPPED line (CTest marks the test skipped) only when Python tensordict or
# safetensors is not installed.
execute_process(COMMAND "${PYTHON}" -c "import tensordict.nn, safetensors" RESULT_VARIABLE has_td OUTPUT_QUIET ERROR_QUIET)
if(NOT has_td EQUAL 0)
  message("TENSORDICT_SKIPPED: Python tensordict or safetensors is not installed")
  return()
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
execute_process(COMMAND "${PYTHON}" "${GENERATOR}" "${WORK_DIR}" --seed "${SEED}" --models 12 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the model generator failed")
endif()
execute_process(COMMAND "${COMPARE}" "${WORK_DIR}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "C++ and Python tensordict.nn disagree (models in ${WORK_DIR})")
endif()
