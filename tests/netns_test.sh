#!/usr/bin/env bash
# Two "nodes" in separate network namespaces, joined by a veth pair, each with
# its own address (10.200.77.1 and .2): rank 0 in one, rank 1 in the other,
# rendezvous over that link and train. Only these namespaces are addressed.
#   netns_test.sh GANTRY CONFIG WORK_DIR
set -uo pipefail
gantry=$1 config=$2 work=$3
a=gantry_ns_a$$ b=gantry_ns_b$$
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; }
trap cleanup EXIT
if ! ip netns add "$a" 2>/dev/null || ! ip netns add "$b" 2>/dev/null; then
  echo "SKIPPED: cannot create network namespaces here (needs root and iproute2)"
  exit 0
fi
set -e
ip link add "va$$" type veth peer name "vb$$"
ip link set "va$$" netns "$a"
ip link set "vb$$" netns "$b"
ip -n "$a" addr add 10.200.77.1/24 dev "va$$"
ip -n "$b" addr add 10.200.77.2/24 dev "vb$$"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "va$$" up
ip -n "$b" link set "vb$$" up

rm -rf "$work" && mkdir -p "$work/a" "$work/b"
common=(trainer.num_nodes=2 trainer.devices=1 trainer.max_steps=30 trainer.threads=1 trainer.dist_timeout=30)
run() {  # ns rank dir
  (cd "$3" && exec nsenter --net=/run/netns/"$1" env RANK="$2" WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
     MASTER_ADDR=10.200.77.1 MASTER_PORT=29555 "$gantry" train "$config" "${common[@]}") > "$3/log" 2>&1
}
run "$a" 0 "$work/a" & p0=$!
run "$b" 1 "$work/b" & p1=$!
rc0=0 rc1=0
wait $p0 || rc0=$?
wait $p1 || rc1=$?
ended=()
echo "--- rank 0 (10.200.77.1)"; cat "$work/a/log"
echo "--- rank 1 (10.200.77.2)"; cat "$work/b/log"
[[ $rc0 == 0 && $rc1 == 0 ]] || { echo "FAILED: exit codes $rc0 $rc1"; exit 1; }
grep -q "replicas bit-identical across 2 ranks" "$work/a/log"
grep -q "rank 1/2 (node 1, local 0)" "$work/b/log"

# A partition: rank 1's link goes down mid-run. Both ranks end within the
# timeout (10 s) and a little: rank 0 names rank 1's node, rank 1 says its
# heartbeat to rank 0's store went unanswered. Rank 1 once took twice the
# timeout: its verdict's first store request blocked for the socket's timeout.
timeout_s=10
common=(trainer.num_nodes=2 trainer.devices=1 trainer.max_steps=100000 trainer.threads=1
  trainer.dist_timeout=$timeout_s data.batch_size=8 trainer.log_every_n_steps=1)
rm -rf "$work" && mkdir -p "$work/a" "$work/b"
run "$a" 0 "$work/a" & p0=$!
run "$b" 1 "$work/b" & p1=$!
for _ in $(seq 600); do
  [[ $(ls "$work"/a/runs/gan_fashion_mnist/*/metrics.csv 2>/dev/null) ]] &&
    (($(cat "$work"/a/runs/gan_fashion_mnist/*/metrics.csv | wc -l) >= 4)) && break
  sleep 0.1
done
ms() { echo $(($(date +%s%N) / 1000000)); }
cut=$(ms)
ip -n "$b" link set "vb$$" down
for p in $p0 $p1; do
  wait $p || true
  ended+=($(($(ms) - cut)))
done
echo "--- partition: rank 0 ended after ${ended[0]} ms, rank 1 after ${ended[1]} ms (dist_timeout $timeout_s s)"
tail -n 2 "$work/a/log" "$work/b/log"
for t in "${ended[@]}"; do
  ((t < (timeout_s + 6) * 1000)) || { echo "FAILED: a rank ended $t ms after the cut (dist_timeout $timeout_s s)"; exit 1; }
done
grep -q "gantry: error: rank 0: .*rank 1.*stopped responding" "$work/a/log" ||
  { echo "FAILED: rank 0 did not name rank 1"; exit 1; }
grep -q "gantry: error: rank 1: .*has not answered this rank's heartbeat" "$work/b/log" ||
  { echo "FAILED: rank 1 did not say rank 0's store went unanswered"; exit 1; }
echo "netns_test: OK"
