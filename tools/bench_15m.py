#!/usr/bin/env python3
"""stories15M's shape with int4 weights on an emulated core, composed from exact measurements of models that fit
any image: instructions a token (mean over positions 0..--context-1) and where they go, per layer and outside.

  tools/bench_15m.py [--runtime m3|m7|xt] [--kernels K] [--no-asm] [--context 256] [--vocab 512]
                     [--rows 512 1024 2048] [--heap BYTES] [--json]

Method (issue 43: the Cortex-M7's and the Xtensa's images hold 2 MiB of heap and a 4 MiB ROMFS partition, the
int4 file is 8,558,248 bytes;
tools/bench_forward.py --rom runs the whole file there from a larger ROMFS slot, m3machines.BIG_ROM):
1. Two models written by kvedge_host.boards.tinyckpt (seed 1) with the preset's shape (dim 288, hidden 768, 6
   heads of 48, 256 positions) but 1 and 2 layers and a vocabulary of --vocab tokens, converted to int4 (the
   host's converter, byte for byte kvedge convert's), read in place from ROMFS with an i8 cache of 256 slots and
   Llama's default arguments (the integer pass; the runtime's default kernels unless --kernels). Each runs
   positions 0..C-1 from BOS, greedy (the benchmark's q_argmax pick inside each token's timer, as
   tools/bench_forward.py times it), every token timed alone: T1, T2. A layer costs T2 - T1 (its attention at
   each of those positions included), everything outside the layers T1 - (T2 - T1).
2. The same sequence again with every kernel (q_mv4 split by its shape), the attention step, the cache write and
   the embedding wrapped in timers (each wrapper's own cost, calibrated on an empty function, taken off each
   call): the parts. What the wrappers do not see is the Python between them.
3. q_mv4 alone on rows of 288 columns (int4 rows in RAM: the instruction count does not depend on where they lie)
   at --rows counts, and q_argmax over as many logits: the cost a classifier row adds (checked constant on two
   pairs of counts), then q_mv4 at each matrix shape (instructions a multiply-add).
The token of the full model = T1 + 5 (T2 - T1) + (32000 - --vocab) x (q_mv4's and q_argmax's cost a row).
--runtime m3 checks the method against the whole model's measured token (tools/bench_forward.py, docs/model.md)."""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device"), HERE]

from kvedge import kernels  # noqa: E402

LAYERS = 6  # stories15M: 6 layers, 32,000 tokens (kvedge_host.models' stories15m preset)
VOCAB = 32000
TARGETS = {"m3": 50000000, "m7": 30000000, "xt": 150000000}  # issue 43: instructions a token, mean over 0-255

# what every board run starts with: the kernels, and Llama's default arguments
HEAD = r"""
import gc
import micropython
from array import array
from time import ticks_diff, ticks_us
if %(no_asm)r:  # as on an ESP32 (windowed Xtensa, no inline assembler): the asm_xtensa kernels refused
    import kvedge.kernels.q8_asm_xtensa
    kvedge.kernels.q8_asm_xtensa.OK = False
from kvedge import kernels
if %(kernels)r:
    kernels.select(%(kernels)r)
"""

