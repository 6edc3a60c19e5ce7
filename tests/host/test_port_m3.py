"""`kvedge check --port` and `kvedge test --port` against the emulated Cortex-M3's serial pty standing in for a
board's USB port (rp2040 profile: its heap, armv6m .mpy). The package and the device tests are put on the board's
flash image before it starts, as `kvedge test --sim` does, so the deploy checks them on the board instead of
sending them over its slow serial link."""
import json
import tempfile

import pytest

from kvedge_host import m3board
from kvedge_host import cmd_test
from kvedge_host.deploy import deployment, preload

from _boardkit import kvedge

WHY = m3board.missing("rp2040")
pytestmark = pytest.mark.skipif(WHY is not None, reason="emulated Cortex-M3: %s" % WHY)


def _board(fs, with_tests=False):
    from kvedge_host.m3sim import M3Sim
    with tempfile.TemporaryDirectory() as build:
        pairs = deployment("rp2040", build, True, march=m3board.march_for("rp2040"))
        preload(str(fs), pairs + (cmd_test.test_pairs() if with_tests else []))
    return M3Sim("rp2040", fs=str(fs))


def test_check_port_on_the_emulated_board(tmp_path):
    with _board(tmp_path / "flash") as vb:
        p = kvedge("check", "--port", vb.port, "--only", "gqa8", "--json", timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = json.loads(p.stdout)
    # each row compares the board's attention output with numpy's (kvedge_host.numref) on the same case
    assert rows and all(r["ok"] for r in rows), rows
    assert {"float", "int plain"} <= {r["path"] for r in rows}, rows


def test_test_port_on_the_emulated_board(tmp_path):
    with _board(tmp_path / "flash", with_tests=True) as vb:
        p = kvedge("test", "--port", vb.port, "--board", "rp2040", "--mpy", "-k", "telemetry", "-k", "budget.py",
                   timeout=1800)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    passed, failed, skipped = (int(x.split()[0]) for x in p.stdout.strip().splitlines()[-1].split(", "))
    assert passed > 0 and failed == 0 and skipped == 0, p.stdout[-3000:]
