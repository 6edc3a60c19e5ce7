#!/usr/bin/env python3
"""What a second turn costs on one cache (kvedge.chat, issue 45): turn 1, turn 2 on the cache turn 1 left, and turn 2
re-run from scratch over the whole history (a reset cache fed every id the conversation holds, then the same reply:
what a runner that starts afresh each time pays), greedy, the integer pass.

  tools/bench_chat.py [--runtime m3|unix|cpython] [--model M] [--tokenizer T] [--max-new 32] [--kernels auto]
                      [--cache K=V,...] [--prefill N] [--lines "first line" "second line"]

m3: MicroPython on the emulated Cortex-M3 (qemu -icount shift=0, the 2 MiB image, armv7m .mpy): exact instructions
(1 us of ticks_us = 1000 instructions). Elsewhere host microseconds. The model (default ../shared's stories260K, its
tok512.bin) is converted to int8 on the host first; its weights are in RAM; the cache is i8 (--cache: more fields).
Each figure is printed with the positions it fed; encoding a line (BPE over the tokenizer's file) is timed apart (the
run from scratch is given the ids); the reply re-run from scratch is checked to be turn 2's."""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge_host.paths import DEVICE, SHARED_MODELS  # noqa: E402

WEIGHTS = "chat.q.bin"
LINES = ("Once upon a time, there was a little dog.", "The dog liked to play with a red ball.")

