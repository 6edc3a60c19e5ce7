"""Shared pytest setup: device tests import `kvedge` and `_support` exactly as a board does, each runs in a fresh
temporary folder (files they write cannot meet another run's), and the closing summary lists the device
suite's counts per runtime, with the reason for every runtime that could not run here.

The per-runtime counts travel as user properties of the reports (tests/host/test_runtimes.py adds them), so they
reach this summary from pytest-xdist workers too."""
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (os.path.join(ROOT, "device"), os.path.join(HERE, "device"), os.path.join(ROOT, "host")):
    if p not in sys.path:
        sys.path.insert(0, p)

ORDER = ("cpython", "unix", "wasm", "m3", "m3-py", "m0", "m7", "xt", "circuitpython")
PROPERTY = "kvedge_device"  # (runtime, passed, failed, skipped, note) of one device test file on one runtime
_counts = {}                # runtime -> {"passed", "failed", "skipped", "files", "note", "missing"}


def _row(runtime):
    return _counts.setdefault(runtime, {"passed": 0, "failed": 0, "skipped": 0, "files": 0, "note": "",
                                        "missing": "", "skips": {}, "larger": []})


def _skip_reason(report):
    """The reason pytest gives for a skipped report ("Skipped: " dropped)."""
    r = report.longrepr
    text = r[2] if isinstance(r, tuple) and len(r) == 3 else str(r)
    return text[len("Skipped: "):] if text.startswith("Skipped: ") else text


def skip_lines(skips):
    """The closing summary's lines under one runtime: its skip reasons grouped, most frequent first."""
    return ["    %3d x %s" % (n, why) for why, n in sorted(skips.items(), key=lambda kv: (-kv[1], kv[0]))]


@pytest.fixture(autouse=True, scope="module")
def _device_tests_in_a_fresh_folder(request, tmp_path_factory):
    # one folder per device test module (a module may write a file once and read it in later tests), as each
    # file gets a fresh board or interpreter on the other runtimes
    if "tests/device/" not in request.node.nodeid.replace(os.sep, "/"):
        yield
        return
    here = os.getcwd()
    os.chdir(str(tmp_path_factory.mktemp("device")))
    try:
        yield
    finally:
        os.chdir(here)


def pytest_runtest_logreport(report):
    if "tests/device/" in report.nodeid.replace(os.sep, "/"):
        row = _row("cpython")
        if report.when == "call" or (report.when == "setup" and report.outcome == "skipped"):
            row[report.outcome] += 1
            if report.outcome == "skipped":
                why = _skip_reason(report)
                row["skips"][why] = row["skips"].get(why, 0) + 1
        elif report.outcome == "failed":
            row["failed"] += 1
        return
    for key, value in report.user_properties:
        if key == PROPERTY and report.when == "call":
            d = json.loads(value)
            row = _row(d["runtime"])
            row["note"] = d.get("note", row["note"])
            if d.get("missing"):
                row["missing"] = d["missing"]
                continue
            row["files"] += 1
            for k in ("passed", "failed", "skipped"):
                row[k] += d[k]
            for why in d.get("skips", ()):
                row["skips"][why] = row["skips"].get(why, 0) + 1
            row["larger"].extend(d.get("larger", ()))


def pytest_terminal_summary(terminalreporter):
    rows = [(n, _counts[n]) for n in ORDER if n in _counts] + \
           [(n, r) for n, r in sorted(_counts.items()) if n not in ORDER]
    if not rows:
        return
    tr = terminalreporter
    tr.write_sep("-", "device suite per runtime")
    for name, r in rows:
        if r["missing"] and not r["files"]:
            tr.write_line("%-14s skipped: %s" % (name, r["missing"]))
            continue
        tr.write_line("%-14s %d passed, %d failed, %d skipped%s" % (
            name, r["passed"], r["failed"], r["skipped"], ("  (%s)" % r["note"]) if r["note"] else ""))
        for line in skip_lines(r["skips"]):
            tr.write_line(line)
        for line in sorted(r["larger"]):  # files run on a larger-heap image than the board's (runtimes.LARGER_HEAP)
            tr.write_line("    ran %s" % line)
