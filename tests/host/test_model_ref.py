"""The device model against the numpy reference (kvedge_host.ref.llama_ref) and llama2.c's documented output.

Tiny self-written checkpoints always run; stories260K tests skip when ../shared/models is absent."""
import json
import os

import numpy as np
import pytest

from kvedge_host.ref import llama_ref, quality
from kvedge_host.boards import runtimes
from kvedge_host.cli import main as cli
from kvedge_host.paths import DEVICE, SHARED_MODELS
from kvedge.model import checkpoint, tiny
from kvedge.model.llama import Llama
from kvedge.model.tokenizer import Tokenizer

STORIES = os.path.join(SHARED_MODELS, "stories260K.bin")
TOK512 = os.path.join(SHARED_MODELS, "tok512.bin")
have_stories = pytest.mark.skipif(not (os.path.exists(STORIES) and os.path.exists(TOK512)),
                                  reason="needs ../shared/models/stories260K.bin and tok512.bin")
EXPECTED = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
            "she saw a big, red ball. She wanted to play with it, but it was too high.")


@pytest.fixture(scope="module")
def tinyfiles(tmp_path_factory):
    from kvedge_host.boards import tinyckpt
    d = tmp_path_factory.mktemp("tiny")
    p, t = tinyckpt.write(str(d), seed=3)
    q = str(d / "tiny_i8.bin")
    assert cli(["convert", p, "-o", q]) == 0
    return {"f32": p, "i8": q, "tok": t, "dir": str(d)}


def _device_logits(path, tokens, kv=None):
    m = Llama(path, kv=kv or {"align": 0})
    out = np.array([list(m.forward(t)) for t in tokens])
    m.close()
    return out


def _ref_logits(path, tokens):
    r = llama_ref.RefModel(path)
    return np.array([r.forward(t) for t in tokens])


def _unix_logits(path, tokens, heap=8 << 20):
    code = ("from kvedge.model.llama import Llama\nm = Llama(%r, kv={'align': 0})\n"
            "for t in %r:\n    print('L ' + ' '.join(repr(v) for v in m.forward(t)))\n" % (path, list(tokens)))
    rc, out = runtimes.run_code("unix", code, heap, [DEVICE, os.path.dirname(path)])
    assert rc == 0, out
    return np.array([[float(v) for v in line[2:].split()] for line in out.splitlines() if line.startswith("L ")])


def test_tiny_device_logits_match_numpy_on_cpython(tinyfiles):
    toks = [1, 40, 300, 7, 7, 290, 15, 3] * 3
    a = _device_logits(tinyfiles["f32"], toks)
    b = _ref_logits(tinyfiles["f32"], toks)
    assert np.abs(a - b).max() < 1e-4


def test_tiny_device_logits_match_numpy_on_unix(tinyfiles):
    toks = [1, 40, 300, 7, 7, 290, 15, 3]
    a = _unix_logits(tinyfiles["f32"], toks)
    b = _ref_logits(tinyfiles["f32"], toks)
    assert a.shape == b.shape and np.abs(a - b).max() < 1e-4


def test_tiny_int8_file_matches_its_dequantized_reference(tinyfiles):
    # numpy dequantizes the int8 file exactly; the device also quantizes activations to int8, so the
    # difference is the activation rounding only
    toks = [1, 40, 300, 7, 290]
    a = _device_logits(tinyfiles["i8"], toks)
    b = _ref_logits(tinyfiles["i8"], toks)
    assert np.abs(a - b).max() / np.abs(b).max() < 0.05
    assert os.path.getsize(tinyfiles["i8"]) < os.path.getsize(tinyfiles["f32"]) / 3


def test_convert_refuses_overwrite_and_bad_input(tinyfiles, capsys):
    assert cli(["convert", tinyfiles["f32"], "-o", tinyfiles["i8"]]) == 2
    assert cli(["convert", tinyfiles["i8"], "-o", tinyfiles["i8"] + ".x"]) == 2
    assert "already a kvedge int8 file" in capsys.readouterr().err


@pytest.mark.parametrize("runtime", ["cpython", "unix", "wasm"])
def test_generate_command_on_tiny(tinyfiles, capfd, runtime):
    for model in (tinyfiles["f32"], tinyfiles["i8"]):
        assert cli(["generate", "--model", model, "--steps", "12", "--prompt", "the cat",
                    "--runtime", runtime, "--kv-dtype", "i8"]) == 0
        out, err = capfd.readouterr()
        assert out.startswith("the cat") and "tok/s" in err and "cache i8" in err


