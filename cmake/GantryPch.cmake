# One precompiled <torch/torch.h> for the whole tree: every target that includes
# LibTorch reuses it (a TU that parses torch.h costs ~20 s here; with the PCH ~2 s).
# Everything is compiled -fPIC so that shared libraries, modules and executables
# can share the one PCH.
add_library(gantry_torch_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/pch_stub.cpp)
target_link_libraries(gantry_torch_pch PUBLIC torch)
target_compile_options(gantry_torch_pch PRIVATE -fPIC)
target_precompile_headers(gantry_torch_pch PUBLIC <torch/torch.h>)

function(gantry_use_torch_pch target)
  target_compile_options(${target} PRIVATE -fPIC)
  target_precompile_headers(${target} REUSE_FROM gantry_torch_pch)
endfunction()
