# Shared by monitor_xvfb.sh and view_xvfb.sh (sourced): a real training run
# with the monitor on, one real X server for the whole script (started by
# start_xvfb, stopped when the script exits), and checks on the screenshots.
#
# Not xvfb-run: it starts a server per command, and its clean-up sometimes
# fails with "problem while cleaning up temporary directory" and exit 5 in
# place of the command's own status (seen in CI, with the other GUI test's
# xvfb-run running beside it). Xvfb -displayfd picks a free display itself,
# atomically, so two tests side by side never race for one.
fail() { echo "FAIL: $*"; exit 1; }
command -v Xvfb >/dev/null || fail "Xvfb is missing (scripts/setup.sh installs xvfb)"
x() { DISPLAY=":$xvfb_display" "$@"; }

# start_xvfb DIR: a 1280x800x24 server; its log and display number in DIR.
start_xvfb() {
  Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp -noreset 3>"$1/xvfb.display" 2>"$1/xvfb.log" &
  xvfb_pid=$!
  trap 'kill $xvfb_pid 2>/dev/null; wait $xvfb_pid 2>/dev/null' EXIT
  for _ in $(seq 100); do
    [[ -s $1/xvfb.display ]] && break
    kill -0 $xvfb_pid 2>/dev/null || fail "Xvfb did not start: $(tail -n 3 "$1/xvfb.log")"
    sleep 0.1
  done
  xvfb_display=$(head -n 1 "$1/xvfb.display")
  [[ $xvfb_display =~ ^[0-9]+$ ]] || fail "Xvfb gave no display number in 10 s: $(tail -n 3 "$1/xvfb.log")"
  export XDG_RUNTIME_DIR="$1/xdg-runtime" && mkdir -p -m 700 "$XDG_RUNTIME_DIR"
}

# start_run GANTRY CONFIG STEPS: trains in the background (pid in $train) and
# sets $line to what the runner printed for the monitor.
start_run() {
  "$1" train "$2" trainer.max_steps="$3" trainer.log_every_n_steps=10 trainer.image_every_n_steps=100 \
    trainer.threads=1 trainer.progress=none monitor.enabled=true > train.log 2>&1 &
  train=$!
  for _ in $(seq 600); do
    [[ -s runs/gan_fashion_mnist/latest/monitor.txt ]] && break
    kill -0 $train 2>/dev/null || break
    sleep 0.1
  done
  line=$(cat runs/gan_fashion_mnist/latest/monitor.txt) || fail "no monitor.txt; gantry train said: $(cat train.log)"
  echo "the runner printed: $line"
}

# png_check.py: screenshot size and curve pixels ("stats"), and whether a grid
# PNG is shown pixel-exact ("contains").
gui_tests_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
png_check() { python3 "$gui_tests_dir/png_check.py" "$@"; }
