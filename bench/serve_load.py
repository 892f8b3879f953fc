#!/usr/bin/env python3
"""A load generator for gantry serve (stdlib only): C client threads, each
sending /v1/forward requests of N rows of noise back to back over one
keep-alive connection for S seconds; prints requests/s, samples/s, p50/p99.
   serve_load.py PORT CONCURRENCY ROWS SECONDS"""
import http.client, random, struct, sys, threading, time

port, conc, rows, seconds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 100), }" % rows
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
random.seed(0)
body = (b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() +
        struct.pack(f"<{rows * 100}f", *[random.gauss(0, 1) for _ in range(rows * 100)]))
lat, errors = [], []
stop = time.monotonic() + seconds

def client():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while time.monotonic() < stop:
        t = time.monotonic()
        c.request("POST", "/v1/forward", body=body)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            errors.append(r.status)
        lat.append(time.monotonic() - t)

start = time.monotonic()
threads = [threading.Thread(target=client) for _ in range(conc)]
for t in threads: t.start()
for t in threads: t.join()
wall = time.monotonic() - start
lat.sort()
p = lambda q: 1000 * lat[min(len(lat) - 1, int(q * len(lat)))]
print(f"{conc} {rows} {len(lat) / wall:.0f} {len(lat) * rows / wall:.0f} {p(0.5):.1f} {p(0.99):.1f} {len(errors)}")
