#!/usr/bin/env bash
# gantry-view (Dear ImGui, GLFW, OpenGL 3 on Mesa's software GL) on a real X
# server: a live run watched through the line the runner printed, then the
# finished run from its directory, then a mistyped target. The screenshots
# must show both loss curves and the image grid.
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
