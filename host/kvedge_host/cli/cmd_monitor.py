"""Watch a board's stats stream (KVSTATS lines from kvedge.telemetry) live: cache use against budget, heap,
counters, rates and alerts; every sample to CSV; reconnects when the port vanishes."""
import sys
import time

from ..boards.monitor import Monitor, plot, render


def add_arguments(p):
    p.add_argument("--port", required=True, help="serial port of the board (or of `kvedge sim`); a stable symlink "
                   "such as `kvedge sim --link` survives restarts")
    p.add_argument("--baud", type=int, default=115200, help="serial speed in baud (default 115200)")
    p.add_argument("--csv", metavar="FILE", help="write every sample to this CSV file")
    p.add_argument("--alert-pct", type=float, default=90.0, help="alert when the cache is above this %% of its bytes")
    p.add_argument("--plot", metavar="FILE.png", help="draw the session's timeline here at the end")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--samples", type=int, metavar="N", help="stop after N samples")
    p.add_argument("--until", metavar="EVENT", help="stop after a sample with this event (e.g. final: the end of a "
                   "generation); a traceback from the board stops the watch too, with exit 1")
    p.add_argument("--plain", action="store_true", help="no live view: print events and alerts as lines "
                   "(the default when stdout is not a terminal)")
    p.add_argument("--plan", metavar="PLAN.json", help="the plan the board runs: one that leaves the stats stream "
                   "out (its \"without\") has nothing to watch, said at once")
    p.add_argument("--wait", action="store_true", help="the port need not exist yet: wait for it to appear (a "
                   "board not plugged in yet); without it a missing port is refused")


MAX_BAUD = 10_000_000


def check_args(args):
    """Every flag checked before the port is opened (a NaN duration would never end the watch)."""
    from .. import validate
    if args.duration is not None:
        validate.flag_real("--duration", args.duration, 0.0, 10.0 * 365 * 86400, lo_open=True)
    if args.samples is not None:
        validate.flag_int("--samples", args.samples, 1, 1 << 62)
    validate.flag_int("--baud", args.baud, 1, MAX_BAUD)
    validate.flag_real("--alert-pct", args.alert_pct, 0.0, 100.0, lo_open=True)
    if args.csv:
        validate.out_folder("--csv", args.csv)
    if args.plot:
        validate.out_folder("--plot", args.plot)
    check_port(args.port, args.wait)
    if args.plan:
        validate.plan_file(args.plan)


def no_stream(path):
    """The line saying a plan has no stats stream (kvedge.model.plandoc.streams_stats), or None when it has one."""
    from kvedge.model.plandoc import streams_stats
    from ..validate import load_json
    doc = load_json(path)
    if streams_stats(doc):
        return None
    return ("%s: the plan has no stats stream (without: %s): the board writes no KVSTATS lines to watch; its "
            "run's summary is the closing #KVEDGE line (kvedge generate --port prints it)"
            % (path, ", ".join(doc.get("without") or ["stats"])))


def check_port(port, wait=False):
    """A path that can be a serial port: a terminal device (a tty or pty, or a symlink to one), or, with `wait`, a
    path that does not exist yet. A regular file, a folder, /dev/null or any other non-terminal device can never
    become one (the watch would wait for ever): refused, like a missing port without `wait`."""
    import os
    import stat
    from .. import validate
    if not port:
        raise validate.InputError("--port: an empty name")
    try:
        st = os.stat(port)
    except OSError:
        if wait:
            return
        raise validate.InputError("%s: no such port (plug the board in, or pass --wait to wait for it)" % port)
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise validate.InputError("%s: is a folder, not a serial port" % port)
    if stat.S_ISREG(mode):
        raise validate.InputError("%s: is a regular file, not a serial port" % port)
    if not stat.S_ISCHR(mode):
        raise validate.InputError("%s: not a serial port (not a character device)" % port)
    # what kind of device, without opening it: closing a tty would drop what the board queued (and may reset it)
    dev = st.st_rdev
    sysfs = "/sys/dev/char/%d:%d/subsystem" % (os.major(dev), os.minor(dev))
    if os.path.exists(sysfs) and os.path.basename(os.path.realpath(sysfs)) != "tty":
        raise validate.InputError("%s: a %s device, not a serial port (not a terminal)"
                                  % (port, os.path.basename(os.path.realpath(sysfs))))


def run(args):
    check_args(args)
    if args.plan:
        said = no_stream(args.plan)
        if said:
            print("monitor: " + said, flush=True)
            return 0
    live_view = sys.stdout.isatty() and not args.plain

    def say(prefix):
        def f(*a):
            msg = " ".join(str(x) for x in a)
            print("%s %s%s" % (time.strftime("%H:%M:%S"), prefix, msg), flush=True)
        return f

    mon = Monitor(csv_path=args.csv, alert_pct=args.alert_pct, on_alert=say("ALERT "), on_note=say(""))

    def until():
        # a traceback ends the board's program: the awaited event can no longer come
        return bool(mon.no_stream or args.until and (mon.stopped() or mon.samples and
                                                     mon.samples[-1].get("event") == args.until))
    try:
        if live_view:
            from rich.live import Live
            with Live(render(mon), refresh_per_second=4, transient=False) as live:
                mon.on_alert = lambda kind, msg: live.console.print("[red]ALERT %s: %s[/red]" % (kind, msg))
                mon.on_note = lambda msg: live.console.print("[dim]%s[/dim]" % msg)
                last = [0.0]

                def tick():
                    now = time.monotonic()
                    if now - last[0] > 0.25:
                        last[0] = now
                        live.update(render(mon))
                mon.run(args.port, args.baud, args.duration, args.samples, should_stop=until, on_tick=tick)
                live.update(render(mon))
        else:
            mon.run(args.port, args.baud, args.duration, args.samples, should_stop=until)
    except KeyboardInterrupt:
        pass
    finally:
        mon.close()
    if args.plot:
        plot(mon, args.plot)
    print("monitor: " + mon.summary(), flush=True)
    if args.until and mon.crash:
        print("kvedge monitor: %s: the board's program stopped before a %r sample: %s"
              % (args.port, args.until, mon.crash), file=sys.stderr, flush=True)
        return 1
    return 0
