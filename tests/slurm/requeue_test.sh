#!/usr/bin/env bash
# Preemption on the test cluster: a 2-task job gets SIGUSR1 (as --signal=USR1@90
# would send before the time limit); the ranks stop together, rank 0 saves a
# checkpoint and requeues the job; the restarted job (SLURM_RESTART_COUNT=1)
# resumes from that checkpoint by itself and finishes.
#   requeue_test.sh GANTRY SOURCE_DIR CLUSTER_DIR WORK_DIR
set -euo pipefail
gantry=$1 src=$2 cluster=$3 work=$4
export SLURM_CONF=$cluster/slurm.conf
rm -rf "$work" && mkdir -p "$work" && cd "$work"
steps=800
out=$("$gantry" submit "$src/configs/gan_fashion_mnist.yaml" trainer.devices=2 trainer.threads=1 \
  trainer.max_steps=$steps data.batch_size=16 trainer.image_every_n_steps=0 trainer.log_every_n_steps=10)
echo "$out"
job=$(sed -n 's/^submitted job \([0-9]*\).*/\1/p' <<<"$out")
log=$work/runs/gan_fashion_mnist/slurm-$job.out
state() { scontrol show job "$job" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1; }

# SLURM restarts a requeued job after cred_expire + 1 s (11 s here); forcing
# StartTime=now sooner gets "Job credential revoked" and a FAILED job.
# Wait until training runs (a first metrics row), then preempt.
for i in $(seq 600); do
  [[ -s runs/gan_fashion_mnist/latest/metrics.csv ]] && [[ $(wc -l < runs/gan_fashion_mnist/latest/metrics.csv) -ge 3 ]] && break
  sleep 0.1
done
scancel --signal=USR1 "$job"
echo "sent USR1 to job $job"
for i in $(seq 1200); do
  st=$(state JobState) restarts=$(state Restarts)
  [[ $st == COMPLETED || $st == FAILED || $st == CANCELLED ]] && break
  sleep 0.2
done
cat "$log"
echo "final state: $(state JobState), restarts $(state Restarts)"
[[ $(state JobState) == COMPLETED && $(state Restarts) == 1 ]]
grep -q "requeued SLURM job $job" "$log"
grep -q "restart 1" "$log"
grep -q "resume: .*checkpoints/step_" "$log"
grep -q "done at step $steps" "$log"
# One run directory, and its metrics have every logged step exactly once.
[[ $(ls -d runs/gan_fashion_mnist/2* | wc -l) == 1 ]]
# (the preempted run's last step may add one row off the every-10 grid)
cut -d, -f1 runs/gan_fashion_mnist/latest/metrics.csv | tail -n +2 > steps.txt
sort -n -c -u steps.txt                    # strictly increasing: no duplicates
for s in $(seq 10 10 $steps); do grep -qx "$s" steps.txt || { echo "step $s missing"; exit 1; }; done
echo "requeue_test: OK"
