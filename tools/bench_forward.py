#!/usr/bin/env python3
"""The forward passes of a llama2.c model, per pass and kernel kind: speed at a given context, heap bytes
allocated per token, and (unix) llama2.c's own C run.c on the same model in the same run.

  tools/bench_forward.py [--runtime unix|m3|m0|m7|m55|xt|circuitpython] [--model M] [--forward int float ulab]
                         [--kernels asm viper native plain] [--context 256] [--tokens 8] [--llama2c PATH]
                         [--macs] [--board rp2040] [--heap BYTES] [--rom] [--cache K=V,...] [--unlocked]
                         [--tier block=B,cold=DTYPE,blocks=C]
                         [--json]

Each figure: a fresh interpreter converts nothing (the int8 file is written once on the host), builds the model
(int8 weights, or int4 with --weights-dtype i4, in RAM, or with --rom read in place from ROMFS; an i8 cache of 512 slots,
or --cache's), runs --context positions of real tokens from BOS (greedy), then
times --tokens more steps at that context and measures the bytes one step allocates (gc.mem_alloc() with
collection off). Every token is timed alone; on host runtimes the sequence runs --repeat rounds from a reset
cache (greedy decoding repeats the same tokens) and each position counts its best round, so a token the
scheduler of a loaded machine interrupted is not counted; llama2.c's run.c (a run lasts ~15 ms) counts its best
of 10 x --repeat runs.

Runtimes:
- unix: MicroPython's unix port (x86-64): tokens/s. --llama2c PATH: llama2.c's run.c compiled by you (e.g.
  `gcc -Ofast -o run run.c -lm`; never part of this repository) runs `-n CONTEXT` on the same checkpoint right
  after, and the ratio of its tokens/s (its own average over positions 0..CONTEXT-1) to kvedge's same average is
  printed; without --llama2c there is no ratio.
- m3: the emulated Cortex-M3 (kvedge_host.boards.m3board, qemu -icount shift=0, the 2 MiB image by default): exact
  instructions per token (1 us of ticks_us = 1000 instructions); the package as armv7m .mpy (--march). --macs
  adds each int8 kernel alone in instructions per multiply-accumulate (matvecs of the model's shapes, attention
  at head_dim 64).
- m0: the same on the emulated Cortex-M0 (qemu microbit, Armv6-M, armv6m .mpy, the rp2040's 215,040-byte heap:
  the RP2040's stand-in). The model's weights fit only read in place, so --rom is the default there, and the
  cache is a window of 92 positions and 4 sinks (max_tokens=96) unless --cache says otherwise: 512 slots alone
  would take 204,800 bytes, and a cache of --context + --tokens slots does not fit either.
- m7, m55: the same on the emulated Cortex-M7 (mps2-an500, armv7emsp, 2 MiB; the RP2350's stand-in) and
  Cortex-M55 (mps3-an547, armv7emdp, 460,800 bytes): cores with the DSP instructions, where the asm kernels'
  matrix-vector product is kvedge.kernels.q8_dsp_thumb's (SMLAD).
- m7, xt with --rom: weights over 3 MiB (a 15M-class model's int4 file) go into a larger ROMFS slot in RAM the
  firmware leaves unused (m3machines.BIG_ROM), read in place as from the 4 MiB partition.
- xt: the same on the emulated Xtensa lx106 (qemu lx60-nommu, call0, no FPU, xtensa .mpy, 2 MiB: the ESP32s'
  stand-in; no asm kernels there, so viper by default; the plain kernels' hundreds of millions of instructions a
  token take hours of qemu: name them with --kernels plain).
- circuitpython: the real CircuitPython 10 binary with ulab (../shared/runtimes/circuitpython-unix32): tokens/s
  of the ulab pass against the plain kernels' passes, in one run (their ratio printed)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge import kernels  # noqa: E402
from kvedge_host.boards import runtimes  # noqa: E402

EMULATED = ("m3", "m0", "m7", "m55", "xt")  # kvedge_host.boards.m3board's machines with the Cortex-M3's instruction counting
from kvedge_host.paths import DEVICE, SHARED_MODELS, SHARED_RUNTIMES  # noqa: E402

DEVICE_CODE = r"""
import gc
from array import array
from time import ticks_diff, ticks_us
if %(no_asm)r:  # as on an ESP32 (windowed Xtensa, no inline assembler): the asm_xtensa kernels refused
    import kvedge.kernels.q8_asm_xtensa
    kvedge.kernels.q8_asm_xtensa.OK = False
