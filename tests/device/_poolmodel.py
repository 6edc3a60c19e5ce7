# The test model's conversations on a PagedPool (test_pool_model*.py): a model of their own (the reference) and
# two conversations in turns on one pool.
import gc

from _intmodel import TOKENS, digest, model
from kvedge.config import CacheConfig
from kvedge.paged import PagedPool
from kvedge.pooled import PoolSession

OTHER = (1, 9, 44, 2, 17, 17, 30, 5, 21, 11, 40)  # a second conversation


def _kv(n):
    return {"dtype": "i8", "align": 0, "max_tokens": n}


def _digests(lg, forward):
    return digest(lg) if forward == "int" else digest([int(x * 65536) for x in lg])


def _alone(forward, tokens, int_attention="auto"):
    """The logits' digests of `tokens` on a model of their own (its own KVCache)."""
    gc.collect()
    m = model(forward, kv=_kv(len(tokens)), int_attention=int_attention)
    out = [_digests(m.forward(t), forward) for t in tokens]
    m.close()
    return out


def _pool(blocks, block=4, sessions=4, on_pressure=None):
    gc.collect()
    return PagedPool(CacheConfig(2, 4, 2, 4, blocks * block, "i8", align=0), block, sessions=sessions,
                     on_pressure=on_pressure, tile=8)  # the model's tile: the same tiles, the same roundings


def _interleaved(forward, int_attention="auto"):
    """Each conversation's digests, TOKENS and OTHER fed in turns to one model on one pool."""
    pool = _pool(8)
    a, b = PoolSession(pool), PoolSession(pool)
    m = model(forward, kv=_kv(32), cache=a, int_attention=int_attention)
    got = ([], [])
    for t in range(len(TOKENS)):
        for k, (s, toks) in enumerate(((a, TOKENS), (b, OTHER))):
            m.use(s)
            got[k].append(_digests(m.forward(toks[t]), forward))
    pool.check()
    assert pool.length(a.sid) == pool.length(b.sid) == len(TOKENS)
    m.close()
    return got
