#!/usr/bin/env python3
"""gantry launch -n N of the basic GAN (small per-rank batch, 1 thread a
rank) on this machine, for each N: the time from the launch to rank 0's
first step and its floor (N x one rank's start-up CPU time / the cores), the
peak memory of all ranks together as PSS (shared pages counted once) and
RSS, and each rank's control traffic through the rendezvous store (gantry's
and Gloo's requests, from GANTRY_DIST_STATS lines) at start-up and per
logged step, with the collectives per step. One table (Markdown).
Beside each N up to $TORCHRUN_MAX (32), the same in Python: torchrun of
bench/torchrun_gan.py, a minimal DDP script of the same GAN, with
$TORCHRUN_PYTHON (scripts/torch2.sh's venv, torch 2.15: Debian's torch 1.13
torchrun fails on Python 3.11 in its elastic agent): launch to its first
step, peak PSS.
   scale.py GANTRY CONFIG WORK_DIR SIZES... [-- extra overrides]"""
import os, re, statistics, subprocess, sys, threading, time

gantry, config, work = sys.argv[1], sys.argv[2], sys.argv[3]
rest = sys.argv[4:]
extra = rest[rest.index("--") + 1:] if "--" in rest else []
sizes = [int(x) for x in (rest[:rest.index("--")] if "--" in rest else rest)]
TORCHRUN_MAX = int(os.environ.get("TORCHRUN_MAX", "32"))
cores = os.cpu_count()
steps = 20
common = ["data.batch_size=8", "trainer.threads=1", "trainer.log_every_n_steps=1",
          "trainer.progress=none", "monitor.enabled=false", "trainer.image_every_n_steps=0"] + extra

def memory_of(pids):
    pss = rss = 0
    for p in pids:
        try:
            for line in open(f"/proc/{p}/smaps_rollup"):
                if line.startswith("Pss:"): pss += int(line.split()[1])
                elif line.startswith("Rss:"): rss += int(line.split()[1])
        except OSError:
            pass
    return pss / 1024, rss / 1024  # MiB

def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(x) for x in open(f"/proc/{p}/task/{p}/children").read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out

def run_sampled(cmd, env, pids_of):
    """Runs cmd; its output, exit code, peak (PSS, RSS) MiB of pids_of(its pid), start time."""
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    peak = [0.0, 0.0]
    done = threading.Event()
    def sample():
        while not done.is_set():
            pss, rss = memory_of(pids_of(proc.pid))
            if pss > peak[0]: peak[:] = [pss, rss]
            time.sleep(0.5)
    t = threading.Thread(target=sample); t.start()
    out = proc.communicate()[0]
    done.set(); t.join()
    return out, proc.returncode, peak, start

def torchrun(n):
    if n > TORCHRUN_MAX: return "-", "-"
    out, code, peak, start = run_sampled(
        [os.environ.get("TORCHRUN_PYTHON", "python3"), "-m", "torch.distributed.run", f"--nproc-per-node={n}",
         "--master-port=29533",
         os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun_gan.py")],
        dict(os.environ, OMP_NUM_THREADS="1"), lambda pid: descendants(pid))
    m = re.search(r"first_step_unix ([\d.]+)", out)
    if code != 0 or not m or "done" not in out:
        return f"failed ({code})", "-"
    return f"{float(m[1]) - start:.1f}", f"{peak[0] / 1024:.2f}"

def ranks_of(launcher):
    """The launcher and its ranks: forked ranks share the launcher's LibTorch pages, so PSS splits them across
    all of these; the launcher's share counts too."""
    try:
        return [launcher] + [int(x) for x in open(f"/proc/{launcher}/task/{launcher}/children").read().split()]
    except OSError:
        return []

STAT = re.compile(r"gantry dist stats: rank (\d+) of (\d+), ([^,]+), unix ([\d.]+), cpu ([\d.]+) s: store requests "
                  r"(\d+) .*?; heartbeat requests (\d+); collectives (\d+)")

cpu1 = None  # one rank's CPU seconds from exec to its first step, at the smallest N
header = ("| ranks | launch to first step s | floor s | above floor | CPU to first step a rank s | peak PSS GiB "
          "(per rank MiB) | peak RSS GiB | store requests at start-up, rank 0 / others (max) | per logged step, "
          "rank 0 / others | collectives per step | heartbeat requests/s a rank | step ms (median) | torchrun: launch to "
          "first step s | torchrun: peak PSS GiB |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for n in sizes:
    env = dict(os.environ, GANTRY_DIST_STATS="1")
    out, code, peak, start = run_sampled(
        [gantry, "launch", "-n", str(n), config, *common, f"trainer.max_steps={steps}", f"trainer.out_dir={work}/n{n}"],
        env, ranks_of)
    if code != 0 or "replicas bit-identical" not in out:
        print(f"| {n} | failed (exit {code}): {out.strip().splitlines()[-1][:200]} |")
        continue
    stats = {}  # rank -> [(when, unix, store, beat, collectives)]
    for m in STAT.finditer(out):
        stats.setdefault(int(m[1]), []).append((m[3], float(m[4]), int(m[6]), int(m[7]), int(m[8]), float(m[5])))
    def at(rank, when):
        return next(x for x in stats[rank] if x[0] == when)
    first = at(0, "step 1")[1] - start
    cpu_first = statistics.mean(at(r, "step 1")[5] for r in stats)
    if cpu1 is None:
        cpu1 = cpu_first
        print(f"one rank's start-up: {cpu1:.2f} s of CPU from exec to its first step (mean over the {n} ranks); "
              f"{cores} cores: the floor of N ranks is N x {cpu1:.2f} / {cores} s\n")
        print(header)
    floor = n * cpu1 / cores
    startup = {r: at(r, "start-up")[2] for r in stats}
    per_step = {}
    for r, rows in stats.items():
        steps_rows = [x for x in rows if x[0].startswith("step ")]
        d = [b[2] - a[2] for a, b in zip(steps_rows[1:], steps_rows[2:])]  # after the first logged step
        per_step[r] = statistics.median(d) if d else 0
    coll = [b[4] - a[4] for a, b in zip([x for x in stats[0] if x[0].startswith("step ")][1:],
                                       [x for x in stats[0] if x[0].startswith("step ")][2:])]
    # rank 0's wall time from one logged step to the next (a row every step), after the first
    t0 = [x[1] for x in stats[0] if x[0].startswith("step ")]
    step_ms = 1000 * statistics.median([b - a for a, b in zip(t0[1:], t0[2:])]) if len(t0) > 2 else 0
    end0 = at(0, "the end")
    beat_rate = end0[3] / max(1e-9, end0[1] - at(0, "start-up")[1] + 0.5)
    others = [r for r in stats if r != 0]
    print(f"| {n} | {first:.1f} | {floor:.1f} | {100 * (first / floor - 1):+.0f}% | {cpu_first:.2f} | {peak[0] / 1024:.2f} "
          f"({peak[0] / n:.0f}) | {peak[1] / 1024:.2f} | {startup[0]} / "
          f"{max(startup[r] for r in others) if others else '-'} | {per_step[0]:g} / "
          f"{max(per_step[r] for r in others) if others else '-'} | {statistics.median(coll) if coll else 0:g} "
          f"| {beat_rate:.1f} | {step_ms:.0f} | {' | '.join(torchrun(n))} |", flush=True)
