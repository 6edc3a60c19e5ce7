"""`kvedge budget --sessions N [--shared-prompt P]`: the pool's figures against a real PagedPool (CPython) driven
through the same conversations: its arena and bookkeeping, and the blocks the conversations hold once forked from a
prompt session, or each with a copy. Bad pool flags end in one line, exit 2."""
import math

import pytest

from kvedge.compat import zeros
from kvedge.config import CacheConfig
from kvedge.paged import PagedPool
from kvedge.sizes import row_bytes

from test_budget_cli import bad, run_json


def _feed(pool, sid, count, L, n):
    ks = [zeros("f", n) for _ in range(L)]
    for t in range(count):
        for layer in range(L):
            for i in range(n):
                ks[layer][i] = ((t * 7 + layer + i) % 13 - 6) / 4.0
        pool.append(sid, ks, ks)


def _measured(L, KVH, D, dtype, block, sessions, context, shared):
    """(blocks held, arena + bookkeeping bytes) of a pool run as planned, its size taken from nothing but the run."""
    per = math.ceil(context / block)
    nb = (sessions + 1) * per  # room enough; the figures are what the conversations hold
    pool = PagedPool(CacheConfig(L, KVH * 2, KVH, D, nb * block, dtype, align=0), block,
                     sessions=sessions + (1 if shared else 0), session_blocks=per)
    n = KVH * D
    if shared:
        story = pool.open()
        _feed(pool, story, shared, L, n)
        for _ in range(sessions):
            _feed(pool, pool.fork(story), context - shared, L, n)
    else:
        for _ in range(sessions):
            _feed(pool, pool.open(), context, L, n)
    pool.check()
    held = pool.blocks_held()
    # the pool as planned: exactly the blocks held
    fit = PagedPool(CacheConfig(L, KVH * 2, KVH, D, held * block, dtype, align=0), block,
                    sessions=sessions + (1 if shared else 0), session_blocks=min(per, held))
    # one block's bytes by hand: K and V rows of every layer and KV head, i8 with an f16 scale a row
    by_hand = 2 * L * KVH * block * (row_bytes(D, dtype) + (2 if dtype == "i8" else 0))
    assert len(fit.cache.arena) == held * by_hand
    return held, len(fit.cache.arena) + fit.meta_bytes()


@pytest.mark.parametrize("sessions,context,shared,block", [(4, 80, 64, 16), (4, 80, 60, 16), (3, 40, 0, 8),
                                                           (2, 33, 33, 8)])
def test_the_pool_plan_is_what_a_pool_running_those_conversations_holds(capsys, sessions, context, shared, block):
    r = run_json(capsys, "--preset", "stories260K", "--kv-dtype", "i8", "--context", str(context), "--sessions",
                 str(sessions), "--block", str(block), "--shared-prompt", str(shared))
    p = r["pool"]
    held, total = _measured(5, 4, 8, "i8", block, sessions, context, shared)
    assert (p["blocks"], p["total"]) == (held, total)
    assert r["kv_cache_bytes"] == total
    assert r["total_bytes"] == r["weights_bytes"] + total + r["activation_bytes"] + r["workspace_bytes"]
    if shared:
        assert p["copies"] == _measured(5, 4, 8, "i8", block, sessions, context, 0)[1]
        assert p["copies"] >= total


def test_the_acceptance_figures_4_sessions_sharing_64_tokens_beside_4_copies(capsys):
    r = run_json(capsys, "--preset", "stories260K", "--kv-dtype", "i8", "--context", "80", "--sessions", "4",
                 "--shared-prompt", "64")
    assert r["pool"]["arena"] == 8 * 6400 and r["pool"]["copies"] - r["pool"]["meta"] > 20 * 6400 - 16


def test_bad_pool_flags_end_in_one_line(capsys):
    base = ["budget", "--preset", "stories260K", "--kv-dtype", "i8", "--context", "80"]
    bad(capsys, base + ["--sessions", "0"], "--sessions")
    bad(capsys, base + ["--sessions", "2", "--block", "0"], "--block")
    bad(capsys, base + ["--sessions", "2", "--shared-prompt", "81"], "--shared-prompt", "81")
    bad(capsys, base + ["--shared-prompt", "8"], "--shared-prompt", "--sessions")
    bad(capsys, ["budget", "--preset", "stories260K", "--kv-dtype", "i4", "--context", "80", "--sessions", "2"],
        "--residual 0")
