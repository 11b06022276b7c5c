#!/usr/bin/env python3
"""Derive activation records from a real one (written by ref-forward --record), with gguf-py,
for the compare tests: multi-rank copies with an injected fault, and malformed records.

  record_fixture.py ranks IN OUT N [--fault RANK:POINT:SCALE] [--precision P] [--backend B]
      N ranks that all hold IN's captures; with --fault, rank RANK gets relative noise of
      SCALE at POINT, growing through every later capture point (as a real fault spreads).
  record_fixture.py drop IN OUT POINT        IN without POINT (a missing capture)
  record_fixture.py reshape IN OUT POINT     POINT with its last row cut (a shape mismatch)
  record_fixture.py f16 IN OUT               every capture stored as F16 (not a record)
  record_fixture.py model IN OUT             a GGUF that is no record (no general.type)
  record_fixture.py tokens IN OUT            IN with other token ids
  record_fixture.py expert IN OUT POINT T    router capture POINT: token T picks another expert
"""
import sys

import numpy as np
import gguf


def read(path):
    r = gguf.GGUFReader(path)
    meta = {}
    for f in r.fields.values():
        if not f.name.startswith("record."):
            continue
        v = f.contents()
        meta[f.name] = (f.types[0], v)
    caps = []
    for t in r.tensors:
        # ggml ne = [cols, rows]: numpy shape (rows, cols)
        shape = tuple(int(x) for x in reversed(list(t.shape)))
        caps.append((t.name, np.array(t.data, dtype=np.float32).reshape(shape)))
    return meta, caps


def write(path, meta, caps, dtype=np.float32, record=True):
    w = gguf.GGUFWriter(path, "record")
    if record:
        w.add_type("ggufkit.record")
    for k, (vt, v) in meta.items():
        if vt == gguf.GGUFValueType.STRING:
            w.add_string(k, v)
        elif vt == gguf.GGUFValueType.UINT32:
            w.add_uint32(k, int(v))
        elif vt == gguf.GGUFValueType.ARRAY:
            w.add_array(k, [int(x) for x in v])
        else:
            raise SystemExit(f"unexpected type of {k}: {vt}")
    for name, a in caps:
        w.add_tensor(name, a.astype(dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    mode, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
    meta, caps = read(src)
    args = sys.argv[4:]
    if mode == "ranks":
        n = int(args[0])
        fault = None
        i = 1
        while i < len(args):
            if args[i] == "--fault":
                r, p, s = args[i + 1].split(":")
                fault = (int(r), p, float(s))
            elif args[i] == "--precision":
                meta["record.precision"] = (gguf.GGUFValueType.STRING, args[i + 1])
            elif args[i] == "--backend":
                meta["record.backend"] = (gguf.GGUFValueType.STRING, args[i + 1])
            else:
                raise SystemExit(f"unknown option {args[i]}")
            i += 2
        meta["record.tp"] = (gguf.GGUFValueType.UINT32, n)
        meta["record.ranks"] = (gguf.GGUFValueType.UINT32, n)
        if fault:
            meta["record.fault"] = (gguf.GGUFValueType.STRING, f"noise {fault[2]} at {fault[1]} rank {fault[0]}")
        out = []
        rng = np.random.default_rng(7)
        for r in range(n):
            hit = False
            scale = 0.0
            for name, a in caps:
                b = a.copy()
                if fault and r == fault[0] and (hit or name == fault[1]):
                    scale = fault[2] if not hit else min(scale * 1.6, 2.0)
                    hit = True
                    if not name.endswith("moe_experts"):
                        b = b + scale * np.abs(b).mean() * rng.standard_normal(b.shape).astype(np.float32)
                elif not name.endswith("moe_experts"):
                    # float32 rounding-sized noise on the healthy ranks: lines are not all zero
                    b = b * (1 + 3e-8 * (r + 1) * rng.standard_normal(b.shape)).astype(np.float32)
                out.append((f"{name}@{r}", b))
        caps = out
    elif mode == "drop":
        caps = [c for c in caps if c[0] != args[0]]
    elif mode == "reshape":
        caps = [(nm, a[:-1] if nm == args[0] else a) for nm, a in caps]
    elif mode == "expert":
        # token T of router capture POINT chooses another expert in its last slot
        point, t = args[0], int(args[1])
        out = []
        for nm, a in caps:
            if nm == point:
                a = a.copy()
                n_exp = int(a.max()) + 2
                new = (a[t, -1] + 1) % n_exp
                while new in a[t]:
                    new = (new + 1) % n_exp
                a[t, -1] = new
            out.append((nm, a))
        caps = out
    elif mode == "tokens":
        meta["record.tokens"] = (gguf.GGUFValueType.ARRAY, [x + 1 for x in meta["record.tokens"][1]])
    elif mode == "f16":
        write(dst, meta, caps, dtype=np.float16)
        return
    elif mode == "model":
        write(dst, {}, caps, record=False)
        return
    else:
        raise SystemExit(f"unknown mode {mode}")
    write(dst, meta, caps)


if __name__ == "__main__":
    main()
