# Generate text on whatever runtime this is (a board, the unix/wasm ports, CPython) and report how it went:
# the pieces are written to stdout as they come, then one line "#KVEDGE {json}" with the run's figures.
import sys

from kvedge import kernels
from kvedge.compat import ticks_diff, ticks_ms  # CircuitPython boards have no time.ticks_*

# The generation loop's own heap beside the model and tokenizer: sampler, token lists, stdout buffers and
# names interned on first use. Measured on the unix port at about 7 KB for stories260K.
RUN_OVERHEAD = 9216


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


# Every module a run uses, leaves first. Loading a module takes more room for a moment than it keeps (its file's
# reader): imported one at a time with a collection after each, the code packs without the holes a burst of
# imports leaves (measured on a 32-bit board: 16 KB of holes after a burst, under 1 KB this way), and nothing
# is loaded late, when the heap is full.
_MODULES = ("kvedge.compat", "kvedge.errors", "kvedge.sizes", "kvedge.config", "kvedge.quant", "kvedge.cache",
            "kvedge.caches", None,
            "kvedge.floatatt", "kvedge.model.header", "kvedge.model.pieces", "kvedge.model.sampler",
            "kvedge.model.llama")


def _load(kernel, h2o, stats, encode=False, kv=None, forward="auto", model=None, tier=None, stream=False,
          int_attention="auto"):
    """Import the run's modules (None: the kernels, chosen there); returns (kernel module, forward pass): "auto"
    is resolved once the kernels are chosen (kvedge.model.llama.resolve_forward). Eviction, the stats stream,
    encoding a prompt (kvedge.model.bpe), the integer attention path (kvedge.attention), the other forward
    passes and the tiered cache only when the run uses them (a plan's "without" leaves the encoder and the stats
    stream out: kvedge.model.plandoc.LEAN_MODULES names these two)."""
    import gc
    k = None
    for name in _MODULES + (("kvedge.evict",) if h2o else ()) + (("kvedge.telemetry",) if stats else ()) + (
            ("kvedge.model.bpe",) if encode else ()):
        if name is None:
            k = kernels.select(kernel)
        else:
            __import__(name)
        gc.collect()
    from kvedge.model import llama  # its rules, now that the kernels are chosen
    if forward == "auto":
        cfg, wdtype = llama.read_config(model)
        forward = llama.resolve_forward(forward, wdtype, llama.cache_config(cfg, kv), tier, stream, h2o > 0)
    later = ()
    if forward != "float" or llama.integer_path(kv, int_attention):
        later += ("kvedge.cacheq8",)  # the cache written with int8 codes (kvedge.caches.build)
    if forward != "float" or llama.integer_path(kv, int_attention) or tier is not None:
        later += ("kvedge.attention",)
    later += ("kvedge.model.pass_%s" % forward,)  # the pass and its weights' loader
    if tier is not None:
        later += ("kvedge.tier.cache",)
    for name in later:
        __import__(name)
        gc.collect()
    if forward == "int":  # its q_* kernels and the fused attention drivers now, not late in a fragmented heap
        from kvedge.model import pass_int
        pass_int.qkernels()
        gc.collect()
        pre = getattr(k, "att_preload", None)
        if pre is not None:
            pre(k)
            gc.collect()
        if model is not None and llama.read_config(model)[1] == "i4":  # int4 rows' reader and q4 kernels
            from kvedge.model import pass_int4
            pass_int4.kernels4()
            gc.collect()
        if tier is not None:  # the tier's fold kernels (TieredCache.bind_q8 takes them from here)
            from kvedge.tier import cache as tiered
            tiered.fold_kernels()
            gc.collect()
    return k, forward


MAX_IDS = 1 << 16  # more prompt ids than any context a plan keeps (kvedge.model.plandoc's context bound is larger,
# but a prompt longer than this is a mistake, not a run)


def _check_prompt(prompt, ids, encode):
    """The prompt given one way: text (encoded here, unless encode=False says the run has no encoder), or ids (a
    non-empty list of token ids >= 0, at most MAX_IDS): ValueError naming the argument, before anything is
    allocated."""
    if ids is None:
        if encode is False and len(prompt):
            raise ValueError("prompt: this run has no encoder (its plan leaves it out): give the prompt as ids, "
                             "encoded on the host")
        return
    if len(prompt):
        raise ValueError("ids: given with a text prompt; give one or the other")
    if not isinstance(ids, (list, tuple)) or not 0 < len(ids) <= MAX_IDS:
        raise ValueError("ids: a list of 1..%d token ids, got %s" % (MAX_IDS, type(ids).__name__ if not isinstance(
            ids, (list, tuple)) else "%d" % len(ids)))
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise ValueError("ids: token ids are integers >= 0, got %r" % (t,))


