"""The table of bench/search.sh: for each method and seed, the total steps
its trials trained, the best quality_fd reached, and the wall time until a
trial first logged a quality_fd at or below the target; then the medians.
  search_table.py TIMES_TXT TARGET BUDGET
"""
import csv
import glob
import os
import statistics
import sys

times, target, budget = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rows = {}
for line in open(times):
    m, seed, start, end, out = line.split()
    start, end = float(start), float(end)
    steps, best, hit = 0, float("inf"), None
    for path in glob.glob(os.path.join(out, "**", "metrics.csv"), recursive=True):
        if "/latest/" in path:
            continue
        last = 0
        for r in csv.DictReader(open(path)):
            try:
                step = int(r["step"])
            except (KeyError, ValueError):
                continue
            last = max(last, step)
            if r.get("quality_fd") and step > 0:
                fd = float(r["quality_fd"])
                best = min(best, fd)
                if fd <= target and r.get("wall_time"):
                    t = float(r["wall_time"]) - start
                    hit = t if hit is None else min(hit, t)
        steps += last
    rows.setdefault(m, []).append((int(seed), steps, best, hit, end - start))

print(f"target quality_fd {target:.4g}, budget {budget} steps a trial\n")
print("| method | seed | steps trained | best quality_fd | time to target (s) | wall time (s) |")
print("|---|---|---|---|---|---|")
for m, rs in rows.items():
    for seed, steps, best, hit, wall in rs:
        print(f"| {m} | {seed} | {steps} | {best:.4g} | {'-' if hit is None else f'{hit:.0f}'} | {wall:.0f} |")
print("\n| method | median best quality_fd | median time to target (s) | reached | median wall time (s) |")
print("|---|---|---|---|---|")
for m, rs in rows.items():
    hits = [h for _, _, _, h, _ in rs if h is not None]
    print(f"| {m} | {statistics.median(b for _, _, b, _, _ in rs):.4g} | "
          f"{'-' if not hits else f'{statistics.median(hits):.0f}'} | {len(hits)}/{len(rs)} | "
          f"{statistics.median(w for _, _, _, _, w in rs):.0f} |")
