# Exact memory formulas: the single source of truth for kvedge's sizes.
#
# The device cache sizes its arena with these functions and the host tools import them. Every figure is an
# exact integer number of bytes. Python ints are arbitrary precision on every runtime, so results above 2**30
# stay exact on 31-bit small-int boards (they become heap longs there, which is fine outside hot loops).
#
# Words used below:
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

# Storage types of the device cache.
F32 = "f32"
F16 = "f16"
I8 = "i8"
I4 = "i4"
I2 = "i2"
CACHE_DTYPES = (F32, F16, I8, I4, I2)
LOWBIT = (I4, I2)  # asymmetric codes packed several to a byte, with f16 scale and zero (KIVI)
CODE_BITS = {I4: 4, I2: 2}
# llama.cpp block types, for comparing plans with llama.cpp's logs (formulas only, no device storage).
Q8_0 = "q8_0"
Q4_0 = "q4_0"
KV_DTYPES = CACHE_DTYPES + (Q8_0, Q4_0)
QK = 32  # values per llama.cpp block
_BLOCK_BYTES = {Q8_0: 34, Q4_0: 18}

META_BYTES = 2  # one f16 scale or zero point
FULL = F32  # what "full precision" means for prefix and residual rows

# Limits that catch absurd configurations (a typo, a unit error) before any arithmetic on them.
LIMITS = {
    "layers": 4096,
    "heads": 16384,
    "kv_heads": 16384,
    "head_dim": 65536,
    "max_tokens": 1 << 26,
    "window": 1 << 26,
    "sinks": 1 << 26,
    "prefix": 1 << 26,
    "group": 1 << 16,
    "residual": 1 << 16,
    "align": 1 << 16,
    "tokens": 1 << 26,
    "batch": 1 << 16,
}


def check_int(name, value, minimum=1):
    """Validate one size: an int (not bool) within [minimum, LIMITS[name]]. Returns it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("%s must be an integer, got %r" % (name, value))
    if value < minimum:
        if minimum == 1:
            raise ValueError("%s must be a positive integer, got %d" % (name, value))
        raise ValueError("%s must be >= %d, got %d" % (name, minimum, value))
    top = LIMITS.get(name)
    if top is not None and value > top:
        raise ValueError("%s is absurdly large: %d (limit %d)" % (name, value, top))
    return value


def check_dtype(dtype, allowed=KV_DTYPES, name="dtype"):
    if dtype not in allowed:
        raise ValueError("%s must be one of %s, got %r" % (name, ", ".join(allowed), dtype))
    return dtype


def check_align(align):
    check_int("align", align, 0)
    if align > 1 and align & (align - 1):
        raise ValueError("align must be 0, 1 or a power of two, got %d" % align)
    return align


def align_up(n, align):
    if align <= 1:
        return n
    return (n + align - 1) // align * align


def row_bytes(head_dim, dtype):
    """Bytes of one head's per-token K (or V) values, before padding and without scales."""
    if dtype == F32:
        return 4 * head_dim
    if dtype == F16:
        return 2 * head_dim
    if dtype == I8:
        return head_dim
    if dtype == I4:
        if head_dim & 1:
            raise ValueError("head_dim must be even for i4 (two values per byte), got %d" % head_dim)
        return head_dim >> 1
    if dtype == I2:
        if head_dim & 3:
            raise ValueError("head_dim must be a multiple of 4 for i2 (four values per byte), got %d" % head_dim)
        return head_dim >> 2
    if dtype in _BLOCK_BYTES:
        if head_dim % QK:
            raise ValueError("head_dim must be a multiple of %d for %s, got %d" % (QK, dtype, head_dim))
        return head_dim // QK * _BLOCK_BYTES[dtype]
    check_dtype(dtype)


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


