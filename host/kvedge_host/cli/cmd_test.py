"""Run the device test suite (tests/device) on a board, or on a virtual board, through mpremote.

Sends the device package, the tests and the runner (tools/devrunner.py) to the board (only changed files),
then runs one test file per soft reset and prints "N passed, N failed, N skipped". With --sim the virtual board
is the emulated board that stands for the profile where it can run (the rp2040's Cortex-M0, the rp2350's
Cortex-M7, else a Cortex-M3; else the unix port; --host chooses that): its filesystem image is
built with the files already in place, so the deployment checks them on the board instead of sending them over
its slow serial link."""
import os
import shutil
import sys
import tempfile

from ..boards import board_scripts, runtimes
from .. import profiles
from ..boards.deploy import DeployError, deploy, mpremote, sync
from ..paths import TESTS_DEVICE, TOOLS

BOARD_DIR = "kvtests"  # where the tests and the runner live on the board


def add_arguments(p):
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", help="serial port of a board (or of a running `kvedge sim`)")
    where.add_argument("--sim", metavar="BOARD", help="start a virtual board with this profile's heap for the run")
    p.add_argument("--host", action="store_true", help="with --sim: the MicroPython unix port instead of the "
                   "emulated board")
    p.add_argument("--board", default=None, help="board profile of --port, for --mpy (default rp2040)")
    p.add_argument("--mpy", action="store_true", help="deploy the package as .mpy for the board's -march")
    p.add_argument("-k", dest="filter", action="append", help="only test files whose name contains this")
    p.add_argument("-t", dest="tests", action="append", help="only test functions with this name")
    p.add_argument("--circuitpython", action="store_true", help="emulate CircuitPython's limits (plain kernels)")
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed per test file")
    p.add_argument("-v", action="store_true", help="echo every line the board prints")


def test_pairs():
    pairs = []
    for n in sorted(os.listdir(TESTS_DEVICE)):
        if n.endswith(".py"):
            pairs.append((os.path.join(TESTS_DEVICE, n), BOARD_DIR + "/" + n))
    pairs.append((os.path.join(TOOLS, "devrunner.py"), BOARD_DIR + "/devrunner.py"))
    return pairs


def run_suite(port, board="rp2040", files=None, only=None, mpy=False, circuitpython=False, timeout=900,
              echo=None, hard_reset=None, march=None):
    """Deploy, send the tests, run each file after a soft reset. Returns the same dict as
    runtimes.run_device_tests: passed, failed, skipped, lines, ok.

    hard_reset: called after a file timed out (a virtual board cannot be interrupted by Ctrl-C)."""
    deploy(port, board, mpy=mpy, march=march)
    sync(port, test_pairs(), [BOARD_DIR])
    total = {"passed": 0, "failed": 0, "skipped": 0, "lines": []}
    for f in files or runtimes.test_files():
        code = board_scripts.source("run_device_tests", BOARD_DIR=BOARD_DIR, FILE=f, CIRCUITPYTHON=circuitpython,
                                    ONLY=only)
        try:
            # no `resume`: mpremote soft-resets the board first, so each file starts from a fresh heap
            out, rc = mpremote(port, ["exec", code], resume=False, timeout=timeout), 0
        except DeployError as e:
            out, rc = str(e), 1
            if hard_reset and "timed out" in out:
                hard_reset()
        m = None
        for line in out.splitlines():
            if echo:
                echo(line)
            mm = runtimes.SUMMARY.match(line.strip())
            if mm:
                m = mm
            elif line.startswith(("FAIL", "SKIP", "Traceback", "  ")) or "Error" in line:
                total["lines"].append(line)
        if m is None or rc != 0:
            total["failed"] += 1
            total["lines"].append("FAIL %s: runner ended without a summary" % f)
            total["lines"].extend(out.splitlines()[-20:])
        if m:
            total["passed"] += int(m.group(1))
            total["failed"] += int(m.group(2))
            total["skipped"] += int(m.group(3))
    total["ok"] = total["failed"] == 0 and total["passed"] > 0
    return total


def check_args(args):
    """Flags checked before a board is contacted or a virtual one started."""
    from .. import validate
    validate.flag_real("--timeout", args.timeout, 0.0, 7 * 86400.0, lo_open=True)
    for b in (args.sim, args.board):
        if b is not None:
            profiles.load(b)
    if args.port and args.port.startswith("/") and not os.path.exists(args.port):
        raise ValueError("%s: no such port" % args.port)


def run(args):
    check_args(args)
    files = runtimes.test_files(args.filter)
    if not files:
        raise ValueError("no test file matches %s" % ", ".join(args.filter or []))
    echo = print if args.v else None
    if args.sim:
        from ..boards.deploy import deployment, preload
        from ..boards.sim import make_board
        board = args.sim
        profiles.load(board)
        fs = tempfile.mkdtemp(prefix="kvedge-test-%s-" % board)
        vb, why = make_board(board, fs=fs, host=args.host)
        march = None
        try:
            if vb.kind == "m3":
                from ..boards import m3board
                march = m3board.march_for(board, vb.layout)  # what its machine loads (the profile's own on M0/M7)
                with tempfile.TemporaryDirectory(prefix="kvedge-mpy-") as build:
                    preload(fs, deployment(board, build, args.mpy, march=march) + test_pairs())
            else:
                march = "x64"  # the unix port's CPU is this machine's (as kvedge demo's fallback)
                if why and why != "--host":
                    print("the emulated board cannot run here (%s): using the MicroPython unix port" % why)
            port = vb.start()
            print("virtual %s board on %s: %s, heap %d bytes" % (board, port, vb.describe(), vb.heap), flush=True)
            res = run_suite(port, board, files, args.tests, args.mpy, args.circuitpython, args.timeout, echo,
                            hard_reset=vb.reset, march=march)
        finally:
            vb.stop()
            shutil.rmtree(fs, ignore_errors=True)
    else:
        board = args.board or "rp2040"
        res = run_suite(args.port, board, files, args.tests, args.mpy, args.circuitpython, args.timeout, echo)
    if not args.v:
        for line in res["lines"]:
            print(line)
    print("%d passed, %d failed, %d skipped" % (res["passed"], res["failed"], res["skipped"]))
    sys.stdout.flush()
    return 0 if res["ok"] else 1
