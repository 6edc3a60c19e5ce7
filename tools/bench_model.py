#!/usr/bin/env python3
"""Tokens per second of a llama2.c model on the MicroPython unix port, per weight type, cache type and kernels.

  tools/bench_model.py [--model M] [--contexts 256 512] [--weights f32 i8] [--caches f32 i8]
                       [--kernels plain viper] [--tokens 16] [--repeat 3] [--json] [--runtime m3 --board rp2040]

--runtime m3: the emulated Cortex-M3 at --board's heap: instructions per token (exact under qemu -icount),
weights streamed from the board's flash filesystem when they would take over half the heap.

For each combination the cache is first filled to (context - tokens) positions with synthetic rows (attention
cost depends on how many tokens are cached, not on their values), then `tokens` real forward steps are timed:
the figure is tokens/s at that context (garbage collection on, as in a real run). Bytes allocated per token:
gc.mem_alloc() growth over one step with collection off (on MicroPython every float result is a heap object).
int8 weights come from `kvedge convert` (written to a temporary file)."""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge.budget import LOWBIT, QK  # noqa: E402
from kvedge_host.paths import DEVICE, SHARED_MODELS  # noqa: E402
import _benchkit  # noqa: E402

DEVICE_CODE = """
import gc
from kvedge import kernels
from kvedge.compat import ticks_diff, ticks_us  # CircuitPython boards have no time.ticks_*
kernels.select(%(kernels)r)
from kvedge.model.llama import Llama
m = Llama(%(model)r, kv={"dtype": %(cache)r, "align": 0, "max_tokens": %(slots)d}, stream=%(stream)r,
          forward="float")  # the float pass this table has always measured (Llama's default is auto)
c = m.cache
cfg = m.cfg
k = [0.0] * cfg.kv_dim
v = [0.0] * cfg.kv_dim
for p in range(%(context)d - %(tokens)d):
    c.start_token()
    for l in range(cfg.n_layers):
        for i in range(cfg.kv_dim):
            k[i] = ((p * 7 + i * 3 + l) %% 17 - 8) * 0.1
            v[i] = ((p * 5 + i + l) %% 13 - 6) * 0.1
        c.write(l, k, v)
gc.collect()
gc.disable()  # one token with collection off: its allocations, then timed tokens with collection on
mem = getattr(gc, "mem_alloc", None)  # MicroPython and CircuitPython only (CPython: -2, not measured)
a0 = mem() if mem else 0
fit = 1
try:
    m.forward(1)
except MemoryError:  # a board's heap: the token's garbage outgrows it with collection off (-1: unknown)
    fit = 0
gc.enable()
a1 = (mem() if mem else a0 - 2) if fit else a0 - 1
gc.collect()
t0 = ticks_us()
tok = 1
for i in range(%(tokens)d - 1):
    lg = m.forward(tok)
    tok = 2 + (i * 37) %% 500
us = ticks_diff(ticks_us(), t0)
print("BENCH %%d %%d %%d %%s %%d" %% (%(tokens)d - 1, us, a1 - a0, kernels.kind(), 1 if m.int_attention else 0))
"""


def _bytes(n):
    """-1: the token's garbage outgrew the heap with collection off; -2: not measured (CPython has no
    gc.mem_alloc)."""
    return "> free heap" if n == -1 else "-" if n == -2 else format(n, ",")


