#!/usr/bin/env python3
"""Read a PNG screenshot with nothing but zlib, and answer questions about its colours.

  png_colours.py SHOT.png     prints JSON: width, height, and for each named colour the
                              pixel count, the rows it occupies (min, max) and the rows
                              where it covers at least 200 pixels (lines, banners).
  import png_colours          decode() and pixels() for finer questions.
Colours are matched within a small distance (anti-aliasing keeps line centres exact).
"""
import json
import struct
import sys
import zlib

COLOURS = {
    "rank0": (0x1F, 0x77, 0xB4),
    "rank1": (0xFF, 0x7F, 0x0E),
    "rank2": (0x2C, 0xA0, 0x2C),
    "rank3": (0x94, 0x67, 0xBD),
    "red": (0xD6, 0x27, 0x28),
    "pass": (0x2E, 0x7D, 0x32),
}


def decode(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
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
                pr = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[x] = (line[x] + pr) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def pixels(rows, bpp, w, colour, tol=12):
    """(x, y) of every pixel within tol (sum of channel differences) of colour."""
    r, g, b = COLOURS[colour] if isinstance(colour, str) else colour
    out = []
    for y, line in enumerate(rows):
        for x in range(w):
            i = x * bpp
            if abs(line[i] - r) + abs(line[i + 1] - g) + abs(line[i + 2] - b) <= tol:
                out.append((x, y))
    return out


def main():
    w, h, bpp, rows = decode(sys.argv[1])
    out = {"width": w, "height": h}
    for name in COLOURS:
        px = pixels(rows, bpp, w, name)
        per_row = {}
        for x, y in px:
            per_row[y] = per_row.get(y, 0) + 1
        out[name] = {"count": len(px),
                     "ymin": min((y for _, y in px), default=None),
                     "ymax": max((y for _, y in px), default=None),
                     "full_rows": sorted(y for y, n in per_row.items() if n >= 200)}
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
