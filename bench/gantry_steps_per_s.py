#!/usr/bin/env python3
"""Steady-state steps/s of a gantry run from its metrics.csv: the steps between
the first training row at or after the warm-up and the last, over their wall time."""
import csv
import sys

path, warmup = sys.argv[1], int(sys.argv[2])
rows = [(int(r["step"]), float(r["wall_time"])) for r in csv.DictReader(open(path)) if r.get("kind", "train") == "train"]
rows = [r for r in rows if r[0] >= warmup]
(s0, t0), (s1, t1) = rows[0], rows[-1]
print(f"{(s1 - s0) / (t1 - t0):.2f}")
