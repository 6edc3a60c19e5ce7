# A workload for boards and the virtual board: fills a windowed KV cache (attention sinks + ring) token by
# token and streams its stats with kvedge.telemetry, with ordinary program output interleaved on the port.
#
#   import fill_window; w = fill_window.run(tokens=200, every=10)
#   w = fill_window.run(plan="kvedge_plan.json")   # the cache `kvedge plan --out` chose (sent by kvedge deploy)
#
# Emits a "start" line, one "tick" line every `every` tokens and a "final" line (2 + tokens // every lines), plus
# a "reset" line each time a cache without a window fills up and is reset. Returns the Workload so the
# caller (or a later `mpremote exec`) can read w.cache.stats().
from array import array
import gc
import time

from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from kvedge.errors import CacheFullError
from kvedge.telemetry import Telemetry


def config(layers=4, heads=4, kv_heads=2, head_dim=32, window=56, sinks=8, dtype="f16", max_tokens=None):
    if max_tokens is None:
        max_tokens = sinks + window if window else 64
    return CacheConfig(layers, heads, kv_heads, head_dim, max_tokens, dtype=dtype, window=window, sinks=sinks)


def load_plan(path):
    # a device config JSON from `kvedge plan --out`: "cache" -> CacheConfig, "budget_bytes" -> the refusal line
    import json
    with open(path) as f:
        doc = json.load(f)
    return CacheConfig.from_dict(doc["cache"]), doc.get("budget_bytes")


class Workload:
    def __init__(self, cfg, budget=None):
        gc.collect()  # the arena is one block: give it the tidiest heap we can
        self.cache = KVCache(cfg, budget)
        self.telemetry = Telemetry(self.cache)
        n = cfg.kv_heads * cfg.head_dim
        self.k = [array("f", [0.0] * n) for _ in range(cfg.layers)]
        self.v = [array("f", [0.0] * n) for _ in range(cfg.layers)]

    def step(self, t):
        # deterministic, distinct rows per token and layer (values stay small: exact in f16)
        for layer in range(len(self.k)):
            k, v = self.k[layer], self.v[layer]
            for i in range(len(k)):
                k[i] = ((t * 7 + layer * 3 + i) % 17 - 8) * 0.125
                v[i] = ((t * 5 + layer + i * 3) % 13 - 6) * 0.25
        try:
            self.cache.append(self.k, self.v)
        except CacheFullError:
            # no window and full: a reset point (trap 8 in docs/architecture.md), reported on the stream, then carry on
            self.telemetry.emit("reset")
            self.cache.reset()
            self.cache.append(self.k, self.v)


def run(tokens=200, every=10, delay_ms=0, chatter=True, plan=None, **cfg):
    if plan:
        w = Workload(*load_plan(plan))
    else:
        w = Workload(config(**cfg))
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
