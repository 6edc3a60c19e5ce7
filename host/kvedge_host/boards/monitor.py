"""The stats monitor: reads a board's port, keeps the KVSTATS samples (format: kvedge.telemetry), checks their
sequence numbers, raises alerts, logs every sample to CSV and draws a timeline.

Built to be left running: garbage bytes, partial lines, invalid JSON and other program output are counted and
skipped; when the port vanishes (board unplugged or reset, virtual board killed) it waits and reopens the same
path; a board that restarts (seq back to 1) starts a new session in the log."""
import codecs
import collections
import csv
import json
import os
import time

from kvedge import telemetry

_PREFIX = telemetry.PREFIX.encode()

MAX_LINE = 16384  # a "line" longer than this without a newline is garbage: dropped, not accumulated
RESTARTS = ("soft reboot", "Auto-reload", "code.py output:", "main.py output:")  # a board's program starting again
RUN_END = "#KVEDGE {"  # kvedge.model.run.main's closing line
CSV_FIELDS = ["host_time", "session"] + list(telemetry.KEYS) + ["cache_pct"]


def open_port(port, baud):
    """Open a serial port without discarding what the board already sent (pyserial flushes input on open;
    on a board that waits for the reader, those bytes are samples)."""
    import serial

    class _KeepInput(serial.Serial):
        def _reset_input_buffer(self):
            pass

    cls = _KeepInput if os.name == "posix" else serial.Serial
    return cls(port, baud, timeout=0.2)


