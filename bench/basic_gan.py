"""The basic GAN's modules as Lightning's tutorial writes them (an MLP
generator with BatchNorm1d(out, 0.8) and LeakyReLU(0.2), an MLP
discriminator), in plain torch: bench/lightning_gan.py and bench/python_gan.py
train them, and the
tests load gantry's checkpoints into them (tests/python_checkpoint_test.sh on
Debian's torch, tests/lightning_checkpoint_test.sh through Lightning). The
discriminator ends in a logit (gantry's GAN uses BCE with logits; the
tutorial's Sigmoid has no parameters, so the state_dict names are the same)."""
import numpy as np
import torch.nn as nn


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
        self.model = nn.Sequential(*block(latent_dim, 128, normalize=False), *block(128, 256), *block(256, 512),
                                   *block(512, 1024), nn.Linear(1024, int(np.prod(img_shape))), nn.Tanh())
    def forward(self, z):
        img = self.model(z)
        return img.view(img.size(0), *self.img_shape)


class Discriminator(nn.Module):
    def __init__(self, img_shape):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(int(np.prod(img_shape)), 512), nn.LeakyReLU(0.2, inplace=True),
                                   nn.Linear(512, 256), nn.LeakyReLU(0.2, inplace=True), nn.Linear(256, 1))
    def forward(self, img):
        return self.model(img.view(img.size(0), -1))  # a logit: BCE with logits, as gantry's GAN


def add_bench_args(ap):
    """The options bench/python_gan.py and bench/lightning_gan.py share."""
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
