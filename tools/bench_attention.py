#!/usr/bin/env python3
"""Attention benchmark on the MicroPython unix port: multiply-accumulates per microsecond of one decode step,
for the integer path with each kernel kind (plain, native, viper) and the float path, and heap bytes per step.

  .venv/bin/python tools/bench_attention.py [--tokens 64,256,1024] [--tile 32] [--dtype i8] [--profile]
                                            [--runtime unix|cpython|wasm|m3] [--board rp2040] [--rounds 5]
                                            [--reps 5] [--json]

--runtime m3: MicroPython on the emulated Cortex-M3 at --board's heap (rp2040: 215,040 bytes); steps are
counted in instructions (exact under qemu -icount: one round, one rep), the caches must fit that heap (i8 at
256 tokens is one 67.5 KB block: use e.g. --tokens 64,128,256).

Shape (issue 4): 8 heads, 2 KV heads, head_dim 64, one layer, an i8 cache filled with pre-quantized rows.
MACs per step = heads * tokens * head_dim * 2 (q.k and the weighted sum of v). Times are the best of
--reps steps in the best of --rounds rounds over all points (the machine is shared); bytes are gc.mem_alloc() deltas around one warm step, GC disabled
(the float path's only up to 256 tokens: it allocates a boxed float per multiply-add).
--profile counts each kernel's calls in one step, then times each kernel alone (its first call of the
step, replayed on copies of its arguments): kernel time per step = calls x time per call; the rest of the
step is Python-level work in attention.step_q8 (per tile and per head bookkeeping). Replayed kernels ran
1.3-1.8x slower than inside a step here, so the profile gives proportions between kernels; for the
Python-level share compare steps with different --tile values (per-tile overhead) instead."""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

import _benchkit  # noqa: E402
from _benchkit import TIMING  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 8, 2, 64