def main(model, tokenizer, prompt="", steps=256, temperature=0.0, seed=1, kv=None, budget=None, workspace=0,
         stream=False, kernel="auto", tile=32, peak=False, h2o=0, stats_ms=0, overhead=RUN_OVERHEAD,
         kv_bytes=0, encode=None, ctrl_c=False, forward="float", tier=None, int_attention="auto", prefill=1, save=None,
         resume=None, ids=None):
    """Returns the stats dict it prints. Raises BudgetError before allocating when the run does not fit: the
    plan counts the tokenizer (kept in its file: kvedge.model.pieces.FileTokenizer) and `overhead`, this
    loop's own heap (a plan made from the board's measured footprint passes the loop it measured), in the
    workspace. peak=True collects garbage after every token to measure the live heap's peak (slower):
    heap_peak is the growth over the heap at the start, heap_top the whole heap in use (gc.mem_alloc(): the
    runtime's code included), both the highest seen after set-up and after any token; heap_setup the growth once
    set up, before the first token. h2o=N evicts heavy
    hitters to hold N tokens (half of them the most recent; kvedge.evict.H2O). stats_ms > 0 writes
    kvedge.telemetry's KVSTATS lines (start, every stats_ms during generation, final) between the pieces, for
    `kvedge monitor`. kv_bytes > 0 (the plan's kv_bytes) allocates the cache's arena first, before anything
    is imported: the heap is then still one free block (imports leave holes that can make the largest block
    far smaller than what is free); the cache checks it is its size. encode: count the tokenizer's sorted ids
    (default: when there is a prompt), as the plan did. ctrl_c=True looks for a Ctrl-C waiting on stdin after
    every token (a board's USB stack interrupts a program by itself; firmware that reads its UART only when
    asked, like the emulated Cortex-M3's, cannot be stopped otherwise). forward: the pass the caller's budget
    was counted for: "float" (the default: what a board's measured footprint is of), "int", "ulab", or "auto"
    (the fastest this model, cache and kernels allow: kvedge.model.passes; Llama's own default).
    tier: a tiered cache (a plan's "tier": block, cold_dtype, cold_blocks, at_cap, cold_align; its files
    kvedge.model.llama.COLD_PATH.* start afresh): kv is then its ring's config and kv_bytes the ring's arena.
    int_attention: Llama's ("auto": the integer attention path with asm/viper kernels; True: with any kernels,
    e.g. plain ones on a host reproducing a board's asm run bit for bit). prefill: the prompt's tokens a chunk
    at a time (the integer pass: kvedge.model.prefill; a plan's "prefill"), 1: one at a time. resume: a session
    (kvedge.session) saved by a run of the same model and cache to go on from (its cache, sampler and next token;
    the prompt is not read, a tier's cold store is reopened as it is): `steps` more positions; save: the session
    to write when the run ends (the next token, the last one sampled, is not yet fed: a resumed run feeds it).
    ids: the prompt as token ids the host encoded (a plan without the board's encoder: kvedge.model.plandoc's
    "without"), BOS first; the encoder is then not loaded. A text prompt with encode=False is refused."""
    _check_prompt(prompt, ids, encode)
    if ids is not None:
        encode = False
    if budget is not None and kv_bytes > budget:
        from kvedge.errors import BudgetError
        raise BudgetError("KV arena", kv_bytes, budget)
    arena = bytearray(kv_bytes) if kv_bytes > 0 else None
    import gc
    if encode is None:
        encode = len(prompt) > 0  # encoding a text sorts the tokenizer's ids once
    k, forward = _load(kernel, h2o, stats_ms > 0, encode, kv, forward, model, tier, stream, int_attention)
    from kvedge import compat
    from kvedge.model.llama import Llama, check, generate, integer_path
    from kvedge.model.sampler import Sampler
    from kvedge.model.pieces import BOS, FileTokenizer
    from kvedge.model.header import read_config
    if h2o:
        from kvedge.evict import H2O
    if stats_ms > 0:
        from kvedge.telemetry import Telemetry
    gc.collect()
    # the wasm port's gc.mem_alloc() does not settle after a collection: no heap figures there
    base = compat.mem_alloc() if sys.platform != "webassembly" else -1
    if base >= 0 and arena is not None:
        base -= kv_bytes  # the arena allocated first is the run's too
    cfg, wdtype = read_config(model)
    if ids is not None:
        for t in ids:
            if t >= cfg.vocab_size:
                raise ValueError("ids: token %d outside the model's vocabulary of %d" % (t, cfg.vocab_size))
    policy = None
    if h2o:
        def policy(cache):
            return H2O(cache, budget=h2o, recent=h2o // 2)
    ws = workspace + FileTokenizer.nbytes(tokenizer, cfg.vocab_size, encode) + overhead
    # BudgetError before anything else is allocated
    if prefill != 1:  # prompts in chunks: their buffers and code (checked: ValueError before anything is allocated)
        from kvedge.model import prefill as chunks
        ws += chunks.account(cfg, prefill, forward, wdtype=wdtype)
    check(model, kv, budget, ws, stream, tile, h2o > 0, forward, None,
          integer_path(kv, int_attention), tier)  # as Llama counts it: its attention's integer scratch
    tok = FileTokenizer(tokenizer, cfg.vocab_size)  # pieces stay in the file; its offsets go before the small objects
    if encode:  # the ids sorted by piece (a 1 KB array for stories260K's 512) beside them, not in a heap the
        # model has fragmented (a tiered plan on the emulated rp2040: MemoryError in bpe.sort_ids)
        from kvedge.model.bpe import sort_ids
        tok.order = sort_ids(tok)
    gc.collect()  # set-up leaves garbage between what it keeps: free it before the next arrays are placed
    reopen = None
    if resume is not None and tier is not None:  # the cold store as the saved run left it, not started afresh
        from kvedge import session
        reopen = session.reopen_tier(tier, tile, arena)
    m = Llama(model, kv=kv, budget=budget, workspace=ws, stream=stream, tile=tile, policy=policy, arena=arena,
              forward=forward, tier=tier, int_attention=int_attention, cache=reopen)
    reopen = None
    if prefill != 1:
        generate = chunks.attach(m, prefill)  # kvedge.model.prefill's generate(), the prompt in chunks
    arena = None
    gc.collect()
    sampler = Sampler(m.cfg.vocab_size, temperature, seed)
    seen0 = 0  # positions the cache held before this run (a resumed one's)
    if resume is not None or save is not None:
        from kvedge import session
        if resume is not None:  # refused whole (SessionError) before the cache changes
            ids = [session.load_next(resume, m, sampler)]
            seen0 = m.cache.stats()["tokens_seen"]
        if save is not None:
            sampler = session.Last(sampler)
    if resume is None and ids is None:
        ids = tok.encode(prompt) if len(prompt) else [BOS]  # no text: no encoder (kvedge.model.bpe) loaded
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
        w(b"")  # the heap once everything is set up, before the first token
    setup = top[0]  # what the generation loop adds beyond it: heap_peak - heap_setup
    t0 = ticks_ms()
    generated = generate(m, tok, sampler, ids, steps, w, keep=False)
    ms = ticks_diff(ticks_ms(), t0)
    if tele is not None:
        tele.emit("final")
    if save is not None:
        session.save_end(save, m, sampler, ids, seen0)
    gc.collect()
    after = compat.mem_alloc()
    st = m.cache.stats()
    n = st["tokens_seen"] - seen0  # this run's positions (a resumed run's cache counts the saved ones too)
    tiered = m.kind == "tiered"
    m.close()
    tok.close()
    res = {"tokens": n, "generated": generated, "ms": ms, "tok_s": (1000.0 * n / ms) if ms > 0 else 0.0,
           "kernels": kernels.kind(), "weights": m.wdtype, "kv_dtype": m.cache.cfg.dtype,
           "plan_total": m.plan["total"], "heap_used": (after - base) if base >= 0 else -1,
           "heap_peak": top[0] if peak and base >= 0 else -1,
           "peak_bytes": st["peak_bytes"], "cache_bytes": st["total_bytes"], "evictions": st["evictions"],
           "heap_top": top[0] + base if peak and base >= 0 else -1,
           "weights_in": "rom" if m.w.stream == "rom" else ("file" if m.w.stream else "heap"),
           "heap_setup": setup if peak and base >= 0 else -1,
           # the cache and the pass that ran, to compare with the plan
           "forward": m.forward_kind, "kind": m.kind, "slots": m.cache.cfg.slots,
           "cold_tokens": st["cold_cap_tokens"] if tiered else 0, "cold_blocks": m.cache.C if tiered else 0,
           "prefill": prefill}
    keys = ("tokens", "generated", "ms", "tok_s", "kernels", "weights", "kv_dtype", "plan_total", "heap_used",
            "heap_peak", "peak_bytes", "cache_bytes", "evictions", "heap_top", "weights_in", "heap_setup",
            "forward", "kind", "slots", "cold_tokens", "cold_blocks", "prefill")
    parts = []
    for key in keys:  # fixed key order: MicroPython dicts are not ordered
        v = res[key]
        parts.append('"%s":%s' % (key, ('"%s"' % v) if isinstance(v, str) else ("%.3f" % v if isinstance(
            v, float) else "%d" % v)))
    print("\n#KVEDGE {" + ",".join(parts) + "}")
    del k
    return res

