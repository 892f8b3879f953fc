"""Lightning's own basic GAN (the tutorial's LightningModule: manual
optimization, toggle_optimizer, two Adams) trained by pytorch-lightning's
Trainer on the same Fashion-MNIST, batch and thread count as gantry's demo, on
the CPU; --ranks 2: Lightning's DDP (Gloo) on 2 processes, with
find_unused_parameters (one DDP wrapper over G and D: plain "ddp" stops with
"parameters that were not used in producing the loss", as Lightning says).
Run with the Python of scripts/torch2.sh's venv. Prints "samples_per_s X"
(global) over the steps after the warm-up."""
import argparse, gzip, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import pytorch_lightning as L
from torch.utils.data import DataLoader, TensorDataset

from basic_gan import Discriminator, Generator, add_bench_args


class GAN(L.LightningModule):
    def __init__(self, channels=1, width=28, height=28, latent_dim=100, lr=0.0002, b1=0.5, b2=0.999, **kwargs):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = Generator(latent_dim, (channels, width, height))
        self.discriminator = Discriminator((channels, width, height))

    def forward(self, z):
        return self.generator(z)

    def training_step(self, batch):
        imgs, = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(imgs.shape[0], self.hparams.latent_dim).type_as(imgs)
        valid = torch.ones(imgs.size(0), 1).type_as(imgs)
        fake = torch.zeros(imgs.size(0), 1).type_as(imgs)
        self.toggle_optimizer(opt_g)
        generated = self.generator(z)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(generated), valid)
        self.log("g_loss", g_loss)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)
        self.toggle_optimizer(opt_d)
        d_loss = (F.binary_cross_entropy_with_logits(self.discriminator(imgs), valid) +
                  F.binary_cross_entropy_with_logits(self.discriminator(generated.detach()), fake)) / 2
        self.log("d_loss", d_loss)
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)

    def configure_optimizers(self):
        h = self.hparams
        return [torch.optim.Adam(self.generator.parameters(), lr=h.lr, betas=(h.b1, h.b2)),
                torch.optim.Adam(self.discriminator.parameters(), lr=h.lr, betas=(h.b1, h.b2))], []


class Clock(L.Callback):
    """Wall time from the end of batch `warmup` to the end of the last (on a
    GPU, after the device has finished them: a synchronize at both ends only)."""
    def __init__(self, warmup, last):
        self.warmup, self.last, self.t0, self.t1, self.steps = warmup, last, None, None, 0
    def on_train_batch_end(self, trainer, *args):
        self.steps += 1
        if self.steps in (self.warmup, self.last) and torch.cuda.is_available():
            torch.cuda.synchronize()
        if self.steps == self.warmup:
            self.t0 = time.perf_counter()
        self.t1 = time.perf_counter()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    add_bench_args(ap)  # --device: Lightning's accelerator
    ap.add_argument("--precision", default="32-true", help="Lightning's precision: 32-true or bf16-mixed")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    L.seed_everything(42, verbose=False)
    raw = np.frombuffer(gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").read()[16:], np.uint8)
    data = torch.from_numpy(raw.copy()).float().div(127.5).sub(1).view(-1, 1, 28, 28)
    loader = DataLoader(TensorDataset(data), batch_size=args.batch, shuffle=True, drop_last=True)
    clock = Clock(args.warmup, args.steps)
    trainer = L.Trainer(accelerator=args.device, devices=args.ranks, precision=args.precision, strategy="ddp_find_unused_parameters_true" if args.ranks > 1 else "auto",
                        # manual optimization: global_step counts optimizer steps, 2 per batch
                        max_steps=2 * args.steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[clock])
    trainer.fit(GAN(), loader)
    if trainer.global_rank == 0:
        print(f"samples_per_s {(clock.steps - args.warmup) * args.batch * args.ranks / (clock.t1 - clock.t0):.1f}")
