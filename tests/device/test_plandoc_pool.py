# A pool plan (`kvedge plan --sessions`) on the device: plandoc reads its "pool" object into the run's arguments,
# the runner that serves its conversations is kvedge.model.runpool's, and build_cache builds the PagedPool of the
# figures written out by hand in _plankit.pool_plan (blocks, handles, a session's cap, arena, bookkeeping).
# Refusals of every pool field: test_fuzz_plandoc.py.
import gc
from kvedge import kernels
kernels.get()  # the kernels (the pool's attention takes them) compiled now, before the arena
gc.collect()
from kvedge.paged import PagedPool  # noqa: F401  the pool's modules first, while the heap is compact
gc.collect()
from kvedge.pooled import PoolSession  # noqa: E402
gc.collect()
from kvedge.errors import PlanError  # noqa: E402
from kvedge.model import plandoc, runpool  # noqa: E402
from kvedge.model.run import main  # noqa: E402
from kvedge.model.runplan import entry, plan_args  # noqa: E402
from _plankit import HEAP, cache, copy, plan, pool_plan  # noqa: E402


def test_a_pool_plan_gives_its_pool_to_the_run_and_builds_it():
    doc = pool_plan()
    a = plan_args(doc, heap=HEAP)
    assert a["pool"] == doc["pool"] and a["kind"] == "keep" and a["kv"]["max_tokens"] == 48
    assert entry(a) is runpool.main  # the pool's runner
    assert entry(plan_args(plan("keep", cache(40), {"kind": "ring"}), heap=HEAP)) is main
    pool = plandoc.build_cache(doc, heap=HEAP)
    assert (pool.NB, pool.B, pool.S, pool.MB) == (6, 8, 3, 4), (pool.NB, pool.B, pool.S, pool.MB)
    assert len(pool.cache.arena) == 19200 and pool.meta_bytes() == 266
    story = PoolSession(pool)
    forks = [story.fork(), story.fork()]
    assert pool.sessions_open() == 3 and len(forks) == 2
    bad = copy(doc)
    bad["pool"]["blocks"] = 7
    try:
        plandoc.build_cache(bad, heap=HEAP)
    except PlanError as e:
        assert str(e).startswith("pool.blocks"), str(e)
    else:
        raise AssertionError("built a pool plan whose blocks are not its formula's")
