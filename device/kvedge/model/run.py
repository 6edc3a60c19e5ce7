# Generate text on whatever runtime this is (a board, the unix/wasm ports, CPython) and report how it went:
# the pieces are written to stdout as they come, then one line "#KVEDGE {json}" with the run's figures.
import sys

from kvedge import kernels
from kvedge.compat import ticks_diff, ticks_ms  # CircuitPython boards have no time.ticks_*

# The generation loop's own heap beside the model and tokenizer: sampler, token lists, stdout buffers and
# names interned on first use. Measured on the unix port at about 7 KB for stories260K.
RUN_OVERHEAD = 8192


def _ms():
    return ticks_ms()


def _elapsed(t0):
    return ticks_diff(ticks_ms(), t0)


def _ctrl_c():
    """A check that raises KeyboardInterrupt when a Ctrl-C (0x03) waits on stdin, or None where stdin cannot be
    polled (CPython and CircuitPython boards take Ctrl-C themselves)."""
    if sys.implementation.name != "micropython":
        return None
    try:
        import select
        p = select.poll()
        p.register(sys.stdin, select.POLLIN)
    except (ImportError, AttributeError, OSError, TypeError):
        return None

    def check():
        while p.poll(0):
            if sys.stdin.read(1) == "\x03":
                raise KeyboardInterrupt
    return check


def _writer():
    out = getattr(sys.stdout, "buffer", None)
    if out is not None:
        def w(b):
            out.write(b)
            if hasattr(out, "flush"):
                out.flush()
        return w
    return lambda b: sys.stdout.write(b.decode("utf-8"))  # a piece may split a character: rare, tolerated