MODEL_CODE = HEAD + r"""
from kvedge.model.llama import Llama
m = Llama(%(model)r, kv=%(kv)r, stream="rom")
fw = m.intp
print("KIND", kernels.kind(), m.forward_kind, fw.k.__name__, fw.k4.__name__)
V = m.cfg.vocab_size
C = %(context)d
pick = [fw.k.q_argmax]


def run():
    # positions 0..C-1 from BOS, greedy, each token (its pick included) timed alone; their sum in us
    m.reset()
    tok = 1
    t = 0
    gc.collect()
    for i in range(C):
        t0 = ticks_us()
        tok = pick[0](m.forward(tok), V)
        t += ticks_diff(ticks_us(), t0)
        if tok == 1:
            tok = 2
    return t


print("TOTAL %%d" %% run())

# the parts: each wrapper a plain function made by exec (a closure of more than five values, or a callable
# instance, allocates its arguments on every call, which the locked heap refuses); positional arguments only
_ = object()
NAMES = []
acc = array("i", [0] * 48)
cnt = array("i", [0] * 48)
on = [False]
WRAPPER = '''
def W_IDX(a=_, b=_, c=_, d=_, e=_):
    if not on[0]:
        return call(F_IDX, a, b, c, d, e)
    t0 = ticks_us()
    r = call(F_IDX, a, b, c, d, e)
    acc[IDX] += ticks_diff(ticks_us(), t0)
    cnt[IDX] += 1
    return r
'''


def call(f, a, b, c, d, e):
    if e is not _:
        return f(a, b, c, d, e)
    if d is not _:
        return f(a, b, c, d)
    if c is not _:
        return f(a, b, c)
    return f(a, b) if b is not _ else f(a)


def wrap(name, f):
    i = len(NAMES)
    NAMES.append(name)
    g = globals()
    g["F_%%d" %% i] = f
    exec(WRAPPER.replace("IDX", str(i)), g)
    return g["W_%%d" %% i]


# q_mv4 by shape (rows, columns of the call): its own wrapper, four arguments, nothing but the timer inside it
SR = array("i", [0] * 16)
SC = array("i", [0] * 16)
SA = array("i", [0] * 16)
SN = array("i", [0] * 17)  # SN[16]: shapes seen


def shaped(f):
    def w4(a, b, c, p):
        if not on[0]:
            return f(a, b, c, p)
        t0 = ticks_us()
        r = f(a, b, c, p)
        t = ticks_diff(ticks_us(), t0)
        j = 0
        while j < SN[16] and (SR[j] != p[1] or SC[j] != p[2]):
            j += 1
        if j == SN[16]:
            SR[j] = p[1]
            SC[j] = p[2]
            SN[16] += 1
        SA[j] += t
        SN[j] += 1
        return r
    return w4


def nothing(a, b, c, d):
    return 0


def calibrate(e, n):
    # a wrapper's own cost inside its timer: an empty function wrapped, called with the heap locked (as the
    # pass's steps run: frames on the stack)
    gc.collect()
    p = array("i", [0, 1, 288, 0, 0, 0, 0, 0, 0])
    micropython.heap_lock()
    on[0] = True
    t0 = ticks_us()
    for i in range(n):
        e(1, 2, 3, p)
    t = ticks_diff(ticks_us(), t0)
    on[0] = False
    micropython.heap_unlock()
    return t


e = wrap("empty", nothing)
calibrate(e, 2000)
print("CAL wrap %%d %%d" %% (acc[0], cnt[0]))
acc[0] = cnt[0] = 0
del NAMES[:]
SN[16] = 0
calibrate(shaped(nothing), 2000)
print("CAL shaped %%d %%d" %% (SA[0], SN[0]))
SA[0] = SN[0] = SN[16] = 0
del NAMES[:]


class Kernels:
    pass


K = fw.k
kp = Kernels()
for n in dir(K):
    f = getattr(K, n)
    if n.startswith("q_") or n.startswith("att_"):
        f = wrap(n, f)
    setattr(kp, n, f)
fw.k = kp
pick[0] = kp.q_argmax
k4 = Kernels()
k4.q_mv4 = shaped(fw.k4.q_mv4)
fw.k4 = k4
if fw.kq is K:
    fw.kq = kp
else:  # the DSP q_mv's packing quantizer is viper's (pass_int4.Forward): its q_scale and q_quant on their own
    kq = Kernels()
    kq.q_scale = wrap("q_scale (kq)", fw.kq.q_scale)
    kq.q_quant = wrap("q_quant (kq)", fw.kq.q_quant)
    fw.kq = kq
m.cache.attend_q8 = wrap("attention step (cache.attend_q8)", m.cache.attend_q8)
m.cache.store_q8 = wrap("cache write (cache.store_q8)", m.cache.store_q8)
fw._embed = wrap("embedding (_embed, Python)", fw._embed)
on[0] = True
print("WRAPPED %%d" %% run())
on[0] = False
for i in range(len(NAMES)):
    if cnt[i]:
        print("PART %%d %%d %%s" %% (acc[i], cnt[i], NAMES[i]))
for j in range(SN[16]):
    print("SHAPE %%d %%d %%d %%d" %% (SR[j], SC[j], SA[j], SN[j]))
"""

