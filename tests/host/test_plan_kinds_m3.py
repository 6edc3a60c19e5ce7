"""The plan is what runs: one plan of each kind `kvedge plan` emits for stories260K (i8 weights; sinks + window and
H2O at context 512 on the rp2040 profile, a tier at context 128 on the rp2350's), each run through `kvedge demo
--plan` on the emulated Cortex-M3 at the profile's heap, on the integer pass the plan names. The board reports the
pass, kind and layout it built (its stats line), which must be the plan's; its peak heap stays within the plan's
total; and its greedy text equals the same plan run by the device code on CPython (`kvedge generate --plan`, the
pass the plan names). The tiered run goes past its ring, so blocks move to flash and are read back every token."""
import json
import os
import re

import pytest

from kvedge_host import m3board
from kvedge_host.paths import SHARED_MODELS

from _boardkit import kvedge

WHY = m3board.missing("rp2040") or m3board.missing("rp2350")
MODEL = os.path.join(SHARED_MODELS, "stories260K.bin")
TOK = os.path.join(SHARED_MODELS, "tok512.bin")
pytestmark = [pytest.mark.skipif(WHY is not None, reason="emulated Cortex-M3: %s" % WHY),
              pytest.mark.skipif(not os.path.exists(MODEL), reason="needs ../shared/models/stories260K.bin")]
PROMPT = "Lily"
# steps per kind: enough to fill an H2O cache past its budget or a tiered ring past its first block (kept lean:
# each token is a few tens of millions of emulated instructions)
# (board, steps, context): the tier at a 128-token context on the rp2350, whose heap holds it beside the integer
# pass (on the rp2040 only the float pass's runtime leaves a tier room; its float32 text is not CPython's, whose
# floats are doubles: the integer pass is the same bits everywhere)
KINDS = {"sinks": ("rp2040", 12, None), "h2o": ("rp2040", 12, None), "tiered": ("rp2350", 0, 128)}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from kvedge.model.checkpoint import convert_to_i8
    d = tmp_path_factory.mktemp("kinds")
    p = str(d / "m.i8.bin")
    convert_to_i8(MODEL, p)
    return p


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_plan_kind_runs_on_the_emulated_rp2040_as_planned(kind, model, tmp_path):
    plan = str(tmp_path / "plan.json")
    board, steps, context = KINDS[kind]
    p = kvedge("plan", "--model", model, "--tokenizer", TOK, "--board", board, "--weights-dtype", "i8",
               "--kv-dtype", "i8", "--align", "0", "--kind", kind, "--out", plan,
               *(("--context", str(context)) if context else ()))
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.load(open(plan))
    assert doc["kind"] == kind and doc["forward"] == "int", (doc["kind"], doc.get("forward"))
    steps = steps or doc["cache"]["max_tokens"] + (doc["tier"]["block"] if doc.get("tier") else 0) + 4
    p = kvedge("demo", "--board", board, "--sim", "m3", "--plan", plan, "--steps", str(steps), "--prompt", PROMPT,
               "--plain", "--stats-ms", "1000", "--workdir", str(tmp_path / "w"), timeout=1800)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    m = re.search(r"measured peak ([\d,]+) bytes, plan ([\d,]+) bytes", p.stdout)
    assert m and int(m.group(1).replace(",", "")) <= doc["total_bytes"], p.stdout[-1500:]
    # the board's own account of what it built (its stats line), compared with the plan by the demo
    built = [ln for ln in p.stdout.splitlines() if ln.startswith("demo: board built ")]
    assert built and built[-1].endswith(": as planned"), built or p.stdout[-1500:]
    from kvedge.config import CacheConfig
    want = "demo: board built %s pass, %s cache, %d slots" % (doc["forward"], kind,
                                                             CacheConfig.from_dict(doc["cache"]).slots)
    assert built[-1].startswith(want), (built[-1], want)
    if kind == "tiered":
        assert ", %d cold blocks" % doc["tier"]["cold_blocks"] in built[-1]
    text = _generated(p.stdout)
    g = kvedge("generate", "--model", model, "--tokenizer", TOK, "--plan", plan, "--steps", str(steps), "--prompt",
               PROMPT)
    assert g.returncode == 0, g.stderr[-1500:]
    assert text and g.stdout.strip().startswith(text), (text, g.stdout[:500])


def _generated(out):
    """The text the demo printed between its set-up lines and its summary."""
    lines = [ln for ln in out.splitlines() if ln.startswith(PROMPT)]
    return lines[0].strip() if lines else ""
