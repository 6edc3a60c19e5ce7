"""Issue 14, host side: one regression test per finding F1-F12 and the monitor's overlong lines. Each input
here once ended in a traceback, a hang, a confident wrong answer or a runaway; now it ends in one stderr line
`kvedge CMD: error: FILE-OR-FLAG: problem` and exit status 2 (or, where the input is valid, a correct run)."""
import json
import os
import struct
import tracemalloc

import pytest

import _clifuzz as cf
import _modelfiles as mf
from _boardkit import kvedge
from kvedge import telemetry
from kvedge_host.boards.monitor import Monitor

STORIES_SHAPE = dict(dim=64, hidden=172, layers=5, heads=8, kv_heads=4, vocab=512, seq=512)


def refused(argv, *names, limit=60):
    """Run in-process: exit 2, one stderr line naming every one of `names`, no traceback, within `limit`."""
    res = cf.run_inprocess([str(a) for a in argv], limit)
    assert res.exc is None, "raised %r" % res.exc
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert res.rc == 2 and len(lines) == 1, (res.rc, res.err[-2000:], res.out[-500:])
    assert lines[0].startswith("kvedge %s: error: " % argv[0]), lines[0]
    for n in names:
        assert str(n) in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture
def tiny(tmp_path):
    from kvedge_host.boards import tinyckpt
    model, tok = tinyckpt.write(str(tmp_path / "tiny"))
    return model, tok


def test_f1_deeply_nested_json_is_one_line_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 100000 + "1" + "}" * 100000)
    arrays = tmp_path / "config.json"
    arrays.write_text("[" * 100000 + "]" * 100000)
    for p in (deep, arrays):
        refused(["budget", "--model", p], p, "nested")
        refused(["plan", "--preset", "stories260k", "--quality", p], p, "nested")
        refused(["deploy", "--port", tmp_path / "no-port", "--config", p], p, "nested")


@pytest.mark.parametrize("value", [0, [], {}])
def test_f2_model_type_that_is_not_a_string(tmp_path, value):
    p = mf.write_json(tmp_path, "c.json", dict(mf.MISTRAL_7B_V01, model_type=value))
    line = refused(["budget", "--model", p], p, "model_type")
    assert "model_type is %s" % json.dumps(value) in line


@pytest.mark.parametrize("value", [[], {}])
def test_f3_max_position_embeddings_list_or_object(tmp_path, value):
    p = mf.write_json(tmp_path, "c.json", dict(mf.TINYLLAMA, max_position_embeddings=value))
    for cmd in ("budget", "plan"):
        refused([cmd, "--model", p, "--context", "128"], p, "max_position_embeddings is %s" % json.dumps(value))


@pytest.mark.parametrize("base,layers", [(mf.GEMMA3_1B, 10 ** 30), (mf.MISTRAL_7B_V01, 10 ** 30),
                                         (mf.MISTRAL_7B_V01, 1e30), (mf.MISTRAL_7B_V01, 10 ** 8),
                                         (mf.GEMMA2_2B, 10 ** 8)],
                         ids=["gemma3-10**30", "mistral-10**30", "mistral-1e30", "mistral-10**8", "gemma2-10**8"])
