# tensordict-cpp as pip installs it (setup.py writes this file as tensordictConfig.cmake in
# site-packages/tensordict_cpp/share/cmake/tensordict): the headers are in
# site-packages/tensordict_cpp/include. Found with
# -Dtensordict_DIR=$(python -m tensordict_cpp --cmakedir). Torch is found as any project finds
# it (CMAKE_PREFIX_PATH=$(python -c 'import torch; print(torch.utils.cmake_prefix_path)') for
# the wheel's); Boost's headers (1.81 or newer) come from the system.
include(CMakeFindDependencyMacro)
include("${CMAKE_CURRENT_LIST_DIR}/tensordictTorchWheel.cmake")
# tensordict_find_mujoco(): tensordict::mujoco for the MuJoCo envs' header, where MuJoCo is.
include("${CMAKE_CURRENT_LIST_DIR}/tensordictMujoco.cmake")
tensordict_prefer_torch_wheel()
# As the installed config: Torch's CUDA checks get C++17 unless the project chose a CUDA
# standard, since a project with CMAKE_CXX_STANDARD 20 fails them otherwise.
if(NOT DEFINED CMAKE_CUDA_STANDARD AND DEFINED CMAKE_CXX_STANDARD AND CMAKE_CXX_STANDARD GREATER 17)
  set(CMAKE_CUDA_STANDARD 17)
endif()
find_dependency(Torch)
find_dependency(Boost 1.81 CONFIG COMPONENTS headers)

if(NOT TARGET tensordict::tensordict)
  get_filename_component(_td_include "${CMAKE_CURRENT_LIST_DIR}/../../../include" ABSOLUTE)
  if(NOT EXISTS "${_td_include}/tensordict/tensordict.hpp")
    set(tensordict_FOUND FALSE)
    set(tensordict_NOT_FOUND_MESSAGE "tensordict-cpp's headers are not in ${_td_include} (a broken pip install?)")
    return()
  endif()
  add_library(tensordict::tensordict INTERFACE IMPORTED)
  set_target_properties(tensordict::tensordict PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_td_include}"
    INTERFACE_COMPILE_FEATURES cxx_std_20
    INTERFACE_COMPILE_OPTIONS "$<$<COMPILE_LANG_AND_ID:CXX,GNU>:-Werror=comma-subscript>;$<$<COMPILE_LANG_AND_ID:CXX,Clang,AppleClang>:-Werror=deprecated-comma-subscript>"
    INTERFACE_LINK_LIBRARIES "torch;Boost::headers")
  find_path(TENSORDICT_GLOO_INCLUDE gloo/context.h)
  if(TENSORDICT_GLOO_INCLUDE)
    set_property(TARGET tensordict::tensordict APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS USE_C10D_GLOO)
  endif()
  tensordict_link_torch_wheel(tensordict::tensordict)
endif()
