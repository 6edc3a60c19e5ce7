"""A CircuitPython board end to end: `kvedge deploy --drive` into a folder standing in for CIRCUITPY, the real
CircuitPython (../shared/runtimes/circuitpython-unix32, the virtual board of a circuitpython profile) running the
deployed code.py to completion with that folder as its drive and lib/ on its path, and `kvedge monitor` reading
its serial console: every stats line, seq 1..N without a gap, from the start line to the final one."""
import csv
import os

import pytest

from kvedge_host.sim import VirtualBoard
from kvedge_host.tinyckpt import write as write_tiny

from _boardkit import kvedge


def _cp_binary():
    try:
        from kvedge_host.runtimes import circuitpython_bin, circuitpython_path
    except ImportError:
        return None, "kvedge_host.runtimes has no CircuitPython runtime"
    exe = circuitpython_bin()
    return exe, None if exe else "no CircuitPython binary at %s" % circuitpython_path()


def test_deployed_code_py_runs_to_completion_and_the_monitor_reads_every_line(tmp_path):
    exe, why = _cp_binary()
    if not exe:
        pytest.skip(why)
    model, tok = write_tiny(str(tmp_path / "m"))
    i8 = str(tmp_path / "tiny.i8.bin")
    assert kvedge("convert", model, "-o", i8).returncode == 0
    plan = str(tmp_path / "plan.json")
    p = kvedge("plan", "--model", i8, "--board", "rp2040-circuitpython", "--kv-dtype", "i8", "--align", "0",
               "--out", plan)
    assert p.returncode == 0, p.stderr
    drive = tmp_path / "CIRCUITPY"
    vb = VirtualBoard("rp2040-circuitpython", fs=str(drive))
    vb.start()  # the board boots: boot_out.txt appears, no code.py yet
    try:
        assert "CircuitPython 10." in (drive / "boot_out.txt").read_text()
        p = kvedge("deploy", "--drive", str(drive), "--board", "rp2040-circuitpython", "--config", plan,
                   "--weights", i8, "--tokenizer", tok, "--set", "STEPS=40", "--set", "STATS_MS=1", "-q")
        assert p.returncode == 0, p.stderr
        vb.reset()  # CircuitPython restarts code.py when the drive changes
        stats = str(tmp_path / "stats.csv")
        p = kvedge("monitor", "--port", vb.port, "--until", "final", "--duration", "240", "--csv", stats,
                   "--plain", timeout=300)
        assert p.returncode == 0, p.stderr
    finally:
        vb.stop()
    rows = list(csv.DictReader(open(stats)))
    assert rows, p.stdout
    assert [int(r["seq"]) for r in rows] == list(range(1, len(rows) + 1))
    assert rows[0]["event"] == "start" and rows[-1]["event"] == "final" and len(rows) > 2
    assert {r["session"] for r in rows} == {"1"}
    assert int(rows[-1]["tokens_seen"]) == 40
    assert "0 lost, 0 duplicated, 0 bad lines" in p.stdout
    # the board read its options from settings.toml and the cache from the plan
    import json
    doc = json.load(open(plan))
    assert int(rows[-1]["total_bytes"]) == doc["kv_bytes"]
    assert not os.path.exists(drive / "lib" / "kvedge" / "kernels_viper.py")