ROWS_CODE = HEAD + r"""
from kvedge.model.pass_int import qkernels
from kvedge.model.pass_int4 import kernels4
k = qkernels()[0]
k4 = kernels4()
print("KIND", kernels.kind(), k.__name__, k4.__name__)
SHAPES = %(shapes)r
big = 0
for rows, cols in SHAPES:
    s = rows * ((2 * (cols >> 5) + 3) & ~3) + 16 * rows * (cols >> 5)
    if s > big:
        big = s
w = bytearray(bytes(range(256)) * (big // 256 + 1))  # the codes: every byte value in turn
x = array("i", [(i * 13) %% 255 - 127 for i in range(768)])  # within pass_int4.code_max4(cols)
o = array("i", [0] * max(r for r, c in SHAPES))
for rows, cols in SHAPES:  # int4 rows as the checkpoint lays them out: f16 scales, then the codes
    g = cols >> 5
    wo = (2 * rows * g + 3) & ~3
    for i in range(rows * g):
        w[2 * i] = 0
        w[2 * i + 1] = 0x2C  # f16 scale 2**-4
    p = array("i", [wo, rows, cols, 16000, 0, 0, 0, 0, 11])
    k4.q_mv4(w, x, o, p)
    t0 = ticks_us()
    k4.q_mv4(w, x, o, p)
    t = ticks_diff(ticks_us(), t0)
    for i in range(rows):  # logits whose largest moves as a real classifier's do: now and then
        o[i] = (i * 7919) %% 65521
    t1 = ticks_us()
    b = k.q_argmax(o, rows)
    ta = ticks_diff(ticks_us(), t1)
    print("ROWS %%d %%d %%d %%d" %% (rows, cols, t, ta))
"""


def parse_model(out):
    r = {"parts": {}, "shapes": {}}
    for line in out.splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] in ("TOTAL", "WRAPPED"):
            r[f[0].lower()] = int(f[1])
        elif f[0] == "CAL":
            r["cal_" + f[1]] = int(f[2]) / int(f[3])
        elif f[0] == "PART":
            r["parts"][" ".join(f[3:])] = (int(f[1]), int(f[2]))
        elif f[0] == "SHAPE":
            r["shapes"][(int(f[1]), int(f[2]))] = (int(f[3]), int(f[4]))
        elif f[0] == "KIND":  # kind, pass, q_* module, q_mv4 module
            r["kind"] = "%s (%s pass; q_* %s, q_mv4 %s)" % tuple(f[1:5])
    if "total" not in r or "wrapped" not in r:
        raise SystemExit("bench_15m: the board printed no figures:\n" + out[-3000:])
    return r


def parts_of(r, unit, n):
    """name -> instructions a token (wrappers' cost off) from a parsed run; q_mv4 by 'q_mv4 RxC'."""
    d = {}
    for name, (us, c) in r["parts"].items():
        d[name] = (us - c * r["cal_wrap"]) * unit / n
    for (rows, cols), (us, c) in r["shapes"].items():
        d["q_mv4 %dx%d" % (rows, cols)] = (us - c * r["cal_shaped"]) * unit / n
    return d