from kvedge import kernels
kernels.select(%(kernels)r)
from kvedge.model.llama import Llama
FW = %(forward)r
KV = %(kv)r
TIER = %(tier)r  # a tiered cache (KV is its ring), or None
if FW == "auto":  # Llama's default arguments: the pass a user gets (kvedge.model.passes)
    m = Llama(%(model)r, kv=KV, stream=%(stream)r, tier=TIER)
else:
    m = Llama(%(model)r, kv=KV, forward=FW, stream=%(stream)r, tier=TIER)
RAN = m.forward_kind if FW != "auto" else "auto=" + m.forward_kind
if %(unlocked)r:  # the integer pass's steps never run with the heap locked (kvedge.model.pass_int.Forward.step)
    m._lockable = False
    RAN += "(unlocked)"
V = m.cfg.vocab_size


def pick(lg):
    if m.intp is not None:
        return m.intp.k.q_argmax(lg, V)
    b = 0
    for j in range(V):
        if lg[j] > lg[b]:
            b = j
    return b


# Each round starts a new sequence and times every token alone; a position's figure is its best round (greedy
# decoding repeats the same tokens, so every round does the same work): on a loaded host a token the scheduler
# interrupted is not counted (the emulated board's counts are exact; it runs one round)
C = %(context)d
N = %(tokens)d
tt = array("i", [0] * (C + N))
for r in range(%(repeat)d):
    m.reset()
    tok = 1
    for i in range(C):
        t0 = ticks_us()
        tok = pick(m.forward(tok))
        dt = ticks_diff(ticks_us(), t0)
        if r == 0 or dt < tt[i]:
            tt[i] = dt
        if tok == 1:
            tok = 2  # past a story's end: keep going, as llama2.c -n does not (it stops; we compare the average)
    gc.collect()
    for i in range(N):
        t0 = ticks_us()
        m.forward(3 + (i * 37) %% (V - 3))
        dt = ticks_diff(ticks_us(), t0)
        if r == 0 or dt < tt[C + i]:
            tt[C + i] = dt
a0 = alloc = last = 0  # bound before the count: binding a new global can grow the globals' table
gc.collect()
try:
    gc.disable()
    a0 = gc.mem_alloc()
    t0 = ticks_us()
    m.forward(tok)
    last = ticks_diff(ticks_us(), t0)  # the allocation count's step is a position too (C + N): timed as well
    alloc = gc.mem_alloc() - a0
finally:
    gc.enable()
avg = 0
for i in range(%(first)d, C):  # --from: the mean's first position (the steps before it warm up)
    avg += tt[i]
best = 0
for i in range(N):
    best += tt[C + i]
print("BENCH %%s %%s %%d %%d %%d %%d" %% (kernels.kind(), RAN, avg, best, %(tokens)d, alloc))
print("BENCHALL %%d" %% (avg + best + last))  # every position from --from to C + N, the allocation count's included
"""

MACS_CODE = r"""
from array import array
from time import ticks_diff, ticks_us
from kvedge import kernels
kernels.select(%(kernels)r)
from kvedge.model import pass_int
k = pass_int.qkernels()[0]
for rows, cols in ((128, 64), (344, 64), (64, 172), (512, 64)):
    w = bytearray(rows * cols)
    z = array("i", [(i * 13) %% 255 - 127 for i in range(cols)])
    x = array("i", [0] * cols)
    pass_int.quantize(k, z, x, cols, 127, 0, 127, array("i", [0] * 8))  # x as this kind's q_mv reads it
    p = array("i", [0] * (8 + rows))
    p[1] = rows
    p[2] = cols
    p[3] = 16000
    for r in range(rows):
        p[8 + r] = 20000 << 8
    o = array("i", [0] * rows)
    t0 = ticks_us()
    k.q_mv(w, x, o, p)
    print("MACS q_mv %%dx%%d %%d %%d" %% (rows, cols, ticks_diff(ticks_us(), t0), rows * cols))
