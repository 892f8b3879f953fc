# gantry_torch_first(): before find_package(Torch) with Torch_DIR set (the
# torch wheel's LibTorch, scripts/torch2.sh), for gantry's own build and for a
# plugin's (installed beside gantryConfig.cmake).
#  - TorchConfig finds its libraries with PATHS, which come after the system's:
#    with Debian's libtorch-dev also installed it would link Debian's 1.13
#    libraries against 2.x headers (a plugin so built crashes any runner that
#    loads it). Torch's own prefix first in CMAKE_PREFIX_PATH makes its own win.
#  - The wheel's libtorch_cuda finds its CUDA libraries (NCCL, cuDNN, ...) in
#    the nvidia-* packages beside it through an $ORIGIN rpath, which the linker
#    does not expand: without -rpath-link it takes the CUDA toolkit's older
#    libnccl from /usr/lib and fails on symbols only the wheel's NCCL has.
macro(gantry_torch_first)
  if(Torch_DIR)
    get_filename_component(_gantry_torch_prefix "${Torch_DIR}/../../.." ABSOLUTE)
    list(PREPEND CMAKE_PREFIX_PATH "${_gantry_torch_prefix}")
    file(GLOB _gantry_wheel_cuda_libs LIST_DIRECTORIES true "${_gantry_torch_prefix}/../nvidia/*/lib")
    foreach(_dir IN LISTS _gantry_wheel_cuda_libs)
      add_link_options("LINKER:-rpath-link,${_dir}")
    endforeach()
  endif()
endmacro()
