"""A plan is a promise: the K/V split `kvedge plan` writes for stories260K (../shared/models) where it fits and
measures best builds and runs through the board's runner (kvedge.model.runplan: plandoc.check, llama.cache_config,
caches.build) on CPython and on the MicroPython unix port, and its greedy text is the numpy f32 reference model's
(llama_ref: a float64 forward over an exact cache, no kvedge code). Split caches and the integer pass: `--forward int`
with a split plan is refused before anything runs."""
import json
import os

import pytest

from kvedge.kvsplit import SplitConfig, from_dict
from kvedge.model.tokenizer import Tokenizer
from kvedge_host.boards import runtimes
from kvedge_host.paths import SHARED_MODELS
from kvedge_host.ref.llama_ref import RefModel, greedy

from _boardkit import kvedge

STORIES = os.path.join(SHARED_MODELS, "stories260K.bin")
TOK = os.path.join(SHARED_MODELS, "tok512.bin")
have_stories = pytest.mark.skipif(not os.path.exists(STORIES), reason="../shared/models/stories260K.bin is absent")
STEPS = 40
# the split's keep-all total (f32 weights in RAM) plus a workspace: f32's and f16's full caches need more
SPLIT_TOTAL = 1321120
WORKSPACE = 60000


def _reference_text(n):
    ids = greedy(RefModel(STORIES), n)
    tok = Tokenizer.load(TOK, 512)
    return b"".join(tok.piece_bytes(t) for t in ids).decode("utf-8", "replace").lstrip()


def _text(out):
    return out.strip()


@pytest.fixture(scope="module")
def split_plan(tmp_path_factory):
    if not os.path.exists(STORIES):
        pytest.skip("../shared/models/stories260K.bin is absent")
    out = str(tmp_path_factory.mktemp("split") / "plan.json")
    p = kvedge("plan", "--model", STORIES, "--no-tiered", "--kind", "keep", "--objective", "quality", "--align", "0",
               "--heap", SPLIT_TOTAL + WORKSPACE, "--workspace", WORKSPACE, "--out", out)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(out) as f:
        doc = json.load(f)
    return out, doc


@have_stories
def test_the_plan_writes_a_split_the_runner_reads(split_plan):
    path, doc = split_plan
    c = doc["cache"]
    assert c["dtype"] == "i8/i8" and c["k_dtype"] == "i8" and c["residual"] == 32, c  # i8 keys per channel
    cfg = from_dict(c)
    assert isinstance(cfg, SplitConfig) and cfg.nbytes() == doc["kv_bytes"]
    assert doc["forward"] == "float"
    from kvedge.model import plandoc
    assert plandoc.check(doc) == cfg  # the board's reader takes what the planner wrote


@have_stories
@pytest.mark.parametrize("runtime", ["cpython", "unix"])
def test_the_split_plan_generates_the_reference_text(split_plan, runtime):
    if runtime == "unix" and runtimes.micropython_bin() is None:
        pytest.skip("no MicroPython unix port in ../shared/runtimes")
    path, doc = split_plan
    g = kvedge("generate", "--plan", path, "--model", STORIES, "--tokenizer", TOK, "--steps", STEPS, "--runtime",
               runtime)
    assert g.returncode == 0, g.stderr[-2000:]
    assert "cache i8/i8 keep" in g.stderr, g.stderr[-500:]  # the run's own account names the split
    text = _text(g.stdout)
    ref = _reference_text(STEPS + 4)
    assert len(text) >= 100 and ref.startswith(text), (text, ref)


@have_stories
def test_a_split_plan_on_the_integer_pass_is_refused(split_plan):
    path, doc = split_plan
    g = kvedge("generate", "--plan", path, "--model", STORIES, "--tokenizer", TOK, "--steps", 4, "--forward", "int",
               "--runtime", "cpython")
    # refused in one line before anything runs (the device's own refusal, pass_int.check's "needs an i8 cache, not
    # i8/i8", is tests/device/test_cache_split.py's)
    assert g.returncode == 2 and "--kv-dtype i8" in g.stderr and "Traceback" not in g.stderr, g.stderr[-800:]
