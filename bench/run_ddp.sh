#!/usr/bin/env bash
# Data-parallel scaling on this machine: global samples/s of gantry with 1 and
# 2 ranks (1 thread each, `gantry launch`) against Python's DistributedDataParallel
# (Debian's python3-torch: the same LibTorch, Gloo, OpenBLAS), in the same run.
# Runs alternate (gantry 1, python 1, gantry 2, python 2, ...) and the table
# shows medians; efficiency = global samples/s of 2 ranks / (2 x 1 rank).
#   bench/run_ddp.sh [reps=3] [steps=700] [batch=64]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3} steps=${2:-700} batch=${3:-64}
warmup=100
cmake --build build --target gantry gan >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source bench/common.sh

gantry_run() {  # ranks name [transport] -> global samples/s
  local ranks=$1 name=$2 transport=${3:-auto} cmd=(build/bin/gantry train)
  ((ranks > 1)) && cmd=(build/bin/gantry launch -n "$ranks")
  "${cmd[@]}" configs/gan_fashion_mnist.yaml trainer.max_steps="$steps" trainer.threads=1 trainer.grad_transport="$transport" \
    data.batch_size="$batch" trainer.progress=none trainer.out_dir="$out" name="$name" >/dev/null
  echo "$(python3 bench/gantry_steps_per_s.py "$out/$name/latest/metrics.csv" "$warmup") * $batch * $ranks" | bc -l
}
python_run() {
  /usr/bin/python3 bench/python_gan.py --ranks "$1" --threads 1 --batch "$batch" --steps "$steps" --warmup "$warmup" | awk '{print $2}'
}

declare -A all
for i in $(seq "$reps"); do
  for ranks in 1 2; do
    all[g$ranks]+="$(gantry_run "$ranks" "g${ranks}_$i") "
    all[p$ranks]+="$(python_run "$ranks") "
  done
  all[gg2]+="$(gantry_run 2 "gg2_$i" gloo) "
  echo "rep $i: gantry 1 rank: ${all[g1]}| 2 ranks: ${all[g2]}| 2 ranks, Gloo: ${all[gg2]}| python 1 rank: ${all[p1]}| 2 ranks: ${all[p2]}" >&2
done
g1=$(med "${all[g1]}") g2=$(med "${all[g2]}") gg2=$(med "${all[gg2]}") p1=$(med "${all[p1]}") p2=$(med "${all[p2]}")
printf '\nGAN, batch %s per rank, 1 thread per rank, steps %s..%s, %s runs each (median)\n\n' "$batch" "$warmup" "$steps" "$reps"
printf '| | 1 rank (samples/s) | 2 ranks (global samples/s) | scaling efficiency |\n|---|---|---|---|\n'
printf '| gantry (shared memory: the default on one host) | %.0f | %.0f | %.0f%% |\n' "$g1" "$g2" "$(echo "100 * $g2 / (2 * $g1)" | bc -l)"
printf '| gantry, trainer.grad_transport=gloo (c10d::Reducer) | %.0f | %.0f | %.0f%% |\n' "$g1" "$gg2" "$(echo "100 * $gg2 / (2 * $g1)" | bc -l)"
printf '| Python DDP (Gloo) | %.0f | %.0f | %.0f%% |\n' "$p1" "$p2" "$(echo "100 * $p2 / (2 * $p1)" | bc -l)"
printf '| gantry / Python | %.2f | %.2f | |\n' "$(echo "$g1 / $p1" | bc -l)" "$(echo "$g2 / $p2" | bc -l)"
