# Prompts in chunks (kvedge.model.prefill): a chunk of prompt tokens goes through each layer
# together, each weight row read once for the chunk, and must leave the same cache and the same next logits as
# the same tokens fed one at a time by forward(), the reference here (its own bits are checked against the float
# pass and across kernel kinds in test_pass_int.py and test_pass_int_kinds.py).
import gc

import _intmodel
_intmodel.preload()
from _intmodel import TOKENS, digest, model  # noqa: E402
from _support import raises  # noqa: E402
from kvedge.model.llama import generate as one_at_a_time  # noqa: E402
from kvedge.model import prefill  # noqa: E402
from kvedge.model.sampler import Sampler  # noqa: E402


def chunked(kv=None, chunk=4, **kw):
    """The test model with prompts in chunks of `chunk` tokens (kvedge.model.prefill.attach)."""
    m = model(kv=kv, **kw)
    prefill.attach(m, chunk)
    return m


def generate(m, *args):
    """What kvedge.model.run.main calls: prefill.generate with chunks, llama.generate without."""
    return (prefill.generate if m.intp.pre is not None else one_at_a_time)(m, *args)


def _take(m, ids, i0, n):
    """What generate() feeds a chunk at a time: kvedge.model.prefill.Prefill.take (0 without chunks)."""
    pre = m.intp.pre
    return 0 if pre is None else pre.take(ids, i0, n)


class _Tok:
    def piece(self, a, b):
        return bytes([65 + b % 26])


def _after_prompt(m, prompt, chunked):
    """Feed prompt[:-1] (one at a time, or through prefill where it takes them), then forward(prompt[-1]):
    (logits digest, arena digest, positions seen, tokens prefill took)."""
    took = 0
    i = 0
    while i < len(prompt) - 1:
        n = _take(m, prompt, i, len(prompt) - 1 - i) if chunked else 0
        if n:
            took += n
            i += n
        else:
            m.forward(prompt[i])
            i += 1
    x = m.forward(prompt[-1])
    pre = m.intp.pre
    out = (digest(x), m.intp.exp_logits, digest(m.cache.arena), m.cache.n_seen, took,
           pre is not None and pre.clean)
    m.close()
    del m, x
    gc.collect()
    return out


def _same(kv, chunk, prompt, stream=False, want_took=None, locked=False):
    gc.collect()
    ref = _after_prompt(model(kv=kv, stream=stream), prompt, False)
    got = _after_prompt(chunked(kv, chunk, stream=stream), prompt, True)
    assert got[:4] == ref[:4], (kv, chunk, got, ref)
    if want_took is not None:
        assert got[4] == want_took, (kv, chunk, got[4], want_took)
    return got[5] if locked else got[4]


def test_chunks_leave_the_cache_and_logits_of_single_tokens():
    prompt = TOKENS + TOKENS[1:5]  # 15 tokens: 14 before the last, in chunks of 2, 3 and 8
    for chunk in (2, 3, 8):
        _same(None, chunk, prompt, want_took=len(prompt) - 1)


def test_chunks_after_a_clean_one_run_with_the_heap_locked():
    # the layers of a chunk allocate nothing: once one run showed it, the next ones run locked (any allocation
    # would raise MemoryError), with the same bits
    from kvedge.compat import HAS_HEAP_LOCK
    import gc as _gc
    prompt = TOKENS + TOKENS[1:5]
    got = _same(None, 2, prompt, want_took=len(prompt) - 1, locked=True)
    if HAS_HEAP_LOCK and hasattr(_gc, "mem_alloc"):
        assert got is True  # 7 chunks: the first two measured, the rest locked


def test_chunks_with_weights_streamed_from_the_file():
    prompt = TOKENS + TOKENS[1:5]
    _same(None, 4, prompt, stream=True, want_took=len(prompt) - 1)
    _same(None, 6, prompt, stream=True, want_took=len(prompt) - 1)


def test_a_window_takes_chunks_until_it_is_full_then_single_tokens():
    # sinks 2 + window 6: 8 slots; a 15-token prompt fills them in chunks, the rest evicts one token at a time
    prompt = TOKENS + TOKENS[1:5]
    kv = {"dtype": "i8", "align": 0, "max_tokens": 8, "window": 6, "sinks": 2}
    _same(kv, 3, prompt, want_took=8)


def test_no_chunks_past_an_f32_prefix_boundary_or_with_a_policy():
    prompt = TOKENS
    kv = {"dtype": "i8", "align": 0, "max_tokens": 16, "prefix": 3}
    # the prefix's 3 positions take floats one at a time; chunks start after them
    _same(kv, 4, prompt, want_took=len(prompt) - 1 - 3)
    from kvedge.evict import H2O
    kv = {"dtype": "i8", "align": 0, "max_tokens": 8}
    m = chunked(kv, 4, policy=lambda c: H2O(c, budget=8, recent=4))
    assert _take(m, list(prompt), 0, 5) == 0  # the policy decides each slot from the tokens before: one at a time
    m.close()


