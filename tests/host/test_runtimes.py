"""The device suite on real MicroPython: the unix port (heap capped to the rp2040 profile), the same port
with CircuitPython's limits emulated, and the 32-bit wasm port. A failure on any runtime fails this run."""
import pytest

from kvedge_host import runtimes

RESULTS = {}


@pytest.mark.parametrize("runtime", ["unix", "circuitpython", "wasm"])
def test_device_suite_on(runtime):
    res = runtimes.run_device_tests(runtime, board="rp2040")
    RESULTS[runtime] = res
    detail = "\n".join(res["lines"][-80:])
    assert res["failed"] == 0, "%s: %d failed\n%s" % (runtime, res["failed"], detail)
    assert res["passed"] > 0, "%s: no test ran\n%s" % (runtime, detail)
