"""The emulated Cortex-M0 (qemu's microbit machine, nRF51, Armv6-M: the RP2040's instruction set) through the
Cortex-M3's machinery with its own layout: the firmware is found (or the reason it is not), the package runs
as armv6m .mpy in place from a ROMFS image in its flash, the RAM disk is writable, and a HardFault, after which
the board hangs, is reported as such instead of as a hang. A Thumb-2 instruction planted in an armv6m asm
kernel runs on the Cortex-M3 and faults on the Cortex-M0, where the device suite reports the fault."""
import os
import sys

import pytest

from kvedge_host.boards import m3board, runtimes

M0 = m3board.M0
WHY_M0 = m3board.missing("rp2040", layout=M0)
WHY_M3 = m3board.missing("rp2040")
needs_m0 = pytest.mark.skipif(WHY_M0 is not None, reason="emulated Cortex-M0: %s" % WHY_M0)
needs_both = pytest.mark.skipif(WHY_M0 is not None or WHY_M3 is not None,
                                reason="emulated Cortex-M0 and M3: %s" % (WHY_M0 or WHY_M3))

# What the firmware printed for `mul.w r0, r0, r1` on this board (copied from a run): the report, then nothing.
DUMP = ("HardFault exception caught:\r\n\r\nCPU registers:\r\n"
        "R0:   00000006 R1:   00000007 R2:   00000001 R3:   00000001\r\n"
        "R4:   2003FEE8 R5:   20001D11 R6:   200020F0 R7:   00000006\r\n"
        "R8:   3FFFFFFF R9:   20002060 R10:  0003217C R11:  000000F0\r\n"
        "R12:  00000003 R13:  2003FDB0 R14:  00011CE5 R15:  20001D12\r\n"
        "xPSR: 21000000\r\n")

# A device test file with two asm_thumb kernels compiled as armv6m .mpy: MULS (Thumb-1, every Cortex-M) and
# MUL.W by its raw encoding (Thumb-2, encoding T2: 0xFB00 0xF001 = mul.w r0, r0, r1), which the armv6m
# assembler cannot spell but data() emits; an Armv7-M core runs it, an Armv6-M core faults.
PLANTED = '''\
import micropython


@micropython.asm_thumb
def _mul_thumb1(r0, r1):
    mul(r0, r1)


@micropython.asm_thumb
def _mul_thumb2(r0, r1):
    data(2, 0xFB00, 0xF001)


def test_a_thumb1_mul():
    assert _mul_thumb1(6, 7) == 42


def test_b_thumb2_mul():
    assert _mul_thumb2(-6, 7) == -42
'''


def test_m0_firmware_is_found_by_heap_and_a_missing_one_is_explained(tmp_path, monkeypatch):
    (tmp_path / "firmware-microbit-heap215040.elf").write_bytes(b"\x7fELF")
    (tmp_path / "firmware-an500-heap460800.elf").write_bytes(b"\x7fELF")   # another machine's image
    monkeypatch.setenv(M0.firmware_env, str(tmp_path))
    assert m3board.firmware_images(layout=M0) == {215040: str(tmp_path / "firmware-microbit-heap215040.elf")}
    with pytest.raises(m3board.M3Missing) as e:
        m3board.firmware_for(102400, M0)
    assert str(e.value) == ("no Cortex-M0 firmware image with a 102400-byte heap in %s (images there: 215040)"
                            % tmp_path)
    monkeypatch.setenv(M0.firmware_env, str(tmp_path / "nowhere"))
    why = runtimes.missing("m0", "rp2040")
    assert why == ("no Cortex-M0 firmware folder %s (set KVEDGE_M0_FIRMWARE to the folder of "
                   "firmware-microbit-heapN.elf images)" % (tmp_path / "nowhere"))
    assert runtimes.missing("m3", "rp2040") == WHY_M3     # the Cortex-M3 does not look there


def test_m0_loads_only_armv6m_and_has_no_file_backed_ram():
    assert m3board.march_for("rp2040", M0) == "armv6m"
    assert m3board.march_for("rp2350", M0) == "armv6m"   # armv7emsp machine code cannot run on an Armv6-M core
    assert m3board.march_for("rp2350") == "armv7m"
    assert runtimes.describe("m0") == "emulated Cortex-M0 (qemu microbit), the package as -march=armv6m .mpy"
    with pytest.raises(m3board.M3Missing) as e:
        m3board.M3Board("rp2040", layout=M0, disk_image="/tmp/never-made.img")
    assert "no RAM a host file can back" in str(e.value)


def test_a_fault_report_is_read_only_when_complete():
    assert m3board.fault_report("x\r\n" + DUMP) == (True, 0x20001D12)
    assert m3board.fault_report(DUMP[:DUMP.index("xPSR")]) == (False, None)   # still printing its registers
    assert m3board.fault_report("HardFault, said a test\r\n") == (False, None)


def _script(text):
    return [sys.executable, "-c", text]


