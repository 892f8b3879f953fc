#!/usr/bin/env bash
# Where gantry's single-process speed comes from, measured in one run: gantry
# as it runs by default, then with each of its speed-ups turned off in turn
# (huge pages, Adam stepped inside backward, the transposed weight layout, the
# fused Adam),
# against the best hand-tuned bare loop (backward into the stepped optimizer's
# parameters only, glibc malloc tuned as gantry tunes it) and the loop as the
# tutorials write it. Alternating runs; medians; ratios within a round.
#   bench/ablate.sh [rounds=3] [steps=700] [threads=1] [batch=64]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} steps=${2:-700} threads=${3:-1} batch=${4:-64}
warmup=100
cmake --build build --target gantry gan bare_gan >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source bench/common.sh
gantry() {  # name [key=value ...]
  local name=$1
  shift
  build/bin/gantry train configs/gan_fashion_mnist.yaml trainer.max_steps="$steps" trainer.threads="$threads" \
    data.batch_size="$batch" trainer.progress=none trainer.out_dir="$out" name="$name" "$@" >/dev/null
  python3 bench/gantry_steps_per_s.py "$out/$name/latest/metrics.csv" "$warmup"
}
bare() { build/bin/bare_gan --steps "$steps" --warmup "$warmup" --threads "$threads" --batch "$batch" "$@" | awk '{print $2}'; }
labels=(
  "gantry train (the default: fused Adam stepped in backward, transposed weight layout, huge pages)"
  "gantry train, trainer.huge_pages=false"
  "gantry train, trainer.step_in_backward=false (fused Adam after backward)"
  "gantry train, trainer.weight_layout=as_built"
  "gantry train, step_in_backward=false and weight_layout=as_built"
  "gantry train, trainer.fused_adam=false (LibTorch Adam::step)"
  "bare loop, backward(inputs=), glibc malloc tuned as gantry does"
  "bare loop as the tutorials write it (loss.backward())"
)
run_variant() {  # index round
  case $1 in
    0) gantry "d$2" ;;
    1) gantry "h$2" trainer.huge_pages=false ;;
    2) gantry "s$2" trainer.step_in_backward=false ;;
    3) gantry "l$2" trainer.weight_layout=as_built ;;
    4) gantry "n$2" trainer.step_in_backward=false trainer.weight_layout=as_built ;;
    5) gantry "u$2" trainer.fused_adam=false ;;
    6) GLIBC_TUNABLES=$tuned_malloc bare --inputs ;;
    7) bare ;;
  esac
}
declare -A v r
for i in $(seq "$rounds"); do
  line="round $i:"
  for k in "${!labels[@]}"; do
    x=$(run_variant "$k" "$i")
    [[ $k == 0 ]] && d=$x
    v[$k]+="$x " r[$k]+="$(echo "$d / $x" | bc -l) "
    line+=" $x"
  done
  echo "$line" >&2
done
printf '\nbatch %s, %s thread(s), steps %s..%s, %s rounds (median)\n\n' "$batch" "$threads" "$warmup" "$steps" "$rounds"
printf '| loop | steps/s | gantry (default) / this |\n|---|---|---|\n'
for k in "${!labels[@]}"; do
  printf '| %s | %.1f | %.3f |\n' "${labels[$k]}" "$(med "${v[$k]}")" "$(med "${r[$k]}")"
done
