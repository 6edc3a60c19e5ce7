# Two conversations on one pool through the float pass (its float and its integer attention): each gives exactly
# the logits of a model of its own (test_pool_model.py: the integer pass, shared prompts, reclaim, refusals).
import gc
from kvedge.paged import PagedPool  # noqa: F401 (the pool's modules first, while the heap is compact)
gc.collect()
from kvedge.pooled import PoolSession  # noqa: E402,F401
gc.collect()
import _intmodel  # noqa: E402
_intmodel.preload()
from _intmodel import TOKENS  # noqa: E402
from _poolmodel import OTHER, _alone, _interleaved  # noqa: E402


def test_two_conversations_interleaved_on_one_pool_give_each_ones_own_logits_float_pass():
    for ints in (False, True):
        want = (_alone("float", TOKENS, ints), _alone("float", OTHER, ints))
        assert _interleaved("float", ints) == want, ints
