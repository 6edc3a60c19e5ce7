"""Issue 44, item 1: a plan without --weights-dtype fits the weights too (f32, int8, int4: the source's own format
when it keeps the whole context, else the smaller format keeping the most), says so in its verdict, and a verdict
of "nothing fits" names the nearest thing that would (another weight format, another board). Every built-in model
on every board profile: the verdict fits, or names something that, planned on its own, does."""
import json
import re

import pytest

from kvedge_host import cli
from kvedge import sizes
from kvedge_host import models, profiles
from kvedge_host.plan import notes, planner


class _R:
    def __init__(self, rc, out):
        self.rc, self.out, self.err = rc, out, ""


def _run(capsys, argv):
    rc = cli.main(list(argv))
    return _R(rc, capsys.readouterr().out)


def _params(spec):
    # the Llama-style parameter count, from the device's formulas (kvedge.sizes), not the planner's helper
    return sizes.llama_params(spec.dim, spec.hidden_dim, spec.layers, spec.heads, spec.kv_heads, spec.vocab,
                              spec.shared_classifier, spec.head_dim)


@pytest.mark.parametrize("board", ["esp32s3-n16r8", "rp2350-psram8"])
def test_stories15m_fits_with_int4_weights(capsys, board):
    """The issue's case: f32 and int8 weights of stories15m fit neither the flash nor the heap of these boards;
    int4 weights keep the whole 256-token context, and the verdict line says int4."""
    spec = models.preset("stories15m")
    prof = profiles.load(board)
    fs = profiles.flash_fs_bytes(prof)
    # the premise, from the formulas: f32 and i8 weights exceed the flash a plan may use, i4 weights do not
    assert sizes.weights_bytes(_params(spec), "f32") > fs
    assert sizes.weights_bytes(_params(spec), "i8") > fs
    assert sizes.weights_bytes(_params(spec), "i4") < fs
    r = _run(capsys, ["plan", "--preset", "stories15m", "--board", board, "--context", "256"])
    assert r.rc == 0, r.out + r.err
    first = r.out.splitlines()[0]
    assert first.startswith("verdict: fits %s with int4 weights: " % board), first
    assert "256 of 256 tokens kept" in first
    # why int4, after the first screen's account and three next configurations (cmd_plan.print_first_screen)
    assert any(line.startswith("weights: int4, chosen because f32 weights fit nothing, int8 weights fit nothing")
               for line in r.out.splitlines()[:20]), r.out
    j = json.loads(_run(capsys, ["plan", "--preset", "stories15m", "--board", board, "--context", "256",
                                  "--json"]).out)
    c = j["configurations"][j["chosen"] - 1]
    assert c["weights"]["dtype"] == "i4"
    assert c["weights"]["bytes"] == sizes.weights_bytes(_params(spec), "i4")
    assert j["weights_fit"]["searched"] == ["f32", "i8", "i4"]
    # --weights-dtype still pins the format: f32 fits nothing, and the verdict names int4 as what would
    r = _run(capsys, ["plan", "--preset", "stories15m", "--board", board, "--context", "256",
                       "--weights-dtype", "f32"])
    assert r.rc == 1
    lines = r.out.splitlines()
    assert lines[0].startswith("verdict: nothing fits %s: " % board)
    assert lines[1].startswith("what would fit: int4 weights (--weights-dtype i4): "), lines[1]


def test_source_weights_kept_when_they_keep_the_context(capsys):
    """stories260k's f32 weights keep its whole context on the esp32-s3 with 8 MB: no conversion asked."""
    r = _run(capsys, ["plan", "--preset", "stories260k", "--board", "esp32s3-n16r8", "--json"])
    j = json.loads(r.out)
    c = j["configurations"][j["chosen"] - 1]
    assert c["tokens_kept"] == j["context"] == 512
    assert c["weights"]["dtype"] == "f32" and j["weights_fit"]["converted"] is False
    assert j["weights_fit"]["searched"] == ["f32"]


def _named(line):
    """(board, weights dtype) the "what would fit" line names, or None."""
    m = re.match(r"what would fit: another board, (\S+), with \S+ weights \(--board \S+ --weights-dtype (\S+)\)",
                 line)
    if m:
        return m.group(1), m.group(2)
    m = re.match(r"what would fit: \S+ weights \(--weights-dtype (\S+)\)", line)
    if m:
        return None, m.group(1)
    m = re.search(r"for example --preset (\S+) --weights-dtype (\S+) --context (\d+) fits", line)
    if m:
        return ("preset", m.group(1), m.group(2), int(m.group(3)))
    return None


