# kvedge footprint's probe (kvedge_host.boards.footprint): a module on the board's filesystem, compiled like the
# package, so the snippet that runs it (footprint.RUN: `kvfp_probe.main(...)`) is tiny. Prints KVFP lines; a kind
# that does not fit the heap says so (KVFP nofit) instead of failing.
import gc


def _a():
    gc.collect()
    return gc.mem_alloc()


def largest():
    gc.collect()
    lo, hi = 0, gc.mem_free()
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            b = bytearray(mid)
            b = None
            lo = mid
        except MemoryError:
            hi = mid - 1
        gc.collect()
    return lo


def main(kind, modules, optional, late, model, tokenizer, steps, h2o, max_tokens, forward='float'):
    try:
        _main(kind, modules, optional, late, model, tokenizer, steps, h2o, max_tokens, forward)
    except MemoryError as e:
        print('\nKVFP nofit %s' % e)  # on a line of its own: the run may stop in the middle of a piece


def _main(kind, modules, optional, late, model, tokenizer, steps, h2o, max_tokens, forward):
    a = _a()
    print('KVFP start %d %d' % (a, gc.mem_free() + gc.mem_alloc()))
    from kvedge import kernels
    kernels.select(kind)
    b = _a()
    print('KVFP module kernels %d' % (b - a))
    a = b
    for name in modules:
        __import__(name)
        b = _a()
        print('KVFP module %s %d' % (name, b - a))
        a = b
    print('KVFP largest_imports %d' % largest())
    for name in optional:
        if name not in late:
            __import__(name)
            b = _a()
            print('KVFP optional %s %d' % (name, b - a))
            a = b
    from kvedge.model import run, llama, header
    from kvedge.model.pieces import FileTokenizer as Tokenizer
    kv = {'dtype': 'i8', 'max_tokens': max_tokens, 'align': 0}
    r = run.main(model, tokenizer, steps=steps, kv=kv, stream=True, h2o=h2o, stats_ms=1, peak=True, kernel=kind,
                 forward=forward)
    b = _a()
    print('KVFP warm %d' % (b - a))
    # the loop again without the stats stream: its lines are the stream's (telemetry_line below), and a line
    # that a stale pointer happens to keep through the peak's collection would move the loop by its size
    q = run.main(model, tokenizer, steps=steps, kv=kv, stream=True, h2o=h2o, stats_ms=0, peak=True, kernel=kind,
                 forward=forward)
    print('KVFP loop %d %d' % (q['heap_peak'], q['heap_setup']))
    q = None
    # what a stats stream's object keeps, and what an open file costs (measured after the run: its garbage is
    # gone, and nothing measured here can hide in what the run leaves)
    from kvedge.cache import KVCache
    from kvedge.config import CacheConfig
    from kvedge.telemetry import Telemetry
    c = KVCache(CacheConfig(1, 1, 1, 8, 4, 'i8', align=0))
    a = _a()
    t = Telemetry(c, interval_ms=1)
    t.emit('start')
    t.tick()
    b = _a()
    print('KVFP telemetry_state %d' % (b - a))
    s = t.line('tick')  # a line while it is written (the longest: a final line has the same keys)
    print('KVFP telemetry_line %d' % (_a() - b))
    s = None
    a = _a()
    f = open(model, 'rb')
    b = _a()
    print('KVFP file %d' % (b - a))
    f.close()
    t = c = f = None
    cfg, wd = header.read_config(model)
    ccfg = llama.cache_config(cfg, kv)
    p = llama.plan(cfg, wd, ccfg, True, 32, 8 * ccfg.slots + 256, forward, integer=llama.integer_path(kv))
    print('KVFP run %d %d %d %d' % (r['heap_peak'], p['total'], Tokenizer.nbytes(tokenizer, cfg.vocab_size, False),
                                    r['heap_setup']))
    print('KVFP largest %d %d' % (largest(), gc.mem_free()))
    # the modules only some runs load, last, one after another on top of the runner; one that does not fit
    # (KVFP toolarge) gets no figure and takes nothing from the run's own figures above
    for name in late:
        a = _a()
        try:
            __import__(name)
        except MemoryError:
            print('KVFP toolarge %s' % name)
            continue
        except (ImportError, SyntaxError, NameError, AttributeError, TypeError):
            continue  # a module this port cannot compile (kvedge.kernels.viper_tier is viper)
        print('KVFP optional %s %d' % (name, _a() - a))