def test_f4_absurd_layer_counts_fail_fast_in_constant_memory(tmp_path, base, layers):
    p = mf.write_json(tmp_path, "c.json", dict(base, num_hidden_layers=layers))
    ok = mf.write_json(tmp_path, "ok.json", base)
    assert cf.run_inprocess(["budget", "--model", ok, "--json"]).rc == 0  # imports done before tracing
    tracemalloc.start()
    try:
        line = refused(["budget", "--model", p], p, "num_hidden_layers", limit=30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "expected a whole number 1..4096" in line
    assert peak < 8 << 20, "%d bytes traced while refusing %r layers" % (peak, layers)


@pytest.mark.parametrize("vocab", [1, -1])
def test_f5_vocab_size_1_or_minus_1(tmp_path, vocab, tiny):
    # a file whose length matches its header: only the vocabulary is impossible (BOS is token 1)
    p = mf.write_llama2c(str(tmp_path / "v.bin"), dim=16, hidden=40, layers=2, heads=4, kv_heads=2, vocab=vocab,
                         seq=64)
    for argv in (["eval", "--model", p, "--tokens", "8"], ["budget", "--model", p], ["plan", "--model", p],
                 ["convert", p, "-o", str(tmp_path / "o.bin")],
                 ["generate", "--model", p, "--tokenizer", tiny[1], "--steps", "4"]):
        refused(argv, p, "vocab_size is %d" % vocab)


def test_f6_errors_name_the_file_in_the_users_words(tmp_path, tiny):
    model, tok = tiny
    raw = open(model, "rb").read()
    zero = tmp_path / "dim0.bin"
    zero.write_bytes(struct.pack("<i", 0) + raw[4:])
    for argv in (["convert", zero, "-o", tmp_path / "o.bin"], ["generate", "--model", zero, "--tokenizer", tok],
                 ["eval", "--model", zero]):
        refused(argv, zero, "dim is 0")
    short = tmp_path / "short.bin"
    short.write_bytes(raw[:-3136])
    line = refused(["eval", "--model", short], short, "the header needs")
    assert "reshape" not in line
    line = refused(["budget", "--model", model, "--context", str(10 ** 9)])
    assert line.startswith("kvedge budget: error: --context must be at most")  # once "tokens is absurdly large"


def test_f7_checkpoint_longer_than_its_header_is_refused_everywhere(tmp_path, tiny):
    _, tok = tiny
    # stories260K's shape with hidden_dim changed from 172 to 1: the header now promises fewer bytes
    p = mf.write_llama2c(str(tmp_path / "s.bin"), **STORIES_SHAPE)
    data = bytearray(open(p, "rb").read())
    struct.pack_into("<i", data, 4, 1)
    bad = tmp_path / "hidden1.bin"
    bad.write_bytes(bytes(data))
    longer = tmp_path / "longer.bin"
    longer.write_bytes(open(p, "rb").read() + bytes(4))
    for f in (bad, longer):
        for argv in (["budget", "--model", f], ["plan", "--model", f], ["convert", f, "-o", tmp_path / "o.bin"],
                     ["generate", "--model", f, "--tokenizer", tok, "--steps", "4"], ["eval", "--model", f],
                     ["check", "--model", f, "--only", "mha"]):
            refused(argv, f, "bytes, the header needs")
    assert not os.path.exists(tmp_path / "o.bin")


@pytest.mark.parametrize("kl", [float("nan"), -0.5, "x", None, [], 10 ** 400, float("inf")],
                         ids=["nan", "negative", "text", "null", "list", "10**400", "inf"])
def test_f8_quality_kl_must_be_a_finite_number_at_least_0(tmp_path, kl):
    rows = [{"name": "f32", "kl": 0.0, "ppl": 5.0}, {"name": "i8", "kl": 0.003, "ppl": 5.01},
            {"name": "i4 KIVI (g32)", "kl": kl, "ppl": 5.2}]
    q = tmp_path / "q.json"
    q.write_text(json.dumps({"quality": {"rows": rows}}))
    line = refused(["plan", "--preset", "stories260k", "--heap", "400000", "--quality", q], q, "kl is")
    assert "i4 KIVI" in line  # the row is named


def test_f8_a_valid_quality_table_still_ranks(tmp_path):
    rows = [{"name": "f32", "kl": 0.0}, {"name": "i8", "kl": 0.25}, {"name": "i4 KIVI (g32)", "kl": 0.01}]
    q = tmp_path / "q.json"
    q.write_text(json.dumps(rows))
    res = cf.run_inprocess(["plan", "--preset", "stories260k", "--heap", "700000", "--weights-dtype", "i8",
                            "--quality", str(q), "--json"])
    assert res.rc == 0, res.err
    first = json.loads(res.out)["configurations"][:2]
    # f32 does not fit; the measured i4 (KL 0.01) ranks before the measured i8 (KL 0.25)
    assert [c["strategy"].split(",")[0] for c in first] == ["i4", "i8"], first


@pytest.mark.parametrize("heap", ["-5", "0", "100", str(10 ** 12)])
def test_f9_sim_heap_must_be_a_size_the_port_starts_with(heap):
    p = kvedge("sim", "--heap", heap, timeout=60)  # an accepted -5 restarted the interpreter for ever
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("kvedge sim: error: --heap %s: expected a whole number" % heap), lines[0]


def test_f10_check_positions_within_the_model_and_kv_dtype_a_choice(tiny):
    model, _ = tiny
    for pos in ("0", "-3", "100000"):
        line = refused(["check", "--only", "mha-h4kv4-d16-all-f32", "--model", model, "--positions", pos],
                       "--positions %s" % pos)
        assert "1..64" in line  # the tiny model's seq_len
    refused(["check", "--only", "mha-h4kv4-d16-all-f32", "--model", model, "--kv-dtype", "bogus"], "--kv-dtype",
            "invalid choice")


def test_f11_generate_temperature_heap_and_prompts(tiny):
    model, tok = tiny
    base = ["generate", "--model", model, "--tokenizer", tok, "--steps", "4"]
    for t in ("inf", "nan", "-1"):
        refused(base + ["--temperature", t], "--temperature")
    refused(base + ["--runtime", "unix", "--heap", "-5"], "--heap -5")
    refused(base + ["--prompt", "a\ud800b"], "--prompt", "lone surrogate")
    # undecodable bytes on a command line arrive as surrogate escapes: they are the prompt's bytes
    res = cf.run_inprocess(base + ["--prompt", "\udcff\udcfeok"])
    assert res.exc is None and res.rc == 0, res.err


def test_f12_eval_tokens_bounded_by_the_models_context(tiny):
    model, _ = tiny
    line = refused(["eval", "--model", model, "--tokens", "100000000"], "--tokens 100000000", "seq_len", limit=60)
    assert "2..64" in line


def test_monitor_overlong_line_counts_once():
    m = Monitor()
    good = (telemetry.PREFIX + json.dumps(dict((k, 0) for k in telemetry.KEYS), separators=(",", ":"))
            .replace('"seq":0', '"seq":1') + "\n").encode()
    stream = b"KVSTATS {" + b"x" * (1 << 20) + b"\n" + b"y" * (1 << 20) + b"\n" + good
    for i in range(0, len(stream), 4096):
        m.feed(stream[i:i + 4096])
    assert m.counts["bad_lines"] == 2, m.counts
    assert m.counts["other_lines"] == 0 and [s["seq"] for s in m.samples] == [1]
    m2 = Monitor()
    m2.feed(b"z" * (3 << 20))  # one chunk holding more than a whole line's worth, then the port goes away
    m2.end_of_stream()
    assert m2.counts["bad_lines"] == 1 and m2.counts["other_lines"] == 0
