# An independent plain-Python model of what a KV cache must hold, and the data the tests feed it.
# Token values are a pure function of (seed, position, layer, K|V, index), so the model never stores them.
import struct


def value(seed, pos, layer, kv, i, head_dim):
    h = (pos * 1103 + layer * 7919 + kv * 104729 + i * 31337 + seed * 613) % 2147483647
    h = (h * 48271 + 11) % 2147483647
    h = (h * 48271) % 2147483647
    x = h / 1073741823.5 - 1.0  # in [-1, 1]
    if kv == 0 and i % head_dim == 1:
        x *= 8.0  # an outlier key channel, as real keys have
    return x


def row(seed, pos, layer, kv, n, head_dim):
    return [value(seed, pos, layer, kv, i, head_dim) for i in range(n)]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


class RefCache:
    """What must be cached: positions alive under the cap / window / sinks rules, nothing about storage."""

    def __init__(self, max_tokens, window=0, sinks=0):
        self.max_tokens, self.window, self.sinks = max_tokens, window, sinks
        self.n = 0

    def can_append(self):
        return bool(self.window) or self.n < self.max_tokens

    def append(self):
        assert self.can_append()
        self.n += 1

    def reset(self):
        self.n = 0

    def live(self):
        if not self.window:
            return list(range(self.n))
        head = list(range(min(self.sinks, self.n)))
        start = max(self.sinks, self.n - self.window)
        return head + list(range(start, self.n))

    def evictions(self):
        return self.n - len(self.live())


def kivi_lo(cfg, n, sealed=0):
    """KIVI (i4/i2 with residual R > 0): how many tokens after the prefix are quantized after n tokens since
    the last reset. The rule, from its definition: a whole group of G leaves the residual as soon as R + G tokens
    would be at f32, so after m = n - P tokens the first G * max(0, (m - R) // G) are quantized and the newest
    R..R+G-1 are exact. `sealed`: the count quantize_residual() left (every whole group then waiting)."""
    G, R = cfg.group, cfg.residual
    lo = G * max(0, (n - cfg.prefix - R) // G)
    return lo if lo > sealed else sealed


def kivi_f32(cfg, n, pos, sealed=0):
    """Is position pos still at f32 in the KIVI residual after n tokens (see kivi_lo)?"""
    if cfg.dtype not in ("i4", "i2") or not cfg.residual or pos < cfg.prefix:
        return False
    return pos - cfg.prefix >= kivi_lo(cfg, n, sealed)


def tolerance(cfg, seed, pos, layer, kv, head, i, slot, n=None):
    """Largest |stored - true| the storage type allows for this element (0 = must be exact f32).
    n: tokens appended since the last reset (KIVI residual rows are exact)."""
    D = cfg.head_dim
    x = row(seed, pos, layer, kv, cfg.kv_heads * D, D)[head * D:(head + 1) * D]
    if cfg.dtype == "f32" or slot < cfg.prefix:
        return 0.0
    if n is not None and kivi_f32(cfg, n, pos):
        return 0.0
    if cfg.dtype == "f16":
        return max(abs(x[i]) * 2.0 ** -11, 2.0 ** -25) * 1.0001
    if cfg.dtype == "i8":
        amax = max(abs(e) for e in x)
        return amax / 127.0 * (1 + 2.0 ** -10) / 2 + amax * 1e-6
    # i4 / i2: asymmetric, zero and scale fitted over the row (values, residual-0 keys) or the channel's group
    if kv == 0 and cfg.residual:
        G = cfg.group
        first = pos - (pos - cfg.prefix) % G  # a key group is G consecutive positions after the prefix
        vals = [row(seed, q, layer, kv, cfg.kv_heads * D, D)[head * D + i] for q in range(first, first + G)]
    else:
        vals = x
    return fit_bound(vals, 15 if cfg.dtype == "i4" else 3)


def minmax_sse(vals, top):
    """Squared error of the group under plain min-max codes (zero = min, scale = span/top, exact floats)."""
    mn, mx = min(vals), max(vals)
    s = (mx - mn) / top
    if not s:
        return 0.0
    e2 = 0.0
    for v in vals:
        q = int((v - mn) / s + 0.5)
        q = top if q > top else q
        e2 += (mn + q * s - v) ** 2
    return e2


def fit_bound(vals, top):
    """Largest |stored - true| for an element of a least-squares-fitted group: the fit's squared error is at most
    min-max's (each refinement lowers it), and the stored halves of zero and scale add at most a few f16 ulps to
    every element."""
    mn, mx = min(vals), max(vals)
    ulps = (abs(mn) + abs(mx) + (mx - mn)) * 2.0 ** -10 + 2.0 ** -22
    return (minmax_sse(vals, top) ** 0.5 + len(vals) ** 0.5 * ulps) * (1 + 2.0 ** -20)
