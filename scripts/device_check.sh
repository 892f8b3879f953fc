#!/usr/bin/env bash
# The GPU check (docs/cuda.md): builds the runner, the GAN plugin and the
# GoogleTest suite against the machine's own torch (with CUDA), runs the
# *_CUDA tests and the training tests on the GPU, then times the GAN on the GPU:
# gantry (fp32, bf16-mixed, each eager and as a CUDA graph) against the same
# loop in Python torch (eager, bf16, torch.compile) and Lightning, at batch 64
# and 1024, in samples/s. Everything goes to $OUT.
#
# The GPU machine (the device tool's H200 image: Python 3.12 with torch+CUDA,
# nvcc, cmake, ninja, pytorch-lightning; no yaml-cpp, Boost, CLI11, stb,
# GoogleTest or Fashion-MNIST, and no network) cannot fetch, and one command
# there runs at most 600 s, so the check is a packing step here and two halves
# there, each under ~5 minutes on 16 cores with its budget printed:
#   scripts/device_check.sh pack    here, on Debian 12 with its registry: the
#                                   Debian packages it lacks, as .deb files, in
#                                   .device/debs (42 MB; .device is ignored by git)
#   scripts/device_check.sh build   there (run tool, carry [".device"]): unpacks
#                                   them into .device/root, configures and builds
#                                   into build-device/ (kept for the next call on
#                                   the still-warm machine), runs the tests.
#                                   $OUT: steps.log tests.log configure.log build.log
#   scripts/device_check.sh bench   there, right after build (same machine):
#                                   the samples/s table. $OUT: steps.log
#                                   device_check.md bench.log (every run's
#                                   "cuda graphs:" line and errors; the runs
#                                   themselves stay in build-device/bench: the
#                                   device tool brings back at most 8 files)
#   scripts/device_check.sh         both halves in one call (this CPU machine)
# GANTRY_DEVICE_QUICK=1: only batch 64 and no torch.compile (a rerun in a hurry).
# GANTRY_DEVICE_BUDGET: seconds per half (default 290): a step that would end
# past it is cut short (timeout) and reported so; rows not reached say so.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
debs=(libyaml-cpp-dev libyaml-cpp0.7 libboost1.74-dev libboost-filesystem1.74-dev libboost-filesystem1.74.0
      libboost-system1.74-dev libboost-system1.74.0 libboost-atomic1.74.0 libcli11-dev libstb-dev libstb0
      libgtest-dev zlib1g-dev zlib1g dataset-fashion-mnist)

mode=${1:-all}
case $mode in pack|build|bench|all) ;; *) echo "usage: scripts/device_check.sh [pack|build|bench]" >&2; exit 2 ;; esac

if [[ $mode == pack ]]; then
  set -e
  mkdir -p .device/debs
  (cd .device/debs && apt-get download "${debs[@]}")
  du -sh .device/debs
  echo "device_check: carry .device to the GPU machine (run tool: carry [\".device\"]) and run" \
       "scripts/device_check.sh build, then scripts/device_check.sh bench"
  exit 0
fi

out=${OUT:-$root/device-check-out}
mkdir -p "$out"
budget=${GANTRY_DEVICE_BUDGET:-290}
t_start=$(date +%s)
half=$mode
say() { echo "device_check $half [$(( $(date +%s) - t_start )) s]: $*" | tee -a "$out/steps.log"; }
die() { say "FAILED: $*"; exit 1; }
left() { echo $(( budget - ($(date +%s) - t_start) )); }
# within CAP SECONDS CMD...: CMD under a timeout of CAP seconds or what is left
# of the half's budget, whichever is less; 124 without running when < 10 s are left.
within() {
  local cap=$1 l; shift
  l=$(left); ((l < cap)) && cap=$l
  ((cap >= 10)) || return 124
  timeout "$cap" "$@"
}
prefix=$root/.device/root
arch=x86_64-linux-gnu
python=${PYTHON:-python3}
gpu_name='torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU visible"'

