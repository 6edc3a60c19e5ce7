#!/usr/bin/env python3
"""Run the device test suite (tests/device) on one runtime and print "N passed, N failed, N skipped".

  tools/mprun.py --runtime unix|wasm|m3|m3-py|m0|m7|m55|xt|circuitpython|cpython [--board rp2040] [-k FILTER] [-v]

unix: the MicroPython unix port with the heap capped to the board profile; wasm: the 32-bit port on Node.js;
circuitpython: the unix port with CircuitPython's limits emulated (plain kernels, no heap_lock, no mem_info).
Exits non-zero on any failure or when no test ran."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "host"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "device"))

from kvedge_host.boards import runtimes  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=runtimes.RUNTIMES, default="unix")
    ap.add_argument("--board", default=None, help="board profile (its heap): default rp2040, rp2350 on m7/m55, esp32 on xt")
    ap.add_argument("-k", dest="filter", action="append", help="only test files whose name contains this")
    ap.add_argument("-t", dest="tests", action="append", help="only test functions with this name")
    ap.add_argument("-v", action="store_true", help="echo every line")
    a = ap.parse_args(argv)
    why = runtimes.missing(a.runtime, a.board)
    if why:  # a clone without ../shared: say what is skipped and why, no traceback
        print("%s: skipped, not runnable here: %s" % (a.runtime, why))
        return 0
    res = runtimes.run_device_tests(a.runtime, a.board, runtimes.test_files(a.filter), a.tests,
                                    echo=print if a.v else None)
    if not a.v:
        for line in res["lines"]:
            print(line)
    print("%s: %d passed, %d failed, %d skipped" % (a.runtime, res["passed"], res["failed"], res["skipped"]))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
