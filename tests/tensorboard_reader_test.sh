#!/usr/bin/env bash
# gantry's TensorBoard files read by TensorBoard's own reader
# (tensorboard.backend.event_processing.event_accumulator, from the torch2
# virtual environment): every scalar of metrics.csv is there with its step and
# value (float32), every grid of images/ is there byte for byte.
#   tensorboard_reader_test.sh GANTRY CONFIG PYTHON WORK_DIR
set -euo pipefail
gantry=$1 config=$2 python=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$gantry" train "$config" trainer.max_steps=120 trainer.log_every_n_steps=20 trainer.image_every_n_steps=50 \
  trainer.progress=none >/dev/null
"$python" - runs/gan_fashion_mnist/latest <<'PY'
import csv, glob, os, struct, sys
from tensorboard.backend.event_processing import event_accumulator

run = sys.argv[1]
acc = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0})
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
PY
echo "PASS: TensorBoard's reader reads every scalar and image"
