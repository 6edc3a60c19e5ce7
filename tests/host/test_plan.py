"""`kvedge plan`: the compress-until-it-fits loop. Feasible plans are recomputed independently, the device cache
built from the written JSON allocates exactly the planned KV bytes, quality tables reorder the ranking, and bad
input ends in one line with exit status 2."""
import json
import os

import pytest

from kvedge import budget
from kvedge.model import sizes as msizes
from kvedge.kvsplit import from_dict  # a plan's cache: CacheConfig's, or SplitConfig's (K and V apart)
from kvedge_host import profiles, cli

import _modelfiles as mf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE_PY = os.path.join(ROOT, "device", "kvedge", "cache.py")


def plan(capsys, *argv, rc=0):
    code = cli.main(["plan"] + list(argv) + ["--json"])
    cap = capsys.readouterr()
    assert code == rc, cap.err + cap.out[-2000:]
    return json.loads(cap.out)


@pytest.fixture
def stories(tmp_path):
    return mf.write_llama2c(str(tmp_path / "stories.bin"))


class _Shape:  # stories260K's header, as kvedge.model.header.ModelConfig holds it
    dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, head_dim, kv_dim = 64, 172, 5, 8, 4, 512, 8, 32
    shared_classifier = True


def recompute_total(doc, weights_dtype="i8", board="rp2350", runtime=None):
    """The deployment total from the device config alone (or a candidate and its plan's "runtime"), with
    kvedge.budget, the runner's formulas (kvedge.model.llama) and the board profile's measured footprint
    (boot, code, stats stream, prompt encoder, loop)."""
    from kvedge.model import pass_int, llama
    cfg = from_dict(doc["cache"])
    p = budget.llama_params(64, 172, 5, 8, 4, 512)
    flash = doc["weights"]["place"] != "heap"
    intpass = doc.get("forward") == "int"  # the integer pass keeps every norm and has buffers of its own
    if not flash:
        w = budget.weights_bytes(p, weights_dtype)
    else:
        w = msizes.weights_stream_bytes(p, 64, 172, weights_dtype, norms=intpass)
    h2o = (doc["policy"] or {}).get("kind") == "h2o"
    scores = budget.h2o_score_bytes(cfg.slots) if h2o else 0
    if (doc["policy"] or {}).get("kind") == "tiered":  # beside the ring: staging block and tables, recomputed
        t = doc["tier"]
        z = budget.tiered_bytes(5, 8, 4, 8, cfg.window, cfg.sinks, t["block"], t["cold_blocks"], cfg.dtype,
                                t["cold_dtype"], cfg.align, t["cold_align"], f32_sinks=cfg.prefix == cfg.sinks)
        scores = z["staging"] + z["tables"]
    act = budget.activation_bytes(64, 172, 8, 512)
    rt = doc.get("runtime") or runtime or {}
    if rt.get("source") != "measured":
        return cfg, w + cfg.nbytes() + scores + act + profiles.load(board)["workspace_bytes"]
    fp = profiles.load(board)["footprint"]
    kind = rt["kernels"]
    key = ("int_" if intpass else "") + kind  # the footprint measured with that pass
    runtime = fp["boot_bytes"] + fp["runtime_" + key] + fp["telemetry_bytes"] + fp.get("loop_" + key, 0)
    runtime += int(0.025 * fp["runtime_" + key])  # the code's layout allowance (account.LAYOUT_FRACTION)
    if rt["prompt"]:  # a run that encodes its prompt loads the encoder (kvedge.model.bpe)
        runtime += fp["encode_bytes"]
    tile = 8 if kind == "plain" else 32
    integer = kind in ("asm", "viper") and cfg.dtype in ("i8", "i4", "i2")
    scratch = pass_int.scratch_bytes(_Shape, flash) if intpass else msizes.float_scratch_bytes(
        _Shape, weights_dtype, flash)
    runner = (scratch + llama.object_bytes(_Shape, cfg, tile, 4, integer)
              + (budget.activation_bytes(64, 172, 8, 512, tile) - act))
    if doc.get("prefill", 1) > 1:  # prompt chunks' buffers, only the integer pass takes them
        from kvedge.model import prefill
        assert intpass and doc["kind"] in ("keep", "prefix", "sinks", "window", "shorter")
        runner += prefill.chunk_bytes(_Shape, doc["prefill"], 4)
    files = fp["file_bytes"] * ((1 if rt["tokenizer_bytes"] else 0) + (1 if flash else 0))
    if (doc["policy"] or {}).get("kind") == "tiered":  # the tier's code, its two segment files and a spare, its loop
        files += fp["tiered_" + key] + 3 * fp["file_bytes"] + 2560
        if doc["tier"]["cold_dtype"] == "i4":  # and a block re-quantized into i4 on its way to flash (measured)
            files += 6144
    if intpass and (cfg.prefix or cfg.dtype in ("i4", "i2")):  # f32 rows: the float kernels viper and asm load
        files += fp.get("floats_" + key, 0)
    return cfg, (w + cfg.nbytes() + scores + act + runtime + runner + rt["tokenizer_bytes"] + files
                 + (fp["evict_bytes"] + 256 if h2o else 0))


