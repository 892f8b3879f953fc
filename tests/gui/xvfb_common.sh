# Shared by monitor_xvfb.sh and view_xvfb.sh (sourced): a real training run
# with the monitor on, a real X server per command (xvfb-run -a: a free display,
# stopped with the command), and checks on the screenshots.
fail() { echo "FAIL: $*"; exit 1; }
command -v xvfb-run >/dev/null || fail "xvfb-run is missing (scripts/setup.sh installs xvfb)"
x() { xvfb-run -a -s "-screen 0 1280x800x24" "$@"; }

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
