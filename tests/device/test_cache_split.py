# K and V in formats of their own (kvedge.kvsplit: SplitConfig, SplitCache; issue 45 item 5): the arena against a
# count from first principles, every stored row against a plain-Python quantizer's error bound, each half against
# the shared cache of its format, the float attention against a plain-Python softmax (numpy on the host:
# tests/host/test_kvsplit_numpy.py), windows, sinks, H2O and sessions, and refusals that change nothing.
import gc
import struct

from kvedge.compat import zeros
from kvedge.attention import Attention
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from kvedge.kvsplit import SplitCache, SplitConfig
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
    """The arena's bytes from the layout's definition (kvsplit.py's header), not from its formula."""
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


def _split(kd, vd, res):
    """Whether (kd, vd, residual) is a split (the others are shared formats, which SplitConfig refuses)."""
    return kd != vd or (kd == "i8" and res)


def _configs():
    """Every split (K, V) pair, keys per token and (i8/i4/i2 keys) per channel, with and without padding and a
    prefix."""
    for kd in DTYPES:
        for vd in DTYPES:
            for res in ((0, G, 2 * G) if kd in ("i8", "i4", "i2") else (0,)):
                if not _split(kd, vd, res):
                    continue
                for align, prefix in ((0, 0), (16, 2)):
                    yield SplitConfig(L, H, KVH, D, prefix + 6 * G, k_dtype=kd, v_dtype=vd, group=G, residual=res,
                                      align=align, prefix=prefix)


def test_split_arena_equals_its_formula_for_every_pair():
    n = 0
    for cfg in _configs():
        want = _arena_count(cfg)
        d = cfg.nbytes(True)
        assert cfg.nbytes() == want == d["total"], (cfg, cfg.nbytes(), want)
        assert d["k"] + d["v"] == d["total"], (cfg, d)
        assert d["data"] + d["meta"] + d["prefix"] + d["residual"] == d["total"], (cfg, d)
        c = SplitCache(cfg)  # raises if its layout's end differs from the formula
        assert len(c.arena) == want, cfg
        del c
        gc.collect()
        n += 1
    assert n == 2 * (2 * 4 + 3 * 5 * 3 - 2 * 3 - 1)  # 2 float keys x 4 other values; i8/i4/i2 x 5 x 3 less shared


def test_a_split_config_round_trips_and_names_its_halves():
    s = SplitConfig(L, H, KVH, D, 32, k_dtype="i8", v_dtype="i4", align=0)
    assert s.dtype == "i8/i4" and s.residual == 0 and s.to_dict()["k_dtype"] == "i8" and s.to_dict()["dtype"] == s.dtype
    assert SplitConfig.from_dict(s.to_dict()) == s and isinstance(s, CacheConfig)
    pc = SplitConfig(L, H, KVH, D, 32, k_dtype="i8", v_dtype="i8", group=G, residual=G, align=0)
    assert pc.dtype == "i8/i8" and SplitConfig.from_dict(pc.to_dict()) == pc
    assert SplitConfig(L, H, KVH, D, 32, k_dtype="i4", v_dtype="i8", group=G, align=0).residual == G  # KIVI keys
    assert pc.code != s.code != SplitConfig(L, H, KVH, D, 32, k_dtype="i4", v_dtype="i8", align=0).code
    # a shared config's dict stays what it was (plan files keep their shape)
    assert "k_dtype" not in CacheConfig(L, H, KVH, D, 32, "i8", align=0).to_dict()


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
    c = SplitCache(cfg) if isinstance(cfg, SplitConfig) else KVCache(cfg)
    for p in range(n):
        c.append([row(seed, p, layer, 0, KVH * D, D) for layer in range(L)],
                 [row(seed, p, layer, 1, KVH * D, D) for layer in range(L)])
    return c


PAIRS = (("i8", "i8", G), ("i8", "i4", 0), ("i8", "i4", G), ("i4", "i8", G), ("f16", "i4", 0), ("f16", "i8", 0),
         ("i2", "f32", 2 * G), ("f32", "i2", 0), ("i4", "f16", 0))


