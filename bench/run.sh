#!/usr/bin/env bash
# The benchmark suite: gantry against a bare LibTorch C++ loop, the same loop
# in Python (Debian's python3-torch: the same LibTorch underneath) and the
# machine's matmul limit, on the GAN demo; one table.
#   bench/run.sh [rounds=3] [steps=700] [BATCHxTHREADS ...]   (default: 64x1 256x1 64x2 256x2)
# Each configuration (batch 64/256, 1/2 threads) runs gantry, bare, Python in
# turn, `rounds` times; figures are medians, ratios are taken within a round
# (these machines are noisy). Steady state: steps after the warm-up only.
# gantry runs as a user runs it: stream server, run log, TensorBoard files,
# metrics.csv, grids, a checkpoint at the end. DDP rows: bench/run_ddp.sh.
# GANTRY_BENCH_ARGS: more overrides for gantry's runs (trainer.profiler=simple).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} steps=${2:-700}
shift $(($# < 2 ? $# : 2))
configs=()
for c in "${@:-64x1 256x1 64x2 256x2}"; do
  for one in $c; do configs+=("${one/x/ }"); done
done
cmake --build build --target gantry gan bare_gan gemm_rate >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source bench/common.sh
timed() {  # CMD... -> its stdout; peak RSS (KiB) appended to $out/rss
  /usr/bin/time -f "%M" -o "$out/rss.one" "$@"
  cat "$out/rss.one" >> "$out/rss"
}

declare -A sps rss ratio floor gflops of_floor
run_config() {  # batch threads
  local b=$1 t=$2 n=$steps w=100 key="$1x$2"
  ((b > 64)) && n=$((steps * 64 / b + 150)) && w=100
  for r in $(seq "$rounds"); do
    # The floor is measured in every round too: its fraction is a ratio, taken within the round.
    local flop rate fl
    read -r flop rate fl < <(build/bin/gemm_rate --batch "$b" --threads "$t" --seconds 2 | awk '{print $2, $4, $6}')
    floor[$key]+="$fl " gflops[$key]+="$rate " flop_per_step[$b]=$flop
    : > "$out/rss"
    timed build/bin/gantry train configs/gan_fashion_mnist.yaml trainer.max_steps="$n" trainer.threads="$t" \
      data.batch_size="$b" trainer.progress=none trainer.log_every_n_steps=50 monitor.enabled=true \
      trainer.out_dir="$out" name="g$key$r" ${GANTRY_BENCH_ARGS:-} >/dev/null
    local g; g=$(python3 bench/gantry_steps_per_s.py "$out/g$key$r/latest/metrics.csv" "$w")
    local c; c=$(timed build/bin/bare_gan --steps "$n" --warmup "$w" --threads "$t" --batch "$b" | awk '{print $2}')
    local p; p=$(timed /usr/bin/python3 bench/python_gan.py --threads "$t" --batch "$b" --steps "$n" --warmup "$w" \
      | awk -v b="$b" '{print $2 / b}')
    mapfile -t kib < "$out/rss"
    sps[$key.g]+="$g " sps[$key.c]+="$c " sps[$key.p]+="$p "
    rss[$key.g]+="${kib[0]} " rss[$key.c]+="${kib[1]} " rss[$key.p]+="${kib[2]} "
    ratio[$key.c]+="$(echo "$g / $c" | bc -l) " ratio[$key.p]+="$(echo "$g / $p" | bc -l) "
    for impl in g c p; do
      local x=$g
      [[ $impl == c ]] && x=$c
      [[ $impl == p ]] && x=$p
      of_floor[$key.$impl]+="$(echo "100 * $x / $fl" | bc -l) "
    done
    echo "batch $b, $t thread(s), round $r: gantry $g, bare $c, python $p, floor $fl steps/s" >&2
  done
}
declare -A flop_per_step
for c in "${configs[@]}"; do run_config $c; done

# Start-up: from `gantry train` to the end of its first step (plugin load,
# data load, setup, one step), and the whole 1-step process.
startup=() whole=()
for r in $(seq "$rounds"); do
  t0=$(date +%s.%N)
  build/bin/gantry train configs/gan_fashion_mnist.yaml trainer.max_steps=1 trainer.log_every_n_steps=1 \
    trainer.threads=1 trainer.progress=none trainer.out_dir="$out" name="s$r" >/dev/null
  t1=$(date +%s.%N)
  first=$(awk -F, 'NR == 2 {print $3}' "$out/s$r/latest/metrics.csv")
  startup+=("$(echo "$first - $t0" | bc -l)") whole+=("$(echo "$t1 - $t0" | bc -l)")
done
blas=$(build/bin/gantry train configs/gan_fashion_mnist.yaml trainer.max_steps=1 trainer.progress=none \
  trainer.out_dir="$out" name=b 2>&1 | sed -n 's/.* | \([^|]*\), [0-9]* threads\{0,1\}$/\1/p' | head -1)

printf '\nGAN demo (Fashion-MNIST), %s rounds, median; "x floor": fraction of the matmul-only floor measured in the same round\n\n' "$rounds"
printf '| batch | threads | loop | steps/s | samples/s | GFLOP/s | x floor | gantry / this | peak RSS MiB |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for c in "${configs[@]}"; do
  read -r b t <<<"$c"
  key="${b}x${t}"
  for impl in g c p; do
    s=$(med "${sps[$key.$impl]}")
    name=$([[ $impl == g ]] && echo "gantry train" || { [[ $impl == c ]] && echo "bare LibTorch C++" || echo "Python (python3-torch)"; })
    r=$([[ $impl == g ]] && echo "1.00" || printf '%.2f' "$(med "${ratio[$key.$impl]}")")
    printf '| %s | %s | %s | %.1f | %.0f | %.1f | %.0f%% | %s | %.0f |\n' "$b" "$t" "$name" "$s" \
      "$(echo "$s * $b" | bc -l)" "$(echo "$s * ${flop_per_step[$b]} / 1000000000" | bc -l)" \
      "$(med "${of_floor[$key.$impl]}")" "$r" "$(echo "$(med "${rss[$key.$impl]}") / 1024" | bc -l)"
  done
  fl=$(med "${floor[$key]}") gf=$(med "${gflops[$key]}")
  printf '| %s | %s | matmul-only floor (%.1f GFLOP/s through the same BLAS) | %.1f | %.0f | %.1f | 100%% | | |\n' \
    "$b" "$t" "$gf" "$fl" "$(echo "$fl * $b" | bc -l)" "$gf"
done
for b in "${!flop_per_step[@]}"; do
  printf '\nFLOPs per training step (matrix products, D frozen in the G step): %.1f MFLOP per sample (%.2f GFLOP at batch %s)' \
    "$(echo "${flop_per_step[$b]} / $b / 1000000" | bc -l)" "$(echo "${flop_per_step[$b]} / 1000000000" | bc -l)" "$b"
done
printf '\n' 
printf 'BLAS LibTorch uses: %s\n' "${blas:-unknown}"
printf 'gantry train start-up to the end of the first step: %.2f s (whole 1-step run %.2f s), median of %s\n' \
  "$(printf '%s\n' "${startup[@]}" | median)" "$(printf '%s\n' "${whole[@]}" | median)" "$rounds"
