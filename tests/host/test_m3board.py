"""The emulated Cortex-M3 board launcher: the firmware image is the one for the heap (or the reason there is
none), code runs in fresh interpreters through mpremote, the ROMFS holds the package as machine code for the
board, the RAM disk is writable and survives soft resets, -icount gives exact instruction counts, and no qemu
outlives its board, even when the Python process that started it is killed."""
import os
import signal
import subprocess
import sys

import pytest

from kvedge_host import profiles
from kvedge_host.boards import m3board
from kvedge_host.paths import DEVICE, ROOT

from _boardkit import wait_until

WHY = m3board.missing("rp2040")
needs_m3 = pytest.mark.skipif(WHY is not None, reason="emulated Cortex-M3: %s" % WHY)


def test_firmware_is_chosen_by_heap_and_a_missing_one_is_explained(tmp_path, monkeypatch):
    for heap in (102400, 215040):
        (tmp_path / ("firmware-heap%d.elf" % heap)).write_bytes(b"\x7fELF")
    (tmp_path / "README.md").write_text("not an image")
    monkeypatch.setenv(m3board.FIRMWARE_ENV, str(tmp_path))
    assert m3board.firmware_images() == {102400: str(tmp_path / "firmware-heap102400.elf"),
                                         215040: str(tmp_path / "firmware-heap215040.elf")}
    assert m3board.firmware_for(215040) == str(tmp_path / "firmware-heap215040.elf")
    with pytest.raises(m3board.M3Missing) as e:
        m3board.firmware_for(profiles.load("rp2350")["heap_bytes"])
    assert str(e.value) == ("no Cortex-M3 firmware image with a 460800-byte heap in %s (images there: "
                            "102400, 215040)" % tmp_path)
    monkeypatch.setenv(m3board.FIRMWARE_ENV, str(tmp_path / "nowhere"))
    assert m3board.missing("rp2040").startswith("no Cortex-M3 firmware folder %s" % (tmp_path / "nowhere"))


def test_march_is_the_profiles_when_the_cortex_m3_loads_it():
    assert m3board.march_for("rp2040") == "armv6m"
    assert m3board.march_for("esp32") == "armv7m"      # xtensawin machine code cannot run here
    assert m3board.march_for("rp2350") == "armv7m"     # armv7emsp is refused by this firmware


@needs_m3
def test_code_runs_on_the_rp2040_heap_with_the_package_from_rom():
    heap = profiles.load("rp2040")["heap_bytes"]
    out = m3board.run_code(
        "import gc, sys\ngc.collect()\n"
        "print('KV', sys.implementation.name, sys.maxsize, gc.mem_free() + gc.mem_alloc())\n"
        "print('KV', 1.0 + 1e-8 == 1.0)\n"                             # float32
        "import kvedge.kernels as k\nprint('KV', k.kind(), k.__file__)\n"
        "from array import array\nimport kvedge.kernels.viper as v, kvedge.kernels.plain as p\n"
        "a = array('b', [(i * 37) % 255 - 127 for i in range(64)])\n"
        "print('KV', v.dot_i8(a, 0, a, 0, 64), p.dot_i8(a, 0, a, 0, 64))\n",
        board="rp2040")
    lines = [ln.split()[1:] for ln in out.splitlines() if ln.startswith("KV ")]
    name, maxsize, usable = lines[0]
    assert name == "micropython" and int(maxsize) == 2 ** 31 - 1
    assert heap - 8192 <= int(usable) < heap                # the GC's tables come out of the heap
    assert lines[1] == ["True"]
    assert lines[2] == ["asm", "/rom/kvedge/kernels/__init__.mpy"]  # the inline assembler's kind first; armv6m, in place
    ref = sum(((i * 37) % 255 - 127) ** 2 for i in range(64))
    assert lines[3] == [str(ref), str(ref)]


@needs_m3
def test_icount_counts_instructions_of_a_known_loop():
    # an asm_thumb loop of n x (subs, bne) executes exactly 2n instructions: 1 us of ticks_us = 1000 of them
    code = ("import time\n"
            "@micropython.asm_thumb\n"
            "def spin(r0):\n    label(loop)\n    sub(r0, r0, 1)\n    bne(loop)\n"
            "for n in (1000000, 3000000):\n"
            "    t0 = time.ticks_us()\n    spin(n)\n    print('KV', n, time.ticks_diff(time.ticks_us(), t0))\n")
    out = m3board.run_code(code, package=None)
    got = [tuple(int(x) for x in ln.split()[1:]) for ln in out.splitlines() if ln.startswith("KV ")]
    assert [n for n, _ in got] == [1000000, 3000000], out
    for n, us in got:
        assert abs(m3board.instructions(us) - 2 * n) <= 3000, (n, us)   # call overhead + 1 us steps


@needs_m3
def test_ram_disk_is_writable_and_survives_soft_resets(tmp_path):
    folder = tmp_path / "rom"
    m3board.stage(str(folder), [(os.path.join(DEVICE, "kvedge", "errors.py"), "lib/kverr.py")], "armv6m")
    m3board.write_disk_module(str(folder), "armv6m")
    image = m3board.build_romfs(str(folder), str(tmp_path / "rom.img"))
    with m3board.M3Board("rp2040", romfs=image) as b:
        out = b.exec("import os\nwith open('note.txt', 'w') as f:\n    f.write('kept')\n"
                     "print('KV', os.getcwd(), sorted(os.listdir('/rom')), sorted(os.listdir('/rom/lib')))\n"
                     "import kverr\nprint('KV', kverr.__file__)")
        assert "KV / ['_m3disk.mpy', 'lib'] ['kverr.mpy']" in out
        assert "KV /rom/lib/kverr.mpy" in out
        starts = b.starts
        out = b.exec("print('KV', 'x' in globals(), open('note.txt').read())")   # a soft reset in between
        assert "KV False kept" in out and b.starts == starts
        with pytest.raises(m3board.M3Error) as e:
            b.exec("raise ValueError('board side')")
        assert "ValueError: board side" in e.value.output
        with pytest.raises(m3board.M3Error) as e:
            b.exec("while True:\n    pass", timeout=3)
        assert "timed out" in str(e.value) and b.starts == starts + 1 and b.alive()
        out = b.exec("import os\nprint('KV', 'note.txt' in os.listdir())")        # a new qemu: a new disk
        assert "KV False" in out


@needs_m3
def test_no_qemu_outlives_its_board_or_its_python(tmp_path):
    with m3board.M3Board("rp2040") as b:
        pid = b.proc.pid
        assert os.path.realpath("/proc/%d/exe" % pid).endswith("qemu-system-arm")
    assert not os.path.exists("/proc/%d" % pid) or _zombie(pid)
    script = ("import sys, time\nsys.path[:0] = %r\nfrom kvedge_host.boards import m3board\n"
              "b = m3board.M3Board('rp2040')\nb.start()\nprint(b.proc.pid, flush=True)\ntime.sleep(600)\n"
              % ([os.path.join(ROOT, "host"), DEVICE],))
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(p.stdout.readline())
        assert os.path.exists("/proc/%d" % pid)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
    assert wait_until(lambda: not os.path.exists("/proc/%d" % pid) or _zombie(pid), 20)


def _zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
