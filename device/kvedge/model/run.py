# Generate text on whatever runtime this is (a board, the unix/wasm ports, CPython) and report how it went:
# the pieces are written to stdout as they come, then one line "#KVEDGE {json}" with the run's figures.
import sys

from kvedge import kernels
from kvedge.compat import ticks_diff, ticks_ms  # CircuitPython boards have no time.ticks_*

# The generation loop's own heap beside the model and tokenizer: sampler, token lists, stdout buffers and
# names interned on first use. Measured on the unix port at about 7 KB for stories260K.
RUN_OVERHEAD = 9216


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
         stream=False, kernel="auto", tile=32, peak=False, h2o=0, stats_ms=0, ctrl_c=False, forward="float"):
    """Returns the stats dict it prints. Raises BudgetError before allocating when the run does not fit
    (the tokenizer is counted in the plan's workspace). peak=True collects garbage after every token to
    measure the live heap's peak (slower). h2o=N evicts heavy hitters to hold N tokens (half of them the most
    recent; kvedge.evict.H2O). stats_ms > 0 writes kvedge.telemetry's KVSTATS lines (start, every stats_ms
    during generation, final) between the pieces, for `kvedge monitor`. ctrl_c=True looks for a Ctrl-C
    waiting on stdin after every token (a board's USB stack interrupts a program by itself; firmware that reads its
    UART only when asked, like the emulated Cortex-M3's, cannot be stopped otherwise). forward: "float", "int" or "ulab"
    (kvedge.model.llama.Llama)."""
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
              stream=stream, tile=tile, policy=policy, forward=forward)
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

