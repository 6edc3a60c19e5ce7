# Device-API fuzzer, family 1: a KVCache of every dtype and its Attention (float and integer paths). See
# _fuzzkit.py; the count printed is this family's (a quarter of the 5,000-call floor on a board).
import gc

from kvedge.attention import Attention  # noqa: F401  (largest modules first, while the heap is compact)
from _fuzzkit import Fuzz, SEED, _scale
from _fuzzcache import CacheState, cache_valid, cache_refuse, _check_step_all


def test_fuzz_cache_and_attention():
    fz = Fuzz("cache+attention", SEED)
    budget = _scale()
    rng = fz.rng
    while fz.refused + fz.valid < budget:
        st = None
        gc.collect()
        st = CacheState(rng, rng.below(1000))
        st.check_all = _check_step_all(st.att)
        fz.roots = [st.c, st.att]
        fz.settle()
        for _ in range(60):
            if rng.below(3) == 0:
                cache_valid(fz, st)
            else:
                cache_refuse(fz, st)
    fz.done()
