# One precompiled <torch/torch.h> for the whole tree: every target that includes
# LibTorch reuses it (a TU that parses torch.h costs ~20 s here; with the PCH ~2 s).
# Everything is compiled -fPIC so that shared libraries, modules and executables
# can share the one PCH.
# Installed with the SDK: find_package(gantry) includes it, so an out-of-tree
# plugin's gantry_add_plugin gets the same PCH (one per project, built once).
if(NOT TARGET gantry_torch_pch)
  add_library(gantry_torch_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/pch_stub.cpp)
  target_link_libraries(gantry_torch_pch PUBLIC torch)
  target_compile_options(gantry_torch_pch PRIVATE -fPIC)
  set_target_properties(gantry_torch_pch PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  target_precompile_headers(gantry_torch_pch PUBLIC <torch/torch.h>)
endif()

function(gantry_use_torch_pch target)
  target_compile_options(${target} PRIVATE -fPIC)
  target_precompile_headers(${target} REUSE_FROM gantry_torch_pch)
endfunction()
