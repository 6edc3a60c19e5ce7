# int4 weights with prompts in chunks (kvedge.model.prefill): the same cache and the same next logits as the
# prompt fed one token at a time, with the rows in RAM and streamed. Its own file: a 215 KB heap compiles it
# beside test_w4model's model no more.
import gc

import _intmodel
_intmodel.preload()
from _intmodel import TOKENS, digest  # noqa: E402
from _w4model import files, model  # noqa: E402


def test_int4_prompts_in_chunks_leave_the_cache_and_logits_of_one_token_at_a_time():
    from kvedge.model import prefill
    f = files(deq=False)
    got = []
    for stream in (False, True):
        for chunk in (0, 4):
            m = model(f["i4"], stream=stream)
            took = 0
            i = 0
            if chunk:
                prefill.attach(m, chunk)
            while i < len(TOKENS) - 1:  # the prompt but its last token: in chunks where prefill takes them
                n = m.intp.pre.take(TOKENS, i, len(TOKENS) - 1 - i) if chunk else 0
                if n:
                    took += n
                    i += n
                else:
                    m.forward(TOKENS[i])
                    i += 1
            x = m.forward(TOKENS[-1])
            got.append((digest(x), m.intp.exp_logits, digest(m.cache.arena), m.cache.n_seen))
            assert (took > 0) == (chunk > 0), (chunk, took)
            m.close()
            del m, x
            gc.collect()
    assert got[0] == got[1] == got[2] == got[3], got