def test_eval_mirror_reads_what_the_cache_holds(tinyfiles):
    # the eval re-reads only the newest rows (and a KIVI group leaving the residual): compare with a full re-read
    ids = [1] + [int(x) for x in np.random.RandomState(0).randint(3, 340, 70)]
    for kv in ({"dtype": "f32"}, {"dtype": "i8", "prefix": 3}, {"dtype": "i4", "group": 32},
               {"dtype": "i4", "group": 8, "residual": 24},
               {"dtype": "i4", "group": 4, "residual": 8, "window": 16, "sinks": 6, "prefix": 2, "max_tokens": 22},
               {"dtype": "f16", "window": 24, "sinks": 2, "max_tokens": 26}):
        m = quality.CachedRef(tinyfiles["f32"], dict(kv, align=0), len(ids))
        for t in ids:
            m.forward(t)
        n = m.cache.positions(m.live)
        for layer in range(m.cfg.n_layers):
            mk = m.mk[layer, list(m.live[:n])].copy()
            mv = m.mv[layer, list(m.live[:n])].copy()
            for p in m.live[:n]:
                m._mirror(layer, p)
            assert np.array_equal(mk, m.mk[layer, list(m.live[:n])]), kv
            assert np.array_equal(mv, m.mv[layer, list(m.live[:n])]), kv
    # a tiered cache: the block that leaves the ring is re-read as stored (i4 / i8) when it goes cold
    for cold in ("i4", "i8"):
        name, kv = quality.tiered(16, cold, sinks=2, tokens=50, block=8)
        m = quality.TieredRef(tinyfiles["f32"], kv["tiered"], len(ids))
        try:
            for t in ids:
                m.forward(t)
            n = m.cache.positions(m.live)
            assert m.cache.store.count == 4 and m.cache.drops > 0 and n <= 50
            for layer in range(m.cfg.n_layers):
                mk = m.mk[layer, list(m.live[:n])].copy()
                mv = m.mv[layer, list(m.live[:n])].copy()
                for p in m.live[:n]:
                    m._mirror(layer, p)
                assert np.array_equal(mk, m.mk[layer, list(m.live[:n])]), name
                assert np.array_equal(mv, m.mv[layer, list(m.live[:n])]), name
        finally:
            m.close()
    # and with an f32 cache the evaluation model is the reference itself
    a = quality.teacher_force(tinyfiles["f32"], ids[:20], {"dtype": "f32", "align": 0})[0]
    b = _ref_logits(tinyfiles["f32"], ids[:19])
    assert np.abs(a - b).max() < 1e-6


