#!/usr/bin/env bash
# Both monitors' ranks views on a live run of many ranks, under Xvfb:
# `gantry launch -n N` (default 128) of the basic GAN (batch 8 a rank, one
# thread, a metrics row every 2 steps), rank SLOW (default 37) slowed by
# SIGSTOP/SIGCONT bursts (stopped STOP_S=0.9 s, then running CONT_S=0.1 s,
# from the first grid on), then gantry-monitor and gantry-view on the live run directory, each
# grabbing its window after WAIT s (default 100) while the run trains. The
# screenshots go to docs/images/ (ranks_monitor_N.png, ranks_view_N.png); the
# straggler lines the run printed, and the end's summary, are shown.
#   bench/ranks_view.sh [N] [SLOW] [WAIT]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-128} slow=${2:-37} wait_s=${3:-100}
root=$PWD
cmake --build build --target gantry gan gantry-monitor gantry-view >/dev/null
work=$(mktemp -d)
source tests/gui/xvfb_common.sh
start_xvfb "$work"
trap 'kill $xvfb_pid ${launch:-} 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
ulimit -n 65536 2>/dev/null || true
"$root/build/bin/gantry" launch -n "$n" "$root/configs/gan_fashion_mnist.yaml" data.batch_size=8 trainer.threads=1 \
  trainer.max_steps=400 trainer.log_every_n_steps=2 trainer.image_every_n_steps=50 trainer.progress=none \
  checkpoint.every_n_steps=0 > launch.log 2>&1 &
launch=$!
run=runs/gan_fashion_mnist/latest
for _ in $(seq 1800); do [[ -s $run/images/generated_0000000.png ]] && break; sleep 0.1; done
[[ -s $run/images/generated_0000000.png ]] || { tail -n 20 launch.log; exit 1; }
echo "trains: $(grep -m1 'ranks, master' launch.log)"
# A rank forked by the launcher is named "gantry rank N" (its environ is the
# launcher's); one it exec'd (GANTRY_LAUNCH_EXEC=1) has RANK=N in its environ.
pid=$(for p in $(pgrep -P $launch); do
  { [[ $(cat /proc/$p/comm 2>/dev/null) == "gantry rank $slow" ]] ||
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "RANK=$slow"; } && echo "$p"
done | head -n 1 || true)
[[ -n $pid ]] || { echo "rank $slow not found"; exit 1; }
(while kill -STOP "$pid" 2>/dev/null; do sleep "${STOP_S:-0.9}"; kill -CONT "$pid"; sleep "${CONT_S:-0.1}"; done) &
bursts=$!
mkdir -p "$root/docs/images"
x "$root/build/bin/gantry-monitor" "$run" --size 1280x800 --screenshot "$root/docs/images/ranks_monitor_$n.png" \
  --timeout "$wait_s" > monitor.log 2>&1 &
monitor=$!
x "$root/build/bin/gantry-view" "$run" --size 1280x800 --screenshot "$root/docs/images/ranks_view_$n.png" \
  --timeout "$wait_s" > view.log 2>&1 || true
wait $monitor || true
kill $bursts 2>/dev/null || true
kill -CONT "$pid" 2>/dev/null || true
cat monitor.log view.log
echo "screenshots: docs/images/ranks_monitor_$n.png docs/images/ranks_view_$n.png"
kill -INT $launch 2>/dev/null || true
wait $launch || true
grep -E 'straggler|stragglers:' launch.log | head -n 20