def test_not_fitting_case_gives_feasible_plans_that_recompute(capsys, stories, tmp_path):
    out = str(tmp_path / "device.json")
    r = plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8", "--out", out)
    heap = profiles.load("rp2350")["heap_bytes"]
    assert r["requested"]["fits"] is False and r["requested"]["total_bytes"] > heap
    assert len(r["configurations"]) >= 3
    kinds = set(c["kind"] for c in r["configurations"])
    assert {"h2o", "sinks", "window", "shorter"} <= kinds
    for c in r["configurations"]:
        cfg, total = recompute_total(c, runtime=r["runtime"])
        assert cfg.nbytes() == c["kv_bytes"]
        assert total == c["total_bytes"] <= heap, c["strategy"]
    doc = json.load(open(out))
    assert doc["format"] == "kvedge-plan/1" and doc["strategy"] == r["configurations"][0]["strategy"]
    cfg, total = recompute_total(doc)
    assert total <= heap and cfg.nbytes() == doc["kv_bytes"] <= doc["budget_bytes"]


def test_trace_shows_the_loop(capsys, stories):
    r = plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8")
    tried = [t["try"] for t in r["trace"]]
    assert tried[0].startswith("requested: f32, keep all 512")
    for s in ("i8, keep all", "i8 + f32 prefix", "f16 H2O", "f16 sinks + window", "f16 window",
              "i8 hot ring + i4 blocks on flash", "f32, shorter context"):
        assert any(t.startswith(s) for t in tried), s


def _device_cache_bytes(cfg, budget_bytes):
    """Bytes the device cache allocates for cfg: its arena when kvedge.cache exists, else CacheConfig.nbytes()."""
    if os.path.exists(CACHE_PY):
        from kvedge.cache import KVCache
        c = KVCache(cfg, budget=budget_bytes)
        return len(c.arena)
    return cfg.nbytes()


def test_device_cache_from_json_allocates_exactly_the_planned_bytes(capsys, stories, tmp_path):
    for pick in (1, 2, 3):
        out = str(tmp_path / ("d%d.json" % pick))
        plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8", "--out", out,
             "--pick", str(pick))
        doc = json.load(open(out))
        cfg = from_dict(doc["cache"])  # the "cache" object as is
        assert _device_cache_bytes(cfg, doc["budget_bytes"]) == doc["kv_bytes"]


def test_every_feasible_config_builds_a_device_cache(capsys, stories):
    r = plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8")
    for c in r["configurations"]:
        cfg = from_dict(c["cache"])
        assert _device_cache_bytes(cfg, c["budget_bytes"]) == c["kv_bytes"], c["strategy"]


def test_h2o_policy_from_the_plan_is_accepted_by_the_device_and_sized_right(capsys, stories):
    evict = pytest.importorskip("kvedge.evict")
    from kvedge.cache import KVCache
    r = plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8")
    h2o = [c for c in r["configurations"] if c["kind"] == "h2o"]
    assert h2o
    for c in h2o:
        cache = KVCache(from_dict(c["cache"]), budget=c["budget_bytes"])
        pol = c["policy"]
        h = evict.H2O(cache, budget=pol["budget"], recent=pol["recent"])
        arrays = len(h.scores) * h.scores.itemsize + len(h.acc) * h.acc.itemsize
        assert arrays == c["h2o_score_bytes"] == budget.h2o_score_bytes(cache.cfg.slots)


def test_fitting_request_ranks_full_f32_first(capsys, stories):
    r = plan(capsys, "--model", stories, "--heap", str(4 << 20), "--weights-dtype", "i8")
    assert r["requested"]["fits"] is True
    top = r["configurations"][0]
    assert top["kind"] == "keep" and top["cache"]["dtype"] == "f32" and top["cache"]["max_tokens"] == 512


