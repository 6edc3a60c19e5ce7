#!/usr/bin/env python3
"""What the runtime's heap layout takes beyond a plan's other rows (kvedge_host.plan.account.LAYOUT_FRACTION): one plan
run on the emulated board through `kvedge demo --sim m3`, as a user runs it, once with the demo's own plan and once
with the same plan given as a file (`--plan`: the runner call then also names `tier=None`), for a few prompts.

  tools/bench_layout.py [--board esp32] [--kind window] [--context 512] [--prompts "Lily" "The cat" ...]

For each run it prints the board's measured peak (gc.mem_alloc() after a collection, every token), the plan's total
and its layout allowance, and what the run took beyond the total less that allowance: the figure the allowance must
cover. The same code and the same plan differ only in the runner call's text, so the spread is the layout's (a stale
word in a live frame of the conservative GC keeping a dead object's tree). Needs ../shared (the emulated board and
stories260K)."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge_host.boards import m3board  # noqa: E402
from kvedge_host.paths import SHARED_MODELS  # noqa: E402

MODEL = os.path.join(SHARED_MODELS, "stories260K.bin")
TOK = os.path.join(SHARED_MODELS, "tok512.bin")
PROMPTS = ("Lily", "Tom", "The cat", "Tom had a little dog", "Once upon a time there was a girl")
_PEAK = re.compile(r"measured peak ([\d,]+) bytes, plan ([\d,]+) bytes")


def kvedge(*args):
    return subprocess.run([sys.executable, "-m", "kvedge_host.cli"] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=1800)


def demo(board, plan, prompt, work):
    args = ["demo", "--board", board, "--sim", "m3", "--steps", "12", "--prompt", prompt, "--plain", "--stats-ms",
            "0", "--workdir", work] + (["--plan", plan] if plan else [])
    p = kvedge(*args)
    m = _PEAK.search(p.stdout)
    if p.returncode or not m:
        raise SystemExit("kvedge %s failed (exit %d):\n%s" % (" ".join(args), p.returncode, p.stdout[-1500:]))
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", default="esp32")
    ap.add_argument("--kind", default="window")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--prompts", nargs="+", default=list(PROMPTS))
    a = ap.parse_args(argv)
    why = m3board.missing(a.board)
    if why or not os.path.exists(MODEL):
        raise SystemExit("skipped: %s" % (why or "needs ../shared/models/stories260K.bin"))
    from kvedge.model.checkpoint import convert_to_i8
    with tempfile.TemporaryDirectory(prefix="kvedge-layout-") as tmp:
        model = os.path.join(tmp, "m.i8.bin")
        convert_to_i8(MODEL, model)
        plan = os.path.join(tmp, "plan.json")
        p = kvedge("plan", "--model", model, "--tokenizer", TOK, "--board", a.board, "--weights-dtype", "i8",
                   "--kv-dtype", "i8", "--align", "0", "--kind", a.kind, "--context", str(a.context), "--no-stats",
                   "--out", plan)
        if p.returncode:
            raise SystemExit(p.stdout[-1500:])
        doc = json.load(open(plan))
        layout = doc["runtime"].get("layout_bytes", 0)
        print("board %s, plan %s (%s pass, %s kernels): total %s bytes, of which layout %s" % (
            a.board, doc["strategy"], doc["forward"], doc["runtime"]["kernels"], format(doc["total_bytes"], ","),
            format(layout, ",")))
        print("| runner call | prompt | measured peak | plan total | beyond the total less the layout |")
        print("|---|---|---:|---:|---:|")
        worst = None
        for given in (False, True):
            for prompt in a.prompts:
                peak, total = demo(a.board, plan if given else None, prompt, os.path.join(tmp, "w"))
                took = peak - (total - layout)
                worst = took if worst is None else max(worst, took)
                print("| %s | %s | %s | %s | %s |" % ("--plan" if given else "demo's own", prompt,
                                                      format(peak, ","), format(total, ","), format(took, ",")))
        print("largest: %s bytes beyond the plan's other rows; the allowance counts %s (%s of the code's %s)" % (
            format(worst, ","), format(layout, ","), "%.1f %%" % (100.0 * layout / doc["runtime"]["code_bytes"]),
            format(doc["runtime"]["code_bytes"], ",")))


if __name__ == "__main__":
    main()
