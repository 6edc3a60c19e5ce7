"""kvedge monitor: sample accounting (seq gaps, repeats, board restarts), alerts, CSV, plot, and robustness:
garbage bytes, partial and overlong lines, invalid JSON, other output, a port that vanishes and comes back
(a raw pty, and a virtual board killed and started again)."""
import csv
import json
import os
import pty
import shutil
import threading
import time
import tty

from kvedge import telemetry
from kvedge_host.boards.monitor import CSV_FIELDS, Monitor, plot, timeline
from kvedge_host.paths import DEVICE
from kvedge_host.boards.sim import SimProcess

from _boardkit import kvedge, kvedge_bg, processes_in, wait_until


def _line(seq, used=100, total=1000, alloc=0, heap=50000, t_ms=None, event="tick", seen=None):
    d = {"seq": seq, "t_ms": seq * 10 if t_ms is None else t_ms, "event": event, "total_bytes": total,
         "used_bytes": used, "peak_bytes": used, "tokens_seen": seq if seen is None else seen,
         "tokens_cached": seq, "evictions": 0, "alloc_failures": alloc, "heap_free": heap,
         "heap_largest": None, "tok_s": 1.5}
    return (telemetry.PREFIX + json.dumps(d, separators=(",", ":")) + "\r\n").encode()


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_garbage_partial_lines_and_invalid_json_are_survived(tmp_path):
    m = Monitor(csv_path=str(tmp_path / "s.csv"))
    stream = (b"\x00\xff\xfe boot noise\r\n" + _line(1) + b"hello from the program\r\n" + b"OK" + _line(2)
              + b"KVSTATS {broken json\r\n" + b"KVSTATS " + b"{" + b"x" * 20000 + b"\r\n"
              + _line(3)[:25] + b"\r\n" + _line(4) + b"\xc3\x28 invalid utf-8\r\n" + _line(5))
    for i in range(0, len(stream), 7):          # arbitrary chunking: lines arrive in pieces
        m.feed(stream[i:i + 7])
    assert [s["seq"] for s in m.samples] == [1, 2, 4, 5]
    assert m.counts["lost"] == 1                 # seq 3 was truncated: counted, not invented
    assert m.counts["bad_lines"] == 3            # broken JSON, the overlong line, the truncated one
    assert m.counts["other_lines"] >= 3 and "hello from the program" in m.other
    m.feed(_line(6)[:30])
    m.end_of_stream()                            # port gone mid-line: the piece is dropped, not glued on
    m.feed(_line(7))
    assert [s["seq"] for s in m.samples] == [1, 2, 4, 5, 7]
    m.close()
    rows = _rows(tmp_path / "s.csv")
    assert list(rows[0].keys()) == CSV_FIELDS
    assert [int(r["seq"]) for r in rows] == [1, 2, 4, 5, 7]
    assert rows[-1]["heap_largest"] == "" and rows[-1]["cache_pct"] == "10.0"


def test_text_split_by_a_stats_line_decodes_as_if_the_line_were_not_there():
    """Where a stats line lands in the text depends on the board's clock, not the text: a character's bytes on both
    sides of one (a byte-fallback piece, then the next) read as that character, as bytes.decode reads them whole."""
    from kvedge_host.boards.board import Capture
    text = "a W\u00b5 \u20ac\U0001f600 \xff end\n".encode("utf-8").replace(b"\xc3\xbf", b"\xff")
    want = text.decode("utf-8", "replace")
    for cut in range(1, len(text) - 1):
        got = []
        cap = Capture(got.append)
        m = Monitor()
        m.line = lambda t, f=m.line: (cap.line(t), f(t))[1]
        stream = text[:cut] + _line(1) + text[cut:]
        for i in range(0, len(stream), 3):
            m.feed(stream[i:i + 3])
        assert "".join(got) == want, (cut, got)
        assert [s["seq"] for s in m.samples] == [1]


