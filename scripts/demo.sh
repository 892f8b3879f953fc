#!/usr/bin/env bash
# README command 1: install what is missing, build, and train the GAN on
# Fashion-MNIST. Extra arguments are config overrides: trainer.max_epochs=1
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo runs: the runner and the GAN plugin (scripts/test.sh builds the rest).
GANTRY_TARGETS="gantry gan" scripts/setup.sh
exec build/bin/gantry train configs/gan_fashion_mnist.yaml "$@"