def kv_bytes(layers, kv_heads, head_dim, tokens, dtype=F16, align=64, group=QK, residual=None, prefix=0,
             detail=False):
    """Exact bytes of a KV cache holding `tokens` token slots per layer.

    `prefix` of those slots are f32 (full-precision prefix). For i4 and i2, `residual` R (default: group G;
    a multiple of G) > 0 selects the KIVI design: per-channel key scales per group of G slots (the slots after
    the prefix must be a whole number of groups) and a sliding f32 residual ring of min(R + G - 1, tokens -
    prefix) rows; residual 0
    quantizes keys per token like values. With detail=True returns a dict: data, meta, prefix, residual,
    padding, k, v, total.
    """
    slots = tokens - prefix
    pairs = layers * kv_heads  # (layer, kv head) pairs; K and V each have one row per pair and slot
    row = row_bytes(head_dim, dtype)
    prow = align_up(row, align)
    frow = row_bytes(head_dim, FULL)
    pfrow = align_up(frow, align)
    data = 2 * pairs * slots * prow
    k_meta = v_meta = 0
    res_rows = 0
    if dtype == I8:
        k_meta = v_meta = pairs * slots * META_BYTES
    elif dtype in LOWBIT:
        if residual is None:
            residual = group
        v_meta = pairs * slots * 2 * META_BYTES
        if residual:
            k_meta = pairs * ((slots + group - 1) // group) * head_dim * 2 * META_BYTES
            res_rows = residual_rows(group, residual, slots)
        else:
            k_meta = v_meta
    pre = 2 * pairs * prefix * pfrow
    res = 2 * pairs * res_rows * pfrow
    total = data + k_meta + v_meta + pre + res
    if not detail:
        return total
    padding = 2 * pairs * (slots * (prow - row) + (prefix + res_rows) * (pfrow - frow))
    half = (data + pre + res) // 2
    return {
        "data": data, "meta": k_meta + v_meta, "prefix": pre, "residual": res, "padding": padding,
        "k": half + k_meta, "v": half + v_meta, "total": total,
    }


def residual_rows(group, residual, slots):
    """f32 rows of KIVI's sliding residual per layer, K|V and KV head: R + G - 1, or all `slots` (after the
    prefix) of a cache that never holds R + G tokens; 0 without a residual."""
    if not residual:
        return 0
    n = residual + group - 1
    return n if n < slots else slots


def cache_slots(max_tokens, window=0, sinks=0):
    """Token slots a cache holds: the whole cap, or sinks + window for a ring."""
    return sinks + window if window else max_tokens


def cache_bytes(cfg, detail=False):
    """Exact arena bytes of a CacheConfig (see config.py)."""
    return kv_bytes(cfg.layers, cfg.kv_heads, cfg.head_dim, cache_slots(cfg.max_tokens, cfg.window, cfg.sinks),
                    cfg.dtype, cfg.align, cfg.group, cfg.residual, cfg.prefix, detail)


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


# ---- whole deployment: weights + KV + activations + workspace ----

def llama_params(dim, hidden_dim, layers, heads, kv_heads, vocab, shared_classifier=True, head_dim=None):
    """Parameter counts of a Llama-2 style decoder, as a dict of matrix groups and their shapes' totals."""
    if head_dim is None:
        head_dim = dim // heads
    q_dim = heads * head_dim
    kv_dim = kv_heads * head_dim
    per_layer_matrices = dim * q_dim + 2 * dim * kv_dim + q_dim * dim + 3 * dim * hidden_dim
    return {
        "embedding": vocab * dim,
        "matrices": layers * per_layer_matrices,
        "norms": layers * 2 * dim + dim,
        "classifier": 0 if shared_classifier else vocab * dim,
        # rows of the matrices (what int8 per-row scales multiply)
        "matrix_rows": layers * (q_dim + 2 * kv_dim + dim + 2 * hidden_dim + dim),
        "embedding_rows": vocab * (1 if shared_classifier else 2),
    }


WEIGHT_DTYPES = (F32, F16, I8, I4)


def weights_bytes(params, dtype=F32, scale_bytes=4):
    """Bytes of weights from llama_params(): matrices and embedding in `dtype`, norms in f32.

    Quantized weights (i8, i4) carry one f32 scale per row."""
    check_dtype(dtype, WEIGHT_DTYPES, "weights dtype")
    n = params["embedding"] + params["matrices"] + params["classifier"]
    rows = params["matrix_rows"] + params["embedding_rows"]
    if dtype == F32:
        body = 4 * n
    elif dtype == F16:
        body = 2 * n
    elif dtype == I8:
        body = n + rows * scale_bytes
    else:
        body = (n + 1) // 2 + rows * scale_bytes
    return body + 4 * params["norms"]


def activation_bytes(dim, hidden_dim, heads, vocab, tile=32, batch=1, head_dim=None, value_bytes=4):
    """Decode-step activations of a Llama-style forward pass with tiled attention.

    x, xb, xb2, q (dim each), hb, hb2 (hidden each), logits (vocab), and per query head a tile of scores
    plus running max/sum and an output accumulator (the working set is bounded by the tile, not the context)."""
    if head_dim is None:
        head_dim = dim // heads
    per_seq = 4 * dim + 2 * hidden_dim + vocab + heads * (tile + 2 + head_dim)
    return batch * per_seq * value_bytes


def deployment_bytes(weights, kv, activations, workspace):
    """The deployment account, each part reported separately."""
    total = weights + kv + activations + workspace
    return {"weights": weights, "kv": kv, "activations": activations, "workspace": workspace, "total": total}


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
    values) in `dtype`, plus its scale when quantized."""
    check_dtype(dtype, WEIGHT_DTYPES, "weights dtype")
    n = max(dim, hidden_dim)
    if dtype == F32:
        return 4 * n
    if dtype == F16:
        return 2 * n
    if dtype == I8:
        return n + scale_bytes
    return (n + 1) // 2 + scale_bytes


# ---- a tiered cache for one sequence (kvedge.tiered): hot ring in RAM, older tokens compressed on flash ----

TIER_HEADER_BYTES = 40  # one header file of a cold store; it has two (the newer valid one wins)
TIER_TAG_BYTES = 16  # after each block (and the sinks' rows): its number and checksum


def cold_record_bytes(kv_heads, head_dim, block, dtype, align=0):
    """One layer of one cold block: K and V rows and scales of `block` tokens, laid out as a one-layer KVCache of
    `block` slots (i4: KIVI, keys per channel over the block, values per token) without its f32 residual."""
    d = kv_bytes(1, kv_heads, head_dim, block, dtype, align, group=block, detail=True)
    return d["total"] - d["residual"]


def tiered_bytes(layers, heads, kv_heads, head_dim, window, sinks, block, cold_blocks, dtype=I8, cold_dtype=I4,
                 align=64, cold_align=0, group=QK):
    """Exact RAM and flash of kvedge.tiered.TieredCache, as a dict:

      ring      the hot KVCache arena: `sinks` f32 slots (its prefix) + `window` slots in `dtype`
      staging   the one-layer, one-block KVCache (cold dtype) that encodes a block leaving the ring and holds each
                block read back from flash during attention
      tables    the tiered object's arrays: one token's K and V in f32 (re-quantizing), and per query head the
                float path's running max, sum and head_dim accumulators (f64), plus, when the integer path is
                possible (ring and cold in i8/i4), its 5 state ints and head_dim accumulators (int32)
      ram       ring + staging + tables
      record    one layer of one cold block on flash; block = layers records + tag
      flash     the store's files at most: two headers, the sinks' record (f32, when sinks > 0), and two segment
                files of cold_blocks blocks each (blocks are only appended; a segment restarts when it is dead)
      cold_tokens, tokens   the cold cap in tokens, and sinks + cold + window"""
    ring = kv_bytes(layers, kv_heads, head_dim, sinks + window, dtype, align, group, None, prefix=sinks)
    staging = kv_bytes(1, kv_heads, head_dim, block, cold_dtype, cold_align, group=block)
    tables = 2 * kv_heads * head_dim * 4 + heads * (2 + head_dim) * 8
    if dtype in (I8, I4) and cold_dtype in (I8, I4) and head_dim <= 256:
        tables += heads * (5 + head_dim) * 4
    record = cold_record_bytes(kv_heads, head_dim, block, cold_dtype, cold_align)
    blk = TIER_TAG_BYTES + layers * record
    sink_rec = TIER_TAG_BYTES + 2 * layers * kv_heads * sinks * align_up(row_bytes(head_dim, FULL), align) if sinks \
        else 0
    return {"ring": ring, "staging": staging, "tables": tables, "ram": ring + staging + tables, "record": record,
            "block": blk, "sinks": sink_rec, "flash": 2 * TIER_HEADER_BYTES + sink_rec + 2 * cold_blocks * blk,
            "cold_tokens": cold_blocks * block, "tokens": sinks + cold_blocks * block + window}
