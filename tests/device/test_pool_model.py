# Several conversations on one board (issue 45, items 2 and 4): one Llama, one PagedPool, its sessions as the
# model's cache (kvedge.pooled). Each conversation must give exactly the logits of the same tokens run alone on a
# model of its own with its own KVCache (the independent reference: separate Llama instances, run first), whether
# interleaved, forked from a shared prompt, or after a neighbour was reclaimed under pressure.
import gc
from kvedge.paged import PagedPool  # the pool's modules first, while the heap is compact
gc.collect()
from kvedge.pooled import PoolSession  # noqa: E402
gc.collect()
import _intmodel  # noqa: E402
_intmodel.preload()
from kvedge import poolsizes  # noqa: E402
from _poolmodel import OTHER, _alone, _interleaved, _kv, _pool  # noqa: E402

from _intmodel import TOKENS, digest, model  # noqa: E402
from _support import need, raises, under_heap_lock  # noqa: E402
from kvedge.errors import CacheFullError  # noqa: E402

def test_two_conversations_interleaved_on_one_pool_give_each_ones_own_logits_integer_pass():
    want = (_alone("int", TOKENS), _alone("int", OTHER))
    assert want[0] != want[1]
    assert _interleaved("int") == want


PROMPT = tuple((7 * i + 3) % 47 + 1 for i in range(64))  # a 64-token story prompt, every session's start
OWN = ((4, 9, 9), (12, 30, 2), (44, 1, 5), (23, 23, 8))  # what each of 4 sessions adds to it


def test_four_sessions_sharing_a_64_token_prompt_hold_it_once_and_give_the_unshared_logits():
    want = [_alone("int", PROMPT + own)[len(PROMPT):] for own in OWN]
    B = 8
    pool = _pool(16, B, sessions=5)
    story = PoolSession(pool)
    m = model("int", kv=_kv(16 * B), cache=story)
    for t in PROMPT:
        m.forward(t)
    forks = [story.fork() for _ in OWN]
    assert pool.blocks_held() == len(PROMPT) // B  # forked: nothing copied yet
    got = [[] for _ in OWN]
    for j in range(3):
        for k, s in enumerate(forks):
            m.use(s)
            got[k].append(digest(m.forward(OWN[k][j])))
    assert got == want
    pool.check()
    now = (pool.blocks_held(), pool.held_bytes())
    m.close()
    held = poolsizes.pool_shared_blocks(len(OWN), len(PROMPT), 3, B)
    assert held == 8 + 4 * 1  # the prompt's 8 blocks once, then one block of its own per session
    assert now == (held, held * poolsizes.pool_block_bytes(2, 2, 4, B, "i8", 0))
    # the same 4 conversations unshared hold the prompt 4 times
    assert poolsizes.pool_shared_blocks(len(OWN), len(PROMPT), 3, B, shared=False) == 4 * 9


def test_a_reclaim_under_pressure_drops_the_oldest_conversation_and_never_a_block_another_holds():
    # 6 blocks of 4: a story (8 tokens, 2 blocks) and two forks of it with a block of their own each; a third
    # conversation's 3rd and 4th blocks reclaim the forks (least recently used first), never the story's blocks
    pool = _pool(6)
    story = PoolSession(pool)
    m = model("int", kv=_kv(24), cache=story)
    for t in TOKENS[:8]:
        m.forward(t)
    a, b = story.fork(), story.fork()
    c = PoolSession(pool)
    for s, toks in ((a, OTHER[:2]), (b, OTHER[2:4])):
        m.use(s)
        for t in toks:
            m.forward(t)
    assert pool.nfree == 2
    m.use(c)
    third = TOKENS + OTHER[:5]
    got = [digest(m.forward(t)) for t in third]
    assert not a.alive() and not b.alive() and story.alive() and c.alive()
    assert pool.reclaims == 2 and pool.nfree == 0
    m.use(a)
    raises(KeyError, m.forward, 3)  # a reclaimed conversation is dropped, as a closed one
    m.use(story)
    pool.check()
    i = pool._handle(story.sid)
    assert [pool.refs[pool.table[i * pool.MB + j]] for j in range(2)] == [1, 1]
    c.close()
    # the story's blocks were never freed nor written: it goes on as if alone
    got_story = [digest(m.forward(t)) for t in OTHER[:3]]
    m.close()
    assert got == _alone("int", third)
    assert got_story == _alone("int", TOKENS[:8] + OTHER[:3])[8:]


def test_refusals_change_nothing():
    pool = _pool(4)
    a = PoolSession(pool)
    m = model("int", kv=_kv(16), cache=a)
    for t in TOKENS[:5]:
        m.forward(t)
    b = a.fork()
    snap = _snap(pool)
    raises(KeyError, PoolSession, pool, 999)  # unknown session
    raises(TypeError, PoolSession, None)
    raises(ValueError, m.use, object())  # not a session of this pool
    raises(ValueError, m.use, PoolSession(_pool(4)))
    assert _snap(pool) == snap
    b.close()
    b.close()  # closing twice does nothing
    snap = _snap(pool)
    raises(KeyError, b.fork)
    m.use(b)
    raises(KeyError, m.forward, 3)  # closed
    m.use(a)
    assert _snap(pool) == snap
    # full: a holds the 4 blocks (14 tokens), its fork shares them all: the fork's first token needs a copy
    # of the last block, and no session holds a block alone to reclaim
    for t in TOKENS[5:] + OTHER[:3]:
        m.forward(t)
    m.use(a.fork())
    snap = _snap(pool)
    raises(CacheFullError, m.forward, 3)
    assert _snap(pool) == snap
    m.close()
    m.use(a)
    m.close()
    assert pool.sessions_open() == 0 and pool.nfree == 4


def _snap(pool):
    return (list(pool.table), list(pool.sid), list(pool.slen), list(pool.snb), list(pool.refs), list(pool.free),
            pool.nfree, list(pool.cache.slot_pos), bytes(pool.cache.arena))


def test_steps_of_pool_sessions_allocate_nothing_with_the_heap_locked_once_warm():
    need("heap_lock")
    pool = _pool(8)
    a = PoolSession(pool)
    m = model("int", kv=_kv(32), cache=a)
    for t in TOKENS[:5]:
        m.forward(t)
    b = a.fork()
    for s in (a, b):  # each takes a block of its own (the copy of the shared one)
        m.use(s)
        for t in TOKENS[4:6]:
            m.forward(t)
    for i in range(2):
        for s in (a, b):
            m.use(s)
            under_heap_lock(m.fwd.forward, TOKENS[6 + i])
    pool.check()
    m.close()
