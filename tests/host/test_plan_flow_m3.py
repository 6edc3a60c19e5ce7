"""The issue's flow on the emulated rp2040: `kvedge plan --board rp2040` from the profile's stored footprint, then
`kvedge generate --port --plan --prompt ...` with the stats stream. A plan made without `--tokenizer` left the
tokenizer's heap out of its account and the run died of a MemoryError on the board (in the prompt's encoding, or
later in the stats stream); the host refuses such a plan before anything is deployed, naming the field, and since
issue 44 a plan made without `--tokenizer` counts one (the fetch cache's for the model's vocabulary, else the
largest of it), so the plan as typed runs to the end; `kvedge demo --plan` runs such a plan too. The package and the files are on the board's flash image before
it starts (as test_port_m3 does), so the deploy only checks them."""
import json
import os
import re
import shutil
import tempfile

import pytest

from kvedge_host.boards import m3board
from kvedge_host.boards.deploy import deployment, preload
from kvedge_host.paths import SHARED_MODELS

from _boardkit import kvedge

WHY = m3board.missing("rp2040")
MODEL = os.path.join(SHARED_MODELS, "stories260K.bin")
TOK = os.path.join(SHARED_MODELS, "tok512.bin")
pytestmark = [pytest.mark.skipif(WHY is not None, reason="emulated Cortex-M3: %s" % WHY),
              pytest.mark.skipif(not os.path.exists(MODEL), reason="needs ../shared/models/stories260K.bin")]
PROMPT = "Tom had a little dog"
STEPS = 24  # past the 18 tokens; the prompt's encoding alone failed before


def test_plan_then_generate_port_on_the_emulated_rp2040(tmp_path):
    from kvedge.model.checkpoint import convert_to_i8
    from kvedge_host.boards.m3sim import M3Sim
    model = str(tmp_path / "m.i8.bin")
    convert_to_i8(MODEL, model)
    os.makedirs(str(tmp_path / "tok"))
    tok = str(tmp_path / "tok" / "tok512.bin")  # not beside the model: `kvedge plan` does not find it there
    shutil.copyfile(TOK, tok)
    plan = str(tmp_path / "plan.json")
    base = ["plan", "--model", model, "--board", "rp2040", "--weights-dtype", "i8", "--kv-dtype", "i8", "--align",
            "0", "--out", plan]
    gen = ["generate", "--board", "rp2040", "--model", model, "--tokenizer", tok, "--plan", plan, "--prompt",
           PROMPT, "--steps", str(STEPS), "--temperature", "0", "--stats-ms", "1000"]
    with tempfile.TemporaryDirectory() as build:
        preload(str(tmp_path / "flash"), deployment("rp2040", build, True, extra=[model, tok],
                                                    march=m3board.march_for("rp2040")))
    with M3Sim("rp2040", fs=str(tmp_path / "flash")) as vb:
        p = kvedge(*base)  # no --tokenizer, none beside the model: the plan counts one of the model's vocabulary
        assert p.returncode == 0, p.stderr
        doc = json.load(open(plan))
        assert doc["runtime"]["tokenizer_bytes"] > 0, doc["runtime"]
        # a plan that counted no tokenizer (as one made before issue 44 did) is refused before the board is touched
        old = str(tmp_path / "old.json")
        json.dump(dict(doc, runtime=dict(doc["runtime"], tokenizer_bytes=0)), open(old, "w"))
        q = kvedge(*(gen[:gen.index("--plan") + 1] + [old] + gen[gen.index("--plan") + 2:] + ["--port", vb.port]),
                   timeout=600)
        lines = q.stderr.strip().splitlines()
        assert q.returncode == 2 and len(lines) == 1, q.stdout[-500:] + q.stderr[-1500:]
        assert lines[0].startswith("kvedge generate: error: %s: runtime.tokenizer_bytes: the plan counted 0 bytes"
                                   % old), lines
        assert "deployed" not in q.stderr and q.stdout == ""
        # the plan as typed runs
        p = kvedge(*(gen + ["--port", vb.port]), timeout=900)
    assert p.returncode == 0, p.stdout[-1500:] + p.stderr[-2000:]
    assert "Error" not in p.stdout and "Traceback" not in p.stdout, p.stdout[-1500:]
    assert p.stdout.startswith(PROMPT) and "[%d tokens in " % STEPS in p.stderr, p.stdout[-800:] + p.stderr[-800:]
    stats = [ln for ln in p.stderr.splitlines() if ln.startswith("KVSTATS ")]
    assert stats and '"alloc_failures":0' in stats[-1], stats[-1:]