def test_split_rows_within_each_halfs_quantizer():
    out = zeros("f", D)
    for j, (kd, vd, res) in enumerate(PAIRS):
        cfg = SplitConfig(L, H, KVH, D, 2 + 5 * G, k_dtype=kd, v_dtype=vd, group=G, residual=res, align=0, prefix=2)
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
        cfg = SplitConfig(L, H, KVH, D, 2 + 5 * G, k_dtype=kd, v_dtype=vd, group=G, residual=res, align=16, prefix=2)
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
        cfg = SplitConfig(1, H, KVH, D, 6 * G, k_dtype=kd, v_dtype=vd, group=G, residual=res, align=0)
        rng = Rng(70 + j)
        c, K, V = _fill(cfg, rng, 5 * G + 1, SplitCache)
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
        e = raises(ValueError, SplitConfig, L, H, KVH, D, 32, **kw)
        assert frag in message(e), (kw, message(e))
    refused("k_dtype must be one of", k_dtype="i3", v_dtype="i8")
    refused("v_dtype must be one of", k_dtype="i8", v_dtype="q8_0")
    refused("residual (keys per channel) applies to i8, i4 and i2 keys, got 4 for f16 keys", k_dtype="f16",
            v_dtype="i4", residual=4)
    refused("residual must be 0 or a multiple of group (4), got 6", k_dtype="i8", v_dtype="i4", group=4, residual=6)
    refused("max_tokens - prefix (31) must be a multiple of group (4) for i8 keys per channel", k_dtype="i8",
            v_dtype="f16", group=4, residual=4, prefix=1)
    refused("window (8) must be >= residual + group (16) for i8 keys per channel", k_dtype="i8", v_dtype="i4",
            group=8, residual=8, window=8)
    refused("k_dtype and v_dtype are both i4 (keys per channel): a shared cache, CacheConfig(dtype='i4')", k_dtype="i4",
            v_dtype="i4")
    refused("k_dtype and v_dtype are both i8: a shared cache", k_dtype="i8", v_dtype="i8")
    refused("dtype 'i4/i8' does not name k_dtype/v_dtype (i8/i4)", k_dtype="i8", v_dtype="i4", dtype="i4/i8")
    e = raises(ValueError, SplitConfig, L, H, KVH, 6, 32, k_dtype="f16", v_dtype="i2")
    assert "head_dim must be a multiple of 4 for i2" in message(e)
    e = raises(ValueError, SplitConfig.from_dict, {"layers": 1, "heads": 1, "kv_heads": 1, "head_dim": 8,
                                                   "max_tokens": 8, "k_dtype": "i8", "v_dtype": "i4", "x": 1})
    assert "unknown cache config field 'x'" in message(e)
    e = raises(ValueError, SplitConfig.from_dict, {"layers": 1, "heads": 1, "kv_heads": 1, "head_dim": 8,
                                                   "max_tokens": 8, "dtype": "i8/i4", "k_dtype": "i8"})
    assert "cache config is missing 'v_dtype'" in message(e)
    # the core's own classes refuse what they do not store
    e = raises(TypeError, SplitCache, CacheConfig(L, H, KVH, D, 8, "i8"))
    assert "cfg must be a SplitConfig" in message(e)


def test_refused_writes_change_nothing():
    # each half's range is its own: f16 keys refuse what f32 values take, i8 values what f16 keys take
    for kd, vd, bad_k, bad_v in (("f16", "f32", 7e4, 1.0), ("f16", "i8", 1.0, 127 * 65504.0 * 2)):
        cfg = SplitConfig(L, H, KVH, D, 8, k_dtype=kd, v_dtype=vd, align=0)
        c = SplitCache(cfg)
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


def test_window_and_sinks_keep_the_newest_rows_of_each_half():
    # a ring of W + S slots: after 3 wraps the sinks and the newest W positions are cached, each row as a fresh cache
    # that saw only the kept positions stores it (per token) or within its group's bound (per channel)
    out = zeros("f", D)
    for j, (kd, vd, res) in enumerate((("i8", "i4", 0), ("f16", "i8", 0), ("i8", "i4", G), ("i4", "f16", G))):
        S, W = G, 3 * G
        cfg = SplitConfig(L, H, KVH, D, S + W, k_dtype=kd, v_dtype=vd, group=G, residual=res, window=W, sinks=S,
                          prefix=S if res else 0, align=0)
        n = S + 3 * W + 1
        seed = 90 + j
        c = _filled(cfg, seed, n)
        assert c.n_cached == S + W and c.evictions == n - S - W, (kd, vd, res)
        kept = list(range(S)) + list(range(n - W, n))
        live = sorted(p for p in c.slot_pos if p >= 0)
        assert live == kept, (kd, vd, res, live)
        for p in kept:
            for kv in (0, 1):
                c.read(1, 1, p, kv, out)
                x = _true(cfg, seed, p, 1, kv, 1)
                for i in range(D):
                    if p < cfg.prefix:
                        assert out[i] == _f32(x[i])
                    else:
                        bound = _window_bound(cfg, seed, p, kv, i, x)
                        assert abs(out[i] - x[i]) <= bound, (kd, vd, res, p, kv, i)
        raises(IndexError, c.read, 0, 0, S, 0, out)  # evicted
        del c
        gc.collect()


def _window_bound(cfg, seed, p, kv, i, x):
    dt = cfg.k_dtype if kv == 0 else cfg.v_dtype
    if kv == 0 and cfg.residual:
        s = p - cfg.prefix
        first = p - s % G
        vals = [_true(cfg, seed, q, 1, 0, 1)[i] for q in range(first, first + G)]
        return fit_bound(vals, {"i8": 255, "i4": 15, "i2": 3}[dt]) + abs(_f32(x[i]) - x[i])
    if dt == "f16":
        return max(abs(x[i]) * 2.0 ** -11, 2.0 ** -25) * 1.0001
    if dt == "i8":
        amax = max(abs(e) for e in x)
        return amax / 127.0 * (1 + 2.0 ** -10) / 2 + amax * 1e-6
    return fit_bound(x, {"i4": 15, "i2": 3}[dt])


def test_h2o_on_split_rows_and_refused_on_key_groups():
    from kvedge.evict import H2O
    cfg = SplitConfig(L, H, KVH, D, 12, k_dtype="i8", v_dtype="i4", align=0)
    c = SplitCache(cfg)
    pol = H2O(c, budget=8, recent=2)
    assert c.policy is pol
    n = 14
    for p in range(n):
        c.append([row(1, p, layer, 0, KVH * D, D) for layer in range(L)],
                 [row(1, p, layer, 1, KVH * D, D) for layer in range(L)])
    assert c.n_cached == 8 and c.evictions == n - 8
    pc = SplitConfig(L, H, KVH, D, 4 * G, k_dtype="i8", v_dtype="i4", group=G, residual=G, align=0)
    c2 = SplitCache(pc)
    e = raises(ValueError, H2O, c2, budget=2 * G, recent=2)
    assert "H2O cannot evict single tokens from i8 keys per channel (groups of 4 tokens share scales)" in message(e)
    assert c2.policy is None