def run_one(model, weights, cache, kern, context, tokens, heap, runtime="unix", stream=False):
    # i4/i2 key groups tile the cache: a context that is not a whole number of groups gets the slots of the
    # next whole group (the run still fills and measures `context` tokens)
    slots = -(-context // QK) * QK if cache in LOWBIT else context
    code = DEVICE_CODE % {"kernels": kern, "model": model, "cache": cache, "context": context, "tokens": tokens,
                          "stream": stream, "slots": slots}
    rc, out = _benchkit.run(runtime, code, heap, [DEVICE, os.path.dirname(model)], timeout=3600)
    for line in out.splitlines():
        if line.startswith("BENCH "):
            n, us, alloc, kind, pass_int = line.split()[1:]
            n, us, alloc = int(n), int(us), int(alloc)
            r = {"weights": weights, "cache": cache, "kernels": kind, "context": context,
                 "attention": "int" if pass_int == "1" else "float", "tok_s": n * 1e6 / us,
                 "ms_per_token": us / 1000.0 / n, "bytes_per_token": alloc}
            ins = _benchkit.instructions(runtime, us)
            if ins is not None:  # exact on the emulated board: per token, and per weight MAC below
                r["instructions_per_token"] = ins // n
            return r
    raise RuntimeError("bench failed (exit %s):\n%s" % (rc, out[-2000:]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(SHARED_MODELS, "stories260K.bin"))
    ap.add_argument("--contexts", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--weights", nargs="+", default=["f32", "i8"], choices=["f32", "i8"])
    ap.add_argument("--caches", nargs="+", default=["f32", "i8"], choices=["f32", "f16", "i8", "i4"])
    ap.add_argument("--kernels", nargs="+", default=["plain", "viper"], choices=["plain", "native", "viper"])
    ap.add_argument("--tokens", type=int, default=16, help="timed steps per figure (default 16)")
    ap.add_argument("--repeat", type=int, default=3, help="fresh runs per figure, the fastest is kept "
                    "(default 3: other load on the machine only ever slows a run down)")
    ap.add_argument("--heap", type=int, default=256 << 20, help="unix port heap (default 256 MB: one plain f32 "
                    "step's garbage fits uncollected); m3 runs at --board's heap")
    ap.add_argument("--stream", action="store_true", help="weights stay in the file, read row by row (what a "
                    "board whose heap cannot hold them does; default on m3 when they do not fit)")
    _benchkit.add_arguments(ap)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    heap = _benchkit.heap_for(a.runtime, a.board, a.heap)
    if _benchkit.is_m3(a.runtime):
        a.repeat = 1  # instruction counts are exact: one run is the figure
    if not os.path.exists(a.model):
        print("bench_model: %s not found" % a.model, file=sys.stderr)
        return 2
    from kvedge.model.checkpoint import convert_to_i8
    tmp = tempfile.mkdtemp(prefix="kvedge_bench_")
    files = {"f32": os.path.abspath(a.model)}
    if "i8" in a.weights:
        files["i8"] = os.path.join(tmp, "model.i8.bin")
        convert_to_i8(files["f32"], files["i8"])
    rows = []
    try:
        for w in a.weights:
            for c in a.caches:
                for k in a.kernels:
                    for ctx in a.contexts:
                        stream = a.stream or (_benchkit.is_m3(a.runtime)
                                              and os.path.getsize(files[w]) > heap // 2)
                        r = max((run_one(files[w], w, c, k, ctx, a.tokens, heap, a.runtime, stream)
                                 for _ in range(a.repeat)), key=lambda x: x["tok_s"])
                        r["stream"] = stream
                        rows.append(r)
                        if not a.json:
                            speed = ("%s instructions/token" % format(r["instructions_per_token"], ",")
                                     if "instructions_per_token" in r else "%.1f tok/s" % r["tok_s"])
                            print("  %s weights, %s cache, %s kernels, context %d: %s" % (
                                w, c, r["kernels"], ctx, speed), file=sys.stderr)
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    if a.json:
        print(json.dumps({"model": os.path.basename(a.model), "rows": rows}))
        return 0
    print("%s; %s, %d timed tokens per figure, best of %d runs" % (
        os.path.basename(a.model), _benchkit.describe(a.runtime, a.board, heap), a.tokens - 1, a.repeat))
    if _benchkit.is_m3(a.runtime):
        print("| weights | cache | kernels | attention path | context | weights read | instructions/token | "
              "bytes allocated/token |")
        print("|---|---|---|---|---:|---|---:|---:|")
        for r in rows:
            print("| %s | %s | %s | %s | %d | %s | %s | %s |" % (
                r["weights"], r["cache"], r["kernels"], r["attention"], r["context"],
                "streamed from flash" if r["stream"] else "in RAM", format(r["instructions_per_token"], ","),
                _bytes(r["bytes_per_token"])))
        return 0
    print("| weights | cache | kernels | attention path | context | tokens/s | ms/token | bytes allocated/token |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %s | %s | %s | %d | %.1f | %.1f | %s |" % (
            r["weights"], r["cache"], r["kernels"], r["attention"], r["context"], r["tok_s"], r["ms_per_token"],
            _bytes(r["bytes_per_token"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
