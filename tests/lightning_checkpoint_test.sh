#!/usr/bin/env bash
# A gantry checkpoint opened by Lightning itself (pytorch-lightning 2.6 on
# torch 2.x, from the torch2 virtual environment): the basic-GAN tutorial's
# LightningModule (bench/lightning_gan.py's, which the benchmark trains),
# GAN.load_from_checkpoint(path), turns gantry's noise into gantry's images
# (allclose); Lightning's own checkpoint loading, strict.
#   lightning_checkpoint_test.sh GANTRY CONFIG PYTHON WORK_DIR
set -euo pipefail
gantry=$1 config=$2 python=$3 work=$4
bench=$(dirname "$(readlink -f "$0")")/../bench
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$gantry" train "$config" trainer.max_steps=30 trainer.image_every_n_steps=0 trainer.progress=none >/dev/null
ckpt=$(ls runs/gan_fashion_mnist/latest/checkpoints/*.ckpt)
"$gantry" sample --checkpoint "$ckpt" -n 16 -o grid.png --tensors sample.pt --seed 3 >/dev/null
"$python" - "$ckpt" sample.pt "$bench" <<'PY'
import sys
import torch
sys.path.insert(0, sys.argv[3])
from lightning_gan import GAN  # the tutorial's LightningModule, as the benchmark trains it

# gantry writes its checkpoints with LibTorch's pickler, which tags typed
# containers (Dict[str, Tensor]) with torch.jit._pickle.restore_type_tag:
# torch >= 2.6's weights_only loading (Lightning's default) must be told that
# this global is safe (it only annotates a container's type; no code of the file runs).
from torch.jit._pickle import restore_type_tag
torch.serialization.add_safe_globals([restore_type_tag])
ckpt = torch.load(sys.argv[1], weights_only=True)
print("checkpoint keys:", sorted(ckpt))
print("hyper_parameters:", ckpt.get("hyper_parameters"))
# strict: every state_dict key matches the tutorial's module names
model = GAN.load_from_checkpoint(sys.argv[1], map_location="cpu")
model.eval()
sample = torch.load(sys.argv[2], weights_only=True)
with torch.no_grad():
    out = model(sample["input"])
diff = (out - sample["output"]).abs().max().item()
print(f"max |Lightning - gantry| = {diff:.3g}")
assert torch.allclose(out, sample["output"], atol=1e-5), diff
print("PASS: Lightning's load_from_checkpoint gives gantry's samples")
PY

# The other way: a checkpoint Lightning's Trainer wrote (2 steps of the same
# LightningModule on random images) given to gantry is named for what it is,
# in one line, for a resume and for sampling (issue 47.7), not "corrupt".
"$python" - "$bench" lightning.ckpt <<'PY'
import sys
import torch
import pytorch_lightning as L
from torch.utils.data import DataLoader, TensorDataset
sys.path.insert(0, sys.argv[1])
from lightning_gan import GAN
data = DataLoader(TensorDataset(torch.rand(128, 1, 28, 28) * 2 - 1), batch_size=64)
trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accelerator="cpu", default_root_dir=".")
trainer.fit(GAN(), data)
trainer.save_checkpoint(sys.argv[2])
print("Lightning wrote", sys.argv[2], "pytorch-lightning", L.__version__)
PY
version=$("$python" -c 'import pytorch_lightning as L; print(L.__version__)')
for cmd in "sample --checkpoint lightning.ckpt -o l.png" "train $config trainer.resume=lightning.ckpt"; do
  set +e
  out=$("$gantry" $cmd 2>&1)
  rc=$?
  set -e
  echo "gantry $cmd: exit $rc: $out"
  [ "$rc" -ne 0 ] && [ "$(printf '%s\n' "$out" | grep -c 'error:')" -eq 1 ] ||
    { echo "FAIL: not one error line"; exit 1; }
  printf '%s' "$out" | grep -q "is a Lightning checkpoint (pytorch-lightning $version), not a gantry checkpoint" ||
    { echo "FAIL: the line does not name a Lightning checkpoint"; exit 1; }
done
echo "PASS: a checkpoint Lightning wrote is named as Lightning's"
