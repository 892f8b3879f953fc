"""Optuna driving gantry train, for bench/search.sh: TPESampler and the
SuccessiveHalvingPruner over the same space as gantry search's, two trials at
a time. Each trial is one `gantry train` to the budget; the objective reads
its metrics.csv as it grows, reports each quality_fd, and stops the run
(SIGTERM: it checkpoints) when the pruner says so.
  optuna_search.py GANTRY CONFIG OUT_DIR BUDGET RUNG SEED TRIALS -- OVERRIDES...
"""
import csv
import os
import signal
import subprocess
import sys
import time

import optuna

gantry, config, out, budget, rung, seed, trials = sys.argv[1:8]
budget, rung, seed, trials = int(budget), int(rung), int(seed), int(trials)
fixed = sys.argv[sys.argv.index("--") + 1:]


def scores(path):
    try:
        with open(path) as f:
            return [(int(r["step"]), float(r["quality_fd"])) for r in csv.DictReader(f) if r.get("quality_fd")]
    except (OSError, KeyError, ValueError):
        return []


def objective(trial):
    lr = trial.suggest_float("lr", 1e-5, 1e-3, log=True)
    b1 = trial.suggest_float("b1", 0.1, 0.9)
    name = "trial_%04d" % trial.number
    cmd = [gantry, "train", config, *fixed, f"system.lr={lr:.6g}", f"system.b1={b1:.6g}", f"name={name}",
           f"trainer.out_dir={out}", "trainer.max_epochs=-1", f"trainer.max_steps={budget}", "trainer.progress=none"]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name + ".log"), "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    metrics = os.path.join(out, name, "latest", "metrics.csv")
    seen = 0
    last = float("nan")
    while True:
        done = p.poll() is not None
        s = [x for x in scores(metrics) if x[0] > 0]
        for step, fd in s[seen:]:
            last = fd
            trial.report(fd, step)
            if trial.should_prune():
                p.send_signal(signal.SIGTERM)
                p.wait()
                raise optuna.TrialPruned()
        seen = len(s)
        if done:
            break
        time.sleep(0.2)
    return last


optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed),
                            pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=rung, reduction_factor=3))
study.optimize(objective, n_trials=trials, n_jobs=2)
print("optuna: best quality_fd %.4g with %s" % (study.best_value, study.best_params))
