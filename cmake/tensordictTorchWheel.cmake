# libtorch from the PyPI torch wheel (CMAKE_PREFIX_PATH set to torch.utils.cmake_prefix_path).
#
# The wheel's libraries live in <torch>/lib, which Torch's own config searches only after the
# system's paths: on a machine that also has a system libtorch (Debian's), libtorch.so would
# come from one and the headers from the other. tensordict_prefer_torch_wheel() puts the wheel's
# root first. The wheel's CUDA libraries (NCCL, cuDNN, ...) ship in separate wheels under
# site-packages/nvidia; libtorch_cuda.so finds them at run time through its RPATH, but the
# linker needs them named to resolve its dependencies: tensordict_link_torch_wheel(target)
# adds them with -rpath-link.

macro(tensordict_prefer_torch_wheel)
  foreach(_td_prefix IN LISTS CMAKE_PREFIX_PATH)
    if(_td_prefix MATCHES "^(.*/torch)/share/cmake/?$")
      list(PREPEND CMAKE_PREFIX_PATH "${CMAKE_MATCH_1}")
    endif()
  endforeach()
endmacro()

# The paths are this machine's: on the project's own target they are kept out of the installed
# export (BUILD_INTERFACE); an installed package calls this again on the importing machine.
#
# A program built on the wheel also keeps libtorch.so as a needed library (--no-as-needed): an
# AOTInductor package's wrapper.so resolves libtorch's symbols from the libraries already
# loaded, and a program that only needs libtorch_cpu.so would let it bind to another libtorch on
# the machine (Debian's), where the package's calls crash (SIGBUS).
function(tensordict_link_torch_wheel target)
  get_target_property(_td_imported ${target} IMPORTED)
  if(DEFINED TORCH_INSTALL_PREFIX AND TORCH_INSTALL_PREFIX MATCHES "(site|dist)-packages/torch/?$")
    set(_td_option "LINKER:--no-as-needed")
    if(NOT _td_imported)
      set(_td_option "$<BUILD_INTERFACE:${_td_option}>")
    endif()
    set_property(TARGET ${target} APPEND PROPERTY INTERFACE_LINK_OPTIONS "${_td_option}")
  endif()
  if(DEFINED TORCH_INSTALL_PREFIX AND IS_DIRECTORY "${TORCH_INSTALL_PREFIX}/../nvidia")
    file(GLOB _td_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
    foreach(_td_lib IN LISTS _td_libs)
      get_filename_component(_td_lib "${_td_lib}" REALPATH)
      set(_td_option "LINKER:-rpath-link,${_td_lib}")
      if(NOT _td_imported)
        set(_td_option "$<BUILD_INTERFACE:${_td_option}>")
      endif()
      set_property(TARGET ${target} APPEND PROPERTY INTERFACE_LINK_OPTIONS "${_td_option}")
    endforeach()
  endif()
endfunction()
