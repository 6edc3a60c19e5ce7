# The formulas a run needs on the device: the cache's arena (kvedge.config, kvedge.cache) and the model's
# buffers (kvedge.model). kvedge.budget re-exports every name here beside the planning formulas, which a
# board's runner never calls: apart, their code is not in a small board's heap (measured with kvedge
# footprint on the 100 KB ESP32 profile). Import kvedge.budget everywhere else.
#
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

# Storage types of the device cache.
F32 = "f32"
F16 = "f16"
I8 = "i8"
I4 = "i4"
I2 = "i2"
CACHE_DTYPES = (F32, F16, I8, I4, I2)
INT_CODES = (I8, I4, I2)  # stored as integer codes with scales: what the integer attention path reads
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
K = 0  # the arena's key rows (kvedge.cache's layout: [layer][K|V][kv_head][row])
V = 1  # and its value rows

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
        # the shapes (kvedge.w4sizes.body_bytes: int4 rows are padded to whole groups)
        "shape": (dim, hidden_dim, layers, q_dim, kv_dim, vocab, shared_classifier),
    }


WEIGHT_DTYPES = (F32, F16, I8, I4)


def weights_bytes(params, dtype=F32, scale_bytes=4):
    """Bytes of weights from llama_params(): matrices and embedding in `dtype`, norms in f32.

    int8 weights carry one f32 scale per row; int4 weights (kvedge.w4sizes) one f16 scale per group of
    columns, rows padded to whole groups."""
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
        from kvedge.w4sizes import body_bytes
        body = body_bytes(params)
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
