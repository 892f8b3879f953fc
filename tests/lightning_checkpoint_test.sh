#!/usr/bin/env bash
# A gantry checkpoint opened by Lightning itself (pytorch-lightning 2.6 on
# torch 2.x, from the torch2 virtual environment): the basic-GAN tutorial's
# LightningModule, GAN.load_from_checkpoint(path), turns gantry's noise into
# gantry's images (allclose); Lightning's own checkpoint loading, strict.
#   lightning_checkpoint_test.sh GANTRY CONFIG PYTHON WORK_DIR
set -euo pipefail
gantry=$1 config=$2 python=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$gantry" train "$config" trainer.max_steps=30 trainer.image_every_n_steps=0 trainer.progress=none >/dev/null
ckpt=$(ls runs/gan_fashion_mnist/latest/checkpoints/*.ckpt)
"$gantry" sample --checkpoint "$ckpt" -n 16 -o grid.png --tensors sample.pt --seed 3 >/dev/null
"$python" - "$ckpt" sample.pt <<'PY'
import sys
import numpy as np
import torch
import torch.nn as nn
import pytorch_lightning as L

# The tutorial's modules (Lightning docs, "PyTorch Lightning Basic GAN Tutorial"), unchanged.
class Generator(nn.Module):
    def __init__(self, latent_dim, img_shape):
        super().__init__()
        self.img_shape = img_shape
        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers
        self.model = nn.Sequential(
            *block(latent_dim, 128, normalize=False), *block(128, 256), *block(256, 512), *block(512, 1024),
            nn.Linear(1024, int(np.prod(img_shape))), nn.Tanh())
    def forward(self, z):
        img = self.model(z)
        return img.view(img.size(0), *self.img_shape)

class Discriminator(nn.Module):
    def __init__(self, img_shape):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(int(np.prod(img_shape)), 512), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(512, 256), nn.LeakyReLU(0.2, inplace=True), nn.Linear(256, 1), nn.Sigmoid())
    def forward(self, img):
        return self.model(img.view(img.size(0), -1))

class GAN(L.LightningModule):
    def __init__(self, channels, width, height, latent_dim=100, lr=0.0002, b1=0.5, b2=0.999, batch_size=64, **kwargs):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        data_shape = (channels, width, height)
        self.generator = Generator(latent_dim=self.hparams.latent_dim, img_shape=data_shape)
        self.discriminator = Discriminator(img_shape=data_shape)
        self.validation_z = torch.randn(8, self.hparams.latent_dim)
    def forward(self, z):
        return self.generator(z)

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
