# Plan documents (`kvedge plan --out`) through kvedge.model.plandoc.check and runplan.plan_args: valid plans of
# every kind give the arguments written out by hand below; every field mutated to a wrong type, a list where an
# object belongs, NaN/inf, a huge or negative int, an unknown string, or deleted is refused with PlanError naming
# that field (the issue's own examples among them); random stacks of mutations raise PlanError or nothing else,
# and never change the document. Seeded, a few hundred cases: the same on every runtime.
# (against a model file: test_plandoc_model.py)
from kvedge.errors import PlanError
from kvedge import kernels
kernels.get()  # the kernels a plan's "auto" pass is resolved with, compiled now too
from kvedge.model import plandoc
from kvedge.model.runplan import plan_args, run_args
from _fuzzkit import Lcg
from _plankit import HEAP, SHAPE, cache as _cache, copy as _copy, plan as _plan, pool_plan, refused as _refused, \
    tier as _tier

NAN = float("nan")
INF = float("inf")


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
        (pool_plan(), kv(_cache(48)), 0, True, None, "keep"),
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


def test_a_plans_prompt_chunk_goes_to_the_run():
    doc = _copy(valid_plans()[0][0])  # kind keep
    assert "prefill" not in plan_args(doc, heap=HEAP)  # a plan without one: main()'s default, a token at a time
    doc["forward"] = "int"
    doc["prefill"] = 8
    a = plan_args(doc, heap=HEAP)
    assert a["prefill"] == 8 and run_args(a)["prefill"] == 8
    h2o = _copy(valid_plans()[3][0])
    h2o["forward"] = "int"
    h2o["prefill"] = 8  # a policy places each token from the ones before it: no chunks
    assert "kind" in _refused(h2o, "prefill")
    tiered = _copy(valid_plans()[4][0])
    tiered["prefill"] = 2
    _refused(tiered, "prefill")


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
    (("prefill",), (0, -1, 257, 1 << 40, 8.0, "8", True, [8], 4), "prefill"),  # 4: the float pass takes none
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


_POOL = (
    (("pool",), ([], "pool", 3, {}), "pool"),
    (("kind",), ("window", "h2o", "tiered"), None),  # h2o and tiered: their policy first; a window: the pool
    (("pool", "sessions"), (0, -1, 1 << 20, 2.0, "2", None, True, _DEL), "pool.sessions"),
    (("pool", "sessions"), (1, 3), "pool.blocks"),  # 2 + 1 x 2 and 2 + 3 x 2 blocks, not 6
    (("pool", "block"), (0, -8, 1 << 20, 8.0, None, _DEL), "pool.block"),
    (("pool", "block"), (5, 64), "pool.tokens"),  # 32 tokens are not whole blocks of 5 or 64
    (("pool", "block"), (16, 4), "pool.blocks"),
    (("pool", "tokens"), (0, 31, 40, 64, 32.0, None, _DEL), "pool.tokens"),  # 40, 64: past the context (32)
    (("pool", "shared_prompt"), (-1, 32, 100, 16.0, "16", None, _DEL), "pool.shared_prompt"),
    (("pool", "shared_prompt"), (0, 8, 9), "pool.blocks"),
    (("pool", "blocks"), (5, 7, 0, None, "6", 6.0, _DEL), "pool.blocks"),
    (("pool", "handles"), (2, 4, None, _DEL), "pool.handles"),
    (("pool", "arena_bytes"), (19199, 0, None, _DEL), "pool.arena_bytes"),
    (("pool", "meta_bytes"), (0, 265, None, _DEL), "pool.meta_bytes"),
    (("pool", "objects_bytes"), (-1, 1 << 40, None, 1.5, "9", _DEL), "pool.objects_bytes"),
    (("pool", "objects_bytes"), (80000,), "pool"),  # arena, bookkeeping and objects past the plan's total
    (("cache", "max_tokens"), (40, 56), "cache"),  # not the pool's 6 blocks x 8
    (("cache", "window"), (8,), "cache"),
    (("cache", "prefix"), (4,), "cache"),
    (("kv_bytes",), (20000, 19201), "kv_bytes"),
    (("batch",), (2,), "batch"),
    (("policy",), ({"kind": "ring"},), "pool"),
    (("tier",), (_tier(),), "tier"),
)


def test_every_field_hostile_is_refused_naming_it():
    plans = valid_plans()
    n = 0
    for idx, table in ((0, _HOSTILE), (3, _HOSTILE + _H2O), (4, _HOSTILE + _TIER), (5, _POOL)):
        base = plans[idx][0]
        for path, values, field in table:
            for v in values:
                doc = _copy(base)
                _set(doc, path, v)
                if isinstance(v, float) and not v - v == 0:
                    want = "plan." + ".".join(path)
                else:
                    want = field or (("policy" if v in ("h2o", "tiered") else "pool") if path == ("kind",)
                                     else path[0])
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
