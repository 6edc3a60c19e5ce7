"""kernels/native.py is generated from kernels/plain.py (tools/gen_native_kernels.py): they must agree."""
import subprocess
import sys

from kvedge_host.paths import TOOLS


def test_native_kernels_are_the_plain_ones_regenerated():
    p = subprocess.run([sys.executable, TOOLS + "/gen_native_kernels.py", "--check"])
    assert p.returncode == 0, "device/kvedge/kernels/native.py is stale: run tools/gen_native_kernels.py"

