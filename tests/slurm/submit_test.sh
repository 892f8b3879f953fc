#!/usr/bin/env bash
# `gantry submit --wait` on the test cluster (tests/slurm/cluster.sh): the
# rendered script runs under sbatch with 2 tasks, on one node or on two.
#   submit_test.sh GANTRY SOURCE_DIR CLUSTER_DIR WORK_DIR one|two
set -euo pipefail
gantry=$1 src=$2 cluster=$3 work=$4 mode=$5
export SLURM_CONF=$cluster/slurm.conf
rm -rf "$work" && mkdir -p "$work" && cd "$work"
if [[ $mode == one ]]; then layout=(trainer.num_nodes=1 trainer.devices=2); else layout=(trainer.num_nodes=2 trainer.devices=1); fi
timeout 300 "$gantry" submit "$src/configs/gan_fashion_mnist.yaml" "${layout[@]}" \
  trainer.max_steps=40 trainer.threads=1 trainer.log_every_n_steps=10 --wait
log=$(ls runs/gan_fashion_mnist/slurm-*.out)
cat "$log"
grep -q "done at step 40" "$log"
grep -q "replicas bit-identical across 2 ranks" "$log"
grep -q "rank 1/2 .* via slurm" "$log"
if [[ $mode == two ]]; then grep -q "on node\[1-2\]" "$log"; fi
[[ $(ls -d runs/gan_fashion_mnist/2* | wc -l) == 1 ]]   # only rank 0 wrote a run directory
echo "submit_test ($mode): OK"
