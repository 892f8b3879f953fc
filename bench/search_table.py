"""The table of bench/search.sh: for each method and seed, the total steps
its trials trained, the best quality_fd reached, the wall time until a
trial first logged a quality_fd at or below the target, and the wall time
until one reached the best the grid reached with that seed (a harder bar:
what a person running the whole grid would get); then the medians.
  search_table.py TIMES_TXT TARGET BUDGET
"""
import csv
import glob
import os
import statistics
import sys

times, target, budget = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])

def scores(out):
    """(wall_time, fd) of every score row of a method's runs, and the steps they trained."""
    points, steps = [], 0
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
            if r.get("quality_fd") and step > 0 and r.get("wall_time"):
                points.append((float(r["wall_time"]), float(r["quality_fd"])))
        steps += last
    return points, steps


def first_at_or_below(points, start, bar):
    hits = [w - start for w, fd in points if fd <= bar]
    return min(hits) if hits else None


runs = [line.split() for line in open(times) if line.strip()]
grid_best = {}  # seed -> the best FD the grid reached
for m, seed, start, end, out in runs:
    if m == "grid":
        points, _ = scores(out)
        grid_best[seed] = min((fd for _, fd in points), default=float("inf"))
rows = {}
for m, seed, start, end, out in runs:
    start, end = float(start), float(end)
    points, steps = scores(out)
    best = min((fd for _, fd in points), default=float("inf"))
    hit = first_at_or_below(points, start, target)
    hit_grid = first_at_or_below(points, start, grid_best[seed]) if seed in grid_best else None
    rows.setdefault(m, []).append((int(seed), steps, best, hit, hit_grid, end - start))

def secs(t):
    return "-" if t is None else f"{t:.0f}"


print(f"target quality_fd {target:.4g}, budget {budget} steps a trial; the grid's best per seed: "
      + ", ".join(f"{s} {v:.4g}" for s, v in sorted(grid_best.items())) + "\n")
print("| method | seed | steps trained | best quality_fd | time to target (s) | time to the grid's best (s) "
      "| wall time (s) |")
print("|---|---|---|---|---|---|---|")
for m, rs in rows.items():
    for seed, steps, best, hit, hit_grid, wall in rs:
        print(f"| {m} | {seed} | {steps} | {best:.4g} | {secs(hit)} | {secs(hit_grid)} | {wall:.0f} |")
print("\n| method | median best quality_fd | median time to target (s) | reached | "
      "median time to the grid's best (s) | reached | median wall time (s) |")
print("|---|---|---|---|---|---|---|")
for m, rs in rows.items():
    hits = [r[3] for r in rs if r[3] is not None]
    grid_hits = [r[4] for r in rs if r[4] is not None]
    # a median over the seeds that reached it (the count says how many did)
    print(f"| {m} | {statistics.median(r[2] for r in rs):.4g} | "
          f"{secs(statistics.median(hits)) if hits else '-'} | {len(hits)}/{len(rs)} | "
          f"{secs(statistics.median(grid_hits)) if grid_hits else '-'} | {len(grid_hits)}/{len(rs)} | "
          f"{statistics.median(r[5] for r in rs):.0f} |")
