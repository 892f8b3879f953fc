#!/usr/bin/env bash
# Two ranks on one host that do not see the same /dev/shm (rank 1 in its own
# mount namespace with a private tmpfs there, as in some containers): the
# shared-memory gradient exchange cannot be set up, both ranks fall back to
# Gloo together, and the job trains to the end; trainer.grad_transport=shm
# instead is one clear error. Nothing is left in /dev/shm.
#   shm_fallback_test.sh GANTRY CONFIG WORK_DIR
set -uo pipefail
gantry=$(realpath "$1") config=$(realpath "$2") work=$3
if ! unshare -m true 2>/dev/null; then
  echo "SKIPPED: cannot make a mount namespace here (needs root and util-linux's unshare)"
  exit 0
fi
rm -rf "$work" && mkdir -p "$work"
cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
common=(trainer.devices=2 trainer.max_steps=30 trainer.threads=1 trainer.dist_timeout=30 trainer.progress=none)
run() {  # port extra-args... ; rank 0 here, rank 1 behind a private /dev/shm
  local port=$1; shift
  env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$gantry" train "$config" "${common[@]}" "$@" > r0.log 2>&1 &
  local r0=$!
  env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    unshare -m sh -c 'mount -t tmpfs tmpfs /dev/shm && exec "$0" "$@"' "$gantry" train "$config" "${common[@]}" "$@" > r1.log 2>&1
  rc1=$?
  wait $r0; rc0=$?
}

run 29891
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "auto: exit codes $rc0/$rc1; rank 0: $(tail -3 r0.log); rank 1: $(tail -3 r1.log)"
grep -q "gradients averaged through Gloo" r0.log || fail "rank 0 did not fall back: $(cat r0.log)"
grep -q "cannot open /dev/shm/gantry-.*gradients are averaged with Gloo instead" r1.log || fail "rank 1 said: $(cat r1.log)"
grep -q "done at step 30" r0.log || fail "rank 0 did not finish: $(tail -3 r0.log)"
echo "auto: $(grep -h 'gradients are averaged with Gloo instead' r1.log | sed 's/^.*: \(cannot open\)/\1/')"

run 29892 trainer.grad_transport=shm
[[ $rc0 -ne 0 && $rc1 -ne 0 ]] || fail "shm forced: exit codes $rc0/$rc1"
grep -q "trainer.grad_transport=shm, but the ranks cannot share memory here" r0.log || fail "rank 0 said: $(tail -3 r0.log)"
echo "shm forced: $(grep -h 'gantry: error' r0.log)"

for f in /dev/shm/gantry-*; do
  [[ -e $f ]] || continue
  pid=${f#/dev/shm/gantry-}; pid=${pid%%-*}
  kill -0 "$pid" 2>/dev/null || fail "$f was left behind"
done
echo PASS
