"""The caches a run or a plan names, built in one place: a KVCache (window, sinks, f32 prefix, KIVI residual, an H2O
policy installed later), a KVCacheQ8 (the same, written with int8 codes by the integer passes), or a TieredCache
(a ring in RAM, older tokens on flash). Every kind answers the same decode interface (docs/architecture.md):
start_token, write / store_q8, attend / attend_q8, quiet, reset, close; the forward passes call only that.

On a board, the plan `kvedge deploy --config` put there is one call (kvedge.model.plandoc.build_cache: the
document checked whole first):

    import json
    from kvedge.model.plandoc import build_cache
    cache = build_cache(json.load(open("kvedge_plan.json")))
"""
from .cache import KVCache

COLD_PATH = "kv_cold"  # a tiered cache's files (COLD_PATH.*) in the current folder, unless the caller names others


def build(ccfg, tier=None, cold_path=COLD_PATH, tile=32, arena=None, q8=False, budget=None, fresh=True):
    """The cache of config ccfg: tier None, or a tiered plan's fields (block, cold_dtype, cold_blocks, at_cap,
    cold_align; its files cold_path.*, started afresh unless fresh=False); q8: the run writes int8 codes
    (store_q8); arena: the (ring's) arena allocated earlier; budget: BudgetError before allocating when over.
    Its attention is attached by attach() (the caller builds the large buffers in between)."""
    if "/" in ccfg.dtype:  # K and V apart: kvedge.kvsplit's (loaded by split caches only)
        from .kvsplit import build as split
        return split(ccfg, tier, q8, budget, arena)
    if tier is not None:
        from .tier.cache import TieredCache
        return TieredCache(ccfg, cold_path, tier["block"], tier["cold_dtype"], tier["cold_blocks"],
                           tier.get("at_cap", "drop"), tile, tier.get("cold_align", 0), budget=budget,
                           fresh=fresh, arena=arena, q8=q8)
    if q8:
        from .cacheq8 import KVCacheQ8
        return KVCacheQ8(ccfg, budget=budget, arena=arena)
    return KVCache(ccfg, budget=budget, arena=arena)


def attach(cache, tile=32, integer=True, attention=None, scores=None):
    """Give `cache` its attention loop unless it has its own (a tiered cache attends its tiers itself):
    attention(cache, tile=tile) when a factory is given, else kvedge.attention's (integer=True: its integer path
    too) or kvedge.floatatt's (the float loop alone: the integer path's code is never loaded). scores: an
    eviction policy's per-slot array. Returns whether attend_q8() runs here (integer wanted, and the cache and
    its attention have the integer path)."""
    if cache.att is None:
        if attention is not None:
            att = attention(cache, tile=tile)
        elif integer:
            from .attention import Attention
            att = Attention(cache, tile=tile)
        else:
            from .floatatt import FloatAttention
            att = FloatAttention(cache, tile=tile)
        cache.attach(att, scores)
    return bool(integer) and cache.int_ok and getattr(cache.att, "int_ok", hasattr(cache.att, "q8_step"))