@pytest.mark.parametrize("preset", sorted(models.PRESETS))
def test_every_verdict_fits_or_names_what_does(preset):
    spec = models.preset(preset)
    for board in profiles.names():
        s, context, tgt = planner.inputs(preset=preset, board=board)
        try:
            p = planner.plan(s, context, tgt)
        except planner.NothingFits:
            continue  # the board's runtime runs no model at all (its footprint says so): not this item's
        lines = notes.verdict(p.result)
        if p.chosen is not None:
            assert lines[0].startswith("verdict: fits %s" % board), lines
            assert p.chosen["fits"] and p.chosen["total_bytes"] <= tgt["heap_bytes"]
            continue
        assert lines[0].startswith("verdict: nothing fits %s" % board), lines
        named = _named(lines[1])
        if named is None and p.result.get("fits_instead") is None:
            # no built-in model fits this board at all (the esp32's 100 KB, footprint measured on the Xtensa
            # lx106, with the stats stream and a prompt: 2026-12-06): the line names the model it would take
            # and a board with more
            assert lines[1].endswith(", or a board with more (kvedge plan --board all)"), (preset, board, lines[1])
            continue
        assert named is not None, (preset, board, lines[1])
        if named[0] == "preset":  # a smaller built-in model: plan it as named
            _, other, dtype, ctx = named
            o, _, ot = planner.inputs(preset=other, board=board)
            q = planner.plan(o, ctx, ot, kv_dtype="i8", weights_dtype=dtype, align=0, quality=False)
        else:
            b, dtype = named
            o, _, ot = planner.inputs(preset=preset, board=b or board)
            q = planner.plan(o, context, ot, weights_dtype=dtype)
        assert q.chosen is not None, (preset, board, lines[1])


def test_generate_without_a_plan_fits_the_weights_too(tmp_path):
    """`kvedge generate --board B` given no plan plans as `kvedge plan` does: an f32 checkpoint whose own plan keeps
    part of the context on the 100 KB esp32 is converted to the int8 weights whose plan keeps more, and run."""
    import subprocess
    import sys
    from _boardkit import env
    from kvedge_host.boards.tinyckpt import write
    # wide enough that the f32 rows the float pass streams take the cache's room (dim 48 kept more tokens with
    # f32 weights than int8 once the package's .mpy lost its line tables: 29 against an H2O plan's 17), narrow
    # enough that the f32 plan keeps a few (hidden_dim 192 kept 7 of the 8 a run needs once pass_float was a module
    # of its own; 176: 12 with f32 weights, 18 with int8)
    model, tok = write(str(tmp_path), dim=64, hidden_dim=176, n_heads=4, n_kv_heads=2, seq_len=128, name="t")
    spec, context, tgt = planner.inputs(model, board="esp32")
    from kvedge_host.boards import planrun
    # from BOS: with a prompt each format's plan leaves out what it must to keep MIN_TOKENS (the f32 plan the
    # board's encoder and the stats stream, 14 tokens; the int8 one nothing, 10: footprint on the lx106, 2026-12-07)
    own = planrun.plan_for("esp32", model, tok, weights_dtype="f32")
    i8 = planrun.plan_for("esp32", model, tok, weights_dtype="i8")
    assert own["tokens_kept"] < i8["tokens_kept"] <= context  # the premise: int8 weights leave the cache more
    g = subprocess.run([sys.executable, "-m", "kvedge_host.cli", "generate", "--board", "esp32", "--model", model,
                        "--tokenizer", tok, "--steps", "8", "--temperature", "0"],
                       capture_output=True, env=env(), timeout=600)  # a random model's text: bytes, not UTF-8
    g.stderr = g.stderr.decode("utf-8", "replace")
    assert g.returncode == 0, g.stderr[-1500:]
    assert "generate: the f32 weights keep %d of %d tokens on esp32; int8 weights keep %d: converted (kvedge " \
        "convert %s --weights-dtype i8" % (own["tokens_kept"], context, i8["tokens_kept"], model) in g.stderr, \
        g.stderr[-1500:]
    # (from BOS the random model may sample BOS again at once, which ends a run)
    assert re.search(r"\[\d+ tokens in .*weights i8 .*cache i8 \w+ \(%d slots" % i8["tokens_kept"], g.stderr), \
        g.stderr[-800:]
