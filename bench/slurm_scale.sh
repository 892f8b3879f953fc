#!/usr/bin/env bash
# The seed's layout emulated at full size: 32 nodes x 4 ranks (128) as one
# SLURM job on a cluster of 32 network namespaces, each its own slurmd
# (tests/slurm/cluster.sh netns), with every fault of tests/slurm/scale_test.sh
# (FULL=1: a dead node, a slow link, a resume at half the nodes and at one).
# Prints the table docs/scaling.md quotes. Needs root, ~13 GiB, ~15 min here.
#   bench/slurm_scale.sh [NODES=32] [TASKS=4] [STEPS=12]   (ONLY=slow or ONLY=partition: that fault alone)
set -euo pipefail
cd "$(dirname "$0")/.."
FULL=1 exec tests/slurm/scale_test.sh "$PWD/build/bin/gantry" "$PWD" /tmp/gantry-slurm-scale "${1:-32}" "${2:-4}" "${3:-12}"
