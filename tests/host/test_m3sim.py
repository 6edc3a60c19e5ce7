"""The emulated board as a virtual board (`kvedge sim`; for the rp2040 the Cortex-M0 where its image is here, else
the Cortex-M3): mpremote drives it like a board, its heap is the
profile's, its flash is the --fs folder (files there before it starts are on the board, files it writes are there
after it stops), soft resets keep the filesystem mounted, main.py runs at power-on and hard reset, deploy works
against it, and no qemu outlives it."""
import os
import signal

import pytest

from kvedge import __version__
from kvedge_host import profiles
from kvedge_host.boards import m3board
from kvedge_host.boards.deploy import deployment, device_sources, for_arch, preload
from kvedge_host.boards.sim import SimProcess, make_board

from _boardkit import board_eval, kvedge, mpremote, processes_in, wait_until

LAYOUT = m3board.layout_for("rp2040")
WHY = m3board.missing("rp2040", layout=LAYOUT)
pytestmark = pytest.mark.skipif(WHY is not None, reason="emulated %s: %s" % (LAYOUT.cpu, WHY))
# the last word of sys.implementation._machine on each machine ("microbit with nRF51", "mps2-an385 with Cortex-M3")
CPU = {"m0": "nRF51", "m3": "Cortex-M3", "m7": "Cortex-M7"}[LAYOUT.key]


def _board(fs, **kw):
    vb, why = make_board("rp2040", fs=str(fs), **kw)
    assert vb.kind == "m3", why
    return vb


def test_mpremote_drives_it_and_it_is_a_32_bit_board_with_the_profiles_heap(tmp_path):
    heap = profiles.load("rp2040")["heap_bytes"]
    with _board(tmp_path / "fs") as vb:
        line = board_eval(vb.port, "import gc, sys\ngc.collect()\n"
                          "print(sys.implementation._machine.split()[-1], sys.maxsize, gc.mem_free() + gc.mem_alloc())")
        cpu, maxsize, size = line.split()
        assert cpu == CPU and int(maxsize) == 2 ** 31 - 1
        assert heap - 8192 <= int(size) <= heap, (size, heap)
        out = board_eval(vb.port, "try:\n    b = bytearray(%d)\n    print('allocated')\n"
                         "except MemoryError:\n    print('MemoryError')" % heap)
        assert out == "MemoryError"


def test_the_folder_is_the_boards_flash(tmp_path):
    fs = tmp_path / "fs"
    fs.mkdir()
    (fs / "host.txt").write_text("from the host")
    (fs / "gone.txt").write_text("the board removes this")
    (fs / "lib").mkdir()
    (fs / "lib" / "helper.py").write_text("VALUE = 41 + 1\n")
    with _board(fs) as vb:
        assert board_eval(vb.port, "import os\nprint(os.getcwd(), open('host.txt').read())") == "/ from the host"
        mpremote(vb.port, "exec", "import os\nos.remove('gone.txt')\nos.mkdir('data')\n"
                 "with open('data/note.txt', 'w') as f:\n    f.write('kept')")
        # a soft reset (a new mpremote session) remounts the flash: what was written is still there
        out = mpremote(vb.port, "exec", "import sys\nsys.path.append('lib')\nimport helper\n"
                       "print(open('data/note.txt').read(), helper.VALUE)", resume=False)
        assert out.strip().splitlines()[-1] == "kept 42"
        assert "note.txt" in mpremote(vb.port, "fs", "ls", ":data")
    assert (fs / "data" / "note.txt").read_text() == "kept"
    assert not (fs / "gone.txt").exists() and (fs / "host.txt").exists()
    with _board(fs) as vb:                                  # and the next board starts from it
        assert board_eval(vb.port, "print(open('data/note.txt').read())") == "kept"


