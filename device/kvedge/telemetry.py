# The stats stream: one line per interval or event, readable by `kvedge monitor` over serial.
#
#   KVSTATS {"seq":12,"t_ms":5004,"event":"tick","total_bytes":40960,"used_bytes":40960,...}
#
# A line is the PREFIX followed by one compact JSON object whose keys always come in the order of KEYS
# (MicroPython dicts are not ordered, so the line is built by hand). Other program output may share the port:
# the monitor keeps only text from PREFIX to the end of a line, so it also survives garbage before the prefix.
#   seq            sample counter from 1, +1 per line: a gap means lost lines, a repeat means duplicated ones,
#                  a drop back to 1 means the board restarted
#   t_ms           milliseconds since the Telemetry object was made (wrap-safe ticks on MicroPython)
#   event          why the line was written: "tick" (interval), "start", "final", "reset" or the caller's word
#   total_bytes .. alloc_failures   summed over the sources' stats() dicts (CACHE_API: KVCache.stats());
#                  null when no source has the key
#   heap_free      gc.mem_free() after gc.collect(), null where the runtime does not tell (CPython)
#   heap_largest   largest free heap block: null here, because MicroPython only prints it (mem_info);
#                  a port-specific function can be passed as largest_fn
#   tok_s          tokens seen per second since the previous line (one decimal)
import gc
import sys

from .compat import ticks_diff, ticks_ms  # CircuitPython boards have no time.ticks_*

PREFIX = "KVSTATS "
KEYS = ("seq", "t_ms", "event", "total_bytes", "used_bytes", "peak_bytes", "tokens_seen", "tokens_cached",
        "evictions", "alloc_failures", "heap_free", "heap_largest", "tok_s")
STAT_KEYS = KEYS[3:10]

def _now_ms():
    return ticks_ms()


def _elapsed_ms(t0, t1):
    return ticks_diff(t1, t0)


def _num(v):
    if v is None:
        return "null"
    if isinstance(v, float):
        return "%.1f" % v
    return "%d" % v


def _event_json(ev):
    # Event words are plain identifiers; refuse anything that would need JSON escaping.
    for c in ev:
        if not (c.isalpha() or c.isdigit() or c in "_-."):
            raise ValueError("telemetry event must be letters, digits, '_', '-' or '.': %r" % ev)
    return '"' + ev + '"'


class Telemetry:
    """Stats stream for one or more objects with a stats() dict (a KVCache, a policy, a session pool).

    emit(event) writes one line now; tick() writes one when interval_ms has passed (call it once per token)."""

    def __init__(self, sources=None, out=None, interval_ms=1000, collect=True, largest_fn=None):
        if sources is None:
            sources = []
        elif not isinstance(sources, (list, tuple)):
            sources = [sources]
        for s in sources:
            if not callable(getattr(s, "stats", None)):
                raise TypeError("telemetry source %r has no stats() method" % (s,))
        if interval_ms < 0:
            raise ValueError("interval_ms must be >= 0, got %r" % (interval_ms,))
        self.sources = list(sources)
        self.out = out
        self.interval_ms = interval_ms
        self.collect = collect
        self.largest_fn = largest_fn
        self.seq = 0
        self._t0 = _now_ms()
        self._last_t = None
        self._last_seen = 0
        self._last_emit = self._t0

    def snapshot(self):
        """The stats summed over the sources: dict of STAT_KEYS (None where no source has a key)."""
        tot = {}
        for k in STAT_KEYS:
            tot[k] = None
        for s in self.sources:
            st = s.stats()
            for k in STAT_KEYS:
                v = st.get(k)
                if v is not None:
                    tot[k] = v if tot[k] is None else tot[k] + v
        return tot

    def line(self, event="tick"):
        """The next stats line (without newline); advances seq."""
        ev = _event_json(event)
        now = _now_ms()
        t = _elapsed_ms(self._t0, now)
        st = self.snapshot()
        seen = st["tokens_seen"] or 0
        if self._last_t is None or t <= self._last_t:
            rate = 0.0
        else:
            rate = (seen - self._last_seen) * 1000.0 / (t - self._last_t)
        self._last_t = t
        self._last_seen = seen
        free = None
        f = getattr(gc, "mem_free", None)
        if f is not None:
            if self.collect:
                gc.collect()
            free = f()
        largest = self.largest_fn() if self.largest_fn is not None else None
        self.seq += 1
        parts = ['{"seq":', "%d" % self.seq, ',"t_ms":', "%d" % t, ',"event":', ev]
        for k in STAT_KEYS:
            parts.append(',"' + k + '":')
            parts.append(_num(st[k]))
        parts.append(',"heap_free":')
        parts.append(_num(free))
        parts.append(',"heap_largest":')
        parts.append(_num(largest))
        parts.append(',"tok_s":')
        parts.append("%.1f" % rate)
        parts.append("}")
        return PREFIX + "".join(parts)

    def emit(self, event="tick"):
        """Write one stats line now; returns it."""
        s = self.line(event)
        out = self.out if self.out is not None else sys.stdout
        out.write(s + "\n")
        fl = getattr(out, "flush", None)
        if fl is not None:
            fl()
        self._last_emit = _now_ms()
        return s

    def tick(self):
        """Emit a "tick" line if interval_ms has passed since the last line; True when it did."""
        if _elapsed_ms(self._last_emit, _now_ms()) < self.interval_ms:
            return False
        self.emit("tick")
        return True


def parse(text):
    """The sample dict in a line of port output, or None: the text from PREFIX on must be one JSON object with
    every key of KEYS and an integer seq >= 1. Garbage before the prefix is ignored."""
    i = text.find(PREFIX)
    if i < 0:
        return None
    body = text[i + len(PREFIX):].strip()
    if not body.startswith("{") or not body.endswith("}"):
        return None
    try:
        import json
        d = json.loads(body)
    except (ValueError, TypeError):
        return None
    if not isinstance(d, dict):
        return None
    for k in KEYS:
        if k not in d:
            return None
    seq = d["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        return None
    return d
