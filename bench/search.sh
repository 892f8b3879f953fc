#!/usr/bin/env bash
# gantry search against the grid and Optuna on the basic GAN, the same space
# and about the same total steps (docs/search.md#measured):
#   grid    gantry sweep, 3 lr x 3 b1 = 9 points to the budget
#   random  gantry search --method random, 9 trials to the budget
#   asha    27 trials, rungs budget/9, budget/3, budget (eta 3)
#   tpe     the same with TPE's draws
#   pbt     a population of 8, an exploit every budget/9 steps
#   optuna  Optuna's TPESampler + SuccessiveHalvingPruner(min_resource=budget/9,
#           reduction_factor=3) driving the same `gantry train` runs (bench/optuna_search.py)
# Each scores quality_fd on the same classifier at metrics.quality_samples
# (fixed for all) every budget/9 steps; the target is the FD the config's
# own values (lr 2e-4, b1 0.5) reach at the demo's end (configs/gan_fashion_mnist.yaml:
# 3 epochs, 2814 steps; the same samples and classifier): what a search
# must reach in fewer steps. Two trials at a time, a thread each (2 cores).
# Prints one table per seed and the medians.
#   bench/search.sh [SEEDS=3] [BUDGET=900] [SAMPLES=2000] [METHODS="grid random asha tpe pbt optuna"] [TARGET_STEPS=2814]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
seeds=${1:-3} budget=${2:-900} samples=${3:-2000}
methods=${4:-grid random asha tpe pbt optuna}
target_steps=${5:-2814}
gantry=$src/build/bin/gantry
py=${GANTRY_TORCH2_VENV:-$HOME/.cache/gantry/torch-2.15.0}/bin/python
work=${GANTRY_BENCH_DIR:-/tmp/gantry-bench-search}
mkdir -p "$work" && cd "$work"
rung=$((budget / 9))
config=$src/configs/gan_fashion_mnist_quality.yaml
fixed=(metrics.quality_every_n_steps=$rung metrics.quality_samples=$samples metrics.quality_pr_samples=0
       trainer.log_every_n_steps=$((rung / 2)) trainer.image_every_n_steps=0 checkpoint.every_n_steps=$rung
       metrics.quality_classifier=$work/runs/classifier_fashion_mnist trainer.threads=1)
space=('system.lr=loguniform(1e-5,1e-3)' 'system.b1=uniform(0.1,0.9)')
if ! compgen -G "runs/classifier_fashion_mnist/*/checkpoints/*.ckpt" >/dev/null; then
  echo "search.sh: training the classifier the score uses (~1 min)" >&2
  "$gantry" train "$src/configs/classifier_fashion_mnist.yaml" trainer.out_dir=runs >/dev/null
fi
if ! "$py" -c 'import optuna' 2>/dev/null; then "$py" -m pip install -q optuna; fi

# The target: the config's own values to the demo's end (scored there: a
# score is also computed after the last step).
if [ ! -f "runs/default-$target_steps/latest/metrics.csv" ]; then
  "$gantry" train "$config" "${fixed[@]}" name=default-$target_steps trainer.max_epochs=-1 \
    trainer.max_steps=$target_steps trainer.out_dir=runs trainer.progress=none >/dev/null
fi
target=$("$py" -c "
import csv,sys
rows=[r for r in csv.DictReader(open('runs/default-$target_steps/latest/metrics.csv')) if r.get('quality_fd')]
assert int(rows[-1]['step']) == $target_steps, rows[-1]
print(rows[-1]['quality_fd'])")
echo "target: quality_fd $target (lr 2e-4, b1 0.5 at step $target_steps)"

: >runs/times.txt  # this run's methods only
for seed in $(seq 1 "$seeds"); do
  for m in $methods; do
    out=$work/runs/s$seed-$m   # each method in its own directory (runs/ under it)
    rm -rf "$out" && mkdir -p "$out"
    start=$(date +%s.%N)
    cd "$out"
    case $m in
      grid) "$gantry" sweep "$config" "${fixed[@]}" system.lr=5e-5,2e-4,8e-4 system.b1=0.1,0.5,0.9 trainer.seed=$seed \
              trainer.max_epochs=-1 trainer.max_steps=$budget trainer.progress=none --parallel 2 \
              >"$out.log" 2>&1 || true ;;
      random) "$gantry" search "$config" "${fixed[@]}" "${space[@]}" trainer.seed=$seed \
                --method random --trials 9 --budget $budget --metric quality_fd --seed $seed -j 2 >"$out.log" 2>&1 || true ;;
      asha|tpe) "$gantry" search "$config" "${fixed[@]}" "${space[@]}" trainer.seed=$seed \
                  --method $m --trials 27 --budget $budget --rung $rung --eta 3 --metric quality_fd --seed $seed -j 2 \
                  >"$out.log" 2>&1 || true ;;
      pbt) "$gantry" search "$config" "${fixed[@]}" "${space[@]}" trainer.seed=$seed \
             --method pbt --trials 8 --budget $budget --rung $rung --metric quality_fd --seed $seed -j 2 \
             >"$out.log" 2>&1 || true ;;
      optuna) "$py" "$here/optuna_search.py" "$gantry" "$config" "$out/runs" $budget $rung $seed 27 -- "${fixed[@]}" \
                trainer.seed=$seed >"$out.log" 2>&1 || true ;;
    esac
    cd "$work"
    end=$(date +%s.%N)
    echo "$m $seed $start $end $out" >> runs/times.txt
  done
done
"$py" "$here/search_table.py" runs/times.txt "$target" $budget
