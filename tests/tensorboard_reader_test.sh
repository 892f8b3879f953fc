#!/usr/bin/env bash
# gantry's TensorBoard files read by TensorBoard's own reader
# (tensorboard.backend.event_processing.event_accumulator, from the torch2
# virtual environment): every scalar of metrics.csv is there with its step and
# value (float32), every grid of images/ is there byte for byte; the run's
# config is there as the HParams plugin's session start (and end), and every
# parameter's and gradient's histogram every 40 steps, the weights' the same
# values as the checkpoint's. The event files sit beside the run directories,
# in <experiment>/tensorboard/<run> (issue 44.4): with two runs of the
# experiment and its `latest` link, TensorBoard's own walk of `runs/` finds
# each run once.
#   tensorboard_reader_test.sh GANTRY CONFIG PYTHON WORK_DIR
set -euo pipefail
gantry=$1 config=$2 python=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$gantry" train "$config" trainer.max_steps=120 trainer.log_every_n_steps=20 trainer.image_every_n_steps=50 \
  trainer.progress=none trainer.log_histograms_every_n_steps=40 data.batch_size=64 system.lr=0.0003 >train.out
"$python" - runs/gan_fashion_mnist/latest train.out <<'PY'
import csv, glob, os, re, struct, sys
from tensorboard.backend.event_processing import event_accumulator

run = sys.argv[1]
tb = os.path.join(os.path.dirname(run), "tensorboard", os.path.basename(os.path.realpath(run)))
# The end's lines name the event files' folder and the --logdir for the experiment.
said = re.search(r"^tensorboard: (\S+) \(tensorboard --logdir (\S+)\)$", open(sys.argv[2]).read(), re.M)
assert said, "no tensorboard: line at the end"
assert os.path.samefile(said.group(1), tb) and os.path.samefile(said.group(2), os.path.dirname(tb)), said.group(0)
assert not [f for f in os.listdir(run) if "tfevents" in f], os.listdir(run)
acc = event_accumulator.EventAccumulator(
    tb, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0, event_accumulator.HISTOGRAMS: 0})
acc.Reload()
tags = acc.Tags()
rows = list(csv.DictReader(open(os.path.join(run, "metrics.csv"))))
metrics = [k for k in rows[0] if k not in ("step", "epoch", "wall_time", "kind")]
assert sorted(tags["scalars"]) == sorted(metrics), (tags["scalars"], metrics)
f32 = lambda x: struct.unpack("f", struct.pack("f", float(x)))[0]
for name in metrics:
    events = acc.Scalars(name)
    want = [(int(r["step"]), float(r[name])) for r in rows if r[name] != ""]
    assert [e.step for e in events] == [s for s, _ in want], (name, [e.step for e in events], want)
    for e, (_, v) in zip(events, want):
        # TensorBoard keeps float32; the csv prints ~9 significant digits
        assert abs(e.value - f32(v)) <= 1e-6 * max(1.0, abs(v)), (name, e.step, e.value, v)
    print(f"scalar {name}: {len(events)} points, steps {events[0].step}..{events[-1].step}")
pngs = sorted(glob.glob(os.path.join(run, "images", "generated_*.png")))
images = acc.Images("generated")
assert [e.step for e in images] == [int(p[-11:-4]) for p in pngs], ([e.step for e in images], pngs)
for e, p in zip(images, pngs):
    data = open(p, "rb").read()
    assert e.encoded_image_string == data, p
    w, h = struct.unpack(">II", data[16:24])
    assert (e.width, e.height) == (w, h), (p, e.width, e.height, w, h)
print(f"images generated: {len(images)} grids, byte-identical to images/ (steps {[e.step for e in images]})")

# HParams: the session start holds the config's keys (those set, and those
# that differ from the defaults), typed; the end says the run succeeded.
from tensorboard.plugins.hparams import plugin_data_pb2
content = acc.PluginTagToContent("hparams")
assert set(content) == {"_hparams_/session_start_info", "_hparams_/session_end_info"}, content.keys()
start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
hp = start.session_start_info.hparams
assert hp["system.lr"].number_value == 0.0003, hp["system.lr"]
assert hp["data.batch_size"].number_value == 64, "set by the command line, though it is the default"
assert hp["trainer.max_steps"].number_value == 120
assert hp["system.plugin"].string_value == "gan"
assert "trainer.out_dir" not in hp and "trainer.progress" not in hp
end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"])
assert end.session_end_info.status == 1, end  # STATUS_SUCCESS
print(f"hparams: {len(hp)} keys, e.g. system.lr {hp['system.lr'].number_value}; session ended with success")

# Histograms: every parameter and its gradient at steps 40, 80, 120; counts
# that add up; the last weights' min, max and sum those of the checkpoint.
import torch
state = torch.load(os.path.join(run, "checkpoints", "step_0000120.ckpt"), weights_only=False)["state_dict"]
params = [k for k in state if "weight" in k or "bias" in k]
hist = set(tags["histograms"])
assert hist == {"weights/" + k for k in params} | {"grads/" + k for k in params}, (sorted(hist), params)
for k in params:
    for kind in ("weights", "grads"):
        events = acc.Histograms(f"{kind}/{k}")
        assert [e.step for e in events] == [40, 80, 120], (k, [e.step for e in events])
        for e in events:
            h = e.histogram_value
            assert h.num == state[k].numel() and abs(sum(h.bucket) - h.num) < 1e-9, (k, h.num, sum(h.bucket))
    h = acc.Histograms(f"weights/{k}")[-1].histogram_value
    t = state[k].double()
    assert (h.min, h.max) == (t.min().item(), t.max().item()), (k, h.min, h.max)
    assert abs(h.sum - t.sum().item()) <= 1e-9 * max(1.0, t.abs().sum().item()), (k, h.sum, t.sum().item())
print(f"histograms: {len(params)} parameters and their gradients at steps 40, 80, 120; weights match the checkpoint")
PY
# A second run of the experiment; `latest` now names it. Each run once.
sleep 1  # run directories are named by the second
"$gantry" train "$config" trainer.max_steps=20 trainer.log_every_n_steps=10 trainer.progress=none >/dev/null
"$python" - runs <<'PY'
import os, sys
from tensorboard.backend.event_processing import plugin_event_multiplexer
mux = plugin_event_multiplexer.EventMultiplexer()
mux.AddRunsFromDirectory(sys.argv[1])
runs = sorted(mux.Runs())
assert len(runs) == 2 and not any("latest" in r for r in runs), runs
stamps = sorted(d for d in os.listdir("runs/gan_fashion_mnist") if d[0].isdigit())
assert runs == [f"gan_fashion_mnist/tensorboard/{s}" for s in stamps], (runs, stamps)
print(f"tensorboard --logdir runs: {len(runs)} runs for 2 runs and a latest link: {runs}")
PY
echo "PASS: TensorBoard's reader reads every scalar, image, the HParams and the histograms; each run once"
