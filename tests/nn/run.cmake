# Python builds random cases (GENERATOR: tests/nn/make_fixtures.py, models of tensordict.nn;
# tests/rl/value.py, value estimates of TorchRL; tests/rl/buffer.py, replay buffers TorchRL dumps
# and reads back (its CHECK_FLAG pass); or
# tests/nn/distributions.py, distributions of torch, TorchRL and tensordict.nn; seed SEED, COUNT
# of them) and the C++ side (COMPARE) rebuilt from the same descriptions gives the same numbers.
# Prints a TENSORDICT_SKIPPED line (CTest marks the test skipped) only when a Python module the
# generator needs (IMPORTS) is not installed.
if(NOT DEFINED IMPORTS)
  set(IMPORTS "tensordict.nn, safetensors")
endif()
execute_process(COMMAND "${PYTHON}" -c "import ${IMPORTS}" RESULT_VARIABLE has_td OUTPUT_QUIET ERROR_QUIET)
if(NOT has_td EQUAL 0)
  message("TENSORDICT_SKIPPED: a Python module of '${IMPORTS}' is not installed")
  return()
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
execute_process(COMMAND "${PYTHON}" "${GENERATOR}" "${WORK_DIR}" --seed "${SEED}" "${COUNT_FLAG}" "${COUNT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the generator ${GENERATOR} failed")
endif()
execute_process(COMMAND "${COMPARE}" "${WORK_DIR}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "C++ and Python disagree (cases in ${WORK_DIR})")
endif()
# A second Python pass (CHECK_FLAG) reads back what the C++ side wrote.
if(DEFINED CHECK_FLAG)
  execute_process(COMMAND "${PYTHON}" "${GENERATOR}" "${WORK_DIR}" "${CHECK_FLAG}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "Python disagrees with what C++ wrote (cases in ${WORK_DIR})")
  endif()
endif()
