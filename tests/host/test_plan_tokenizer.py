"""Issue 44, item 2: a plan counts the tokenizer the run will load: --tokenizer, else the one beside the model,
else the one the fetch cache holds for the model's vocabulary; when none is known it reserves the largest a
tokenizer of that vocabulary keeps, and says so. The expected bytes are recomputed here from the device's rule
(kvedge.model.pieces.FileTokenizer: 2- or 4-byte offsets by the file's size, 2 bytes a token for the sorted ids
once a prompt is encoded, 512 for the object)."""
import os
import shutil

import pytest

from kvedge_host import paths
from kvedge_host.plan import planner

TOK512 = os.path.join(paths.SHARED_MODELS, "tok512.bin")
MODEL = os.path.join(paths.SHARED_MODELS, "stories260K.bin")


def _expected(size, vocab, encode=True):
    offsets = 4 if size + 8 > 65535 else 2
    return offsets * (vocab + 1) + (2 * vocab if encode else 0) + 512


def _plan(board="rp2350", weights="i8", **kw):
    spec, context, tgt = planner.inputs(kw.get("model"), kw.pop("preset", None), board=board, weights_dtype=weights)
    return planner.plan(spec, context, tgt, weights_dtype=weights, **kw)


def test_none_known_reserves_the_largest_of_the_vocabulary(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(paths, "SHARED", str(tmp_path / "noshared"))
    p = _plan("rp2350-psram8", "i4", preset="stories15m")
    rt = p.result["runtime"]
    want = 4 * (32000 + 1) + 2 * 32000 + 512  # wide offsets (a 32,000-token file is more than 64 KB), sorted ids
    assert rt["tokenizer_bytes"] == want and rt["tokenizer"] is None and rt["tokenizer_from"] == "reserved"
    assert any("no tokenizer known" in n and format(want, ",") in n for n in p.result["notes"])
    assert p.document["runtime"]["tokenizer_bytes"] == want
    # without a prompt the sorted ids are not kept
    q = _plan("rp2350-psram8", "i4", preset="stories15m", prompt=False)
    assert q.result["runtime"]["tokenizer_bytes"] == 4 * 32001 + 512


@pytest.mark.skipif(not os.path.exists(TOK512) or not os.path.exists(MODEL), reason="needs ../shared/models")
def test_the_fetch_caches_tokenizer_for_the_vocabulary(monkeypatch, tmp_path):
    d = tmp_path / "alone"
    d.mkdir()
    model = str(d / "m.bin")
    shutil.copyfile(MODEL, model)  # no tokenizer beside it
    cache = tmp_path / "cache" / "kvedge" / "models"
    cache.mkdir(parents=True)
    shutil.copyfile(TOK512, str(cache / "tok512.bin"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(paths, "SHARED", str(tmp_path / "noshared"))
    p = _plan(model=model)
    rt = p.result["runtime"]
    assert rt["tokenizer_from"] == "the fetch cache" and rt["tokenizer"] == str(cache / "tok512.bin")
    assert rt["tokenizer_bytes"] == _expected(os.path.getsize(TOK512), 512)
    # one beside the model comes first, and --tokenizer before both
    big = str(d / "tok512.bin")
    with open(TOK512, "rb") as f, open(big, "wb") as g:
        g.write(f.read() + b"\0" * 70000)  # a longer file: 4-byte offsets
    p = _plan(model=model)
    assert p.result["runtime"]["tokenizer"] == big
    assert p.result["runtime"]["tokenizer_bytes"] == _expected(os.path.getsize(big), 512)
    p = _plan(model=model, tokenizer=TOK512)
    assert p.result["runtime"]["tokenizer"] == TOK512 and p.result["runtime"]["tokenizer_from"] == "given"