def write_models(tmp, vocab, seed):
    from kvedge_host.boards import tinyckpt
    from bench_forward import convert
    shape = dict(tinyckpt.preset_shape("stories15m"), vocab_size=vocab)
    paths = []
    for layers in (1, 2):
        src, _ = tinyckpt.write(os.path.join(tmp, "l%d" % layers), seed=seed, name="m", **dict(shape, n_layers=layers))
        dst = os.path.join(tmp, "l%d.q.bin" % layers)
        convert(src, dst, "i4")
        paths.append(dst)
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=("m3", "m7", "xt"), default="m3")
    ap.add_argument("--kernels", choices=kernels.KINDS, help="default: the runtime's own choice (kernels.select)")
    ap.add_argument("--no-asm", action="store_true", help="xt: viper kernels only, as an ESP32's MicroPython "
                    "(no asm_xtensa): kvedge.kernels.q8_asm_xtensa refused before the kernels load")
    ap.add_argument("--context", type=int, default=256, help="positions 0..C-1 (default 256, stories15M's all)")
    ap.add_argument("--vocab", type=int, default=512, help="the small models' vocabulary (default 512)")
    ap.add_argument("--rows", type=int, nargs=3, default=[512, 1024, 2048],
                    help="q_mv4/q_argmax row counts for a classifier row's cost (two pairs: checked constant)")
    ap.add_argument("--heap", type=int, default=0, help="default: m3 4194304 (the whole model's image, "
                    "docs/model.md), m7 and xt 2097152")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not 1 <= a.context <= 256:
        ap.error("--context must be within 1..256 (the preset's positions)")
    if not 64 <= a.vocab <= 4096 or not 0 < a.rows[0] < a.rows[1] < a.rows[2] <= 4096:
        ap.error("--vocab within 64..4096; --rows three increasing counts up to 4096")
    if a.no_asm and a.runtime != "xt":
        ap.error("--no-asm: the Xtensa (--runtime xt) only")
    from kvedge_host.boards import m3board
    from bench_forward import machine
    heap = a.heap or {"m3": 4194304}.get(a.runtime, 2097152)
    lay = machine(a.runtime, heap)
    march = "armv7m" if a.runtime == "m3" else lay.marches[0]
    kv = {"dtype": "i8", "align": 0, "max_tokens": 256}
    head = {"no_asm": a.no_asm, "kernels": a.kernels}
    shapes = [(r, 288) for r in a.rows] + [(864, 288), (288, 288), (1536, 288), (288, 768)]
    unit = m3board.INSTRUCTIONS_PER_US
    with tempfile.TemporaryDirectory(prefix="kvedge-15m-") as tmp:
        l1, l2 = write_models(tmp, a.vocab, a.seed)
        folder = os.path.join(tmp, "rom")
        os.makedirs(folder)
        extra = [(l1, "l1.q.bin"), (l2, "l2.q.bin")]
        m3board.stage_package(folder, march, mpy=True, extra=extra, layout=lay)
        image = m3board.build_romfs(folder, os.path.join(tmp, "rom.img"), lay)
        runs = []
        with m3board.M3Board("rp2040", heap=heap, romfs=image, layout=lay) as b:
            for name in ("l1.q.bin", "l2.q.bin"):
                code = MODEL_CODE % dict(head, model="/rom/" + name, kv=kv, context=a.context)
                runs.append(parse_model(b.exec(code, timeout=14400)))
            out = b.exec(ROWS_CODE % dict(head, shapes=shapes), timeout=3600)
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "ROWS":
            rows[(int(f[1]), int(f[2]))] = (int(f[3]) * unit, int(f[4]) * unit)
        elif f and f[0] == "KIND":
            rows_kind = f[3]
    n = a.context
    t1, t2 = runs[0]["total"] * unit / n, runs[1]["total"] * unit / n
    layer = t2 - t1
    outside = t1 - layer
    r0, r1, r2 = a.rows
    mv_a = (rows[(r1, 288)][0] - rows[(r0, 288)][0]) / (r1 - r0)
    mv_b = (rows[(r2, 288)][0] - rows[(r1, 288)][0]) / (r2 - r1)
    am_a = (rows[(r1, 288)][1] - rows[(r0, 288)][1]) / (r1 - r0)
    am_b = (rows[(r2, 288)][1] - rows[(r1, 288)][1]) / (r2 - r1)
    per_row = (mv_b + am_b)  # the larger pair: the two agree within a call's rounding (printed)
    extra_rows = VOCAB - a.vocab
    token = t1 + (LAYERS - 1) * layer + extra_rows * per_row
    p1, p2 = parts_of(runs[0], unit, n), parts_of(runs[1], unit, n)
    names = sorted(set(p1) | set(p2))
    per_layer = {k: p2.get(k, 0) - p1.get(k, 0) for k in names}
    out_parts = {k: p1.get(k, 0) - per_layer[k] for k in names}
    cls = "q_mv4 %dx288" % a.vocab
    res = {"runtime": a.runtime, "kernels": runs[0]["kind"], "context": n, "vocab": a.vocab, "token": token,
           "t1": t1, "t2": t2, "layer": layer, "outside": outside, "q_mv4_row": [mv_a, mv_b],
           "q_argmax_row": [am_a, am_b], "per_layer": per_layer, "outside_parts": out_parts,
           "rows": {"%dx%d" % k: v for k, v in rows.items()}, "rows_kernels": rows_kind}
    if a.json:
        print(json.dumps(res))
        return 0
    f = lambda v: format(int(round(v)), ",")  # noqa: E731
    print("stories15M's shape (dim 288, hidden 768, 6 heads, head_dim 48), int4 weights in place from ROMFS, i8 "
          "cache of 256 slots, %s (%s .mpy, heap %d, qemu -icount shift=0), kernels: %s; mean over positions "
          "0-%d, instructions a token" % (lay.cpu, march, heap, runs[0]["kind"], n - 1))
    print("\nMeasured: 1 layer, %d tokens: %s; 2 layers: %s; a layer: %s; outside the layers: %s" % (
        a.vocab, f(t1), f(t2), f(layer), f(outside)))
    print("A classifier row (288 columns): q_mv4 %.1f (%d-%d rows) / %.1f (%d-%d), q_argmax %.1f / %.1f" % (
        mv_a, r0, r1, mv_b, r1, r2, am_a, am_b))
    wl = sum(v for k, v in per_layer.items())
    print("\n| part | a layer | x %d layers | share of the token |" % LAYERS)
    print("|---|---:|---:|---:|")
    for k in sorted(per_layer, key=lambda k: -per_layer[k]):
        if k != cls and abs(per_layer[k]) >= 500:
            print("| %s | %s | %s | %.1f %% |" % (k, f(per_layer[k]), f(LAYERS * per_layer[k]),
                                                 100.0 * LAYERS * per_layer[k] / token))
    print("| Python between (a layer less its parts) | %s | %s | %.1f %% |" % (
        f(layer - wl), f(LAYERS * (layer - wl)), 100.0 * LAYERS * (layer - wl) / token))
    print("| **a layer** | **%s** | **%s** | %.1f %% |" % (f(layer), f(LAYERS * layer), 100.0 * LAYERS * layer / token))
    cls_mv = out_parts.get(cls, 0) + extra_rows * mv_b
    cls_am = out_parts.get("q_argmax", 0) + extra_rows * am_b
    emb = out_parts.get("embedding (_embed, Python)", 0)
    rest = token - LAYERS * layer - cls_mv - cls_am - emb
    print("\n| outside the layers | instructions | share |")
    print("|---|---:|---:|")
    print("| classifier q_mv4 %dx288 (%s measured at %d rows + %d rows x %.1f) | %s | %.1f %% |" % (
        VOCAB, f(out_parts.get(cls, 0)), a.vocab, extra_rows, mv_b, f(cls_mv), 100.0 * cls_mv / token))
    print("| q_argmax over %d logits (the benchmark's greedy pick) | %s | %.1f %% |" % (VOCAB, f(cls_am),
                                                                                   100.0 * cls_am / token))
    print("| embedding (int4 row decoded in Python) | %s | %.1f %% |" % (f(emb), 100.0 * emb / token))
    print("| the rest (final norm, RoPE angles, Python) | %s | %.1f %% |" % (f(rest), 100.0 * rest / token))
    print("\n**composed token: %s instructions** (target <= %s: %s)" % (
        f(token), f(TARGETS[a.runtime]), "holds" if token <= TARGETS[a.runtime] else "misses by %s" % f(
            token - TARGETS[a.runtime])))
    print("\nq_mv4 alone (%s), instructions a multiply-add with the call:" % rows_kind)
    print("| shape | instructions | a MAC |")
    print("|---|---:|---:|")
    for (r, c), (t, _) in sorted(rows.items()):
        print("| %dx%d | %s | %.2f |" % (r, c, f(t), t / (r * c)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
