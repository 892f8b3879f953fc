#!/usr/bin/env bash
# README command 2: install what is missing, build, and run every test.
# Then checks that what ran is the whole suite: every area is there (a part
# left out of the build would silently drop its tests) and nothing was skipped.
# Extra arguments go to ctest (e.g. -R Config); the whole-suite check is then off.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# The tests of each area that are not GoogleTest cases, by name, and the
# fewest GoogleTest cases the suite has (label `core`). A new test script goes here.
required=(
  sdk:sdk_out_of_tree_plugin
  slurm:slurm_cluster_start slurm:slurm_submit_one_node slurm:slurm_submit_two_node
  slurm:slurm_preempt_requeue_resume slurm:slurm_cluster_stop
  distributed:netns_two_nodes distributed:shm_fallback_to_gloo
  python:python_loads_checkpoint
  fuzz:fuzz_wire_decoder
  gui:monitor_qtest gui:monitor_xvfb gui:view_xvfb
)
min_core=127

if (($# == 0)); then
  missing=()
  for entry in "${required[@]}"; do
    label=${entry%%:*} name=${entry#*:}
    listed=$(ctest --preset dev -N -L "^${label}\$")
    grep -qE "Test +#[0-9]+: ${name}\$" <<<"$listed" || missing+=("$name ($label)")
  done
  core=$(ctest --preset dev -N -L '^core$' | sed -n 's/^Total Tests: //p')
  ((core >= min_core)) || missing+=("GoogleTest cases: $core of at least $min_core (core)")
  if ((${#missing[@]})); then
    echo "test.sh: the suite is incomplete, these tests are not in the build: ${missing[*]}" >&2
    echo "test.sh: configure output says which part was left out (build/CMakeCache.txt, cmake --preset dev)" >&2
    exit 1
  fi
  echo "test.sh: the whole suite is there: $core GoogleTest cases and ${#required[@]} area tests (sdk, slurm, distributed, python, fuzz, gui)"
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
ctest --preset dev "$@" 2>&1 | tee "$log" || status=$?
if grep -qE '\*\*\*Skipped|Not Run' "$log"; then
  echo "test.sh: some tests were skipped or not run (see above): the suite must run whole here (as root)" >&2
  ((status)) || status=1
fi
exit "$status"
