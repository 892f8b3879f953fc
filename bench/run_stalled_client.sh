#!/usr/bin/env bash
# Does a misbehaving monitor client slow training? Alternates runs of the demo
# with no client, with a client that connects, says Hello and never reads, and
# with a reconnect storm (200 handshakes/s from one address), and compares
# steady-state steps/s (steps 100..N) with each run's resident memory at the
# end (ranks.csv).
#   bench/run_stalled_client.sh [rounds=3] [steps=1500] [threads=1]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3} steps=${2:-1500} threads=${3:-1}
cmake --build build --target gantry gan stall_client >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source bench/common.sh
run() {  # name mode(none|stall|churn) -> "steps/s rss_mib"
  local name=$1 mode=$2
  build/bin/gantry train configs/gan_fashion_mnist.yaml trainer.max_steps="$steps" trainer.threads="$threads" \
    trainer.progress=none trainer.log_every_n_steps=10 trainer.image_every_n_steps=20 \
    monitor.token=bench trainer.out_dir="$out" name="$name" >/dev/null 2>&1 &
  local pid=$!
  local client=
  if [[ $mode != none ]]; then
    for _ in $(seq 200); do [[ -s $out/$name/latest/monitor.txt ]] && break; sleep 0.05; done
    port=$(sed -n 's/.*:\([0-9]*\) --token.*/\1/p' "$out/$name/latest/monitor.txt")
    if [[ $mode == stall ]]; then build/bin/stall_client "$port" bench 600 &
    else build/bin/stall_client "$port" bench 600 churn 200 2>>"$out/churn.log" & fi
    client=$!
  fi
  wait "$pid"
  if [[ -n $client ]]; then kill "$client" 2>/dev/null || true; wait "$client" 2>/dev/null || true; fi
  echo "$(python3 bench/gantry_steps_per_s.py "$out/$name/latest/metrics.csv" 100)" \
       "$(tail -1 "$out/$name/latest/ranks.csv" | cut -d, -f5)"
}
declare -A rate rss ratio
for i in $(seq "$pairs"); do
  for mode in none stall churn; do
    read -r r m < <(run "$mode$i" "$mode")
    rate[$mode]+="$r " rss[$mode]+="$m "
    [[ $mode == none ]] && base=$r || ratio[$mode]+="$(echo "$r / $base" | bc -l) "
    echo "round $i: $mode $r steps/s, $m MiB" >&2
  done
done
printf '\n| demo, %s thread(s), grids every 20 steps, %s steps | steps/s (median of %s) | ratio to no client (paired median) | RSS at the end, MiB (median) |\n|---|---|---|---|\n' "$threads" "$steps" "$pairs"
printf '| no client | %.2f | 1 | %.0f |\n' "$(med ${rate[none]})" "$(med ${rss[none]})"
printf '| a client that never reads | %.2f | %.3f | %.0f |\n' "$(med ${rate[stall]})" "$(med ${ratio[stall]})" "$(med ${rss[stall]})"
printf '| 200 handshakes/s from one address | %.2f | %.3f | %.0f |\n' "$(med ${rate[churn]})" "$(med ${ratio[churn]})" "$(med ${rss[churn]})"
sed -n 's/^churn: /churn client: /p' "$out/churn.log" >&2
