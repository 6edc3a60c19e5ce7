"""Start a virtual board: MicroPython on the emulated core that stands for the profile (qemu; 32-bit, the
profile's heap: the rp2040's Cortex-M0, the rp2350's Cortex-M7, the ESP32s' Xtensa lx106, else a Cortex-M3) or,
with --host or where qemu or its firmware is missing, the MicroPython unix port behind a pseudo-terminal.

Prints the port path on the first line of stdout, then serves until interrupted. Use it like a board:
`mpremote connect PORT exec "print(1)"`, `kvedge deploy --port PORT`, `kvedge monitor --port PORT`. The board's
filesystem is the --fs folder: on the emulated board a littlefs image built from it when the board starts and
written back when it stops (files copied there beforehand reach the board without crossing its slow serial
link); on the unix port the folder itself."""
import os
import signal
import sys
import threading

from .. import profiles
from ..boards.ptylink import default_fs
from ..boards.sim import make_board


def add_arguments(p):
    p.add_argument("--board", default="rp2040", help="board profile whose heap the interpreter gets (%s)"
                   % ", ".join(profiles.names()))
    p.add_argument("--fs", metavar="DIR", help="the board's persistent filesystem folder (default %s)"
                   % default_fs("BOARD"))
    p.add_argument("--link", metavar="PATH", help="also publish the port as this symlink (stable across restarts)")
    p.add_argument("--heap", type=int, help="override the profile's heap size in bytes (the emulated board "
                   "needs a firmware image with that heap)")
    p.add_argument("--host", action="store_true", help="the MicroPython unix port (64-bit, this machine's CPU) "
                   "instead of the emulated board")
    p.add_argument("--rom", metavar="DIR", help="emulated board: this folder's files as its read-only /rom (a "
                   "ROMFS image; /rom and /rom/lib are on sys.path, code imported from there stays in flash, "
                   "files can be memory-mapped)")
    p.add_argument("--quiet", action="store_true", help="print only the port path")


def check_args(args):
    """Flags checked before an interpreter starts: a heap the unix port refuses would make the board restart
    for ever; a --link or --fs that cannot be made would fail after it started."""
    import os
    from .. import validate
    profiles.load(args.board)
    if args.heap is not None:
        validate.flag_int("--heap", args.heap, validate.RUNTIME_HEAP_MIN, validate.RUNTIME_HEAP_MAX,
                          "bytes the MicroPython unix port can start with")
    if args.fs == "":
        raise validate.InputError("--fs: an empty folder name")
    if args.fs is not None and os.path.exists(args.fs) and not os.path.isdir(args.fs):
        raise validate.InputError("%s: not a folder (--fs names the board's filesystem folder)" % args.fs)
    if args.link is not None:
        validate.out_folder("--link", args.link)
        if os.path.exists(args.link) and not os.path.islink(args.link):
            raise validate.InputError("%s: exists and is not a symlink (--link would replace it)" % args.link)


def run(args):
    check_args(args)
    say = None if args.quiet else (lambda m: print("kvedge sim: " + m, file=sys.stderr, flush=True))
    if args.rom and not os.path.isdir(args.rom):
        raise ValueError("--rom %s: no such folder" % args.rom)
    vb, why = make_board(args.board, fs=args.fs, link=args.link, heap=args.heap, log=say, host=args.host,
                         rom=args.rom)
    if args.rom and vb.kind != "m3":
        raise ValueError("--rom needs the emulated board (%s)" % why)
    if why and why != "--host" and say:
        say("the emulated board cannot run here (%s): using the MicroPython unix port" % why)
    done = threading.Event()

    def _stop(signum, frame):
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    port = vb.start()
    try:
        print(port, flush=True)
        if say:
            say("board %s: %s, heap %d bytes, filesystem %s%s; Ctrl-C to stop"
                % (args.board, vb.describe(), vb.heap, vb.fs, (", link " + vb.link) if vb.link else ""))
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        vb.stop()
    return 0
