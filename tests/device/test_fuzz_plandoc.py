# Plan documents (`kvedge plan --out`) through kvedge.model.plandoc.check and runplan.plan_args: valid plans of
# every kind give the arguments written out by hand below; every field mutated to a wrong type, a list where an
# object belongs, NaN/inf, a huge or negative int, an unknown string, or deleted is refused with PlanError naming
# that field (the issue's own examples among them); random stacks of mutations raise PlanError or nothing else,
# and never change the document. Seeded, a few hundred cases: the same on every runtime.
import gc  # the modules plan_args with a model file imports, compiled first, largest first, while the heap is in
from kvedge.model import intpath  # noqa: F401,E402 (one piece; a 215 KB unix-port heap fragments otherwise)
gc.collect()
from kvedge.model import llama, checkpoint, tiny, tokenizer  # noqa: F401,E402
gc.collect()
from kvedge.errors import PlanError  # noqa: E402
from kvedge import kernels
kernels.get()  # the kernels a plan's "auto" pass is resolved with, compiled now too
from kvedge.model import plandoc
from kvedge.model.runplan import plan_args, run_args
from _fuzzkit import Lcg

NAN = float("nan")
INF = float("inf")
HEAP = 100000  # the heap the valid plans are made for: below any test runtime's
SHAPE = {"layers": 5, "heads": 8, "kv_heads": 4, "head_dim": 8}


def _copy(x):
    if isinstance(x, dict):
        return {k: _copy(x[k]) for k in x}
    if isinstance(x, list):
        return [_copy(v) for v in x]
    return x


def _cache(max_tokens, dtype="i8", window=0, sinks=0, prefix=0):
    c = dict(SHAPE)
    c.update({"max_tokens": max_tokens, "dtype": dtype, "window": window, "sinks": sinks, "align": 0,
              "group": 32, "residual": 0, "prefix": prefix})
    return c


def _plan(kind, cache, policy, tier=None, place="flash"):
    return {"format": "kvedge-plan/1", "model": "stories260K", "board": "rp2040", "strategy": kind, "kind": kind,
            "cache": cache, "kv_bytes": 20000, "batch": 1, "budget_bytes": 30000, "policy": policy, "tier": tier,
            "h2o_score_bytes": 0, "weights": {"bytes": 276192, "dtype": "i8", "place": place, "heap_bytes": 1716},
            "activation_bytes": 5792, "workspace_bytes": 40000, "total_bytes": 90000, "heap_bytes": HEAP,
            "headroom_bytes": HEAP - 90000, "context": 512, "tokens_kept": 64,
            "placement": [{"array": "kv cache", "bytes": 20000, "where": "fast", "why": "every token"}],
            "quality": {"label": "x", "metrics": {"kl": 0.01}}, "runtime": None}


def _tier(block=16, cold="i8", blocks=28):
    return {"kind": "tiered", "block": block, "cold_dtype": cold, "cold_blocks": blocks, "at_cap": "drop",
            "cold_align": 0, "ring_bytes": 9000, "staging_bytes": 700, "tables_bytes": 300, "ram_bytes": 10000,
            "cold_bytes": 50000, "flash_bytes": 51000, "cold_tokens": 448, "cost": None}


def valid_plans():
    """(document, the kv / h2o / stream / tier / kind plan_args must give: written out by hand)."""
    kv = lambda c: {k: c[k] for k in c if k not in SHAPE}  # noqa: E731
    keep = _cache(40)
    win = _cache(48, window=48)
    sinks = _cache(52, window=48, sinks=4)
    h2o = _cache(44)
    ring = _cache(68, window=64, sinks=4)
    p_h2o = _plan("h2o", h2o, {"kind": "h2o", "budget": 44, "recent": 22})
    p_h2o["h2o_score_bytes"] = 352
    t = _plan("tiered", ring, {"kind": "tiered"}, _tier())
    t["forward"] = "int"
    t["kernels"] = "asm"
    t["instructions_per_token"] = 6012345
    t["tokens_per_s"] = 24.9
    return [
        (_plan("keep", keep, {"kind": "ring"}, place="heap"), kv(keep), 0, False, None, "keep"),
        (_plan("window", win, {"kind": "ring"}), kv(win), 0, True, None, "window"),
        (_plan("sinks", sinks, {"kind": "ring"}, place="rom"), kv(sinks), 0, "rom", None, "sinks"),
        (p_h2o, kv(h2o), 44, True, None, "h2o"),
        (t, kv(ring), 0, True, {"block": 16, "cold_dtype": "i8", "cold_blocks": 28, "at_cap": "drop",
                                "cold_align": 0}, "tiered"),
    ]


