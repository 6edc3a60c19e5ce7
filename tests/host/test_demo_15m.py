"""A 15M-class model end to end (issue 24 item 4): docs/model.md's `kvedge demo --random stories15m` (the command
read from the page) writes a random llama2.c model of stories15M's shape (dim 288, 6 layers, 6 heads, hidden 768,
32,000 tokens, 256 positions) and a tokenizer of that vocabulary, converts it to int4 (its int8 file does not fit
the N16R8's 14 MB filesystem), plans it for the ESP32-S3 N16R8 profile and runs the plan on the emulated Cortex-M3
whose heap lies in PSRAM. The weights (8.56 MB) go into the board's ROMFS image and are read in place; the 8
MiB-heap image's 8 MiB ROMFS slot cannot hold them, so the board is the 4 MiB-heap image (12 MiB slot) with a plan
made for that heap. Checked: the plan keeps all 256 tokens with int4 weights on flash, the board built what was
planned, its peak heap is at most the plan (and within 10 % of it), and its greedy text is the device code's on
CPython running the same plan on the same int4 file (plain kernels)."""
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from kvedge_host.boards import m3board

from _boardkit import kvedge

HEAP = 4 * 1024 * 1024
WHY = m3board.missing("esp32s3-n16r8", HEAP, m3board.psram_layout(HEAP) or m3board.M3P4)
DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "model.md")


def _doc_command():
    """docs/model.md's `kvedge demo --random stories15m` command (its section's first sh block), as argv."""
    text = open(DOC).read()
    sec = text[text.index("### A 15M-class model on a PSRAM board"):]
    block = sec[sec.index("```sh\n") + 6:sec.index("\n```", sec.index("```sh\n"))]
    argv = shlex.split(block.strip())
    assert argv[:2] == ["kvedge", "demo"] and "--random" in argv, argv
    return argv[1:]


ARGV = _doc_command()
PROMPT = ARGV[ARGV.index("--prompt") + 1]
STEPS = int(ARGV[ARGV.index("--steps") + 1])  # BOS and the prompt's characters (the tiny tokenizer's) among them


@pytest.mark.skipif(WHY is not None, reason="the emulated Cortex-M3 with its heap in PSRAM: %s" % WHY)
def test_a_stories15m_shaped_int4_model_runs_its_plan_on_the_emulated_psram_board(tmp_path):
    work = str(tmp_path / "w")
    argv = list(ARGV)
    argv[argv.index("--workdir") + 1] = work  # the page's command, in a folder of this test's own
    p = kvedge(*argv, timeout=1800)
    out = p.stdout
    assert p.returncode == 0, out[-3000:] + p.stderr[-2000:]
    assert "weights converted to int4: 8,558,248 bytes" in out, out[:2000]
    assert "firmware-psram-heap4194304.elf" in out and "ROMFS image" in out, out[:3000]
    doc = json.load(open(os.path.join(work, "plan.json")))
    assert doc["weights"]["dtype"] == "i4" and doc["weights"]["place"] == "flash", doc["weights"]
    assert doc["tokens_kept"] == 256 and doc["context"] == 256 and doc["forward"] == "int", doc["strategy"]
    assert doc["runtime"]["heap_bytes"] == HEAP
    built = [ln for ln in out.splitlines() if ln.startswith("demo: board built ")]
    assert built and built[-1].endswith(": as planned") and built[-1].startswith("demo: board built int pass"), built
    m = re.search(r"measured peak ([\d,]+) bytes, plan ([\d,]+) bytes", out)
    peak, total = int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))
    assert total == doc["total_bytes"] and 0.9 * total <= peak <= total, (peak, total)
    m = re.search(r"tokens \(prompt \+ generated\) │\s+(\d+) \((\d+) generated\)", out)
    assert m and int(m.group(1)) == STEPS and int(m.group(2)) >= 8, out[-3000:]
    text = _generated(out)
    ref = _reference(doc, os.path.join(work, "rom", "model.i4.bin"), os.path.join(work, "random", "tok512.bin"))
    assert text.startswith(PROMPT) and len(text) > len(PROMPT), out[-2000:]
    assert text == ref, (text, ref)


def _reference(doc, model, tok):
    """The plan's greedy text from the device code on CPython: the runner with the plan's cache, pass and weights
    placement, plain kernels (the integer pass's bits are every kind's) and no budget (CPython's objects are not
    a board's: kvedge generate --plan refuses a board's plan there when its tokenizer of 32,000 pieces is)."""
    from kvedge_host.boards import planrun
    kw = planrun.runner_args(doc, STEPS, 0, PROMPT)
    for k in ("budget", "workspace", "overhead", "kv_bytes"):
        kw.pop(k, None)
    kw.update(kernel="plain", int_attention=True, peak=False)
    p = subprocess.run([sys.executable, "-c", planrun.runner_code(model, tok, kw)], capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    return _norm(p.stdout[:p.stdout.find("#KVEDGE")] if "#KVEDGE" in p.stdout else p.stdout)


def _norm(s):
    return " ".join(s.split())


def _generated(out):
    """The text the demo printed between its set-up lines and its summary."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(PROMPT))
    end = next(i for i, ln in enumerate(lines) if "demo summary" in ln)
    return _norm("\n".join(ln for ln in lines[start:end] if not ln.startswith("demo: ")))