def test_a_board_silent_after_its_fault_report_is_a_fault_not_a_hang():
    # the firmware prints its report and spins: the watcher ends the wait FAULT_QUIET seconds later, long
    # before the time-out, and says fault; silence without a report is a time-out; an exit is an exit
    hang = "import sys, time\nsys.stdout.write(%r)\nsys.stdout.flush()\ntime.sleep(600)\n" % ("KV 1\n" + DUMP)
    status, out, _ = m3board.run_watched(_script(hang), timeout=300, quiet=1)
    assert status == "fault" and out.startswith("KV 1\n") and "xPSR: 21000000" in out
    status, out, _ = m3board.run_watched(_script("import time\nprint('KV 2', flush=True)\ntime.sleep(600)\n"),
                                         timeout=2, quiet=1)
    assert (status, out) == ("timeout", "KV 2\n")
    status, out, rc = m3board.run_watched(_script("print('KV 3')\nraise SystemExit(3)\n"), timeout=60)
    assert (status, out, rc) == ("done", "KV 3\n", 3)


@needs_m0
def test_the_package_runs_as_armv6m_mpy_from_flash_with_a_ram_disk():
    code = ("import gc, sys, os\n"
            "print('KV', sys.implementation._machine, (sys.implementation._mpy >> 10) & 0x3f)\n"
            "import kvedge.kernels as k\nprint('KV', k.kind(), k.__file__)\n"
            "from array import array\nimport kvedge.kernels.plain as p, kvedge.kernels.viper as v\n"
            "x = array('b', [(i * 37) % 255 - 127 for i in range(64)])\n"
            "print('KV', p.dot_i8(x, 0, x, 0, 64), v.dot_i8(x, 0, x, 0, 64))\n"
            "with open('f.bin', 'wb') as f:\n    f.write(bytes(range(200)))\n"
            "print('KV', os.getcwd(), sum(open('/f.bin', 'rb').read()))\n"
            "gc.collect()\nprint('KV', gc.mem_free() + gc.mem_alloc())\n")
    out = m3board.run_code(code, layout=M0, timeout=300)
    lines = [ln.split()[1:] for ln in out.splitlines() if ln.startswith("KV ")]
    ref = sum(((i * 37) % 255 - 127) ** 2 for i in range(64))
    assert lines[0] == ["microbit", "with", "nRF51", "4"]                     # arch 4 = armv6m
    assert lines[1] == ["asm", "/rom/kvedge/kernels/__init__.mpy"]
    assert lines[2] == [str(ref), str(ref)]
    assert lines[3] == ["/", str(sum(range(200)))]
    assert 215040 - 8192 <= int(lines[4][0]) < 215040                        # the rp2040 heap


@needs_m0
def test_armv7m_machine_code_is_refused_on_the_m0(tmp_path):
    src = tmp_path / "v7.py"
    src.write_text("import micropython\n@micropython.viper\ndef f(x: int) -> int:\n    return x + 1\n")
    mpy = tmp_path / "v7.mpy"
    m3board.compile_to(str(src), str(mpy), "v7.py", "armv7m")
    out = m3board.run_code("try:\n    import v7\nexcept ValueError as e:\n    print('KV', e)\n",
                           package=None, extra=[(str(mpy), "v7.mpy")], layout=M0, timeout=120)
    assert "KV incompatible .mpy arch" in out


def _planted_suite(tmp_path, monkeypatch):
    folder = tmp_path / "device"
    folder.mkdir()
    with open(os.path.join(runtimes.TESTS_DEVICE, "_support.py")) as f:
        (folder / "_support.py").write_text(f.read())
    (folder / "test_planted.py").write_text(PLANTED)
    monkeypatch.setattr(runtimes, "TESTS_DEVICE", str(folder))
    assert runtimes.test_files() == ["test_planted.py"]


@needs_both
def test_a_planted_thumb2_instruction_runs_on_the_m3_and_faults_on_the_m0(tmp_path, monkeypatch):
    _planted_suite(tmp_path, monkeypatch)
    m3 = runtimes.run_device_tests("m3", timeout=300)
    assert (m3["passed"], m3["failed"], m3["skipped"]) == (2, 0, 0), m3["lines"]
    with runtimes.Files("m0") as runner:
        rc, out = runner.run("test_planted.py", timeout=300)
        assert rc == 1
        assert "PASS test_planted::test_a_thumb1_mul" in out                 # Thumb-1 runs there
        assert "test_b_thumb2_mul" not in out                                # never finished: it faulted
        last = out.strip().splitlines()[-1]
        assert last.startswith("FAIL test_planted.py: HardFault on the emulated Cortex-M0 (qemu microbit) at PC=0x")
        pc = int(last.split("PC=")[1].split(":")[0], 16)
        # in the kernel's machine code, which the .mpy loader copies into the heap (at 0x20000310 in this
        # firmware, README of micropython-qemu-more), not in the firmware's own code in flash
        assert 0x20000310 <= pc < 0x20000310 + 215040
        res = runtimes.parse(out, rc, "test_planted.py", {"passed": 0, "failed": 0, "skipped": 0, "lines": []})
        assert res["failed"] == 1 and any("HardFault on the emulated Cortex-M0" in ln for ln in res["lines"])
        # the board was restarted: the next file runs
        rc, out = runner.run("test_planted.py", only=["test_a_thumb1_mul"], timeout=300)
        assert rc == 0 and "1 passed, 0 failed, 0 skipped" in out
