#!/usr/bin/env python3
"""KV cache micro-benchmark: microseconds and heap bytes per append and per read, per dtype, and the cache's
bookkeeping beyond its arena.

  .venv/bin/python tools/bench_cache.py [--runtime unix|cpython|wasm|m3|circuitpython|both] [--board rp2040] [--both]
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



GC_OFF = [True]  # False where one append's garbage outgrows the heap with collection off (see bench)


def one_append(c, ks, vs):
    gc.collect()
    if GC_OFF[0]:
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


def appends(c, ks, vs, S, W, G, reps):
    while c.n_seen < S + W + 8:  # the ring has wrapped
        c.append(ks, vs)
    while (c.n_seen - S) % G:  # i4: start on a group boundary so whole groups are averaged
        c.append(ks, vs)
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
    return best, ta, amax


def bench(name, dtype, L, H, KVH, D, W, S):
    gc.collect()
    cfg = CacheConfig(L, H, KVH, D, S + W, dtype, window=W, sinks=S, align=ALIGN)
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
    G = cfg.group if dtype == "i4" else 1
    reps = max(G, 32)
    GC_OFF[0] = True
    try:
        tt, ta, amax = appends(c, ks, vs, S, W, G, reps)
    except MemoryError:
        # one append's garbage outgrows this heap with collection off (an i4 group closing on a board's heap):
        # time the appends with collection on, on a fresh cache; their bytes are not known then
        gc.enable()
        c = None
        gc.collect()
        c = KVCache(cfg)
        GC_OFF[0] = False
        tt, ta, amax = appends(c, ks, vs, S, W, G, reps)
        ta = amax = None
        GC_OFF[0] = True
    out = array("f", bytes(4 * D))
    rt, ra = reads(c, c.read, out, READS)
    r = {"shape": name, "dtype": dtype, "arena": len(c.arena), "book": a1 - a0 - len(c.arena),
         "transient": a_raw - a1, "append_us": tt / reps, "append_b": None if ta is None else ta / reps,
         "append_bmax": amax,
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
        ct, ca = reads(c, c.read_codes, codes, READS)
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
        try:
            bench(name, dt, *shape)
        except MemoryError:  # a board's heap: this arena (or its working set) does not fit; say so, go on
            gc.enable()
            gc.collect()
            print('{"shape":"%s","dtype":"%s","nofit":1}' % (name, dt))
"""


def shape_table(window=None, sinks=None):
    """SHAPES with the window and sinks replaced where given."""
    return {n: v[:4] + (v[4] if window is None else window, v[5] if sinks is None else sinks)
            for n, v in SHAPES.items()}


def run(runtime, shapes, heap, table_=None, reads=200, align=64):
    table_ = table_ or SHAPES
    code = "SHAPES = %r\nREADS = %d\nALIGN = %d\n" % ([(n, table_[n]) for n in shapes], reads, align) + DEVICE_CODE
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
        if r.get("nofit"):
            return "-"
        v = r.get(k)
        if v is not None and _benchkit.is_m3(r["runtime"]):
            return "{:,.0f}".format(_benchkit.instructions(r["runtime"], v))
        return _f(v, fmt)
    for r in rows:
        if r.get("nofit"):
            lines.append("| %s | %s | %s | does not fit the heap (MemoryError) |%s" % (
                r["runtime"], r["shape"], r["dtype"], " |" * (len(head) - 4)))
            continue
        lines.append("| " + " | ".join([
            r["runtime"], r["shape"], r["dtype"], "{:,}".format(r["arena"]), _f(r["book"]), _f(r["transient"]),
            tm(r, "append_us"), _f(r["append_b"]), tm(r, "read_us", "%.1f"), _f(r["read_b"]),
            tm(r, "q8_us"), _f(r.get("q8_b")), tm(r, "codes_us", "%.1f"), _f(r.get("codes_b"))]) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _benchkit.add_arguments(ap, extra=("both",))
    ap.add_argument("--both", action="store_true", help="also on CPython (--runtime both = unix --both)")
    ap.add_argument("--shape", choices=tuple(SHAPES) + ("both",), default="both")
    ap.add_argument("--window", type=int, help="ring slots (default 128; 64 on m3 (i4 needs residual + group), so more arenas fit a board's "
                    "heap: per-call costs do not depend on it)")
    ap.add_argument("--sinks", type=int, help="sink slots (default 32)")
    ap.add_argument("--align", type=int, default=64, help="row alignment in bytes (default 64; 0 = none: "
                    "stories' 8-byte rows padded to 64 take 8x the arena)")
    ap.add_argument("--reads", type=int, help="reads per timed batch, GC off (default 200; 16 on m3, whose "
                    "heap holds only that many reads' garbage)")
    ap.add_argument("--heap", type=int, default=8 * 1024 * 1024,
                    help="unix/wasm port heap bytes (default 8 MiB); m3 runs at --board's heap")
    ap.add_argument("--json", action="store_true", help="print the raw rows as JSON")
    a = ap.parse_args(argv)
    shapes = list(SHAPES) if a.shape == "both" else [a.shape]
    if a.runtime == "both":
        a.runtime, a.both = "unix", True
    small = _benchkit.is_m3(a.runtime)
    table_ = shape_table(a.window if a.window is not None else (64 if small else None), a.sinks)
    reads = a.reads or (16 if small else 200)
    rts = (a.runtime, "cpython") if a.both and a.runtime != "cpython" else (a.runtime,)
    rows = []
    for rt in rts:
        heap = _benchkit.heap_for(rt, a.board, a.heap)
        if not a.json:
            print(_benchkit.describe(rt, a.board, heap))
        rows += run(rt, shapes, heap, table_, reads, a.align)
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        print(table(rows))
        print("shapes: " + "; ".join("%s = layers %d, heads %d, kv_heads %d, head_dim %d, window %d, sinks %d"
                                     % ((n,) + table_[n]) for n in shapes) + "; align %d, i4 group 32 (KIVI)" % a.align)
    return 0


if __name__ == "__main__":
    sys.exit(main())