def test_repeats_are_dropped_and_restarts_start_a_session():
    m = Monitor()
    for b in (_line(1), _line(2), _line(2), _line(3), _line(1, t_ms=5), _line(2, t_ms=15)):
        m.feed(b)
    assert m.counts["duplicates"] == 1 and m.counts["lost"] == 0
    assert m.counts["sessions"] == 2
    assert [(s["session"], s["seq"]) for s in m.samples] == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2)]
    # a board that restarts prints the very same first line (t_ms 0, empty cache): a new session, not a repeat
    m.feed(_line(1, t_ms=5))
    assert m.counts["sessions"] == 3 and m.counts["duplicates"] == 1
    m.feed(_line(1, t_ms=5))
    assert m.counts["sessions"] == 3 and m.counts["duplicates"] == 2


def test_alerts_cache_threshold_alloc_failures_heap_falling():
    got = []
    m = Monitor(alert_pct=90, heap_fall=4, on_alert=lambda k, msg: got.append(k))
    m.feed(_line(1, used=500) + _line(2, used=950) + _line(3, used=960))
    assert got == ["cache"]                      # once per crossing, not once per sample
    m.feed(_line(4, used=100) + _line(5, used=999))
    assert got == ["cache", "cache"]
    m.feed(_line(6, used=100, alloc=1) + _line(7, used=100, alloc=1) + _line(8, used=100, alloc=3))
    assert got.count("alloc") == 2
    m.feed(_line(9, heap=40000) + _line(10, heap=39000) + _line(11, heap=38000) + _line(12, heap=37000))
    assert got.count("heap") == 1
    m.feed(_line(13, heap=36000))
    assert got.count("heap") == 1
    m.feed(_line(20))
    assert "lost" in got and m.counts["lost"] == 6


def test_a_cache_that_evicts_raises_no_cache_alert():
    # kvedge demo's window, sinks, H2O and tiered plans: a full arena is their steady state, nothing to act on;
    # an allocation failure still alerts
    got = []
    m = Monitor(alert_pct=90, on_alert=lambda k, msg: got.append(k), cache_alert=False)
    m.feed(_line(1, used=500) + _line(2, used=1000) + _line(3, used=1000, alloc=1))
    assert got == ["alloc"]


