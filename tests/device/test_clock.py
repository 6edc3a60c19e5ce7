# Clocks without time.ticks_*: a CircuitPython board has only time.monotonic_ns() and supervisor.ticks_ms()
# (wrapping at 2**29). kvedge.compat's fallback, and telemetry and the model runner on top of it, are run
# here against a simulated `time` module without ticks_* (every runtime).
import sys

from kvedge import compat

P = 1 << 29


class _Now:
    ns = 0   # what monotonic_ns() returns
    ms = 0   # what supervisor.ticks_ms() returns


class BoardTime:
    # a CircuitPython board's time module: no ticks_ms/ticks_us/ticks_diff
    @staticmethod
    def monotonic_ns():
        return _Now.ns

    @staticmethod
    def monotonic():
        return _Now.ns / 1000000000


class SecondsOnly:
    @staticmethod
    def monotonic():
        return _Now.ns / 1000000000


class Supervisor:
    @staticmethod
    def ticks_ms():
        return _Now.ms


def _advance(ms):
    _Now.ns += ms * 1000000
    _Now.ms = (_Now.ms + ms) & (P - 1)


def test_the_runtime_clock_moves_forward():
    t0, u0 = compat.ticks_ms(), compat.ticks_us()
    # spin until the millisecond clock has moved twice (bounded): a port whose microsecond clock is the
    # millisecond one times 1000 (the wasm port's) shows no microsecond either before that
    for i in range(200000):
        if compat.ticks_diff(compat.ticks_ms(), t0) >= 2:
            break
    assert compat.ticks_diff(compat.ticks_ms(), t0) >= 2
    assert compat.ticks_diff(compat.ticks_us(), u0) > 0


def test_supervisor_ticks_wrap_and_microseconds_from_monotonic_ns():
    ms, us, diff = compat.make_clock(BoardTime, Supervisor)
    _Now.ms = P - 5
    _Now.ns = 7 * 1000000000                    # 7 s: monotonic_ns is a long int on a board by then
    t0, u0 = ms(), us()
    assert t0 == P - 5
    _advance(20)                                 # supervisor ticks wrap to 15
    assert ms() == 15 and diff(ms(), t0) == 20
    assert diff(us(), u0) == 20000
    _Now.ns = (P - 100) * 1000                   # microseconds about to wrap
    u0 = us()
    _Now.ns += 300000
    assert us() == 200 and diff(us(), u0) == 300
    assert diff(u0, us()) == -300                # order matters, as with time.ticks_diff


def test_without_supervisor_milliseconds_come_from_monotonic_ns_or_monotonic():
    ms, us, diff = compat.make_clock(BoardTime, None)
    _Now.ns = (P - 3) * 1000000                  # milliseconds about to wrap
    t0 = ms()
    _Now.ns += 8000000
    assert ms() == 5 and diff(ms(), t0) == 8
    ms, us, diff = compat.make_clock(SecondsOnly, None)
    _Now.ns = 1500000000                         # float seconds: float32 on boards, so +-1 ms
    t0 = ms()
    _Now.ns += 8000000
    assert 7 <= diff(ms(), t0) <= 9
    ms, us, diff = compat.make_clock(BoardTime, None, None)   # CPython: no wrap at all
    _Now.ns = 3 * P * 1000000
    assert ms() == 3 * P and diff(ms() + 5, ms()) == 5


def test_real_ticks_are_used_where_the_time_module_has_them():
    class WithTicks(BoardTime):
        @staticmethod
        def ticks_ms():
            return 1

        @staticmethod
        def ticks_us():
            return 2

        @staticmethod
        def ticks_diff(a, b):
            return 3
    ms, us, diff = compat.make_clock(WithTicks, Supervisor)
    assert (ms(), us(), diff(0, 0)) == (1, 2, 3)


_SWAPPED = ("time", "supervisor", "kvedge.compat", "kvedge.telemetry", "kvedge.model.run")


def _on_a_board_clock(fn):
    # kvedge.compat, telemetry and the runner imported afresh while `time` is a board's; then put back
    import kvedge
    import kvedge.model
    saved = dict((k, sys.modules.get(k)) for k in _SWAPPED)
    attrs = (getattr(kvedge, "compat", None), getattr(kvedge, "telemetry", None),
             getattr(kvedge.model, "run", None))
    sys.modules["time"] = BoardTime
    sys.modules["supervisor"] = Supervisor
    for k in _SWAPPED[2:]:
        if k in sys.modules:
            del sys.modules[k]
    try:
        import kvedge.compat as c
        import kvedge.telemetry as t
        import kvedge.model.run as r
        assert c is not attrs[0]
        fn(t, r)
    finally:
        for k in _SWAPPED:
            if saved[k] is None:
                if k in sys.modules:
                    del sys.modules[k]
            else:
                sys.modules[k] = saved[k]
        for mod, name, value in ((kvedge, "compat", attrs[0]), (kvedge, "telemetry", attrs[1]),
                                 (kvedge.model, "run", attrs[2])):
            if value is not None:
                setattr(mod, name, value)


class _Sink:
    def __init__(self):
        self.lines = []

    def write(self, s):
        self.lines += [x for x in s.split("\n") if x]


class _Source:
    def stats(self):
        return {"total_bytes": 10, "used_bytes": 5}


def test_telemetry_and_the_runner_time_a_board_without_ticks():
    import json

    def check(telemetry, run):
        _Now.ms, _Now.ns = P - 100, 5 * 1000000000
        sink = _Sink()
        t = telemetry.Telemetry(_Source(), out=sink, interval_ms=1000, collect=False)
        t.emit("start")
        _advance(250)                            # across the supervisor ticks' wrap
        t.emit()
        _advance(500)
        t.tick()                                 # 750 ms since the last line: not yet
        _advance(600)
        t.tick()
        got = [json.loads(x[len(telemetry.PREFIX):]) for x in sink.lines]
        assert [(d["seq"], d["t_ms"], d["event"]) for d in got] == [
            (1, 0, "start"), (2, 250, "tick"), (3, 1350, "tick")], got
        t0 = run.ticks_ms()  # the clock a run's tokens/s is timed by
        _advance(1234)
        assert run.ticks_diff(run.ticks_ms(), t0) == 1234
    _on_a_board_clock(check)
    from kvedge import compat as after
    assert after is compat and sys.modules.get("time") is not BoardTime