def test_soft_and_hard_resets_and_main_py_like_a_board(tmp_path):
    fs = tmp_path / "fs"
    fs.mkdir()
    (fs / "main.py").write_text("booted = True\nprint('main ran')\n")
    with _board(fs) as vb:
        assert board_eval(vb.port, "print(booted)") == "True"       # main.py ran at power-on
        mpremote(vb.port, "exec", "x = 42\nwith open('w.txt', 'w') as f:\n    f.write('w')")
        assert board_eval(vb.port, "print(x)") == "42"               # resume keeps state
        out = mpremote(vb.port, "exec", "print('x' in globals(), 'booted' in globals())", resume=False)
        assert out.strip().splitlines()[-1] == "False False"         # a soft reset from the raw REPL: a fresh
        starts = vb.starts                                           # heap, and (as on a board) no main.py
        vb.reset()                                                   # a hard reset from the host side
        assert wait_until(lambda: vb.starts > starts, 60)
        assert board_eval(vb.port, "print(booted, open('w.txt').read())") == "True w"


def test_deploy_against_it_checks_on_the_board_and_sends_only_what_differs(tmp_path):
    fs = tmp_path / "fs"
    with __import__("tempfile").TemporaryDirectory() as build:
        preload(str(fs), deployment("rp2040", build, mpy=True, march=m3board.march_for("rp2040", LAYOUT)))
    n = len(for_arch(device_sources(), "armv6m"))
    with _board(fs) as vb:
        mpremote(vb.port, "exec", "import os\nos.remove('kvedge/errors.mpy')")
        p = kvedge("deploy", "--port", vb.port, "--board", "rp2040", "--mpy")
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.strip().splitlines()[-1].endswith(": 1 sent, %d unchanged, 0 removed" % (n - 1)), p.stdout
        assert "sent      kvedge/errors.mpy" in p.stdout
        code = ("import kvedge, kvedge.kernels as k\nfrom array import array\nimport kvedge.kernels.viper as v\n"
                "a = array('b', [(i * 37) % 255 - 127 for i in range(64)])\n"
                "print(kvedge.__version__, k.kind(), v.dot_i8(a, 0, a, 0, 64))")
        ref = sum(((i * 37) % 255 - 127) ** 2 for i in range(64))
        assert board_eval(vb.port, code).split() == [__version__, "asm", str(ref)]   # armv6m: asm picked first, viper loads too
        p = kvedge("deploy", "--port", vb.port, "--board", "esp32", "--mpy", "-q")
        assert p.returncode == 2 and "cannot load the viper kernels compiled for -march=xtensawin" in p.stderr
    assert (fs / "kvedge" / "errors.mpy").exists()


def test_cli_prints_the_port_and_leaves_nothing_running(tmp_path):
    fs, link = str(tmp_path / "fs"), str(tmp_path / "port")
    sim = SimProcess("rp2040", fs=fs, link=link)
    try:
        assert os.path.realpath(link) == sim.port
        assert board_eval(link, "import sys\nprint(sys.implementation._machine)").endswith(CPU)
        pids = processes_in(fs)
        assert pids and all(os.path.realpath("/proc/%d/exe" % p).endswith("qemu-system-arm") for p in pids)
    finally:
        sim.kill(signal.SIGKILL)
    assert wait_until(lambda: not processes_in(fs), 20), processes_in(fs)
    sim = SimProcess("rp2040", fs=fs, link=link)
    sim.stop()
    assert not os.path.lexists(link)
    assert wait_until(lambda: not processes_in(fs), 20)


def test_host_flag_and_boards_without_an_image(tmp_path, monkeypatch):
    vb, why = make_board("rp2040", fs=str(tmp_path / "a"), host=True)
    assert vb.kind == "host" and why == "--host"
    p = kvedge("sim", "--board", "rp2040", "--heap", "123456", "--rom", str(tmp_path))
    assert p.returncode == 2 and p.stderr.startswith("kvedge sim: error: --rom needs the emulated board "
                                                     "(no Cortex-M3 firmware image with a 123456-byte heap")
    monkeypatch.setenv(m3board.FIRMWARE_ENV, str(tmp_path / "none"))
    monkeypatch.setenv(m3board.M0.firmware_env, str(tmp_path / "none"))
    vb, why = make_board("rp2040", fs=str(tmp_path / "b"))
    assert vb.kind == "host" and why.startswith("no Cortex-M3 firmware folder")
