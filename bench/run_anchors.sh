#!/usr/bin/env bash
# The real anchors, side by side on the CPU, in one run: gantry built against
# Debian's LibTorch 1.13 (build/) and against the torch wheel's 2.15
# (build-cuda/), the plain GAN loop in Python on both torches
# (bench/python_gan.py), and Lightning's own basic GAN (bench/lightning_gan.py,
# pytorch-lightning 2.6.6 on torch 2.15). Batch 64, 1 thread per rank; 1 rank,
# then 2 ranks (gantry launch -n 2 against Lightning's DDP). samples/s over
# the steps after the warm-up, median of the rounds; gantry / Lightning per round.
#   bench/run_anchors.sh [rounds=3] [steps=700]
# Needs both builds (scripts/test.sh makes them) and scripts/torch2.sh's venv.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} steps=${2:-700} warmup=100 batch=64
py2=$(realpath -s "$(scripts/torch2.sh)/../../../../../../../bin/python")  # the venv's, beside its torch
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source bench/common.sh

gantry_run() {  # build ranks name -> samples/s
  local cmd=("$1/bin/gantry" train)
  (($2 > 1)) && cmd=("$1/bin/gantry" launch -n "$2")
  "${cmd[@]}" configs/gan_fashion_mnist.yaml trainer.max_steps="$steps" trainer.threads=1 data.batch_size=$batch \
    trainer.progress=none trainer.log_every_n_steps=50 trainer.out_dir="$out" name="$3" >/dev/null
  echo "$(python3 bench/gantry_steps_per_s.py "$out/$3/latest/metrics.csv" "$warmup") * $batch * $2" | bc -l
}
loop_run() {  # python ranks -> samples/s
  "$1" bench/python_gan.py --ranks "$2" --threads 1 --batch $batch --steps "$steps" --warmup $warmup | awk '{print $2}'
}
lightning_run() {  # ranks -> samples/s
  "$py2" bench/lightning_gan.py --ranks "$1" --threads 1 --batch $batch --steps "$steps" --warmup $warmup 2>/dev/null |
    awk '/^samples_per_s/ {print $2}'
}

declare -A all ratio
for r in $(seq "$rounds"); do
  for n in 1 2; do
    all[g13.$n]+="$(gantry_run build "$n" "g13_${n}_$r") "
    all[g215.$n]+="$(gantry_run build-cuda "$n" "g215_${n}_$r") "
    all[p13.$n]+="$(loop_run /usr/bin/python3 "$n") "
    all[p215.$n]+="$(loop_run "$py2" "$n") "
    l=$(lightning_run "$n")
    all[l.$n]+="$l "
    ratio[g13.$n]+="$(printf '%.2f' "$(echo "$(echo "${all[g13.$n]}" | awk '{print $NF}') / $l" | bc -l)") "
    ratio[g215.$n]+="$(printf '%.2f' "$(echo "$(echo "${all[g215.$n]}" | awk '{print $NF}') / $l" | bc -l)") "
  done
  echo "round $r: 1 rank: gantry 1.13 ${all[g13.1]}| gantry 2.15 ${all[g215.1]}| loop 1.13 ${all[p13.1]}| loop 2.15 ${all[p215.1]}| Lightning ${all[l.1]}" >&2
  echo "round $r: 2 ranks: gantry 1.13 ${all[g13.2]}| gantry 2.15 ${all[g215.2]}| loop 1.13 ${all[p13.2]}| loop 2.15 ${all[p215.2]}| Lightning ${all[l.2]}" >&2
done

printf '\nThe basic GAN on Fashion-MNIST, batch %s per rank, 1 thread per rank, %s steps (%s warm-up), %s rounds, median samples/s (all ranks)\n\n' \
  "$batch" "$steps" "$warmup" "$rounds"
printf '| loop | LibTorch | 1 rank | 2 ranks | gantry 1.13 / this, 1 rank | 2 ranks |\n|---|---|---|---|---|---|\n'
row() {  # key name torch
  printf '| %s | %s | %.0f | %.0f | %.2f | %.2f |\n' "$2" "$3" "$(med "${all[$1.1]}")" "$(med "${all[$1.2]}")" \
    "$(echo "$(med "${all[g13.1]}") / $(med "${all[$1.1]}")" | bc -l)" "$(echo "$(med "${all[g13.2]}") / $(med "${all[$1.2]}")" | bc -l)"
}
row g13 "gantry train / launch" "1.13 (Debian)"
row g215 "gantry train / launch" "2.15 (torch wheel)"
row p13 "plain loop, Python (DDP for 2)" "1.13 (Debian)"
row p215 "plain loop, Python (DDP for 2)" "2.15 (torch wheel)"
row l "Lightning 2.6.6 basic GAN (DDP for 2)" "2.15 (torch wheel)"
printf '\ngantry / Lightning by round, 1 rank: 1.13 build %s; 2.15 build %s\n' "${ratio[g13.1]}" "${ratio[g215.1]}"
printf 'gantry / Lightning by round, 2 ranks: 1.13 build %s; 2.15 build %s\n' "${ratio[g13.2]}" "${ratio[g215.2]}"
