#!/usr/bin/env bash
# gantry serve under load: /v1/forward of the demo GAN's checkpoint at
# concurrency 1, 8, 32 for 1-row and 64-row requests, with dynamic batching
# off (--max-batch 1) and on (--max-batch 64, waiting 0 or 5 ms for more);
# one table.
#   bench/serve.sh [seconds=5]
# (The LitServe comparison of issue 31 is still to come.)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
cmake --build build --target gantry gan >/dev/null
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
build/bin/gantry train configs/gan_fashion_mnist.yaml trainer.max_steps=50 trainer.progress=none \
  monitor.enabled=false trainer.out_dir="$work/runs" >/dev/null
echo "| max batch | max wait ms | concurrency | rows a request | requests/s | samples/s | p50 ms | p99 ms | errors |"
echo "|---|---|---|---|---|---|---|---|---|"
for setting in "1 0" "64 0" "64 5"; do
  read -r mb wait <<<"$setting"
  build/bin/gantry serve "$work/runs/gan_fashion_mnist" --port 0 --max-batch $mb --max-wait-ms $wait --threads 1 \
    > "$work/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    port=$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$work/serve.log"); [[ -n $port ]] && break; sleep 0.1
  done
  for rows in 1 64; do
    for c in 1 8 32; do
      read -r conc r rps sps p50 p99 err < <(python3 bench/serve_load.py "$port" $c $rows "$seconds")
      echo "| $mb | $wait | $conc | $r | $rps | $sps | $p50 | $p99 | $err |"
    done
  done
  kill -TERM $pid; wait $pid || true
done
