# A tiered cache's configuration (kvedge.tier.cache.TieredCache: a hot ring in RAM, older tokens in blocks on flash):
# the rule for its fields against the ring's CacheConfig, the model runner's rule for a plan's "tier", and its
# RAM account. Apart from kvedge.config and kvedge.model.llama so that a run without a tier (most boards) does
# not compile this into its heap.
from kvedge.sizes import CACHE_DTYPES
from kvedge.model import passes as _passes  # here, not in check_run: a tier's measured footprint then holds it

AT_CAP = ("drop", "reset")  # what a full cold store does: drop its oldest block, or take a reset point
U16 = 0xFFFF  # the cold store's header holds these fields in 16 bits


def check(cfg, block, cold, cold_blocks, at_cap, cold_align):
    """A tiered cache's fields (kvedge.tier.cache.TieredCache, a plan's "tier") against its ring's CacheConfig:
    ValueError naming the field. The rule, written once: TieredCache and kvedge.model.plandoc both call it."""
    for name, x in (("block", block), ("cold_blocks", cold_blocks)):
        if not isinstance(x, int) or isinstance(x, bool) or x < 1 or x > U16:
            raise ValueError("%s must be an int in 1..%d, got %r" % (name, U16, x))
    if not isinstance(cold, str) or cold not in CACHE_DTYPES:
        raise ValueError("cold dtype must be one of %s, got %r" % (", ".join(CACHE_DTYPES), cold))
    if not isinstance(at_cap, str) or at_cap not in AT_CAP:
        raise ValueError("at_cap must be 'drop' or 'reset', got %r" % (at_cap,))
    if not cfg.window:
        raise ValueError("a tiered cache needs a hot ring: build its config with window > 0")
    if cfg.window % block:
        raise ValueError("window (%d) must be a multiple of block (%d): blocks leave the ring whole"
                         % (cfg.window, block))
    if cfg.prefix and cfg.prefix != cfg.sinks:
        raise ValueError("a tiered cache keeps its sinks at f32 (prefix = sinks = %d) or in the ring's dtype "
                         "(prefix 0), got prefix %d" % (cfg.sinks, cfg.prefix))
    if cold == "i4" and cfg.head_dim & 1:
        raise ValueError("head_dim must be even for an i4 cold store, got %d" % cfg.head_dim)
    for name, x in (("layers", cfg.layers), ("kv_heads", cfg.kv_heads), ("head_dim", cfg.head_dim),
                    ("sinks", cfg.sinks), ("align", cfg.align)):
        if x > U16:
            raise ValueError("%s %d does not fit the cold store's header (<= %d)" % (name, x, U16))
    if not isinstance(cold_align, int) or isinstance(cold_align, bool) or cold_align < 0 or cold_align > U16:
        raise ValueError("cold_align must be an int in 0..%d, got %r" % (U16, cold_align))


def check_run(tier, forward="float", policy=False):
    """A tiered cache (a plan's "tier") for the model runner (kvedge.model.llama) before anything is built: its
    fields are there, no eviction policy beside it, a pass that attends it. TieredCache checks the rest against
    the ring's config (check()) when it is built, before it allocates."""
    if not isinstance(tier, dict):
        raise TypeError("tier must be a dict (a plan's \"tier\"), got %s" % type(tier).__name__)
    for key in ("block", "cold_dtype", "cold_blocks"):
        if key not in tier:
            raise ValueError("tier: no %r" % key)
    if policy:
        raise ValueError("a tiered cache keeps every token it can: no eviction policy beside it")
    if forward == _passes.ULAB:
        raise ValueError("the ulab forward pass reads an i8 cache in RAM, not a tiered cache")
    if forward == _passes.INT and tier["cold_dtype"] not in _passes.INT_COLD:
        raise ValueError("the integer forward pass attends %s cold blocks, not %r" % (
            " or ".join(_passes.INT_COLD), tier["cold_dtype"]))


def ram_bytes(ccfg, tier):
    """kvedge.budget.tiered_bytes of the tiered cache a plan's `tier` (block, cold_dtype, cold_blocks, cold_align)
    builds around the ring `ccfg`: what TieredCache.ram_bytes() will be ("ram"), and its flash."""
    from kvedge.tier.sizes import tiered_bytes
    return tiered_bytes(ccfg.layers, ccfg.heads, ccfg.kv_heads, ccfg.head_dim, ccfg.window, ccfg.sinks,
                        tier["block"], tier["cold_blocks"], ccfg.dtype, tier["cold_dtype"], ccfg.align,
                        tier.get("cold_align", 0), ccfg.group, ccfg.prefix == ccfg.sinks and ccfg.sinks > 0)
