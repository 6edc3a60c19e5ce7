# The model runner on a tiered cache (a ring in RAM, older tokens in blocks on flash) under the integer forward
# pass. References: the same model on a plain cache that keeps every token (kvedge.cache.KVCache: its own arena
# and attention loop, no flash), which a tiered cache that holds every token must follow. (Each kernel kind's
# integer pass bit-identical to the plain kernels': test_model_tiered_kinds.py; the float pass, forward="auto"
# and refusals: test_model_tiered_float.py. Each file loads only the kernels it compares: on a board-sized heap
# with the package compiled from .py, two kinds' kernels and two models do not fit beside it.)
import gc

from kvedge.model import llama  # noqa: F401 (the large modules first, on a collected heap)
gc.collect()
from kvedge import attention  # noqa: F401,E402
gc.collect()
from kvedge.model import intpath  # noqa: F401,E402
gc.collect()
from kvedge import tiered  # noqa: F401,E402
gc.collect()
from _support import preload_kernels  # noqa: E402
from kvedge import kernels  # noqa: E402
kernels.select()
BEST = kernels.kind()  # asm on Arm, viper on MicroPython, plain elsewhere
preload_kernels((BEST,))  # loaded now: later the heap has no room for them
from _support import need, under_heap_lock  # noqa: E402
from _tiered_model import RING, TIER, TOKENS, model, run  # noqa: E402


def test_tiered_int_pass_follows_a_cache_that_keeps_everything():
    kernels.select(BEST)
    run({"dtype": "i8", "align": 0, "max_tokens": 32})
    h, worst, flips, first = run(RING, TIER, ref=True)
    # until the first block leaves the ring (position 12) both caches hold the same rows in the same order: equal
    # bits; then the cold blocks are folded before the ring (another order of the online softmax): close
    assert first >= 12, first
    assert worst < 2e-3 and flips == 0, (worst, flips)


def test_tiered_i4_cold_blocks_stay_close():
    kernels.select(BEST)
    run({"dtype": "i8", "align": 0, "max_tokens": 32})
    h, worst, flips, first = run(RING, dict(TIER, cold_dtype="i4"), ref=True)
    assert worst < 0.05, worst


def test_tiered_int_step_allocates_nothing():
    need("heap_lock")
    kernels.select()
    m = model(RING, TIER)
    for t in TOKENS[:14]:  # warm, and past the first block's move to flash
        m.forward(t)
    try:
        for i in range(2):  # positions 14, 15: no block moves (the ring has room)
            under_heap_lock(m.forward, TOKENS[14 + i])
    finally:
        m.close()
