#!/usr/bin/python3
"""The GAN loop in Python with Debian's python3-torch (the same LibTorch build
underneath), for bench/run_ddp.sh. One process, or DistributedDataParallel with
Gloo over `--ranks` processes (1 thread each), as PyTorch users write it: one
DDP wrapper per model, G's loss backpropagated with D frozen (requires_grad off)
as Lightning's toggle_optimizer does. Prints "samples_per_s X" (global) over
the steps after the warm-up. On a GPU (--device cuda, one process; for
scripts/device_check.sh): --precision bf16-mixed runs the forwards under
torch.autocast, --compile wraps both models in torch.compile."""
import argparse, gzip, os, time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from basic_gan import Discriminator, Generator, add_bench_args


def worker(rank, args, port, result):
    torch.set_num_threads(args.threads)
    torch.manual_seed(42 + rank)
    if args.ranks > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    dev = torch.device(args.device)
    raw = np.frombuffer(gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").read()[16:], np.uint8)
    data = torch.from_numpy(raw.copy()).float().div(127.5).sub(1).view(-1, 784).to(dev)
    g, d = Generator(100, (1, 28, 28)).to(dev), Discriminator((1, 28, 28)).to(dev)
    if args.compile:
        g, d = torch.compile(g), torch.compile(d)
    autocast = lambda: torch.autocast(dev.type, torch.bfloat16, enabled=args.precision == "bf16-mixed")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if args.ranks > 1:
        g, d = nn.parallel.DistributedDataParallel(g), nn.parallel.DistributedDataParallel(d)
    og = torch.optim.Adam(g.parameters(), 2e-4, betas=(0.5, 0.999))
    od = torch.optim.Adam(d.parameters(), 2e-4, betas=(0.5, 0.999))
    n, b = len(data), args.batch
    shard = torch.randperm(n, generator=torch.Generator().manual_seed(42))[rank::args.ranks].to(dev)
    t0 = None
    for step in range(args.steps):
        if step == args.warmup:
            sync()
            t0 = time.perf_counter()
        i = step % (len(shard) // b)
        imgs = data[shard[i * b:(i + 1) * b]]
        z = torch.randn(b, 100, device=dev)
        valid, fake = torch.ones(b, 1, device=dev), torch.zeros(b, 1, device=dev)
        for p in d.parameters():
            p.requires_grad_(False)
        with autocast():
            gen = g(z)
            g_loss = F.binary_cross_entropy_with_logits(d(gen), valid)
        og.zero_grad()
        g_loss.backward()
        og.step()
        for p in d.parameters():
            p.requires_grad_(True)
        with autocast():
            d_loss = (F.binary_cross_entropy_with_logits(d(imgs), valid) +
                      F.binary_cross_entropy_with_logits(d(gen.detach()), fake)) / 2
        od.zero_grad()
        d_loss.backward()
        od.step()
        if step % 50 == 0:
            g_loss.item(), d_loss.item()
    sync()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        result.value = (args.steps - args.warmup) * b * args.ranks / elapsed


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    add_bench_args(ap)
    ap.add_argument("--precision", default="32", choices=["32", "bf16-mixed"])
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    result = mp.get_context("spawn").Value("d", 0.0)
    import socket
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    if args.ranks == 1:
        worker(0, args, port, result)
    else:
        mp.start_processes(worker, args=(args, port, result), nprocs=args.ranks, start_method="spawn")
    print(f"samples_per_s {result.value:.1f}")
