#!/usr/bin/env bash
# The 128-GPU layout, emulated: NODES x TASKS ranks of the basic GAN as one
# SLURM job (`gantry submit configs/gan_128gpu.yaml`, CPU instead of GPUs) on
# a cluster of NODES emulated nodes, each its own network namespace, address
# and slurmd (tests/slurm/cluster.sh ... netns). What it runs, in order:
#   train     the job trains, is preempted (USR1) mid-run, requeues itself,
#             resumes from its checkpoint and ends with the replicas
#             bit-identical; every metrics step once
#   partition one node's link goes down mid-run: the other ranks name that
#             node and its ranks and end within trainer.dist_timeout, and the
#             cut-off ranks end too
#   resize    the checkpoint of `train` resumes on 1 node (TASKS ranks,
#             data.keep_batch=global)
# and with FULL=1 (bench/slurm_scale.sh) also:
#   dead      one node's ranks are killed (SIGKILL) mid-run: named, the job ends
#   slow      one node's link is slowed (tbf: 50 Mbit/s, 200 ms of queue): the
#             step times before and after
#   half      the checkpoint of `train` resumes at NODES/2 x TASKS
# Prints a table of what it measured at the end.
#   scale_test.sh GANTRY SOURCE_DIR WORK_DIR [NODES=8] [TASKS=4] [STEPS=12]
set -euo pipefail
trap 'echo "scale_test: FAILED at line $LINENO: $BASH_COMMAND"' ERR
gantry=$1 src=$2 work=$3 nodes=${4:-8} tasks=${5:-4} steps=${6:-12}
full=${FULL:-0}
# trainer.dist_timeout of the fault runs. It bounds the rendezvous too: on
# this 2-core host the last of 128 ranks arrives ~50 s after the first.
timeout_s=20
((nodes * tasks > 32)) && timeout_s=120
ranks=$((nodes * tasks))
rm -rf "$work" && mkdir -p "$work"
work=$(cd "$work" && pwd)
cluster=$work/cluster
if ! ip netns add gantry_probe$$ 2>/dev/null; then
  echo "SKIPPED: cannot create network namespaces here (needs root and iproute2)"
  exit 0
fi
ip netns del gantry_probe$$
trap '"$src/tests/slurm/cluster.sh" stop "$cluster" >/dev/null 2>&1 || true' EXIT
"$src/tests/slurm/cluster.sh" start "$cluster" "$nodes" "$tasks" netns
in=$cluster/in ctl=$(cat "$cluster/ctl_netns")
cd "$work"
# The first line of its input, reading all of it: under pipefail, `| head -1`
# fails the pipeline whenever the writer gets SIGPIPE (a long log).
first() { awk 'NR == 1'; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
table=()
row() { table+=("$(printf '| %s | %s |' "$1" "$2")"); echo "scale_test: $1: $2"; }
fail() { echo "scale_test: FAILED: $*"; exit 1; }

common=(trainer.devices="$tasks" trainer.accelerator=cpu slurm.cpus_per_task=1
  slurm.partition= slurm.mem= data.batch_size=8 trainer.threads=1 trainer.max_epochs=-1
  trainer.image_every_n_steps=0 trainer.log_every_n_steps=1 monitor.enabled=false)
submit() {  # out_dir, overrides...: prints the job id
  local out=$1
  shift
  "$in" "$gantry" submit "$src/configs/gan_128gpu.yaml" "${common[@]}" trainer.num_nodes="${job_nodes:-$nodes}" \
    trainer.out_dir="$out" "$@" |
    sed -n 's/^submitted job \([0-9]*\).*/\1/p'
}
state() { "$in" scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | first; }
wait_end() {  # job [seconds]
  local end=$(($(date +%s) + ${2:-600})) st
  while (($(date +%s) < end)); do
    st=$(state "$1" JobState)
    [[ $st == COMPLETED || $st == FAILED || $st == CANCELLED || $st == TIMEOUT ]] && return 0
    sleep 0.25
  done
  return 1
}
rows() { local f=$1/gan_128gpu/latest/metrics.csv; [[ -s $f ]] && echo $(($(wc -l < "$f") - 1)) || echo 0; }
wait_rows() {  # out_dir rows [seconds]
  local end=$(($(date +%s) + ${3:-600}))
  while (($(rows "$1") < $2)); do
    (($(date +%s) < end)) || return 1
    sleep 0.2
  done
}
node_ns() { sed -n "${1}p" "$cluster/nodes" | cut -d' ' -f2; }
node_name() { sed -n "${1}p" "$cluster/nodes" | cut -d' ' -f1; }
gantry_pids() { ip netns pids "$1" | xargs -r ps -o pid=,comm= -p | awk '$2 == "gantry" { print $1 }'; }
step_ms() {  # out_dir first last: mean wall time of a step between two metrics rows
  awk -F, -v a="$2" -v b="$3" 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == "wall_time") c = i }
    NR > 1 && $1 == a { t0 = $c } NR > 1 && $1 == b { t1 = $c }
    END { if (c && t1 > t0) printf "%.0f", 1000 * (t1 - t0) / (b - a); else print "?" }' "$1/gan_128gpu/latest/metrics.csv"
}

