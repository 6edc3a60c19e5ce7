# A plan's pool of conversations (`kvedge plan --sessions N`, docs/pool.md "In the plan"): the plan's "pool" object
# checked (plandoc.check calls check() only for a plan that has one), the PagedPool it describes built (build(),
# for plandoc.build_cache),
# and its conversations run on one Llama (main(): kvedge.model.run.main's job for N sessions). Imported only by pool
# plans: a plain plan's run loads none of this.
#
# A pool plan's cache is the pool's store: cache.max_tokens = blocks x block (window 0, no prefix), kv_bytes its
# arena (kvedge.poolsizes.pool_block_bytes a block). Beside it the pool holds its bookkeeping (meta_bytes:
# kvedge.poolsizes.pool_meta_bytes) and the run its Python objects (objects_bytes: object_bytes()); both are in
# the plan's total_bytes. blocks is kvedge.poolsizes.pool_shared_blocks of the plan's conversations: `sessions`
# of `tokens` positions each, the first `shared_prompt` of them a prompt held once (one more handle holds it, the
# conversations are its forks) or, with 0, each conversation's own.
from kvedge.poolsizes import pool_meta_bytes, pool_shared_blocks

POOL_MODULES = ("kvedge.paged", "kvedge.pooled")  # what a pool run loads beside the runner's modules and this one
# The Python objects a pool run adds beside the formula-sized arrays, on a 32-bit board (doubled for 64-bit
# pointers): the PagedPool (its attribute dict) and, per handle, a PoolSession and a Sampler with its Rng, and per
# conversation its sampled ids (an int16 array of `tokens`). An allowance: the emulated rp2040's run of a pool plan
# (tests/host/test_plan_pool.py) peaked at 187,264 of the plan's 197,758 bytes with it (2026-12-07)
POOL_BYTES = 1024
HANDLE_BYTES = 256


def handles(pool):
    """Sessions open at once: the conversations, and the prompt's holder when one is shared."""
    return pool["sessions"] + (1 if pool["shared_prompt"] else 0)