def main(model, tokenizer, prompt="", steps=256, temperature=0.0, seed=1, kv=None, budget=None, workspace=0,
         stream=False, kernel="auto", tile=32, peak=False, h2o=0, stats_ms=0, ctrl_c=False):
    """Returns the stats dict it prints. Raises BudgetError before allocating when the run does not fit
    (the tokenizer is counted in the plan's workspace). peak=True collects garbage after every token to
    measure the live heap's peak (slower). h2o=N evicts heavy hitters to hold N tokens (half of them the most
    recent; kvedge.evict.H2O). stats_ms > 0 writes kvedge.telemetry's KVSTATS lines (start, every stats_ms
    during generation, final) between the pieces, for `kvedge monitor`. ctrl_c=True looks for a Ctrl-C
    waiting on stdin after every token (a board's USB stack interrupts a program by itself; firmware that reads its
    UART only when asked, like the emulated Cortex-M3's, cannot be stopped otherwise)."""
    import gc
    from kvedge import compat
    from kvedge.model.llama import Llama, generate
    from kvedge.model.sampler import Sampler
    from kvedge.model.tokenizer import Tokenizer
    k = kernels.select(kernel)
    gc.collect()
    # the wasm port's gc.mem_alloc() does not settle after a collection: no heap figures there
    base = compat.mem_alloc() if sys.platform != "webassembly" else -1
    from kvedge.model.checkpoint import read_config
    vocab = read_config(model)[0].vocab_size
    policy = None
    if stats_ms > 0:
        # imported before the model's buffers are allocated: its code needs a contiguous block, which a heap
        # the plan filled to within a kilobyte may no longer have afterwards (seen on the rp2040 heap)
        from kvedge.telemetry import Telemetry
    if h2o:
        from kvedge.evict import H2O

        def policy(cache):
            return H2O(cache, budget=h2o, recent=h2o // 2)
    m = Llama(model, kv=kv, budget=budget, workspace=workspace + Tokenizer.nbytes(tokenizer, vocab) + RUN_OVERHEAD,
              stream=stream, tile=tile, policy=policy)
    tok = Tokenizer.load(tokenizer, m.cfg.vocab_size)
    ids = tok.encode(prompt)
    w = _writer()
    stop = _ctrl_c() if ctrl_c else None
    if stop is not None:
        raw_w = w

        def w(b):
            raw_w(b)
            stop()
    tele = None
    if stats_ms > 0:
        tele = Telemetry(m.policy if m.policy is not None else m.cache, interval_ms=stats_ms)
        tele.emit("start")
        text = w

        def w(b):
            text(b)
            tele.tick()
    top = [0]
    if peak and base >= 0:
        raw = w

        def w(b):
            raw(b)
            gc.collect()
            a = compat.mem_alloc() - base
            if a > top[0]:
                top[0] = a
    t0 = _ms()
    out = generate(m, tok, Sampler(m.cfg.vocab_size, temperature, seed), ids, steps, w)
    ms = _elapsed(t0)
    if tele is not None:
        tele.emit("final")
    gc.collect()
    after = compat.mem_alloc()
    st = m.cache.stats()
    n = m.cache.n_seen
    m.close()
    res = {"tokens": n, "generated": len(out), "ms": ms, "tok_s": (1000.0 * n / ms) if ms > 0 else 0.0,
           "kernels": kernels.kind(), "weights": m.wdtype, "kv_dtype": m.cache.cfg.dtype,
           "plan_total": m.plan["total"], "heap_used": (after - base) if base >= 0 else -1,
           "heap_peak": top[0] if peak and base >= 0 else -1,
           "peak_bytes": st["peak_bytes"], "cache_bytes": st["total_bytes"], "evictions": st["evictions"],
           "weights_in": "rom" if m.w.stream == "rom" else ("file" if m.w.stream else "heap")}
    keys = ("tokens", "generated", "ms", "tok_s", "kernels", "weights", "kv_dtype", "plan_total", "heap_used",
            "heap_peak", "peak_bytes", "cache_bytes", "evictions", "weights_in")
    parts = []
    for key in keys:  # fixed key order: MicroPython dicts are not ordered
        v = res[key]
        parts.append('"%s":%s' % (key, ('"%s"' % v) if isinstance(v, str) else ("%.3f" % v if isinstance(
            v, float) else "%d" % v)))
    print("\n#KVEDGE {" + ",".join(parts) + "}")
    del k
    return res


# ---- a board that runs on its own: the plan on its filesystem, options in settings.toml ----

PLAN = "kvedge_plan.json"
_SHAPE = ("layers", "heads", "kv_heads", "head_dim")
_STREAM = {"heap": False, "flash": True, "rom": "rom"}


def plan_args(doc, model=None, tokenizer=None):
    """main()'s cache and memory arguments from a `kvedge plan --out` document: the cache fields (the shape comes
    from the checkpoint), H2O's token budget, where the weights live (heap, flash = streamed, rom = read in
    place), and the heap the plan was made for. The workspace: with the model and tokenizer files, what the plan's
    total leaves beyond the run's own account (weights as held, cache, buffers, Python objects, tokenizer, loop),
    i.e. the runtime's share; negative when the plan cannot hold this run (plan it with that much more
    workspace). Without them, the plan's workspace_bytes."""
    kv = {}
    for k in doc["cache"]:
        if k not in _SHAPE:
            kv[k] = doc["cache"][k]
    pol = doc.get("policy") or {}
    h2o = pol.get("budget", 0) if pol.get("kind") == "h2o" else 0
    place = doc["weights"]["place"]
    if place not in _STREAM:
        raise ValueError("plan: weights place %r, expected heap, flash or rom" % (place,))
    ws = doc["workspace_bytes"]
    if model is not None:
        from kvedge.model import llama
        from kvedge.model.checkpoint import read_config, weights_place
        from kvedge.model.tokenizer import Tokenizer
        cfg, wdtype = read_config(model)
        ccfg = llama.cache_config(cfg, kv)
        own = Tokenizer.nbytes(tokenizer, cfg.vocab_size) + RUN_OVERHEAD + ((8 * ccfg.slots + 256) if h2o else 0)
        ws = doc["total_bytes"] - llama.plan(cfg, wdtype, ccfg, weights_place(model, _STREAM[place]), 32,
                                             own)["total"]
    return {"kv": kv, "h2o": h2o, "stream": _STREAM[place], "budget": doc["heap_bytes"], "workspace": ws}


def _setting(get, name, default, conv):
    v = get("KVEDGE_" + name)
    return default if v is None else conv(v)


def from_settings(getenv=None):
    """Generate as settings.toml says (CircuitPython's os.getenv reads it; MicroPython ports have no os.getenv and
    take the defaults): KVEDGE_PLAN (default kvedge_plan.json), KVEDGE_MODEL, KVEDGE_TOKENIZER, KVEDGE_PROMPT,
    KVEDGE_STEPS, KVEDGE_TEMPERATURE (a string: settings.toml holds strings and integers), KVEDGE_SEED,
    KVEDGE_STATS_MS. What code.py on a CircuitPython board runs."""
    import json
    if getenv is None:
        import os
        getenv = getattr(os, "getenv", None) or (lambda k: None)
    from kvedge.errors import BudgetError
    with open(_setting(getenv, "PLAN", PLAN, str)) as f:
        doc = json.load(f)
    model = _setting(getenv, "MODEL", "model.bin", str)
    tok = _setting(getenv, "TOKENIZER", "tokenizer.bin", str)
    args = plan_args(doc, model, tok)
    if args["workspace"] < 0:
        raise BudgetError("the plan leaves no room for this run's own objects", doc["total_bytes"] -
                          args["workspace"], doc["total_bytes"])
    return main(model, tok,
                prompt=_setting(getenv, "PROMPT", "", str), steps=_setting(getenv, "STEPS", 64, int),
                temperature=_setting(getenv, "TEMPERATURE", 0.0, float), seed=_setting(getenv, "SEED", 1, int),
                stats_ms=_setting(getenv, "STATS_MS", 1000, int), **args)
