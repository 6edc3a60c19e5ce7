# The stats stream (kvedge.telemetry): line format, counters, parsing of noisy port output. Every runtime.
from array import array
import json

from kvedge import telemetry
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from _support import raises, message


class _Sink:
    def __init__(self):
        self.parts = []

    def write(self, s):
        self.parts.append(s)

    def lines(self):
        return "".join(self.parts).split("\n")[:-1]


class _Fake:
    def __init__(self, **kw):
        self.st = kw

    def stats(self):
        return self.st


def _keys_in_order(line):
    body = line[len(telemetry.PREFIX):]
    pos = []
    for k in telemetry.KEYS:
        i = body.find('"' + k + '":')
        assert i >= 0, (k, line)
        pos.append(i)
    return pos == sorted(pos)


def test_line_has_prefix_fixed_key_order_and_counts_seq():
    sink = _Sink()
    t = telemetry.Telemetry(_Fake(total_bytes=100, used_bytes=40, peak_bytes=60, tokens_seen=7, tokens_cached=5,
                                  evictions=2, alloc_failures=0), out=sink)
    t.emit("start")
    t.emit()
    lines = sink.lines()
    assert len(lines) == 2
    for n, line in enumerate(lines):
        assert line.startswith("KVSTATS {")
        assert _keys_in_order(line), line
        d = telemetry.parse(line)
        assert d["seq"] == n + 1
        assert d["used_bytes"] == 40 and d["peak_bytes"] == 60 and d["total_bytes"] == 100
        assert d["tokens_seen"] == 7 and d["tokens_cached"] == 5 and d["evictions"] == 2
        assert d["alloc_failures"] == 0
    assert telemetry.parse(lines[0])["event"] == "start"
    assert telemetry.parse(lines[1])["event"] == "tick"


def test_sources_are_summed_and_missing_keys_are_null():
    t = telemetry.Telemetry([_Fake(used_bytes=10, evictions=1), _Fake(used_bytes=5, alloc_failures=3)])
    d = telemetry.parse(t.line())
    assert d["used_bytes"] == 15 and d["evictions"] == 1 and d["alloc_failures"] == 3
    assert d["total_bytes"] is None and d["tokens_seen"] is None
    d0 = telemetry.parse(telemetry.Telemetry().line("x"))
    assert d0["used_bytes"] is None and d0["seq"] == 1


def test_real_cache_stats_flow_into_the_line():
    cfg = CacheConfig(2, 2, 1, 8, 6, window=4)
    c = KVCache(cfg)
    t = telemetry.Telemetry(c)
    k = array("f", [0.5] * 8)
    for _ in range(6):
        c.append([k, k], [k, k])
    d = telemetry.parse(t.line())
    st = c.stats()
    for key in telemetry.STAT_KEYS:
        assert d[key] == st[key], (key, d[key], st[key])
    assert d["tokens_seen"] == 6 and d["tokens_cached"] == 4 and d["evictions"] == 2


def test_heap_free_is_reported_where_the_runtime_tells():
    import gc
    d = telemetry.parse(telemetry.Telemetry().line())
    if hasattr(gc, "mem_free"):
        assert isinstance(d["heap_free"], int) and d["heap_free"] > 0
    else:
        assert d["heap_free"] is None
    d = telemetry.parse(telemetry.Telemetry(largest_fn=lambda: 1234).line())
    assert d["heap_largest"] == 1234


def test_tick_respects_the_interval():
    sink = _Sink()
    t = telemetry.Telemetry(out=sink, interval_ms=0)
    assert t.tick() and t.tick()
    t2 = telemetry.Telemetry(out=sink, interval_ms=10 ** 8)
    assert not t2.tick()
    assert len(sink.lines()) == 2


def test_parse_ignores_noise_and_rejects_broken_lines():
    good = telemetry.Telemetry().line("final")
    assert telemetry.parse("OK" + good)["event"] == "final"
    assert telemetry.parse("\x00\xffgarbage " + good + "\r")["seq"] == 1
    assert telemetry.parse(good[:-5]) is None
    assert telemetry.parse(good[:len(telemetry.PREFIX) + 3]) is None
    assert telemetry.parse("KVSTATS {not json}") is None
    assert telemetry.parse("KVSTATS [1, 2]") is None
    assert telemetry.parse('KVSTATS {"seq": 1}') is None
    assert telemetry.parse("hello world") is None
    d = json.loads(good[len(telemetry.PREFIX):])
    d["seq"] = 0
    assert telemetry.parse(telemetry.PREFIX + json.dumps(d)) is None
    d["seq"] = "3"
    assert telemetry.parse(telemetry.PREFIX + json.dumps(d)) is None


def test_bad_arguments_are_refused():
    e = raises(ValueError, telemetry.Telemetry().line, 'x"y')
    assert "event" in message(e)
    t = telemetry.Telemetry()
    raises(ValueError, t.emit, "two words")
    assert t.seq == 0
    raises(TypeError, telemetry.Telemetry, [object()])
    raises(ValueError, telemetry.Telemetry, None, None, -1)
