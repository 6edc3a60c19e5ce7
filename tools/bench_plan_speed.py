#!/usr/bin/env python3
"""What a plan's forward pass costs per token, as `kvedge plan` reads it: for each forward pass, kernel kind and
cache layout, the instructions of every step from position 0 on the emulated Cortex-M3, fitted as a base plus a
cost per cached token (and, for H2O, a cost per evicting step).

  tools/bench_plan_speed.py [--runtime m3|unix] [--positions 96] [--only NAME ...] [--json] [--save]

Each configuration runs in a fresh interpreter: stories260K converted to int8 (kvedge.model.checkpoint), weights
in the ROMFS image (read in place, as a plan with --weights-in rom or a board's RAM copy runs them), the cache as
the configuration says, greedy tokens from BOS, every step timed alone (1 us of ticks_us = 1000 instructions on
the emulated board: exact counts, one round). From position WARM (4) on, the host fits
cost(p) = base + per_token * n(p) [+ evict * e(p)] by least squares, n(p) the tokens the step attends (p + 1 up to the cache's slots), e(p) 1 when the step evicts.
--save (m3 only) writes host/kvedge_host/plan/forward_cost.py, the table `kvedge plan` reads (as
tools/bench_tiered.py --save writes tiered_cost.py)."""
import argparse
import json
import os
import pprint
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from bench_forward import WEIGHTS_FILE, run_device  # noqa: E402
from kvedge_host.paths import SHARED_MODELS  # noqa: E402

# (name, forward pass, kernel kind, cache dict for Llama(kv=...), H2O budget or 0); slots decide n(p)
CONFIGS = (
    ("int-asm-i8", "int", "asm", {"dtype": "i8", "max_tokens": 128}, 0),
    ("int-viper-i8", "int", "viper", {"dtype": "i8", "max_tokens": 128}, 0),
    ("int-asm-i8-ring", "int", "asm", {"dtype": "i8", "max_tokens": 128, "window": 28, "sinks": 4}, 0),
    ("int-asm-i8-h2o", "int", "asm", {"dtype": "i8", "max_tokens": 32}, 32),
    ("float-asm-f32", "float", "asm", {"dtype": "f32", "max_tokens": 128}, 0),
    ("float-asm-f16", "float", "asm", {"dtype": "f16", "max_tokens": 128}, 0),
    ("float-asm-i8", "float", "asm", {"dtype": "i8", "max_tokens": 128}, 0),
    ("float-asm-i4", "float", "asm", {"dtype": "i4", "max_tokens": 128}, 0),
    ("float-viper-f32", "float", "viper", {"dtype": "f32", "max_tokens": 128}, 0),
    ("float-plain-f32", "float", "plain", {"dtype": "f32", "max_tokens": 128}, 0),
)

DEVICE_CODE = r"""
import gc
from time import ticks_diff, ticks_us
from kvedge import kernels
kernels.select(%(kernels)r)
from kvedge.model.llama import Llama
FW = %(forward)r
H = %(h2o)d
pol = None
if H:
    from kvedge.evict import H2O
    def pol(cache):
        return H2O(cache, budget=H, recent=H // 2)
kv = %(kv)r
kv["align"] = 0
m = Llama(%(model)r, kv=kv, forward=FW, policy=pol)
V = m.cfg.vocab_size
gc.collect()
tok = 1
out = []
for i in range(%(positions)d):
    t0 = ticks_us()
    lg = m.forward(tok)
    dt = ticks_diff(ticks_us(), t0)
    out.append(dt)
    if FW == "int":
        tok = m.intp.k.q_argmax(lg, V)
    else:
        b = 0
        for j in range(V):
            if lg[j] > lg[b]:
                b = j
        tok = b
    if tok == 1:
        tok = 2
    if len(out) == 16:
        print("STEPS " + " ".join([str(x) for x in out]))
        out = []
if out:
    print("STEPS " + " ".join([str(x) for x in out]))
print("KIND " + kernels.kind())
"""


def attended(kv, h2o, p):
    """(tokens the step at position p attends, 1 when it evicts): p + 1 up to the cache's slots."""
    slots = h2o or ((kv.get("window") or 0) + (kv.get("sinks") or 0)) or kv["max_tokens"]
    return min(p + 1, slots), (1 if h2o and p >= h2o else 0)


# the first steps are left out of the fit: the integer pass runs its steps with the heap locked only once two
# steps in a row allocated nothing (kvedge.model.pass_int.Forward.step), and an unlocked step costs up to several
# times a locked one (MicroPython's heap-allocated frames): the fit is of the steady state a generation runs in
WARM = 4


def fit(kv, h2o, steps):
    """Least squares of the per-step counts from position WARM on, on [1, n(p)] (and e(p) with H2O);
    instructions (1 us = 1000)."""
    import numpy as np
    rows = [attended(kv, h2o, p) for p in range(len(steps))][WARM:]
    steps = steps[WARM:]
    cols = [np.ones(len(steps)), np.array([r[0] for r in rows], dtype=float)]
    if h2o:
        cols.append(np.array([r[1] for r in rows], dtype=float))
    a = np.stack(cols, axis=1)
    y = np.array(steps, dtype=float) * 1000.0
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = y - a @ coef
    out = {"base": int(round(coef[0])), "per_token": int(round(coef[1])),
           "max_residual": int(round(float(np.max(np.abs(resid)))))}
    if h2o:
        out["evict"] = int(round(coef[2]))
    return out


