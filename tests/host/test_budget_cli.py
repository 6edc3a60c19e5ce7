"""`kvedge budget` and `kvedge boards`: figures recomputed independently, --json keys, --plot, and every bad input
ending in one line naming the problem and the file, exit status 2, no traceback."""
import json
import os
import subprocess
import sys

import pytest

from kvedge import budget
from kvedge_host import cli
from kvedge_host.paths import model_file

import _modelfiles as mf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORIES = model_file("stories260K.bin")
RP2040_HEAP = 215040
RP2040_WORKSPACE = 16384


def run_json(capsys, *argv):
    rc = cli.main(["budget"] + list(argv) + ["--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def bad(capsys, argv, *parts):
    rc = cli.main(list(argv))
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kvedge %s: error: " % argv[0]), lines[0]
    assert "Traceback" not in err
    for p in parts:
        assert p in lines[0], (p, lines[0])
    return lines[0]


@pytest.fixture
def stories(tmp_path):
    """The real stories260K.bin when present, else a checkpoint of the same shape written here."""
    if os.path.exists(STORIES):
        return STORIES
    return mf.write_llama2c(str(tmp_path / "stories260K.bin"))


def _stories_expected(kv_dtype):
    # independent recomputation: header dim 64, hidden 172, 5 layers, 8 heads, 4 KV heads, vocab 512, seq 512
    weights = 4 * (512 * 64 + 5 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 64 * 172)) + 4 * (5 * 2 * 64 + 64)
    row = {"f32": 32, "i8": 8 + 2}[kv_dtype]  # i8: 8 code bytes + one f16 scale per row, no padding (align 0)
    kv = 2 * 5 * 4 * 512 * row
    act = 4 * (4 * 64 + 2 * 172 + 512 + 8 * (32 + 2 + 8))  # x, xb, xb2, q, hb, hb2, logits, per-head tile
    return weights, kv, act


@pytest.mark.parametrize("kv_dtype", ["i8", "f32"])
def test_stories260k_on_rp2040_recomputed(capsys, stories, kv_dtype):
    r = run_json(capsys, "--model", stories, "--board", "rp2040", "--kv-dtype", kv_dtype)
    weights, kv, act = _stories_expected(kv_dtype)
    assert weights == 1040128 and act == 5792
    assert kv == {"i8": 204800, "f32": 655360}[kv_dtype]
    total = weights + kv + act + RP2040_WORKSPACE
    assert r["weights_bytes"] == weights
    assert r["kv_cache_bytes"] == kv and r["k_bytes"] == r["v_bytes"] == kv // 2
    assert r["kv_bytes_per_token"] == kv // 512
    assert r["activation_bytes"] == act and r["workspace_bytes"] == RP2040_WORKSPACE
    assert r["total_bytes"] == total and r["heap_bytes"] == RP2040_HEAP
    assert r["headroom_bytes"] == RP2040_HEAP - total
    assert r["fits"] is False and r["max_context_tokens"] == 0  # f32 weights alone exceed the heap
    assert r["kv_scale_bytes"] == (2 * 5 * 4 * 512 * 2 if kv_dtype == "i8" else 0)


def test_longest_context_recomputed(capsys, stories):
    heap = 600000
    r = run_json(capsys, "--model", stories, "--heap", str(heap), "--kv-dtype", "f32", "--weights-dtype", "i8",
                 "--context", "128")
    p = budget.llama_params(64, 172, 5, 8, 4, 512)
    w = budget.weights_bytes(p, "i8")
    room = heap - w - r["activation_bytes"]  # --heap: no workspace unless --workspace
    assert r["workspace_bytes"] == 0
    assert r["max_context_tokens"] == min(512, room // 1280)  # 1280 = 2 x 5 layers x 4 heads x 8 x 4 bytes
    assert r["fits"] is True and r["kv_cache_bytes"] == 128 * 1280


def test_json_keys_and_llama_cpp_sizes(capsys, tmp_path):
    p = mf.write_json(tmp_path, "config.json", mf.TINYLLAMA)
    r = run_json(capsys, "--model", p, "--context", "2048", "--heap", str(1 << 33))
    for k in ("kv_cache_bytes", "kv_bytes_per_token", "weights_bytes", "total_bytes", "max_context_tokens", "fits",
              "k_bytes", "v_bytes", "activation_bytes", "workspace_bytes", "heap_bytes", "headroom_bytes",
              "kv_padding_bytes", "batch", "align"):
        assert k in r, k
    assert r["kv_cache_bytes"] == 46137344 and r["k_bytes"] == 23068672 and r["kv_bytes_per_token"] == 22528
    assert r["align"] == 0 and r["kv_padding_bytes"] == 0
    assert r["max_context_tokens"] == 2048 and r["max_context_capped_by_model"] is True
    r7 = run_json(capsys, "--preset", "llama2-7b", "--context", "512", "--heap", str(1 << 40))
    assert r7["kv_cache_bytes"] == 256 << 20


def test_batch_and_align(capsys, stories):
    one = run_json(capsys, "--model", stories, "--kv-dtype", "f32", "--heap", "10000000")
    two = run_json(capsys, "--model", stories, "--kv-dtype", "f32", "--heap", "10000000", "--batch", "2")
    assert two["kv_cache_bytes"] == 2 * one["kv_cache_bytes"]
    assert two["activation_bytes"] == 2 * one["activation_bytes"]
    assert two["weights_bytes"] == one["weights_bytes"]
    padded = run_json(capsys, "--model", stories, "--kv-dtype", "f32", "--heap", "10000000", "--align", "64")
    # 32-byte f32 rows pad to 64: the cache doubles and the padding is reported
    assert padded["kv_cache_bytes"] == 2 * 655360 and padded["kv_padding_bytes"] == 655360


def test_i4_per_token_and_windows(capsys, tmp_path):
    p = mf.write_json(tmp_path, "g.json", mf.GEMMA2_2B)
    r = run_json(capsys, "--model", p, "--heap", str(1 << 40), "--context", "8192")
    assert r["kv_cache_bytes"] == 654311424
    assert r["layer_windows"][:2] == [4096, 0]
    i4 = run_json(capsys, "--model", p, "--heap", str(1 << 40), "--context", "8192", "--kv-dtype", "i4")
    # one 32-token group per layer and KV head: codes 32*128*2, value scale+zero 32*4, key scale+zero 256*4
    per_group = 26 * 4 * (32 * 128 * 2 + 32 * 4 + 256 * 4)
    assert i4["kv_bytes_per_token"] == per_group // 32


def test_kivi_residual_rows_are_their_own_line(capsys, stories):
    # stories260K: 5 layers x 4 KV heads, K and V: 40 f32 rows of 32 bytes per residual slot; R + 31 slots
    for R in (None, 0, 32, 64):
        args = ["--model", stories, "--heap", "10000000", "--kv-dtype", "i4"] + ([] if R is None else ["--residual",
                                                                                                      str(R)])
        r = run_json(capsys, *args)
        rows = (32 if R is None else R) + 31 if R != 0 else 0
        assert r["kv_residual_bytes"] == 40 * 32 * rows
        assert r["kv_residual"] == (32 if R is None else R)
        # codes 2 x 20 pairs x 512 x 4; value scale+zero 20 x 512 x 4; keys per channel per group or per row
        keys = 20 * 16 * 8 * 4 if R != 0 else 20 * 512 * 4
        assert r["kv_cache_bytes"] == 2 * 20 * 512 * 4 + 20 * 512 * 4 + keys + r["kv_residual_bytes"]
    assert cli.main(["budget", "--model", stories, "--heap", "10000000", "--kv-dtype", "i4", "--residual",
                     "64"]) == 0
    out = capsys.readouterr().out
    assert "f32 residual" in out and "121,600" in out
    assert cli.main(["budget", "--model", stories, "--kv-dtype", "i8", "--residual", "32"]) == 2
    assert "--residual applies to i4" in capsys.readouterr().err
    assert cli.main(["budget", "--model", stories, "--kv-dtype", "i4", "--residual", "40"]) == 2
    assert "multiple of the key group (32)" in capsys.readouterr().err


def test_table_output(capsys, stories):
    assert cli.main(["budget", "--model", stories, "--board", "rp2040", "--kv-dtype", "i8"]) == 0
    out = capsys.readouterr().out
    for s in ("weights", "K cache", "V cache", "204,800", "longest context", "headroom", "GQA"):
        assert s in out, s


def test_plot_writes_png(capsys, stories, tmp_path):
    out = str(tmp_path / "mem.png")
    rc = cli.main(["budget", "--model", stories, "--board", "rp2040", "--plot", out, "--json"])
    cap = capsys.readouterr()
    assert rc == 0 and json.loads(cap.out)["plot"] == out  # stdout stays one JSON document
    assert cap.err == "memory plot written to %s\n" % out
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    os.remove(out)
    # the table says where the file went, on its last line
    assert cli.main(["budget", "--model", stories, "--board", "rp2040", "--plot", out]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "memory plot written to %s" % out
    assert os.path.getsize(out) > 1000


def test_boards_lists_profiles_with_sources(capsys):
    assert cli.main(["boards", "--json"]) == 0
    profs = json.loads(capsys.readouterr().out)
    names = [p["name"] for p in profs]
    assert "rp2040" in names and "esp32-psram" in names
    assert all(p["sources"] for p in profs)
    assert cli.main(["boards"]) == 0
    out = capsys.readouterr().out
    assert "rp2040" in out and "sources:" in out


# ---- bad input: one line, exit 2 ----

def test_bad_files(capsys, tmp_path):
    missing = str(tmp_path / "nope.bin")
    bad(capsys, ["budget", "--model", missing], missing, "cannot read")
    j = tmp_path / "config.json"
    j.write_text("{\"num_hidden_layers\": 2,")
    bad(capsys, ["budget", "--model", str(j)], str(j), "not valid JSON")
    cfg = dict(mf.TINYLLAMA)
    del cfg["hidden_size"]
    p = mf.write_json(tmp_path, "miss.json", cfg)
    bad(capsys, ["budget", "--model", p], p, "missing hidden_size")
    g = mf.write_gguf(str(tmp_path / "m.gguf"))
    data = open(g, "rb").read()
    t = tmp_path / "t.gguf"
    t.write_bytes(data[:len(data) // 3])
    bad(capsys, ["budget", "--model", str(t)], str(t), "truncated or malformed GGUF")
    nc = mf.write_gguf(str(tmp_path / "noctx.gguf"), ctx=None)
    bad(capsys, ["budget", "--model", nc], nc, "give --context")
    z = mf.write_json(tmp_path, "z.json", dict(mf.TINYLLAMA, num_attention_heads=0))
    bad(capsys, ["budget", "--model", z], z, "num_attention_heads is 0, expected a whole number 1..16384")


def test_bad_sizes_board_and_dtypes(capsys, stories):
    m = ["budget", "--model", stories]
    bad(capsys, m + ["--context", "0"], "--context must be positive, got 0")
    bad(capsys, m + ["--context", "-5"], "--context must be positive, got -5")
    bad(capsys, m + ["--heap", "0"], "--heap must be positive, got 0")
    bad(capsys, m + ["--heap", "-1"], "--heap must be positive")
    bad(capsys, m + ["--batch", "0"], "--batch must be positive, got 0")
    bad(capsys, m + ["--workspace", "-1"], "--workspace must be >= 0")
    bad(capsys, m + ["--board", "esp8266"], "unknown board 'esp8266'", "rp2040")
    bad(capsys, m + ["--kv-dtype", "f8"], "unknown KV dtype 'f8'")
    bad(capsys, m + ["--weights-dtype", "q2"], "unknown weights dtype 'q2'")
    bad(capsys, m + ["--align", "48"], "align must be 0, 1 or a power of two, got 48")
    bad(capsys, m + ["--kv-dtype", "q8_0"], "head_dim must be a multiple of 32 for q8_0, got 8")
    bad(capsys, ["budget", "--preset", "gpt5"], "unknown preset 'gpt5'")
    bad(capsys, m + ["--plot", "/nonexistent-dir/x.png"], "/nonexistent-dir/x.png")
    bad(capsys, m + ["--plot", "x.svg"], "x.svg", "PNG")


def test_broken_board_profile_names_the_file(capsys, stories, tmp_path, monkeypatch):
    from kvedge_host import profiles
    (tmp_path / "broken.json").write_text("{\"heap_bytes\": 1000")
    monkeypatch.setattr(profiles, "BOARDS", str(tmp_path))
    bad(capsys, ["budget", "--model", stories, "--board", "broken"], "broken.json", "cannot read board profile")


def test_entry_point_subprocess(tmp_path):
    """The installed `kvedge` command: exit 2 and one stderr line, no traceback."""
    exe = os.path.join(os.path.dirname(sys.executable), "kvedge")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "kvedge_host.cli"]
    missing = str(tmp_path / "none.gguf")
    p = subprocess.run(cmd + ["budget", "--model", missing], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["kvedge budget: error: %s: cannot read: No such file or directory"
                                             % missing]
    ok = subprocess.run(cmd + ["budget", "--preset", "tinyllama-1.1b", "--json", "--heap", "1000000"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and json.loads(ok.stdout)["kv_cache_bytes"] == 46137344


def test_usage_errors_are_one_line_exit_2():
    import subprocess
    import sys
    for args in (["budget", "--preset", "stories260k", "--context", "abc"], ["budget", "--nope"]):
        p = subprocess.run([sys.executable, "-m", "kvedge_host.cli"] + args, capture_output=True, text=True)
        assert p.returncode == 2
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kvedge budget: error:"), p.stderr
        assert "Traceback" not in p.stderr


def test_a_lowbit_cache_larger_than_a_plainer_one_is_warned(capsys):
    # SmolLM2-135M at 64 tokens: i4 with its f32 residual (3,340,800 bytes) is more than f32 (2,949,120)
    assert cli.main(["budget", "--preset", "smollm2-135m", "--context", "64", "--kv-dtype", "i4", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["kv_cache_bytes"] == 3340800 and len(r["warnings"]) == 1
    assert "this i4 cache (3,340,800 bytes, 2,903,040 of them its f32 residual) is larger than a plainer one at 64 " \
        "tokens: f32 2,949,120, f16 1,474,560, i8 760,320 bytes" in r["warnings"][0]
    assert cli.main(["budget", "--preset", "smollm2-135m", "--context", "64", "--kv-dtype", "i4"]) == 0
    assert "warning: this i4 cache" in capsys.readouterr().out
    # at its full context the packing wins: no warning; nor for a plain cache
    for argv in (["--kv-dtype", "i4"], ["--kv-dtype", "i8", "--context", "64"]):
        assert cli.main(["budget", "--preset", "smollm2-135m", "--json"] + argv) == 0
        assert json.loads(capsys.readouterr().out)["warnings"] == [], argv
    # and the plan that was asked for i4 says why it chose a plainer cache (int8 weights: int4 ones run only on the
    # integer pass, whose cache is i8, so an i4 cache beside them is no plan at all)
    assert cli.main(["plan", "--preset", "smollm2-135m", "--context", "64", "--kv-dtype", "i4", "--heap", "400000000",
                     "--weights-dtype", "i8", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith("warning: this i4 cache (3,709,440 bytes") and "f32 2,949,120" in n for n in notes), notes
