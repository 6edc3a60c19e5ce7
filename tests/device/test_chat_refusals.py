# kvedge.chat refuses bad input before anything changes: wrong types, a negative reply length, a line the cache
# has no room for (no window, no policy), a conversation whose cache is full or that was closed, a saved one loaded
# into a started conversation, pre-encoded ids (Chat.feed) that are not a turn's. The cache's bytes and counters,
# the kept token and the sampler stay as they were.
import gc
from kvedge.model import llama  # noqa: F401 (the runner's large modules first, each on a collected heap)
gc.collect()
from kvedge import attention  # noqa: F401,E402
gc.collect()
from kvedge.model import pass_float  # noqa: F401,E402
gc.collect()
from _support import preload_floats, raises  # noqa: E402
preload_floats()
from _chatkit import model, tokenizer  # noqa: E402
from kvedge.errors import CacheFullError  # noqa: E402


def _state(c):
    st = c.m.cache.stats()
    return (bytes(c.m.cache.arena), st["tokens_seen"], st["tokens_cached"], st["alloc_failures"], c.next,
            c.sampler.rng.state, c.closed)


def test_bad_input_is_refused_before_anything_changes():
    from kvedge.chat import Chat
    from kvedge.model.sampler import Sampler
    m = model({"align": 0, "max_tokens": 12})
    tok = tokenizer()
    c = Chat(m, tok, Sampler(m.cfg.vocab_size, 0.8, 3))
    long_line = "the cat sat on the mat and ran"  # more tokens than the 12 slots hold
    assert len(c.ids(long_line)) > 12
    for turn in range(2):
        before = _state(c)
        raises(TypeError, c.turn, 5, 3)
        raises(TypeError, c.turn, None, 3)
        raises(TypeError, c.turn, "a", 2.0)
        raises(TypeError, c.turn, "a", True)
        raises(ValueError, c.turn, "a", -1)
        raises(TypeError, c.turn, "a", 2, 7)
        ids = c.ids("the")
        raises(TypeError, c.feed, [], 2)
        raises(TypeError, c.feed, 3, 2)
        raises(ValueError, c.feed, ids + [352], 2)  # outside the vocabulary
        raises(TypeError, c.feed, ids + [True], 2)
        if turn:  # the kept token must come first
            raises(ValueError, c.feed, [ids[0] + 1] + ids[1:], 2)
        e = raises(CacheFullError, c.turn, long_line, 2)
        assert "room for %d" % c.room() in str(e), e
        assert _state(c) == before
        c.turn("the", 2)  # then a turn that fits
    assert 0 < c.room() < 12
    # filled to the last slot: the kept token alone has no room left
    c.turn("", c.room())
    assert c.room() == 0
    before = _state(c)
    raises(CacheFullError, c.turn, "", 0)
    raises(ValueError, c.load, "anything")  # a started conversation takes no saved one
    assert _state(c) == before
    c.close()
    before = _state(c)
    raises(ValueError, c.turn, "a", 1)
    raises(ValueError, c.save, "anything")
    assert _state(c) == before
    m.close()
    tok.close()