def test_eval_command_json_on_tiny(tinyfiles, capsys):
    assert cli(["eval", "--model", tinyfiles["f32"], "--tokens", "40", "--window", "16", "--json", "--samples", "1",
                "--texts", "sampled"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert list(res["texts"]) == ["sampled"] and res["quality"] is not None
    rows = {r["name"]: r for r in res["quality"]["rows"]}
    assert rows["f32"]["kl"] == 0 and rows["f32"]["top1"] == 1
    assert rows["window 16"]["peak_bytes"] < rows["f32"]["peak_bytes"]
    assert rows["i8"]["peak_bytes"] < rows["f16"]["peak_bytes"] < rows["f32"]["peak_bytes"]
    h2o = [r for n, r in rows.items() if n.startswith("H2O")][0]
    assert h2o["peak_bytes"] <= rows["window 16"]["peak_bytes"] and h2o["evictions"] > 0
    tiered = [r for n, r in rows.items() if n.startswith("tiered")]
    assert len(tiered) == 3 and all(r["tier"]["kind"] == "tiered" and r["flash_bytes"] > 0 for r in tiered)
    # every token is held (ring in RAM, the rest on flash): closer to f32 than the window of the same ring
    ring16 = [r for r in tiered if "ring 16 + cold i4" in r["name"]][0]
    assert ring16["kl"] < rows["window 16"]["kl"] and ring16["arena_bytes"] < rows["f32"]["arena_bytes"]


# ---- the real checkpoint ----

@have_stories
def test_numpy_reference_greedy_is_llama2c_documented_text():
    tok = Tokenizer.load(TOK512, 512)
    ids = llama_ref.greedy(llama_ref.RefModel(STORIES), 256)
    assert tok.decode(ids, prev=1).decode().startswith(EXPECTED)


@have_stories
def test_device_logits_within_1e4_of_numpy_for_512_positions_and_greedy_text():
    # one 512-token run, fed numpy's greedy choice at every step (past the story's end too)
    m = Llama(STORIES, kv={"align": 0})
    r = llama_ref.RefModel(STORIES)
    tok, worst, dev_ids, ref_ids = 1, 0.0, [], []
    for _ in range(512):
        a = np.array(list(m.forward(tok)))
        b = r.forward(tok)
        worst = max(worst, float(np.abs(a - b).max()))
        dev_ids.append(int(a.argmax()))
        ref_ids.append(int(b.argmax()))
        tok = ref_ids[-1]
    assert worst < 1e-4, worst
    assert dev_ids == ref_ids
    end = ref_ids.index(1) if 1 in ref_ids else len(ref_ids)
    assert end >= 200  # the greedy story runs >= 200 tokens before its BOS
    text = Tokenizer.load(TOK512, 512).decode(dev_ids[:end], prev=1).decode()
    assert text.startswith(EXPECTED)


@have_stories
def test_unix_port_greedy_reproduces_the_reference_for_200_tokens(capfd):
    assert cli(["generate", "--model", STORIES, "--tokenizer", TOK512, "--steps", "210", "--runtime", "unix"]) == 0
    out, err = capfd.readouterr()
    tok = Tokenizer.load(TOK512, 512)
    ref = tok.decode(llama_ref.greedy(llama_ref.RefModel(STORIES), 210), prev=1).decode()
    assert out.startswith(EXPECTED)
    assert out.rstrip("\n") == ref, (out, ref)
    assert "kernels viper" in err or "kernels native" in err


@have_stories
def test_unix_port_heap_peak_within_plan():
    code = ("from kvedge.model import run\nrun.main(%r, %r, steps=24, kv={'align': 0, 'dtype': 'i8'}, peak=True)\n"
            % (STORIES, TOK512))
    rc, out = runtimes.run_code("unix", code, 8 << 20, [DEVICE, SHARED_MODELS])
    assert rc == 0, out
    s = json.loads(out.split("#KVEDGE ")[1])
    assert 0 < s["heap_peak"] <= s["plan_total"], s


@have_stories
def test_i8_and_i4_cache_perplexity_cost_is_small():
    # four 512-token texts pooled (one text alone is noisy: i4 ranges +0.1 % .. +1.3 % over seeds)
    res = quality.evaluate(STORIES, 512, seed=1, only=["i8", "i4 KIVI"], samples=4)
    rows = {r["name"]: r for r in res["rows"]}
    base = rows["f32"]["ppl"]
    assert rows["i8"]["ppl"] <= base * 1.005, rows
    i4 = [r for n, r in rows.items() if n.startswith("i4 KIVI")][0]
    assert i4["ppl"] <= base * 1.01, rows


@have_stories
def test_tok512_encodings_match_llama2c():
    # ids printed by llama2.c's encode() (run.c, bos=1, eos=0) compiled with gcc
    tok = Tokenizer.load(TOK512, 512)
    assert tok.encode("Once upon a time, Lily and Tom") == [1, 403, 407, 261, 378, 432, 317, 269, 274, 287]
    assert tok.encode("caf\u00e9 \u20ac 42!") == [1, 280, 412, 431, 485, 410, 503, 410, 484, 479, 443]
    assert tok.encode("  two  spaces\nnewline") == [1, 410, 410, 259, 424, 414, 410, 262, 427, 412, 331, 419,
                                                    13, 416, 411, 424, 421, 271, 411]
    assert tok.encode("The end.") == [1, 291, 344, 264, 426]
    assert tok.encode("") == [1]


@have_stories
def test_seeded_sampling_matches_llama2c(capfd):
    # llama2.c: ./run stories260K.bin -z tok512.bin -t 1.0 -p 1.0 -s 42 -n 60
    assert cli(["generate", "--model", STORIES, "--tokenizer", TOK512, "--steps", "60", "--temperature", "1",
                "--seed", "42"]) == 0
    out = capfd.readouterr().out
    assert out.startswith("Once upon a time, there was a big roof. The fox was ready to look for people inside. "
                          "He saw a big rock near a big tree. The roof was very sm")


def test_h2o_policy_through_the_device_model(tinyfiles, capfd):
    from kvedge.evict import H2O
    for intp in (False, True):
        m = Llama(tinyfiles["f32"], kv={"align": 0, "dtype": "i8", "max_tokens": 40}, int_attention=intp,
                  policy=lambda c: H2O(c, budget=12, recent=6))
        for t in range(30):
            m.forward(3 + t * 7 % 300)
        assert m.cache.n_cached == 12 and m.cache.stats()["evictions"] == 18
        assert max(m.policy.acc) > 0  # the attention step fed the policy's scores
        m.close()
    assert cli(["generate", "--model", tinyfiles["f32"], "--steps", "30", "--h2o", "10", "--kv-dtype", "i8"]) == 0
    assert "evictions 20" in capfd.readouterr().err


@have_stories
def test_stories260k_runs_in_an_rp2040_heap_with_streamed_int8_weights(tmp_path, capfd):
    # 215 KB heap: int8 weights stay in the file (only norms and one chunk of rows in RAM), an i8 ring cache of
    # 4 sinks + 92 tokens, the package as .mpy (as deployed); the start-up plan passes and the greedy text is the
    # documented one.
    q = str(tmp_path / "stories260K.i8.bin")
    checkpoint.convert_to_i8(STORIES, q)
    assert cli(["generate", "--model", q, "--tokenizer", TOK512, "--steps", "160", "--runtime", "unix",
                "--board", "rp2040", "--stream", "--kv-dtype", "i8", "--window", "92", "--sinks", "4",
                "--mpy"]) == 0
    out, err = capfd.readouterr()
    assert out.startswith(EXPECTED[:100]) and "evictions 64;" in err, (out, err)
    # the same run without streaming is refused before anything large is allocated
    assert cli(["generate", "--model", q, "--tokenizer", TOK512, "--steps", "8", "--runtime", "unix",
                "--board", "rp2040", "--kv-dtype", "i8", "--mpy"]) == 2
    assert "BudgetError" in capfd.readouterr().err


def test_generate_stats_stream_for_the_monitor(tinyfiles, capfd):
    from kvedge.telemetry import parse
    assert cli(["generate", "--model", tinyfiles["f32"], "--steps", "20", "--stats-ms", "0", "--runtime", "unix",
                "--window", "8", "--sinks", "2"]) == 0
    assert "KVSTATS" not in capfd.readouterr().err
    assert cli(["generate", "--model", tinyfiles["f32"], "--steps", "20", "--stats-ms", "1", "--runtime", "unix",
                "--window", "8", "--sinks", "2"]) == 0
    out, err = capfd.readouterr()
    assert "KVSTATS" not in out
    samples = [parse(line) for line in err.splitlines() if line.startswith("KVSTATS")]
    assert samples[0]["event"] == "start" and samples[-1]["event"] == "final"
    assert samples[-1]["tokens_seen"] == 20 and samples[-1]["evictions"] == 10


def test_long_eval_has_tiered_rows_beside_window_and_sinks(tinyfiles):
    # two trained contexts of the tiny model; the tiered rows hold a context's worth (oldest blocks dropped) or all
    assert quality.tier_rings((64, 128, 256, 512), 512) == [64, 128]
    assert quality.tier_rings((128, 512), 512) == [64, 128] and quality.tier_rings((8,), 40) == [4, 8]
    ctx = quality.RefModel(tinyfiles["f32"]).cfg.seq_len
    res = quality.evaluate_long(tinyfiles["f32"], contexts=2, seed=3, windows=(16, ctx), sinks=2)
    rows = {r["name"]: r for r in res["rows"]}
    tiered = [r for n, r in rows.items() if n.startswith("tiered")]
    assert len(tiered) == 4 and all(len(r["segments"]) == 2 and r["flash_bytes"] > 0 for r in tiered)
    assert "window 16" in rows and "sinks 2 + window 14" in rows
    # holding every token on flash is the full cache up to its quantization: closer to it than a window
    full = [r for r in tiered if "all held" in r["name"]][0]
    assert full["kl"] < rows["window 16"]["kl"] and full["peak_bytes"] < res["rows"][0]["peak_bytes"]
