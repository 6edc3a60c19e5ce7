#!/usr/bin/env python3
"""Where a token's instructions go in the integer forward pass (kvedge.model.pass_int), part by part, on the
emulated Cortex-M3 (qemu -icount shift=0: exact counts) or a MicroPython port (host microseconds).

  .venv/bin/python tools/bench_parts.py [--runtime m3|unix] [--kernels asm] [--context 256] [--tokens 8]
                                        [--march armv7m] [--json]

The model is stories260K with int8 weights in RAM and an i8 cache of 512 slots, as tools/bench_forward.py
builds it (Llama(..., forward="int")). The sequence runs from BOS to --context positions, then --tokens timed
steps; that is done three times on one board, from a reset cache each time, so every run does the same work:
1. unwrapped: the token's total (the figure bench_forward reports);
2. every kernel the pass calls (the kernel module's q_* functions, the attention step) wrapped in a timer;
3. the pass's own Python-level steps (_norm, _mv, _quant) wrapped instead.
A wrapper's own cost inside its timer is measured on an empty function of four arguments and taken off each
call (a call of more or fewer arguments differs by a few hundred instructions). What is left of
the total when the kernels are taken off is Python: the layer loop's glue (2, "python: ...") split by step with
(3). Nothing here changes the pass: the wrappers are instance attributes of this run's objects."""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device"), HERE]

from kvedge import kernels  # noqa: E402
from kvedge_host.paths import SHARED_MODELS  # noqa: E402

