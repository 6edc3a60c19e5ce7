"""The DSP kernels (kvedge.kernels.q8_dsp_thumb) on the two emulated cores that have the DSP instructions, both at the
rp2350 heap: the single-precision Cortex-M7 (mps2-an500, armv7emsp .mpy: the RP2350's stand-in) and the
Cortex-M55 (mps3-an547, armv7emdp .mpy). On each: the DSP kernels against the plain ones, every kernel kind's q_*
kernels against written-out arithmetic, and the integer pass bit-identical across kinds (asm's matrix product
there is the DSP one). The Cortex-M3 and M0 suites run test_qkernels_dsp too, where the probe must say no. The M7
runs the whole suite (test_runtimes); here it runs test_qkernels_dsp once more to show nothing there is skipped.
Only these files run on the M55: the whole suite there too would take tools/test past its 45 minutes."""
import pytest

from kvedge_host.boards import runtimes

CORES = {"m7": "Cortex-M7", "m55": "Cortex-M55"}
FILES = ("test_qkernels_dsp.py", "test_intkernels.py", "test_pass_int_kinds.py")


def _need(runtime):
    why = runtimes.missing(runtime)
    if why:
        pytest.skip("%s: %s" % (runtime, why))


@pytest.mark.parametrize("runtime,name", [("m7", FILES[0])] + [("m55", f) for f in FILES])
def test_dsp_files_on(runtime, name):
    _need(runtime)
    res = runtimes.run_device_tests(runtime, files=[name])
    assert res["failed"] == 0 and res["passed"] > 0, "\n".join(res["lines"][-60:])
    if name == "test_qkernels_dsp.py":  # the DSP kernels ran: nothing skipped on this core
        assert res["skipped"] == 0, res["lines"]


@pytest.mark.parametrize("runtime", sorted(CORES))
def test_the_core_is_the_one_its_runtime_names_and_has_dsp(runtime):
    _need(runtime)
    rc, out = runtimes.run_code(runtime, "import sys\nfrom kvedge.kernels import cpuid as cpuid\n"
                                "print(sys.implementation._machine, cpuid.has_dsp())\n",
                                heap=runtimes.heap_for("rp2350"), paths=[runtimes.DEVICE])
    assert rc == 0 and "%s True" % CORES[runtime] in out, out


def test_the_thumb2_product_runs_on_the_cortex_m3_with_an_armv7m_package():
    # the M3 suite stages the rp2040's armv6m package, which has no q8_v7m_thumb; a board of the M3's own -march
    # (armv7m: the esp32 profile's xtensawin cannot load there, so march_for gives the CPU's) gets it, and its q_mv
    # equals the plain one there, while the DSP tests skip (no DSP on an M3)
    _need("m3")
    res = runtimes.run_device_tests("m3", board="esp32", files=["test_qkernels_dsp.py", "test_att_v7m.py",
                                                                  "test_q8_steps_v7m.py"],
                                    heap=runtimes.heap_for("rp2040"))
    assert res["failed"] == 0 and res["passed"] >= 7, "\n".join(res["lines"][-60:])
    assert not any("Thumb-2" in line or "_v7m_thumb" in line for line in res["lines"]), res["lines"]


def test_the_thumb2_int4_product_runs_on_the_cortex_m3_with_an_armv7m_package():
    # kvedge.kernels.q4_v7m_thumb likewise (a *_v7m_thumb module: armv7m packages and up): on the M3 with its own
    # -march it loads, the asm kind's q_mv4 is it, and it equals the plain q_mv4 on random rows and the edges
    _need("m3")
    res = runtimes.run_device_tests("m3", board="esp32", files=["test_w4kernels_v7m.py", "test_w4kernels.py"],
                                    heap=runtimes.heap_for("rp2040"))
    assert res["failed"] == 0 and res["passed"] >= 6 and res["skipped"] == 0, "\n".join(res["lines"][-60:])
