#!/usr/bin/env bash
# gantry-monitor as a user runs it, on a real X server (Xvfb, started here by
# xvfb-run and stopped with it): a live run watched through the exact line the
# runner printed, then the finished run opened from its directory, then a
# mistyped target. Each view is grabbed to a PNG (left in WORK_DIR).
#   monitor_xvfb.sh GANTRY GANTRY_MONITOR CONFIG WORK_DIR
set -uo pipefail
gantry=$(realpath "$1") monitor=$(realpath "$2") config=$(realpath "$3") work=$4
rm -rf "$work" && mkdir -p "$work/home"
cd "$work"
export HOME="$work/home"   # QSettings of this test stay here
fail() { echo "FAIL: $*"; exit 1; }
if ! command -v xvfb-run >/dev/null; then fail "xvfb-run is missing (scripts/setup.sh installs xvfb)"; fi
x() { xvfb-run -a -s "-screen 0 1280x800x24" "$@"; }
png_size() { python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(24); assert d[:8]==b"\x89PNG\r\n\x1a\n"; print(*struct.unpack(">II", d[16:24]))' "$1"; }

# 1. Live: start a run, paste its monitor line, watch it to the end.
"$gantry" train "$config" trainer.max_steps=600 trainer.log_every_n_steps=10 trainer.image_every_n_steps=100 \
  trainer.threads=1 trainer.progress=none monitor.enabled=true > train.log 2>&1 &
train=$!
for _ in $(seq 600); do
  [[ -s runs/gan_fashion_mnist/latest/monitor.txt ]] && break
  kill -0 $train 2>/dev/null || break
  sleep 0.1
done
line=$(cat runs/gan_fashion_mnist/latest/monitor.txt) || fail "no monitor.txt; gantry train said: $(cat train.log)"
echo "the runner printed: $line"
start=$(date +%s.%N)
x "$monitor" "$line" --screenshot live.png --size 1280x800 --timeout 120 > live.log 2>&1
rc=$?
wait $train || fail "gantry train failed: $(cat train.log)"
[[ $rc -eq 0 ]] || fail "gantry-monitor (live) exited $rc: $(cat live.log)"
read -r w h < <(png_size live.png) || fail "live.png is not a PNG"
[[ $w -eq 1280 && $h -eq 800 ]] || fail "live.png is ${w}x${h}, expected 1280x800"
echo "live: watched to the end, screenshot live.png ${w}x${h} ($(stat -c %s live.png) bytes)"

# 2. Offline: the finished run from its directory.
t0=$(date +%s%N)
x "$monitor" runs/gan_fashion_mnist/latest --screenshot offline.png --size 1280x800 --timeout 60 > offline.log 2>&1 \
  || fail "gantry-monitor (offline) failed: $(cat offline.log)"
echo "offline: screenshot offline.png ($(( ($(date +%s%N) - t0) / 1000000 )) ms with Xvfb start-up)"
[[ $(stat -c %s offline.png) -gt 20000 ]] || fail "offline.png is suspiciously small"

# 3. A mistyped target: one clear line, exit 2, no window needed.
out=$(x "$monitor" "localhost:99999" 2>&1); rc=$?
[[ $rc -eq 2 ]] || fail "a bad port exited $rc: $out"
grep -q "is not a port" <<<"$out" || fail "unclear message: $out"
echo "bad target: $(grep 'not a port' <<<"$out")"
grep -q recent home/.config/gantry/gantry-monitor.conf || fail "recent connections were not remembered"
echo "PASS"
