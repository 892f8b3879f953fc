#!/usr/bin/env bash
# `gantry search --submit W` on the test cluster (tests/slurm/cluster.sh):
# the search as a job array of W workers (slurm.array_parallel at once),
# each taking trials from the shared journal under its lock; then a worker
# preempted (USR1, as --signal=USR1@N sends): its trial checkpoints, the
# worker requeues its task, and the restarted worker resumes the trial from
# its checkpoint and finishes the search.
#   search_test.sh GANTRY SOURCE_DIR CLUSTER_DIR WORK_DIR TINY_PLUGIN
set -euo pipefail
gantry=$1 src=$2 cluster=$3 work=$4 plugin=$5
export SLURM_CONF=$cluster/slurm.conf
rm -rf "$work" && mkdir -p "$work" && cd "$work"
search=("$src/tests/sdk_plugin/tiny.yaml" system.plugin="$plugin" 'system.lr=loguniform(0.001,1)' trainer.threads=1
        slurm.array_parallel=2 --trials 6 --budget 40 --rung 10 --eta 2 --metric loss)
"$gantry" search "${search[@]}" --submit 3 --dry-run | grep -q -- '--array=0-2%2'
timeout 300 "$gantry" search "${search[@]}" --submit 3 --wait
summary=$("$gantry" search "${search[@]}" --summary)
echo "$summary"
[[ $(grep -cE '^trial_000[0-5] +(done|paused) ' <<<"$summary") == 6 ]] \
  || { echo "FAIL: the summary does not show 6 trials done or paused"; exit 1; }
grep -q "^best: trial_" <<<"$summary"
workers=$(grep -l "search: trial_.*: started to step" runs/tiny/slurm-*_*.out | wc -l)
[[ $workers -ge 2 ]] || { echo "FAIL: $workers array task(s) started trials, expected 2 or more"; cat runs/tiny/slurm-*; exit 1; }

# Preemption: one worker, a longer search.
long=("$src/tests/sdk_plugin/tiny.yaml" system.plugin="$plugin" 'system.lr=loguniform(0.001,1)' trainer.threads=1
      name=preempt trainer.log_every_n_steps=500 checkpoint.every_n_steps=250 --trials 2 --budget 20000 --rung 10000
      --eta 2 --metric loss)
out=$("$gantry" search "${long[@]}" --submit 1)
echo "$out"
job=$(sed -n 's/^submitted job \([0-9]*\).*/\1/p' <<<"$out")
for i in $(seq 1200); do   # a trial under way: its first checkpoint written
  compgen -G "runs/preempt/search/trial_0000/*/checkpoints/step_*.ckpt" >/dev/null && break
  sleep 0.1
done
scancel --signal=USR1 "$job"
echo "sent USR1 to job $job"
state() { scontrol show job "$job" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1; }
for i in $(seq 1500); do
  st=$(state JobState)
  [[ $st == COMPLETED || $st == FAILED || $st == CANCELLED ]] && break
  sleep 0.2
done
log=$(ls runs/preempt/slurm-*_0.out)
cat "$log"
echo "final state: $(state JobState), restarts $(state Restarts)"
[[ $(state JobState) == COMPLETED && $(state Restarts) == 1 ]]
grep -q "search: requeued SLURM job" "$log"
grep -qE "trial_000[01]: goes on to step" "$log"
grep -q "resume: .*checkpoints/step_" runs/preempt/search/trial_0000.log
summary=$("$gantry" search "${long[@]}" --summary)
echo "$summary"
[[ $(grep -cE '^trial_000[01] +(done|paused) ' <<<"$summary") == 2 ]] || { echo "FAIL: not every trial ended"; exit 1; }
echo "search_test: OK"
