#!/usr/bin/env bash
# A real single-host SLURM cluster (slurm-wlm 22.05 + munge) for the tests,
# with all state under one folder, a private munge key and socket, and
# non-default ports: nothing in /etc is touched.
#   tests/slurm/cluster.sh start DIR [NODES=2] [CPUS=2] [lo|netns]
#   tests/slurm/cluster.sh stop DIR
# lo (the default): every slurmd on 127.0.0.1, nodes node1..nodeN; clients
# need SLURM_CONF=DIR/slurm.conf (DIR/env has the exports).
# netns: each node its own network namespace with its own address
# (10.201.0.11, .12, ...) on a bridge in the controller's namespace
# (10.201.0.1), as separate machines on one switch; nodes node1..nodeN, or
# node01..node32 with 10 or more (SLURM's node[01-32]). The root namespace has
# no address there: run clients (sbatch, gantry submit, scontrol) with
# `DIR/in CMD...`, which enters the controller's namespace. DIR/nodes lists
# "name namespace address" a line: `ip netns pids NS` are a node's processes,
# and its link is `ip -n CTL link ... dev v<name>` (DIR/ctl_netns is CTL).
set -euo pipefail
cmd=$1 dir=$2 nodes=${3:-2} cpus=${4:-2} net=${5:-lo}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