def measure(runtime, names, positions, model, board, heap, march):
    from kvedge.model.checkpoint import convert_to_i8
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvedge-bench-") as tmp:
        i8 = os.path.join(tmp, WEIGHTS_FILE)  # the name run_device maps into ROMFS
        convert_to_i8(os.path.abspath(model), i8)
        for name, fw, kind, kv, h2o in CONFIGS:
            if names and name not in names:
                continue
            code = DEVICE_CODE % {"kernels": kind, "forward": fw, "model": i8, "kv": kv, "h2o": h2o,
                                  "positions": positions}
            out = run_device(runtime, code, tmp, heap, march, board)
            steps = []
            got = None
            for line in out.splitlines():
                if line.startswith("STEPS "):
                    steps += [int(x) for x in line.split()[1:]]
                elif line.startswith("KIND "):
                    got = line.split()[1]
            if got != kind or len(steps) != positions:
                raise SystemExit("bench_plan_speed: %s: kernels %s, %d steps:\n%s" % (name, got, len(steps),
                                                                                       out[-2000:]))
            r = {"name": name, "forward": fw, "kernels": kind, "dtype": kv["dtype"],
                 "kind": "h2o" if h2o else ("ring" if kv.get("window") else "keep"), "slots": attended(kv, h2o,
                                                                                                     10 ** 6)[0]}
            r.update(fit(kv, h2o, steps))
            r["mean_over_positions"] = sum(steps[WARM:]) * 1000 // (positions - WARM)
            r["warm_up"] = WARM
            rows.append(r)
            print("  %s: base %s + %s per cached token (mean %s over positions %d-%d)" % (
                name, format(r["base"], ","), format(r["per_token"], ","), format(r["mean_over_positions"], ","),
                WARM, positions - 1), file=sys.stderr, flush=True)
    return rows


def save(doc):
    path = os.path.join(ROOT, "host", "kvedge_host", "plan", "forward_cost.py")
    with open(path, "w") as f:
        f.write('"""What a forward pass costs per token on the emulated Cortex-M3 (instructions: a base and a cost per '
                'cached\ntoken, per pass, kernel kind and cache layout; see tools/bench_plan_speed.py). Written by\n\n'
                '    %s --save\n\nand read by kvedge_host.plan.planner."""\nMEASURED = %s\n'
                % (doc["command"], pprint.pformat(doc, sort_dicts=False, width=116)))
    print("wrote %s" % path, file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=("m3", "unix"), default="m3")
    ap.add_argument("--model", default=os.path.join(SHARED_MODELS, "stories260K.bin"))
    ap.add_argument("--positions", type=int, default=96, help="steps timed from position 0 (default 96)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="configurations to run (default all: %s)"
                    % ", ".join(c[0] for c in CONFIGS))
    ap.add_argument("--board", default="rp2040", help="m3: profile for the firmware")
    ap.add_argument("--heap", type=int, default=2097152)
    ap.add_argument("--march", default="armv7m")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save", action="store_true", help="write host/kvedge_host/plan/forward_cost.py for kvedge plan")
    a = ap.parse_args(argv)
    if a.save and (a.runtime != "m3" or a.only):
        raise SystemExit("--save records every configuration on the emulated board: --runtime m3, no --only")
    if not os.path.exists(a.model):
        print("bench_plan_speed: %s not found" % a.model, file=sys.stderr)
        return 2
    rows = measure(a.runtime, a.only, a.positions, a.model, a.board, a.heap, a.march)
    from kvedge_host.plan import account
    from kvedge_host import models
    spec = models.load(a.model, None)
    shape = {k: getattr(spec, k) for k in ("layers", "heads", "kv_heads", "head_dim", "dim", "hidden_dim", "vocab")}
    shape["params"] = account.params(spec)
    cmd = "tools/bench_plan_speed.py --runtime %s --positions %d" % (a.runtime, a.positions)
    doc = {"machine": "qemu mps2-an385 -icount shift=0, MicroPython firmware-heap%d.elf, %s .mpy" % (a.heap, a.march)
           if a.runtime == "m3" else "MicroPython unix port (us, not instructions)",
           "model": os.path.basename(a.model), "weights": "i8, read in place from ROMFS",
           "unit": "instructions" if a.runtime == "m3" else "ns", "positions": a.positions, "shape": shape,
           "command": cmd,
           "rows": rows}
    if a.save:
        save(doc)
    if a.json:
        print(json.dumps(doc, indent=2))
        return 0
    print("%s, %s; steps at positions %d-%d, fitted" % (doc["model"], doc["machine"], WARM, a.positions - 1))
    print("| pass | kernels | cache | base | per cached token | mean, positions %d-%d |" % (WARM, a.positions - 1))
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        print("| %s | %s | %s %s (%d slots) | %s | %s | %s |" % (
            r["forward"], r["kernels"], r["dtype"], r["kind"], r["slots"], format(r["base"], ","),
            format(r["per_token"], ","), format(r["mean_over_positions"], ",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