def test_generate_gives_the_tokens_and_pieces_of_single_steps():
    # a BOS inside the prompt stops both runs there; steps shorter than the prompt stop both inside it
    prompts = ([1] + list(TOKENS[1:9]), [1, 40, 30, 1, 7, 29], [1, 40])
    cases = [(p, s, None) for p in prompts for s in (4, 14)]
    # an f32 prefix (its positions one at a time, then chunks) and a window that fills within the prompt
    cases += [(prompts[0], 14, {"dtype": "i8", "align": 0, "max_tokens": 16, "prefix": 3}),
              (prompts[0], 14, {"dtype": "i8", "align": 0, "max_tokens": 6, "window": 6})]
    for prompt, steps, kv in cases:
        want_seen = []
        m = model(kv=kv)
        want = generate(m, _Tok(), Sampler(48), prompt, steps, want_seen.append)
        want_n = m.cache.n_seen
        m.close()
        del m
        gc.collect()
        seen = []
        m = chunked(kv, 4)
        got = generate(m, _Tok(), Sampler(48), prompt, steps, seen.append)
        n = m.cache.n_seen
        m.close()
        del m
        assert (got, seen, n) == (want, want_seen, want_n), (prompt, steps, got, want, seen, want_seen)
        gc.collect()


def test_refusals_change_nothing():
    m = model()
    for bad in (0, -1, 257, True, 4.0):  # kvedge.model.passes.check_prefill, before a buffer is allocated
        raises(ValueError, prefill.attach, m, bad)
    assert m.intp.pre is None
    m.close()
    del m
    gc.collect()
    m = chunked(None, 4)
    c = m.cache
    raises(ValueError, m.intp.pre.take, [1, 40, 99, 7], 0, 4)  # a token outside the 48-token vocabulary
    raises(TypeError, m.intp.pre.take, [1, 40, 2.0, 7], 0, 4)
    assert c.n_seen == 0
    raises(ValueError, m.intp.pre.run, [1, 40, 30, 7, 7], 0, 5)  # more than the chunk
    raises(ValueError, m.intp.pre.run, [1, 40], 0, 1)  # one token goes through forward()
    assert c.n_seen == 0 and c.n_cached == 0
    assert _take(m, [1, 40, 30, 7, 7], 0, 5) == 4  # at most a chunk
    assert c.n_seen == 4
    m.close()
    del m, c
    gc.collect()  # one model at a time: two do not fit the 64-bit unix port at a 215 KB heap
    m = chunked({"dtype": "i8", "align": 0, "max_tokens": 3}, 8)
    assert _take(m, [1, 40, 30, 7, 7], 0, 5) == 3  # at most the free slots: the fourth raises CacheFullError
    assert _take(m, [7, 7], 0, 2) == 0 and m.cache.n_seen == 3
    m.close()
    del m
    gc.collect()
    m = model()
    assert _take(m, [1, 40, 30], 0, 3) == 0  # no chunk buffers: prefill=1 (the default)
    m.close()


def test_chunk_buffers_equal_their_formula():
    from kvedge.model.prefill import chunk_bytes
    from kvedge.compat import IS_MICROPYTHON
    m = chunked(None, 5)
    cfg = m.cfg
    p = m.intp.pre
    data = 0
    for a in (p.xs, p.zs, p.xqs, p.css):
        data += len(a) * len(a[0]) * 4
    data += len(p.tv) * 4
    f = m.intp
    assert data == 5 * 4 * (cfg.dim + len(f.z) + len(f.xq) + cfg.head_dim + 5)
    n = chunk_bytes(cfg, 5)
    from kvedge.model.prefill import WORD, CODE_BYTES
    # headers, lists and the GC rounding, counted generously, and the module's code
    assert n - data == 4 * 12 * WORD * 5 + 9 * 24 * WORD + CODE_BYTES * WORD // 4
    assert chunk_bytes(cfg, 5, 4) == data + 4 * 48 * 5 + 9 * 96 + CODE_BYTES  # a 32-bit board's
    assert chunk_bytes(cfg, 1) == 0
    m.close()
    del m, p, f
    import sys
    if IS_MICROPYTHON and sys.platform != "webassembly":  # what the chunk adds to a model here, within the formula
        # (the wasm port's gc.mem_alloc() does not settle after a collection)
        grew = []
        for chunk in (1, 5):
            gc.collect()
            a = gc.mem_alloc()
            m = model() if chunk == 1 else chunked(None, chunk)
            gc.collect()
            grew.append(gc.mem_alloc() - a)
            m.close()
            del m
        assert 0 < grew[1] - grew[0] <= n, (grew, n)


def test_the_float_pass_takes_no_chunks():
    # last in this file: the float pass's model leaves a heap the 64-bit unix port at a 215 KB heap (and the
    # emulated rp2040 compiling the package from .py) cannot place an integer model in afterwards
    gc.collect()
    f = model("float")
    raises(ValueError, prefill.attach, f, 4)  # the float pass takes prompts a token at a time
    assert getattr(f, "intp", None) is None
    f.close()