def test_unpadded_variants_offered_when_padding_costs(capsys, stories):
    r = plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8")
    aligns = set(c["cache"]["align"] for c in r["configurations"])
    assert aligns == {0, 64}
    r0 = plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8", "--align", "0")
    assert set(c["cache"]["align"] for c in r0["configurations"]) == {0}


def test_quality_table_reorders(capsys, stories, tmp_path):
    # weights in RAM and the flat workspace allowance (figures that do not move with the measured footprint):
    # nothing keeps all 512 tokens, so eviction strategies compete
    # the heuristic order alone (stories260K's shipped table ranks by default, and speed by the default objective)
    base = plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8", "--weights-in", "heap",
                "--workspace", "16384", "--no-quality", "--objective", "quality")
    assert base["configurations"][0]["kind"] == "h2o"  # heuristic: H2O before sinks + window
    q = tmp_path / "quality.json"
    q.write_text(json.dumps({"rows": [
        {"strategy": "f32", "kl": 0.0, "ppl": 10.0},
        {"strategy": "i8", "kl": 0.002, "ppl": 10.05},
        {"strategy": "sinks+window", "dtype": "i8", "kl": 0.01},
        {"strategy": "h2o i8", "kl": 0.2},
        {"strategy": "window f16", "mean_kl": 0.5},
        {"strategy": "tiered: i8 ring 64 + cold i4", "kl": 0.001, "config": {"dtype": "i8", "window": 60, "sinks": 4},
         "tier": {"kind": "tiered", "cold_dtype": "i4", "block": 16}},
    ]}))
    r = plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8", "--quality", str(q),
             "--weights-in", "heap", "--workspace", "16384", "--objective", "quality")  # the quality order alone
    # the measured tiered row (every token kept, the older ones i4 on flash) is the cheapest: it comes first
    assert r["configurations"][0]["kind"] == "tiered"
    tiered = {}  # per ring dtype and cold dtype, the candidate with the largest ring
    for c in r["configurations"]:
        key = (c["cache"]["dtype"], (c["tier"] or {}).get("cold_dtype"))
        if c["kind"] == "tiered" and (key not in tiered or c["cache"]["window"] > tiered[key]["cache"]["window"]):
            tiered[key] = c
    for c in r["configurations"]:  # a ring smaller than the measured one (64) has more cold tokens: uncertain
        if c["kind"] == "tiered" and c["cache"]["window"] + c["cache"]["sinks"] < 64:
            assert c["quality"]["uncertain"], c["strategy"]
    q = tiered["i8", "i4"]["quality"]
    assert q["metrics"]["kl"] == 0.001 and q["tokens"] == 64 and not q.get("uncertain")
    assert tiered["f32", "i4"]["quality"]["estimated"]  # the i8 row moved by f32 - i8: 0.001 - 0.002, floored at 0
    assert tiered["f32", "i4"]["quality"]["metrics"]["kl"] == 0.0
    q = tiered["i8", "i8"]["quality"]  # no i8-store row: the i4 store's cost bounds it, marked uncertain
    assert q["metrics"]["kl"] == 0.001 and q["uncertain"]
    order = r["configurations"]
    assert order.index(tiered["i8", "i4"]) < order.index(tiered["i8", "i8"])
    if order[0]["tier"]["cost"]["path"].startswith("float"):  # the plan points at the integer path's rank
        assert any("takes the integer path" in n and "--pick" in n for n in r["notes"]), r["notes"]
    rest = [c for c in r["configurations"] if c["kind"] != "tiered"]
    assert rest[0]["kind"] == "sinks"
    sinks = dict((c["cache"]["dtype"], c) for c in rest if c["kind"] == "sinks" and c["cache"]["align"] == 0)
    assert sinks["i8"]["quality"]["metrics"]["kl"] == 0.01  # measured as such
    # f32 sinks: the i8 row moved by the full-cache difference f32 - i8 = 0 - 0.002
    assert abs(sinks["f32"]["quality"]["metrics"]["kl"] - 0.008) < 1e-12 and sinks["f32"]["quality"]["estimated"]
    assert sinks["i4"]["quality"]["uncertain"]  # no measured i4 row: same cost, ranked after the others
    assert rest.index(sinks["i4"]) > rest.index(sinks["i8"])
    measured = [c for c in r["configurations"] if c["quality"]]
    costs = [float("%.2g" % c["quality"]["metrics"].get("kl")) for c in measured]  # ranked at 2 digits
    assert costs == sorted(costs)
    assert r["configurations"].index(measured[-1]) == len(measured) - 1  # measured rows before unmeasured


