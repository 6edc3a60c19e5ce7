"""The DSP kernels (kvedge.qkernels_dsp) on the emulated Cortex-M55 (mps3-an547, armv7emdp .mpy, the rp2350
heap), the other core with the DSP instructions beside the Cortex-M7 whose whole device suite runs in
test_runtimes: the kernels against the plain ones, every kernel kind's q_* kernels against written-out
arithmetic, and the integer pass bit-identical across kinds (asm's matrix product there is the DSP one). On the
Cortex-M3 and M0 the same files must find no DSP (their suites run test_qkernels_dsp too)."""
import pytest

from kvedge_host import runtimes

FILES = ("test_qkernels_dsp.py", "test_intkernels.py", "test_intpath_kinds.py")


@pytest.mark.parametrize("name", FILES)
def test_dsp_files_on_the_cortex_m55(name):
    why = runtimes.missing("m55")
    if why:
        pytest.skip("m55: %s" % why)
    res = runtimes.run_device_tests("m55", files=[name])
    assert res["failed"] == 0 and res["passed"] > 0, "\n".join(res["lines"][-60:])
    if name == "test_qkernels_dsp.py":  # the DSP kernels ran: nothing skipped on this core
        assert res["skipped"] == 0, res["lines"]


def test_the_m55_is_the_one_its_runtime_names():
    why = runtimes.missing("m55")
    if why:
        pytest.skip("m55: %s" % why)
    rc, out = runtimes.run_code("m55", "import sys\nfrom kvedge import kernels\n"
                                "print(sys.implementation._machine, kernels.dsp())\n",
                                heap=runtimes.heap_for("rp2350"), paths=[runtimes.DEVICE])
    assert rc == 0 and "Cortex-M55 True" in out, out
