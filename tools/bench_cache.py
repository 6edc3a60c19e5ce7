#!/usr/bin/env python3
"""KV cache micro-benchmark: microseconds and heap bytes per append and per read, per dtype, and the cache's
bookkeeping beyond its arena.

  .venv/bin/python tools/bench_cache.py [--runtime unix|cpython|wasm|m3|circuitpython] [--board rp2040] [--both]
                                        [--shape d64|stories|both] [--json]

--runtime m3: MicroPython on the emulated Cortex-M3 at --board's heap; times are exact instruction counts
(qemu -icount: 1 us = 1000 instructions). --both adds CPython's figures.

The device code below runs on the MicroPython unix port (heap -X heapsize=8M: a measurement, not a board
test) and optionally on CPython. Bytes are gc.mem_alloc() deltas (MicroPython only; "-" on CPython):
  append B      heap bytes one cache.append() (all layers) allocates, measured around that single call
  read B        per cache.read() of one row, averaged over a batch with the GC disabled
  bookkeeping   bytes a KVCache keeps beyond its arena (mem_alloc after construction and gc.collect(), minus
                the config object and the arena's length); construction garbage is reported apart
Appends are timed once the ring has wrapped (steady state); i4 appends are averaged over whole KIVI groups
(every G-th append quantizes the group)."""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

import _benchkit  # noqa: E402
from _benchkit import TIMING  # noqa: E402

# name: layers, heads, kv_heads, head_dim, window, sinks (max_tokens = sinks + window; i4 group 32)
SHAPES = {
    "d64": (1, 8, 2, 64, 128, 32),
    "stories": (5, 8, 4, 8, 128, 32),  # stories260K's attention shape
}

DEVICE_CODE = TIMING + r"""
from array import array
from kvedge.cache import KVCache
from kvedge.config import CacheConfig



def one_append(c, ks, vs):
    gc.collect()
    gc.disable()
    a0 = mem()
    t0 = now()
    c.append(ks, vs)
    dt = since(t0)
    a1 = mem()
    gc.enable()
    return dt, a1 - a0


def one_q8(c, kc, sc, vc, vsc):
    gc.collect()
    gc.disable()
    a0 = mem()
    t0 = now()
    c.start_token()
    for layer in range(c.L):
        c.write_q8(layer, kc, sc, vc, vsc)
    dt = since(t0)
    a1 = mem()
    gc.enable()
    return dt, a1 - a0


def reads(c, fn, out, n):
    live = array("i", bytes(4 * c.N))
    m = c.positions(live)
    best = None
    for _ in range(5):  # best of five batches: a timer or scheduler hiccup does not count
        gc.collect()
        gc.disable()
        a0 = mem()
        t0 = now()
        for i in range(n):
            fn(i % c.L, i % c.H, live[i % m], i & 1, out)
        dt = since(t0)
        a1 = mem()
        gc.enable()
        if best is None or dt < best:
            best = dt
    return best / n, (a1 - a0) / n


def bench(name, dtype, L, H, KVH, D, W, S):
    gc.collect()
    cfg = CacheConfig(L, H, KVH, D, S + W, dtype, window=W, sinks=S)
    gc.collect()
    a0 = mem()
    gc.disable()
    c = KVCache(cfg)
    a_raw = mem()
    gc.enable()
    gc.collect()
    a1 = mem()
    n = KVH * D
    ks = [array("f", [((i * 37 + l) % 200 - 100) / 40.0 for i in range(n)]) for l in range(L)]
    vs = [array("f", [((i * 53 + l) % 180 - 90) / 30.0 for i in range(n)]) for l in range(L)]
    while c.n_seen < S + W + 8:  # the ring has wrapped
        c.append(ks, vs)
    G = cfg.group if dtype == "i4" else 1
    while (c.n_seen - S) % G:  # i4: start on a group boundary so whole groups are averaged
        c.append(ks, vs)
    reps = max(G, 32)
    best = None
    for _ in range(5):  # best of five runs of whole groups: other load on the machine does not count
        tt = ta = 0
        amax = 0
        for _ in range(reps):
            dt, da = one_append(c, ks, vs)
            tt += dt
            ta += da
            if da > amax:
                amax = da
        if best is None or tt < best:
            best = tt
    tt = best
    out = array("f", bytes(4 * D))
    rt, ra = reads(c, c.read, out, 200)
    r = {"shape": name, "dtype": dtype, "arena": len(c.arena), "book": a1 - a0 - len(c.arena),
         "transient": a_raw - a1, "append_us": tt / reps, "append_b": ta / reps, "append_bmax": amax,
         "read_us": rt, "read_b": ra}
    if dtype == "i8":
        kc = array("b", [(i * 7) % 255 - 127 for i in range(n)])
        sc = array("H", [0x2C00] * KVH)
        best = None
        for _ in range(3):
            qt = qa = 0
            for _ in range(reps):
                dt, da = one_q8(c, kc, sc, kc, sc)
                qt += dt
                qa += da
            if best is None or qt < best:
                best = qt
        qt = best
        codes = array("b", bytes(D))
        ct, ca = reads(c, c.read_codes, codes, 200)
        r["q8_us"] = qt / reps
        r["q8_b"] = qa / reps
        r["codes_us"] = ct
        r["codes_b"] = ca
    if not HAS_MEM:
        for k in ("book", "transient", "append_b", "append_bmax", "read_b", "q8_b", "codes_b"):
            if k in r:
                r[k] = None
    keys = ["shape", "dtype", "arena", "book", "transient", "append_us", "append_b", "append_bmax", "read_us",
            "read_b", "q8_us", "q8_b", "codes_us", "codes_b"]
    parts = []
    for k in keys:
        if k in r:
            v = r[k]
            parts.append('"%s":%s' % (k, '"%s"' % v if isinstance(v, str) else ("null" if v is None else v)))
    print("{" + ",".join(parts) + "}")
    del c
    gc.collect()


for dt in ("f32", "f16", "i8", "i4"):
    for name, shape in SHAPES:
        bench(name, dt, *shape)
"""