class Monitor:
    def __init__(self, csv_path=None, alert_pct=90.0, heap_fall=5, on_alert=None, on_note=None, clock=time.time,
                 cache_alert=True):
        """cache_alert=False: no alert for the cache above alert_pct (a cache that evicts, whose full arena is its
        steady state: nothing to act on); allocation failures and a falling heap still alert."""
        if not 0 < alert_pct <= 100:
            raise ValueError("--alert-pct must be in (0, 100], got %r" % alert_pct)
        if heap_fall < 2:
            raise ValueError("heap_fall must be >= 2")
        self.alert_pct = alert_pct
        self.cache_alert = cache_alert
        self.heap_fall = heap_fall
        self.on_alert = on_alert
        self.on_note = on_note
        self.clock = clock
        self.t0 = clock()
        self.samples = []          # every accepted sample, with host_time, session, cache_pct
        self.alerts = []           # (host_time, kind, message)
        self.alert_at = []         # per alert: the index in samples of the sample that raised it
        self.counts = collections.OrderedDict(
            (k, 0) for k in ("samples", "sessions", "lost", "duplicates", "bad_lines", "other_lines",
                             "connects", "disconnects"))
        self.other = collections.deque(maxlen=6)  # last lines of other program output
        self.crash = None  # the error line of the last traceback the board printed (its program stopped)
        self.crash_at = 0.0
        self.no_stream = False  # a run ended (its closing #KVEDGE line) before any sample: it had no stats stream
        self._in_traceback = False
        self.connected = False
        self.port_state = "not opened"
        self._buf = bytearray()
        # the board's text, decoded across lines: a stats line written in the middle of a character's bytes (its
        # timing, not the text, decides where) must not split the character into two replacement characters
        self._text = codecs.getincrementaldecoder("utf-8")("replace")
        self._skipping = False  # inside a line already counted as overlong: drop up to its newline
        self._last = None
        self._recent = collections.OrderedDict()  # seq -> canonical JSON, this session: tells repeats from resets
        self._armed = {"cache": True, "heap": True}
        self._csv_file = None
        self._csv = None
        if csv_path:
            self._csv_file = open(csv_path, "w", newline="")
            self._csv = csv.DictWriter(self._csv_file, fieldnames=CSV_FIELDS)
            self._csv.writeheader()
            self._csv_file.flush()

    # -- input --------------------------------------------------------------------------------------------
    def feed(self, data):
        """Bytes from the port, in any chunking. Returns the samples accepted from them.

        A line longer than MAX_LINE is one bad line however it arrives: its bytes are dropped up to its
        newline (not held, and not counted again for every MAX_LINE of it)."""
        new = []
        if self._skipping:
            i = data.find(b"\n")
            if i < 0:
                return new
            data = data[i + 1:]
            self._skipping = False
        self._buf += data
        while True:
            i = self._buf.find(b"\n")
            if i < 0:
                break
            line = bytes(self._buf[:i]) if i <= MAX_LINE else None
            del self._buf[:i + 1]
            if line is None:
                self.counts["bad_lines"] += 1
                continue
            s = self.line(self._decode(line))
            if s is not None:
                new.append(s)
        if len(self._buf) > MAX_LINE:
            self.counts["bad_lines"] += 1
            del self._buf[:]
            self._skipping = True
        return new

    def _decode(self, line):
        """A line's text: the text before a stats line (which shares its line) keeps an unfinished character for
        the next line's bytes; a line of text alone ends with its newline, which finishes any."""
        j = line.find(_PREFIX)
        if j < 0:
            return self._text.decode(line + b"\n")[:-1]
        return self._text.decode(line[:j]) + line[j:].decode("utf-8", "replace")

    def end_of_stream(self):
        """The port went away: a partial line cannot be completed by a new connection."""
        if self._skipping:
            self._skipping = False  # the overlong line was counted when it passed MAX_LINE
        elif self._buf.strip():
            if telemetry.PREFIX.encode() in self._buf:
                self.counts["bad_lines"] += 1
            else:
                self.counts["other_lines"] += 1
        del self._buf[:]
        self._text.reset()

    def line(self, text):
        d = telemetry.parse(text)
        if d is None:
            if RUN_END in text and self._last is None:
                # the runner's closing line with no sample before it: this run had no stats stream
                self.no_stream = True
                self._note("the run ended without a stats stream (its plan leaves it out: \"without\", or "
                           "stats_ms=0): nothing to watch")
            if telemetry.PREFIX in text:
                self.counts["bad_lines"] += 1
            elif text.strip():
                self.counts["other_lines"] += 1
                self.other.append(_printable(text.strip())[:160])
                self._watch_traceback(text)
            return None
        return self.sample(d)

    def _watch_traceback(self, text):
        """A MicroPython/CircuitPython traceback: its header, indented frames, then the error line, which ends
        the program (a sample after it is a new run: the crash is then history, not the state)."""
        t = text.strip()
        if t == "Traceback (most recent call last):":
            self._in_traceback = True
        elif self._in_traceback and not text[:1].isspace():
            self._in_traceback = False
            self.crash = _printable(t)[:160]
            self.crash_at = time.monotonic()
            self._note("the board's program stopped: " + self.crash)
        elif any(w in t for w in RESTARTS):  # the board starts its program again
            self.crash = None

    def stopped(self, settle=1.0):
        """The board's program ended in a traceback at least `settle` seconds ago and has not started again (a
        traceback buffered from before a reset is followed at once by the reboot's output)."""
        return self.crash is not None and time.monotonic() - self.crash_at >= settle

    def sample(self, d):
        self.crash = None  # the board runs (again)
        seq = d["seq"]
        canon = json.dumps([d[k] for k in telemetry.KEYS])
        last = self._last
        if last is None:
            self._new_session(d, "first sample")
        elif seq == last["seq"] + 1:
            pass
        elif seq > last["seq"] + 1:
            n = seq - last["seq"] - 1
            self.counts["lost"] += n
            self._alert("lost", "%d sample(s) lost before seq %d" % (n, seq))
        elif self._recent.get(seq) == canon and (seq > 1 or last["seq"] == 1):
            # the same line again. A repeated seq 1 after later lines is a restarted board whose first line
            # happens to be identical (t_ms 0, empty cache), not a duplicate.
            self.counts["duplicates"] += 1
            return None
        else:
            self._new_session(d, "board restarted (seq %d after %d)" % (seq, last["seq"]))
            last = None
        self._recent[seq] = canon
        while len(self._recent) > 256:
            self._recent.popitem(last=False)
        row = dict(d)
        row["host_time"] = round(self.clock(), 3)
        row["session"] = self.counts["sessions"]
        total, used = d.get("total_bytes"), d.get("used_bytes")
        row["cache_pct"] = round(100.0 * used / total, 2) if isinstance(total, int) and total > 0 \
            and isinstance(used, int) else None
        self._check_alerts(row, last)
        self._last = row
        self.samples.append(row)
        self.counts["samples"] += 1
        if self._csv:
            self._csv.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_FIELDS})
            self._csv_file.flush()
        return row

    def _new_session(self, d, why):
        self.counts["sessions"] += 1
        self._recent.clear()
        self._last = None
        self._armed = {"cache": True, "heap": True}
        self._note("session %d: %s" % (self.counts["sessions"], why))

    # -- alerts -------------------------------------------------------------------------------------------
    def _check_alerts(self, row, last):
        pct = row["cache_pct"]
        if pct is not None:
            if pct > self.alert_pct and self._armed["cache"] and self.cache_alert:
                self._armed["cache"] = False
                self._alert("cache", "cache at %.1f%% of its %d bytes (threshold %g%%)"
                            % (pct, row["total_bytes"], self.alert_pct))
            elif pct <= self.alert_pct:
                self._armed["cache"] = True
        af = row.get("alloc_failures")
        prev_af = last.get("alloc_failures") if last else 0
        if isinstance(af, int) and af > (prev_af or 0):
            self._alert("alloc", "allocation failures: %d (was %d)" % (af, prev_af or 0))
        # heap falling: heap_free lower at each of the last `heap_fall` samples of this session (a leak; the
        # stream collects garbage before measuring, so a healthy loop holds steady)
        hist = [s.get("heap_free") for s in self.samples[-(self.heap_fall - 1):]
                if s["session"] == row["session"]] + [row.get("heap_free")]
        if len(hist) == self.heap_fall and all(isinstance(h, int) for h in hist):
            falling = all(hist[i + 1] < hist[i] for i in range(len(hist) - 1))
            if falling and self._armed["heap"]:
                self._armed["heap"] = False
                self._alert("heap", "heap free falling: %d -> %d bytes over %d samples"
                            % (hist[0], hist[-1], self.heap_fall))
            elif not falling:
                self._armed["heap"] = True

    def _alert(self, kind, msg):
        self.alerts.append((round(self.clock(), 3), kind, msg))
        self.alert_at.append(len(self.samples))  # every alert is raised by the sample about to be appended
        if self.on_alert:
            self.on_alert(kind, msg)

    def _note(self, msg):
        if self.on_note:
            self.on_note(msg)

    # -- port loop ----------------------------------------------------------------------------------------
    def run(self, port, baud=115200, duration=None, samples=None, should_stop=None, on_tick=None, retry_s=0.5):
        """Read `port` until `duration` seconds pass, `samples` samples were taken or should_stop() is true,
        reconnecting whenever the port fails."""
        end = None if duration is None else time.monotonic() + duration

        def done():
            if end is not None and time.monotonic() >= end:
                return True
            if samples is not None and self.counts["samples"] >= samples:
                return True
            return bool(should_stop and should_stop())

        while not done():
            try:
                ser = open_port(port, baud)
            except Exception as e:  # SerialException, OSError, ValueError: all mean "not there (yet)"
                self._set_state("waiting for %s (%s)" % (port, _short(e)))
                if on_tick:
                    on_tick()
                time.sleep(retry_s)
                continue
            self.counts["connects"] += 1
            self.connected = True
            self._set_state("connected to %s" % port)
            try:
                while not done():
                    data = ser.read(max(1, ser.in_waiting))
                    if data:
                        self.feed(data)
                    if on_tick:
                        on_tick()
            except Exception as e:  # the port vanished or failed mid-read
                self.counts["disconnects"] += 1
                self.end_of_stream()
                self._set_state("lost %s (%s); waiting" % (port, _short(e)))
            finally:
                self.connected = False
                try:
                    ser.close()
                except Exception:
                    pass
        self.close()

    def _set_state(self, s):
        if s != self.port_state:
            self.port_state = s
            self._note(s)

    def close(self):
        if self._csv_file:
            self._csv_file.close()
            self._csv_file = None
            self._csv = None

    def summary(self):
        c = self.counts
        return ("%d samples in %d session(s), %d lost, %d duplicated, %d bad lines, %d other lines, "
                "%d connect(s), %d alert(s)" % (c["samples"], c["sessions"], c["lost"], c["duplicates"],
                                               c["bad_lines"], c["other_lines"], c["connects"], len(self.alerts)))


