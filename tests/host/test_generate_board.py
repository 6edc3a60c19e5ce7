"""`kvedge generate --board B` run here (no --port, no --plan, no cache flag) is planned as the board would be: the
plan `kvedge plan --board B` makes from the profile's measured footprint, then run. Its tokens and cache equal
those of that plan written by `kvedge plan --out` and run with `generate --plan` (the two paths a user takes),
and a model the board cannot run usefully is refused in one line, before anything runs."""
import json
import os
import re

import pytest

from kvedge_host.paths import SHARED_MODELS

from _boardkit import kvedge

MODEL = os.path.join(SHARED_MODELS, "stories260K.bin")
TOK = os.path.join(SHARED_MODELS, "tok512.bin")
pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason="needs ../shared/models/stories260K.bin")
PROMPT = "Tom had"
# the esp32's 100 KB with the prompt's encoder and the stats stream fits nothing (footprint measured on the Xtensa
# lx106, 2026-12-07): its plan leaves both out (the plan's "without"), the host encodes the prompt, and the named
# `kvedge plan` command says --no-encoder --no-stats
PROMPTS = {"rp2040": PROMPT, "esp32": PROMPT}


def _prompt(board):
    return ("--prompt", PROMPTS[board]) if PROMPTS[board] else ()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from kvedge.model.checkpoint import convert_to_i8
    p = str(tmp_path_factory.mktemp("genboard") / "m.i8.bin")
    convert_to_i8(MODEL, p)
    return p


def _closing(out):
    """generate's closing line: (pass, cache dtype, kind, slots)."""
    m = re.search(r"; (\w+) pass, weights .*?, cache (\w+) (\w+) \((\d+) slots", out)
    assert m, out[-800:]
    return m.group(1), m.group(2), m.group(3), int(m.group(4))


@pytest.mark.parametrize("board", ["rp2040", "esp32"])
def test_generate_for_a_board_runs_the_plan_kvedge_plan_makes(board, model, tmp_path):
    g = kvedge("generate", "--board", board, "--model", model, "--tokenizer", TOK, *_prompt(board),
               "--steps", "24", "--temperature", "0")
    assert g.returncode == 0, g.stderr[-1500:]
    first = [ln for ln in g.stderr.splitlines() if ln.startswith("generate: plan (")]
    assert first, g.stderr[-1500:]
    # the command it names, run by hand, writes the plan the run took
    cmd = re.match(r"generate: plan \((kvedge plan .*?--out plan\.json)\)", first[0]).group(1).split()
    plan = str(tmp_path / "plan.json")
    argv = [a if a != "plan.json" else plan for a in cmd[1:]]
    argv[argv.index("--model") + 1] = model
    p = kvedge(*argv, "--tokenizer", TOK)
    assert p.returncode == 0, p.stderr[-1500:]
    doc = json.load(open(plan))
    from kvedge.config import CacheConfig
    cache = CacheConfig.from_dict(doc["cache"])
    ran = _closing(g.stdout + g.stderr)
    assert ran == (doc["forward"], cache.dtype, doc["kind"], cache.slots), (ran, doc["strategy"])
    # the same plan through --plan: the same text
    h = kvedge("generate", "--board", board, "--model", model, "--tokenizer", TOK, *_prompt(board),
               "--steps", "24", "--temperature", "0", "--plan", plan)
    assert h.returncode == 0, h.stderr[-1500:]
    text = g.stdout.split("\n[")[0].strip()
    assert text.startswith(PROMPTS[board] or "Once upon a time") and text == h.stdout.split("\n[")[0].strip(), (g.stdout, h.stdout)


def test_a_checkpoint_whose_f32_weights_fit_nothing_is_converted_as_kvedge_plan_would():
    # the f32 checkpoint on the ESP32's 100 KB: its own weights fit no plan; since issue 44 the run takes the int8
    # weights whose plan keeps a cache (as kvedge plan without --weights-dtype does), converted, and says so
    g = kvedge("generate", "--board", "esp32", "--model", MODEL, "--tokenizer", TOK, *_prompt("esp32"),
               "--steps", "24")
    assert g.returncode == 0, (g.returncode, g.stderr[-800:])
    assert "generate: the f32 weights fit nothing on esp32; int8 weights keep " in g.stderr and \
        "--weights-dtype i8" in g.stderr, g.stderr[-800:]
    assert re.search(r"; \w+ pass, weights i8 ", g.stderr), g.stderr[-800:]
    assert "Traceback" not in g.stderr
