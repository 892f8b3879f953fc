#!/usr/bin/env bash
# A gantry checkpoint taken to Python: torch.load() gives Lightning's layout,
# and Lightning's generator (bench/basic_gan.py), loaded from it, turns gantry's
# noise into gantry's images (allclose).
#   python_checkpoint_test.sh GANTRY CONFIG WORK_DIR
set -euo pipefail
gantry=$1 config=$2 work=$3
bench=$(dirname "$(readlink -f "$0")")/../bench
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$gantry" train "$config" trainer.max_steps=30 trainer.image_every_n_steps=0 trainer.progress=none >/dev/null
ckpt=$(ls runs/gan_fashion_mnist/latest/checkpoints/*.ckpt)
"$gantry" sample --checkpoint "$ckpt" -n 16 -o grid.png --tensors sample.pt --seed 3
/usr/bin/python3 - "$ckpt" sample.pt "$bench" <<'PY'
import sys
import torch
sys.path.insert(0, sys.argv[3])
from basic_gan import Generator

ckpt = torch.load(sys.argv[1])
print("keys:", sorted(ckpt))
assert ckpt["global_step"] == 30 and ckpt["plugin"] == "gan"

g = Generator(100, (1, 28, 28))  # Lightning's basic GAN (bench/basic_gan.py)
state = {k[len("generator."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("generator.")}
g.load_state_dict(state)  # strict: every key matches Lightning's names
g.eval()
sample = torch.load(sys.argv[2])
with torch.no_grad():
    out = g(sample["input"])
diff = (out - sample["output"]).abs().max().item()
print(f"max |python - gantry| = {diff:.3g}")
assert torch.allclose(out, sample["output"], atol=1e-5), diff
print("python_checkpoint_test: OK")
PY
