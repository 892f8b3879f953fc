#!/usr/bin/env bash
# Many ranks on this machine: `gantry launch -n N` of the basic GAN for each
# N (default 2 8 32 128), one table (bench/scale.py): start-up against its
# floor, peak PSS and RSS of all ranks, store requests per rank at start-up
# and per logged step, collectives per step; torchrun's start-up and PSS
# beside (bench/torchrun_gan.py, up to TORCHRUN_MAX=32 ranks). docs/scaling.md
# has the results.
#   bench/scale.sh [N...]
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
((${#sizes[@]})) || sizes=(2 8 32 128)
cmake --build build --target gantry gan >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ulimit -n 65536 2>/dev/null || true
# torchrun beside gantry: the torch2 venv's (Debian's torch 1.13 torchrun fails on Python 3.11)
TORCHRUN_PYTHON=$(realpath -s "$(scripts/torch2.sh)/../../../../../../../bin/python")
export TORCHRUN_PYTHON
python3 bench/scale.py build/bin/gantry configs/gan_fashion_mnist.yaml "$work" "${sizes[@]}"
