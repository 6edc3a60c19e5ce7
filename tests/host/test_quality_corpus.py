"""The written evaluation corpus (tests/corpus), what `kvedge eval` measures on it, and the planner's default
quality table that comes from it (`kvedge plan --quality`, `--board all`)."""
import json
import os

import pytest

from kvedge_host import profiles
from kvedge_host.plan import planquality
from kvedge_host.ref import quality
from kvedge_host.cli import main as cli
from kvedge_host.paths import SHARED_MODELS
from kvedge.model.tokenizer import Tokenizer

import _modelfiles as mf

STORIES = os.path.join(SHARED_MODELS, "stories260K.bin")
TOK512 = os.path.join(SHARED_MODELS, "tok512.bin")
have_tok = pytest.mark.skipif(not os.path.exists(TOK512), reason="../shared/models/tok512.bin is absent")
have_stories = pytest.mark.skipif(not (os.path.exists(STORIES) and os.path.exists(TOK512)),
                                  reason="../shared/models/stories260K.bin or tok512.bin is absent")


@have_tok
def test_written_corpus_is_a_few_thousand_tokens_of_short_stories():
    texts = quality.written_texts(TOK512, quality.CORPUS, 512, 512)
    tok = Tokenizer.load(TOK512, 512)
    assert len(texts) >= 3
    total = sum(len(ids) for _, ids in texts)
    assert 2000 <= total <= 8000, total
    for name, ids in texts:
        assert ids[0] == 1 and 300 <= len(ids) <= 512, (name, len(ids))  # one story fits the trained context
        with open(os.path.join(quality.CORPUS, name + ".txt"), encoding="utf-8") as f:
            text = f.read().strip()
        assert tok.decode(ids[1:], prev=1).decode() == text  # plain text the tokenizer round-trips
        assert max(ids) < 512


@have_stories
def test_a_story_longer_than_the_context_is_refused(tmp_path, capsys):
    (tmp_path / "long.txt").write_text("Once upon a time, there was a cat. " * 48)  # about 530 tokens
    assert cli(["eval", "--model", STORIES, "--corpus", str(tmp_path), "--texts", "written"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvedge eval: error:") and "long.txt: 5" in err
    assert "tokens, more than the model's 512-token context" in err


@have_stories
def test_a_story_that_is_not_utf8_is_named_not_the_tokenizer(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("Once upon a time, there was a cat.")
    (tmp_path / "bad.txt").write_bytes(b"Once upon a time \xff\xfe there was a cat.")
    assert cli(["eval", "--model", STORIES, "--corpus", str(tmp_path), "--texts", "written"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kvedge eval: error: %s: not UTF-8" % (tmp_path / "bad.txt")), err
    assert "tok512" not in err and "0xff at offset 17" in err, err


@have_stories
def test_kivi_residual_and_two_bit_costs_on_the_written_corpus():
    # the written corpus, pooled over its 8 stories (text the model never saw): recent tokens kept exact buy
    # back most of what 2-bit keys lose, and i4 with the sliding residual stays within 0.5 % of f32
    texts = [ids for _, ids in quality.written_texts(TOK512, quality.CORPUS, 512, 512)]
    res = quality.evaluate(STORIES, only=["i4 KIVI (g32, R32)", "i2 KIVI", "i2 per-token"], texts=texts)
    rows = {r["name"]: r for r in res["rows"]}
    base = rows["f32"]["ppl"]
    i4 = rows["i4 KIVI (g32, R32)"]
    assert i4["ppl"] <= base * 1.005 and i4["kl"] <= 0.001, i4
    assert rows["i2 KIVI (g32, R64)"]["kl"] < rows["i2 KIVI (g32, R32)"]["kl"] < rows["i2 per-token keys"]["kl"]
    # issue 17's i2 target (+10 %), met since the least-squares fit (+2.3 %; min-max codes measured +7.3 %)
    assert rows["i2 KIVI (g32, R32)"]["ppl"] <= base * 1.10, rows["i2 KIVI (g32, R32)"]
    assert res["samples"] == len(texts) >= 3


def test_default_quality_table_is_the_written_corpus():
    with open(planquality.DEFAULT_QUALITY) as f:
        doc = json.load(f)
    assert doc["model"] == "stories260K.bin"
    assert doc["quality"] == doc["texts"]["written"] and len(doc["texts"]["written"]["names"]) >= 3
    table = planquality.load_quality(planquality.DEFAULT_QUALITY)
    kinds = {(r["kind"], r["dtype"], r.get("residual")) for r in table}
    for want in (("keep", "f32", None), ("keep", "i8", None), ("keep", "i4", 32), ("keep", "i2", 32),
                 ("keep", "i2", 64), ("sinks", "f32", None), ("h2o", "f32", None)):
        assert want in kinds, want


def test_plan_ranks_by_the_default_table(capsys, tmp_path):
    stories = mf.write_llama2c(str(tmp_path / "stories.bin"))
    assert cli(["plan", "--model", stories, "--board", "rp2040", "--weights-dtype", "i8", "--quality",
                "--objective", "quality", "--json"]) == 0  # the quality order alone (balanced weighs speed too)
    r = json.loads(capsys.readouterr().out)
    measured = [c for c in r["configurations"] if c["quality"]]
    assert measured and measured[0] is r["configurations"][0]
    # by measured cost; a cache shorter than every measured row of its kind (its row only bounds its cost from
    # below: "fewer") after all whose row bounds it from above
    costs = [(bool(c["quality"].get("fewer")), planquality.quality_cost(c["quality"])) for c in measured]
    assert costs == sorted(costs)
    i4 = [c for c in measured if c["cache"]["dtype"] == "i4" and c["kind"] == "keep"]
    for c in i4:  # the row measured with the candidate's own residual
        assert c["quality"].get("residual") == c["cache"]["residual"]


def test_plan_for_every_board(capsys, tmp_path):
    stories = mf.write_llama2c(str(tmp_path / "stories.bin"))
    assert cli(["plan", "--model", stories, "--board", "all", "--quality", "--weights-dtype", "i8",
                "--objective", "quality", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(doc["boards"]) == profiles.names()
    for name, b in doc["boards"].items():
        assert b["heap_bytes"] == profiles.load(name)["heap_bytes"]
        seen = set()
        for r in b["strategies"]:
            assert (r["kind"], r["dtype"]) not in seen  # one row per strategy: its best configuration
            seen.add((r["kind"], r["dtype"]))
            assert r["tokens_kept"] > 0 and r["kv_bytes"] > 0
        kls = [float("%.2g" % r["kl"]) for r in b["strategies"] if r["kl"] is not None and not r["estimated"]]
        assert kls == sorted(kls)
    assert cli(["plan", "--model", stories, "--board", "all", "--quality", "--weights-dtype", "i8"]) == 0
    out = capsys.readouterr().out
    assert "### rp2040 (heap 215,040 bytes)" in out and "| # | strategy | tokens kept |" in out
    assert cli(["plan", "--model", stories, "--board", "all", "--out", str(tmp_path / "x.json")]) == 2
    assert "name the board" in capsys.readouterr().err
