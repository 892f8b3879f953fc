# What the build needs, checked once, before any target is defined.
#
# Every part the test suite needs is REQUIRED when tests are built (the `dev`
# preset, CI): a missing one fails configure with one line naming the Debian
# package to install. Only a plain build without tests (the `release` preset)
# may leave an optional part out (a GUI); it is then listed in the configure
# summary and by `gantry --version` (GANTRY_LEFT_OUT).
#
#   gantry_require(<ok> <what> <needed for> <debian packages>)
#   gantry_optional(<ok> <what> <part left out> <debian packages>)
#   gantry_find_tool(<var> <program> <what> <needed for> <debian packages>)

option(GANTRY_REQUIRE_ALL "Fail configure when any part (GUIs, test tools) is missing"
       ${GANTRY_BUILD_TESTS})
set(GANTRY_LEFT_OUT "")

function(_gantry_missing what needed_for packages)
  message(FATAL_ERROR "gantry: ${what} not found (needed for ${needed_for}): "
                      "apt-get install ${packages}  (scripts/setup.sh installs it)")
endfunction()

macro(gantry_require ok what needed_for packages)
  if(NOT (${ok}))
    _gantry_missing("${what}" "${needed_for}" "${packages}")
  endif()
endmacro()

macro(gantry_optional ok what part packages)
  if(NOT (${ok}))
    if(GANTRY_REQUIRE_ALL)
      _gantry_missing("${what}" "${part}" "${packages}")
    endif()
    list(APPEND GANTRY_LEFT_OUT "${part} (${what} missing: apt-get install ${packages})")
  endif()
endmacro()

macro(gantry_find_tool var program what needed_for packages)
  find_program(${var} ${program})
  gantry_require(${var} "${what} (${program})" "${needed_for}" "${packages}")
endmacro()

# ---- always: the engine and the runner --------------------------------------
include(GantryTorchFirst)   # Torch_DIR's own libraries before the system's
gantry_torch_first()
find_package(Torch QUIET)
gantry_require(Torch_FOUND "LibTorch" "gantry::core"
               "libtorch-dev (or set Torch_DIR to another LibTorch)")
find_package(Threads REQUIRED)
find_package(Boost 1.74 QUIET COMPONENTS filesystem)
gantry_require(Boost_FOUND "Boost >= 1.74 with Boost.Filesystem (DLL, Asio, Beast)" "gantry::core"
               "libboost-dev libboost-filesystem-dev")
find_package(yaml-cpp QUIET)
gantry_require(yaml-cpp_FOUND "yaml-cpp" "gantry::core" "libyaml-cpp-dev")
find_package(ZLIB QUIET)
gantry_require(ZLIB_FOUND "zlib" "gantry::core" "zlib1g-dev")
find_package(CLI11 CONFIG QUIET)
gantry_require(CLI11_FOUND "CLI11" "the gantry CLI" "libcli11-dev")
# c10d's ProcessGroupGloo.hpp includes Gloo's headers; Debian ships them apart.
find_path(GANTRY_GLOO_INCLUDE gloo/algorithm.h HINTS ${TORCH_INCLUDE_DIRS})
gantry_require(GANTRY_GLOO_INCLUDE "Gloo headers (gloo/algorithm.h)" "gantry::core's process group"
               "libgloo-dev")
# stb_image / stb_image_resize (header-only here): data.format image_folder.
find_path(GANTRY_STB_INCLUDE stb/stb_image_resize.h)
gantry_require(GANTRY_STB_INCLUDE "stb headers (stb/stb_image.h, stb/stb_image_resize.h)"
               "gantry::core's image-folder data" "libstb-dev")