from kvedge.model.pass_int4 import kernels4
k4 = kernels4()
for rows, cols in ((64, 288), (128, 64), (64, 768)):  # int4 rows (checkpoint's layout: f16 scales, then codes)
    g = cols >> 5
    wo = (2 * rows * g + 3) & ~3
    w = bytearray(wo + 16 * rows * g)
    for i in range(rows * g):
        w[2 * i + 1] = 0x2C  # f16 scale 2**-4
    for i in range(wo, len(w)):
        w[i] = (i * 37) & 255
    x = array("i", [(i * 13) %% 255 - 127 for i in range(cols)])  # within pass_int4.code_max4(cols)
    p = array("i", [wo, rows, cols, 16000, 0, 0, 0, 0, 11])
    o = array("i", [0] * rows)
    t0 = ticks_us()
    k4.q_mv4(w, x, o, p)
    print("MACS q_mv4 %%dx%%d %%d %%d" %% (rows, cols, ticks_diff(ticks_us(), t0), rows * cols))
from kvedge.attention import Attention
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
c = KVCache(CacheConfig(1, 8, 2, 64, 256, "i8", align=0))
kc = array("b", bytes(128))
ks = array("H", [0x2000, 0x2000])  # 2**-7: within step_q8's Q8_RANGE with the query's
for p in range(256):
    c.start_token()
    for i in range(128):
        kc[i] = (p * 7 + i * 3) %% 255 - 127
    c.write_q8(0, kc, ks, kc, ks)
att = Attention(c, tile=32)
if hasattr(att.k, "att_preload"):
    att.k.att_preload(att.k)  # the fused kernels, as Llama(forward="int") loads them
