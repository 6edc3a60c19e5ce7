# The integer pass on a tiered cache with i4 cold blocks (KIVI groups on flash) stays close to a plain cache that
# keeps every token. (The rest of the tiered model tests: test_model_tiered.py.)
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
from _tiered_model import RING, TIER, run  # noqa: E402


def test_tiered_i4_cold_blocks_stay_close():
    kernels.select(BEST)
    run({"dtype": "i8", "align": 0, "max_tokens": 32})
    h, worst, flips, first = run(RING, dict(TIER, cold_dtype="i4"), ref=True)
    assert worst < 0.05, worst
