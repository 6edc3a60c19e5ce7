# A validated KV-cache configuration. Construction either succeeds whole or raises ValueError naming the field.
from .sizes import (F32, CACHE_DTYPES, LOWBIT, QK, cache_bytes, cache_slots, check_align, check_dtype, check_int,
                     row_bytes)

_FIELDS = ("layers", "heads", "kv_heads", "head_dim", "max_tokens", "dtype", "window", "sinks", "align",
           "group", "residual", "prefix")


class CacheConfig:
    """Shape and policy of one KV cache (traps: docs/architecture.md).

    layers, heads, kv_heads, head_dim   the model's attention shape (kv_heads divides heads: MHA, GQA, MQA)
    max_tokens   hard cap on cached tokens (trap 8); with a window the cache holds sinks + window <= max_tokens
    dtype        storage of cached rows: f32, f16, i8, i4, i2
    window       0 = keep everything up to max_tokens; W > 0 = ring of the last W tokens
    sinks        with a window: the first S tokens are kept for ever (StreamingLLM)
    align        each row is padded to a multiple of this many bytes (0 or 1 = no padding)
    group        i4/i2: keys are quantized per channel over groups of this many tokens (KIVI)
    residual     i4/i2: KIVI's sliding residual R, a multiple of group (default = group): the newest R..R+G-1
                 tokens stay at f32 and a whole group is quantized when it leaves; 0 = naive per-token key
                 quantization (no residual). A window must hold R + G tokens; a cache of fewer slots keeps
                 everything at f32 until quantize_residual()
    prefix       the first P tokens stay at f32 for ever (trap 5); with a window they must be sinks (P <= S)
    """

    def __init__(self, layers, heads, kv_heads, head_dim, max_tokens, dtype=F32, window=0, sinks=0, align=64,
                 group=QK, residual=None, prefix=0):
        check_int("layers", layers)
        check_int("heads", heads)
        check_int("kv_heads", kv_heads)
        check_int("head_dim", head_dim)
        check_int("max_tokens", max_tokens)
        check_dtype(dtype, CACHE_DTYPES)
        check_int("window", window, 0)
        check_int("sinks", sinks, 0)
        check_align(align)
        check_int("group", group)
        check_int("prefix", prefix, 0)
        if kv_heads > heads or heads % kv_heads:
            raise ValueError("heads (%d) must be a multiple of kv_heads (%d)" % (heads, kv_heads))
        if dtype in LOWBIT:
            row_bytes(head_dim, dtype)  # raises if head_dim does not pack into whole bytes
            if residual is None:
                residual = group
            check_int("residual", residual, 0)
            if residual % group:
                raise ValueError("residual must be 0 or a multiple of group (%d) for %s, got %d"
                                 % (group, dtype, residual))
        else:
            if residual is None:
                residual = 0
            check_int("residual", residual, 0)
            if residual:
                raise ValueError("residual applies to i4 and i2 only, got %d for %s" % (residual, dtype))
        if window:
            if sinks + window > max_tokens:
                raise ValueError("sinks + window (%d) must be <= max_tokens (%d)" % (sinks + window, max_tokens))
            if prefix > sinks:
                raise ValueError("prefix (%d) must be <= sinks (%d) with a window: only sinks live for ever"
                                 % (prefix, sinks))
        else:
            if sinks:
                raise ValueError("sinks (%d) need a window" % sinks)
            if prefix > max_tokens:
                raise ValueError("prefix (%d) must be <= max_tokens (%d)" % (prefix, max_tokens))
        if dtype in LOWBIT and residual:
            # per-channel key groups must tile the quantized slots exactly, ring and sinks separately; the
            # residual's tokens must still be cached when their group is quantized (ring >= R + G)
            if window:
                if window % group:
                    raise ValueError("window (%d) must be a multiple of group (%d) for %s" % (window, group, dtype))
                if (sinks - prefix) % group:
                    raise ValueError("sinks - prefix (%d) must be a multiple of group (%d) for %s; "
                                     "set prefix = sinks to keep sinks at f32" % (sinks - prefix, group, dtype))
                if window < residual + group:
                    raise ValueError("window (%d) must be >= residual + group (%d) for %s: the ring must hold "
                                     "the f32 residual and the group leaving it" % (window, residual + group, dtype))
            elif (max_tokens - prefix) % group:
                raise ValueError("max_tokens - prefix (%d) must be a multiple of group (%d) for %s"
                                 % (max_tokens - prefix, group, dtype))
        self.layers = layers
        self.heads = heads
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.max_tokens = max_tokens
        self.dtype = dtype
        self.window = window
        self.sinks = sinks
        self.align = align
        self.group = group
        self.residual = residual
        self.prefix = prefix

    @property
    def slots(self):
        """Token slots the cache holds (prefix included)."""
        return cache_slots(self.max_tokens, self.window, self.sinks)

    @property
    def group_size(self):
        """Query heads per KV head (1 = MHA, heads = MQA)."""
        return self.heads // self.kv_heads

    def nbytes(self, detail=False):
        return cache_bytes(self, detail)

    def to_dict(self):
        return {k: getattr(self, k) for k in _FIELDS}

    @classmethod
    def from_dict(cls, d):
        """Build from a dict (e.g. a device config JSON from `kvedge plan`); unknown keys are an error."""
        if not isinstance(d, dict):
            raise ValueError("cache config must be a JSON object, got %r" % (d,))
        for k in d:
            if k not in _FIELDS:
                raise ValueError("unknown cache config field %r" % (k,))
        for k in ("layers", "heads", "kv_heads", "head_dim", "max_tokens"):
            if k not in d:
                raise ValueError("cache config is missing %r" % k)
        return cls(**d)

    def __eq__(self, other):
        return isinstance(other, CacheConfig) and self.to_dict() == other.to_dict()

    def __repr__(self):
        return "CacheConfig(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in _FIELDS)

