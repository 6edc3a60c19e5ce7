# A workload for boards and the virtual board: fills a windowed KV cache (attention sinks + ring) token by
# token and streams its stats with kvedge.telemetry, with ordinary program output interleaved on the port.
#
#   import fill_window; w = fill_window.run(tokens=200, every=10)
#
# Emits a "start" line, one "tick" line every `every` tokens (deterministic count: 2 + tokens // every lines
# when tokens % every != 0, else 1 + tokens // every + 1) and a "final" line. Returns the Workload so the
# caller (or a later `mpremote exec`) can read w.cache.stats().
from array import array
import gc
import time

from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from kvedge.telemetry import Telemetry


class Workload:
    def __init__(self, layers=4, heads=4, kv_heads=2, head_dim=32, window=56, sinks=8, dtype="f16"):
        gc.collect()  # the arena is one block: give it the tidiest heap we can
        cfg = CacheConfig(layers, heads, kv_heads, head_dim, sinks + window, dtype=dtype, window=window,
                          sinks=sinks)
        self.cache = KVCache(cfg)
        self.telemetry = Telemetry(self.cache)
        n = kv_heads * head_dim
        self.k = [array("f", [0.0] * n) for _ in range(layers)]
        self.v = [array("f", [0.0] * n) for _ in range(layers)]

    def step(self, t):
        # deterministic, distinct rows per token and layer (values stay small: exact in f16)
        for layer in range(len(self.k)):
            k, v = self.k[layer], self.v[layer]
            for i in range(len(k)):
                k[i] = ((t * 7 + layer * 3 + i) % 17 - 8) * 0.125
                v[i] = ((t * 5 + layer + i * 3) % 13 - 6) * 0.25
        self.cache.append(self.k, self.v)


def run(tokens=200, every=10, delay_ms=0, chatter=True, **cfg):
    w = Workload(**cfg)
    w.telemetry.emit("start")
    for t in range(tokens):
        w.step(t)
        if chatter and t % 25 == 0:
            print("fill_window: token %d" % t)  # other output sharing the port
        if (t + 1) % every == 0:
            w.telemetry.emit("tick")
        if delay_ms:
            time.sleep(delay_ms / 1000)
    w.telemetry.emit("final")
    print("fill_window: done, " + w.cache.stats_json())
    return w