DEVICE_CODE = r"""
import gc
from kvedge import kernels
kernels.select(%(kernels)r)
from kvedge.compat import ticks_diff, ticks_us
from kvedge.model.llama import Llama, generate
from kvedge.model.pieces import FileTokenizer
from kvedge.model.bpe import sort_ids
from kvedge.model.sampler import Sampler
from kvedge.chat import Chat
m = Llama(%(model)r, kv=%(kv)r, forward="int")
gen = generate
if %(prefill)d > 1:
    from kvedge.model import prefill
    gen = prefill.attach(m, %(prefill)d)
V = m.cfg.vocab_size
tok = FileTokenizer(%(tok)r, V)
tok.order = sort_ids(tok)
gc.collect()
N = %(max_new)d
c = Chat(m, tok, Sampler(V))
hist = []


def turn(line):
    t0 = ticks_us()
    ids = c.ids(line)  # the line encoded (kvedge.model.bpe over the tokenizer file): timed on its own
    de = ticks_diff(ticks_us(), t0)
    s0 = m.cache.n_seen
    t0 = ticks_us()
    r = c.feed(ids, N)
    dt = ticks_diff(ticks_us(), t0)
    fed = ids + (r[:-1] if r and c.next == r[-1] else r)  # the kept token: the next turn's first id
    print("CHAT turn %%d %%d %%d %%d %%d" %% (len(ids), m.cache.n_seen - s0, len(r), dt, de))
    return ids, r, fed


ids1, r1, fed1 = turn(%(line1)r)
hist.extend(fed1)
ids2, r2, fed2 = turn(%(line2)r)
prompt = hist + ids2  # everything turn 2's reply is conditioned on
# turn 2 again from scratch: a reset cache fed the whole history, then the same reply (one forward() a position, as
# kvedge.model.llama.generate runs a prompt)
m.reset()
gc.collect()
t0 = ticks_us()
again = gen(m, tok, Sampler(V), prompt, len(prompt) + len(r2) - 1)
dt = ticks_diff(ticks_us(), t0)
print("CHAT scratch %%d %%d %%d %%d %%d" %% (len(prompt), m.cache.n_seen, len(again), dt, 1 if again == r2 else 0))
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=("m3", "unix", "cpython"), default="m3")
    ap.add_argument("--model", default=os.path.join(SHARED_MODELS, "stories260K.bin"))
    ap.add_argument("--tokenizer", help="default: tok512.bin beside the model")
    ap.add_argument("--max-new", type=int, default=32, help="reply tokens a turn samples at most (default 32)")
    ap.add_argument("--kernels", default="auto")
    ap.add_argument("--cache", default="max_tokens=256", help="i8 cache fields K=V,... (default max_tokens=256)")
    ap.add_argument("--prefill", type=int, default=1, help="each line's tokens N at a time (kvedge.model.prefill)")
    ap.add_argument("--lines", nargs=2, default=list(LINES), metavar="LINE")
    a = ap.parse_args(argv)
    tok = a.tokenizer or os.path.join(os.path.dirname(os.path.abspath(a.model)), "tok512.bin")
    for f in (a.model, tok):
        if not os.path.exists(f):
            print("bench_chat: %s not found (kvedge fetch downloads stories260K)" % f, file=sys.stderr)
            return 2
    kv = {"dtype": "i8", "align": 0}
    try:
        for item in a.cache.split(","):
            k, v = item.split("=")
            kv[k.strip()] = int(v)
    except ValueError:
        print("bench_chat: --cache %r: not K=V,... with integer values" % a.cache, file=sys.stderr)
        return 2
    from kvedge.model.checkpoint import convert_to_i8
    with tempfile.TemporaryDirectory(prefix="kvedge-chat-") as tmp:
        q = os.path.join(tmp, WEIGHTS)
        convert_to_i8(os.path.abspath(a.model), q)
        code = DEVICE_CODE % {"kernels": a.kernels, "model": q, "kv": kv, "tok": os.path.abspath(tok),
                              "max_new": a.max_new, "line1": a.lines[0], "line2": a.lines[1], "prefill": a.prefill}
        out = _run(a.runtime, code, [DEVICE, tmp, os.path.dirname(os.path.abspath(tok))])
    rows = [ln.split()[1:] for ln in out.splitlines() if ln.startswith("CHAT ")]
    if len(rows) != 3:
        print("bench_chat: the run did not finish:\n%s" % out[-3000:], file=sys.stderr)
        return 1
    m3 = a.runtime == "m3"
    unit = "instructions" if m3 else "us (host)"

    def cost(x):
        return int(x) * (1000 if m3 else 1)
    (_, l1, f1, n1, t1, e1), (_, l2, f2, n2, t2, e2), (_, lp, fp, n3, t3, same) = rows
    print("kvedge chat on %s: %s, i8 cache %s, int pass, kernels %s, %d reply tokens at most, prefill %d" % (
        "the emulated Cortex-M3 (qemu -icount shift=0, armv7m .mpy, 2 MiB)" if m3 else a.runtime,
        os.path.basename(a.model), a.cache, a.kernels, a.max_new, a.prefill))
    print("  turn 1:                   %3s ids, %3s positions fed, %3s reply tokens: %13s %s (+ %s encoding "
          "the line)" % (l1, f1, n1, format(cost(t1), ","), unit, format(cost(e1), ",")))
    print("  turn 2 on the held cache: %3s ids, %3s positions fed, %3s reply tokens: %13s %s (+ %s encoding "
          "the line)" % (l2, f2, n2, format(cost(t2), ","), unit, format(cost(e2), ",")))
    print("  turn 2 from scratch:      %3s ids, %3s positions fed, %3s reply tokens: %13s %s (same reply: %s)"
          % (lp, fp, n3, format(cost(t3), ","), unit, "yes" if same == "1" else "NO"))
    print("  turn 2 on the held cache costs %.1f%% of turn 2 from scratch" % (100.0 * int(t2) / int(t3)))
    return 0 if same == "1" else 1


def _run(runtime, code, paths):
    if runtime == "cpython":
        import subprocess
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
        p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        return p.stdout.decode("utf-8", "replace")
    from kvedge_host.boards import runtimes
    why = runtimes.missing(runtime)
    if why:
        raise SystemExit("bench_chat: %s cannot run here: %s" % (runtime, why))
    rc, out = runtimes.run_code(runtime, code, 2097152 if runtime == "m3" else 64 << 20, paths, timeout=7200)
    return out


if __name__ == "__main__":
    sys.exit(main())
