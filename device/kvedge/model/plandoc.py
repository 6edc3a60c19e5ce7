# The reader of `kvedge plan --out` documents: every field a run takes from a plan checked before anything is
# allocated, each refusal a PlanError (a ValueError) whose message starts with the field's name. The board's
# runner (kvedge.model.runplan) and the host's commands (generate --plan, deploy --config, demo --plan) call the
# same check(): one rule. docs/planning.md ("The plan JSON") lists what is refused.
from kvedge.compat import isfinite
from kvedge.config import CacheConfig
from kvedge.tier.config import check as check_tier
from kvedge.errors import PlanError
from kvedge.kernels import KINDS as KERNEL_KINDS
from kvedge.model.passes import FORWARDS, MAX_PREFILL, PREFILL_FORWARDS, PREFILL_KINDS

FORMAT = "kvedge-plan/1"
KINDS = ("keep", "prefix", "h2o", "sinks", "tiered", "window", "shorter")
POLICIES = ("ring", "h2o", "tiered")
PLACES = ("heap", "flash", "rom")
# the kinds a plan may name (kvedge.kernels' full list, not the ALLOWED a port narrowed: the emulated CircuitPython
# sets ["plain"] and refused every asm plan; whether this port compiles the kind is kernels.get's to say)
KERNELS = ("auto",) + KERNEL_KINDS
MAX_BYTES = 1 << 30  # no byte figure of a plan comes near it (the largest profile's heap is 8 MiB)
MAX_DEPTH = 12  # JSON nesting a plan may have (placement rows and measured figures are 4 deep)
_BYTES = ("kv_bytes", "budget_bytes", "h2o_score_bytes", "activation_bytes", "workspace_bytes", "total_bytes",
          "heap_bytes")
# The board-side parts a plan may leave out, in the order the planner drops them when nothing fits with them
# (kvedge_host.plan.planner): the prompt's encoder (kvedge.model.bpe and the tokenizer's sorted ids; the host
# encodes the prompt and the board is given token ids) first, then the stats stream (kvedge.telemetry).
# A plan's "without" lists the ones it left out; the runner then does not import them.
ENCODER = "encoder"
STATS = "stats"
LEAN = (ENCODER, STATS)
# the modules each part is (what kvedge.model.run._load imports for it, and kvedge deploy leaves off the board)
LEAN_MODULES = {ENCODER: "kvedge.model.bpe", STATS: "kvedge.telemetry"}
_TIER_BYTES = ("ring_bytes", "staging_bytes", "tables_bytes", "ram_bytes", "cold_bytes", "flash_bytes",
               "cold_tokens")


def _show(x):
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


def _bad(field, what, x):
    raise PlanError("%s: %s, got %s" % (field, what, _show(x)))