DEVICE_CODE = TIMING + r"""
from array import array
from kvedge import kernels
from kvedge.attention import Attention, quantize_query
from kvedge.cache import KVCache
from kvedge.config import CacheConfig



class Lcg:
    def __init__(self, s):
        self.s = s

    def next(self):
        self.s = (self.s * 1103515245 + 12345) & 0x3FFFFFFF
        return self.s >> 10


class Rec:
    # Sits between an attention object and its kernel module: counts the calls of each kernel and keeps a copy
    # of the arrays of its first call (a full tile), so that call can be replayed alone and timed.
    def __init__(self, mod):
        self.mod = mod
        self.n = {}
        self.first = {}

    def __getattr__(self, name):
        f = getattr(self.mod, name)
        n, first = self.n, self.first

        def rec(*a):
            n[name] = n.get(name, 0) + 1
            if name not in first:
                first[name] = [x[:] if isinstance(x, array) else x for x in a]
            return f(*a)
        return rec


def call(f, a):
    if len(a) == 2:
        return f(a[0], a[1])
    if len(a) == 3:
        return f(a[0], a[1], a[2])
    return f(a[0], a[1], a[2], a[3])


def replay(mod, name, args, reps):
    # microseconds per call of kernel `name` on its recorded first-call arguments (fresh copies each call:
    # kernels write into their arrays); the best of three batches
    f = getattr(mod, name)
    copies = [[x[:] if isinstance(x, array) else x for x in args] for _ in range(reps)]
    t = None
    for _ in range(3):
        t0 = now()
        for cp in copies:
            call(f, cp)
        dt = since(t0)
        if t is None or dt < t:
            t = dt
        copies = [[x[:] if isinstance(x, array) else x for x in args] for _ in range(reps)]
    return t / reps


def best(fn, a, b, c, d, e, reps):
    t = None
    for _ in range(reps):
        t0 = now()
        fn(a, b, c, d, e)
        dt = since(t0)
        if t is None or dt < t:
            t = dt
    return t


def alloc(fn, a, b, c, d, e):
    gc.collect()
    gc.disable()
    a0 = mem()
    try:
        fn(a, b, c, d, e)
    except MemoryError:  # the step's garbage outgrows the heap with collection off: "more than the free heap"
        gc.enable()
        return -1
    a1 = mem()
    gc.enable()
    return a1 - a0 if HAS_MEM else None


def emit(d, keys):
    parts = []
    for k in keys:
        v = d.get(k)
        if v is None:
            parts.append('"%s":null' % k)
        elif isinstance(v, str):
            parts.append('"%s":"%s"' % (k, v))
        else:
            parts.append('"%s":%s' % (k, v))
    print("{" + ",".join(parts) + "}")


def filled(target, rng):
    H, KVH, D = HEADS, KV_HEADS, HEAD_DIM
    c = KVCache(CacheConfig(1, H, KVH, D, target, DTYPE))  # its own size: a board's heap holds every point
    n = KVH * D
    kc = array("b", bytes(n))
    vc = array("b", bytes(n))
    ks = array("H", bytes(2 * KVH))
    vs = array("H", bytes(2 * KVH))
    kf = array("f", bytes(4 * n))
    vf = array("f", bytes(4 * n))
    while c.n_seen < target:
        if DTYPE == "i8":
            for i in range(n):
                kc[i] = rng.next() % 255 - 127
                vc[i] = rng.next() % 255 - 127
            for h in range(KVH):
                ks[h] = 0x2C00 + rng.next() % 0x400
                vs[h] = 0x2C00 + rng.next() % 0x400
            c.start_token()
            c.write_q8(0, kc, ks, vc, vs)
        else:
            for i in range(n):
                kf[i] = (rng.next() % 2001 - 1000) / 400.0
                vf[i] = (rng.next() % 2001 - 1000) / 400.0
            c.append([kf], [vf])
    return c


QC = []  # the quantized query and the integer path's outputs, shared by every point


def main():
    H, D = HEADS, HEAD_DIM
    rng = Lcg(12345)
    q = array("f", bytes(4 * H * D))
    for i in range(H * D):
        q[i] = (rng.next() % 2001 - 1000) / 16000.0  # |q| x |k| x sqrt(64) within step_q8's Q8_RANGE (16)
    qc = array("b", bytes(H * D))
    qs = array("H", bytes(2 * H))
    quantize_query(q, qc, qs, H)
    oq = array("i", bytes(4 * H * D))
    oe = array("i", bytes(4 * H))
    out = array("f", bytes(4 * H * D))
    QC[:] = [qc, qs, oq, oe]
    kinds = KINDS or kernels.available()

    def point(t):
        # the cache of one point and one attention object per kernel kind
        c = filled(t, rng)
        row = []
        for kind in kinds:
            kernels.select(kind)
            row.append(Attention(c, TILE))
        if not KINDS:
            kernels.select()
        return c, row

    # with several rounds every point stays built (a burst of other load then spoils one round, not a point);
    # one round (exact instruction counts on the emulated board) builds one point at a time: a board's heap
    # holds the largest point, not all of them
    built = [point(t) for t in TOKENS] if ROUNDS > 1 else None
    live = heap_live() if built else None
    us = [[None] * len(kinds) for _ in TOKENS]
    if built:
        for rnd in range(ROUNDS):
            for ti in range(len(TOKENS)):
                for ki in range(len(kinds)):
                    time_point(built[ti][1][ki], us[ti], ki)
                gc.collect()
    for ti in range(len(TOKENS)):
        if built:
            c, atts = built[ti]
        else:
            c, atts = point(TOKENS[ti])
            live = heap_live()
            for ki in range(len(kinds)):
                time_point(atts[ki], us[ti], ki)
        report_point(ti, c, atts, us[ti], kinds, live, q, qc, qs, oq, oe, out)
        if not built:
            c = atts = None
            gc.collect()


def time_point(att, us, ki):
    att.step_q8(0, QC[0], QC[1], QC[2], QC[3])  # warm
    t = best(att.step_q8, 0, QC[0], QC[1], QC[2], QC[3], REPS)
    if us[ki] is None or t < us[ki]:
        us[ki] = t


def report_point(ti, c, atts, us, kinds, live, q, qc, qs, oq, oe, out):
    H, D = HEADS, HEAD_DIM
    target = TOKENS[ti]
    macs = H * target * D * 2
    for ki in range(len(kinds)):
        att = atts[ki]
        r = {"path": "int " + kinds[ki], "tokens": target, "us": us[ki], "macs": macs,
             "bytes": alloc(att.step_q8, 0, qc, qs, oq, oe), "heap": live}
        if PROFILE:  # count the kernel calls of one step, then time each kernel alone on a full tile
            k0 = att.k
            rec = Rec(k0)
            att.k = rec
            att.step_q8(0, qc, qs, oq, oe)
            att.k = k0
            ktot = 0.0
            parts = []
            for name in sorted(rec.n):
                per = replay(k0, name, rec.first[name], 20)
                ktot += per * rec.n[name]
                parts.append("%s=%.1f/%d" % (name, per * rec.n[name], rec.n[name]))
            r["kernel_us"] = ktot
            r["calls"] = sum(rec.n.values())
            r["kernels"] = ";".join(parts)
        emit(r, ["path", "tokens", "us", "macs", "bytes", "heap", "kernel_us", "calls", "kernels"])
        gc.collect()
    if FLOAT and target <= FLOAT_MAX:
        att = Attention(c, TILE)
        att.step(0, q, out)
        t = best(att.step, 0, q, out, None, None, 2)
        b = alloc(att.step, 0, q, out, None, None) if target <= FLOAT_ALLOC_MAX else None
        emit({"path": "float", "tokens": target, "us": t, "macs": macs, "bytes": b},
             ["path", "tokens", "us", "macs", "bytes"])
        del att
        gc.collect()


main()
"""


def run(runtime, params, heap):
    code = "".join("%s = %r\n" % kv for kv in params.items()) + DEVICE_CODE
    rc, out = _benchkit.run(runtime, code, heap)
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    if rc != 0:
        raise SystemExit("%s failed (exit %s):\n%s" % (runtime, rc, out[-3000:]))
    return rows


