"""kernels_native.py is generated from kernels_plain.py (tools/gen_native_kernels.py): they must agree."""
import subprocess
import sys

from kvedge_host.paths import TOOLS


def test_native_kernels_are_the_plain_ones_regenerated():
    p = subprocess.run([sys.executable, TOOLS + "/gen_native_kernels.py", "--check"])
    assert p.returncode == 0, "device/kvedge/kernels_native.py is stale: run tools/gen_native_kernels.py"


def test_intpath_parameter_block_layout_is_the_kernels():
    # intpath keeps q_mv's parameter indexes as compile-time constants (no plain kernels loaded for them)
    from kvedge import qkernels_plain as q
    from kvedge.model import intpath
    for name in ("VMAX", "P_WO", "P_ROWS", "P_COLS", "P_XM", "P_OS", "P_ADD", "P_RO", "P_HDR"):
        assert getattr(intpath, name) == getattr(q, name), name
