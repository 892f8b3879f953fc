#!/usr/bin/env bash
# gantry serve against LitServe, side by side in one run: the demo GAN's
# generator (one gantry checkpoint; LitServe loads it through Lightning's
# load_from_checkpoint, bench/litserve_gan.py) under wrk at concurrency 1, 8
# and 64 for requests of 1 and 64 rows; the same JSON API for both
# ({"input": [[100 floats], ...]} in, the images as JSON out), and gantry's
# .npy bodies beside it. Dynamic batching on for both (32 requests for
# LitServe, 32 rows for gantry, no wait), and off (1). One intra-op thread
# each; the load generator shares the same cores. Prints one table:
# requests/s, samples/s, p50/p99 latency, the server's RSS (its processes').
#   bench/serve.sh [seconds=5] [concurrencies="1 8 64"]
# Needs wrk (scripts/setup.sh installs it); installs litserve 0.2.19 into
# scripts/torch2.sh's venv when missing (bench only: the tests do not need it).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
concs=${2:-"1 8 64"}
command -v wrk >/dev/null || { echo "bench/serve.sh: no wrk: run scripts/setup.sh" >&2; exit 1; }
py=$(realpath -s "$(scripts/torch2.sh)/../../../../../../../bin/python")
"$py" -c "import litserve" 2>/dev/null ||
  "$py" -m pip install -q --disable-pip-version-check litserve==0.2.19
cmake --build build --target gantry gan >/dev/null
work=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill -- -$pid 2>/dev/null; rm -rf "$work"' EXIT
build/bin/gantry train configs/gan_fashion_mnist.yaml trainer.max_steps=50 trainer.progress=none \
  monitor.enabled=false trainer.out_dir="$work/runs" >/dev/null
ckpt=$(realpath "$work"/runs/gan_fashion_mnist/latest/checkpoints/step_0000050.ckpt)

# The request bodies: 1 and 64 rows of noise, as JSON and as .npy.
"$py" - "$work" <<'PY'
import json, sys, numpy as np
rng = np.random.default_rng(0)
for n in (1, 64):
    x = rng.standard_normal((n, 100)).astype(np.float32)
    json.dump({"input": x.tolist()}, open(f"{sys.argv[1]}/body_{n}.json", "w"))
    np.save(f"{sys.argv[1]}/body_{n}.npy", x)
PY

rss_mib() {  # the RSS of a process and its descendants, MiB
  local all=$1 kids
  kids=$(pgrep -P "$1" || true)
  for k in $kids; do all="$all $(pgrep -P "$k" || true) $k"; done
  for p in $all; do awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null; done | awk '{s += $1} END {printf "%.0f", s / 1024}'
}

start() {  # NAME URL_PREFIX COMMAND... -> $pid, $url (waits until it answers)
  local name=$1 health=$2; shift 2
  setsid "$@" > "$work/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    curl -sf "$health" >/dev/null 2>&1 && return 0
    kill -0 $pid 2>/dev/null || { echo "$name exited: $(tail -5 "$work/$name.log")" >&2; exit 1; }
    sleep 0.1
  done
  echo "$name did not come up: $(tail -5 "$work/$name.log")" >&2; exit 1
}
stop() { kill -TERM -- -$pid 2>/dev/null || true; wait $pid 2>/dev/null || true; pid=; }

load() {  # SERVER BATCH URL TYPE BODY_KIND
  local server=$1 batch=$2 url=$3 type=$4 kind=$5
  for rows in 1 64; do
    for c in $concs; do
      local t=$((c < 2 ? 1 : 2))
      sleep 1  # what the last load left queued (wrk stops without waiting for answers) is done
      read -r n err p50 p99 secs < <(BODY="$work/body_$rows.$kind" TYPE=$type \
        wrk -t$t -c$c -d${seconds}s --timeout 30s -s bench/serve_wrk.lua "$url" | sed -n 's/^RESULT //p')
      awk -v s="$server" -v b="$batch" -v k="$kind" -v c=$c -v r=$rows -v n=$n -v e=$err -v p50=$p50 -v p99=$p99 \
        -v t=$secs -v rss="$(rss_mib $pid)" \
        'BEGIN {printf "| %s | %s | %s | %d | %d | %.0f | %.0f | %.1f | %.1f | %d | %s |\n", s, b, k, c, r, n/t, n*r/t, p50, p99, e, rss}'
    done
  done
}

port=18431
# The same generator in both: one request of 64 rows through each, compared.
start gantry "http://127.0.0.1:$port/healthz" build/bin/gantry serve "$ckpt" --port $port --threads 1
curl -s -H 'Content-Type: application/json' --data-binary @"$work/body_64.json" \
  "http://127.0.0.1:$port/v1/forward" > "$work/gantry_64.json"
stop
start litserve "http://127.0.0.1:$port/health" "$py" bench/litserve_gan.py "$ckpt" $port 1
curl -s -H 'Content-Type: application/json' --data-binary @"$work/body_64.json" \
  "http://127.0.0.1:$port/predict" > "$work/litserve_64.json"
stop
"$py" - "$work" <<'PY'
import json, sys, numpy as np
g = np.array(json.load(open(f"{sys.argv[1]}/gantry_64.json"))["output"], dtype=np.float32)
l = np.array(json.load(open(f"{sys.argv[1]}/litserve_64.json"))["output"], dtype=np.float32)
assert g.shape == l.shape == (64, 1, 28, 28), (g.shape, l.shape)
print(f"the same generator: gantry serve and LitServe answer 64 rows alike, max |diff| = {np.abs(g - l).max():.2g}")
assert np.abs(g - l).max() < 1e-5
PY

echo
echo "| server | batching | body | concurrency | rows a request | requests/s | samples/s | p50 ms | p99 ms | errors | RSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for batch in 32 1; do
  start litserve "http://127.0.0.1:$port/health" "$py" bench/litserve_gan.py "$ckpt" $port $batch
  load LitServe "$batch requests" "http://127.0.0.1:$port/predict" application/json json
  stop
  start gantry "http://127.0.0.1:$port/healthz" \
    build/bin/gantry serve "$ckpt" --port $port --threads 1 --max-batch $batch --max-wait-ms 0
  load gantry "$batch rows" "http://127.0.0.1:$port/v1/forward" application/json json
  load gantry "$batch rows" "http://127.0.0.1:$port/v1/forward" application/octet-stream npy
  stop
done