def test_valid_plans_give_the_arguments_written_out_by_hand():
    for doc, kv, h2o, stream, tier, kind in valid_plans():
        before = repr(doc)
        a = plan_args(doc, heap=HEAP)
        assert repr(doc) == before
        assert a["kv"] == kv and a["h2o"] == h2o and a["stream"] == stream, (kind, a)
        assert a["tier"] == tier and a["kind"] == kind, (kind, a)
        assert a["budget"] == HEAP and a["workspace"] == 40000
        assert a["forward"] == ("int" if kind == "tiered" else "float")  # a plan naming no pass: the float one
        r = run_args(a)
        assert "kind" not in r and r["forward"] == a["forward"]
        assert run_args(dict(a, forward="auto")).get("forward") is None  # main()'s own default then


def _refused(doc, field, heap=HEAP, model=None, tok=None):
    before = repr(doc)
    try:
        plan_args(doc, model, tok, heap)
    except PlanError as e:
        msg = str(e)
        assert msg.startswith(field), (field, msg)
        assert repr(doc) == before
        return msg
    raise AssertionError("accepted a plan with a bad %s" % field)


def _set(doc, path, value):
    d = doc
    for k in path[:-1]:
        d = d[k]
    if value is _DEL:
        del d[path[-1]]
    else:
        d[path[-1]] = value


_DEL = object()


def test_the_issue_examples_are_refused_naming_the_field():
    base = valid_plans()[4][0]  # the tiered one
    for path, value, field in (
            (("format",), "kvedge-plan/99", "format"),
            (("kind",), "spaceship", "kind"),
            (("tier", "cold_blocks"), 10 ** 12, "tier.cold_blocks"),
            (("tier", "block"), -16, "tier.block"),
            (("tier", "cold_dtype"), "q9", "tier.cold_dtype"),
            (("cache",), [1, 2], "cache"),
            (("heap_bytes",), 1e13, "heap_bytes"),
            (("heap_bytes",), 10 ** 13, "heap_bytes"),
            (("heap_bytes",), NAN, "plan.heap_bytes"),
            (("tokens_per_s",), INF, "plan.tokens_per_s"),
            (("tier", "at_cap"), "explode", "tier.at_cap")):
        doc = _copy(base)
        _set(doc, path, value)
        _refused(doc, field)
    _refused([base], "plan")
    _refused("kvedge-plan/1", "plan")


