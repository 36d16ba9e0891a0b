# tensordict_find_mujoco(): the imported target tensordict::mujoco, MuJoCo's C headers and
# library for tensordict/rl/envs/libs/mujoco.hpp, when they are found; sets TENSORDICT_MUJOCO_FOUND.
# It looks in MUJOCO_DIR (a MuJoCo release: include/mujoco/mujoco.h and lib/libmujoco.so*), then
# in the PyPI mujoco wheel of the Python interpreter found (mujoco/include, mujoco/libmujoco.so.*),
# whose headers and library are always the same release.
function(tensordict_find_mujoco)
  set(TENSORDICT_MUJOCO_FOUND FALSE PARENT_SCOPE)
  if(TARGET tensordict::mujoco)
    set(TENSORDICT_MUJOCO_FOUND TRUE PARENT_SCOPE)
    return()
  endif()
  set(inc "")
  set(lib "")
  if(MUJOCO_DIR)
    set(inc "${MUJOCO_DIR}/include")
    file(GLOB libs "${MUJOCO_DIR}/lib/libmujoco.so*")
    if(libs)
      list(SORT libs)
      list(GET libs 0 lib)
    endif()
  else()
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_FOUND)
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -c
          "import glob, os, mujoco; d = os.path.dirname(mujoco.__file__); print(os.path.join(d, 'include')); print(sorted(glob.glob(os.path.join(d, 'libmujoco.so*')))[0])"
        OUTPUT_VARIABLE out RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(rc EQUAL 0)
        string(REPLACE "\n" ";" out "${out}")
        list(GET out 0 inc)
        list(GET out 1 lib)
      endif()
    endif()
  endif()
  if(NOT inc OR NOT lib OR NOT EXISTS "${inc}/mujoco/mujoco.h" OR NOT EXISTS "${lib}")
    return()
  endif()
  add_library(tensordict::mujoco SHARED IMPORTED GLOBAL)
  set_target_properties(tensordict::mujoco PROPERTIES IMPORTED_LOCATION "${lib}" IMPORTED_NO_SONAME FALSE
    INTERFACE_INCLUDE_DIRECTORIES "${inc}")
  message(STATUS "MuJoCo: ${lib}")
  set(TENSORDICT_MUJOCO_FOUND TRUE PARENT_SCOPE)
endfunction()
