# A conversation saved after turn 1 (kvedge.chat over kvedge.session) and resumed by a fresh model and Chat goes on
# as the conversation that never stopped: turn 2's reply and the cache's bytes, on the integer pass with a window
# that evicts in turn 2, sampled with a temperature (the sampler's state comes back too).
import gc
from kvedge import session  # first: compiled from .py it needs a large block
gc.collect()
from _chatkit import files as _files  # noqa: E402
_files()  # the model files written now, while the heap has room for the writer's code
gc.collect()
import _intmodel  # noqa: E402
_intmodel.preload()
from _chatkit import LINES, files, model, tokenizer  # noqa: E402

KV = {"dtype": "i8", "align": 0, "window": 12, "sinks": 2, "max_tokens": 14}


def _chat(m, tok, temp=0.9, seed=7):
    from kvedge.chat import Chat
    from kvedge.model.sampler import Sampler
    return Chat(m, tok, Sampler(m.cfg.vocab_size, temp, seed))


def test_a_saved_conversation_resumes_as_if_it_never_stopped():
    tok = tokenizer()
    m = model(KV, "i8")
    c = _chat(m, tok)
    c.turn(LINES[0], 4)
    whole = c.turn(LINES[1], 9)
    arena = bytes(m.cache.arena)
    assert m.cache.stats()["evictions"] > 0
    m.close()
    path = files()["sess"]
    session.remove(path)
    m = model(KV, "i8")
    c = _chat(m, tok)
    c.turn(LINES[0], 4)
    c.save(path)
    m.close()
    m = model(KV, "i8")  # a fresh model: the board was reset
    c = _chat(m, tok, 0.0, 99)  # another temperature and seed: the saved ones come back
    c.load(path)
    assert c.sampler.temperature == 0.9
    assert c.turn(LINES[1], 9) == whole
    assert bytes(m.cache.arena) == arena
    m.close()
    tok.close()
    session.remove(path)
