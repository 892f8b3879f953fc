#!/usr/bin/env bash
# README command 2: install what is missing, build, and run every test, against
# both supported LibTorch builds: Debian's 1.13 (`dev` preset, build/) and 2.x
# from the torch wheel (`cuda` preset, build-cuda/: a CUDA LibTorch on a machine
# without a GPU runs the CPU tests; *_CUDA tests are compiled and filtered out).
# Then checks that what ran is the whole suite: every area is there (a part
# left out of the build would silently drop its tests) and nothing was skipped.
#   GANTRY_TEST_PRESETS="dev" scripts/test.sh    only one build
# Extra arguments go to ctest (e.g. -R Config); the whole-suite check is then off.
set -euo pipefail
cd "$(dirname "$0")/.."
presets=(${GANTRY_TEST_PRESETS:-dev cuda})
for preset in "${presets[@]}"; do
  GANTRY_PRESET=$preset scripts/setup.sh
  # Once setup.sh has installed clang-format: an unformatted file fails here,
  # before the second build.
  [[ -n "${formatted:-}" ]] || { scripts/format.sh --check; formatted=1; }
done

# The tests of each area that are not GoogleTest cases, by name, and the
# fewest GoogleTest cases the suite has (label `core`). A new test script goes here.
required=(
  sdk:sdk_out_of_tree_plugin
  slurm:slurm_cluster_start slurm:slurm_submit_one_node slurm:slurm_submit_two_node
  slurm:slurm_preempt_requeue_resume slurm:slurm_sweep_array slurm:slurm_cluster_stop
  distributed:netns_two_nodes distributed:shm_fallback_to_gloo
  python:python_loads_checkpoint
  fuzz:fuzz_wire_decoder
  gui:monitor_qtest gui:monitor_xvfb gui:view_xvfb
)
required_cuda=(sdk:plugin_of_the_other_libtorch python:tensorboard_reads_gantry_events python:lightning_loads_checkpoint)
required_dev=(slurm:slurm_scale_8x4)
min_core=129

check_whole() {  # preset
  local preset=$1 missing=() entry label name listed core
  local want=("${required[@]}")
  [[ $preset == cuda ]] && want+=("${required_cuda[@]}")
  [[ $preset == dev ]] && want+=("${required_dev[@]}")
  for entry in "${want[@]}"; do
    label=${entry%%:*} name=${entry#*:}
    listed=$(ctest --preset "$preset" -N -L "^${label}\$")
    grep -qE "Test +#[0-9]+: ${name}\$" <<<"$listed" || missing+=("$name ($label)")
  done
  core=$(ctest --preset "$preset" -N -L '^core$' | sed -n 's/^Total Tests: //p')
  ((core >= min_core)) || missing+=("GoogleTest cases: $core of at least $min_core (core)")
  if ((${#missing[@]})); then
    echo "test.sh [$preset]: the suite is incomplete, these tests are not in the build: ${missing[*]}" >&2
    echo "test.sh [$preset]: configure output says which part was left out (cmake --preset $preset)" >&2
    return 1
  fi
  echo "test.sh [$preset]: the whole suite is there: $core GoogleTest cases and ${#want[@]} area tests"
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
for preset in "${presets[@]}"; do
  if (($# == 0)); then check_whole "$preset" || { status=1; continue; }; fi
  dir=build; [[ $preset == cuda ]] && dir=build-cuda
  echo "test.sh [$preset]: $("$dir/bin/gantry" --version | head -1)"
  one=0
  ctest --preset "$preset" "$@" 2>&1 | tee "$log" || one=$?
  # Only the GPU tests (*_CUDA, in the cuda build) may skip: this machine may have no GPU.
  if grep -E '\*\*\*Skipped|Not Run' "$log" | grep -vqE '_CUDA[ .]+\*\*\*Skipped'; then
    echo "test.sh [$preset]: some tests were skipped or not run (see above): the suite must run whole here (as root)" >&2
    ((one)) || one=1
  fi
  gpu_skipped=$(grep -cE '_CUDA[ .]+\*\*\*Skipped' "$log" || true)
  ((gpu_skipped == 0)) || echo "test.sh [$preset]: $gpu_skipped *_CUDA tests skipped: no GPU on this machine (scripts/device_check.sh runs them on one)"
  ((one)) && status=1
  echo "test.sh [$preset]: $( ((one)) && echo FAILED || echo passed)"
done
exit "$status"