qc = array("b", [(i * 13) %% 255 - 127 for i in range(512)])
qs = array("H", [0x2000] * 8)
oq = array("i", [0] * 512)
oe = array("i", [0] * 8)
att.step_q8(0, qc, qs, oq, oe)
t0 = ticks_us()
att.q8_step(0, qc, qs, oq, oe, None, None, -1)  # as the forward pass calls it: its buffers checked once
print("MACS step_q8 8h/2kv/d64x256 %%d %%d" %% (ticks_diff(ticks_us(), t0), 8 * 256 * 64 * 2))
t0 = ticks_us()
att.step_q8(0, qc, qs, oq, oe)  # the public call checks its arguments every time
print("MACS step_q8(checked) 8h/2kv/d64x256 %%d %%d" %% (ticks_diff(ticks_us(), t0), 8 * 256 * 64 * 2))
"""


# issue 13's targets: (what, bound, "max" or "min"); a figure is printed beside its target
M3_TOKEN = {"asm": 8000000, "viper": 15000000, "plain": 150000000}  # instructions per token, int pass, ctx 256
M3_TOKEN_15M = {"asm": 70000000}  # issue 43's acceptance (issue 24 asked 100 M; the stretch target is 50 M), a stories15M-shaped model with int4 weights from ROMFS, 256 tokens
M3_MAC = {"asm": 6.0, "viper": 30.0}  # instructions per MAC of the int8 kernels
M0_CACHE = "max_tokens=96,window=92,sinks=4"  # what fits the rp2040's heap beside the model's buffers (benchmarks.md)
WEIGHTS_FILE = "model.q.bin"  # the converted weights, on the host and in ROMFS
M3_MAC4 = {"asm": 7.0}  # of the int4 kernel (q_mv4, armv6m code: issue 24)
UNIX_TOK_S = 300.0  # tokens/s at context 256 (int pass, viper)
LLAMA2C_RATIO = 25.0  # llama2.c's run.c tokens/s over kvedge's, at most
ULAB_RATIO = 10.0  # ulab pass over the plain path on real CircuitPython, at least


def token_targets(model, weights_dtype):
    """The instructions-per-token targets for this model: stories260K's shape (M3_TOKEN), stories15M's with int4
    weights (M3_TOKEN_15M); none for another model."""
    from kvedge.model.header import read_config
    c = read_config(model)[0]
    shape = (c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size)
    if shape == (64, 172, 5, 8, 4, 512):
        return M3_TOKEN
    if shape == (288, 768, 6, 6, 6, 32000) and weights_dtype == "i4":
        return M3_TOKEN_15M
    return {}


def verdict(value, bound, most=True):
    """'target <= B: holds' (or 'misses by X%')."""
    ok = value <= bound if most else value >= bound
    if ok:
        word = "holds"
    elif bound:
        word = "misses by %.0f %%" % (abs(value - bound) * 100.0 / bound)
    else:
        word = "misses by %s" % format(value, ",")
    return "target %s %s: %s" % ("<=" if most else ">=", format(bound, ",") if isinstance(bound, int) else bound,
                                 word)


def circuitpython_bin():
    return os.environ.get("KVEDGE_CIRCUITPYTHON") or os.path.join(SHARED_RUNTIMES, "circuitpython-unix32",
                                                                     "circuitpython")


BIG_WEIGHTS = 3 << 20  # weights over this leave the package no room in a 4 MiB ROMFS partition


def machine(runtime, heap, weights_bytes=0):
    """The emulated machine: the runtime's (m3board.LAYOUTS), on the Cortex-M3 the image with its heap in PSRAM
    when `heap` is one of those (4 or 8 MiB: their ROMFS slots hold 12 / 8 MiB of weights); on the Cortex-M7 and
    the Xtensa, weights of more than BIG_WEIGHTS bytes go into a larger ROMFS slot in their spare RAM
    (m3machines.BIG_ROM: a 15M-class model's int4 file, read in place as from the partition)."""
    from kvedge_host.boards import m3board, m3machines
    if weights_bytes > BIG_WEIGHTS and runtime in m3machines.BIG_ROM:
        return m3machines.BIG_ROM[runtime]
    return (runtime == "m3" and m3board.psram_layout(heap)) or m3board.LAYOUTS[runtime]


def convert(model, out, dtype):
    """kvedge convert: int8 (the device's converter) or int4 (the host's numpy converter, byte for byte the
    device's kvedge.model.convert4, which takes minutes for a 15M-class model on CPython)."""
    if dtype == "i4":
        from kvedge_host.readers.write import convert_i4_numpy
        convert_i4_numpy(model, out)
    else:
        from kvedge.model.checkpoint import convert_to_i8
        convert_to_i8(model, out)


def run_device(runtime, code, model_dir, heap, march, board):
    if runtime == "unix":
        rc, out = runtimes.run_code("unix", code, heap, [DEVICE, model_dir], timeout=3600)
    elif runtime == "circuitpython":
        exe = circuitpython_bin()
        if not os.path.exists(exe):
            raise SystemExit("bench_forward: no CircuitPython binary at %s" % exe)
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(code)
        try:
            p = subprocess.run([exe, "-X", "heapsize=%d" % heap, f.name], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=dict(os.environ, MICROPYPATH=DEVICE), timeout=3600)
            rc, out = p.returncode, p.stdout.decode("utf-8", "replace")
        finally:
            os.unlink(f.name)
    else:
        from kvedge_host.boards import m3board
        extra = [(os.path.join(model_dir, WEIGHTS_FILE), WEIGHTS_FILE)] if model_dir else []
        size = os.path.getsize(extra[0][0]) if extra else 0
        out = m3board.run_code(code.replace(os.path.join(model_dir or "", WEIGHTS_FILE), "/rom/" + WEIGHTS_FILE),
                               board=board, heap=heap, march=march, extra=extra, timeout=7200,
                               layout=machine(runtime, heap, size))
        rc = 0
    if rc != 0:
        raise SystemExit("bench_forward: %s failed (exit %s):\n%s" % (runtime, rc, out[-3000:]))
    return out


def llama2c_tok_s(exe, model, tok, steps, runs=1):
    """run.c's own 'achieved tok/s' (greedy, -n steps), the best of `runs` runs (a run lasts milliseconds: on a
    loaded host the scheduler decides most of a single one)."""
    best = None
    for _ in range(runs):
        p = subprocess.run([exe, model, "-z", tok, "-t", "0", "-n", str(steps)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        got = None
        for line in p.stdout.decode("utf-8", "replace").splitlines():
            if "achieved tok/s:" in line:
                got = float(line.rsplit(":", 1)[1])
        if got is None:
            raise SystemExit("bench_forward: no 'achieved tok/s' from %s" % exe)
        best = got if best is None or got > best else best
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=("unix",) + EMULATED + ("circuitpython",), default="unix")
    ap.add_argument("--model", default=os.path.join(SHARED_MODELS, "stories260K.bin"))
    ap.add_argument("--forward", nargs="+", choices=("auto", "float", "int", "ulab"), help="the passes (default: "
                    "auto, Llama's default arguments, beside int; circuitpython: ulab int float)")
    ap.add_argument("--kernels", nargs="+", choices=kernels.KINDS)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=8, help="timed steps at the context (default 8)")
    ap.add_argument("--from", dest="first", type=int, default=0,
                    help="the mean's first position (default 0; 5: issue 43's tokens 5 on, after the warm-up)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (host runtimes): each starts a new sequence and "
                    "times every token alone; each position's best round counts (and run.c's best of 10x as many runs)")
    ap.add_argument("--heap", type=int, default=0, help="heap bytes (m3: 4194304 or 8388608 run the images whose heap "
                    "lies in PSRAM, beside a 12 / 8 MiB ROMFS slot; default: unix 64 MiB, m3 2 MiB, "
                    "circuitpython 4 MiB: the model's int8 weights in RAM)")
    ap.add_argument("--board", default="rp2040", help="m3: profile for the firmware when --heap is not given")
    ap.add_argument("--march", help="m3: -march of the package's .mpy (default armv7m; armv6m: the RP2040's; "
                    "m7 armv7emsp, m55 armv7emdp)")
    ap.add_argument("--llama2c", help="unix: llama2.c's run.c compiled by you: its tokens/s and the ratio")
    ap.add_argument("--macs", action="store_true", help="m3: also each int8 and int4 kernel in instructions per MAC")
    ap.add_argument("--rom", action="store_true", help="m3: the weights read in place from ROMFS (as a board "
                    "with ROMFS runs them; a 215 KB heap does not hold them) instead of copied to RAM")
    ap.add_argument("--weights-dtype", choices=("i8", "i4"), default="i8", help="the weights the model is converted "
                    "to (kvedge convert): int8 per-row, or int4 in groups of 32 (the integer pass only)")
    ap.add_argument("--tier", metavar="block=B,cold=DTYPE,blocks=C", help="a tiered cache: --cache is its ring "
                    "(max_tokens=S+W,window=W,sinks=S), older tokens in C blocks of B on the board's flash, as "
                    "`kvedge plan` writes it (e.g. block=16,cold=i8,blocks=27)")
    ap.add_argument("--cache", metavar="K=V,...", help="the i8 cache's CacheConfig "
                    "fields (default max_tokens=512; on m0 max_tokens=96,window=92,sinks=4)")
    ap.add_argument("--unlocked", action="store_true", help="also each integer-pass row with the steps' heap "
                    "lock off (what it saves: MicroPython's heap-allocated frames)")
    ap.add_argument("--no-asm", action="store_true", help="xt: the viper q_mv, as on a port without asm_xtensa "
                    "(an ESP32's): kvedge.kernels.q8_asm_xtensa refused before the kernels load")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not 0 <= a.first < a.context:
        ap.error("--from must be within 0..--context - 1")
    if not os.path.exists(a.model):
        print("bench_forward: %s not found" % a.model, file=sys.stderr)
        return 2
    cp = a.runtime == "circuitpython"
    forwards = a.forward or (["ulab", "int", "float"] if cp else ["auto", "int"])
    m3 = a.runtime in EMULATED
    kinds = a.kernels or (["plain"] if cp else (["asm", "viper", "plain"] if m3 and a.runtime != "xt" else ["viper"]))
    heap = a.heap or {"unix": 64 << 20, "m3": 2097152, "m0": 215040, "m7": 2097152, "m55": 460800, "xt": 2097152,
                      "circuitpython": 4 << 20}[a.runtime]
    if a.runtime == "m0" and heap == 215040:
        a.rom = True  # the RP2040 reads its weights in place from flash: 215,040 bytes of heap do not hold them
    if a.cache is None:
        a.cache = M0_CACHE if a.runtime == "m0" and heap == 215040 else "max_tokens=512"
    from kvedge_host.boards.m3board import LAYOUTS
    lay = machine(a.runtime, heap) if a.runtime in LAYOUTS else None
    # the machine's own -march (the M3 runs armv7m: its firmware loads armv6m..armv7em)
    a.march = a.march or ("armv7m" if a.runtime == "m3" or lay is None else lay.marches[0])
    if m3 and a.repeat > 1:
        a.repeat = 1  # instruction counts are exact
    kv = {"dtype": "i8", "align": 0}
    try:
        for item in a.cache.split(","):
            k, v = item.split("=")
            kv[k.strip()] = int(v)
    except ValueError:
        print("bench_forward: --cache %r: not K=V,... with integer values" % a.cache, file=sys.stderr)
        return 2
    tier = None
    if a.tier:  # block=B,cold=DTYPE,blocks=C: kvedge.tier.cache's cold store (--cache: its ring, window and sinks)
        try:
            t = dict(item.split("=") for item in a.tier.split(","))
            tier = {"kind": "tiered", "block": int(t.pop("block", 16)), "cold_dtype": t.pop("cold", "i8"),
                    "cold_blocks": int(t.pop("blocks")), "at_cap": "drop", "cold_align": 0}
            if t:
                raise ValueError(t)
        except (ValueError, KeyError):
            print("bench_forward: --tier %r: not block=B,cold=DTYPE,blocks=C" % a.tier, file=sys.stderr)
            return 2
    if a.rom and not m3:
        print("bench_forward: --rom: the emulated board's ROMFS (--runtime m3) only", file=sys.stderr)
        return 2
    rows = []
    macs = []
    with tempfile.TemporaryDirectory(prefix="kvedge-bench-") as tmp:
        i8 = os.path.join(tmp, WEIGHTS_FILE)
        convert(os.path.abspath(a.model), i8, a.weights_dtype)
        for kind in kinds:
            for fw in forwards:
                if fw == "ulab" and kind != kinds[0]:
                    continue  # one ulab row: it uses no kernel kind
                out = ""
                for unlocked in ((False, True) if a.unlocked and fw in ("auto", "int") else (False,)):
                    code = DEVICE_CODE % {"kernels": kind, "forward": fw, "model": i8, "context": a.context,
                                          "tokens": a.tokens, "repeat": a.repeat, "kv": kv,
                                          "stream": "rom" if a.rom else False, "unlocked": unlocked, "tier": tier,
                                          "no_asm": a.no_asm, "first": a.first}
                    out += run_device(a.runtime, code, tmp, heap, a.march, a.board)
                every = [int(line.split()[1]) for line in out.splitlines() if line.startswith("BENCHALL ")]
                for line in out.splitlines():
                    if line.startswith("BENCH "):
                        k, f, avg, best, n, alloc = line.split()[1:]
                        avg, best, n, alloc = int(avg), int(best), int(n), int(alloc)
                        r = {"kernels": k, "forward": f, "context": a.context, "avg_us": avg, "us": best,
                             "tokens": n, "bytes_per_token": alloc}
                        if m3:
                            r["instructions_per_token"] = best * 1000 // n
                            r["mean_instructions_per_token"] = avg * 1000 // (a.context - a.first)  # from..ctx-1
                            if every:  # from..ctx+tokens: the timed steps and the allocation count's too
                                r["mean_all_instructions_per_token"] = every.pop(0) * 1000 // (
                                    a.context + n + 1 - a.first)
                        else:
                            r["tok_s"] = n * 1e6 / best
                            r["avg_tok_s"] = (a.context - a.first) * 1e6 / avg
                        rows.append(r)
                        if not a.json:
                            print("  %s pass, %s kernels: %s" % (f, k, (
                                "%s instructions/token" % format(r["instructions_per_token"], ",")) if m3 else
                                "%.1f tok/s" % r["tok_s"]), file=sys.stderr)
            if a.macs and m3:
                out = run_device(a.runtime, MACS_CODE % {"kernels": kind}, None, heap, a.march, a.board)
                for line in out.splitlines():
                    if line.startswith("MACS "):
                        name, shape, us, n = line.split()[1:]
                        macs.append({"kernels": kind, "kernel": name, "shape": shape,
                                     "instructions_per_mac": int(us) * 1000.0 / int(n)})
    c_tok_s = None
    if a.llama2c and a.runtime == "unix":
        tok = os.path.join(os.path.dirname(os.path.abspath(a.model)), "tok512.bin")
        c_tok_s = llama2c_tok_s(a.llama2c, a.model, tok, a.context, 10 * a.repeat)
    if a.json:
        print(json.dumps({"model": os.path.basename(a.model), "runtime": a.runtime, "rows": rows, "macs": macs,
                          "llama2c_tok_s": c_tok_s}))
        return 0
    where = {"unix": "MicroPython unix port (x86-64)", "circuitpython": "CircuitPython 10.3 unix binary with "
             "ulab (float32, 32-bit)"}.get(a.runtime) or "emulated %s%s (qemu -icount shift=0, %s .mpy, heap %d)" % (
                 lay.cpu, " (DSP)" if a.runtime in ("m7", "m55") else "", a.march, heap)
    print("%s, %s weights %s, i8 cache (%s), %s; %d timed steps at context %d" % (
        os.path.basename(a.model), {"i8": "int8", "i4": "int4"}[a.weights_dtype],
        "read in place from ROMFS" if a.rom else "in RAM", a.cache, where, a.tokens,
        a.context))
    if m3:
        print("| forward pass | kernels | instructions/token | target | mean over positions %d-%d | "
              "bytes allocated/token | target |" % (a.first, a.context - 1))
        print("|---|---|---:|---|---:|---:|---|")
        targets = token_targets(a.model, a.weights_dtype)
        for r in rows:
            n = r["instructions_per_token"]
            t = verdict(n, targets[r["kernels"]]) if r["forward"] in ("int", "auto=int") and \
                r["kernels"] in targets and a.runtime == "m3" else "-"  # the targets are the Cortex-M3's
            print("| %s | %s | %s | %s | %s | %s | %s |" % (r["forward"], r["kernels"], format(n, ","), t,
                                                            format(r["mean_instructions_per_token"], ","),
                                                            format(r["bytes_per_token"], ","),
                                                       verdict(r["bytes_per_token"], 0)))
        for r in rows:
            if "mean_all_instructions_per_token" in r:
                print("%s pass, %s kernels: mean over every position run, %d-%d: %s instructions/token" % (
                    r["forward"], r["kernels"], a.first, a.context + a.tokens,
                    format(r["mean_all_instructions_per_token"], ",")))
        if macs:
            print("\n| kernel | kernels | shape | instructions/MAC | target |")
            print("|---|---|---|---:|---|")
            for m in macs:
                b = None if "(" in m["kernel"] or a.runtime != "m3" else (M3_MAC4 if m["kernel"] == "q_mv4" else M3_MAC).get(m["kernels"])  # M3's, alone
                print("| %s | %s | %s | %.2f | %s |" % (m["kernel"], m["kernels"], m["shape"],
                                                       m["instructions_per_mac"],
                                                       verdict(m["instructions_per_mac"], b) if b else "-"))
        return 0
    print("| forward pass | kernels | tokens/s at context %d | target | tokens/s over positions %d-%d | "
          "bytes allocated/token | target |" % (a.context, a.first, a.context - 1))
    print("|---|---|---:|---|---:|---:|---|")
    for r in rows:
        t = "-"
        if a.runtime == "unix" and r["forward"] == "int" and a.context == 256:
            t = verdict(r["tok_s"], UNIX_TOK_S, most=False)
        ta = verdict(r["bytes_per_token"], 0) if r["forward"] == "int" else "-"
        print("| %s | %s | %.1f | %s | %.1f | %s | %s |" % (r["forward"], r["kernels"], r["tok_s"], t,
                                                           r["avg_tok_s"], format(r["bytes_per_token"], ","), ta))
    if cp:
        ulab = [r for r in rows if r["forward"] == "ulab"]
        for r in rows:
            if ulab and r["forward"] != "ulab":
                x = ulab[0]["tok_s"] / r["tok_s"]
                print("ulab pass against the %s pass with %s kernels: %.1fx tokens/s at context %d (%s)" % (
                    r["forward"], r["kernels"], x, a.context, verdict(x, ULAB_RATIO, most=False)))
    if c_tok_s is not None:
        for r in rows:
            x = c_tok_s / r["avg_tok_s"]
            print("llama2.c run.c (%s, -n %d, best of %d runs): %.0f tok/s, %.1fx kvedge's %s pass with %s kernels "
                  "over the same positions (%s)" % (a.llama2c, a.context, 10 * a.repeat, c_tok_s, x, r["forward"], r["kernels"],
                                      verdict(x, LLAMA2C_RATIO)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
