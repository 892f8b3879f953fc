#!/usr/bin/env bash
# `gantry serve` over real HTTP (Python's urllib, no numpy): a checkpoint of
# the demo GAN served on a free port; every route; /v1/sample's PNG is the
# one `gantry sample` writes for that seed, byte for byte; /v1/forward of 48
# single-row requests sent at once (gathered by the dynamic batcher) equals
# one 48-row request within float32 rounding; 200 concurrent requests all
# answered; malformed requests are a 4xx naming the fault and the server
# serves on; a bearer token is required when set; SIGTERM while requests are
# in flight answers them all and exits 0.
#   serve_test.sh GANTRY CONFIG WORK_DIR
set -euo pipefail
gantry=$(realpath "$1") config=$(realpath "$2") work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$gantry" train "$config" trainer.max_steps=50 trainer.progress=none monitor.enabled=false >/dev/null
ckpt=runs/gan_fashion_mnist/latest/checkpoints/step_0000050.ckpt
"$gantry" sample -c "$ckpt" -n 16 --seed 7 -o sample.png >/dev/null

serve() {  # ARGS... -> $pid, $port
  "$gantry" serve runs/gan_fashion_mnist/latest --port 0 "$@" > serve.log 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    port=$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\) .*|\1|p' serve.log)
    [[ -n $port ]] && return 0
    kill -0 $pid 2>/dev/null || { echo "FAIL: gantry serve exited: $(cat serve.log)"; exit 1; }
    sleep 0.1
  done
  echo "FAIL: gantry serve printed no address: $(cat serve.log)"; exit 1
}

serve --max-batch 64 --max-wait-ms 20
python3 - "$port" <<'PY'
import json, struct, sys, threading, urllib.request, urllib.error
base = f"http://127.0.0.1:{sys.argv[1]}"

