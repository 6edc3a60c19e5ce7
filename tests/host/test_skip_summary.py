"""The closing summary (tests/conftest.py) lists, under each runtime's counts, that runtime's skip reasons grouped
with how many tests each skipped (issue 23: tools/test hid why 173 tests were skipped)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_cpython_skips_are_grouped_by_reason_under_its_counts():
    # tests/device/test_model_parts.py skips on CPython where it needs mem_alloc and viper (MicroPython's own):
    # read the reasons from the file itself, one need(...) per skipped test
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "tests/device/test_model_parts.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
    lines = r.stdout.splitlines()
    at = [i for i, ln in enumerate(lines) if ln.startswith("cpython ")]
    assert at, r.stdout[-2000:]
    m = re.match(r"cpython\s+(\d+) passed, 0 failed, (\d+) skipped", lines[at[0]])
    assert m, lines[at[0]]
    grouped = []
    for ln in lines[at[0] + 1:]:
        g = re.match(r"^\s+(\d+) x (.+)$", ln)
        if not g:
            break
        grouped.append((int(g.group(1)), g.group(2)))
    assert sum(n for n, _ in grouped) == int(m.group(2))
    assert ("needs viper" in [w for _, w in grouped]) and ("needs mem_alloc" in [w for _, w in grouped]), grouped
