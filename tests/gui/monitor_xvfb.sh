#!/usr/bin/env bash
# gantry-monitor as a user runs it, on a real X server (Xvfb, started here by
# start_xvfb and stopped with the script): a live run watched through the exact line the
# runner printed, then the finished run opened from its directory, three runs
# of a sweep overlaid, then a
# mistyped target. Each view is grabbed to a PNG (left in WORK_DIR).
#   monitor_xvfb.sh GANTRY GANTRY_MONITOR CONFIG WORK_DIR
set -uo pipefail
gantry=$(realpath "$1") monitor=$(realpath "$2") config=$(realpath "$3") work=$4
source "$(dirname "$0")/xvfb_common.sh"
rm -rf "$work" && mkdir -p "$work/home" && cd "$work" || exit 1
start_xvfb "$PWD"
export HOME="$work/home"   # QSettings of this test stay here

# 1. Live: start a run, paste its monitor line, watch it to the end.
start_run "$gantry" "$config" 600
x "$monitor" "$line" --screenshot live.png --size 1280x800 --timeout 120 > live.log 2>&1
rc=$?
wait $train || fail "gantry train failed: $(cat train.log)"
[[ $rc -eq 0 ]] || fail "gantry-monitor (live) exited $rc: $(cat live.log)"
read -r w h orange blue < <(png_check stats live.png) || fail "live.png is not a PNG"
[[ $w -eq 1280 && $h -eq 800 ]] || fail "live.png is ${w}x${h}, expected 1280x800"
((orange > 300 && blue > 300)) || fail "live.png lacks a curve: $orange orange, $blue blue pixels"
k=$(png_check contains live.png runs/gan_fashion_mnist/latest/images/generated_0000600.png) || fail "live.png: the step-600 grid is not shown"
echo "live: watched to the end, live.png ${w}x${h}, $orange g_loss pixels, $blue d_loss pixels, the step-600 grid at ${k}x"

# 2. Offline: the finished run from its directory.
t0=$(date +%s%N)
x "$monitor" runs/gan_fashion_mnist/latest --screenshot offline.png --size 1280x800 --timeout 60 > offline.log 2>&1 \
  || fail "gantry-monitor (offline) failed: $(cat offline.log)"
echo "offline: screenshot offline.png ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
[[ $(stat -c %s offline.png) -gt 20000 ]] || fail "offline.png is suspiciously small"

# 3. Three runs of a sweep, opened as its directory, overlaid: each run's
# colour in the charts (blue, orange, green), and the Runs table.
"$gantry" sweep "$config" system.lr=1e-4,2e-4,4e-4 trainer.max_steps=60 trainer.log_every_n_steps=5 \
  trainer.image_every_n_steps=30 trainer.threads=1 trainer.progress=none monitor.enabled=false > sweep.log 2>&1 \
  || fail "gantry sweep failed: $(tail -n 5 sweep.log)"
x "$monitor" runs/gan_fashion_mnist/sweep --screenshot multi.png --size 1280x800 --timeout 60 > multi.log 2>&1 \
  || fail "gantry-monitor (3 runs) failed: $(cat multi.log)"
read -r blue orange green < <(png_check colours multi.png 1f77b4 ff7f0e 2ca02c) || fail "multi.png unreadable"
((blue > 300 && orange > 300 && green > 300)) || fail "multi.png: a run's lines are missing ($blue $orange $green pixels)"
echo "3 runs overlaid: $blue / $orange / $green pixels of their colours"

# 4. A mistyped target: one clear line, exit 2, no window needed.
out=$(x "$monitor" "localhost:99999" 2>&1); rc=$?
[[ $rc -eq 2 ]] || fail "a bad port exited $rc: $out"
grep -q "is not a port" <<<"$out" || fail "unclear message: $out"
echo "bad target: $(grep 'not a port' <<<"$out")"
grep -q recent home/.config/gantry/gantry-monitor.conf || fail "recent connections were not remembered"

# No display at all (a login node without ssh -X): one line, exit 1.
out=$(env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM "$monitor" runs/gan_fashion_mnist/latest 2>&1); rc=$?
[[ $rc -eq 1 && $(wc -l <<<"$out") -eq 1 ]] || fail "without a display: exit $rc, said: $out"
grep -q "no display" <<<"$out" || fail "unclear message without a display: $out"
echo "no display: $out"
echo "PASS"
