# K and V in formats of their own (kvedge.kvsplit): the integer pass, int8-code writes and a tier refuse a split
# cache when it is built (the integer pass's own refusal: tests/host/test_kvsplit_numpy.py; its rows: test_cache_split.py; sessions: test_cache_split_session.py; apart so that each
# file's imports fit a board's heap).
from kvedge.compat import zeros
from kvedge.attention import Attention
from kvedge.kvsplit import SplitCache, SplitConfig
from _support import raises, message

G = 4
L, H, KVH, D = 2, 4, 2, 8


def test_integer_paths_refuse_a_split_cache():
    cfg = SplitConfig(L, H, KVH, D, 8, k_dtype="i8", v_dtype="i4", align=0)
    c = SplitCache(cfg)
    assert not c.int_ok and not Attention(c).int_ok
    e = raises(TypeError, c.read_codes, 0, 0, 0, 0, zeros("b", D))
    assert "needs an i8 cache, this one is i8/i4" in message(e)
    from kvedge.model import passes
    assert passes.choose("i8", cfg.dtype, "viper") == passes.FLOAT
    from kvedge import caches
    assert isinstance(caches.build(cfg), SplitCache)
    e = raises(ValueError, caches.build, cfg, q8=True)
    assert "the integer passes write i8 caches: K and V apart (i8/i4) run the float pass" in message(e)
    e = raises(ValueError, caches.build, cfg, {"block": 8, "cold_dtype": "i8", "cold_blocks": 4})
    assert "a tiered cache holds one format: K and V apart (i8/i4) need tier None" in message(e)
