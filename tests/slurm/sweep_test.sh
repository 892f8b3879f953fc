#!/usr/bin/env bash
# `gantry submit --sweep --wait` on the test cluster (tests/slurm/cluster.sh):
# a 2 x 2 grid becomes one job array of 4 tasks, at most 2 at once
# (slurm.array_parallel); each task trains its own point, named by its
# overrides, and `gantry sweep --summary` shows all four finished.
#   sweep_test.sh GANTRY SOURCE_DIR CLUSTER_DIR WORK_DIR TINY_PLUGIN
set -euo pipefail
gantry=$1 src=$2 cluster=$3 work=$4 plugin=$5
export SLURM_CONF=$cluster/slurm.conf
rm -rf "$work" && mkdir -p "$work" && cd "$work"
grid=("$src/tests/sdk_plugin/tiny.yaml" system.plugin="$plugin" system.lr=0.05,0.1 data.batch_size=16,32
      trainer.max_steps=12 trainer.threads=1 slurm.array_parallel=2)
"$gantry" submit "${grid[@]}" --sweep --dry-run | grep -q -- '--array=0-3%2'
timeout 300 "$gantry" submit "${grid[@]}" --sweep --wait
logs=(runs/tiny/slurm-*_*.out)
[[ ${#logs[@]} == 4 ]] || { echo "FAIL: ${#logs[@]} task logs, expected 4: ${logs[*]}"; exit 1; }
for k in 0 1 2 3; do
  grep -q "sweep: array task $k of 4: " runs/tiny/slurm-*_$k.out || { echo "FAIL: task $k"; cat runs/tiny/slurm-*_$k.out; exit 1; }
done
grep -h "sweep: array task" runs/tiny/slurm-*_*.out
summary=$("$gantry" sweep "${grid[@]}" --summary)
echo "$summary"
[[ $(grep -cE '^lr=0\.(05|1),batch_size=(16|32) +ran +12 ' <<<"$summary") == 4 ]] \
  || { echo "FAIL: the summary does not show 4 points at step 12"; exit 1; }
grep -q "best by final loss" <<<"$summary"
echo "sweep_test: OK"
