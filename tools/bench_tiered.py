#!/usr/bin/env python3
"""What a tiered cache (kvedge.tier.cache) costs per token: attention over its cold blocks read back from flash, and
the demotion of a block from the hot ring to flash, on the emulated Cortex-M3 board (instructions, exact under
qemu -icount: 1 us of ticks_us = 1000 instructions; its littlefs RAM disk stands in for flash) or a unix port.

  .venv/bin/python tools/bench_tiered.py [--runtime m3|unix|cpython] [--board rp2040] [--cold i4,i8]
                                         [--blocks 0,2,4,8] [--float] [--json] [--save]

Shape: stories260K's attention (5 layers, 8 heads, 4 KV heads, head_dim 8), 4 sinks and a hot ring of 64 tokens
in the ring's dtype (i8; f32 with --float), blocks of 16 tokens: the layout `kvedge plan` writes. For each cold dtype the store is filled block by block; at each --blocks count one
token's attention (step_q8 over the 5 layers) is timed, and the slope over the cold tokens is the cost per token
per cold token (flash reads included). For comparison: the same step over an i8 KVCache holding the tokens in RAM
(its slope is the in-RAM cost per cached token). The integer attention is measured twice: "int-tiles" as the
float pass runs it over an i8 ring (a tile loop), "int" as the integer pass does (its fused drivers loaded:
kvedge.model.run's att_preload, the cold blocks' fold kvedge.kernels.viper_tier). The demotion cost is the time of the start_token() that moves a
block to flash (re-quantize, append, flush, commit), spread over the block's tokens. --float adds the float path
(f32 ring). --save (m3 only) writes the figures to host/kvedge_host/plan/tiered_cost.py, where `kvedge plan` reads
them."""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device"), os.path.join(ROOT, "tools")]

from _benchkit import TIMING  # noqa: E402

LAYERS, HEADS, KV_HEADS, HEAD_DIM = 5, 8, 4, 8
SINKS, WINDOW, BLOCK = 4, 64, 16

DEVICE_CODE = TIMING + r"""
import json
import os
from array import array
from kvedge import kernels
from kvedge.attention import Attention, quantize_query
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from kvedge.tier.cache import TieredCache

L, H, KVH, D, S, W, B = %(shape)s
N = KVH * D


class Lcg:
    def __init__(self, s):
        self.s = s

    def next(self):
        self.s = (self.s * 1103515245 + 12345) & 0x3FFFFFFF
        return self.s >> 10


g = Lcg(7)
kc, vc = array("b", bytes(N)), array("b", bytes(N))
ks, vs = array("H", bytes(2 * KVH)), array("H", bytes(2 * KVH))
kf, vf = array("f", bytes(4 * N)), array("f", bytes(4 * N))
qc, qs = array("b", bytes(H * D)), array("H", bytes(2 * H))
oq, oe = array("i", bytes(4 * H * D)), array("i", bytes(4 * H))
qf, of = array("f", bytes(4 * H * D)), array("f", bytes(4 * H * D))
for i in range(H * D):
    qf[i] = ((g.next() & 255) - 128) / 64.0
quantize_query(qf, qc, qs, H)


def token(c, pos, q8):
    c.start_token()
    for layer in range(L):
        for i in range(N):
            kc[i] = (g.next() & 255) - 128 if i %% D != 1 else (g.next() & 127) - 64
            vc[i] = (g.next() & 255) - 128
            kf[i] = kc[i] / 32.0
            vf[i] = vc[i] / 64.0
        for h in range(KVH):
            ks[h] = vs[h] = 0x2400  # f16 0.0156
        if q8:
            c.write_q8(layer, kc, ks, vc, vs)
        else:
            c.write(layer, kf, vf)


def attend(c, q8, reps):
    gc.collect()  # a collection of a heap full of the writes' garbage must not land in a timed step
    best = 1 << 30
    for _ in range(reps):
        t0 = now()
        for layer in range(L):
            if q8:
                c.step_q8(layer, qc, qs, oq, oe)
            else:
                c.step(layer, qf, of)
        t = since(t0)
        if t < best:
            best = t
    return best


def tiered(cold, blocks, q8, reps):
    name = "_bench_tiered"
    cfg = CacheConfig(L, H, KVH, D, S + W, "i8" if q8 else "f32", window=W, sinks=S, align=0)  # as kvedge plan
    c = TieredCache(cfg, name, block=B, cold=cold, cold_blocks=max(blocks) or 1, fresh=True)
    pos = 0
    rows = []
    demote = []
    for n in blocks:
        while c.store.count < n or pos < S + W:
            if pos >= S + W and (pos - S) %% B == 0:  # this token's start_token() moves a block to flash
                gc.collect()
                t0 = now()
                token(c, pos, q8)
                demote.append(since(t0))
            else:
                token(c, pos, q8)
            pos += 1
        t = attend(c, q8, reps)
        rows.append((c.store.count * B, c.ring.n_cached, t, c.store.reads))
    gc.collect()
    a = mem()
    attend(c, q8, 1)
    alloc = mem() - a
    c.close()
    for x in (".h0", ".h1", ".s", ".0", ".1"):
        try:
            os.remove(name + x)
        except OSError:
            pass
    return rows, demote, alloc


def in_ram(tokens_list, q8, reps):
    gc.collect()
    n = max(tokens_list)
    cfg = CacheConfig(L, H, KVH, D, n, "i8" if q8 else "f32", align=0)
    c = KVCache(cfg)
    a = Attention(c, 16)
    rows = []
    pos = 0
    for want in tokens_list:
        while pos < want:
            c.start_token()
            for layer in range(L):
                for i in range(N):
                    kc[i] = (g.next() & 255) - 128
                    vc[i] = (g.next() & 255) - 128
                    kf[i] = kc[i] / 32.0
                    vf[i] = vc[i] / 64.0
                if q8:
                    c.write_q8(layer, kc, ks, vc, vs)
                else:
                    c.write(layer, kf, vf)
            pos += 1
        gc.collect()
        best = 1 << 30
        for _ in range(reps):
            t0 = now()
            for layer in range(L):
                if q8:
                    a.step_q8(layer, qc, qs, oq, oe)
                else:
                    a.step(layer, qf, of)
            t = since(t0)
            if t < best:
                best = t
        rows.append((want, t))
    return rows


def main(colds, blocks, with_float, reps):
    print("RES " + json.dumps({"kernels": kernels.kind()}))
    # the integer attention as the float pass runs it on an i8 ring (a tile loop: no fused drivers loaded), then as
    # the integer pass does (the fused drivers, loaded at its start: kvedge.model.run), then the float attention
    paths = [("int-tiles", True), ("int", True)] + ([("float", False)] if with_float else [])
    for path, q8 in paths:
        if path == "int":
            k = kernels.get()
            pre = getattr(k, "att_preload", None)
            if pre is not None:
                pre(k)
        for cold in colds:
            rows, demote, alloc = tiered(cold, blocks, q8, reps)
            print("RES " + json.dumps({"tiered": path, "cold": cold, "rows": rows, "demote": demote,
                                       "alloc": alloc}))
        ram = in_ram([S + W + B * b for b in blocks if S + W + B * b <= 256], q8, reps)
        print("RES " + json.dumps({"ram": path, "rows": ram}))
"""


