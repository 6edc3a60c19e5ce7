# A conversation's turns on the integer pass run their steps with the heap locked once warmed
# (kvedge.model.pass_int.Forward.step, as test_pass_int_lock.py shows for single steps): turn 2 of kvedge.chat
# allocates nothing in any of its steps. In a file of its own: a board-sized heap holds one such model.
import _intmodel
_intmodel.preload()
from _support import need  # noqa: E402
from _chatkit import LINES, model, tokenizer  # noqa: E402


def test_turn_two_runs_every_step_with_the_heap_locked():
    need("heap_lock", "mem_alloc")
    from kvedge.chat import Chat
    from kvedge.model.sampler import Sampler
    m = model({"dtype": "i8", "align": 0, "max_tokens": 48}, "i8")
    tok = tokenizer()
    c = Chat(m, tok, Sampler(m.cfg.vocab_size))
    c.turn(LINES[0], 6)  # warms the pass: its first steps may allocate
    n0, s0 = m.intp.locked_steps, m.cache.n_seen
    r = c.turn(LINES[1], 8)
    fed = m.cache.n_seen - s0
    assert fed >= len(c.ids(LINES[1])) - 1 + len(r) - 1 > 0
    assert m.intp.locked_steps - n0 == fed, (m.intp.locked_steps - n0, fed)  # every step of turn 2 locked
    m.close()
    tok.close()
