#!/usr/bin/env bash
# `gantry serve` over real HTTP (Python's urllib, no numpy): a checkpoint of
# the demo GAN served on a free port; every route; /v1/sample's PNG is the
# one `gantry sample` writes for that seed, byte for byte; /v1/forward of 48
# single-row requests sent at once (gathered by the dynamic batcher) equals
# one 48-row request within float32 rounding; 200 concurrent requests all
# answered; malformed requests are a 4xx naming the fault and the server
# serves on (bad JSON, truncated bodies, conflicting lengths, bad headers,
# bad queries); JSON in and out; pipelining; a stalled client stalls no one
# else; a request timeout is 504; --watch swaps in the checkpoints of a run
# training beside it with no failed request; a bearer token is required when
# set; SIGTERM while requests are in flight answers them all and exits 0.
#   serve_test.sh GANTRY CONFIG WORK_DIR
set -euo pipefail
gantry=$(realpath "$1") config=$(realpath "$2") work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$gantry" train "$config" trainer.max_steps=50 trainer.progress=none monitor.enabled=false >/dev/null
ckpt=runs/gan_fashion_mnist/latest/checkpoints/step_0000050.ckpt
"$gantry" sample -c "$ckpt" -n 16 --seed 7 -o sample.png >/dev/null

pid= load=
trap 'kill $pid $load 2>/dev/null || true' EXIT  # a failure leaves no server behind
trap 'echo "FAIL: serve_test.sh line $LINENO (exit $?); the server said: $(tail -3 serve.log 2>/dev/null)"' ERR
serve() {  # ARGS... -> $pid, $port
  "$gantry" serve runs/gan_fashion_mnist/latest --port 0 "$@" > serve.log 2>&1 &
  pid=$!
  for _ in $(seq 600); do  # a loaded machine (the suite runs two tests at once) may take seconds
    port=$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\) .*|\1|p' serve.log)
    [[ -n $port ]] && return 0
    kill -0 $pid 2>/dev/null || { echo "FAIL: gantry serve exited: $(cat serve.log)"; exit 1; }
    sleep 0.1
  done
  echo "FAIL: gantry serve printed no address in 60 s: $(cat serve.log)"; exit 1
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

# JSON in and out for small N: the same rows as the .npy answer (the shortest text naming each float32).
js = {"Content-Type": "application/json"}
s, h, b = get("/v1/forward", json.dumps({"input": rows[:3]}).encode(), js)
assert s == 200 and h["Content-Type"] == "application/json", (s, b[:200])
answer = json.loads(b)
assert answer["shape"] == [3, 1, 28, 28], answer["shape"]
flat = [x for img in answer["output"] for ch in img for r in ch for x in r]
flat = list(struct.unpack(f"<{len(flat)}f", struct.pack(f"<{len(flat)}f", *flat)))  # read back as float32
s, h, b = get("/v1/forward", npy(rows[:3], (3, 100)))
assert flat == list(from_npy(b)[1]), "JSON and .npy answers differ"
assert h["X-Gantry-Step"] == "50" and h["X-Gantry-Checkpoint"].endswith("step_0000050.ckpt"), dict(h)
s, h, b = get("/v1/forward", json.dumps(rows[:2]).encode(), js)  # a bare array works too
assert s == 200 and json.loads(b)["shape"] == [2, 1, 28, 28]
s, h, b = get("/v1/forward?format=png", npy(rows[:4], (4, 100)))
assert s == 200 and b[:8] == b"\x89PNG\r\n\x1a\n", (s, b[:40])
s, h, b = get("/v1/sample?n=2&seed=3&format=json")
assert s == 200 and json.loads(b)["shape"] == [2, 1, 28, 28]
print("JSON: a forward's JSON answer equals its .npy answer; format=png draws a grid")
bad_json = [
    (b'{"input": [[1, 2], [3]]}', "not rectangular"),
    (b'{"input": [[0.5' + b"\xff" + b']]}', "not UTF-8 (byte 15)"),
    (b'{"inputs": [[1]]}', 'unknown key \\"inputs\\"'),
    (b'{"input": [[1e999]]}', "not a finite float32"),
    (b'[[1, 2]] x', "something after the value"),
    (b'[' * 20 + b']' * 20, "nested deeper than 8"),
    (b'{"input": [[1, 2]]}', "takes [N, 100]"),
    (b'', "an array expected"),
]
for body, words in bad_json:
    s, h, b = get("/v1/forward", body, js)
    assert s == 400 and words in b.decode(), (body[:40], s, b)
