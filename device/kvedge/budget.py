# Exact memory formulas: the single source of truth for kvedge's sizes.
#
# The device cache sizes its arena with these functions and the host tools import them. Every figure is an
# exact integer number of bytes. Python ints are arbitrary precision on every runtime, so results above 2**30
# stay exact on 31-bit small-int boards (they become heap longs there, which is fine outside hot loops).
#
# Words used below (the traps are those of docs/architecture.md):
#   row      one head's per-token entry for K or for V: head_dim values in the storage type.
#   padded   a row rounded up to the alignment (trap 7: cache line / DMA burst); align 0 or 1 = no padding.
#   meta     scales and zero points of quantized rows, stored as IEEE half (2 bytes each) so that integer
#            code can decode them with shifts and never needs a float.
#   group    i4/i2 keys are quantized per channel over groups of `group` tokens (KIVI).
#   residual KIVI's sliding residual of R tokens (a multiple of group): the newest R..R+G-1 tokens stay at
#            full precision (f32); a whole group is quantized when it leaves. Its ring holds R+G-1 rows per
#            layer, K|V and KV head (the group that leaves is quantized before the next token is written), or
#            every slot after the prefix when the cache holds fewer.
#   prefix   the first `prefix` tokens of a sequence are kept at full precision (f32) for ever (trap 5).

from kvedge.sizes import *  # noqa: F401,F403 (the formulas a run needs: constants, arena, buffers)
from kvedge.sizes import align_up, check_dtype, check_int, kv_bytes, row_bytes  # noqa: F401 (used here)
from kvedge.sizes import F16, F32, FULL, I4, I8, LOWBIT, META_BYTES, QK, WEIGHT_DTYPES  # noqa: F401
# the tiered cache's formulas: a module of their own (a tier loads them without the rest of this one)
from kvedge.poolsizes import pool_block_bytes, pool_bytes, pool_meta_bytes, pool_shared_blocks  # noqa: F401
from kvedge.tier.sizes import TIER_HEADER_BYTES, TIER_TAG_BYTES, cold_record_bytes, tiered_bytes  # noqa: F401


def padded_row_bytes(head_dim, dtype, align=64):
    return align_up(row_bytes(head_dim, dtype), align)


def kv_bytes_per_token(layers, kv_heads, head_dim, dtype=F16, align=64):
    """K and V of one token in every layer and KV head, padded; i8 includes its per-row scales.

    i4 keys have per-group channel scales that are not a whole number of bytes per token: use kv_bytes()."""
    row = padded_row_bytes(head_dim, dtype, align)
    if dtype == I8:
        row += META_BYTES
    elif dtype in LOWBIT:
        raise ValueError("%s has per-group key scales; use kv_bytes() for exact sizes" % dtype)
    return 2 * layers * kv_heads * row


def max_tokens_for_budget(budget, layers, kv_heads, head_dim, dtype=F16, align=64, group=QK, residual=None,
                          prefix=0, limit=1 << 26):
    """Largest token count whose kv_bytes() fits `budget` bytes (0 if not even the prefix fits).

    Binary search on the exact formula, so grouping and padding are accounted exactly. For KIVI i4 the
    answer is rounded down to whole groups after the prefix."""
    def need(t):
        return kv_bytes(layers, kv_heads, head_dim, t, dtype, align, group, residual, prefix)
    step = group if (dtype in LOWBIT and (residual is None or residual)) else 1
    lo, hi = 0, (limit - prefix) // step  # counts of steps after the prefix
    if need(prefix) > budget:
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(prefix + mid * step) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return prefix + lo * step


# ---- models whose layers differ (per-layer sliding windows) and several sequences at once (batch) ----

def layer_tokens(context, window):
    """Token slots one layer holds at `context` tokens: a sliding-window layer keeps at most `window`
    (window 0 = a global layer, which keeps every token)."""
    if window and window < context:
        return window
    return context


def kv_bytes_layers(windows, kv_heads, head_dim, context, dtype=F16, align=64, batch=1, group=QK, residual=None,
                    prefix=0, detail=False):
    """Exact bytes of the KV caches of `batch` sequences of `context` tokens for a model whose layer i keeps
    layer_tokens(context, windows[i]) tokens (Mistral: every layer windowed; Gemma-2: every other layer).

    Layers holding the same number of tokens are summed through one kv_bytes() call, so every figure is the
    single-cache formula's. A window layer keeps min(prefix, its tokens) prefix rows. detail=True returns the
    kv_bytes() dict summed over layers (data, meta, prefix, residual, padding, k, v, total)."""
    check_int("batch", batch)
    check_int("tokens", context, 0)
    if not windows:
        raise ValueError("a model needs at least one layer")
    check_int("layers", len(windows))
    counts = {}
    for w in windows:
        check_int("window", w, 0)
        t = layer_tokens(context, w)
        counts[t] = counts.get(t, 0) + 1
    keys = ("data", "meta", "prefix", "residual", "padding", "k", "v", "total")
    sums = {}
    for k in keys:
        sums[k] = 0
    for t in counts:
        part = kv_bytes(counts[t], kv_heads, head_dim, t, dtype, align, group, residual, min(prefix, t), True)
        for k in keys:
            sums[k] += part[k]
    for k in keys:
        sums[k] *= batch
    return sums if detail else sums["total"]


