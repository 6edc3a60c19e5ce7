"""Shared by the benchmark scripts: where their device code runs (--runtime, --board) and the device-side timing
and heap helpers prepended to it.

On `m3` (MicroPython on the emulated Cortex-M3 under qemu -icount shift=0, at the --board profile's heap) a
microsecond of ticks_us is exactly 1000 executed instructions: figures are deterministic, the same on a loaded
machine, and are reported as instructions. Elsewhere they are host timings."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(ROOT, "host") not in sys.path:
    sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge_host import profiles
from kvedge_host.boards import runtimes  # noqa: E402
from kvedge_host.paths import DEVICE  # noqa: E402

RUNTIMES = ("unix", "cpython", "wasm", "m3", "circuitpython")
M3_INSTRUCTIONS_PER_US = 1000

# Runs on every runtime: kvedge.compat's wrap-safe clock (time.ticks_us on MicroPython, supervisor/monotonic_ns
# on CircuitPython boards, monotonic_ns on CPython); heap figures where gc tells them (not on CPython).
TIMING = r"""
import gc
from kvedge.compat import ticks_diff, ticks_us


def now():
    return ticks_us()


def since(t0):
    return ticks_diff(ticks_us(), t0)


HAS_MEM = hasattr(gc, "mem_alloc")


def mem():
    return gc.mem_alloc() if HAS_MEM else 0


def heap_live():
    # bytes the program holds now (after a collection): code, arenas, scratch; None where gc cannot tell
    gc.collect()
    return gc.mem_alloc() if HAS_MEM else None
"""


def add_arguments(ap, default="unix", extra=()):
    """--runtime (RUNTIMES plus `extra` choices) and --board."""
    ap.add_argument("--runtime", choices=RUNTIMES + tuple(extra), default=default,
                    help="where the device code runs (default %s); m3 = MicroPython on the emulated Cortex-M3 at "
                         "--board's heap, figures in instructions (1 us = 1000 under qemu -icount)" % default)
    ap.add_argument("--board", default="rp2040",
                    help="board profile whose heap the m3 runtime gets (default rp2040: 215,040 bytes)")


def is_m3(runtime):
    return runtime in runtimes.M3


def heap_for(runtime, board, heap):
    """The heap a run gets: the board profile's on the emulated board (its firmware is built for it), else
    `heap` (the tool's own default for the unix and wasm ports)."""
    if is_m3(runtime):
        return profiles.load(board)["heap_bytes"]
    return heap


def describe(runtime, board, heap):
    if is_m3(runtime):
        return ("%s: %s at the %s heap (%s bytes); times in Cortex-M3 instructions (qemu -icount shift=0)"
                % (runtime, runtimes.describe(runtime, board), board, format(heap, ",")))
    return "%s: %s%s" % (runtime, runtimes.describe(runtime, board),
                         (", heap %s bytes" % format(heap, ",")) if heap and runtime != "cpython" else "")


def instructions(runtime, us):
    """Executed instructions for `us` microseconds on the emulated board; None elsewhere."""
    return None if us is None or not is_m3(runtime) else us * M3_INSTRUCTIONS_PER_US


def run(runtime, code, heap, paths=(DEVICE,), timeout=3600):
    """Run benchmark device code; returns (returncode, output). CPython runs it in a subprocess with `paths` on
    its module path; the others through kvedge_host.boards.runtimes (the emulated board gets `paths` on its flash)."""
    if runtime == "cpython":
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
        p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                           timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    why = runtimes.missing(runtime)
    if why:
        raise SystemExit("%s cannot run here: %s" % (runtime, why))
    return runtimes.run_code(runtime, code, heap, list(paths), timeout=timeout)