for path, words in [("/v1/sample?n=2&n=3", "given twice"), ("/v1/sample?n=%zz", "%-escape"),
                    ("/v1/sample?n=%31%36&format=npy", None)]:
    s, h, b = get(path)
    if words: assert s == 400 and words in json.loads(b)["error"], (path, s, b)
    else: assert s == 200 and from_npy(b)[0] == (16, 1, 28, 28), (path, s)
print(f"malformed JSON and queries: {len(bad_json) + 2} more, each a 400 naming the fault")
PY

# docs/serve.md's curl lines, as written there (the port replaced): each must
# succeed (curl -f) and write what it says.
docs=$(dirname "$(readlink -f "$0")")/../docs/serve.md
python3 - <<'PY'
import json, random, struct
random.seed(1)
rows = [[random.gauss(0, 1) for _ in range(100)] for _ in range(8)]
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (8, 100), }"
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
open("noise.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() +
                              struct.pack("<800f", *[x for r in rows for x in r]))
json.dump({"input": rows[:2]}, open("noise.json", "w"))
PY
lines=$(sed -n '/<!-- serve_test.sh runs these -->/,/<!-- end -->/p' "$docs" | grep '^curl ')
[[ $(wc -l <<<"$lines") -ge 10 ]] || { echo "FAIL: docs/serve.md's curl lines not found"; exit 1; }
n=0
while read -r line; do
  cmd=${line//localhost:8080/127.0.0.1:$port}
  bash -c "${cmd/curl -s /curl -sf }" > curl.out || { echo "FAIL: docs/serve.md: $line"; exit 1; }
  n=$((n + 1))
done <<<"$lines"
python3 - <<'PY'
import json
assert open("grid.png", "rb").read() == open("sample.png", "rb").read(), "the documented grid is not gantry sample's"
assert json.load(open("x.json"))["shape"] == [2, 1, 28, 28]
assert json.load(open("out.json"))["shape"] == [2, 1, 28, 28]
assert open("out.png", "rb").read()[:4] == b"\x89PNG" and open("out.npy", "rb").read()[:6] == b"\x93NUMPY"
PY
echo "docs/serve.md: its $n curl lines ran as written"

# A truncated body (Content-Length larger than what is sent) and a body over the cap.
python3 - "$port" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/forward HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\nabc")
reply = s.recv(4096).decode()
assert reply.startswith("HTTP/1.1 413"), reply
print("a body over the cap: 413")

def exchange(raw, half_close=False):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    s.sendall(raw)
    if half_close: s.shutdown(socket.SHUT_WR)
    reply = b""
    while True:
        try:
            part = s.recv(65536)
        except socket.timeout:
            break
        if not part: break
        reply += part
    return reply.decode(errors="replace")

# A body shorter than its Content-Length, the client done sending.
r = exchange(b"POST /v1/forward HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n\x93NUMPY", True)
assert r.startswith("HTTP/1.1 400") and "malformed request" in r, r
# Two Content-Lengths that disagree; a header line without a colon; a bad method.
r = exchange(b"POST /v1/forward HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef")
assert r.startswith("HTTP/1.1 400"), r
r = exchange(b"GET /healthz HTTP/1.1\r\nHost x\r\n\r\n")
assert r.startswith("HTTP/1.1 400"), r
# Pipelined: three requests in one write, answered in order on one connection.
r = exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/sample?n=1&format=npy HTTP/1.1\r\nHost: x\r\n\r\n"
             b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
import re
codes = re.findall(r"HTTP/1\.1 (\d{3}) ", r)  # each answer's status line follows the last body directly
assert codes == ["200", "200", "404"], codes
print("truncated body, conflicting Content-Length, a bad header: 400; three pipelined requests answered in order")

# A client that sends half a request and stalls holds only its own socket.
import time, urllib.request
stalled = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
stalled.sendall(b"POST /v1/forward HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
t = time.monotonic()
for i in range(20):
    assert urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/sample?n=1&format=npy", timeout=10).status == 200
assert time.monotonic() - t < 5, time.monotonic() - t
stalled.close()
print("a stalled client: 20 other requests answered meanwhile")
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

# A request timeout: 24 forwards of 1024 rows at once, computed one at a
# time, each allowed 200 ms: the late ones are 504 naming the limit and are
# not computed; the server serves on.
serve --max-batch 1 --request-timeout-ms 200
python3 - "$port" <<'PY'
import json, sys, threading, time, urllib.request, urllib.error
base = f"http://127.0.0.1:{sys.argv[1]}"
codes = []
def one(i):
    try:
        with urllib.request.urlopen(f"{base}/v1/sample?n=1024&seed={i}&format=npy", timeout=60) as r:
            r.read(); codes.append(r.status)
    except urllib.error.HTTPError as e:
        assert e.code == 504 and "no answer within 200 ms" in json.loads(e.read())["error"], e.code
        codes.append(504)
threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
for t in threads: t.start()
for t in threads: t.join()
def metric(name):
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    return int(float([l for l in text.splitlines() if l.startswith(name)][0].split()[-1]))
while metric("gantry_serve_queue_depth") > 0: time.sleep(0.05)
time.sleep(0.5)  # a forward begun before its request timed out ends
forwards, timeouts = metric("gantry_serve_batch_rows_count"), metric("gantry_serve_timeouts_total")
assert len(codes) == 24 and 504 in codes and timeouts == codes.count(504), (codes, timeouts)
assert forwards + codes.count(504) >= 24 and forwards < 24, (forwards, codes)
assert urllib.request.urlopen(base + "/healthz", timeout=10).status == 200
print(f"request timeout: {codes.count(504)} of 24 were 504, {forwards} forwards computed; still serving")
PY
kill -TERM $pid; wait $pid

# --watch under load: the experiment directory served while a resumed run
# trains on; clients sending forwards back to back see no failed request, the
# step in the answers' headers only rises, and the newest checkpoint is
# swapped in (its /v1/sample then is gantry sample's of that checkpoint).
"$gantry" serve runs/gan_fashion_mnist --port 0 --watch --watch-interval-ms 100 > serve.log 2>&1 &
pid=$!
for _ in $(seq 600); do
  port=$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\) .*|\1|p' serve.log); [[ -n $port ]] && break; sleep 0.1
done
[[ -n $port ]] || { echo "FAIL: $(cat serve.log)"; exit 1; }
python3 - "$port" > load.log 2>&1 <<'PY' &
import http.client, struct, sys, threading, time, os
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 100), }"
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
body = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<200f", *([0.1] * 200))
results, stop = [], time.monotonic() + 60
def client():
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
    while time.monotonic() < stop and not os.path.exists("load.stop"):
        c.request("POST", "/v1/forward", body=body)
        r = c.getresponse(); r.read()
        results.append((r.status, int(r.getheader("X-Gantry-Step", "-1"))))
