"""Shared pytest setup: device tests import `kvedge` and `_support` exactly as a board does, and the closing
summary lists the device suite's counts per runtime."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (os.path.join(ROOT, "device"), os.path.join(HERE, "device"), os.path.join(ROOT, "host")):
    if p not in sys.path:
        sys.path.insert(0, p)

_cpython = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    if "tests/device/" not in report.nodeid.replace(os.sep, "/"):
        return
    if report.when == "call" or (report.when == "setup" and report.outcome == "skipped"):
        _cpython[report.outcome] = _cpython.get(report.outcome, 0) + 1
    elif report.outcome == "failed":
        _cpython["failed"] += 1


def pytest_terminal_summary(terminalreporter):
    rows = []
    if sum(_cpython.values()):
        rows.append(("cpython", _cpython))
    try:
        from test_runtimes import RESULTS
    except ImportError:
        RESULTS = {}
    for name in ("unix", "circuitpython", "wasm"):
        if name in RESULTS:
            rows.append((name, RESULTS[name]))
    if not rows:
        return
    tr = terminalreporter
    tr.write_sep("-", "device suite per runtime")
    for name, r in rows:
        tr.write_line("%-14s %d passed, %d failed, %d skipped" % (name, r["passed"], r["failed"], r["skipped"]))
