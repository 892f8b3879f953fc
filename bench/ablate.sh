#!/usr/bin/env bash
# Where gantry's single-process speed comes from, measured in one run: gantry
# with and without the fused Adam, against the best hand-tuned bare loop
# (backward into the stepped optimizer's parameters only, glibc malloc tuned
# as gantry tunes it) and the loop as the tutorials write it. Alternating
# runs; medians; ratios within a round.
#   bench/ablate.sh [rounds=3] [steps=700] [threads=1] [batch=64]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} steps=${2:-700} threads=${3:-1} batch=${4:-64}
warmup=100
cmake --build build --target gantry gan bare_gan >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source bench/common.sh
gantry() {  # fused name
  build/bin/gantry train configs/gan_fashion_mnist.yaml trainer.max_steps="$steps" trainer.threads="$threads" \
    data.batch_size="$batch" trainer.progress=none trainer.fused_adam="$1" trainer.out_dir="$out" name="$2" >/dev/null
  python3 bench/gantry_steps_per_s.py "$out/$2/latest/metrics.csv" "$warmup"
}
bare() { build/bin/bare_gan --steps "$steps" --warmup "$warmup" --threads "$threads" --batch "$batch" "$@" | awk '{print $2}'; }
declare -A v r
for i in $(seq "$rounds"); do
  f=$(gantry true "f$i") u=$(gantry false "u$i") b=$(bare) t=$(GLIBC_TUNABLES=$tuned_malloc bare --inputs)
  v[f]+="$f " v[u]+="$u " v[b]+="$b " v[t]+="$t "
  r[u]+="$(echo "$f / $u" | bc -l) " r[b]+="$(echo "$f / $b" | bc -l) " r[t]+="$(echo "$f / $t" | bc -l) "
  echo "round $i: fused $f, LibTorch Adam $u, bare $b, bare tuned $t" >&2
done
printf '\nbatch %s, %s thread(s), steps %s..%s, %s rounds (median)\n\n' "$batch" "$threads" "$warmup" "$steps" "$rounds"
printf '| loop | steps/s | gantry (fused Adam) / this |\n|---|---|---|\n'
printf '| gantry train (fused Adam, the default) | %.1f | 1.00 |\n' "$(med "${v[f]}")"
printf '| gantry train, trainer.fused_adam=false (LibTorch Adam::step) | %.1f | %.3f |\n' "$(med "${v[u]}")" "$(med "${r[u]}")"
printf '| bare loop, backward(inputs=), glibc malloc tuned as gantry does | %.1f | %.3f |\n' "$(med "${v[t]}")" "$(med "${r[t]}")"
printf '| bare loop as the tutorials write it (loss.backward()) | %.1f | %.3f |\n' "$(med "${v[b]}")" "$(med "${r[b]}")"
