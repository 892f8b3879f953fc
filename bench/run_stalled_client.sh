#!/usr/bin/env bash
# Does a stalled monitor client slow training? Alternates runs of the demo with
# no client and with a client that connects, says Hello and never reads, and
# compares steady-state steps/s (steps 100..N) pairwise.
#   bench/run_stalled_client.sh [pairs=3] [steps=1500]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3} steps=${2:-1500}
cmake --build build --target gantry gan stall_client >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source bench/common.sh
run() {  # name stalled(0|1) -> steps/s
  local name=$1 stalled=$2
  build/bin/gantry train configs/gan_fashion_mnist.yaml trainer.max_steps="$steps" trainer.threads=1 \
    trainer.progress=none trainer.log_every_n_steps=10 trainer.image_every_n_steps=20 \
    monitor.token=bench trainer.out_dir="$out" name="$name" >/dev/null &
  local pid=$!
  if ((stalled)); then
    for _ in $(seq 200); do [[ -s $out/$name/latest/monitor.txt ]] && break; sleep 0.05; done
    port=$(sed -n 's/.*:\([0-9]*\) --token.*/\1/p' "$out/$name/latest/monitor.txt")
    build/bin/stall_client "$port" bench 600 &
    local client=$!
  fi
  wait "$pid"
  ((stalled)) && kill "$client" 2>/dev/null || true
  python3 bench/gantry_steps_per_s.py "$out/$name/latest/metrics.csv" 100
}
ratios=() none=() stall=()
for i in $(seq "$pairs"); do
  a=$(run "none$i" 0) b=$(run "stall$i" 1)
  none+=("$a") stall+=("$b") ratios+=("$(echo "$b / $a" | bc -l)")
  echo "pair $i: no client $a, stalled client $b steps/s" >&2
done
printf '\n| demo, 1 thread, grids every 20 steps, %s steps | steps/s (median of %s) |\n|---|---|\n' "$steps" "$pairs"
printf '| no client | %.2f |\n| a client that never reads | %.2f |\n| ratio (paired median) | %.3f |\n' \
  "$(med "${none[@]}")" "$(med "${stall[@]}")" "$(med "${ratios[@]}")"
