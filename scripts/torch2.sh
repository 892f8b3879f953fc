#!/usr/bin/env bash
# LibTorch 2.x, the second supported build: the `torch` wheel from Python's
# package index holds a full CUDA LibTorch (headers, share/cmake/Torch,
# libtorch_cuda, c10d with NCCL; its nvidia-* dependencies hold the CUDA
# runtime). Installs it once into a virtual environment outside the tree,
# reused by later runs, and prints the Torch_DIR to build against.
#   scripts/torch2.sh            -> /root/.cache/gantry/torch-2.15.0/.../share/cmake/Torch
# GANTRY_TORCH2_VENV, GANTRY_TORCH2_VERSION override where and which.
# Needs python3-venv (scripts/setup.sh installs it) and PyPI (~3 GiB download
# the first time, ~90 s here; 5.3 GiB on disk).
set -euo pipefail
version=${GANTRY_TORCH2_VERSION:-2.15.0}
# Beside it, for the tests that read gantry's files with the ecosystem's own readers.
extras=("pytorch-lightning==2.6.6" "tensorboard==2.21.0")
venv=${GANTRY_TORCH2_VENV:-${XDG_CACHE_HOME:-${HOME:-/var/cache}/.cache}/gantry/torch-$version}
py=$venv/bin/python

have() {
  [[ -x $py ]] && "$py" - <<PY 2>/dev/null
import sys, importlib.metadata as md
import torch
sys.exit(torch.__version__.split('+')[0] != '$version' or md.version('pytorch-lightning') != '2.6.6'
         or md.version('tensorboard') != '2.21.0')
PY
}
if ! have; then
  echo "torch2: installing torch==$version ${extras[*]} into $venv (once; reused by later runs)" >&2
  [[ -x $py ]] || { mkdir -p "$(dirname "$venv")"; /usr/bin/python3 -m venv "$venv"; }
  "$py" -m pip install -q --disable-pip-version-check "torch==$version" "${extras[@]}" >&2
  have || { echo "torch2: $venv lacks torch $version or ${extras[*]} after pip install" >&2; exit 1; }
fi
"$py" -c "import torch.utils, os; print(os.path.join(torch.utils.cmake_prefix_path, 'Torch'))" 2>/dev/null