# ONLY=slow or ONLY=partition (bench/slurm_scale.sh) runs that fault alone.
only=${ONLY:-}
if [[ -z $only || $only == partition ]]; then
 if [[ -z $only ]]; then
  # --- train: preempted, requeued, resumed, bit-identical ---------------------
  t0=$(now)
  job=$(submit "$work/train" trainer.max_steps="$steps" checkpoint.every_n_steps=100000 trainer.dist_timeout=120)
  [[ -n $job ]] || fail "gantry submit printed no job id"
  wait_rows "$work/train" 1 || fail "no training step within 600 s ($(cat "$work"/train/gan_128gpu/slurm-*.out | tail -5))"
  row "$ranks ranks: submit to the first step" "$(since "$t0") s"
  wait_rows "$work/train" $((steps / 2)) || fail "training stalled"
  "$in" scancel --signal=USR1 "$job"
  wait_end "$job" 900 || fail "job $job did not end"
  log=$(ls "$work"/train/gan_128gpu/slurm-*.out)
  [[ $(state "$job" JobState) == COMPLETED && $(state "$job" Restarts) == 1 ]] ||
    { tail -40 "$log"; fail "job $job: $(state "$job" JobState), restarts $(state "$job" Restarts)"; }
  grep -q "on $(sed -n 's/^NodeName=\([a-z]*\).*/\1/p' "$cluster/slurm.conf" | first)\[" "$log" || fail "no node list in $log"
  grep -q "requeued SLURM job $job" "$log" || fail "no requeue line"
  grep -q "resume: .*checkpoints/step_" "$log" || fail "no resume line"
  grep -q "done at step $steps" "$log" || fail "not done at step $steps"
  grep -q "replicas bit-identical across $ranks ranks" "$log" || fail "no bit-identical replicas line"
  cut -d, -f1 "$work"/train/gan_128gpu/latest/metrics.csv | tail -n +2 > "$work/steps.txt"
  sort -n -c -u "$work/steps.txt" || fail "a metrics step twice"
  for s in $(seq "$steps"); do grep -qx "$s" "$work/steps.txt" || fail "metrics step $s missing"; done
  resumed_at=$(sed -n 's/.*resume: .*checkpoints\/step_0*\([0-9]*\)\.ckpt.*/\1/p' "$log" | first)
  row "preempted (USR1), requeued, resumed" "at step $resumed_at, done at step $steps in $(since "$t0") s, replicas bit-identical"
  ckpt=$(ls "$work"/train/gan_128gpu/latest/checkpoints/step_*.ckpt | tail -1)
 fi

  # A run that trains until a fault ends it, on node N: sets first/last (its
  # ranks), name, ns, job and log once it has trained 3 steps.
  fault_run() {  # label node
    local node=$2
    first=$(((node - 1) * tasks)) last=$((node * tasks - 1))
    name=$(node_name "$node") ns=$(node_ns "$node")
    job=$(submit "$work/$1" trainer.max_steps=100000 checkpoint.every_n_steps=100000 trainer.dist_timeout=$timeout_s)
    wait_rows "$work/$1" 3 || fail "$1 run: no training"
    log=$(ls "$work/$1"/gan_128gpu/slurm-*.out)
    t0=$(now)
  }

  # --- partition: one node's link down ----------------------------------------
  fault_run part $(((nodes + 1) / 2))
  ip -n "$ctl" link set "v$name" down
  named="$name (ranks $first-$last, all $tasks of its ranks) stopped responding"
  ((tasks < 3)) && named="$name (ranks $first, $last, all $tasks of its ranks) stopped responding"
  end=$(($(date +%s) + 2 * timeout_s + 40))
  until grep -qF "$named" "$log"; do
    (($(date +%s) < end)) || { tail -20 "$log"; fail "the cut-off node was not named: '$named'"; }
    sleep 0.2
  done
  t_named=$(since "$t0")
  # Every rank ends: the others with that line, the cut-off ones on their own
  # (their rank 0 is out of reach) within the timeout and a little (they once
  # took twice the timeout: a verdict's store request blocked on the dead link).
  end=$((${t0%.*} + timeout_s + 15))
  alive=1
  while ((alive)) && (($(date +%s) < end)); do
    alive=0
    for i in $(seq "$nodes"); do [[ -n $(gantry_pids "$(node_ns "$i")") ]] && alive=1; done
    sleep 0.2
  done
  t_ended=$(since "$t0")
  ((alive == 0)) || { ps aux | grep "[g]antry train" | head; fail "ranks still running $t_ended s after the cut"; }
  grep -m1 -F "$named" "$log"
  ip -n "$ctl" link set "v$name" up
  "$in" scancel "$job" 2>/dev/null || true
  wait_end "$job" 120 || true
  "$in" scontrol update nodename="$name" state=resume 2>/dev/null || true
  row "partition ($name's link down, dist_timeout $timeout_s s)" "named after $t_named s; every rank ended after $t_ended s"

  # --- resize: the checkpoint at 1 node -----------------------------------------
  resume_at() {  # label nodes
    local n=$2 out=$work/resize-$2 t0 job log
    t0=$(now)
    job=$(job_nodes=$n submit "$out" trainer.max_steps=$((steps + 2)) data.keep_batch=global \
      trainer.resume="$ckpt" checkpoint.every_n_steps=100000 trainer.dist_timeout=120)
    wait_end "$job" 900 || fail "resize to $n nodes: job did not end"
    log=$(ls "$work"/train/gan_128gpu/slurm-"$job".out 2>/dev/null || ls "$out"/gan_128gpu/slurm-*.out)
    grep -q "resize: $ranks ranks -> $((n * tasks)): data.keep_batch global keeps the global batch $((8 * ranks))" "$log" ||
      { tail -20 "$log"; fail "no resize line at $n nodes"; }
    grep -q "resize: epoch 0 goes on from sample" "$log" || fail "no resize sample line"
    grep -q "done at step $((steps + 2))" "$log" || { tail -20 "$log"; fail "resize to $n nodes: not done"; }
    row "$1: resume at $((n * tasks)) ranks" "$(grep -o "data.batch_size [0-9]* -> [0-9]* per rank" "$log" | first); $(grep -o "epoch 0 goes on from sample [0-9]* of [0-9]*" "$log" | first); done in $(since "$t0") s"
  }
  [[ -n $only ]] || resume_at resize 1
