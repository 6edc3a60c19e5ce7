# K and V in formats of their own (kvedge.kvsplit): a saved session resumes a split cache whole, and another split's
# save of the same shape is refused with the cache unchanged (apart from test_cache_split.py: each file's imports fit
# a board's heap).
import gc

from kvedge import session
from kvedge.errors import SessionError
from kvedge.kvsplit import SplitCache, SplitConfig
from _support import need, raises, message, tmp_path
from _cacheref import row

G = 4
L, H, KVH, D = 2, 4, 2, 8


def _filled(cfg, seed, n):
    c = SplitCache(cfg)
    for p in range(n):
        c.append([row(seed, p, layer, 0, KVH * D, D) for layer in range(L)],
                 [row(seed, p, layer, 1, KVH * D, D) for layer in range(L)])
    return c


def test_a_session_saved_from_a_split_cache_resumes_it_whole():
    need("fs")
    path = tmp_path("kvedge_split_sess")
    for j, (kd, vd, res, win) in enumerate((("i8", "i4", G, 3 * G), ("f16", "i8", 0, 0))):
        cfg = SplitConfig(L, H, KVH, D, (4 if win else 5) * G, k_dtype=kd, v_dtype=vd, group=G, residual=res,
                          window=win, sinks=G if win else 0, prefix=G if win else 0, align=0)
        n = 3 * G + 3
        a = _filled(cfg, 60 + j, n)
        session.remove(path)
        session.save(path, a, token=7)
        b = SplitCache(cfg)
        assert session.load(path, b) == 7
        assert bytes(b.arena) == bytes(a.arena) and list(b.slot_pos) == list(a.slot_pos), (kd, vd)
        assert list(b.res_lo) == list(a.res_lo) and list(b.res_hi) == list(a.res_hi)
        # the continuation is the same cache: the next rows land alike
        for c in (a, b):
            for p in range(n, n + G + 1):
                c.append([row(61, p, layer, 0, KVH * D, D) for layer in range(L)],
                         [row(61, p, layer, 1, KVH * D, D) for layer in range(L)])
        assert bytes(b.arena) == bytes(a.arena), (kd, vd)
        # another split of the same shape (the halves swapped) is refused, the cache unchanged
        other = SplitConfig(L, H, KVH, D, cfg.max_tokens, k_dtype=vd, v_dtype=kd, group=G,
                            residual=G if (res and vd in ("i8", "i4", "i2")) else 0, window=win,
                            sinks=G if win else 0, prefix=G if win else 0, align=0)
        session.remove(path)
        session.save(path, a)
        c = SplitCache(other)
        before = bytes(c.arena)
        e = raises(SessionError, session.load, path, c)
        assert "written for another layout" in message(e), message(e)
        assert bytes(c.arena) == before and c.n_seen == 0
        del a, b, c
        gc.collect()
    session.remove(path)
