#!/usr/bin/env python3
"""Bar chart of samples/s per configuration from bench/run.sh's table.

  bench/run.sh 3 700 | tee bench.md; python3 bench/plot.py bench.md docs/images/bench.png
Needs python3-matplotlib (apt-get install python3-matplotlib); benchmarks only.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = []
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 9 and cells[0].isdigit():
        rows.append(cells)
configs = []
for r in rows:
    if (r[0], r[1]) not in configs:
        configs.append((r[0], r[1]))
loops = ["gantry train", "bare LibTorch C++", "Python (python3-torch)", "matmul-only floor"]
colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#bbbbbb"]
fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
width = 0.2
for j, (loop, color) in enumerate(zip(loops, colors)):
    values = []
    for b, t in configs:
        match = [r for r in rows if (r[0], r[1]) == (b, t) and r[2].startswith(loop)]
        values.append(float(match[0][4]) if match else 0)
    xs = [i + (j - 1.5) * width for i in range(len(configs))]
    ax.bar(xs, values, width, label=loop, color=color)
ax.set_xticks(range(len(configs)))
ax.set_xticklabels([f"batch {b}\n{t} thread{'s' if t != '1' else ''}" for b, t in configs])
ax.set_ylabel("samples/s (steady state, median)")
ax.set_title("GAN demo on this machine: gantry vs bare LibTorch vs Python vs the matmul floor")
ax.legend(fontsize=8)
ax.grid(axis="y", alpha=0.3)
fig.tight_layout()
fig.savefig(sys.argv[2])
print(f"wrote {sys.argv[2]}")
