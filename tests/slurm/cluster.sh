#!/usr/bin/env bash
# A real single-host SLURM cluster (slurm-wlm 22.05 + munge) for the tests,
# with all state under one folder, a private munge key and socket, and
# non-default ports: nothing in /etc is touched.
#   tests/slurm/cluster.sh start DIR [NODES=2]   # nodes node1..nodeN, 2 CPUs each
#   tests/slurm/cluster.sh stop DIR
# Clients then need SLURM_CONF=DIR/slurm.conf (DIR/env has the exports).
set -euo pipefail
cmd=$1 dir=$2 nodes=${3:-2}
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

# munge: private key and socket
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 600 "$dir/munge.key"
munged --force --socket "$dir/run/munge.socket" --key-file "$dir/munge.key" \
  --pid-file "$dir/run/munged.pid" --log-file "$dir/log/munged.log" --seed-file "$dir/state/munge.seed"

{
  echo "ClusterName=gantrytest"
  echo "SlurmctldHost=$host(127.0.0.1)"
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
  echo "StateSaveLocation=$dir/state"
  echo "SlurmdSpoolDir=$dir/spool/%n"
  echo "SlurmctldPidFile=$dir/run/slurmctld.pid"
  echo "SlurmdPidFile=$dir/run/slurmd-%n.pid"
  echo "SlurmctldLogFile=$dir/log/slurmctld.log"
  echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
  echo "KillWait=5"
  echo "MpiDefault=none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "SchedulerType=sched/backfill"
  echo "InactiveLimit=0"
  echo "MinJobAge=300"
  for i in $(seq "$nodes"); do
    echo "NodeName=node$i NodeAddr=127.0.0.1 CPUs=2 RealMemory=4000 Port=$((base + 1 + i)) State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} > "$dir/slurm.conf"
echo "export SLURM_CONF=$dir/slurm.conf" > "$dir/env"

export SLURM_CONF=$dir/slurm.conf
slurmctld -c -i -f "$dir/slurm.conf"
for i in $(seq "$nodes"); do
  mkdir -p "$dir/spool/node$i"
  slurmd -f "$dir/slurm.conf" -N "node$i"
done
# Wait until every node is idle.
for i in $(seq 100); do
  idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)
  ((idle >= nodes)) && { echo "cluster.sh: $nodes nodes up ($dir)"; exit 0; }
  sleep 0.2
done
echo "cluster.sh: nodes did not come up; see $dir/log"
sinfo -N 2>&1 || true
exit 1