def _short(e):
    s = str(e).strip().splitlines()
    return s[0][:100] if s else type(e).__name__


def _printable(s):
    return "".join(c if c.isprintable() else "?" for c in s)


# -- views --------------------------------------------------------------------------------------------------
def render(mon):
    """A rich renderable of the monitor's state: port, cache use against budget, heap, counters, alerts."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    last = mon.samples[-1] if mon.samples else {}
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row("port", Text(mon.port_state, style="green" if mon.connected else "yellow"))
    total, used = last.get("total_bytes"), last.get("used_bytes")
    if isinstance(total, int) and total > 0 and isinstance(used, int):
        pct = 100.0 * used / total
        bar = ProgressBar(total=total, completed=used, width=40,
                          complete_style="red" if pct > mon.alert_pct else "green")
        t.add_row("cache", Group(bar, Text("%d / %d bytes (%.1f%%), peak %s" % (
            used, total, pct, last.get("peak_bytes")))))
    else:
        t.add_row("cache", "no cache stats yet")
    t.add_row("heap free", "%s bytes (largest block %s)" % (_fmt(last.get("heap_free")),
                                                           _fmt(last.get("heap_largest"))))
    t.add_row("tokens", "seen %s, cached %s, %s tok/s" % (_fmt(last.get("tokens_seen")),
                                                         _fmt(last.get("tokens_cached")), _fmt(last.get("tok_s"))))
    t.add_row("evictions", "%s   alloc failures: %s" % (_fmt(last.get("evictions")), _fmt(last.get("alloc_failures"))))
    rates = _rates(mon.samples)
    if rates:
        t.add_row("rates", "%.1f tokens/s, %.1f evictions/s over the last %d samples" % rates)
    t.add_row("stream", "seq %s, event %s, %s" % (_fmt(last.get("seq")), _fmt(last.get("event")),
                                                  ", ".join("%s %d" % kv for kv in mon.counts.items())))
    alerts = Text()
    for ts, kind, msg in mon.alerts[-5:]:
        alerts.append("%s %-6s %s\n" % (time.strftime("%H:%M:%S", time.localtime(ts)), kind, msg), style="red")
    other = Text("\n".join(mon.other), style="dim")
    return Group(Panel(t, title="kvedge monitor"), Panel(alerts or Text("none", style="dim"), title="alerts"),
                 Panel(other, title="other output"))


def _rates(rows, n=10):
    """(tokens/s, evictions/s, samples) over the last n samples of the current session, by the device clock."""
    if len(rows) < 2:
        return None
    sess = rows[-1]["session"]
    win = [r for r in rows[-n:] if r["session"] == sess]
    if len(win) < 2:
        return None
    a, b = win[0], win[-1]
    try:
        dt = (b["t_ms"] - a["t_ms"]) / 1000.0
        if dt <= 0:
            return None
        return ((b["tokens_seen"] - a["tokens_seen"]) / dt, (b["evictions"] - a["evictions"]) / dt, len(win))
    except (TypeError, KeyError):
        return None


def _fmt(v):
    return "-" if v is None else str(v)


def timeline(mon):
    """(x of every sample, x of every alert), seconds on the plot's one axis: device time within a session (host
    reads arrive in bursts), each session placed on the host clock where its first sample arrived; an alert sits at
    the sample that raised it, on the same clock (not at the host time it was read)."""
    x, base = [], {}
    for r in mon.samples:
        sess, t_ms = r["session"], r.get("t_ms")
        if not isinstance(t_ms, (int, float)):
            x.append(r["host_time"] - mon.t0)
            continue
        if sess not in base:
            base[sess] = r["host_time"] - mon.t0 - t_ms / 1000.0
            if x and base[sess] < x[-1]:
                base[sess] = x[-1]
        x.append(base[sess] + t_ms / 1000.0)
    alert_x = []
    for (ts, _, _), i in zip(mon.alerts, mon.alert_at):
        alert_x.append(x[i] if i < len(x) else (x[-1] if x else ts - mon.t0))
    return x, alert_x


def plot(mon, path, title=None):
    """The session's timeline: cache bytes against total, heap free, tokens and rate; alerts as marks."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = mon.samples
    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    x, alert_x = timeline(mon)

    def series(key):
        return [r.get(key) if isinstance(r.get(key), (int, float)) else float("nan") for r in rows]

    ax = axes[0]
    ax.plot(x, series("used_bytes"), label="used bytes")
    ax.plot(x, series("peak_bytes"), label="peak bytes", linestyle="--")
    ax.plot(x, series("total_bytes"), label="total (budget)", color="black", linewidth=0.8)
    tot = [t * mon.alert_pct / 100.0 for t in series("total_bytes")]
    ax.plot(x, tot, label="alert %g%%" % mon.alert_pct, color="red", linewidth=0.6, linestyle=":")
    ax.set_ylabel("KV cache bytes")
    ax.legend(loc="lower right", fontsize="small")
    axes[1].plot(x, series("heap_free"), color="tab:green")
    axes[1].set_ylabel("heap free bytes")
    ax2 = axes[2]
    ax2.plot(x, series("tokens_cached"), label="tokens cached")
    ax2.plot(x, series("tokens_seen"), label="tokens seen")
    ax2.set_ylabel("tokens")
    ax2.legend(loc="upper left", fontsize="small")
    ax3 = ax2.twinx()
    ax3.plot(x, series("tok_s"), color="tab:gray", linewidth=0.8)
    ax3.set_ylabel("tok/s")
    ax2.set_xlabel("seconds since monitor start (device clock within a session)")
    for ax_ in alert_x:
        for a in axes:
            a.axvline(ax_, color="red", alpha=0.3, linewidth=0.8)
    fig.suptitle(title or "kvedge monitor: %s" % mon.summary(), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