def test_weights_move_to_flash_when_they_cannot_fit(capsys, stories):
    # f32 weights (1 MB) never fit the rp2040's 210 KB heap: the loop retries with weights read from flash
    r = plan(capsys, "--model", stories, "--board", "rp2040")
    assert r["configurations"]
    assert any("weights on flash" in t["try"] for t in r["trace"])
    top = r["configurations"][0]
    assert top["weights"]["place"] == "flash"
    # what the runner keeps of weights left on flash: one f32 norm vector (each norm is read from the file when
    # applied) and 8 rows of w2 (172 inputs)
    assert top["weights"]["heap_bytes"] == 4 * 64 + 8 * 172 * 4 == 5760
    where = dict((p["array"], p["where"]) for p in top["placement"])
    assert where["weights"].startswith("flash")
    assert top["total_bytes"] <= 215040


def test_placement_fast_and_slow_memory_on_psram_board(capsys, stories):
    r = plan(capsys, "--model", stories, "--board", "esp32-psram")
    top = r["configurations"][0]
    where = dict((p["array"], p["where"]) for p in top["placement"])
    assert where["activations"].startswith("fast")
    assert where["weights"].startswith("slow: PSRAM")  # 1 MB of f32 weights exceed 100 KB of internal SRAM


def test_native_model_window_is_the_device_ring(capsys, tmp_path):
    cfg = dict(mf.MISTRAL_7B_V01, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               hidden_size=64, intermediate_size=128, vocab_size=256, sliding_window=64,
               max_position_embeddings=1024, torch_dtype="float32")
    p = mf.write_json(tmp_path, "mini.json", cfg)
    r = plan(capsys, "--model", p, "--heap", str(1 << 24))
    top = r["configurations"][0]
    assert top["cache"]["window"] == 64 and top["cache"]["max_tokens"] == 1024
    assert top["kv_bytes"] == budget.kv_bytes(2, 2, 16, 64, "f32", 64)


def test_nothing_fits_exits_1(capsys, stories):
    code = cli.main(["plan", "--model", stories, "--heap", "1000", "--weights-in", "heap"])
    out = capsys.readouterr().out
    assert code == 1 and "nothing fits" in out
    # the numbers up front: the least any configuration needs, part by part, against the heap
    assert "the plan may use 1,000 (the heap)" in out and "weights (in RAM)" in out