fi

if ((full)) && [[ -z $only ]]; then
  ((nodes >= 4)) && resume_at half $((nodes / 2))
  # --- dead: one node's ranks killed ------------------------------------------
  fault_run dead $((nodes / 4 + 1))
  gantry_pids "$ns" | xargs -r kill -9
  wait_end "$job" $((timeout_s + 60)) || fail "dead node: the job did not end"
  t_end=$(since "$t0")
  line=$(grep -m1 -o "[^:]*stopped responding[^)]*)" "$log" || grep -m1 "Connection closed\|exited" "$log" || true)
  row "dead node ($name's $tasks ranks SIGKILLed)" "job ended after $t_end s ($(state "$job" JobState)); first verdict: ${line:-none}"
  "$in" scontrol update nodename="$name" state=resume 2>/dev/null || true
fi
if { ((full)) && [[ -z $only ]]; } || [[ $only == slow ]]; then
  # --- slow: one node's link slowed -------------------------------------------
  slow_node=$((nodes - 1))
  name=$(node_name "$slow_node")
  job=$(submit "$work/slow" trainer.max_steps=100000 checkpoint.every_n_steps=100000 trainer.dist_timeout=120 \
    trainer.straggler_intervals=2)
  wait_rows "$work/slow" 8 || fail "slow-link run: no training"
  before=$(step_ms "$work/slow" 3 8)
  at=$(rows "$work/slow")
  nsenter --net=/run/netns/"$ctl" tc qdisc add dev "v$name" root tbf rate 50mbit burst 32kbit latency 200ms
  wait_rows "$work/slow" $((at + 8)) 900 || fail "slow-link run stalled"
  after=$(step_ms "$work/slow" $((at + 2)) $((at + 8)))
  "$in" scancel "$job"
  wait_end "$job" 120 || true
  log=$(ls "$work"/slow/gan_128gpu/slurm-*.out)
  strag=$(grep -m1 -o "straggler: .*" "$log" || echo "no straggler named")
  row "slow link ($name: tbf 50 Mbit/s, 200 ms)" "step ${before} ms -> ${after} ms; $strag"
fi

echo
echo "| $nodes emulated nodes x $tasks ranks | |"
echo "|---|---|"
printf '%s\n' "${table[@]}"
echo "scale_test: OK"