# ---- build: the Debian packages unpacked, gantry built, the tests run -------
unpack() {
  [[ -d .device/debs ]] || die "no .device/debs: run 'scripts/device_check.sh pack' on a Debian 12 machine first"
  rm -rf "$prefix" && mkdir -p "$prefix"
  local deb tmp l t
  for deb in .device/debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$prefix" || die "cannot unpack $deb"
    else  # a .deb is an ar archive holding data.tar.*
      tmp=$(mktemp -d) && (cd "$tmp" && ar x "$root/$deb" && tar -xf data.tar.* -C "$prefix") || die "cannot unpack $deb"
      rm -rf "$tmp"
    fi
  done
  # Some of Debian's .so links are absolute (/lib/...): point them into the prefix.
  for l in "$prefix"/usr/lib/$arch/*.so; do
    t=$(readlink "$l") || continue
    [[ $t == /* ]] && ln -sf "$prefix$t" "$l"
  done
  # The tests and configs read Fashion-MNIST where Debian puts it.
  if [[ ! -e /usr/share/datasets/fashion-mnist ]]; then
    mkdir -p /usr/share/datasets && ln -s "$prefix/usr/share/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist \
      || die "cannot link /usr/share/datasets/fashion-mnist (run as root)"
  fi
  say "unpacked ${#debs[@]} Debian packages into $prefix"
}

build_half() {
  [[ -d .device/debs ]] || die "no .device/debs: run 'scripts/device_check.sh pack' on a Debian 12 machine first"
  say "budget ${budget} s"
  unpack
  export LD_LIBRARY_PATH=$prefix/usr/lib/$arch:$prefix/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local torch_dir
  torch_dir=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch
  [[ -f $torch_dir/TorchConfig.cmake ]] || die "no TorchConfig.cmake under $torch_dir"
  "$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, $gpu_name)" | tee -a "$out/steps.log"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$out/steps.log" 2>&1
  fi
  within 120 cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_dir" -DGANTRY_CUDA=ON \
    -DGANTRY_BUILD_GUI=OFF -DGANTRY_BUILD_BENCH=OFF -DGANTRY_BUILD_TESTS=ON -DGANTRY_TESTS_CORE_ONLY=ON \
    -DGANTRY_REQUIRE_ALL=OFF -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DBoost_DIR="$prefix/usr/lib/$arch/cmake/Boost-1.74.0" -Dyaml-cpp_DIR="$prefix/usr/lib/$arch/cmake/yaml-cpp" \
    -DGTest_DIR="$prefix/usr/lib/$arch/cmake/GTest" -DCLI11_DIR="$prefix/usr/share/cmake/CLI11" \
    -DCMAKE_INCLUDE_PATH="$prefix/usr/include" >"$out/configure.log" 2>&1 \
    || die "configure (see configure.log): $(tail -n 3 "$out/configure.log")"
  within "$budget" ninja -C build-device gantry gan wgan_gp tiny gantry_tests >"$out/build.log" 2>&1 \
    || die "build (exit $?, see build.log): $(grep -m3 error "$out/build.log")"
  say "built $(build-device/bin/gantry --version | head -1)"
  local rc=0
  within "$budget" build-device/bin/gantry_tests --gtest_filter='*_CUDA:Training.*:Checkpoint*.*' >"$out/tests.log" 2>&1 || rc=$?
  ((rc == 124)) && say "tests: cut short by the budget (timeout); tests.log has how far they got"
  say "tests: exit $rc; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out/tests.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]|relative|cuda graphs:|after the failed capture' "$out/tests.log" | sort | uniq -c | tee -a "$out/steps.log"
  say "build half done in $(( $(date +%s) - t_start )) s of its ${budget} s budget (tests exit $rc)"
  return "$rc"
}

# ---- bench: the GAN on the GPU, samples/s -----------------------------------
bench_half() {
  [[ -x build-device/bin/gantry && -d $prefix/usr/lib/$arch ]] \
    || die "no build-device/bin/gantry here: run 'scripts/device_check.sh build' first, on this same (still warm) machine"
  say "budget ${budget} s"
  export LD_LIBRARY_PATH=$prefix/usr/lib/$arch:$prefix/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local gpu
  gpu=$("$python" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
  local batches=(64 1024); [[ ${GANTRY_DEVICE_QUICK:-0} == 1 ]] && batches=(64)
  local steps=1500 warmup=300 table=$out/device_check.md
  {
    echo "# The basic GAN on one GPU: samples/s (steps $warmup..$steps of one run each)"
    echo
    echo "$("$python" -c "import torch; print('torch', torch.__version__, 'on', $gpu_name)"), $(date -u +%F)"
    echo
    echo "| what | batch | samples/s | vs Python eager |"
    echo "|---|---|---|---|"
  } >"$table"
  gantry_rate() {  # BATCH PRECISION GRAPHS -> samples/s, or why not
    local dir=$root/build-device/bench/gantry-$1-$2-graphs-$3 rc=0  # not under $OUT: at most 8 files come back
    rm -rf "$dir" && mkdir -p "$dir"
    (cd "$dir" && within 120 "$root/build-device/bin/gantry" train "$root/configs/gan_fashion_mnist.yaml" \
       trainer.accelerator=cuda trainer.precision="$2" trainer.cuda_graphs="$3" \
       data.batch_size="$1" trainer.max_steps=$steps trainer.max_epochs=-1 \
       trainer.log_every_n_steps=100 trainer.image_every_n_steps=0 trainer.progress=none monitor.enabled=false \
       >"$dir/train.log" 2>&1) || rc=$?
    { echo "== gantry batch $1 precision $2 graphs $3: exit $rc"; grep -E "cuda graphs:|error" "$dir/train.log"
      ((rc == 0)) || tail -n 5 "$dir/train.log"; } >>"$out/bench.log"
    ((rc == 124)) && { echo "cut short (budget)"; return; }
    ((rc == 0)) || { echo "failed"; return; }
    local sps; sps=$("$python" "$root/bench/gantry_steps_per_s.py" "$dir"/runs/gan_fashion_mnist/latest/metrics.csv $warmup)
    rm -rf "$dir/runs"  # checkpoints: nothing to bring back
    "$python" -c "print(f'{$sps * $1:.0f}')"
  }
  py_rate() {  # SCRIPT BATCH ARGS... -> samples/s, or why not
    local script=$1 batch=$2 r rc=0; shift 2
    r=$(within 180 "$python" "$root/bench/$script" --device cuda --batch "$batch" --steps $steps --warmup $warmup "$@" \
      2>>"$out/bench.log" | sed -n 's/^samples_per_s //p' | tail -1) || rc=$?
    ((rc == 124)) && { echo "cut short (budget)"; return; }
    echo "${r:-failed}"
  }
  local b eager
  for b in "${batches[@]}"; do
    row() {  # WHAT RATE
      local r=$2
      if [[ $r =~ ^[0-9.]+$ && $eager =~ ^[0-9.]+$ ]]; then r="$r | $("$python" -c "print(f'{$r / $eager:.2f}x')")"
      else r="${r:-failed} | -"; fi
      echo "| $1 | $b | $r |" >>"$table"
    }
    if ((!gpu)); then
      for w in "Python torch, eager" "Python torch, bf16 autocast" "Python torch, torch.compile" "Lightning 32-true" \
               "gantry fp32" "gantry bf16-mixed" "gantry fp32, CUDA graphs" "gantry bf16-mixed, CUDA graphs"; do
        eager="" row "$w" "not run (no GPU visible)"
      done
      say "batch $b: not run (no GPU visible)"
      continue
    fi
    eager=$(py_rate python_gan.py "$b")
    row "Python torch, eager" "$eager"
    row "Python torch, bf16 autocast" "$(py_rate python_gan.py "$b" --precision bf16-mixed)"
    [[ ${GANTRY_DEVICE_QUICK:-0} == 1 ]] || row "Python torch, torch.compile" "$(py_rate python_gan.py "$b" --compile)"
    row "Lightning 32-true" "$(py_rate lightning_gan.py "$b")"
    row "gantry fp32" "$(gantry_rate "$b" 32 false)"
    row "gantry bf16-mixed" "$(gantry_rate "$b" bf16-mixed false)"
    row "gantry fp32, CUDA graphs" "$(gantry_rate "$b" 32 true)"
    row "gantry bf16-mixed, CUDA graphs" "$(gantry_rate "$b" bf16-mixed true)"
    say "batch $b timed"
  done
  # Whether the graphed runs captured their step, or fell back and why.
  grep -h "cuda graphs:" "$root"/build-device/bench/gantry-*/train.log 2>/dev/null | sort | uniq -c | tee -a "$out/steps.log"
  tee -a "$out/steps.log" <"$table"
  say "bench half done in $(( $(date +%s) - t_start )) s of its ${budget} s budget"
}

case $mode in
  build) build_half ;;
  bench) bench_half ;;
  all)
    half=build; build_half; rc=$?
    half=bench; t_start=$(date +%s); bench_half
    exit "$rc" ;;
esac