def _bad(capsys, argv, *parts):
    rc = cli.main(["plan"] + argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("kvedge plan: error: "), err
    for p in parts:
        assert p in lines[0], (p, lines[0])


def test_bad_input(capsys, stories, tmp_path):
    m = ["--model", stories, "--board", "rp2350", "--weights-dtype", "i8"]
    _bad(capsys, m + ["--quality", str(tmp_path / "none.json")], "none.json", "cannot read")
    q = tmp_path / "q.json"
    q.write_text("[{\"strategy\": \"i8\"")
    _bad(capsys, m + ["--quality", str(q)], str(q), "not valid JSON")
    q.write_text("[{\"strategy\": \"i8\", \"note\": 1}]")
    _bad(capsys, m + ["--quality", str(q)], str(q), "no row has kl, ppl or top1")
    q.write_text("[{\"kl\": 0.1}]")
    _bad(capsys, m + ["--quality", str(q)], str(q), "no strategy name")
    _bad(capsys, m + ["--kv-dtype", "q8_0"], "unknown KV dtype 'q8_0' for a device cache")
    _bad(capsys, m + ["--pick", "999"], "--pick 999: only")
    _bad(capsys, m + ["--pick", "0"], "--pick must be positive")
    _bad(capsys, m + ["--out", str(tmp_path / "no" / "x.json")], "folder does not exist")
    _bad(capsys, m + ["--weights-in", "sram"], "--weights-in must be heap, flash, rom or auto")
    _bad(capsys, m + ["--context", "0"], "--context must be positive")
    _bad(capsys, ["--model", stories, "--board", "nope"], "unknown board 'nope'")
    _bad(capsys, ["--model", str(tmp_path / "x.gguf")], "x.gguf", "cannot read")


def test_table_output(capsys, stories, tmp_path):
    out = str(tmp_path / "d.json")
    assert cli.main(["plan", "--model", stories, "--board", "rp2350", "--weights-dtype", "i8", "--out", out]) == 0
    text = capsys.readouterr().out
    for s in ("over the heap", "plan #1, ", "  KV cache ", "device config written"):
        assert s in text, s
    assert cli.main(["plan", "--model", stories, "--board", "rp2350", "--weights-dtype", "i8", "--verbose"]) == 0
    text = capsys.readouterr().out
    for s in ("over the heap", "feasible configurations", "chosen #1", "kv cache"):
        assert s in text, s


def test_quality_table_in_kvedge_eval_format(capsys, stories, tmp_path):
    """The shape `kvedge eval --json` writes ({"model", "quality": quality.evaluate(), "long"}): rows with name,
    ppl, kl, top1 and the cache config; a row without figures (H2O before its policy exists) is skipped."""
    def row(name, kl, **cfg):
        return {"name": name, "ppl": 5.0 + kl, "kl": kl, "top1": 1.0 - kl, "peak_bytes": 1, "arena_bytes": 1,
                "config": dict({"dtype": "f32", "window": 0, "sinks": 0, "prefix": 0, "residual": 0}, **cfg)}
    q = tmp_path / "eval.json"
    q.write_text(json.dumps({"model": "stories.bin", "long": {"rows": []},
                             "quality": {"tokens": 512, "seed": 42, "rows": [
        row("f32", 0.0), row("f16", 0.0001, dtype="f16"), row("i8", 0.003, dtype="i8"),
        row("i8 + f32 prefix 26", 0.002, dtype="i8", prefix=26), row("i4 KIVI (g32)", 0.05, dtype="i4", residual=32),
        row("i4 per-token keys", 0.9, dtype="i4", residual=0), row("window 128", 0.4, window=128),
        row("sinks 4 + window 124", 0.1, window=124, sinks=4),
        {"name": "H2O 128 slots", "missing": "needs kvedge's H2O policy (issue 5)"},
        dict(row("tiered: sinks 4 + f32 ring 128 + cold i4 (b16)", 0.02, window=128, sinks=4, prefix=4),
             tier={"kind": "tiered", "cold_dtype": "i4", "block": 16, "cold_blocks": 24})]}}))
    r = plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8", "--quality", str(q),
             "--weights-in", "heap", "--workspace", "16384")
    by_kind = {}
    for c in r["configurations"]:
        by_kind.setdefault(c["kind"], c)
    f32_sinks = [c for c in r["configurations"] if c["kind"] == "sinks" and c["cache"]["dtype"] == "f32"][0]
    assert f32_sinks["quality"]["label"] == "sinks 4 + window 124" and f32_sinks["quality"]["tokens"] == 128
    i8_sinks = [c for c in r["configurations"] if c["kind"] == "sinks" and c["cache"]["dtype"] == "i8"][0]
    assert i8_sinks["quality"]["estimated"]  # f32-measured, moved by the i8 - f32 full-cache difference
    assert abs(i8_sinks["quality"]["metrics"]["kl"] - 0.103) < 1e-12
    assert by_kind["window"]["quality"]["metrics"]["kl"] in (0.4, 0.403)  # f32 as measured, or i8 = 0.4 + 0.003
    assert by_kind["h2o"]["quality"] is None  # not measured: ranked after every measured row
    tiered = [c for c in r["configurations"] if c["kind"] == "tiered"]
    assert {c["cache"]["dtype"] for c in tiered} == {"f32", "f16", "i8"}
    for c in tiered:  # the f32-ring i4-store row, moved to f16/i8 rings by the full-cache KL difference
        want = 0.02 + {"f32": 0.0, "f16": 0.0001, "i8": 0.003}[c["cache"]["dtype"]]
        assert abs(c["quality"]["metrics"]["kl"] - want) < 1e-12 and c["quality"]["tokens"] == 132
        ring = c["cache"]["window"] + c["cache"]["sinks"]  # an i4 row bounds i8; a smaller ring is not measured
        assert bool(c["quality"].get("uncertain")) == (c["tier"]["cold_dtype"] == "i8" or ring < 132), c["strategy"]
    order = [c["kind"] for c in r["configurations"]]
    assert order.index("tiered") < order.index("sinks") < order.index("window") < order.index("h2o")


def test_batch_counts_every_sequence_and_budget_is_per_cache(capsys, stories):
    heap = 1 << 20
    r = plan(capsys, "--model", stories, "--heap", str(heap), "--weights-dtype", "i8", "--batch", "3",
             "--weights-in", "heap")
    p = budget.llama_params(64, 172, 5, 8, 4, 512)
    w = budget.weights_bytes(p, "i8")
    act = budget.activation_bytes(64, 172, 8, 512, batch=3)
    for c in r["configurations"]:
        cfg = from_dict(c["cache"])
        scores = budget.h2o_score_bytes(cfg.slots) if c["kind"] == "h2o" else 0
        own = cfg.nbytes()  # what KVCache(cfg, budget=...) or TieredCache(..., budget=...) allocates
        if c["kind"] == "tiered":  # the ring is cfg; staging block and tables beside it, per sequence
            scores = c["tier"]["staging_bytes"] + c["tier"]["tables_bytes"]
            own += scores
        assert c["total_bytes"] == w + 3 * (cfg.nbytes() + scores) + act <= heap
        assert own <= c["budget_bytes"] and 3 * c["budget_bytes"] <= heap - w - act


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for name in ("budget", "plan", "boards"):
        assert name in out


