"""`kvedge check --port`, `kvedge test --port` and `kvedge generate --port --rom` against the emulated Cortex-M3's
serial pty standing in for a board's USB port (rp2040 profile: its heap, armv6m .mpy). The package and the device
tests are put on the board's flash image before it starts, as `kvedge test --sim` does, so the deploy checks them on
the board instead of sending them over its slow serial link."""
import json
import tempfile

import pytest

from kvedge_host.boards import m3board
from kvedge_host.cli import cmd_test
from kvedge_host.boards.deploy import deployment, preload

from _boardkit import kvedge

WHY = m3board.missing("rp2040")
pytestmark = pytest.mark.skipif(WHY is not None, reason="emulated Cortex-M3: %s" % WHY)


def _board(fs, with_tests=False):
    from kvedge_host.boards.m3sim import M3Sim
    with tempfile.TemporaryDirectory() as build:
        pairs = deployment("rp2040", build, True, march=m3board.march_for("rp2040"))
        preload(str(fs), pairs + (cmd_test.test_pairs() if with_tests else []))
    return M3Sim("rp2040", fs=str(fs))


def test_check_port_on_the_emulated_board(tmp_path):
    with _board(tmp_path / "flash") as vb:
        p = kvedge("check", "--port", vb.port, "--only", "gqa8", "--json", timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = json.loads(p.stdout)
    # each row compares the board's attention output with numpy's (kvedge_host.ref.numref) on the same case
    assert rows and all(r["ok"] for r in rows), rows
    assert {"float", "int plain"} <= {r["path"] for r in rows}, rows


def test_test_port_on_the_emulated_board(tmp_path):
    with _board(tmp_path / "flash", with_tests=True) as vb:
        p = kvedge("test", "--port", vb.port, "--board", "rp2040", "--mpy", "-k", "telemetry", "-k", "budget.py",
                   timeout=1800)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    passed, failed, skipped = (int(x.split()[0]) for x in p.stdout.strip().splitlines()[-1].split(", "))
    assert passed > 0 and failed == 0 and skipped == 0, p.stdout[-3000:]


def test_generate_port_rom_reads_the_weights_in_place_on_the_emulated_board(tmp_path):
    # the int8 weights in the board's ROMFS (an emulated board's ROMFS is loaded when it starts: kvedge sim --rom);
    # generate --port --rom finds them there (nothing to write) and the run's summary says where they were held
    import shutil
    from kvedge.model.checkpoint import convert_to_i8
    from kvedge_host.boards.m3sim import M3Sim
    from kvedge_host.boards.tinyckpt import write
    model, tok = write(str(tmp_path / "m"))
    rom = tmp_path / "rom"
    rom.mkdir()
    convert_to_i8(model, str(rom / "tiny.i8.bin"))
    shutil.copyfile(tok, str(tmp_path / "tok.bin"))
    with tempfile.TemporaryDirectory() as build:
        preload(str(tmp_path / "flash"), deployment("rp2040", build, True, extra=[str(tmp_path / "tok.bin"), str(rom / "tiny.i8.bin")],
                                                    march=m3board.march_for("rp2040")))
    with M3Sim("rp2040", fs=str(tmp_path / "flash"), rom=str(rom)) as vb:
        args = ["generate", "--port", vb.port, "--board", "rp2040", "--model", str(rom / "tiny.i8.bin"),
                "--tokenizer", str(tmp_path / "tok.bin"), "--steps", "8", "--kv-dtype", "i8"]
        p = kvedge(*(args + ["--rom"]), timeout=900)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        assert "weights i8 (read in place from ROMFS)" in p.stderr, p.stderr[-2000:]
        q = kvedge(*(args + ["--stream"]), timeout=900)  # the same run, rows streamed from the file on its flash
        assert q.returncode == 0, q.stdout[-2000:] + q.stderr[-3000:]
        assert "weights i8 (streamed from the file)" in q.stderr, q.stderr[-2000:]
    assert p.stdout == q.stdout and p.stdout.strip()  # the same text either way
