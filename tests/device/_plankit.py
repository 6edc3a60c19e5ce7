# Plan documents (`kvedge plan --out`) for the device tests of kvedge.model.plandoc and runplan: a valid document
# of each kind, built from a few fields, and the refusal check (PlanError naming the field, the document unchanged).
from kvedge.errors import PlanError
from kvedge.model.runplan import plan_args

HEAP = 100000  # the heap the valid plans are made for: below any test runtime's
SHAPE = {"layers": 5, "heads": 8, "kv_heads": 4, "head_dim": 8}


def copy(x):
    if isinstance(x, dict):
        return {k: copy(x[k]) for k in x}
    if isinstance(x, list):
        return [copy(v) for v in x]
    return x


def cache(max_tokens, dtype="i8", window=0, sinks=0, prefix=0):
    c = dict(SHAPE)
    c.update({"max_tokens": max_tokens, "dtype": dtype, "window": window, "sinks": sinks, "align": 0,
              "group": 32, "residual": 0, "prefix": prefix})
    return c


def plan(kind, cache, policy, tier=None, place="flash"):
    return {"format": "kvedge-plan/1", "model": "stories260K", "board": "rp2040", "strategy": kind, "kind": kind,
            "cache": cache, "kv_bytes": 20000, "batch": 1, "budget_bytes": 30000, "policy": policy, "tier": tier,
            "h2o_score_bytes": 0, "weights": {"bytes": 276192, "dtype": "i8", "place": place, "heap_bytes": 1716},
            "activation_bytes": 5792, "workspace_bytes": 40000, "total_bytes": 90000, "heap_bytes": HEAP,
            "headroom_bytes": HEAP - 90000, "context": 512, "tokens_kept": 64,
            "placement": [{"array": "kv cache", "bytes": 20000, "where": "fast", "why": "every token"}],
            "quality": {"label": "x", "metrics": {"kl": 0.01}}, "runtime": None}


def tier(block=16, cold="i8", blocks=28):
    return {"kind": "tiered", "block": block, "cold_dtype": cold, "cold_blocks": blocks, "at_cap": "drop",
            "cold_align": 0, "ring_bytes": 9000, "staging_bytes": 700, "tables_bytes": 300, "ram_bytes": 10000,
            "cold_bytes": 50000, "flash_bytes": 51000, "cold_tokens": 448, "cost": None}


def pool_plan():
    """A pool plan (kvedge plan --sessions 2 --block 8 --shared-prompt 16): 2 conversations of 32 tokens forked
    from a 16-token prompt held once. Its figures written out by hand: blocks 2 (the prompt) + 2 x (4 - 2) = 6,
    handles 2 + 1 (the prompt's holder), arena 6 blocks x 2 x 5 layers x 4 KV heads x 8 tokens x (8 codes + a
    2-byte scale) = 19,200, bookkeeping 4 x (3 handles x 4 table entries + 5 x 3 + 4 x 8 slots) + 2 x 3 + 4 x 6
    = 266."""
    doc = plan("keep", cache(48), None)
    doc.update(kv_bytes=19200, context=32, tokens_kept=32, strategy="i8 pool of 2 sessions x 32 tokens")
    doc["pool"] = {"sessions": 2, "block": 8, "shared_prompt": 16, "tokens": 32, "blocks": 6, "handles": 3,
                   "arena_bytes": 19200, "meta_bytes": 266, "objects_bytes": 2000}
    return doc


def refused(doc, field, heap=HEAP, model=None, tok=None):
    before = repr(doc)
    try:
        plan_args(doc, model, tok, heap)
    except PlanError as e:
        msg = str(e)
        assert msg.startswith(field), (field, msg)
        assert repr(doc) == before
        return msg
    raise AssertionError("accepted a plan with a bad %s" % field)