def test_tiered_cache_offered_by_default_and_built_from_the_plan(capsys, stories, tmp_path):
    from kvedge.tier.cache import TieredCache
    out = str(tmp_path / "plan.json")
    # the float pass's runtime (--forward float): the integer pass's larger code leaves a tier no room on rp2040
    r = plan(capsys, "--model", stories, "--board", "rp2040", "--weights-dtype", "i8", "--forward", "float")
    tiers = [c for c in r["configurations"] if c["kind"] == "tiered"]
    assert tiers and not any("--flash-tier" in n for n in r["notes"])
    assert {(c["cache"]["dtype"], c["tier"]["cold_dtype"]) for c in tiers} >= {("i8", "i4"), ("i8", "i8"), ("f32", "i4")}
    for c in tiers:
        t, cfg = c["tier"], from_dict(c["cache"])
        z = budget.tiered_bytes(5, 8, 4, 8, cfg.window, cfg.sinks, t["block"], t["cold_blocks"], cfg.dtype,
                                t["cold_dtype"], cfg.align, t["cold_align"], f32_sinks=cfg.prefix == cfg.sinks)
        assert cfg.sinks == 4 and cfg.prefix == 0  # the sinks in the ring's dtype: no slow f32 rows to convert
        assert (t["ram_bytes"], t["flash_bytes"], c["kv_bytes"]) == (z["ram"], z["flash"], cfg.nbytes())
        # every token of the context is held even right after a block left the ring (W - B + 1 in the ring)
        assert c["tokens_kept"] == 512 <= cfg.sinks + t["cold_tokens"] + cfg.window - t["block"] + 1
        assert c["total_bytes"] <= c["heap_bytes"] and t["ram_bytes"] <= c["budget_bytes"]
        assert any(p["array"] == "cold KV store" and p["where"].startswith("flash") for p in c["placement"])
    from kvedge_host.plan.tiered_cost import MEASURED
    for c in tiers:  # the measured cost per token, from tools/bench_tiered.py on the emulated board
        t, k = c["tier"], c["tier"]["cost"]
        # an i8 ring on the float pass: the integer attention's tile loop (the pass loads no fused drivers)
        assert c["forward"] == "float"
        path = "int-tiles" if c["cache"]["dtype"] == "i8" else "float"
        row = [m for m in MEASURED["rows"] if m["path"] == path and m["cold"] == t["cold_dtype"]][0]
        assert k["instructions_per_cold_token"] == row["per_cold_token"] and "scaled" not in k
        assert k["cold_instructions_per_token"] == row["per_cold_token"] * t["cold_tokens"]
        assert MEASURED["command"] in k["measured"]
    pick = r["configurations"].index(tiers[0]) + 1
    plan(capsys, "--model", stories, "--board", "rp2040", "--weights-dtype", "i8", "--forward", "float", "--out", out,
         "--pick", str(pick))
    doc = json.load(open(out))
    assert doc["kind"] == "tiered"
    tc = TieredCache.from_plan(doc, str(tmp_path / "cold"), budget=doc["budget_bytes"])
    try:  # the device builds exactly what was planned
        assert tc.ram_bytes() == doc["tier"]["ram_bytes"] and len(tc.ring.arena) == doc["kv_bytes"]
        assert tc.size["flash"] == doc["tier"]["flash_bytes"]
    finally:
        tc.close()
    off = plan(capsys, "--model", stories, "--board", "rp2040", "--weights-dtype", "i8", "--forward", "float",
               "--no-tiered")
    assert "tiered" not in set(c["kind"] for c in off["configurations"])
    old = plan(capsys, "--model", stories, "--board", "rp2040", "--weights-dtype", "i8", "--forward", "float",
               "--flash-tier")
    assert any("--flash-tier is no longer needed" in n for n in old["notes"])
    assert [c["strategy"] for c in old["configurations"]] == [c["strategy"] for c in r["configurations"]]
    unix = plan(capsys, "--model", stories, "--board", "unix", "--weights-dtype", "i8")  # no flash: no tier
    assert "tiered" not in set(c["kind"] for c in unix["configurations"])