def test_demo_runs_a_given_plan_on_the_emulated_rp2040(tmp_path):
    # kvedge demo --plan FILE: the plan of `kvedge plan` (tokenizer counted) run instead of the demo's own planning;
    # the board's summary is the plan's strategy and its peak heap stays within the plan's total
    from kvedge.model.checkpoint import convert_to_i8
    model = str(tmp_path / "m.i8.bin")
    convert_to_i8(MODEL, model)
    plan = str(tmp_path / "plan.json")
    p = kvedge("plan", "--model", model, "--tokenizer", TOK, "--board", "rp2040", "--weights-dtype", "i8",
               "--kv-dtype", "i8", "--align", "0", "--out", plan)
    assert p.returncode == 0, p.stderr
    doc = json.load(open(plan))
    p = kvedge("demo", "--board", "rp2040", "--sim", "m3", "--plan", plan, "--steps", "16", "--prompt", PROMPT,
               "--plain", timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "demo: plan: %s (--plan %s)" % (doc["strategy"], plan) in p.stdout, p.stdout[-2000:]
    m = re.search(r"measured peak ([\d,]+) bytes, plan ([\d,]+) bytes", p.stdout)
    assert m and int(m.group(2).replace(",", "")) == doc["total_bytes"], p.stdout[-1000:]
    assert int(m.group(1).replace(",", "")) <= doc["total_bytes"]


def _board_line(err):
    m = re.search(r"\[(\d+) tokens in [\d.]+ s: [\d.]+ tok/s; (\w+) pass, weights (\w+) \([^)]*\), kernels (\w+), "
                  r"cache (\w+) (\w+) \((\d+) slots[^)]*\): [\d,]+ bytes \(peak [\d,]+\), evictions \d+; plan ([\d,]+) "
                  r"bytes, heap used ([\d,]+)\]", err)
    assert m, err[-1500:]
    return m


def test_generate_port_without_a_plan_runs_the_plan_kvedge_plan_makes(tmp_path):
    # no --plan and no cache flag: the run is planned for the board first, as `kvedge plan --board` plans from the
    # profile's measured footprint; it must be that plan (strategy, pass, kernels, total), and it computes what the
    # same plan given with --plan computes. A cache given by hand that does not fit is refused before deploying.
    from kvedge.model.checkpoint import convert_to_i8
    from kvedge_host.boards.m3sim import M3Sim
    model = str(tmp_path / "m.i8.bin")
    convert_to_i8(MODEL, model)
    tok = str(tmp_path / "tok512.bin")
    shutil.copyfile(TOK, tok)
    plan = str(tmp_path / "plan.json")
    p = kvedge("plan", "--model", model, "--tokenizer", tok, "--board", "rp2040", "--weights-dtype", "i8",
               "--kv-dtype", "i8", "--align", "0", "--no-tiered", "--out", plan)
    assert p.returncode == 0, p.stderr
    doc = json.load(open(plan))
    gen = ["generate", "--board", "rp2040", "--model", model, "--tokenizer", tok, "--prompt", PROMPT, "--steps",
           str(STEPS), "--temperature", "0"]
    with tempfile.TemporaryDirectory() as build:
        preload(str(tmp_path / "flash"), deployment("rp2040", build, True, extra=[model, tok],
                                                    march=m3board.march_for("rp2040")))
    with M3Sim("rp2040", fs=str(tmp_path / "flash")) as vb:
        auto = kvedge(*(gen + ["--port", vb.port]), timeout=900)
        given = kvedge(*(gen + ["--port", vb.port, "--plan", plan]), timeout=900)
        big = kvedge("generate", "--port", vb.port, "--board", "rp2040", "--model", MODEL, "--tokenizer", tok,
                     "--kv-dtype", "f32", "--steps", "8", timeout=300)
    assert auto.returncode == 0, auto.stdout[-1500:] + auto.stderr[-2000:]
    first = auto.stderr.splitlines()[0]
    assert first.startswith("generate: plan (kvedge plan --model m.i8.bin --board rp2040 --weights-dtype i8 "
                            "--kv-dtype i8 --align 0 --no-tiered --out plan.json): %s, %s pass, %s kernels"
                            % (doc["strategy"], doc["forward"], doc["runtime"]["kernels"])), first
    m = _board_line(auto.stderr)
    assert m.group(2) == doc["forward"] == "int" and m.group(4) == doc["runtime"]["kernels"] == "asm"
    # the slots the plan keeps; the board's own account of the run (its parts less the margin) within the plan
    assert int(m.group(7)) == doc["tokens_kept"] and int(m.group(8).replace(",", "")) <= doc["total_bytes"]
    assert given.returncode == 0, given.stderr[-2000:]
    assert auto.stdout == given.stdout and auto.stdout.startswith(PROMPT)
    assert big.returncode == 2 and "deployed" not in big.stderr, big.stderr[-1500:]
    last = big.stderr.strip().splitlines()[-1]
    assert last.startswith("kvedge generate: error: stories260K.bin on rp2040: model run (") and \
        "drop the cache flags" in last, last
