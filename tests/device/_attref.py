# Shared by the attention tests: cases, random rows, a filled cache with its true K/V, and a naive full-softmax
# reference (plain Python). The tests are split in two files so each compiles within a board-sized heap.
import math

from kvedge.compat import float_array, zeros
from kvedge.attention import Attention, quantize_query, dequantize_output
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from _support import Rng
from _cacheref import RefCache


def _gauss_rows(rng, n, D, outliers=False):
    r = zeros("f", n)  # compact: the reference keeps every position on a 210 KB heap
    for i in range(n):
        r[i] = rng.gauss()
    if outliers:  # a few outlier key channels, as real keys have
        for i in range(0, n, D):
            r[i + 1] *= 6.0
            r[i + D - 1] *= 4.0
    return r


def _fill(cfg, rng, n_tokens, cls=KVCache):
    """A cache (of class cls) with n_tokens appended (window wraps as configured) and the true K/V of every
    position."""
    c = cls(cfg)
    kv_dim = cfg.kv_heads * cfg.head_dim
    K, V = [], []
    for p in range(n_tokens):
        ks = [_gauss_rows(rng, kv_dim, cfg.head_dim, True) for _ in range(cfg.layers)]
        vs = [_gauss_rows(rng, kv_dim, cfg.head_dim) for _ in range(cfg.layers)]
        c.append(ks, vs)
        K.append(ks)
        V.append(vs)
    return c, K, V


_OUT = float_array(256)  # the reference's buffers, allocated at import while the heap is still compact: later a
_W = float_array(80)  # 2 KB block may not exist between the cached rows and the attention path's garbage


def reference(cfg, K, V, live, layer, q, mapping=None):
    """softmax(q_h . k / sqrt(D)) v over `live` positions, with the full score vector (no tiling).
    Buffers are arrays allocated up front: lists of boxed floats fragment a small MicroPython heap. The
    result is a view of a shared buffer: use it before the next call."""
    D, H = cfg.head_dim, cfg.heads
    group = H // cfg.kv_heads
    out = _OUT if H * D <= len(_OUT) else float_array(H * D)
    w = _W if len(live) <= len(_W) else float_array(len(live))
    for i in range(H * D):
        out[i] = 0.0
    for h in range(H):
        kvh = mapping(h) if mapping else h // group
        m = -1e300
        for j in range(len(live)):
            k = K[live[j]][layer]
            s = 0.0
            for i in range(D):
                s += q[h * D + i] * k[kvh * D + i]
            s /= math.sqrt(D)
            w[j] = s
            if s > m:
                m = s
        l = 0.0
        for j in range(len(live)):
            w[j] = math.exp(w[j] - m)
            l += w[j]
        for j in range(len(live)):
            v = V[live[j]][layer]
            for i in range(D):
                out[h * D + i] += w[j] * v[kvh * D + i]
        for i in range(D):
            out[h * D + i] /= l
    return memoryview(out)[:H * D]


def rel_err(a, b):
    return max(abs(a[i] - b[i]) for i in range(len(b))) / max(abs(x) for x in b)


def cosine(a, b):
    dot = sum(a[i] * b[i] for i in range(len(b)))
    return dot / math.sqrt(sum(x * x for x in a) * sum(x * x for x in b))


# (heads, kv_heads, head_dim, tokens appended, window, sinks): GQA ratios 1, 2, 4, 8 and MQA
CASES = [
    (2, 2, 8, 30, 0, 0),
    (4, 2, 16, 50, 24, 2),
    (8, 2, 8, 70, 16, 4),
    (8, 1, 32, 40, 12, 1),
    (4, 4, 16, 12, 0, 0),
    (2, 1, 128, 12, 4, 2),
]


def _case(dtype, case, seed, tile=8, residual=4):
    H, KVH, D, n, window, sinks = case
    max_tokens = max(n, window + sinks)
    if dtype in ("i4", "i2"):  # KIVI group 4: a ring of whole groups, at least residual + group
        window = max(residual + 4, window - window % 4) if window else 0
        max_tokens = n if not window else max(window + sinks, n)
        if not window:
            max_tokens = (n + 3) // 4 * 4
    kw = dict(window=window, sinks=sinks, align=0)
    if dtype in ("i4", "i2"):
        kw.update(group=4, prefix=sinks, residual=residual)
    cfg = CacheConfig(1, H, KVH, D, max_tokens, dtype, **kw)
    rng = Rng(seed)
    c, K, V = _fill(cfg, rng, n)
    ref = RefCache(cfg.max_tokens, cfg.window, cfg.sinks)
    ref.n = n
    q = _gauss_rows(rng, H * D, D)
    return cfg, c, K, V, ref.live(), q, Attention(c, tile=tile)


def _int_step(att, cfg, q):
    n = cfg.heads * cfg.head_dim
    qc, qs = zeros("b", n), zeros("H", cfg.heads)
    oq, oe = zeros("i", n), zeros("i", cfg.heads)
    quantize_query(q, qc, qs, cfg.heads)
    # the fixed-point core (q8_step, after step_q8's own checks but its range's): the cases run past
    # Q8_RANGE, where step_q8 refuses (issue 46), and pin its arithmetic there too
    att.check_step_q8(0, qc, qs, oq, oe)
    att.q8_step(0, qc, qs, oq, oe, None, None, -1)
    out = zeros("f", n)
    dequantize_output(oq, oe, out, cfg.heads)
    return out, oq, oe


def _same(a, b):
    """Element-wise equality without building lists (a fragmented small heap has no room for them)."""
    if len(a) != len(b):
        return False
    for i in range(len(a)):
        if a[i] != b[i]:
            return False
    return True
