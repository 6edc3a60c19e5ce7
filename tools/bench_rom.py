#!/usr/bin/env python3
"""Instructions per token on the emulated Cortex-M3 with int8 weights in RAM, streamed from a littlefs file, and read
in place from ROMFS (kvedge.model.checkpoint's "rom" placement).

  tools/bench_rom.py [--model ../shared/models/stories260K.bin] [--tokens 8] [--context 64] [--heap 2097152]

One qemu board (mps2-an385 under -icount shift=0: 1 us of ticks_us = 1000 instructions) per placement, the package
as armv7m .mpy and the int8 weights (`kvedge convert`) in its ROMFS image; the streamed case first copies them to
the littlefs RAM disk (untimed). Each run: an i8 cache of --context slots, the float forward pass with the board's
best kernels, --tokens tokens after one warm-up token; the figure is the mean over the timed tokens. The heap is
the benchmark image's (weights in RAM need more than a board's)."""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge_host.boards import m3board  # noqa: E402
from kvedge_host.paths import SHARED_MODELS  # noqa: E402

CODE = """
import gc, time
from kvedge import kernels
from kvedge.model.llama import Llama
place = %(place)r
path = '/rom/model.i8.bin'
if place == 'stream':
    src = open(path, 'rb')
    dst = open('/model.i8.bin', 'wb')
    buf = bytearray(4096)
    while True:
        n = src.readinto(buf)
        if not n:
            break
        dst.write(memoryview(buf)[:n])
    src.close()
    dst.close()
    del buf
    path = '/model.i8.bin'
gc.collect()
m = Llama(path, kv={'dtype': 'i8', 'align': 0, 'max_tokens': %(context)d},
          stream={'ram': False, 'stream': True, 'rom': 'rom'}[place])
gc.collect()
m.forward(1)
t0 = time.ticks_us()
tok = 1
for i in range(%(tokens)d):
    m.forward(tok)
    tok = 2 + (i * 37) %% 500
us = time.ticks_diff(time.ticks_us(), t0)
gc.collect()
print('BENCH', m.w.stream, kernels.kind(), us, gc.mem_alloc())
"""


def run(model_i8, place, tokens, context, heap):
    out = m3board.run_code(CODE % {"place": place, "tokens": tokens, "context": context}, heap=heap,
                           march="armv7m", extra=[(model_i8, "model.i8.bin")], timeout=3600)
    for line in out.splitlines():
        if line.startswith("BENCH "):
            held, kind, us, alloc = line.split()[1:]
            return {"place": place, "held": held, "kernels": kind, "us": int(us), "heap_in_use": int(alloc),
                    "per_token": m3board.instructions(int(us)) / tokens}
    raise RuntimeError("no figure:\n" + out[-2000:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(SHARED_MODELS, "stories260K.bin"))
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--heap", type=int, default=2097152)
    a = ap.parse_args(argv)
    why = m3board.missing(heap=a.heap)
    if why:
        print("bench_rom: the emulated board cannot run here: %s" % why, file=sys.stderr)
        return 2
    if not os.path.exists(a.model):
        print("bench_rom: %s not found" % a.model, file=sys.stderr)
        return 2
    from kvedge.model.checkpoint import convert_to_i8
    with tempfile.TemporaryDirectory(prefix="kvedge-bench-rom-") as tmp:
        w = os.path.join(tmp, "model.i8.bin")
        convert_to_i8(a.model, w)
        rows = [run(w, p, a.tokens, a.context, a.heap) for p in ("ram", "stream", "rom")]
    print("%s, int8 weights, i8 cache of %d slots, emulated Cortex-M3 (%d-byte heap), mean of %d tokens" % (
        os.path.basename(a.model), a.context, a.heap, a.tokens))
    print("| weights | held as | kernels | instructions per token | live heap with the model loaded |")
    print("|---|---|---|---:|---:|")
    names = {"ram": "in RAM", "stream": "streamed from littlefs", "rom": "ROMFS, read in place"}
    for r in rows:
        print("| %s | %s | %s | %s | %s |" % (names[r["place"]], r["held"], r["kernels"],
                                             format(int(r["per_token"]), ","), format(r["heap_in_use"], ",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