threads = [threading.Thread(target=client) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
bad = [s for s, _ in results if s != 200]
steps = [st for _, st in results]
print(len(results), len(bad), sorted(set(steps)))
assert not bad, bad[:5]
PY
load=$!
sleep 1
"$gantry" train "$config" trainer.max_steps=100 trainer.resume=auto trainer.progress=none monitor.enabled=false >/dev/null
for _ in $(seq 600); do grep -q "now serving .*step_0000100.ckpt" serve.log && break; sleep 0.1; done
sleep 0.5; touch load.stop
wait $load || { echo "FAIL: requests failed during the swap: $(cat load.log)"; exit 1; }
read -r total failed steps < load.log
grep -q "now serving .*step_0000100.ckpt (step 100; was" serve.log || { echo "FAIL: no swap: $(cat serve.log)"; exit 1; }
ckpt100=runs/gan_fashion_mnist/latest/checkpoints/step_0000100.ckpt
"$gantry" sample -c "$ckpt100" -n 16 --seed 7 -o sample100.png >/dev/null
python3 - "$port" <<'PY'
import json, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
info = json.loads(urllib.request.urlopen(base + "/v1/info", timeout=10).read())
assert info["step"] == 100 and info["swaps"] >= 1, info
with urllib.request.urlopen(base + "/v1/sample?n=16&seed=7", timeout=10) as r:
    assert r.read() == open("sample100.png", "rb").read() and r.headers["X-Gantry-Step"] == "100"
PY
echo "watch: $total forwards during the resumed run, $failed failed, steps seen $steps; then gantry sample's grid of step 100"
kill -TERM $pid; wait $pid

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
