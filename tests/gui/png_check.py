#!/usr/bin/env python3
"""Checks on screenshots, standard library only (the test machines have no PIL).

  png_check.py stats SHOT          -> "W H ORANGE BLUE": size and pixels close to the
                                      first two series colours (g_loss orange, d_loss blue)
  png_check.py colours SHOT RRGGBB ... -> pixels close to each colour, one count each
  png_check.py contains SHOT GRID  -> the scale (1-4) at which a middle row of the
                                      GRID PNG appears pixel-exact in SHOT; exit 1 if nowhere
"""
import struct
import sys
import zlib

CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # PNG colour type -> bytes per pixel (8-bit)


def decode(path):
    """Returns (width, height, rows of RGB bytes)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG")
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in CHANNELS or interlace:
                raise SystemExit(f"{path}: unsupported PNG (depth {depth}, colour type {ctype})")
            bpp = CHANNELS[ctype]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride = zlib.decompress(idat), w * bpp
    prev, rows, i = bytearray(stride), [], 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        if bpp in (1, 2):  # grey (+alpha) -> RGB
            rows.append(bytes(v for x in range(0, stride, bpp) for v in (line[x],) * 3))
        else:
            rows.append(bytes(v for x in range(0, stride, bpp) for v in line[x:x + 3]))
    return w, h, rows


def stats(path):
    w, h, rows = decode(path)
    near = lambda r, x, c: all(abs(r[x + k] - c[k]) < 40 for k in range(3))
    orange = sum(near(r, x, (255, 127, 14)) for r in rows for x in range(0, len(r), 3))
    blue = sum(near(r, x, (31, 119, 180)) for r in rows for x in range(0, len(r), 3))
    print(w, h, orange, blue)


def colours(path, *hexes):
    _, _, rows = decode(path)
    wanted = [tuple(int(h[i:i + 2], 16) for i in (0, 2, 4)) for h in hexes]
    counts = [0] * len(wanted)
    for r in rows:
        for x in range(0, len(r), 3):
            for k, c in enumerate(wanted):
                if abs(r[x] - c[0]) < 40 and abs(r[x + 1] - c[1]) < 40 and abs(r[x + 2] - c[2]) < 40:
                    counts[k] += 1
    print(*counts)


def contains(shot, grid):
    _, _, rows = decode(shot)
    gw, gh, grows = decode(grid)
    row = grows[gh // 2 + 3]  # a row through the middle of the tiles
    for k in range(1, 5):
        want = b"".join(row[x:x + 3] * k for x in range(0, len(row), 3))
        for r in rows:
            at = r.find(want)
            if at >= 0 and at % 3 == 0:
                print(k)
                return
    raise SystemExit(f"{shot}: the grid {grid} is not shown (no exact row at scale 1-4)")


if __name__ == "__main__":
    {"stats": stats, "colours": colours, "contains": contains}[sys.argv[1]](*sys.argv[2:])
