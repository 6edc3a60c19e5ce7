# The tiered model tests' first import: the runner's large modules, each on a collected heap (later a board-sized
# heap has no room for them), and this runtime's best kernel kind.
import gc

from kvedge.model import llama  # noqa: F401
gc.collect()
from kvedge import attention  # noqa: F401,E402
gc.collect()
from kvedge.model import pass_int  # noqa: F401,E402
gc.collect()
from kvedge import cacheq8  # noqa: F401,E402 (the integer pass's cache)
gc.collect()
from kvedge.tier import cache as tiered  # noqa: F401,E402
gc.collect()
from _support import preload_kernels  # noqa: E402,F401 (the tests call it with the kinds they run)
from kvedge import kernels  # noqa: E402
kernels.select()
BEST = kernels.kind()  # asm on Arm, viper on MicroPython, plain elsewhere
