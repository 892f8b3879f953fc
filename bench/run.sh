#!/usr/bin/env bash
# Steady-state speed of `gantry train` on the demo config against a bare
# LibTorch loop of the same model, data and optimizers, in the same run.
# Runs alternate (gantry, bare, bare, bare, gantry, ...) because these machines
# are noisy; each ratio is taken within a round, and the table shows medians.
#   bench/run.sh [pairs=5] [steps=1100] [threads=1] [batch=64]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-5} steps=${2:-1100} threads=${3:-1} batch=${4:-64}
warmup=100
cmake --build build --target gantry gan bare_gan >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

tuned="glibc.malloc.trim_threshold=1073741824:glibc.malloc.mmap_threshold=268435456:glibc.malloc.top_pad=67108864"
g_all=() b_all=() bi_all=() bt_all=() r_all=() ri_all=() rt_all=()
for i in $(seq "$pairs"); do
  build/bin/gantry train configs/gan_fashion_mnist.yaml trainer.max_steps="$steps" \
    trainer.threads="$threads" data.batch_size="$batch" trainer.progress=none \
    trainer.log_every_n_steps=50 trainer.out_dir="$out" name="run$i" >/dev/null
  g=$(python3 bench/gantry_steps_per_s.py "$out/run$i/latest/metrics.csv" "$warmup")
  b=$(build/bin/bare_gan --steps "$steps" --warmup "$warmup" --threads "$threads" --batch "$batch" | awk '{print $2}')
  bi=$(build/bin/bare_gan --steps "$steps" --warmup "$warmup" --threads "$threads" --batch "$batch" --inputs | awk '{print $2}')
  bt=$(GLIBC_TUNABLES=$tuned build/bin/bare_gan --steps "$steps" --warmup "$warmup" --threads "$threads" --batch "$batch" --inputs | awk '{print $2}')
  g_all+=("$g") b_all+=("$b") bi_all+=("$bi") bt_all+=("$bt")
  r_all+=("$(echo "$g / $b" | bc -l)") ri_all+=("$(echo "$g / $bi" | bc -l)") rt_all+=("$(echo "$g / $bt" | bc -l)")
  echo "round $i: gantry $g  bare $b  bare(inputs=) $bi  bare(inputs=, malloc tuned) $bt steps/s" >&2
done

med() { printf '%s\n' "$@" | median; }
printf '\nGAN, batch %s, %s thread(s), steps %s..%s, %s alternating runs each (median)\n\n' \
  "$batch" "$threads" "$warmup" "$steps" "$pairs"
printf '| loop | steps/s | samples/s | gantry / this (paired median) |\n|---|---|---|---|\n'
printf '| gantry train (plugin, DataLoader thread, metrics.csv, grids, checkpoint at end) | %.1f | %.0f | 1.00 |\n' \
  "$(med "${g_all[@]}")" "$(echo "$(med "${g_all[@]}") * $batch" | bc -l)"
printf '| bare LibTorch loop, loss.backward() | %.1f | %.0f | %.3f |\n' \
  "$(med "${b_all[@]}")" "$(echo "$(med "${b_all[@]}") * $batch" | bc -l)" "$(med "${r_all[@]}")"
printf '| bare LibTorch loop, backward(inputs=G params) | %.1f | %.0f | %.3f |\n' \
  "$(med "${bi_all[@]}")" "$(echo "$(med "${bi_all[@]}") * $batch" | bc -l)" "$(med "${ri_all[@]}")"
printf '| bare loop, backward(inputs=), glibc malloc tuned as gantry does | %.1f | %.0f | %.3f |\n' \
  "$(med "${bt_all[@]}")" "$(echo "$(med "${bt_all[@]}") * $batch" | bc -l)" "$(med "${rt_all[@]}")"