def test_tiered_cost_scales_to_other_shapes():
    from kvedge_host import models
    from kvedge_host.plan import search
    fake = {"shape": {"layers": 2, "heads": 4, "head_dim": 8}, "unit": "instructions", "machine": "m", "kernels": "k",
            "command": "c", "rows": [{"path": "int", "cold": "i4", "per_cold_token": 1000, "demote_per_token": 50},
                                     {"path": "float", "cold": "i4", "per_cold_token": 9000, "demote_per_token": 70}]}
    spec = models.preset("stories15m")  # 6 layers, 6 heads, head_dim 48: 6 x 6 x 48 / (2 x 4 x 8) = 27x the work
    k = search.tier_cost(spec, "i8", "i4", 100, fake)
    f = spec.layers * spec.heads * spec.head_dim / 64.0
    assert k["instructions_per_cold_token"] == int(1000 * f) and k["cold_instructions_per_token"] == int(1000 * f * 100)
    assert k["demote_instructions_per_token"] == int(50 * f) and "scaled" in k and k["path"].startswith("integer")
    assert search.tier_cost(spec, "f32", "i4", 100, fake)["instructions_per_cold_token"] == int(9000 * f)
    assert search.tier_cost(spec, "i8", "i8", 100, fake) is None  # not measured: no figure invented


def test_tiered_cost_follows_the_plans_pass():
    """An i8 ring is attended by the integer attention on both passes: the integer pass with its fused kernels
    (row "int"), the float pass with a tile loop (row "int-tiles"): each plan is priced by the row of its pass."""
    from kvedge_host import models
    from kvedge_host.plan import search
    fake = {"shape": {"layers": 5, "heads": 8, "head_dim": 8}, "unit": "instructions", "machine": "m", "kernels": "k",
            "command": "c", "rows": [{"path": "int", "cold": "i8", "per_cold_token": 1000, "demote_per_token": 50},
                                     {"path": "int-tiles", "cold": "i8", "per_cold_token": 4000,
                                      "demote_per_token": 60}]}
    spec = models.preset("stories260k")
    fused = search.tier_cost(spec, "i8", "i8", 10, fake, forward="int")
    tiles = search.tier_cost(spec, "i8", "i8", 10, fake, forward="float")
    assert (fused["instructions_per_cold_token"], fused["demote_instructions_per_token"]) == (1000, 50)
    assert (tiles["instructions_per_cold_token"], tiles["demote_instructions_per_token"]) == (4000, 60)
    assert "fused" in fused["path"] and "tile loop" in tiles["path"]


# ---- plans that count the runtime the board measured (boards/*.json "footprint", kvedge footprint) ----

def test_measured_runtime_is_counted_against_the_usable_heap_less_a_margin(capsys, stories, tmp_path):
    prof = profiles.load("rp2040")
    fp = prof["footprint"]
    out = str(tmp_path / "device.json")
    r = plan(capsys, "--model", stories, "--board", "rp2040", "--weights-dtype", "i8", "--kv-dtype", "i8",
             "--align", "0", "--out", out)
    rt = r["runtime"]
    assert rt["source"] == "measured" and rt["kernels"] in ("asm", "viper", "native", "plain")
    assert rt["usable_heap"] == fp["heap_usable"] < prof["heap_bytes"]  # the GC's tables are not heap
    # the reserve is 3 % of the usable heap, at least 5 KB: the code's layout allowance (2.5 % of the code) is
    # counted in the total, the rest kept free
    layout = int(0.025 * fp["runtime_int_" + rt["kernels"]])
    assert rt["layout_bytes"] == layout and rt["forward"] == "int"
    assert rt["margin_bytes"] == max(5120, int(0.03 * fp["heap_usable"])) - layout
    assert rt["command"].startswith("kvedge footprint --board rp2040") and rt["date"] and rt["firmware"]
    limit = fp["heap_usable"] - rt["margin_bytes"]
    for c in r["configurations"]:
        cfg, total = recompute_total(c, board="rp2040", runtime=rt)
        assert total == c["total_bytes"] <= limit, c["strategy"]
        assert c["kv_bytes"] <= fp["largest_bytes"] - rt["margin_bytes"] - layout  # it fits the largest block
    doc = json.load(open(out))
    assert doc["runtime"] == rt and doc["total_bytes"] == r["configurations"][0]["total_bytes"]
    # the fastest kernels and pass with which something fits (the integer pass, asm: the RP2040 is Thumb); the
    # others are listed with what they would keep
    others = {(o["kernels"], o["forward"]): o for o in r["other_kernels"]}
    assert set(others) | {(rt["kernels"], rt["forward"])} == {("asm", "int"), ("viper", "int"), ("asm", "float"),
                                                             ("viper", "float"), ("native", "float"),
                                                             ("plain", "float")}
    assert (rt["kernels"], rt["forward"]) == ("asm", "int") and rt["code_bytes"] == fp["runtime_int_asm"]
    assert {c["forward"] for c in r["configurations"]} == {"int"} and doc["forward"] == "int"
    assert others[("plain", "float")]["tokens_kept"] >= r["configurations"][0]["tokens_kept"]
    # the float pass on request: its own runtime's figures
    fl = plan(capsys, "--model", stories, "--board", "rp2040", "--weights-dtype", "i8", "--kv-dtype", "i8",
              "--align", "0", "--forward", "float")
    assert (fl["runtime"]["forward"], fl["runtime"]["code_bytes"]) == ("float", fp["runtime_asm"])
    assert {c["forward"] for c in fl["configurations"]} == {"float"}
    for c in fl["configurations"]:
        assert recompute_total(c, board="rp2040", runtime=fl["runtime"])[1] == c["total_bytes"], c["strategy"]


