#!/usr/bin/env python3
"""The three matrix products of a Linear layer, with its weight stored as
built (row-major [out, in]) and transposed (column-major, what
trainer.weight_layout=auto picks when in_features is a multiple of 1024 and
out_features is not), through LibTorch's BLAS on 1 thread.

  /usr/bin/python3 bench/linear_layout.py [batch ...]     (python3-torch)

forward: x . W^T; grad_x: dy . W; grad_W: dy^T . x (as autograd computes
them). Microseconds per product, best of 5 blocks of 50 (data in cache).
"""
import sys
import time

import torch

torch.set_num_threads(1)
torch.set_grad_enabled(False)


def best_us(fn, blocks=5, reps=50):
    for _ in range(10):
        fn()
    best = float("inf")
    for _ in range(blocks):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps * 1e6)
    return best


def products(batch, n_in, n_out, transposed):
    x, dy = torch.randn(batch, n_in), torch.randn(batch, n_out)
    w = torch.randn(n_out, n_in)
    if transposed:
        w = w.t().contiguous().t()  # same [out, in] tensor, strides (1, out)
        grad_w = lambda: x.t().mm(dy)  # noqa: E731  (autograd: [in, out], then .t())
    else:
        grad_w = lambda: dy.t().mm(x)  # noqa: E731
    return [best_us(lambda: x.mm(w.t())), best_us(lambda: dy.mm(w)), best_us(grad_w)]


shapes = [(1024, 784), (1024, 1000), (2048, 784), (1000, 784), (512, 1024), (784, 1024), (1024, 1024), (784, 512)]
print("| batch | in -> out | auto transposes | as built: fwd / grad_x / grad_W (us) | sum | "
      "transposed: fwd / grad_x / grad_W (us) | sum |")
print("|---|---|---|---|---|---|---|")
for batch in [int(b) for b in sys.argv[1:]] or [64, 256]:
    for n_in, n_out in shapes:
        a, t = products(batch, n_in, n_out, False), products(batch, n_in, n_out, True)
        picks = n_in % 1024 == 0 and n_out % 1024 != 0
        print(f"| {batch} | {n_in} -> {n_out} | {'yes' if picks else 'no'} | "
              f"{a[0]:.0f} / {a[1]:.0f} / {a[2]:.0f} | {sum(a):.0f} | {t[0]:.0f} / {t[1]:.0f} / {t[2]:.0f} | {sum(t):.0f} |")