def slope(points):
    """Least-squares slope and intercept of (x, y) points."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    b = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx if sxx else 0.0
    return b, my - b * mx


def run(runtime, board, colds, blocks, with_float, reps, heap=None):
    code = DEVICE_CODE % {"shape": (LAYERS, HEADS, KV_HEADS, HEAD_DIM, SINKS, WINDOW, BLOCK)}
    code += "\nmain(%r, %r, %r, %r)\n" % (colds, blocks, with_float, reps)
    if runtime == "m3":
        from kvedge_host.boards import m3board
        out = m3board.run_code(code, board=board, heap=heap or None, timeout=7200)
    else:
        from kvedge_host.boards import runtimes
        from kvedge_host.paths import DEVICE
        if runtime == "cpython":
            import subprocess
            env = dict(os.environ, PYTHONPATH=DEVICE)
            out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, check=True,
                                 cwd="/tmp").stdout.decode()
        else:
            rc, out = runtimes.run_code(runtime, code, 4 * 1024 * 1024, [DEVICE], 7200, cwd="/tmp")
            if rc:
                raise SystemExit(out)
    return parse(out)


def parse(out):
    res = {"kernels": None, "tiered": [], "ram": {}}
    for line in out.splitlines():
        if not line.startswith("RES "):
            continue
        r = json.loads(line[4:])
        if "kernels" in r:
            res["kernels"] = r["kernels"]
        elif "tiered" in r:
            res["tiered"].append({"path": r["tiered"], "cold": r["cold"], "rows": r["rows"],
                                  "demote_us": r["demote"], "step_alloc_bytes": r["alloc"]})
        else:
            res["ram"][r["ram"]] = r["rows"]
    if not res["tiered"]:
        raise SystemExit("no result from the device:\n" + out[-2000:])
    return res


def summarize(res, unit):
    """Per token (all layers): cost per cold token, base, demotion per token; `unit` converts us."""
    out = []
    for t in res["tiered"]:
        # points measured right after a block left the ring (the ring then holds W - B + 1 tokens + sinks)
        pts = [(r[0], r[2]) for r in t["rows"] if r[0] > 0] or [(r[0], r[2]) for r in t["rows"]]
        b, a = slope(pts)
        ram = res["ram"].get(t["path"])
        rb = slope([(r[0], r[1]) for r in ram])[0] if ram and len(ram) > 1 else None
        dem = sorted(t["demote_us"])
        med = dem[len(dem) // 2] if dem else 0
        out.append({"path": t["path"], "cold": t["cold"], "per_cold_token": b * unit, "base": a * unit,
                    "in_ram_per_token": rb * unit if rb is not None else None,
                    "demote_per_block": med * unit, "demote_per_token": med * unit / BLOCK,
                    "step_alloc_bytes": t["step_alloc_bytes"],
                    "points": [(r[0], r[2] * unit) for r in t["rows"]]})
    return out


def machine(runtime, heap):
    if runtime != "m3":
        return runtime
    from kvedge_host.boards import m3board
    return "qemu %s -icount shift=0, MicroPython %s" % (m3board.MACHINE, os.path.basename(m3board.firmware_for(heap)))


COST_MODULE = os.path.join(ROOT, "host", "kvedge_host", "plan", "tiered_cost.py")


def save(doc):
    keep = ("path", "cold", "per_cold_token", "base", "in_ram_per_token", "demote_per_block", "demote_per_token",
            "step_alloc_bytes")
    rows = [dict((k, round(r[k]) if isinstance(r[k], float) else r[k]) for k in keep) for r in doc["rows"]]
    import pprint
    out = dict((k, doc[k]) for k in ("machine", "kernels", "unit", "shape", "command"))
    out["command"] = out["command"].replace(" --save", "").replace(" --json", "")
    out["rows"] = rows
    with open(COST_MODULE, "w") as f:
        f.write('"""What a tiered cache costs per token on the emulated Cortex-M3 (instructions over the layers, per\n'
                'cold token held; see tools/bench_tiered.py for each figure). Written by\n\n    %s --save\n\n'
                'and read by `kvedge plan`."""\n' % out["command"])
        f.write("MEASURED = %s\n" % pprint.pformat(out, width=110, sort_dicts=False))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=("m3", "unix", "cpython"), default="m3")
    ap.add_argument("--board", default="rp2040", help="board profile (its .mpy -march; its heap with --heap 0)")
    ap.add_argument("--heap", type=int, default=2097152, help="emulated board heap (default: the benchmark image's "
                    "2 MiB, room for the in-RAM comparison; instruction counts do not depend on it)")
    ap.add_argument("--cold", default="i4,i8")
    ap.add_argument("--blocks", default="0,2,4,8")
    ap.add_argument("--float", action="store_true", help="also the float path (f32 ring)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save", action="store_true", help="write host/kvedge_host/plan/tiered_cost.py for kvedge plan")
    a = ap.parse_args(argv)
    colds = a.cold.split(",")
    blocks = [int(x) for x in a.blocks.split(",")]
    res = run(a.runtime, a.board, colds, blocks, a.float, a.reps, a.heap)
    unit = 1000.0 if a.runtime == "m3" else 1.0  # instructions (m3) or microseconds
    rows = summarize(res, unit)
    what = "instructions" if a.runtime == "m3" else "us"
    doc = {"runtime": a.runtime, "board": a.board, "heap": a.heap, "unit": what, "kernels": res["kernels"],
           "command": "tools/bench_tiered.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": machine(a.runtime, a.heap),
           "shape": {"layers": LAYERS, "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "sinks": SINKS,
                     "window": WINDOW, "block": BLOCK},
           "rows": rows}
    if a.save:
        if a.runtime != "m3":
            raise SystemExit("--save records instructions on the emulated board: use --runtime m3")
        save(doc)
    if a.json:
        print(json.dumps(doc, indent=1))
        return 0
    print("tiered cache, stories260K attention shape, %s, kernels %s; %s per token (5 layers)"
          % (a.runtime, res["kernels"], what))
    print("| path | cold | per cold token | in RAM, per cached token | base (53 ring + sink tokens) | demotion per block "
          "| demotion per token | bytes allocated by a step |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %s | %s | %s | %s | %s | %s | %d |" % (
            r["path"], r["cold"], format(int(r["per_cold_token"]), ","),
            format(int(r["in_ram_per_token"]), ",") if r["in_ram_per_token"] is not None else "-",
            format(int(r["base"]), ","), format(int(r["demote_per_block"]), ","),
            format(int(r["demote_per_token"]), ","), r["step_alloc_bytes"]))
    for r in rows:
        print("%s %s points (cold tokens, %s): %s" % (r["path"], r["cold"], what,
                                                     ", ".join("(%d, %s)" % (x, format(int(y), ",")) for x, y in
                                                               r["points"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
