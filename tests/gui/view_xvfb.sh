#!/usr/bin/env bash
# gantry-view (Dear ImGui, GLFW, OpenGL 3 on Mesa's software GL) on a real X
# server: a live run watched through the line the runner printed, then the
# finished run from its directory, three runs of a sweep overlaid (one
# hidden), then a mistyped target. The screenshots must show both loss
# curves and the image grid; the overlay each run's colour.
#   view_xvfb.sh GANTRY GANTRY_VIEW CONFIG WORK_DIR
set -uo pipefail
gantry=$(realpath "$1") view=$(realpath "$2") config=$(realpath "$3") work=$4
source "$(dirname "$0")/xvfb_common.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
start_xvfb "$PWD"

check_shot() {  # FILE: the window's size, both curves, the newest grid exactly
  read -r w h orange blue < <(png_check stats "$1") || fail "$1 is not a readable PNG"
  [[ $w -eq 1100 && $h -eq 700 ]] || fail "$1 is ${w}x${h}, expected 1100x700"
  ((orange > 300)) || fail "$1: g_loss's curve is missing ($orange orange pixels)"
  ((blue > 300)) || fail "$1: d_loss's curve is missing ($blue blue pixels)"
  k=$(png_check contains "$1" runs/gan_fashion_mnist/latest/images/generated_0000600.png) || fail "$1: the grid of step 600 is not shown"
  echo "$1: ${w}x${h}, $orange g_loss pixels, $blue d_loss pixels, the step-600 grid at ${k}x"
}

start_run "$gantry" "$config" 600
x "$view" "$line" --screenshot live.png --timeout 120 > live.log 2>&1
rc=$?
wait $train || fail "gantry train failed: $(cat train.log)"
[[ $rc -eq 0 ]] || fail "gantry-view (live) exited $rc: $(cat live.log)"
check_shot live.png

x "$view" runs/gan_fashion_mnist/latest --screenshot offline.png --timeout 60 --verbose > offline.log 2>&1 \
  || fail "gantry-view (offline) failed: $(cat offline.log)"
grep "first frame" offline.log
check_shot offline.png

# Three runs of a sweep overlaid: a colour per run, the differing key in the
# runs table, and a run toggled off (--hide) gone from the charts.
"$gantry" sweep "$config" system.lr=1e-4,2e-4,4e-4 trainer.max_steps=60 trainer.log_every_n_steps=5 \
  trainer.image_every_n_steps=30 trainer.threads=1 trainer.progress=none monitor.enabled=false > sweep.log 2>&1 \
  || fail "gantry sweep failed: $(tail -n 5 sweep.log)"
x "$view" runs/gan_fashion_mnist/sweep --screenshot multi.png --timeout 60 > multi.log 2>&1 \
  || fail "gantry-view (3 runs) failed: $(cat multi.log)"
cat multi.log
for lr in 1e-4 2e-4 4e-4; do
  grep -qx "run lr=$lr: finished, step 60, shown, system.lr=$lr" multi.log \
    || fail "the runs table lacks lr=$lr with its differing key: $(cat multi.log)"
done
[[ $(grep -c "^run " multi.log) -eq 3 ]] || fail "expected 3 runs: $(cat multi.log)"
read -r blue orange green < <(png_check colours multi.png 1f77b4 ff7f0e 2ca02c) || fail "multi.png unreadable"
((blue > 300 && orange > 300 && green > 300)) || fail "multi.png: a run's lines are missing (run colours: $blue $orange $green pixels)"
x "$view" runs/gan_fashion_mnist/sweep --hide lr=4e-4 --screenshot hidden.png --timeout 60 > hidden.log 2>&1 \
  || fail "gantry-view --hide failed: $(cat hidden.log)"
grep -qx "run lr=4e-4: finished, step 60, hidden, system.lr=4e-4" hidden.log || fail "lr=4e-4 not hidden: $(cat hidden.log)"
read -r blue2 orange2 green2 < <(png_check colours hidden.png 1f77b4 ff7f0e 2ca02c) || fail "hidden.png unreadable"
((green2 < 50 && blue2 > 300 && orange2 > 300)) || fail "hidden.png: lr=4e-4's lines still drawn ($green2 green pixels; others $blue2 $orange2)"
echo "3 runs: $blue / $orange / $green pixels of their colours; lr=4e-4 hidden: $green2"

out=$(x "$view" "no-such-dir" 2>&1); rc=$?
[[ $rc -eq 2 ]] || fail "a bad target exited $rc: $out"
grep -q "neither a run directory nor HOST:PORT" <<<"$out" || fail "unclear message: $out"
echo "bad target: $out"

# No display at all (a login node without ssh -X): one line, exit 1.
out=$(env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM "$view" runs/gan_fashion_mnist/latest 2>&1); rc=$?
[[ $rc -eq 1 && $(wc -l <<<"$out") -eq 1 ]] || fail "without a display: exit $rc, said: $out"
grep -q "cannot open a window" <<<"$out" || fail "unclear message without a display: $out"
echo "no display: $out"
echo "PASS"
