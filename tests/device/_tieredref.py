# Shared by the tiered cache's device tests (test_tier_cache.py, test_tier_store.py): deterministic tokens, the
# store's files, and a plain-Python full-softmax reference over the positions that must be live.
import math

from kvedge.attention import quantize_query, dequantize_output
from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.tier.cache import TieredCache
from _support import Rng

PATH = "_kvedge_tiered_test"
FILES = (".h0", ".h1", ".s", ".0", ".1")  # the store's files: two headers, the sinks, two segments


def remove(path=PATH):
    import os
    for x in FILES:
        try:
            os.remove(path + x)
        except OSError:
            pass


def size(path=PATH, files=FILES):
    """Bytes of the store's files."""
    import os
    n = 0
    for x in files:
        try:
            n += os.stat(path + x)[6]
        except OSError:
            pass
    return n


def token(seed, pos, layer, kb, vb, D):
    """K and V of (pos, layer), regenerated on demand so the reference stores nothing; key channel 1 of every
    head is an x8 outlier, as real keys have."""
    r = Rng(seed * 100003 + pos * 17 + layer)
    for i in range(len(kb)):
        kb[i] = r.gauss() * (8.0 if i % D == 1 else 1.0)
        vb[i] = r.gauss()


def feed(tc, seed, n):
    cfg = tc.cfg
    kv = cfg.kv_heads * cfg.head_dim
    ks = [zeros("f", kv) for _ in range(cfg.layers)]
    vs = [zeros("f", kv) for _ in range(cfg.layers)]
    for _ in range(n):
        pos = tc.ring.n_seen
        for layer in range(cfg.layers):
            token(seed, pos, layer, ks[layer], vs[layer], cfg.head_dim)
        assert tc.append(ks, vs) == pos


def live_positions(tc):
    out = zeros("i", tc.size["tokens"])
    n = tc.positions(out)
    return [out[i] for i in range(n)]


def exact_rows(seed, D, kvh):
    """rows(pos, layer, h, kv, out) of the exact inputs; each token is generated once per reference."""
    memo = {}

    def rows(pos, layer, h, kv, out):
        t = memo.get((pos, layer))
        if t is None:
            t = memo[(pos, layer)] = (zeros("f", kvh * D), zeros("f", kvh * D))
            token(seed, pos, layer, t[0], t[1], D)
        src = t[kv]
        for i in range(D):
            out[i] = src[h * D + i]
    return rows


def stored_rows(tc):
    return lambda pos, layer, h, kv, out: tc.read(layer, h, pos, kv, out)


def reference(cfg, rows, live, layer, q):
    """softmax(q_h . k / sqrt(D)) v over `live`, with the full score vector; rows(pos, layer, h, kv, out)."""
    D, H = cfg.head_dim, cfg.heads
    g = H // cfg.kv_heads
    out = zeros("d", H * D)
    w = zeros("d", len(live))
    row = zeros("f", D)
    for h in range(H):
        m = -1e300
        for j in range(len(live)):
            rows(live[j], layer, h // g, 0, row)
            s = 0.0
            for i in range(D):
                s += q[h * D + i] * row[i]
            s /= math.sqrt(D)
            w[j] = s
            if s > m:
                m = s
        lsum = 0.0
        for j in range(len(live)):
            w[j] = math.exp(w[j] - m)
            lsum += w[j]
        for j in range(len(live)):
            rows(live[j], layer, h // g, 1, row)
            for i in range(D):
                out[h * D + i] += w[j] * row[i]
        for i in range(D):
            out[h * D + i] /= lsum
    return out


def rel_err(a, b):
    return max(abs(a[i] - b[i]) for i in range(len(b))) / max(abs(x) for x in b)


def cosine(a, b):
    dot = sum(a[i] * b[i] for i in range(len(b)))
    return dot / math.sqrt(sum(x * x for x in a) * sum(x * x for x in b))


def query(cfg, seed):
    r = Rng(seed)
    q = zeros("f", cfg.heads * cfg.head_dim)
    for i in range(len(q)):
        q[i] = r.gauss()
    return q


def int_out(tc, layer, q):
    n = tc.heads * tc.D
    qc, qs, oq, oe = zeros("b", n), zeros("H", tc.heads), zeros("i", n), zeros("i", tc.heads)
    quantize_query(q, qc, qs, tc.heads)
    tc.step_q8(layer, qc, qs, oq, oe)
    out = zeros("f", n)
    dequantize_output(oq, oe, out, tc.heads)
    return out, list(oq) + list(oe)


def cfg_of(heads, kvh, D, W, S, dtype="f32", layers=2, f32_sinks=True):
    return CacheConfig(layers, heads, kvh, D, S + W, dtype, window=W, sinks=S, prefix=S if f32_sinks else 0,
                       align=0, group=8)


# heads, kv_heads, head_dim, window, sinks, block, cold blocks, tokens, layers, f32 sinks: MHA, GQA 2 and 4, MQA;
# the streams wrap the ring many times and pass the cold cap (oldest blocks dropped). Rings of 2-2.5 KB at f32:
# a 215 KB unix-port heap, fragmented by compiling the package from source, has no much larger free block.
SHAPES = [
    (2, 2, 8, 8, 2, 4, 5, 90, 2, True),
    (4, 2, 16, 8, 0, 4, 4, 60, 1, True),
    (8, 2, 8, 16, 4, 8, 4, 100, 1, False),
    (4, 1, 32, 8, 1, 4, 4, 50, 1, True),
]


def case(shape, dtype, cold, seed, tile=8, f32_sinks=None):
    H, KVH, D, W, S, B, C, n = shape[:8]
    L = shape[8] if len(shape) > 8 else 2
    if f32_sinks is None:
        f32_sinks = shape[9] if len(shape) > 9 else True
    tc = TieredCache(cfg_of(H, KVH, D, W, S, dtype, L, f32_sinks), PATH, block=B, cold=cold, cold_blocks=C,
                     tile=tile, fresh=True)
    feed(tc, seed, n)
    return tc