def run(runtime, shapes, heap):
    code = "SHAPES = %r\n" % ([(n, SHAPES[n]) for n in shapes],) + DEVICE_CODE
    rc, out = _benchkit.run(runtime, code, heap)
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    if rc != 0 or not rows:
        raise SystemExit("%s failed (exit %s):\n%s" % (runtime, rc, out[-3000:]))
    for r in rows:
        r["runtime"] = runtime
    return rows


def _f(v, fmt="%.0f"):
    return "-" if v is None else fmt % v


def table(rows):
    m3 = any(_benchkit.is_m3(r["runtime"]) for r in rows)
    t = "instr" if m3 else "us"
    head = ["runtime", "shape", "dtype", "arena B", "bookkeeping B", "construction garbage B", "append " + t,
            "append B", "read " + t, "read B", "q8 append " + t, "q8 append B", "read_codes " + t, "read_codes B"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def tm(r, k, fmt="%.0f"):
        v = r.get(k)
        if v is not None and _benchkit.is_m3(r["runtime"]):
            return "{:,.0f}".format(_benchkit.instructions(r["runtime"], v))
        return _f(v, fmt)
    for r in rows:
        lines.append("| " + " | ".join([
            r["runtime"], r["shape"], r["dtype"], "{:,}".format(r["arena"]), _f(r["book"]), _f(r["transient"]),
            tm(r, "append_us"), _f(r["append_b"]), tm(r, "read_us", "%.1f"), _f(r["read_b"]),
            tm(r, "q8_us"), _f(r.get("q8_b")), tm(r, "codes_us", "%.1f"), _f(r.get("codes_b"))]) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _benchkit.add_arguments(ap)
    ap.add_argument("--both", action="store_true", help="also on CPython (the old --runtime both)")
    ap.add_argument("--shape", choices=tuple(SHAPES) + ("both",), default="both")
    ap.add_argument("--heap", type=int, default=8 * 1024 * 1024,
                    help="unix/wasm port heap bytes (default 8 MiB); m3 runs at --board's heap")
    ap.add_argument("--json", action="store_true", help="print the raw rows as JSON")
    a = ap.parse_args(argv)
    shapes = list(SHAPES) if a.shape == "both" else [a.shape]
    rts = (a.runtime, "cpython") if a.both and a.runtime != "cpython" else (a.runtime,)
    rows = []
    for rt in rts:
        heap = _benchkit.heap_for(rt, a.board, a.heap)
        if not a.json:
            print(_benchkit.describe(rt, a.board, heap))
        rows += run(rt, shapes, heap)
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        print(table(rows))
        print("shapes: " + "; ".join("%s = layers %d, heads %d, kv_heads %d, head_dim %d, window %d, sinks %d"
                                     % ((n,) + SHAPES[n]) for n in shapes) + "; align 64, i4 group 32 (KIVI)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
