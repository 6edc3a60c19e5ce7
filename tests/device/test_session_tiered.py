# A tiered cache's conversation saved and resumed (kvedge.session) on the integer pass: its hot ring and counters in
# the session file, its cold blocks in their own store, reopened as the save left it (TieredCache(fresh=False));
# the continuation bit-identical (_session_model), blocks moving to flash before and after the save.
import gc
from kvedge import session  # noqa: F401 (first: compiled from .py it needs a large block)
gc.collect()
from _tiered_load import BEST, preload_kernels  # noqa: E402 (then the runner's large modules, on a collected heap)
preload_kernels((BEST,), fold=True)
from _session_model import files, resume_equals_uninterrupted  # noqa: E402
from _support import remove_store  # noqa: E402


def test_a_tiered_cache_resumes_bit_identical():
    tier = {"block": 4, "cold_dtype": "i8", "cold_blocks": 8, "at_cap": "drop"}
    st = resume_equals_uninterrupted({"dtype": "i8", "max_tokens": 12, "window": 8, "sinks": 4, "align": 0}, 30,
                                     tier=tier, wdtype="i8", forward="int")
    assert st["cold_tokens"] >= 8, st  # blocks went to flash
    remove_store(files()["cold"])
