#!/usr/bin/env bash
# A gantry checkpoint taken to Python: torch.load() gives Lightning's layout,
# and Lightning's generator written in Python, loaded from it, turns gantry's
# noise into gantry's images (allclose).
#   python_checkpoint_test.sh GANTRY CONFIG WORK_DIR
set -euo pipefail
gantry=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$gantry" train "$config" trainer.max_steps=30 trainer.image_every_n_steps=0 trainer.progress=none >/dev/null
ckpt=$(ls runs/gan_fashion_mnist/latest/checkpoints/*.ckpt)
"$gantry" sample --checkpoint "$ckpt" -n 16 -o grid.png --tensors sample.pt --seed 3
/usr/bin/python3 - "$ckpt" sample.pt <<'PY'
import sys
import torch
import torch.nn as nn

ckpt = torch.load(sys.argv[1])
print("keys:", sorted(ckpt))
assert ckpt["global_step"] == 30 and ckpt["plugin"] == "gan"

class Generator(nn.Module):  # Lightning's basic GAN, as in its tutorial
    def __init__(self, latent_dim=100, img_shape=(1, 28, 28)):
        super().__init__()
        self.img_shape = img_shape
        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers
        self.model = nn.Sequential(*block(latent_dim, 128, normalize=False), *block(128, 256),
                                   *block(256, 512), *block(512, 1024), nn.Linear(1024, 784), nn.Tanh())
    def forward(self, z):
        return self.model(z).view(z.size(0), *self.img_shape)

g = Generator()
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