DEVICE_CODE = r"""
import gc
import micropython
from array import array
from time import ticks_diff, ticks_us
from kvedge import kernels
kernels.select(%(kernels)r)
from kvedge.model.llama import Llama
m = Llama(%(model)r, kv=%(kv)r, forward="int", stream=%(stream)r)
assert m._lockable
fw = m.intp
V = m.cfg.vocab_size
K = fw.k
argmax = K.q_argmax
C = %(context)d
N = %(tokens)d
NAMES = []
acc = array("i", [0] * 64)
cnt = array("i", [0] * 64)
on = [False]


_ = object()  # an argument not given: the wrappers take positional arguments only, without a tuple (a
# varargs call allocates one)


# a wrapper is a plain function made by exec: a closure of more than five values, or a callable instance,
# allocates its arguments on every call, which the locked heap refuses
WRAPPER = '''
def W_IDX(a=_, b=_, c=_, d=_, e=_, g=_, h=_, k=_, l=_, n=_):
    if not on[0]:
        return call(F_IDX, a, b, c, d, e, g, h, k, l, n)
    t0 = ticks_us()
    r = call(F_IDX, a, b, c, d, e, g, h, k, l, n)
    acc[IDX] += ticks_diff(ticks_us(), t0)
    cnt[IDX] += 1
    return r
'''


def wrap(name, f):
    i = len(NAMES)
    NAMES.append(name)
    g = globals()
    g["F_%%d" %% i] = f
    exec(WRAPPER.replace("IDX", str(i)), g)
    return g["W_%%d" %% i]


def call(f, a, b, c, d, e, g, h, k, l, n):
    if e is _:
        if d is not _:
            return f(a, b, c, d)
        if c is not _:
            return f(a, b, c)
        if b is not _:
            return f(a, b)
        return f() if a is _ else f(a)
    if k is _:
        if h is not _:
            return f(a, b, c, d, e, g, h)
        if g is not _:
            return f(a, b, c, d, e, g)
        return f(a, b, c, d, e)
    if n is not _:
        return f(a, b, c, d, e, g, h, k, l, n)
    if l is not _:
        return f(a, b, c, d, e, g, h, k, l)
    return f(a, b, c, d, e, g, h, k)


def run():
    # C positions from BOS (greedy), then N steps whose parts are counted; returns the N steps' total
    m.reset()
    tok = 1
    for i in range(C):
        tok = argmax(m.forward(tok), V)
        if tok == 1:
            tok = 2
    gc.collect()
    gc.disable()
    on[0] = True
    t0 = ticks_us()
    for i in range(N):
        tok = argmax(m.forward(tok), V)
    t = ticks_diff(ticks_us(), t0)
    on[0] = False
    gc.enable()
    return t


def report(tag):
    for i in range(len(NAMES)):
        if cnt[i]:
            print("PART %%s %%s %%d %%d" %% (tag, NAMES[i], acc[i], cnt[i]))
        acc[i] = 0
        cnt[i] = 0


# a wrapper's own cost inside its timer: an empty function, wrapped
def nothing(a, b, c, d):
    return 0


def calibrate(e):
    gc.collect()
    micropython.heap_lock()  # as the pass's steps run (kvedge.model.pass_int.Forward.step): frames on the stack
    on[0] = True
    for i in range(2000):
        e(1, 2, 3, 4)
    on[0] = False
    micropython.heap_unlock()


calibrate(wrap("empty", nothing))
report("empty")
del NAMES[:]

print("TOTAL %%d %%d" %% (run(), N))


class Kernels:
    pass


# 2: the kernels
kp = Kernels()
for n in dir(K):
    f = getattr(K, n)
    if n.startswith("q_") or n.startswith("att_"):
        f = wrap(n, f)
    setattr(kp, n, f)
fw.k = kp
K4 = getattr(fw, "k4", None)  # int4 rows: q_mv4's module (kvedge.model.pass_int4)
if K4 is not None:
    kp4 = Kernels()
    kp4.q_mv4 = wrap("q_mv4", K4.q_mv4)
    fw.k4 = kp4
argmax = kp.q_argmax  # the harness's greedy pick (the run's own call of the kernel)
KQ = fw.kq
if KQ is K:  # the matvec inputs' quantizer (the same module, or pass_int4's own): its q_scale and q_quant too
    fw.kq = kp
ATT = m.cache.attend_q8  # the decode interface's integer attention (bound by the cache's bind_q8)
m.cache.attend_q8 = wrap("attention step (cache.attend_q8)", ATT)
print("TOTAL2 %%d %%d" %% (run(), N))
report("kernels")
fw.k = K
argmax = K.q_argmax
if K4 is not None:
    fw.k4 = K4
fw.kq = KQ
m.cache.attend_q8 = ATT
del NAMES[:]

# 3: the pass's own steps
for n in ("_norm", "_mv", "_quant", "_embed"):
    setattr(fw, n, wrap(n, getattr(fw, n)))
m.cache.attend_q8 = wrap("attention step (cache.attend_q8)", ATT)
print("TOTAL3 %%d %%d" %% (run(), N))
report("steps")
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=("m3", "m7", "m0", "unix"), default="m3")
    ap.add_argument("--model", default=os.path.join(SHARED_MODELS, "stories260K.bin"))
    ap.add_argument("--kernels", default="asm", choices=kernels.KINDS)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--march", help="-march of the package's .mpy (default: the machine's own; m3 armv7m; armv6m: "
                    "the RP2040's)")
    ap.add_argument("--weights-dtype", choices=("i8", "i4"), default="i8", help="int8 rows, or int4 in groups of "
                    "32 (q_mv4 counted beside the int8 kernels)")
    ap.add_argument("--rom", action="store_true", help="the weights read in place from ROMFS (issue 43's setting)")
    ap.add_argument("--heap", type=int, default=0, help="m3: 4194304 or 8388608 run the images whose heap lies in "
                    "PSRAM (a 15M-class model's int4 file in ROMFS: tools/bench_forward.py's --heap)")
    ap.add_argument("--cache", metavar="K=V,...", default="max_tokens=512",
                    help="the i8 cache's CacheConfig (issue 43's: max_tokens=96,window=92,sinks=4)")
    ap.add_argument("--slots", type=int, default=0, help="the i8 cache's max_tokens (overrides --cache's)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not os.path.exists(a.model):
        print("bench_parts: %s not found" % a.model, file=sys.stderr)
        return 2
    from bench_forward import WEIGHTS_FILE, convert, run_device, machine
    emu = a.runtime != "unix"
    if a.march is None and emu:
        a.march = "armv7m" if a.runtime == "m3" else machine(a.runtime, 0).marches[0]
    with tempfile.TemporaryDirectory(prefix="kvedge-parts-") as tmp:
        i8 = os.path.join(tmp, WEIGHTS_FILE)  # the name run_device puts in the board's ROMFS
        convert(os.path.abspath(a.model), i8, a.weights_dtype)
        kv = {"dtype": "i8", "align": 0}
        for item in a.cache.split(","):
            k, v = item.split("=")
            kv[k.strip()] = int(v)
        if a.slots:
            kv["max_tokens"] = a.slots
        code = DEVICE_CODE % {"kernels": a.kernels, "model": i8, "context": a.context, "tokens": a.tokens,
                              "kv": kv, "stream": "rom" if a.rom else False}
        heap = a.heap or {"m3": 2097152, "m7": 2097152, "m0": 215040}.get(a.runtime, 64 << 20)
        out = run_device(a.runtime, code, tmp, heap, a.march, "rp2040")
    unit = 1000 if emu else 1  # instructions per microsecond under qemu -icount shift=0
    parts, totals, bias = {}, {}, 0.0
    for line in out.splitlines():
        f = line.split()
        if f and f[0].startswith("TOTAL"):
            totals[f[0]] = int(f[1]) * unit / int(f[2])
        elif f and f[0] == "PART":
            tag, name, us, n = f[1], " ".join(f[2:-2]), int(f[-2]), int(f[-1])
            if tag == "empty":
                bias = us * unit / n
            else:
                parts[(tag, name)] = ((us * unit - n * bias) / a.tokens, n / a.tokens)
    if "TOTAL" not in totals:
        raise SystemExit("bench_parts: the board printed no figures:\n" + out[-2000:])
    total = totals["TOTAL"]
    kern = {k[1]: v for k, v in parts.items() if k[0] == "kernels"}
    steps = {k[1]: v for k, v in parts.items() if k[0] == "steps"}
    att = "attention step (att.q8_step)"
    ksum = sum(v[0] for v in kern.values())

    def per(d, n):
        return d.get(n, (0, 0))[0]
    q, nq = steps.get("_quant", (0, 0))
    nn = steps.get("_norm", (0, 0))[1]
    q_in_norm = q / nq * nn if nq else 0  # _norm calls _quant once: those calls are in both figures (per call ~)
    python = [
        ("_mv's Python (q_mv, q_mv4 off)", per(steps, "_mv") - per(kern, "q_mv") - per(kern, "q_mv4")),
        ("_quant's Python (q_quant off; ~)", q - per(kern, "q_quant")),
        ("_norm's Python (q_normgain and its _quant off; ~)", per(steps, "_norm") - per(kern, "q_normgain")
         - q_in_norm),
        ("_embed's Python (q_embed off; int4: all of it)", per(steps, "_embed") - per(kern, "q_embed")),
    ]
    inside = per(steps, "_mv") + per(steps, "_norm") + q - q_in_norm + per(steps, att) + per(steps, "_embed")
    direct = sum(per(kern, n) for n in kern if n not in ("q_mv", "q_mv4", "q_quant", "q_normgain", "q_embed", att))
    python.append(("forward()'s own Python (the layer loop)", total - inside - direct))
    if a.json:
        print(json.dumps({"total": total, "kernels": {n: {"per_token": v[0], "calls": v[1]} for n, v in
                                                      kern.items()},
                          "python": dict(python), "kernels_sum": ksum, "wrapper_bias": bias, "totals": totals}))
        return 0
    what = "instructions" if emu else "us"
    print("%s, %s weights %s, i8 cache (%s), %s kernels, context %d, %s (%s per token; %d steps)" % (
        os.path.basename(a.model), {"i8": "int8", "i4": "int4"}[a.weights_dtype],
        "read in place from ROMFS" if a.rom else "in RAM", a.cache, a.kernels, a.context,
        "emulated %s, qemu -icount shift=0, %s .mpy" % (a.runtime, a.march) if emu else "MicroPython unix port",
        what, a.tokens))
    print("| part | calls a token | %s a token | share |" % what)
    print("|---|---:|---:|---:|")
    for n, (v, c) in sorted(kern.items(), key=lambda kv: -kv[1][0]):
        print("| %s | %.0f | %s | %.1f %% |" % (n, c, format(int(v), ","), 100.0 * v / total))
    print("| all kernels and the attention step | | %s | %.1f %% |" % (format(int(ksum), ","), 100.0 * ksum / total))
    for n, v in python:
        print("| %s | | %s | %.1f %% |" % (n, format(int(v), ","), 100.0 * v / total))
    print("| Python outside the kernels (token - all kernels) | | %s | %.1f %% |" % (
        format(int(total - ksum), ","), 100.0 * (total - ksum) / total))
    print("| **token (unwrapped)** | | **%s** | |" % format(int(total), ","))
    print("(a timer wrapper's own cost, %d %s a call, is taken off each call; the attention step's row holds "
          "the attention kernels it calls)" % (bias, what))
    return 0


if __name__ == "__main__":
    sys.exit(main())