def test_kernels_margin_and_a_flat_workspace_on_request(capsys, stories):
    base = ["--model", stories, "--board", "rp2040", "--weights-dtype", "i8", "--kv-dtype", "i8", "--align", "0"]
    plain = plan(capsys, *base, "--kernels", "plain", "--margin", "8000")
    assert plain["runtime"]["kernels"] == "plain" and plain["runtime"]["margin_bytes"] == 8000
    assert plain["runtime"]["code_bytes"] == profiles.load("rp2040")["footprint"]["runtime_plain"]
    top = plain["configurations"][0]
    assert top["total_bytes"] <= plain["runtime"]["usable_heap"] - 8000
    flat = plan(capsys, *base, "--workspace", "16384")
    assert flat["runtime"] == {"source": "allowance", "workspace_bytes": 16384}
    _bad(capsys, base + ["--workspace", "100", "--kernels", "plain"], "--kernels, --margin and --forward int need a measured")
    _bad(capsys, base + ["--kernels", "sse"], "--kernels must be auto, asm, viper, native, plain")
    _bad(capsys, base + ["--forward", "ulab"], "--forward must be auto, int, float")
    _bad(capsys, ["--model", stories, "--board", "rp2040-circuitpython", "--forward", "int"],
         "--forward int: rp2040-circuitpython has no measured integer-pass footprint")


def test_weights_on_flash_win_when_they_leave_the_cache_more_tokens(capsys, stories):
    # rp2350 with int8 weights: in RAM they take 276 KB, streamed 4 KB; the plan ranks both and streams
    # (without the tiered cache, which keeps every token either way)
    r = plan(capsys, "--model", stories, "--board", "rp2350", "--weights-dtype", "i8", "--kv-dtype", "i8",
             "--no-tiered")
    top = r["configurations"][0]
    assert top["weights"]["place"] == "flash"
    in_ram = [c for c in r["configurations"] if c["weights"]["place"] == "heap"]
    assert in_ram and max(c["tokens_kept"] for c in in_ram) < top["tokens_kept"]
    # on a heap where both keep every token, the faster RAM weights come first
    big = plan(capsys, "--model", stories, "--board", "rp2350", "--heap", str(2 << 20), "--weights-dtype", "i8",
               "--kv-dtype", "i8")
    first = big["configurations"][0]
    assert first["tokens_kept"] == 512 and first["weights"]["place"] == "heap"
    assert big["board"] == "rp2350 with a 2,097,152-byte heap"
    assert big["runtime"]["usable_heap"] == (2 << 20) * profiles.load("rp2350")["footprint"]["heap_usable"] \
        // profiles.load("rp2350")["footprint"]["heap_image"]


def test_nothing_fits_says_so_up_front_with_the_runtimes_numbers(capsys, stories):
    code = cli.main(["plan", "--model", stories, "--board", "rp2040", "--heap", "60000", "--weights-dtype", "i8"])
    out = capsys.readouterr().out
    assert code == 1
    lines = out.splitlines()
    first = [i for i, ln in enumerate(lines) if ln.startswith("nothing fits")][0]
    assert first < [i for i, ln in enumerate(lines) if ln.startswith("requested")][0]  # before the loop
    fp = profiles.load("rp2040")["footprint"]
    assert "runtime code (plain kernels, float pass)" in out and "{:,}".format(fp["runtime_plain"]) in out