def max_context_for_budget(budget, windows, kv_heads, head_dim, dtype=F16, align=64, batch=1, group=QK,
                           residual=None, prefix=0, limit=1 << 26):
    """Longest context (<= limit) whose kv_bytes_layers() fits `budget` bytes; 0 if not even the prefix fits.

    Memory never shrinks as the context grows, so a binary search on the exact formula is exact. When every
    layer is windowed the cache stops growing and the answer is `limit`. KIVI i4 answers are whole groups
    after the prefix."""
    def need(t):
        return kv_bytes_layers(windows, kv_heads, head_dim, t, dtype, align, batch, group, residual, prefix)
    step = group if (dtype in LOWBIT and (residual is None or residual)) else 1
    if limit < prefix or need(prefix) > budget:
        return 0
    lo, hi = 0, (limit - prefix) // step
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(prefix + mid * step) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return prefix + lo * step


def kv_bytes_growth(layers, kv_heads, head_dim, tokens, dtype=F16, align=64, group=QK, residual=None):
    """Exact bytes that `tokens` more cached tokens add to a growing cache of `layers` layers, past the fixed
    parts (KIVI's full-precision residual, whole once the cache holds R + G tokens). For i4/i2 pass a multiple of
    `group`: key scales come per group."""
    base = tokens
    if dtype in LOWBIT:
        base += (group if residual is None else residual) + group
    return (kv_bytes(layers, kv_heads, head_dim, base + tokens, dtype, align, group, residual)
            - kv_bytes(layers, kv_heads, head_dim, base, dtype, align, group, residual))


# ---- extra arrays a plan places beside the cache ----

def h2o_score_bytes(slots, int_bytes=4):
    """Heavy-hitter (H2O) eviction's arrays (kvedge.evict.H2O): this step's attention per cache slot and the
    accumulated sum per slot, one array('i') entry each (attention is summed over layers and heads)."""
    return 2 * slots * int_bytes


def weights_row_buffer_bytes(dim, hidden_dim, dtype=F32, scale_bytes=4):
    """RAM for weights read from flash row by row: one row of the widest matrix (its input is dim or hidden_dim
    values) in `dtype`, plus its scale when quantized (int4: a scale per group of 32)."""
    check_dtype(dtype, WEIGHT_DTYPES, "weights dtype")
    n = max(dim, hidden_dim)
    if dtype == F32:
        return 4 * n
    if dtype == F16:
        return 2 * n
    if dtype == I8:
        return n + scale_bytes
    from kvedge.w4sizes import row_bytes
    return row_bytes(n)  # int4: its groups, each of nibbles and an f16 scale


POOL_INDEX_HEAD = 4  # a pool tier's index: its generation (u16) and 0, then one entry per log slot
POOL_ENTRY_BYTES = 8  # one log slot's entry: session id (u32, 0 = no record), generation (u16), block index (u16)


def pool_tier_bytes(layers, kv_heads, head_dim, block, dtype, align, capacity, slots=None):
    """Exact flash and RAM of kvedge.tier.ColdTier, the cold tier of a PagedPool of `block`-token blocks (window 0,
    prefix 0, i4/i2 with residual 0), holding at most `capacity` records in a log of `slots` (default
    2 x capacity, at least capacity + 1) blocks per segment (kvedge.tier.store, kind 1), as a dict:

      record   one pool block's bytes verbatim from the arena: per layer, K|V and KV head its B padded rows, then
               their scales (i8: one f16 each; i4/i2: scale and zero); block = record + tag
      header   one header file: the store's 40 bytes + the index (generation, then one entry per log slot)
      flash    the files at most: two headers and two segment files of `slots` blocks each (records are only
               appended; a record still live when the log comes round to it is appended again, see kvedge.tier.spill)
      scratch  the buffer a reopen verifies through and a record is copied forward through: the longest part
      ram      the tier's own buffers: three int arrays of `slots` (session, generation, block index per slot),
               the index and the header packed from it, the tag, the scratch, the part offsets, Adler-32 state"""
    check_dtype(dtype)
    check_int("capacity", capacity, 1)
    if slots is None:
        slots = 2 * capacity
    check_int("slots", slots, capacity + 1)
    row = padded_row_bytes(head_dim, dtype, align)
    meta = META_BYTES if dtype == I8 else (2 * META_BYTES if dtype in LOWBIT else 0)
    runs = 2 * layers * kv_heads  # data runs of B rows; as many scale runs when meta
    record = runs * block * (row + meta)
    index = POOL_INDEX_HEAD + slots * POOL_ENTRY_BYTES
    header = TIER_HEADER_BYTES + index
    scratch = block * (row if row > meta else meta)
    parts = runs * (2 if meta else 1)
    ram = 3 * 4 * slots + index + header + TIER_TAG_BYTES + scratch + 4 * parts + 2 * 4
    return {"record": record, "block": TIER_TAG_BYTES + record, "header": header, "index": index,
            "flash": 2 * header + 2 * slots * (TIER_TAG_BYTES + record), "scratch": scratch, "parts": parts,
            "ram": ram, "slots": slots, "capacity": capacity}