# ---- the GUIs: optional in a plain build only --------------------------------
if(GANTRY_BUILD_GUI)
  set(_qt_components Widgets Charts)
  if(GANTRY_BUILD_TESTS)
    list(APPEND _qt_components Test)
  endif()
  # Qt6Charts' own config needs Qt6OpenGL (libqt6opengl6-dev), which
  # qt6-charts-dev only recommends: without it Charts is "not found".
  find_package(Qt6 6.2 QUIET COMPONENTS ${_qt_components})
  set(GANTRY_HAVE_QT OFF)
  if(Qt6_FOUND AND Qt6Charts_FOUND)
    set(GANTRY_HAVE_QT ON)
  endif()
  gantry_optional(GANTRY_HAVE_QT "Qt 6 with Charts" "gantry-monitor"
                  "qt6-base-dev qt6-charts-dev libqt6opengl6-dev")

  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(IMGUI QUIET IMPORTED_TARGET imgui)
  endif()
  find_package(glfw3 3.3 QUIET)
  set(OpenGL_GL_PREFERENCE GLVND)
  find_package(OpenGL QUIET)
  set(GANTRY_HAVE_IMGUI OFF)
  if(IMGUI_FOUND AND glfw3_FOUND AND OpenGL_FOUND)
    set(GANTRY_HAVE_IMGUI ON)
  endif()
  gantry_optional(GANTRY_HAVE_IMGUI "Dear ImGui, GLFW and OpenGL" "gantry-view"
                  "libimgui-dev libglfw3-dev libgl-dev")
else()
  list(APPEND GANTRY_LEFT_OUT "gantry-monitor and gantry-view (GANTRY_BUILD_GUI=OFF)")
endif()

# ---- the test suite: every tool a test runs ----------------------------------
# GANTRY_TESTS_CORE_ONLY: only the GoogleTest binary (scripts/device_check.sh
# on a GPU machine that lacks SLURM, Xvfb, clang, ...); never in CI.
option(GANTRY_TESTS_CORE_ONLY "Build only the GoogleTest suite, none of the area tests" OFF)
if(GANTRY_BUILD_TESTS)
  find_package(GTest QUIET)
  gantry_require(GTest_FOUND "GoogleTest" "the tests" "libgtest-dev")
endif()
if(GANTRY_BUILD_TESTS AND NOT GANTRY_TESTS_CORE_ONLY)
  # libFuzzer: clang++ and its fuzzer runtime (libclang-rt).
  gantry_find_tool(GANTRY_CLANGXX clang++ "clang" "the libFuzzer test" "clang libclang-rt-14-dev")
  execute_process(COMMAND ${GANTRY_CLANGXX} -print-file-name=libclang_rt.fuzzer-x86_64.a
                  OUTPUT_VARIABLE _fuzzer_rt OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(GANTRY_HAVE_LIBFUZZER OFF)
  if(IS_ABSOLUTE "${_fuzzer_rt}" AND EXISTS "${_fuzzer_rt}")
    set(GANTRY_HAVE_LIBFUZZER ON)
  endif()
  gantry_require(GANTRY_HAVE_LIBFUZZER "clang's libFuzzer runtime" "the libFuzzer test" "libclang-rt-14-dev")
  # A real SLURM cluster and munge, started by the tests.
  foreach(tool slurmctld slurmd sbatch srun scontrol sinfo)
    gantry_find_tool(GANTRY_TOOL_${tool} ${tool} "SLURM" "the SLURM tests" "slurm-wlm")
  endforeach()
  gantry_find_tool(GANTRY_TOOL_munged munged "munge" "the SLURM tests" "munge")
  gantry_find_tool(GANTRY_TOOL_xvfb Xvfb "Xvfb" "the GUI tests under X" "xvfb")
  gantry_find_tool(GANTRY_TOOL_ip ip "iproute2" "the network-namespace test" "iproute2")
  gantry_find_tool(GANTRY_TOOL_unshare unshare "unshare" "the shared-memory fallback test" "util-linux")
  # Python's torch (Debian's, /usr/bin/python3): a checkpoint read in Python.
  execute_process(COMMAND /usr/bin/python3 -c "import torch" RESULT_VARIABLE _py_torch
                  OUTPUT_QUIET ERROR_QUIET)
  set(GANTRY_HAVE_PY_TORCH OFF)
  if(_py_torch EQUAL 0)
    set(GANTRY_HAVE_PY_TORCH ON)
  endif()
  gantry_require(GANTRY_HAVE_PY_TORCH "Python's torch for /usr/bin/python3" "the checkpoint test in Python"
                 "python3-torch")
endif()
if(GANTRY_BUILD_TESTS)
  # The demo data, which most tests train on.
  set(GANTRY_HAVE_FASHION_MNIST OFF)
  if(EXISTS /usr/share/datasets/fashion-mnist)
    set(GANTRY_HAVE_FASHION_MNIST ON)
  endif()
  gantry_require(GANTRY_HAVE_FASHION_MNIST "Fashion-MNIST (/usr/share/datasets/fashion-mnist)" "the tests"
                 "dataset-fashion-mnist")
endif()
