"""The device's integer forward pass (kvedge.model.pass_int) against independent references: the numpy model of
the same int8 file (kvedge_host.ref.llama_ref), llama2.c's documented greedy text, and the device's float pass in
kvedge eval's quality table. Tiny self-written checkpoints always run; stories260K tests skip without it."""
import os

import numpy as np
import pytest

from kvedge_host.ref import llama_ref, quality
from kvedge_host.boards import tinyckpt
from kvedge_host.cli import main as cli
from kvedge_host.paths import SHARED_MODELS
from kvedge.model.checkpoint import convert_to_i8
from kvedge.model.llama import Llama, generate
from kvedge.model.sampler import Sampler
from kvedge.model.tokenizer import Tokenizer

STORIES = os.path.join(SHARED_MODELS, "stories260K.bin")
TOK512 = os.path.join(SHARED_MODELS, "tok512.bin")
have_stories = pytest.mark.skipif(not (os.path.exists(STORIES) and os.path.exists(TOK512)),
                                  reason="needs ../shared/models/stories260K.bin and tok512.bin")
EXPECTED = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
            "she saw a big, red ball. She wanted to play with it, but it was too high.")


@pytest.fixture(scope="module")
def stories_i8(tmp_path_factory):
    if not os.path.exists(STORIES):
        pytest.skip("needs ../shared/models/stories260K.bin")
    q = str(tmp_path_factory.mktemp("s260") / "stories260K.i8.bin")
    convert_to_i8(STORIES, q)
    return q


def _int_logits(m, tok):
    return np.array(list(m.forward(tok)), dtype=np.float64) * 2.0 ** m.intp.exp_logits


def test_tiny_int_pass_tracks_numpy_on_the_same_int8_weights(tmp_path):
    p, _ = tinyckpt.write(str(tmp_path), seed=5)
    q = str(tmp_path / "tiny_i8.bin")
    convert_to_i8(p, q)
    m = Llama(q, kv={"dtype": "i8", "align": 0}, forward="int")
    ref = llama_ref.RefModel(q)  # float64, exact K/V: what the int8 weights compute without any rounding
    toks = [1, 40, 300, 7, 7, 290, 15, 3, 11, 200]
    for t in toks:
        a = _int_logits(m, t)
        b = ref.forward(t)
        assert np.abs(a - b).max() <= 0.02 * (b.max() - b.min()), t  # i8 cache, int8 queries, 15-bit activations


@have_stories
def test_int_pass_logits_track_numpy_over_64_positions(stories_i8):
    m = Llama(stories_i8, kv={"dtype": "i8", "align": 0}, forward="int")
    ref = llama_ref.RefModel(stories_i8)
    tok, worst, agree = 1, 0.0, 0
    for _ in range(64):
        a = _int_logits(m, tok)
        b = ref.forward(tok)
        worst = max(worst, float(np.abs(a - b).max()))
        agree += int(a.argmax() == b.argmax())
        tok = int(b.argmax())
    assert worst < 1.0 and agree >= 62, (worst, agree)  # logits span ~20; measured worst ~0.5, 64 of 64


@have_stories
def test_int_pass_greedy_is_llama2c_documented_text(stories_i8):
    m = Llama(stories_i8, kv={"dtype": "i8", "align": 0, "max_tokens": 80}, forward="int")
    tok = Tokenizer.load(TOK512, 512)
    out = []
    generate(m, tok, Sampler(512), [1], 80, out.append)
    assert b"".join(out).decode().startswith(EXPECTED)


@have_stories
def test_generate_command_runs_the_int_pass_on_the_unix_port(stories_i8, capfd):
    assert cli(["generate", "--model", stories_i8, "--tokenizer", TOK512, "--steps", "80", "--runtime", "unix",
                "--kv-dtype", "i8", "--forward", "int"]) == 0
    out, err = capfd.readouterr()
    assert out.startswith(EXPECTED)
    assert "kernels viper" in err
    assert cli(["generate", "--model", STORIES, "--tokenizer", TOK512, "--forward", "int", "--kv-dtype", "i8"]) == 2
    assert "--forward int needs int8 or int4 weights" in capfd.readouterr()[1]


def test_eval_rows_of_the_forward_passes_on_tiny(tmp_path):
    p, _ = tinyckpt.write(str(tmp_path), seed=3)
    res = quality.evaluate(p, 24, 7, 8, 2, ["(the f32 reference only)"], 0, None, 2, forwards=("float", "int"))
    rows = {r.get("forward"): r for r in res["rows"]}
    assert rows[None]["name"] == "f32" and set(rows) >= {"float", "int"}
    for fw in ("float", "int"):
        r = rows[fw]
        assert r["config"]["dtype"] == "i8" and np.isfinite(r["ppl"]) and r["top1"] >= 0.9
    assert rows["int"]["kl"] <= rows["float"]["kl"] * 2  # measured 0.00024 against 0.00059
    with pytest.raises(ValueError):
        quality.forward_rows(p, [[1, 2, 3]], [np.zeros((2, 352))], ("fast",))


@have_stories
def test_eval_int_pass_within_one_percent_of_the_float_pass():
    res = quality.evaluate(STORIES, 128, 1, 64, 4, ["(the f32 reference only)"], 0, None, 1, forwards=("float", "int"))
    fw = {r.get("forward"): r["ppl"] for r in res["rows"]}
    assert fw["int"] <= fw["float"] * 1.01, fw