def test_plot_draws_a_png(tmp_path):
    m = Monitor()
    for i in range(1, 30):
        m.feed(_line(i, used=min(1000, 40 * i), heap=50000 - 10 * i))
    m.feed(_line(1, t_ms=0))
    plot(m, str(tmp_path / "t.png"))
    with open(tmp_path / "t.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_plot_draws_alerts_on_the_device_clock():
    # the host reads the board's lines in one burst at host time 100 s (monitor started at 50 s), though the
    # board wrote them 1 s apart (t_ms); the cache alert raised by sample 3 (t_ms 2000) belongs at that sample's
    # place on the device-time axis, 2 s after the first sample, not at the burst's host time
    now = [50.0]
    m = Monitor(alert_pct=90, clock=lambda: now[0])
    now[0] = 100.0
    m.feed(_line(1, used=100, t_ms=0) + _line(2, used=500, t_ms=1000) + _line(3, used=950, t_ms=2000)
           + _line(4, used=960, t_ms=3000))
    assert [k for _, k, _ in m.alerts] == ["cache"]
    x, alert_x = timeline(m)
    # by hand: the session starts where its first sample arrived, 100 - 50 = 50 s, minus its t_ms 0
    assert x == [50.0, 51.0, 52.0, 53.0]
    assert alert_x == [52.0]                      # host time alone would put it at 50.0


def test_live_view_renders_before_and_after_samples():
    from rich.console import Console
    from kvedge_host.boards.monitor import render
    m = Monitor()
    con = Console(width=100, record=True, file=open(os.devnull, "w"))
    con.print(render(m))
    assert "no cache stats yet" in con.export_text()
    m.feed(b"some program output\r\n" + _line(1, used=950) + _line(2, used=960, alloc=1))
    con.print(render(m))
    text = con.export_text()
    assert "960 / 1000 bytes (96.0%)" in text and "alloc failures: 1" in text
    assert "cache" in text and "some program output" in text
    assert "100.0 tokens/s, 0.0 evictions/s over the last 2 samples" in text   # 1 token per 10 ms


def _new_port(link):
    master, slave = pty.openpty()
    tty.setraw(slave)
    tmp = link + ".tmp"
    os.symlink(os.ttyname(slave), tmp)
    os.replace(tmp, link)
    return master, slave


def test_port_vanishing_and_returning_on_a_raw_pty(tmp_path):
    link = str(tmp_path / "port")
    master, slave = _new_port(link)
    m = Monitor(csv_path=str(tmp_path / "r.csv"))
    stop = threading.Event()
    th = threading.Thread(target=m.run, args=(link,), kwargs={"should_stop": stop.is_set, "retry_s": 0.1})
    th.start()
    try:
        os.write(master, _line(1) + b"junk\r\n" + _line(2) + _line(3)[:20])
        assert wait_until(lambda: m.counts["samples"] == 2, 30)
        os.unlink(link)                           # the port vanishes (board unplugged); the link goes first so
        os.close(master)                          # a reused /dev/pts number cannot catch the monitor
        os.close(slave)
        assert wait_until(lambda: m.counts["disconnects"] == 1, 30)
        time.sleep(0.5)                           # the monitor keeps polling for the port
        assert th.is_alive()
        master, slave = _new_port(link)           # ... and it comes back
        os.write(master, _line(3) + _line(4))
        assert wait_until(lambda: m.counts["samples"] == 4, 30), m.counts
    finally:
        stop.set()
        th.join(30)
        os.close(master)
        os.close(slave)
    assert m.counts["connects"] == 2 and m.counts["lost"] == 0 and m.counts["sessions"] == 1
    assert [int(r["seq"]) for r in _rows(tmp_path / "r.csv")] == [1, 2, 3, 4]


TRACEBACK = (b"Traceback (most recent call last):\r\n  File \"code.py\", line 7, in <module>\r\n"
             b"  File \"lib/kvedge/model/plandoc.py\", line 127, in check\r\n"
             b"PlanError: heap_bytes: the plan is for a 169984-byte heap, this runtime has 164608\r\n")


def test_a_traceback_is_the_program_stopping_until_the_board_starts_again():
    m = Monitor()
    m.feed(_line(1) + TRACEBACK[:60])
    assert m.crash is None                       # a header and a frame: not yet an error line
    m.feed(TRACEBACK[60:])
    assert m.crash.startswith("PlanError: heap_bytes") and m.stopped(settle=0)
    assert not m.stopped(settle=30)              # a reboot's output may still follow a buffered traceback
    m.feed(b"soft reboot\r\n")
    assert m.crash is None and not m.stopped(settle=0)
    m.feed(TRACEBACK + _line(1, t_ms=3))         # a traceback, then the program runs again: not stopped
    assert m.crash is None and m.counts["sessions"] == 2
    m.feed(b"Traceback is a word a story may print\r\nValueError: and so is this\r\n")
    assert m.crash is None                       # only MicroPython's exact header starts a traceback


def test_cli_until_ends_with_exit_1_when_the_board_stops_with_a_traceback(tmp_path):
    link = str(tmp_path / "port")
    master, slave = _new_port(link)
    try:
        os.write(master, _line(1, event="start") + TRACEBACK + b"\r\n>>> ")
        t0 = time.monotonic()
        p = kvedge("monitor", "--port", link, "--until", "final", "--duration", "300", "--plain", timeout=120)
    finally:
        os.close(master)
        os.close(slave)
    assert time.monotonic() - t0 < 60            # not the 300 s of --duration: the final sample cannot come
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and link in p.stderr and "PlanError: heap_bytes" in p.stderr, p.stderr
    assert "1 samples in 1 session(s)" in p.stdout


def _board_fs(root, tokens, every):
    fs = os.path.join(root, "fs")
    shutil.copytree(os.path.join(DEVICE, "kvedge"), os.path.join(fs, "kvedge"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(DEVICE, "examples", "fill_window.py"), fs)
    with open(os.path.join(fs, "main.py"), "w") as f:
        f.write("import fill_window\nw = fill_window.run(tokens=%d, every=%d, delay_ms=10)\n" % (tokens, every))
    return fs


def test_monitor_survives_a_virtual_board_killed_and_started_again(tmp_path):
    tokens, every = 60, 5
    per_boot = 2 + tokens // every               # start, ticks, final
    fs = _board_fs(str(tmp_path), tokens, every)
    link, out = str(tmp_path / "port"), str(tmp_path / "m.csv")
    sim = SimProcess("rp2040", fs=fs, link=link)       # main.py runs the workload at boot
    mon = kvedge_bg("monitor", "--port", link, "--csv", out, "--samples", 2 * per_boot, "--duration", 240,
                    "--plain")
    try:
        assert wait_until(lambda: os.path.exists(out) and len(_rows(out)) >= per_boot, 120)
        # the board disappears: SIGTERM, so the link goes before its /dev/pts number can be reused by another
        # program (after SIGKILL a dangling link could lead the monitor to someone else's terminal)
        sim.stop()
        assert wait_until(lambda: not processes_in(fs), 30)
        time.sleep(1.5)
        assert mon.poll() is None, "the monitor must keep running without its port"
        sim = SimProcess("rp2040", fs=fs, link=link)   # ... and comes back: main.py runs again
        stdout, stderr = mon.communicate(timeout=180)
    finally:
        sim.kill()
        if mon.poll() is None:
            mon.kill()
            mon.communicate()
    assert mon.returncode == 0, stderr
    rows = _rows(out)
    assert [(int(r["session"]), int(r["seq"])) for r in rows] == \
        [(1, i) for i in range(1, per_boot + 1)] + [(2, i) for i in range(1, per_boot + 1)]
    assert rows[-1]["event"] == "final" and int(rows[-1]["tokens_seen"]) == tokens
    assert "lost /" in stdout or "lost " + link in stdout
    assert "session 2: board restarted" in stdout
    assert "%d samples in 2 session(s), 0 lost, 0 duplicated" % (2 * per_boot) in stdout
    assert wait_until(lambda: not processes_in(fs), 30)


def test_cli_waits_for_a_missing_port_and_stops_on_duration(tmp_path):
    t0 = time.monotonic()
    p = kvedge("monitor", "--port", str(tmp_path / "nosuch"), "--wait", "--duration", "1.5", "--plain",
               "--csv", str(tmp_path / "e.csv"), "--plot", str(tmp_path / "e.png"), timeout=120)
    assert p.returncode == 0, p.stderr
    assert time.monotonic() - t0 < 60
    assert "waiting for" in p.stdout and "0 samples" in p.stdout
    assert _rows(tmp_path / "e.csv") == [] and os.path.getsize(tmp_path / "e.png") > 0


def test_cli_refuses_a_path_that_can_never_be_a_port(tmp_path):
    # a typo'd port, a regular file, a folder, /dev/null: one line and exit 2 at once, never a watch that waits for
    # ever (with no --duration) or "0 samples" and exit 0; --wait only waits for a path that does not exist yet
    f = tmp_path / "file"
    f.write_text("KVSTATS {}\n")
    cases = [([str(tmp_path / "ttyNOPE")], "no such port"), ([str(f)], "regular file"),
             ([str(tmp_path)], "folder"), ([str(f), "--wait"], "regular file")]
    if os.path.exists("/sys/dev/char"):  # where the kind of a device can be told without opening it
        cases.append((["/dev/null"], "not a serial port"))
    for args, why in cases:
        t0 = time.monotonic()
        p = kvedge("monitor", "--port", *args, "--plain", timeout=60)
        assert p.returncode == 2 and p.stdout == "", (args, p.stdout, p.stderr)
        assert p.stderr.count("\n") == 1 and args[0] in p.stderr and why in p.stderr, (args, p.stderr)
        assert time.monotonic() - t0 < 30


def test_cli_bad_arguments_are_one_line_errors(tmp_path):
    for args in (["--alert-pct", "0"], ["--samples", "0"], ["--duration", "-1"]):
        p = kvedge("monitor", "--port", str(tmp_path / "x"), *args, timeout=60)
        assert p.returncode == 2 and p.stderr.startswith("kvedge monitor: error: "), (args, p.stderr)
