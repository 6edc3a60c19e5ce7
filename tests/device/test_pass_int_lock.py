# The integer pass's steps with the heap locked (kvedge.model.pass_int.Forward.step), on a small checkpoint the
# test writes itself: in a file of its own, so that test_pass_int's models keep their heap.
import _intmodel
_intmodel.preload()
from _intmodel import TOKENS, digest, model  # noqa: E402
from _support import need, raises  # noqa: E402


def test_int_steps_run_with_the_heap_locked_once_they_allocate_nothing():
    # kvedge.model.pass_int.Forward.step: once two steps in a row left the heap as they found it, the next run with
    # the heap locked (MicroPython then keeps the pass's frames on the C stack instead of the heap). The logits
    # are those of the same model never locked.
    need("heap_lock", "mem_alloc")
    m = model()  # one model (a 215 KB heap): run locked, then from a reset cache never locked
    runs = []
    for lockable in (True, False):
        m.reset()
        m._lockable = lockable
        n0 = m.intp.locked_steps
        runs.append([(digest(m.forward(tok)), m.intp.exp_logits) for tok in TOKENS] + [m.intp.locked_steps - n0])
    assert runs[0][:-1] == runs[1][:-1]
    # earned after the first steps (warm-up may allocate), then every step locked
    assert runs[0][-1] >= len(TOKENS) // 2 and runs[1][-1] == 0, (runs[0][-1], runs[1][-1])
    # a full cache without a window: its CacheFullError, not the MemoryError a locked heap would turn it into
    from kvedge.errors import CacheFullError
    m.reset()
    m._lockable = True
    n0 = m.intp.locked_steps
    for i in range(m.cache.N):
        m.forward(TOKENS[i % len(TOKENS)])
    assert m.intp.locked_steps - n0 == m.cache.N, (m.intp.locked_steps - n0, m.cache.N)  # still earned: locked throughout
    raises(CacheFullError, m.forward, 3)
    assert m.cache.n_seen == m.cache.N
    m.close()
    del m
    # the positions of an f32 prefix allocate (their rows are dequantized): never locked there, locked after
    m = model(kv={"dtype": "i8", "align": 0, "max_tokens": 12, "prefix": 4})
    for tok in TOKENS[:5]:
        m.forward(tok)
    assert m.intp.locked_steps == 0
    for tok in TOKENS[5:]:
        m.forward(tok)
    assert m.intp.locked_steps > 0
    m.close()
