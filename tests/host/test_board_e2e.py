"""Boards in the loop, end to end, on virtual boards: deploy, a workload filling a windowed cache streams its
stats, the monitor logs them to CSV (last row == the board's final stats, no sample lost or repeated), and the
device files run on the virtual rp2040 through `kvedge test`."""
import csv
import json
import os

from kvedge import telemetry
from kvedge_host.paths import DEVICE
from kvedge_host.boards.sim import VirtualBoard

from _boardkit import board_eval, kvedge, mpremote, processes_in, wait_until

TOKENS, EVERY = 200, 10


def test_deploy_workload_monitor_csv_matches_the_board(tmp_path):
    fs = str(tmp_path / "fs")
    out, png = str(tmp_path / "stats.csv"), str(tmp_path / "timeline.png")
    n = 2 + TOKENS // EVERY                           # start, a tick every EVERY tokens, final
    with VirtualBoard("rp2040", fs=fs) as vb:
        p = kvedge("deploy", "--port", vb.port, "--board", "rp2040",
                   "--extra", os.path.join(DEVICE, "examples", "fill_window.py"), "-q")
        assert p.returncode == 0, p.stdout + p.stderr
        # start the workload and let mpremote go: the board keeps streaming; what nobody reads yet waits in
        # the port (the virtual board, like a USB board, holds output until a reader comes)
        # a soft reset first (mpremote without `resume`; the virtual board restarts its interpreter), as on a
        # board after deployment: the workload starts on a clean, unfragmented heap
        mpremote(vb.port, "exec", "--no-follow",
                 "import fill_window\nkv_work = fill_window.run(tokens=%d, every=%d)" % (TOKENS, EVERY),
                 resume=False)
        m = kvedge("monitor", "--port", vb.port, "--csv", out, "--plot", png, "--samples", n,
                   "--duration", 120, "--plain", timeout=300)
        assert m.returncode == 0, m.stdout + m.stderr
        final = json.loads(board_eval(vb.port, "print(kv_work.cache.stats_json())"))
        seq = board_eval(vb.port, "print(kv_work.telemetry.seq)")
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["seq"]) for r in rows] == list(range(1, n + 1))     # none lost, none repeated
    assert int(seq) == n
    assert {r["session"] for r in rows} == {"1"}
    last = rows[-1]
    assert last["event"] == "final"
    for k in telemetry.STAT_KEYS:
        assert int(last[k]) == final[k], (k, last[k], final[k])
    # the windowed cache filled up and evicted: the workload did what it says
    assert final["tokens_seen"] == TOKENS and final["evictions"] == TOKENS - final["tokens_cached"] > 0
    assert final["used_bytes"] == final["total_bytes"]
    assert int(last["heap_free"]) > 0
    assert "%d samples in 1 session(s), 0 lost, 0 duplicated" % n in m.stdout
    assert "ALERT cache" in m.stdout                  # a full cache is above the 90 % default
    assert os.path.getsize(png) > 0
    assert wait_until(lambda: not processes_in(fs), 30)


# `kvedge test --sim rp2040` runs the files it is given on the virtual rp2040 (the emulated Cortex-M0, as .mpy, as
# a Pico runs them). Every device file runs there already in tests/host/test_runtimes.py (its m0 column, the same
# board and image): here the command itself, on files that import the cache, the model runner and the integer
# kernels' choice (the whole suite again took 18 minutes of a 2-core CI machine).
E2E_FILES = ("test_budget.py", "test_kernel_select.py", "test_model_generate.py")


def test_kvedge_test_runs_device_files_on_the_virtual_rp2040():
    args = []
    for name in E2E_FILES:
        args += ["-k", name]
    p = kvedge("test", "--sim", "rp2040", "--mpy", "-v", *args, timeout=1200)
    lines = p.stdout.strip().splitlines()
    passed, failed, skipped = (int(x.split()[0]) for x in lines[-1].split(", "))
    assert p.returncode == 0 and failed == 0 and passed > 0, p.stdout[-6000:] + p.stderr
    for name in E2E_FILES:  # each file's tests ran and passed (-v: a PASS line per test)
        assert any(ln.startswith("PASS %s::" % name[:-3]) for ln in lines), (name, p.stdout[-3000:])
    assert passed == sum(ln.startswith("PASS ") for ln in lines), p.stdout[-3000:]


def test_kvedge_test_on_a_port_with_mpy(tmp_path):
    fs = str(tmp_path / "fs")
    with VirtualBoard("unix", fs=fs) as vb:
        p = kvedge("test", "--port", vb.port, "--board", "unix", "--mpy", "-k", "telemetry", "-k", "budget.py",
                   timeout=900)
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.strip().splitlines()[-1].endswith(" 0 failed, 0 skipped")
        assert os.path.exists(os.path.join(fs, "kvedge", "telemetry.mpy"))
        assert not os.path.exists(os.path.join(fs, "kvedge", "telemetry.py"))
    p = kvedge("test", "--sim", "rp2040", "-k", "no_such_file")
    assert p.returncode == 2 and p.stderr.startswith("kvedge test: error: no test file matches")
