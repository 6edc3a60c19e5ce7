# Attention's integer path (step_q8 on i8, i4 and i2 caches) against the naive float reference, the same bits
# from every kernel kind, and no allocation under heap_lock.
import gc

from kvedge import kernels
from kvedge.compat import zeros
from kvedge.attention import Attention, quantize_query
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from _support import Rng, need, under_heap_lock
from _attref import CASES, reference, cosine, _case, _fill, _gauss_rows, _int_step, _same
from _attint import _int_case


def test_integer_path_i8_cosine_and_same_bits_on_every_kernel():
    for i, case in enumerate(CASES):
        cs = _int_case(case, 40 + i)
        assert cs >= 0.999, (case, cs)
        gc.collect()


def _int_prefix_case(dtype, residual, seed):
    cfg = CacheConfig(1, 4, 2, 16, 40, dtype, prefix=4, residual=residual, group=4, align=0)
    rng = Rng(seed)
    c, K, V = _fill(cfg, rng, 27)  # i4: 27 - 4 = 23 rows, the last 7 still in the residual (R = 4)
    q = _gauss_rows(rng, 64, 16)
    att = Attention(c, tile=8)
    out, oq, oe = _int_step(att, cfg, q)
    return cosine(out, reference(cfg, K, V, list(range(27)), 0, q))


def test_integer_path_with_prefix_rows():
    assert _int_prefix_case("i8", None, 46) >= 0.999
    gc.collect()
    kivi = _int_prefix_case("i4", None, 47)
    gc.collect()
    naive = _int_prefix_case("i4", 0, 47)  # same data, keys quantized per token
    assert kivi >= 0.99, kivi
    # per-token int4 keys lose to the outlier channels, as KIVI reports: the design choice is measurable
    assert naive < kivi and naive >= 0.9, (naive, kivi)


def test_integer_path_with_large_query_and_key_scales():
    # scales whose f16 exponents add up past 28 (q_amax * k_amax ~ 20,000): the scores 353.6 and 176.8 fit
    c = KVCache(CacheConfig(1, 1, 1, 8, 4, "i8", align=0))
    c.append([[10.0, 200.0, 0, 0, 0, 0, 0, 0]], [[1.0] * 8])
    c.append([[5.0, 200.0, 0, 0, 0, 0, 0, 0]], [[-1.0] * 8])
    q = zeros("f", 8)
    q[0] = 100.0
    att = Attention(c)
    for kind in kernels.available():
        att.k = kernels.select(kind)
        out = _int_step(att, c.cfg, q)[0]
        assert abs(out[0] - 1.0) < 0.01, (kind, out[0])  # all weight on the first token
    kernels.select()


def _int_steps(att, qc, qs, oq, oe, layers):
    for layer in range(layers):
        att.q8_step(layer, qc, qs, oq, oe, None, None, -1)  # the core: these rows run past Q8_RANGE
    return oe[0]


def _locked_case(cfg, n_tokens, seed):
    c = KVCache(cfg)
    rng = Rng(seed)
    kv = cfg.kv_heads * cfg.head_dim
    for p in range(n_tokens):
        c.append([_gauss_rows(rng, kv, cfg.head_dim, True) for _ in range(cfg.layers)],
                 [_gauss_rows(rng, kv, cfg.head_dim) for _ in range(cfg.layers)])
    _locked_steps(c, _gauss_rows(rng, cfg.heads * cfg.head_dim, cfg.head_dim))


def _locked_steps(c, q):
    """step_q8 over every layer of c, warm and then under heap_lock, with every kernel kind: same output."""
    cfg = c.cfg
    att = Attention(c, tile=32)
    n = cfg.heads * cfg.head_dim
    qc, qs, oq, oe = zeros("b", n), zeros("H", cfg.heads), zeros("i", n), zeros("i", cfg.heads)
    quantize_query(q, qc, qs, cfg.heads)
    first = None
    for kind in kernels.available():
        att.k = kernels.select(kind)
        _int_steps(att, qc, qs, oq, oe, cfg.layers)  # warm
        before = list(oq)
        under_heap_lock(_int_steps, att, qc, qs, oq, oe, cfg.layers)
        assert list(oq) == before, kind
        if first is None:
            first = before
        assert before == first, kind  # the same bits from every kernel kind
    kernels.select()


def test_integer_step_allocates_nothing_up_to_the_cap():
    need("heap_lock")
    # i8: 8 heads, 2 KV heads, head_dim 16, 2 layers, filled to its cap of 96 tokens
    _locked_case(CacheConfig(2, 8, 2, 16, 96, "i8", align=0), 96, 90)
    gc.collect()
    # i4 (KIVI) with f32 sinks and a sliding f32 residual of 2 groups (20 rows at f32), ring wrapped twice
    _locked_case(CacheConfig(1, 8, 2, 16, 40, "i4", window=32, sinks=4, prefix=4, group=8, residual=16,
                             align=0), 80, 91)
    gc.collect()
    # i2 (KIVI) the same way, and i2 with per-token keys filled to its cap
    _locked_case(CacheConfig(1, 8, 2, 16, 40, "i2", window=32, sinks=4, prefix=4, group=8, residual=16,
                             align=0), 80, 92)
    gc.collect()
    _locked_case(CacheConfig(1, 4, 1, 8, 48, "i2", residual=0, align=0), 48, 93)


def test_integer_step_on_extreme_low_bit_rows_allocates_nothing():
    need("heap_lock")
    # rows mixing f16's extremes (6e4 beside 1e-4 and subnormal scales): every intermediate of the i4/i2
    # conversion and the tile kernels stays a small int; on the 32-bit port a larger one would be a heap long,
    # which heap_lock turns into a MemoryError
    vals = (60000.0, -60000.0, 1e-4, -3e-5, 2.0 ** -14, 30000.0, -0.5, 0.0, 6e-8, -65000.0)
    for dt in ("i4", "i2"):
        for residual in (4, 0):
            c = KVCache(CacheConfig(1, 4, 1, 8, 24, dt, window=16, group=4, residual=residual, align=0))
            k = zeros("f", 8)
            v = zeros("f", 8)
            for p in range(30):
                for i in range(8):
                    k[i] = vals[(i + p) % 10]
                    v[i] = vals[(3 * i + p) % 10] * 0.5
                c.append([k], [v])
            q = zeros("f", 32)
            for i in range(32):
                q[i] = vals[i % 10] * 1e-3
            _locked_steps(c, q)
            c = None
            gc.collect()
