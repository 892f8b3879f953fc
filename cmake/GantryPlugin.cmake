# gantry_add_plugin(NAME SOURCES src...)
#
# Builds a gantry plugin: a MODULE library lib<NAME>.so linked against the
# header-only SDK (gantry::sdk, which brings LibTorch) with hidden visibility, so
# that only the manifest and the factory exported by GANTRY_PLUGIN(...) are seen.
# The runner finds it by name in GANTRY_PLUGIN_PATH, or by path.
function(gantry_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "gantry_add_plugin(${name}): SOURCES is required")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE gantry::sdk)
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  elseif(DEFINED GANTRY_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${GANTRY_PLUGIN_OUTPUT_DIR})
  endif()
  if(COMMAND gantry_use_torch_pch)
    gantry_use_torch_pch(${name})
  endif()
endfunction()
