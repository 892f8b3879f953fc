#!/usr/bin/python3
"""The basic GAN as a minimal DistributedDataParallel script for torchrun
(Gloo, 1 thread a rank, the same Fashion-MNIST and batch as bench/scale.sh's
gantry runs), to compare start-up: rank 0 prints "first_step_unix T" when its
first step has ended, then trains --steps steps and prints "done".
   python3 -m torch.distributed.run --nproc-per-node N bench/torchrun_gan.py [--batch 8] [--steps 20]"""
import argparse, gzip, os, sys, time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from basic_gan import Discriminator, Generator

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--steps", type=int, default=20)
args = ap.parse_args()
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(42 + rank)
raw = np.frombuffer(gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").read()[16:], np.uint8)
images = torch.from_numpy(raw.copy()).view(-1, 784)  # uint8, scaled per batch (as gantry keeps it)
g = nn.parallel.DistributedDataParallel(Generator(100, (1, 28, 28)))
d = nn.parallel.DistributedDataParallel(Discriminator((1, 28, 28)))
og = torch.optim.Adam(g.parameters(), 2e-4, betas=(0.5, 0.999))
od = torch.optim.Adam(d.parameters(), 2e-4, betas=(0.5, 0.999))
shard = torch.randperm(len(images), generator=torch.Generator().manual_seed(42))[rank::world]
for step in range(args.steps):
    idx = shard[step * args.batch:(step + 1) * args.batch]
    real = images[idx].float().div(127.5).sub(1)
    z = torch.randn(len(idx), 100)
    fake = g(z)
    for p in d.parameters(): p.requires_grad_(False)
    g_loss = F.binary_cross_entropy_with_logits(d(fake), torch.ones(len(idx), 1))
    og.zero_grad(); g_loss.backward(); og.step()
    for p in d.parameters(): p.requires_grad_(True)
    d_loss = (F.binary_cross_entropy_with_logits(d(real.view(-1, 1, 28, 28)), torch.ones(len(idx), 1)) +
              F.binary_cross_entropy_with_logits(d(fake.detach()), torch.zeros(len(idx), 1))) / 2
    od.zero_grad(); d_loss.backward(); od.step()
    if step == 0 and rank == 0:
        print(f"first_step_unix {time.time():.3f}", flush=True)
dist.barrier()
if rank == 0:
    print("done", flush=True)
dist.destroy_process_group()