def test_a_plan_for_more_heap_than_this_runtime_has_is_refused():
    doc = valid_plans()[0][0]
    assert "this runtime has 99999" in _refused(doc, "heap_bytes", heap=99999)
    from kvedge import compat
    have = compat.mem_alloc() + compat.mem_free()
    if compat.mem_alloc() >= 0:  # the default heap: the runtime's own (no limit where it cannot tell)
        doc = _copy(doc)
        doc["heap_bytes"] = have + have // 25 + 1  # more than the span the GC's pool implies
        _refused(doc, "heap_bytes", heap=None)
        doc["heap_bytes"] = min(have + have // 25, HEAP)  # a profile's span: the pool and the GC's tables
        plan_args(doc)


# every field with values it must refuse: wrong types, lists/objects, NaN/inf, out of range, unknown strings
_HOSTILE = (
    (("format",), (None, 1, "kvedge-plan/2", ["kvedge-plan/1"], _DEL), "format"),
    (("kind",), (None, 3, "Keep", "", ["keep"], {"k": 1}, _DEL), "kind"),
    (("cache",), (None, 5, "x", [], _DEL), "cache"),
    (("cache", "max_tokens"), (0, -1, 1 << 40, 1.5, "40", None, True, NAN, INF), None),
    (("cache", "dtype"), ("q9", 8, None, ["i8"]), "cache"),
    (("cache", "window"), (-1, 1000, 2.0, "0"), "cache"),
    (("cache", "layers"), (0, -5, 1 << 30, None, _DEL), "cache"),
    (("cache", "align"), (3, -1, 1 << 20), "cache"),
    (("cache", "colour"), ("red",), "cache"),
    (("weights",), (None, [], "flash", _DEL), "weights"),
    (("weights", "place"), ("sd card", None, 0, ["heap"], _DEL), "weights.place"),
    (("weights", "dtype"), (None, 8, "", _DEL), "weights.dtype"),
    (("weights", "bytes"), (-1, 1 << 40, 2.5, "1"), "weights.bytes"),
    (("workspace_bytes",), (-1, 1 << 40, 1.0, None, "9", _DEL, 95000), "workspace_bytes"),
    (("total_bytes",), (-1, 1 << 40, 2e5, None, _DEL, HEAP + 1), "total_bytes"),
    (("heap_bytes",), (-1, 1 << 40, None, False, _DEL), "heap_bytes"),
    (("budget_bytes",), (-1, "x", HEAP + 1), "budget_bytes"),
    (("kv_bytes",), (-1, [], 1 << 31), "kv_bytes"),
    (("batch",), (0, -1, 1 << 20, 1.0), "batch"),
    (("context",), (0, -3, 1 << 40, "512", 20), "context"),
    (("policy",), ([], "ring", 3), "policy"),
    (("policy", "kind"), ("lru", None, 1), "policy.kind"),
    (("forward",), ("fast", 1, ["int"], "auto"), "forward"),
    (("kernels",), ("gpu", 0, ["asm"]), "kernels"),
    (("instructions_per_token",), (-1, "6M", [1]), "instructions_per_token"),
    (("runtime",), ([], "measured", 1), "runtime"),
    (("quality",), ([], 0.5), "quality"),
    (("placement",), ({}, "x"), "placement"),
    (("strategy",), (1, [], {}), "strategy"),
)
_H2O = (
    (("policy",), (None, _DEL, {"kind": "ring"}), "policy"),
    (("policy", "budget"), (0, -1, 45, 1 << 40, 4.5, None, "44", _DEL), "policy.budget"),
    (("policy", "recent"), (-1, 45, None, 2.0), "policy.recent"),
)
_TIER = (
    (("tier",), (None, _DEL, [], "tiered", 7), "tier"),
    (("tier", "block"), (0, -16, 1 << 20, 16.0, "16", None, True, _DEL), "tier.block"),
    (("tier", "block"), (24, 128), "tier"),  # not a divisor of the ring's window
    (("tier", "cold_blocks"), (0, -1, 10 ** 12, 28.0, None, _DEL), "tier.cold_blocks"),
    (("tier", "cold_dtype"), ("q9", "I8", 8, None, ["i8"], _DEL), "tier.cold_dtype"),
    (("tier", "at_cap"), ("keep", 0, ["drop"]), "tier.at_cap"),
    (("tier", "cold_align"), (-1, 1 << 20, 0.5, "0"), "tier.cold_align"),
    (("tier", "kind"), ("paged", 1), "tier.kind"),
    (("tier", "flash_bytes"), (-1, 1 << 40, 1.5), "tier.flash_bytes"),
    (("tier", "cost"), (NAN, [INF], {"a": -INF}), "plan.tier.cost"),
    (("policy",), ({"kind": "ring"}, None), "policy"),
)


def test_every_field_hostile_is_refused_naming_it():
    plans = valid_plans()
    n = 0
    for idx, table in ((0, _HOSTILE), (3, _HOSTILE + _H2O), (4, _HOSTILE + _TIER)):
        base = plans[idx][0]
        for path, values, field in table:
            for v in values:
                doc = _copy(base)
                _set(doc, path, v)
                if isinstance(v, float) and not v - v == 0:
                    want = "plan." + ".".join(path)
                else:
                    want = field or path[0]
                _refused(doc, want)
                n += 1
    assert n > 300, n


def _mutate(rng, doc):
    """One random change somewhere in the document: a value replaced by a hostile one, or a key deleted."""
    paths = []

    def walk(d, p):
        for k in d:
            paths.append(p + (k,))
            if isinstance(d[k], dict) and len(p) < 2:
                walk(d[k], p + (k,))
    walk(doc, ())
    path = rng.pick(paths)
    v = rng.pick((None, _DEL, NAN, INF, -INF, -1, 0, 1, 10 ** 12, -(10 ** 12), 1 << 30, 2.5, True, "", "q9",
                  "spaceship", [], [1], {}, {"kind": "tiered"}, "i8", "i4", "drop", "reset", "h2o", 16, 64))
    _set(doc, path, v)


def test_random_mutations_raise_plan_error_or_nothing():
    rng = Lcg(21)
    plans = valid_plans()
    refused = 0
    for i in range(400):
        doc = _copy(rng.pick(plans)[0])
        for _ in range(1 + rng.below(3)):
            _mutate(rng, doc)
        before = repr(doc)
        try:
            a = plan_args(doc, heap=HEAP)
        except PlanError as e:
            refused += 1
            field = str(e).split(":")[0]
            assert field and " " not in field, str(e)  # the message starts with the field's name
        else:  # accepted: the arguments still describe a cache that validates
            from kvedge.config import CacheConfig
            d = dict(SHAPE)
            d.update(a["kv"])
            CacheConfig.from_dict(d)
            assert a["budget"] <= HEAP and 0 <= a["workspace"] <= a["budget"]
            assert a["kind"] in plandoc.KINDS and (a["tier"] is None) == (a["kind"] != "tiered")
        assert repr(doc) == before
    assert refused > 200, refused


def test_a_plan_for_another_model_file_is_refused():
    from _support import need
    need("fs")
    from _model_support import tmp_path
    f32 = tmp_path("kvedge_plandoc.bin")
    tiny.write_checkpoint(f32, seed=3)  # 2 layers, 4 heads on 2 KV heads, head_dim 4
    i8 = tmp_path("kvedge_plandoc_i8.bin")
    from _model_support import or_skip_short_heap
    gc.collect()
    or_skip_short_heap(checkpoint.convert_to_i8, f32, i8)
    tok = tmp_path("kvedge_plandoc_tok.bin")
    tiny.write_tokenizer(tok)
    doc = _plan("keep", dict(_cache(40), layers=2, heads=4, kv_heads=2, head_dim=4), {"kind": "ring"}, place="heap")
    a = plan_args(doc, i8, tok, HEAP)  # the plan is for this file: taken
    assert a["kv"]["max_tokens"] == 40 and a["workspace"] < doc["total_bytes"]
    assert "the model file holds f32" in _refused(doc, "weights.dtype", model=f32, tok=tok)
    other = _copy(doc)
    other["cache"]["layers"] = 5
    assert "the plan is for 5, the model file has 2" in _refused(other, "cache.layers", model=i8, tok=tok)
    other = _copy(doc)
    other["cache"]["dtype"] = "f32"
    other["forward"] = "int"
    _refused(other, "forward", model=i8, tok=tok)
    # a plan from the board's measured footprint must have counted this run's tokenizer: 2 bytes an offset
    # (V + 1 of them, the file is under 64 KB), 2 a sorted id once a prompt is encoded (V), 512 for the object
    need = 2 * (352 + 1) + 2 * 352 + 512
    other = _copy(doc)
    other["runtime"] = {"source": "measured", "prompt": True, "tokenizer_bytes": 0}
    assert "counted 0 bytes for the tokenizer, this run's keeps %d" % need in _refused(
        other, "runtime.tokenizer_bytes", model=i8, tok=tok)
    other["runtime"]["tokenizer_bytes"] = need - 1
    _refused(other, "runtime.tokenizer_bytes", model=i8, tok=tok)
    other["runtime"]["tokenizer_bytes"] = need
    plan_args(other, i8, tok, HEAP)
    other["runtime"] = {"source": "measured", "prompt": False, "tokenizer_bytes": need - 2 * 352}
    plan_args(other, i8, tok, HEAP)  # no prompt counted: no sorted ids
    for v in (-1, 1.5, "0", [], 1 << 40):
        other["runtime"]["tokenizer_bytes"] = v
        _refused(other, "runtime.tokenizer_bytes")
