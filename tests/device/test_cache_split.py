# K and V in formats of their own (CacheConfig's k_dtype, v_dtype; issue 45): the arena against a count from first
# principles, every stored row against a plain-Python quantizer's error bound, each half against the shared cache of
# its format, the float attention against a naive softmax, and refusals that change nothing.
import gc
import struct

from kvedge.compat import zeros
from kvedge.attention import Attention
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from _support import raises, message, preload_floats
from _cacheref import row, fit_bound
from _attref import _fill, reference, rel_err, cosine, _gauss_rows
from _support import Rng
preload_floats()

DTYPES = ("f32", "f16", "i8", "i4", "i2")
G = 4  # key group of the per-channel cases
L, H, KVH, D = 2, 4, 2, 8


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _arena_count(cfg):
    """The arena's bytes from the layout's definition (cache.py's header), not from kvedge.sizes."""
    rowb = {"f32": 4 * cfg.head_dim, "f16": 2 * cfg.head_dim, "i8": cfg.head_dim, "i4": cfg.head_dim // 2,
            "i2": cfg.head_dim // 4}
    a = cfg.align

    def pad(n):
        return n if a <= 1 else (n + a - 1) // a * a
    pairs = cfg.layers * cfg.kv_heads
    N = cfg.max_tokens if not cfg.window else cfg.sinks + cfg.window
    B = N - cfg.prefix
    per_row = {"i8": 2, "i4": 4, "i2": 4}  # i8: an f16 scale; i4/i2: f16 scale and zero
    n = pairs * B * (pad(rowb[cfg.k_dtype]) + pad(rowb[cfg.v_dtype]))
    n += 2 * pairs * cfg.prefix * pad(4 * cfg.head_dim)
    if cfg.residual:  # keys per channel: scale and zero per channel and group, an f32 ring of K and V rows
        n += pairs * ((B + cfg.group - 1) // cfg.group) * cfg.head_dim * 4
        n += 2 * pairs * min(cfg.residual + cfg.group - 1, B) * pad(4 * cfg.head_dim)
    else:
        n += pairs * B * per_row.get(cfg.k_dtype, 0)
    n += pairs * B * per_row.get(cfg.v_dtype, 0)
    return n


def _configs():
    """Every (K, V) pair, keys per token and (i8/i4/i2 keys) per channel, with and without padding and a prefix."""
    for kd in DTYPES:
        for vd in DTYPES:
            for res in ((0, G, 2 * G) if kd in ("i8", "i4", "i2") else (0,)):
                for align, prefix in ((0, 0), (16, 2)):
                    yield CacheConfig(L, H, KVH, D, prefix + 6 * G, k_dtype=kd, v_dtype=vd, group=G, residual=res,
                                      align=align, prefix=prefix)


def test_split_arena_equals_its_formula_for_every_pair():
    n = 0
    for cfg in _configs():
        want = _arena_count(cfg)
        d = cfg.nbytes(True)
        assert cfg.nbytes() == want == d["total"], (cfg, cfg.nbytes(), want)
        assert d["k"] + d["v"] == d["total"], (cfg, d)
        assert d["data"] + d["meta"] + d["prefix"] + d["residual"] == d["total"], (cfg, d)
        c = KVCache(cfg)  # raises if its layout's end differs from the formula
        assert len(c.arena) == want, cfg
        del c
        gc.collect()
        n += 1
    assert n == 2 * (2 * 5 + 3 * 5 * 3)


def test_shorthand_is_the_pair_of_one_format():
    for dt in DTYPES:
        a = CacheConfig(L, H, KVH, D, 32, dt, group=G, align=0)
        b = CacheConfig(L, H, KVH, D, 32, k_dtype=dt, v_dtype=dt, group=G, align=0)
        assert a == b and a.dtype == b.dtype == dt and not b.split, dt
        assert "k_dtype" not in a.to_dict() and a.to_dict()["dtype"] == dt  # plan files keep their shape
    s = CacheConfig(L, H, KVH, D, 32, k_dtype="i8", v_dtype="i4", align=0)
    assert s.dtype == "i8/i4" and s.residual == 0 and s.to_dict()["k_dtype"] == "i8" and s.to_dict()["dtype"] == s.dtype
    assert CacheConfig.from_dict(s.to_dict()) == s
    pc = CacheConfig(L, H, KVH, D, 32, k_dtype="i8", v_dtype="i8", group=G, residual=G, align=0)
    assert pc.split and pc.dtype == "i8/i8" and CacheConfig.from_dict(pc.to_dict()) == pc
    # dtype names the half not given
    assert CacheConfig(L, H, KVH, D, 32, "f16", v_dtype="i4", align=0).k_dtype == "f16"


def _true(cfg, seed, pos, layer, kv, h):
    return row(seed, pos, layer, kv, cfg.kv_heads * cfg.head_dim, cfg.head_dim)[h * D:(h + 1) * D]


def _bound(cfg, seed, pos, layer, kv, h, i, n):
    """Largest |stored - true| of element i: a plain-Python account of each half's format."""
    x = _true(cfg, seed, pos, layer, kv, h)
    dt = cfg.k_dtype if kv == 0 else cfg.v_dtype
    if pos < cfg.prefix or dt == "f32":
        return abs(_f32(x[i]) - x[i])
    per_channel = kv == 0 and cfg.residual
    s = pos - cfg.prefix
    if cfg.residual and s >= G * max(0, (n - cfg.prefix - cfg.residual) // G):
        return abs(_f32(x[i]) - x[i])  # still in the f32 residual
    if dt == "f16":
        return max(abs(x[i]) * 2.0 ** -11, 2.0 ** -25) * 1.0001
    if dt == "i8" and not per_channel:  # symmetric: scale = amax / 127 rounded up to a half
        amax = max(abs(e) for e in x)
        return amax / 127.0 * (1 + 2.0 ** -10) / 2 + amax * 1e-6
    top = {"i8": 255, "i4": 15, "i2": 3}[dt]
    if per_channel:
        first = pos - s % G
        vals = [_true(cfg, seed, q, layer, 0, h)[i] for q in range(first, first + G)]
    else:
        vals = x
    return fit_bound(vals, top)


def _filled(cfg, seed, n):
    c = KVCache(cfg)
    for p in range(n):
        c.append([row(seed, p, layer, 0, KVH * D, D) for layer in range(L)],
                 [row(seed, p, layer, 1, KVH * D, D) for layer in range(L)])
    return c


PAIRS = (("i8", "i8", G), ("i8", "i4", 0), ("i8", "i4", G), ("i4", "i8", G), ("f16", "i4", 0), ("f16", "i8", 0),
         ("i2", "f32", 2 * G), ("f32", "i2", 0), ("i4", "f16", 0))


def test_split_rows_within_each_halfs_quantizer():
    out = zeros("f", D)
    for j, (kd, vd, res) in enumerate(PAIRS):
        cfg = CacheConfig(L, H, KVH, D, 2 + 5 * G, k_dtype=kd, v_dtype=vd, group=G, residual=res, align=0, prefix=2)
        n = 2 + 4 * G + 1
        seed = 5 + j
        c = _filled(cfg, seed, n)
        for p in range(n):
            for layer in range(L):
                for h in range(KVH):
                    for kv in (0, 1):
                        c.read(layer, h, p, kv, out)
                        x = _true(cfg, seed, p, layer, kv, h)
                        for i in range(D):
                            err = abs(out[i] - x[i])
                            assert err <= _bound(cfg, seed, p, layer, kv, h, i, n), (kd, vd, res, p, kv, i, err)
        del c
        gc.collect()


def _shared_twin(cfg, dt, kv):
    """The shared cache of one half's format that stores that half the same way (None: no shared twin)."""
    res = cfg.residual if kv == 0 else 0
    if kv == 0 and dt == "i8" and res:
        return None  # i8 keys per channel exist only in a split cache
    if dt not in ("i4", "i2") and res:
        res = 0
    return CacheConfig(L, H, KVH, D, cfg.max_tokens, dt, group=G, residual=res if dt in ("i4", "i2") else None,
                       align=cfg.align, prefix=cfg.prefix)


def test_each_half_stores_what_the_shared_cache_of_its_format_stores():
    # A split cache's K rows are the shared k_dtype cache's, its V rows the shared v_dtype cache's: bit for bit where
    # both hold the row quantized (a value row in a per-channel cache's f32 residual is checked exact above)
    a, b = zeros("f", D), zeros("f", D)
    for j, (kd, vd, res) in enumerate(PAIRS):
        cfg = CacheConfig(L, H, KVH, D, 2 + 5 * G, k_dtype=kd, v_dtype=vd, group=G, residual=res, align=16, prefix=2)
        n = 2 + 4 * G + 2
        seed = 40 + j
        c = _filled(cfg, seed, n)
        lo = G * max(0, (n - 2 - res) // G) if res else n
        for kv, dt in ((0, kd), (1, vd)):
            tcfg = _shared_twin(cfg, dt, kv)
            if tcfg is None:
                continue
            t = _filled(tcfg, seed, n)
            for p in range(n):
                if kv == 1 and p - 2 >= lo and not t.kivi:
                    continue
                for layer in range(L):
                    for h in range(KVH):
                        c.read(layer, h, p, kv, a)
                        t.read(layer, h, p, kv, b)
                        for i in range(D):
                            assert a[i] == b[i], (kd, vd, res, kv, p, i, a[i], b[i])
            del t
            gc.collect()
        del c
        gc.collect()


def test_float_attention_over_a_split_cache():
    row_ = zeros("f", D)
    for j, (kd, vd, res) in enumerate(PAIRS):
        cfg = CacheConfig(1, H, KVH, D, 6 * G, k_dtype=kd, v_dtype=vd, group=G, residual=res, align=0)
        rng = Rng(70 + j)
        c, K, V = _fill(cfg, rng, 5 * G + 1)
        n = 5 * G + 1
        # the rows as stored (dequantized by read()), one flat list per position like _fill's
        SK = [[zeros("f", KVH * D)] for _ in range(n)]
        SV = [[zeros("f", KVH * D)] for _ in range(n)]
        for p in range(n):
            for h in range(KVH):
                for kv, dst in ((0, SK), (1, SV)):
                    c.read(0, h, p, kv, row_)
                    for i in range(D):
                        dst[p][0][h * D + i] = row_[i]
        q = _gauss_rows(rng, H * D, D)
        att = Attention(c, tile=8)
        assert not att.int_ok  # no integer path reads a split cache: the float path serves it
        out = zeros("f", H * D)
        att.step(0, q, out)
        live = list(range(n))
        err = rel_err(out, reference(cfg, SK, SV, live, 0, q))
        assert err <= 1e-5, (kd, vd, res, err)  # the tiled online softmax over the stored rows: float rounding only
        cs = cosine(out, reference(cfg, K, V, live, 0, q))
        assert cs >= (0.9 if "i2" in (kd, vd) else 0.99), (kd, vd, res, cs)  # and near the true rows' output
        del c, K, V, SK, SV, att
        gc.collect()


def test_bad_split_configs_are_refused_precisely():
    def refused(frag, **kw):
        e = raises(ValueError, CacheConfig, L, H, KVH, D, 32, **kw)
        assert frag in message(e), (kw, message(e))
    refused("k_dtype must be one of", k_dtype="i3")
    refused("v_dtype must be one of", v_dtype="q8_0")
    refused("residual applies to i4 and i2 only (and i8 keys given as k_dtype), got 4 for f16", k_dtype="f16",
            v_dtype="i4", residual=4)
    refused("residual applies to i4 and i2 only", dtype="i8", residual=32)  # the shorthand's i8 as before
    refused("got 32 for i8", dtype="i8", residual=32)
    refused("residual must be 0 or a multiple of group (4) for i8", k_dtype="i8", v_dtype="i4", group=4, residual=6)
    refused("max_tokens - prefix (31) must be a multiple of group (4) for i8", k_dtype="i8", v_dtype="f16",
            group=4, residual=4, prefix=1)
    e = raises(ValueError, CacheConfig, L, H, KVH, 6, 32, k_dtype="f16", v_dtype="i2")
    assert "head_dim must be a multiple of 4 for i2" in message(e)
    e = raises(ValueError, CacheConfig.from_dict, {"layers": 1, "heads": 1, "kv_heads": 1, "head_dim": 8,
                                                    "max_tokens": 8, "dtype": "i8/i4"})
    assert "dtype 'i8/i4' does not name this config's k_dtype and v_dtype (f32)" in message(e)
    d = CacheConfig(1, 1, 1, 8, 8, k_dtype="i8", v_dtype="i8", align=0).to_dict()
    d.update(dtype="i8/i8", k_dtype="i8", v_dtype="i8")  # i8 keys per token and i8 values: the shorthand "i8"
    assert "(i8)" in message(raises(ValueError, CacheConfig.from_dict, d))


def test_refused_writes_change_nothing():
    # each half's range is its own: f16 keys refuse what f32 values take, i8 values what f16 keys take
    for kd, vd, bad_k, bad_v in (("f16", "f32", 7e4, 1.0), ("f16", "i8", 1.0, 127 * 65504.0 * 2)):
        cfg = CacheConfig(L, H, KVH, D, 8, k_dtype=kd, v_dtype=vd, align=0)
        c = KVCache(cfg)
        good = [0.5] * (KVH * D)
        c.append([good] * L, [good] * L)
        before = bytes(c.arena)
        k = [bad_k] + [0.0] * (KVH * D - 1)
        v = [bad_v] + [0.0] * (KVH * D - 1)
        raises(ValueError, c.append, [k] * L, [v] * L)
        assert bytes(c.arena) == before and c.n_seen == 1 and c.n_cached == 1, (kd, vd)
        c.start_token()
        raises(ValueError, c.write, 0, k, v)
        assert bytes(c.arena) == before, (kd, vd)
        del c
        gc.collect()


def test_integer_paths_refuse_a_split_cache():
    cfg = CacheConfig(L, H, KVH, D, 8, k_dtype="i8", v_dtype="i4", align=0)
    c = KVCache(cfg)
    assert not c.int_ok
    e = raises(TypeError, c.read_codes, 0, 0, 0, 0, zeros("b", D))
    assert "needs an i8 cache, this one is i8/i4" in message(e)
    from kvedge.model import passes
    assert passes.choose("i8", cfg.dtype, "viper") == passes.FLOAT
