#!/usr/bin/env bash
# Installs the Debian 12 packages gantry needs (only those missing), then
# configures and builds with the `dev` preset (or $GANTRY_PRESET). The `cuda`
# preset builds against LibTorch 2.x from the torch wheel (scripts/torch2.sh
# installs it into a virtual environment outside the tree).
# Used by both README commands: scripts/demo.sh and scripts/test.sh.
# GANTRY_TARGETS: build only these targets (the demo: gantry gan); default all.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ ccache pkg-config
  libtorch-dev               # LibTorch 1.13 (CPU, c10d + Gloo)
  libopenblas0-openmp        # without it LibTorch multiplies with the reference BLAS (~40x slower)
  libblas3                   # the reference BLAS itself: a test checks gantry warns when it is in use
  libyaml-cpp-dev libboost-dev libboost-filesystem-dev libcli11-dev zlib1g-dev
  libgloo-dev                # Gloo headers: c10d's ProcessGroupGloo includes them
  libstb-dev                 # stb_image: data.format image_folder reads PNG/JPEG (and gantry-view's grids)
  libgtest-dev
  slurm-wlm munge            # the tests start a real single-host SLURM cluster
  python3-torch              # the tests load a checkpoint in Python; bench/ compares with it
  python3-venv               # scripts/torch2.sh: LibTorch 2.x from the torch wheel, in a virtual environment
  iproute2                   # the tests put two ranks in separate network namespaces
  clang libclang-rt-14-dev   # the tests fuzz the stream decoder with libFuzzer
  clang-format               # scripts/test.sh checks the sources' format (scripts/format.sh --check)
  dataset-fashion-mnist      # the demo's real data: /usr/share/datasets/fashion-mnist
  qt6-base-dev qt6-charts-dev libqt6opengl6-dev fonts-dejavu-core   # gantry-monitor (gui/), Qt Test; Qt6Charts' CMake config needs Qt6OpenGL
  libimgui-dev libglfw3-dev libgl-dev libgl1-mesa-dri   # gantry-view (Dear ImGui, GLFW, OpenGL 3; Mesa for Xvfb)
  xvfb xauth                 # the tests run both GUIs under a real X server
  curl wrk                   # the tests run docs/serve.md's curl lines; bench/serve.sh loads gantry serve with wrk
)

missing=()
for p in "${packages[@]}"; do
  [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" == installed ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

preset="${GANTRY_PRESET:-dev}"
if [[ $preset == cuda ]]; then
  Torch_DIR=$(scripts/torch2.sh)
  export Torch_DIR
fi
cmake --preset "$preset" >/dev/null
targets=(${GANTRY_TARGETS:-})
cmake --build --preset "$preset" ${targets[@]:+--target "${targets[@]}"}