def session_blocks(pool):
    """A session's cap in blocks (its table's length): its `tokens` positions' blocks."""
    b = pool["block"]
    return min(pool["blocks"], (pool["tokens"] + b - 1) // b)


def blocks(pool):
    """The blocks the plan's conversations hold at their longest (kvedge.poolsizes.pool_shared_blocks)."""
    s = pool["shared_prompt"]
    return pool_shared_blocks(pool["sessions"], s, pool["tokens"] - s, pool["block"], s > 0)


def meta_bytes(pool):
    return pool_meta_bytes(handles(pool), pool["blocks"], pool["block"], session_blocks(pool))


def object_bytes(pool, word=4):
    """The run's Python objects for the pool (POOL_BYTES, HANDLE_BYTES a handle, scaled to `word`-byte pointers)
    and each conversation's sampled ids (2 bytes a position)."""
    return (POOL_BYTES + HANDLE_BYTES * handles(pool)) * word // 4 + pool["sessions"] * (2 * pool["tokens"] + 64)


def run_bytes(pool, word=4):
    """What a pool run holds beside the arena its cache config counts: bookkeeping and objects."""
    return meta_bytes(pool) + object_bytes(pool, word)


def check(doc, cfg, _int, _bad):
    """The plan's "pool" object against its cache (cfg, checked) and the formulas: PlanError naming the field.
    _int, _bad: kvedge.model.plandoc's field checks (passed in: this module never imports plandoc)."""
    from kvedge.errors import PlanError
    from kvedge.sizes import LOWBIT
    p = doc["pool"]
    if not isinstance(p, dict):
        _bad("pool", "a JSON object", p)
    if doc.get("kind") != "keep":
        raise PlanError("pool: a pool in a plan of kind %r (a pool plan is of kind 'keep')" % doc.get("kind"))
    _int(p, "sessions", "pool.sessions", 1, 0x7FFE)  # a block's holder count is an int16
    b = _int(p, "block", "pool.block", 1, 1 << 16)
    t = _int(p, "tokens", "pool.tokens", 1, 1 << 26)
    if t % b:
        _bad("pool.tokens", "a multiple of pool.block (%d)" % b, t)
    if doc.get("context") is not None and t > doc["context"]:
        _bad("pool.tokens", "at most the plan's context (%d)" % doc["context"], t)
    _int(p, "shared_prompt", "pool.shared_prompt", 0, t - 1)
    if cfg.window or cfg.sinks:
        raise PlanError("cache: a pool's sessions grow by blocks: window and sinks must be 0, got %d and %d"
                        % (cfg.window, cfg.sinks))
    if cfg.prefix:
        raise PlanError("cache: a pool keeps no f32 prefix, got prefix %d" % cfg.prefix)
    if cfg.dtype in LOWBIT and cfg.residual:
        raise PlanError("cache: a pool's %s cache needs residual 0 (KIVI groups span one sequence), got %d"
                        % (cfg.dtype, cfg.residual))
    for k, want in (("blocks", blocks(p)), ("handles", handles(p))):
        if _int(p, k, "pool." + k, 1, 1 << 26) != want:
            _bad("pool." + k, "%d (%s)" % (want, "kvedge.poolsizes.pool_shared_blocks of the conversations"
                                           if k == "blocks" else "the sessions, and the prompt's holder"), p.get(k))
    if cfg.max_tokens != p["blocks"] * b:
        raise PlanError("cache: max_tokens %d, the pool's blocks x block is %d" % (cfg.max_tokens, p["blocks"] * b))
    for k, want in (("arena_bytes", cfg.nbytes()), ("meta_bytes", meta_bytes(p))):
        if _int(p, k, "pool." + k) != want:  # a byte figure: plandoc's bounds
            _bad("pool." + k, "%d" % want, p.get(k))
    _int(p, "objects_bytes", "pool.objects_bytes")
    if doc.get("kv_bytes") is not None and doc["kv_bytes"] != p["arena_bytes"]:
        _bad("kv_bytes", "the pool's arena, %d" % p["arena_bytes"], doc["kv_bytes"])
    if p["arena_bytes"] + p["meta_bytes"] + p["objects_bytes"] > doc["total_bytes"]:
        raise PlanError("pool: arena, bookkeeping and objects (%d bytes) more than the plan's total_bytes (%d)"
                        % (p["arena_bytes"] + p["meta_bytes"] + p["objects_bytes"], doc["total_bytes"]))
    if (doc.get("batch") or 1) != 1:
        _bad("batch", "1 in a pool plan (the pool holds the conversations)", doc["batch"])
    if (doc.get("prefill") or 1) != 1:
        _bad("prefill", "1 in a pool plan (a session takes a prompt a token at a time)", doc["prefill"])
    if doc.get("policy") is not None or doc.get("tier") is not None:
        raise PlanError("pool: a pool plan has no policy and no tier")


def build(doc, cfg, tile=32, arena=None):
    """The PagedPool of a pool plan checked whole (cfg: plandoc.check's), its store the plan's cache and a
    session's cap its tokens: kvedge.model.plandoc.build_cache's for a pool plan. Sessions are opened with
    kvedge.pooled.PoolSession(pool)."""
    from kvedge.paged import PagedPool
    p = doc["pool"]
    return PagedPool(cfg, p["block"], sessions=p["handles"], session_blocks=session_blocks(p),
                     budget=doc.get("budget_bytes"), tile=tile, arena=arena)


def need(pool, prompt, steps):
    """Blocks N conversations of `prompt` prompt ids and `steps` positions each hold at their longest (shared: the
    prompt fed once, forks for the conversations)."""
    s = pool["shared_prompt"] > 0
    return pool_shared_blocks(pool["sessions"], prompt, steps - prompt, pool["block"], s)


def check_run(pool, n_ids, steps):
    """A run of the plan's conversations: at least one position past the prompt, at most the plan's tokens, a
    shared prompt no longer than planned, and no more blocks than the pool has (else it would reclaim: not the
    plan). ValueError naming the argument, before anything is allocated."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps <= n_ids or steps > pool["tokens"]:
        raise ValueError("steps: %d prompt ids and the pool's %d tokens a conversation: steps in %d..%d, got %r"
                         % (n_ids, pool["tokens"], n_ids + 1, pool["tokens"], steps))
    if pool["shared_prompt"] and n_ids > pool["shared_prompt"]:
        raise ValueError("prompt: %d ids, longer than the plan's shared prompt (%d)" % (n_ids,
                                                                                     pool["shared_prompt"]))
    k = need(pool, n_ids, steps)
    if k > pool["blocks"]:
        raise ValueError("prompt: %d conversations of %d prompt ids and %d positions hold %d blocks, the plan's pool "
                         "has %d (a shared prompt is best planned at its length)" % (
                             pool["sessions"], n_ids, steps, k, pool["blocks"]))


def main(model, tokenizer, pool, prompt="", steps=0, temperature=0.0, seed=1, kv=None, budget=None, workspace=0,
         stream=False, kernel="auto", tile=32, peak=False, overhead=None, kv_bytes=0, encode=None, forward="float",
         int_attention="auto", ids=None, h2o=0, stats_ms=0, tier=None, prefill=1):
    """kvedge.model.run.main for a pool plan: pool["sessions"] conversations on one Llama and one PagedPool, each
    `steps` positions (the prompt's included), sampled with its own seed (seed + k for conversation k). With a
    shared prompt the prompt is fed once into a holder session and each conversation is a fork of it (the prompt's
    blocks held once), each sampling its first token from the prompt's last logits; else each conversation is fed
    the prompt itself. Conversations take a token each in turn. Prints the prompt's pieces, then each
    conversation's on a line of its own ("[k] ..."), then "#KVEDGE {json}": run.main's figures for the whole run
    (tokens and generated summed) and the pool's (sessions, generated per conversation, blocks held at the end).
    Returns that dict. Refused before anything is allocated: a run the plan's pool does not hold (check_run),
    eviction, a tier, prompt chunks or a stats stream (a pool plan has none)."""
    import gc
    import sys
    from kvedge.model import run
    if h2o or tier is not None or prefill != 1 or stats_ms:
        raise ValueError("pool: a pool plan runs without eviction, a tier, prompt chunks or a stats stream")
    run._check_prompt(prompt, ids, encode)
    if ids is not None:
        encode = False
    if budget is not None and kv_bytes > budget:
        from kvedge.errors import BudgetError
        raise BudgetError("KV arena", kv_bytes, budget)
    arena = bytearray(kv_bytes) if kv_bytes > 0 else None  # first, while the heap is one free block (run.main)
    if encode is None:
        encode = len(prompt) > 0
    k, forward = run._load(kernel, 0, False, encode, kv, forward, model, None, stream, int_attention)
    for name in POOL_MODULES:  # after the arena and the runner's modules, as kvedge footprint measures them
        __import__(name)
        gc.collect()
    from kvedge import compat
    from kvedge.compat import ticks_diff, ticks_ms, zeros
    from kvedge.config import CacheConfig
    from kvedge.paged import PagedPool
    from kvedge.pooled import PoolSession
    from kvedge.model.llama import Llama, WORD, cache_config, check, integer_path
    from kvedge.model.sampler import Sampler
    from kvedge.model.pieces import BOS, FileTokenizer
    from kvedge.model.header import read_config
    gc.collect()
    base = compat.mem_alloc() if sys.platform != "webassembly" else -1
    if base >= 0 and arena is not None:
        base -= kv_bytes
    cfg, wdtype = read_config(model)
    if ids is not None:
        for t in ids:
            if t >= cfg.vocab_size:
                raise ValueError("ids: token %d outside the model's vocabulary of %d" % (t, cfg.vocab_size))
    ws = workspace + FileTokenizer.nbytes(tokenizer, cfg.vocab_size, encode) + (
        run.RUN_OVERHEAD if overhead is None else overhead) + run_bytes(pool, WORD)
    ccfg = cache_config(cfg, kv)
    if not isinstance(ccfg, CacheConfig) or ccfg.max_tokens != pool["blocks"] * pool["block"]:
        raise ValueError("kv: max_tokens %d, the pool's blocks x block is %d" % (ccfg.max_tokens,
                                                                                pool["blocks"] * pool["block"]))
    check(model, kv, budget, ws, stream, tile, False, forward, None, integer_path(kv, int_attention), None)
    tok = FileTokenizer(tokenizer, cfg.vocab_size)
    if encode:
        from kvedge.model.bpe import sort_ids
        tok.order = sort_ids(tok)
    if ids is None:
        ids = tok.encode(prompt) if len(prompt) else [BOS]
    check_run(pool, len(ids), steps)
    gc.collect()
    pp = PagedPool(ccfg, pool["block"], sessions=handles(pool), session_blocks=session_blocks(pool), tile=tile,
                   arena=arena)
    arena = None
    first = PoolSession(pp)
    m = Llama(model, kv=kv, budget=budget, workspace=ws, stream=stream, tile=tile, forward=forward,
              int_attention=int_attention, cache=first)
    gc.collect()
    n = pool["sessions"]
    shared = pool["shared_prompt"] > 0
    samplers = [Sampler(cfg.vocab_size, temperature, seed + j) for j in range(n)]
    out = [zeros("H", steps) for _ in range(n)]  # each conversation's sampled ids
    got = zeros("i", n)
    fl = zeros("f", cfg.vocab_size) if temperature else None  # sampling with a temperature: float logits
    intp = m.intp

    def sample(j, logits):
        if fl is None:
            return samplers[j].sample(logits)
        if intp is not None:
            return samplers[j].sample(intp.float_logits(fl))
        for i in range(cfg.vocab_size):  # the float pass's logits stay for the next conversation's draw
            fl[i] = logits[i]
        return samplers[j].sample(fl)

    w = run._writer()
    top = [0]

    def measure():
        if peak and base >= 0:
            gc.collect()
            a = compat.mem_alloc() - base
            if a > top[0]:
                top[0] = a
    measure()
    setup = top[0]
    t0 = ticks_ms()
    p = len(ids)
    for i in range(p - 1):
        w(tok.piece(ids[i], ids[i + 1]))
    sess = []
    if shared:  # the prompt once, in the holder; each conversation a fork of it
        for t in ids:
            logits = m.forward(t)
            measure()
        for j in range(n):
            sess.append(first.fork())
            out[j][0] = sample(j, logits)
            got[j] = 1
    else:
        for j in range(n):
            s = first if j == 0 else PoolSession(pp)
            sess.append(s)
            m.use(s)
            for t in ids:
                logits = m.forward(t)
                measure()
            out[j][0] = sample(j, logits)
            got[j] = 1
    pos = p
    while pos < steps:  # a token each in turn; a conversation that sampled BOS has ended
        for j in range(n):
            g = got[j]
            if g == 0 or out[j][g - 1] == BOS:
                continue
            m.use(sess[j])
            logits = m.forward(out[j][g - 1])
            out[j][g] = sample(j, logits)
            got[j] = g + 1
            measure()
        pos += 1
    ms = ticks_diff(ticks_ms(), t0)
    held = pp.blocks_held()
    pp.check()
    gen = []
    total = 0
    for j in range(n):
        g = got[j]
        if out[j][g - 1] == BOS:
            g -= 1  # the BOS that ended it is not generated (as llama.generate)
        gen.append(g)
        total += g
        w(("\n[%d] " % (j + 1)).encode())
        prev = ids[-1]
        for i in range(g):
            w(tok.piece(prev, out[j][i]))
            prev = out[j][i]
    st = pp.stats()
    positions = p if shared else 0  # positions fed: the prompt once when shared, and each conversation's own
    for j in range(n):
        positions += pp.length(sess[j].sid) - (p if shared else 0)
    gc.collect()
    after = compat.mem_alloc()
    first.close()
    for s in sess:
        s.close()
    m.close()
    tok.close()
    res = {"tokens": positions, "generated": total, "ms": ms, "tok_s": (1000.0 * positions / ms) if ms > 0 else 0.0,
           "kernels": run.kernels.kind(), "weights": m.wdtype, "kv_dtype": ccfg.dtype, "plan_total": m.plan["total"],
           "heap_used": (after - base) if base >= 0 else -1, "heap_peak": top[0] if peak and base >= 0 else -1,
           "peak_bytes": st["peak_bytes"], "cache_bytes": st["total_bytes"], "evictions": 0,
           "heap_top": top[0] + base if peak and base >= 0 else -1, "weights_in": "rom" if m.w.stream == "rom" else (
               "file" if m.w.stream else "heap"), "heap_setup": setup if peak and base >= 0 else -1,
           "forward": m.forward_kind, "kind": "pool", "slots": ccfg.slots, "sessions": n, "blocks_held": held,
           "blocks_total": pp.NB, "reclaims": st["reclaims"], "per_session": gen}
    keys = ("tokens", "generated", "ms", "tok_s", "kernels", "weights", "kv_dtype", "plan_total", "heap_used",
            "heap_peak", "peak_bytes", "cache_bytes", "evictions", "heap_top", "weights_in", "heap_setup",
            "forward", "kind", "slots", "sessions", "blocks_held", "blocks_total", "reclaims", "per_session")
    parts = []
    for key in keys:
        v = res[key]
        if isinstance(v, list):
            s = "[" + ",".join("%d" % x for x in v) + "]"
        elif isinstance(v, str):
            s = '"%s"' % v
        else:
            s = "%.3f" % v if isinstance(v, float) else "%d" % v
        parts.append('"%s":%s' % (key, s))
    print("\n#KVEDGE {" + ",".join(parts) + "}")
    del k
    return res