def report(rows, profile, runtime="unix"):
    steps = [r for r in rows if "path" in r]
    plain = {r["tokens"]: r["us"] for r in steps if r["path"] == "int plain"}
    m3 = _benchkit.is_m3(runtime)
    lines = ["| path | tokens | %s | %s | x plain | bytes/step | heap live |"
             % (("instructions/step", "instructions/MAC") if m3 else ("us/step", "MAC/us")), "|---|---|---|---|---|---|---|"]
    for r in steps:
        if m3:
            ins = _benchkit.instructions(runtime, r["us"])
            t, rate = "{:,.0f}".format(ins), "%.1f" % (ins / r["macs"])
        else:
            t, rate = "{:,.0f}".format(r["us"]), "%.1f" % (r["macs"] / r["us"])
        xp = "%.1f" % (plain[r["tokens"]] / r["us"]) if r["tokens"] in plain else "-"
        b = "-" if r["bytes"] is None else ("> free heap" if r["bytes"] < 0 else "{:,}".format(r["bytes"]))
        h = "-" if r.get("heap") is None else "{:,}".format(r["heap"])
        lines.append("| %s | %d | %s | %s | %s | %s | %s |" % (r["path"], r["tokens"], t, rate, xp, b, h))
    print("\n".join(lines))
    if not profile:
        return
    print("\nWhere a step's time goes: kernel time = calls x (one call replayed alone on a full tile); the rest is "
          "Python-level work in attention.step_q8 (per tile and per head). Replays measured 1.3-1.8x slower than "
          "the same kernels inside a step on the unix port: read the kernels' proportions, not the split.")
    lines = ["| path | tokens | step us | kernel us | Python-level us | kernel MAC/us | kernel calls | "
             "per kernel: us per step / calls |", "|---|---|---|---|---|---|---|---|"]
    for r in steps:
        if r.get("kernels") is None:
            continue
        per = []
        for item in r["kernels"].split(";"):
            name, v = item.split("=")
            t, n = v.split("/")
            per.append("%s %.0f/%s" % (name.replace("att_", ""), float(t), n))
        k = r["kernel_us"]
        lines.append("| %s | %d | %.0f | %.0f | %.0f (%.0f%%) | %.1f | %d | %s |" % (
            r["path"], r["tokens"], r["us"], k, r["us"] - k, 100.0 * (r["us"] - k) / r["us"],
            r["macs"] / k if k else 0, r["calls"], ", ".join(per)))
    print("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _benchkit.add_arguments(ap)
    ap.add_argument("--tokens", default="64,256,1024", help="cached-token counts (comma separated)")
    ap.add_argument("--tile", type=int, default=32)
    ap.add_argument("--dtype", choices=("i8", "i4"), default="i8")
    ap.add_argument("--reps", type=int, help="steps timed per point and round (the best counts; default 5, "
                    "1 on m3 whose figures are exact)")
    ap.add_argument("--rounds", type=int, help="rounds over all points (the best round counts; default 5, 1 on m3)")
    ap.add_argument("--no-float", action="store_true", help="skip the float path")
    ap.add_argument("--float-max", type=int, default=1024, help="largest token count for the float path")
    ap.add_argument("--profile", action="store_true", help="split each step into kernel and Python-level time")
    ap.add_argument("--heap", type=int, default=64 * 1024 * 1024,
                    help="unix/wasm port heap (default 64 MiB: the float path's garbage is counted with the GC "
                         "off); m3 runs at --board's heap")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    exact = _benchkit.is_m3(a.runtime)
    a.reps = a.reps or (1 if exact else 5)
    a.rounds = a.rounds or (1 if exact else 5)
    heap = _benchkit.heap_for(a.runtime, a.board, a.heap)
    tokens = sorted(int(x) for x in a.tokens.split(","))
    params = {"HEADS": HEADS, "KV_HEADS": KV_HEADS, "HEAD_DIM": HEAD_DIM, "TOKENS": tokens, "TILE": a.tile, "DTYPE": a.dtype, "REPS": a.reps, "ROUNDS": a.rounds, "PROFILE": a.profile,
              "FLOAT": not a.no_float, "FLOAT_MAX": a.float_max,
              "FLOAT_ALLOC_MAX": 256}
    if _benchkit.is_m3(a.runtime):
        # one kernel kind per run, as a board loads one: the heap holds its code, not every kind's
        rows = []
        for kind in ("viper", "native", "plain"):
            rows += run(a.runtime, dict(params, KINDS=[kind], FLOAT=params["FLOAT"] and kind == "plain"), heap)
        order = {"int viper": 0, "int native": 1, "int plain": 2, "float": 3}
        rows.sort(key=lambda r: (r.get("tokens", 0), order.get(r.get("path"), 9)))
    else:
        rows = run(a.runtime, dict(params, KINDS=None), heap)
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(_benchkit.describe(a.runtime, a.board, heap))
    print("%s cache, %d heads, %d KV heads, head_dim %d, tile %d; MACs/step = heads*tokens*head_dim*2; heap live = "
          "bytes held after building the caches (imports, caches, attention scratch; on m3 one point and one kernel kind "
          "at a time)"
          % (a.dtype, HEADS, KV_HEADS, HEAD_DIM, a.tile))
    report(rows, a.profile, a.runtime)
    return 0


if __name__ == "__main__":
    sys.exit(main())