def get(path, data=None, headers={}):
    req = urllib.request.Request(base + path, data=data, headers=headers, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()

def npy(rows, shape):  # float32 C-order .npy, format 1.0
    flat = [x for r in rows for x in r]
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % ", ".join(map(str, shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack(f"<{len(flat)}f", *flat)

def from_npy(b):
    n = struct.unpack("<H", b[8:10])[0]
    header = b[10:10 + n].decode()
    shape = tuple(int(x) for x in header.split("(")[1].split(")")[0].split(",") if x.strip())
    data = struct.unpack(f"<{(len(b) - 10 - n) // 4}f", b[10 + n:])
    return shape, data

s, h, body = get("/healthz"); assert s == 200 and json.loads(body)["status"] == "ok", body
s, h, body = get("/readyz"); assert s == 200, body
s, h, body = get("/v1/info"); info = json.loads(body)
assert info["plugin"] == "gan" and info["step"] == 50 and info["input_shape"] == [100], info
assert info["output_shape"] == [1, 28, 28], info
s, h, png = get("/v1/sample?n=16&seed=7")
assert s == 200 and h["Content-Type"] == "image/png", (s, h)
assert png == open("sample.png", "rb").read(), "the grid differs from gantry sample's"
print("sample: the PNG of n=16 seed=7 is gantry sample's, byte for byte")
s, h, raw = get("/v1/sample?n=3&seed=1&format=npy")
shape, data = from_npy(raw)
assert s == 200 and shape == (3, 1, 28, 28) and all(-1 <= x <= 1 for x in data), (s, shape)

# Dynamic batching: 48 single rows at once, then the same 48 rows in one request.
import random
random.seed(0)
rows = [[random.gauss(0, 1) for _ in range(100)] for _ in range(48)]
single = [None] * 48
def one(i):
    s, h, b = get("/v1/forward", npy([rows[i]], (1, 100)))
    assert s == 200, (s, b)
    single[i] = from_npy(b)
threads = [threading.Thread(target=one, args=(i,)) for i in range(48)]
for t in threads: t.start()
for t in threads: t.join()
s, h, b = get("/v1/forward", npy(rows, (48, 100)))
assert s == 200, b
shape, whole = from_npy(b)
assert shape == (48, 1, 28, 28), shape
worst = max(abs(a - c) for i in range(48) for a, c in zip(single[i][1], whole[i * 784:(i + 1) * 784]))
assert worst < 1e-5, worst  # tanh outputs in [-1, 1]; another BLAS blocking differs in the last bits only
s, h, metrics = get("/metrics")
text = metrics.decode()
batches = [l for l in text.splitlines() if l.startswith("gantry_serve_batch_rows_count")]
forwards = int(batches[0].split()[-1])
assert forwards < 48, f"48 concurrent single-row requests took {forwards} forwards: no batching"
print(f"batching: 48 concurrent single rows answered in {forwards} forwards; they equal one 48-row request within {worst:.1e}")

# 200 concurrent requests, all answered correctly.
errors = []
def many(i):
    s, h, b = get(f"/v1/sample?n=2&seed={i}&format=npy")
    if s != 200 or from_npy(b)[0] != (2, 1, 28, 28): errors.append((i, s))
threads = [threading.Thread(target=many, args=(i,)) for i in range(200)]
for t in threads: t.start()
for t in threads: t.join()
assert not errors, errors[:5]
print("200 concurrent requests: all answered")

# Malformed requests: a 4xx naming the fault; the server serves on.
bad = [
    ("/v1/forward", b"garbage", 400, "not a .npy"),
    ("/v1/forward", npy([[0.0] * 99], (1, 99)), 400, "takes [N, 100]"),
    ("/v1/forward", npy([[0.0] * 100], (1, 100))[:-8], 400, "bytes; its shape needs"),
    ("/v1/forward", npy([[0.0] * 100], (1, 100)).replace(b"<f4", b"<f8"), 400, "float32"),
    ("/v1/sample?n=0", None, 400, "n=0"),
    ("/v1/sample?n=99999999", None, 400, "n=99999999"),
    ("/v1/sample?format=gif", None, 400, "png or npy"),
    ("/v1/sample?color=red", None, 400, "unknown parameter"),
    ("/nope", None, 404, "no route /nope"),
]
for path, data, code, words in bad:
    s, h, b = get(path, data)
    assert s == code and words in json.loads(b)["error"], (path, s, b)
s, h, b = get("/v1/info", b"x")
assert s == 405 and "takes GET" in json.loads(b)["error"], (s, b)
assert get("/healthz")[0] == 200
print(f"malformed: {len(bad) + 1} bad requests, each a 4xx naming the fault; still serving")
s, h, metrics = get("/metrics")
assert 'gantry_serve_requests_total{route="/v1/forward",status="400"} 4' in metrics.decode(), metrics.decode()
PY

# A truncated body (Content-Length larger than what is sent) and a body over the cap.
python3 - "$port" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/forward HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\nabc")
reply = s.recv(4096).decode()
assert reply.startswith("HTTP/1.1 413"), reply
print("a body over the cap: 413")
PY

# SIGTERM with requests in flight (read by the server, queued or in the
# forward): each answered, exit 0. (A connection still in the kernel's
# backlog when the acceptor closes is refused, as by any server that stops
# accepting.)
python3 - "$port" "$pid" <<'PY' &
import os, signal, sys, threading, time, urllib.request
port, pid = sys.argv[1], int(sys.argv[2])
ok = []
def one(i):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/sample?n=4096&seed={i}&format=npy", timeout=60) as r:
        ok.append(r.status == 200 and len(r.read()) > 4096 * 784 * 4)
threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
for t in threads: t.start()
time.sleep(0.5)  # all 8 sent (each is a forward of 4096 rows of its own: ~0.1-0.3 s, one after another)
os.kill(pid, signal.SIGTERM)
for t in threads: t.join()
assert len(ok) == 8 and all(ok), ok
print("SIGTERM: the 8 requests in flight were answered")
PY
client=$!
wait $client || { echo "FAIL: requests in flight at SIGTERM"; exit 1; }
wait $pid || { echo "FAIL: gantry serve exited $? after SIGTERM: $(cat serve.log)"; exit 1; }
grep -q "every request answered" serve.log || { echo "FAIL: $(cat serve.log)"; exit 1; }

# A token: required on the API, not on the probes.
serve --token s3cret
python3 - "$port" <<'PY'
import sys, urllib.request, urllib.error
base = f"http://127.0.0.1:{sys.argv[1]}"
try:
    urllib.request.urlopen(base + "/v1/info", timeout=10); raise SystemExit("no token, yet 200")
except urllib.error.HTTPError as e:
    assert e.code == 401 and b"Bearer" in e.read(), e.code
req = urllib.request.Request(base + "/v1/info", headers={"Authorization": "Bearer s3cret"})
assert urllib.request.urlopen(req, timeout=10).status == 200
assert urllib.request.urlopen(base + "/healthz", timeout=10).status == 200
print("token: 401 without it, 200 with it; probes open")
PY
kill -TERM $pid; wait $pid
echo "PASS"