stop() {
  for f in "$dir"/run/*.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
  done
  for i in $(seq 50); do
    alive=0
    for f in "$dir"/run/*.pid; do [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for f in "$dir"/run/*.pid; do [[ -f $f ]] && kill -9 "$(cat "$f")" 2>/dev/null || true; done
  rm -f "$dir"/run/*.pid
  # netns: what still runs in a node's namespace (a job's ranks), then the namespaces.
  if [[ -f $dir/netns ]]; then
    while read -r ns; do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
    done < "$dir/netns"
    while read -r ns; do ip netns del "$ns" 2>/dev/null || true; done < "$dir/netns"
    rm -f "$dir/netns"
  fi
}

if [[ $cmd == stop ]]; then
  stop
  exit 0
fi

command -v slurmctld >/dev/null || { echo "cluster.sh: slurm-wlm is not installed (scripts/setup.sh installs it)"; exit 1; }
stop
rm -rf "$dir"/{spool,state,run,log}
mkdir -p "$dir"/{spool,state,run,log}
host=$(hostname -s)
base=$((17000 + RANDOM % 2000 * 4))
user=$(id -un)
width=1
((nodes >= 10)) && width=${#nodes}
name_of() { printf "node%0${width}d" "$1"; }
ctl_addr=127.0.0.1
run_in() { "$@"; }        # lo: every daemon in this namespace
run_node() { shift; "$@"; }
if [[ $net == netns ]]; then
  ((nodes <= 240)) || { echo "cluster.sh: netns: at most 240 nodes"; exit 1; }
  tag=$(printf %s "$dir" | cksum | cut -c1-6)
  ctl=gctl$tag
  : > "$dir/netns"
  ip netns del "$ctl" 2>/dev/null || true
  ip netns add "$ctl" && echo "$ctl" >> "$dir/netns"
  ip -n "$ctl" link set lo up
  ip -n "$ctl" link add br0 type bridge
  ip -n "$ctl" addr add 10.201.0.1/24 dev br0
  ip -n "$ctl" link set br0 up
  : > "$dir/nodes"
  for i in $(seq "$nodes"); do
    n=$(name_of "$i") ns=gn$tag-$i addr=10.201.0.$((10 + i))
    ip netns del "$ns" 2>/dev/null || true
    ip netns add "$ns" && echo "$ns" >> "$dir/netns"
    ip -n "$ns" link set lo up
    ip -n "$ns" link add eth0 type veth peer name "v$n" netns "$ctl"
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ctl" link set "v$n" master br0 up
    echo "$n $ns $addr" >> "$dir/nodes"
  done
  # Every address's MAC, fixed in every namespace: no ARP. With 128 ranks
  # opening Gloo's full mesh at once on 2 cores, an ARP request went
  # unanswered in time and a connect failed with "No route to host" (Gloo
  # does not retry it); a cluster's hosts have their neighbours resolved.
  mac() { ip -n "$1" -br link show "$2" | awk '{ print $3 }'; }
  neigh=("neigh replace 10.201.0.1 lladdr $(mac "$ctl" br0) dev eth0 nud permanent")
  while read -r n ns addr; do
    neigh+=("neigh replace $addr lladdr $(mac "$ns" eth0) dev eth0 nud permanent")
  done < "$dir/nodes"
  while read -r n ns addr; do
    printf '%s\n' "${neigh[@]}" | grep -v " $addr " | ip -n "$ns" -batch -
  done < "$dir/nodes"
  printf '%s\n' "${neigh[@]:1}" | sed 's/dev eth0/dev br0/' | ip -n "$ctl" -batch -
  echo "$ctl" > "$dir/ctl_netns"
  ctl_addr=10.201.0.1
  run_in() { nsenter --net=/run/netns/"$ctl" "$@"; }
  run_node() { nsenter --net=/run/netns/"gn$tag-$1" "${@:2}"; }
  printf '#!/bin/sh\n# runs a client in the controller namespace of the cluster in %s\nSLURM_CONF=%s/slurm.conf exec nsenter --net=/run/netns/%s "$@"\n' \
    "$dir" "$dir" "$ctl" > "$dir/in"
else
  printf '#!/bin/sh\nSLURM_CONF=%s/slurm.conf exec "$@"\n' "$dir" > "$dir/in"
fi
chmod +x "$dir/in"

# munge: private key and socket
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 600 "$dir/munge.key"
munged --force --socket "$dir/run/munge.socket" --key-file "$dir/munge.key" \
  --pid-file "$dir/run/munged.pid" --log-file "$dir/log/munged.log" --seed-file "$dir/state/munge.seed"

{
  echo "ClusterName=gantrytest"
  echo "SlurmctldHost=$host($ctl_addr)"
  echo "SlurmctldPort=$base"
  echo "SlurmdPort=$((base + 1))"
  echo "SlurmUser=$user"
  echo "SlurmdUser=root"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "AuthInfo=socket=$dir/run/munge.socket,cred_expire=10"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_Core"
  echo "ReturnToService=2"
  echo "SlurmdParameters=config_overrides"  # nodes of more CPUs than this machine has: emulated
  echo "StateSaveLocation=$dir/state"
  echo "SlurmdSpoolDir=$dir/spool/%n"
  echo "SlurmctldPidFile=$dir/run/slurmctld.pid"
  echo "SlurmdPidFile=$dir/run/slurmd-%n.pid"
  echo "SlurmctldLogFile=$dir/log/slurmctld.log"
  echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
  echo "KillWait=5"
  # A step's processes must be gone this long after SIGKILL, or the node is
  # drained ("Kill task failed"). The default 60 s was not enough for 128
  # ranks on this 2-core host at a requeue: node01 and node26 were drained
  # and the requeued job waited for them.
  echo "UnkillableStepTimeout=300"
  echo "MpiDefault=none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "SchedulerType=sched/backfill"
  echo "InactiveLimit=0"
  echo "MinJobAge=300"
  for i in $(seq "$nodes"); do
    addr=127.0.0.1
    [[ $net == netns ]] && addr=10.201.0.$((10 + i))
    echo "NodeName=$(name_of "$i") NodeAddr=$addr CPUs=$cpus RealMemory=4000 Port=$((base + 1 + i)) State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} > "$dir/slurm.conf"
echo "export SLURM_CONF=$dir/slurm.conf" > "$dir/env"

export SLURM_CONF=$dir/slurm.conf
run_in slurmctld -c -i -f "$dir/slurm.conf"
for i in $(seq "$nodes"); do
  mkdir -p "$dir/spool/$(name_of "$i")"
  run_node "$i" slurmd -f "$dir/slurm.conf" -N "$(name_of "$i")"
done
# Wait until every node is idle.
for i in $(seq 150); do
  idle=$(run_in sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)
  ((idle >= nodes)) && { echo "cluster.sh: $nodes nodes up ($dir)"; exit 0; }
  sleep 0.2
done
echo "cluster.sh: nodes did not come up; see $dir/log"
run_in sinfo -N 2>&1 || true
exit 1