def _walk(x, field, depth):
    """NaN or infinity anywhere, or nesting deeper than MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise PlanError("%s: nested more than %d deep" % (field, MAX_DEPTH))
    if isinstance(x, float):
        if not isfinite(x):
            _bad(field, "a finite number", x)
    elif isinstance(x, dict):
        for k in x:
            if not isinstance(k, str):
                _bad(field, "string keys", k)
            _walk(x[k], field + "." + k, depth + 1)
    elif isinstance(x, list):
        for i in range(len(x)):
            _walk(x[i], "%s[%d]" % (field, i), depth + 1)


def _obj(doc, key, field, need=True):
    x = doc.get(key)
    if x is None and not need:
        return None
    if not isinstance(x, dict):
        _bad(field, "missing" if x is None else "a JSON object", x)
    return x


def _int(d, key, field, lo=0, hi=MAX_BYTES, need=True):
    x = d.get(key)
    if x is None and not need:
        return None
    if isinstance(x, bool) or not isinstance(x, int):
        _bad(field, "missing" if x is None else "an integer", x)
    if x < lo or x > hi:
        _bad(field, "an integer in %d..%d" % (lo, hi), x)
    return x


def _one_of(d, key, field, allowed, need=True):
    x = d.get(key)
    if x is None and not need:
        return None
    if not isinstance(x, str) or x not in allowed:
        _bad(field, "one of %s" % ", ".join(allowed), x)
    return x


def _real(d, key, field):
    x = d.get(key)
    if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0):
        _bad(field, "a number >= 0 or null", x)


def check(doc, heap=None):
    """Check a plan document (a dict from json.load) whole; returns its CacheConfig. heap: the span of this
    runtime's heap (default gc.mem_alloc() + gc.mem_free() and the GC's tables where the runtime tells, else no
    limit but MAX_BYTES): a plan made for more is refused. PlanError names the first bad field."""
    if not isinstance(doc, dict):
        _bad("plan", "a JSON object (a kvedge plan --out document)", doc)
    _walk(doc, "plan", 0)
    if doc.get("format") != FORMAT:
        _bad("format", "%r (a `kvedge plan --out` document this runner reads)" % FORMAT, doc.get("format"))
    kind = _one_of(doc, "kind", "kind", KINDS)
    c = _obj(doc, "cache", "cache")
    try:
        cfg = cache_config(c)
    except (TypeError, ValueError) as e:  # a wrong keyword's TypeError included
        raise PlanError("cache: %s" % e)
    for k in ("model", "board", "strategy"):
        if doc.get(k) is not None and not isinstance(doc[k], str):
            _bad(k, "a string", doc[k])
    for k in ("context", "tokens_kept"):
        _int(doc, k, k, 1, 1 << 26, False)
    if doc.get("context") is not None and cfg.slots > doc["context"] and doc.get("pool") is None:  # a pool: a
        # session's context (its cache holds every session's blocks)
        raise PlanError("context: %d, fewer than the cache's %d slots" % (doc["context"], cfg.slots))
    _int(doc, "batch", "batch", 1, 1 << 16, False)
    for k in _BYTES:
        _int(doc, k, k, 0, MAX_BYTES, k in ("workspace_bytes", "total_bytes", "heap_bytes"))
    if isinstance(doc.get("headroom_bytes"), bool) or not isinstance(doc.get("headroom_bytes", 0), int):
        _bad("headroom_bytes", "an integer", doc["headroom_bytes"])
    top = doc["heap_bytes"]
    for k in ("total_bytes", "budget_bytes"):
        if doc.get(k) is not None and doc[k] > top:
            raise PlanError("%s: %d, more than the plan's heap_bytes (%d)" % (k, doc[k], top))
    for k in ("workspace_bytes", "kv_bytes", "activation_bytes", "h2o_score_bytes"):
        if doc.get(k) is not None and doc[k] > doc["total_bytes"]:
            raise PlanError("%s: %d, more than the plan's total_bytes (%d)" % (k, doc[k], doc["total_bytes"]))
    if cfg.nbytes() > doc["total_bytes"]:
        raise PlanError("cache: its arena is %d bytes, more than the plan's total_bytes (%d)"
                        % (cfg.nbytes(), doc["total_bytes"]))
    if heap is None:
        from kvedge import compat
        a, f = compat.mem_alloc(), compat.mem_free()
        # heap_bytes is a heap's span (a board profile's figure); the GC reports its pool without its own tables,
        # ~2.3% of the span on MicroPython, ~3.3% on CircuitPython: the span is taken as the pool and 1/25 more
        heap = a + f + (a + f) // 25 if a >= 0 and f >= 0 else None
    if heap is not None and top > heap:
        raise PlanError("heap_bytes: the plan is for a %d-byte heap, this runtime has %d" % (top, heap))
    w = _obj(doc, "weights", "weights")
    _one_of(w, "place", "weights.place", PLACES)
    if not isinstance(w.get("dtype"), str) or not w["dtype"]:
        _bad("weights.dtype", "a string (f32, i8, file ...)", w.get("dtype"))
    for k in ("bytes", "heap_bytes"):
        _int(w, k, "weights." + k, 0, MAX_BYTES, False)
    pol = _obj(doc, "policy", "policy", False)
    if pol is not None:
        pk = _one_of(pol, "kind", "policy.kind", POLICIES)
        if pk == "h2o":
            b = _int(pol, "budget", "policy.budget", 1, cfg.slots)
            _int(pol, "recent", "policy.recent", 0, b)
        if (pk == "h2o") != (kind == "h2o") or (pk == "tiered") != (kind == "tiered"):
            raise PlanError("policy.kind: %r does not go with kind %r" % (pk, kind))
    elif kind in ("h2o", "tiered"):
        raise PlanError("policy: missing (kind %r needs one)" % kind)
    t = _obj(doc, "tier", "tier", kind == "tiered")
    if t is not None:
        if kind != "tiered":
            raise PlanError("tier: a tier in a plan of kind %r" % kind)
        _one_of(t, "kind", "tier.kind", ("tiered",), False)
        at = t.get("at_cap", "drop")
        al = t.get("cold_align", 0)
        for k, x in (("block", t.get("block")), ("cold_dtype", t.get("cold_dtype")),
                     ("cold_blocks", t.get("cold_blocks"))):
            if x is None:
                _bad("tier." + k, "missing", x)
        try:
            check_tier(cfg, t["block"], t["cold_dtype"], t["cold_blocks"], at, al)
        except ValueError as e:
            msg = str(e)
            for k in ("cold_blocks", "block", "cold dtype", "at_cap", "cold_align"):
                if msg.startswith(k):
                    raise PlanError("tier.%s: %s" % (k.replace(" ", "_"), msg))
            raise PlanError("tier: %s" % msg)
        for k in _TIER_BYTES:
            _int(t, k, "tier." + k, 0, MAX_BYTES, False)
    fw = _one_of(doc, "forward", "forward", FORWARDS, False)
    pre = _int(doc, "prefill", "prefill", 1, MAX_PREFILL, False)
    if pre is not None and pre > 1 and (fw not in PREFILL_FORWARDS or kind not in PREFILL_KINDS):
        raise PlanError("prefill: %d prompt tokens a chunk run on the %s pass with a cache of kind %s, the plan's "
                        "are %r and %r" % (pre, "/".join(PREFILL_FORWARDS), ", ".join(PREFILL_KINDS), fw, kind))
    _one_of(doc, "kernels", "kernels", KERNELS, False)
    _real(doc, "instructions_per_token", "instructions_per_token")
    _real(doc, "tokens_per_s", "tokens_per_s")
    for k in ("runtime", "quality"):
        _obj(doc, k, k, False)
    rt = doc.get("runtime")
    if rt is not None:
        if rt.get("source") is not None and not isinstance(rt["source"], str):
            _bad("runtime.source", "a string", rt["source"])
        _int(rt, "tokenizer_bytes", "runtime.tokenizer_bytes", 0, MAX_BYTES, False)
    without(doc)
    if doc.get("placement") is not None and not isinstance(doc["placement"], list):
        _bad("placement", "a list", doc["placement"])
    if doc.get("pool") is not None:  # several conversations on one PagedPool: its rules load with pool plans only
        from kvedge.model.runpool import check as check_pool
        check_pool(doc, cfg, _int, _bad)  # plandoc's field checks, passed: runpool never imports plandoc
    return cfg


def cache_config(c):
    """The CacheConfig of a plan's "cache" dict: K and V apart (k_dtype, v_dtype) is kvedge.kvsplit's."""
    if "k_dtype" in c:
        from kvedge.kvsplit import SplitConfig
        return SplitConfig.from_dict(c)
    return CacheConfig.from_dict(c)


def without(doc):
    """The board-side parts (LEAN) the plan leaves out, checked: a list of distinct names from LEAN (absent: none);
    a plan whose runtime says it counted the stats stream cannot leave it out."""
    w = doc.get("without")
    if w is None:
        return []
    if not isinstance(w, list):
        _bad("without", "a list of %s" % ", ".join(LEAN), w)
    for i in range(len(w)):
        if not isinstance(w[i], str) or w[i] not in LEAN:
            _bad("without[%d]" % i, "one of %s" % ", ".join(LEAN), w[i])
        if w[i] in w[:i]:
            _bad("without[%d]" % i, "named once", w[i])
    rt = doc.get("runtime")
    if STATS in w and isinstance(rt, dict) and rt.get("stats") is True:
        raise PlanError("without: the plan leaves out the stats stream, its runtime.stats says it counted one")
    return w


def encodes(doc):
    """Whether a run of this plan encodes its prompt on the board (else the host gives it token ids)."""
    return ENCODER not in (doc.get("without") or ())


def streams_stats(doc):
    """Whether a run of this plan may write the stats stream (kvedge.telemetry)."""
    return STATS not in (doc.get("without") or ()) and (doc.get("runtime") or {}).get("stats", True) is not False


def tier_of(doc):
    """main()'s tier= from a checked plan: None, or {block, cold_dtype, cold_blocks, at_cap, cold_align}."""
    t = doc.get("tier")
    if t is None:
        return None
    return {"block": t["block"], "cold_dtype": t["cold_dtype"], "cold_blocks": t["cold_blocks"],
            "at_cap": t.get("at_cap", "drop"), "cold_align": t.get("cold_align", 0)}


def build_cache(doc, cold_path="/kv_cold", q8=False, tile=32, heap=None):
    """The cache a plan document describes, checked whole first (check()), its attention attached: a KVCache
    (KVCacheQ8 with q8: written with int8 codes), or a tiered plan's TieredCache, which reopens its cold store at
    cold_path.* when one is there. The plan's budget_bytes is the budget (BudgetError before allocating). A pool
    plan (its "pool": kvedge plan --sessions) gives its kvedge.paged.PagedPool, whose sessions
    (kvedge.pooled.PoolSession(pool)) each answer the decode interface."""
    if doc.get("pool") is not None:  # a pool plan: its PagedPool (sessions: kvedge.pooled.PoolSession(pool))
        from kvedge.model.runpool import build
        return build(doc, check(doc, heap), tile)
    from kvedge import caches
    cfg = check(doc, heap)
    c = caches.build(cfg, tier_of(doc), cold_path, tile, q8=q8, budget=doc.get("budget_bytes"), fresh=False)
    caches.attach(c, tile, integer=c.int_ok)
    return c
