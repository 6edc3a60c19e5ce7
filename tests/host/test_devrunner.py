"""tools/devrunner.py, the device test runner: a failing test is reported as FAIL with its traceback and the
file's other tests still run, on every runtime (real CircuitPython has no traceback.print_exc)."""
import pytest

from kvedge_host.boards import runtimes
from kvedge_host.paths import DEVICE, TESTS_DEVICE, TOOLS

DELIBERATE = '''
from _support import Skip


def test_a_passes():
    assert [1, 2][1] == 2


def test_b_fails():
    got = [1]
    assert got[0] == 2, "deliberately failing: %r" % got


def test_c_raises():
    return {}["no such key"]


def test_d_skips():
    raise Skip("not on this runtime")


def test_e_passes_after_the_failures():
    assert "ok".upper() == "OK"
'''


def _runtime_cases():
    out = []
    for r in ("unix", "wasm", "circuitpython", "m3"):
        why = runtimes.missing(r)
        if r == "circuitpython" and not runtimes.circuitpython_bin():
            why = "no real CircuitPython binary at %s" % runtimes.circuitpython_path()
        out.append(pytest.param(r, marks=pytest.mark.skipif(why is not None, reason=str(why))))
    return out


@pytest.mark.parametrize("runtime", _runtime_cases())
def test_a_failing_file_is_reported_and_its_other_tests_still_run(runtime, tmp_path):
    (tmp_path / "test_zz_deliberate.py").write_text(DELIBERATE)
    rc, out = runtimes.run_code(runtime, "import devrunner\ndevrunner.main(['test_zz_deliberate'])\n", 215040,
                                [DEVICE, TESTS_DEVICE, TOOLS, str(tmp_path)], timeout=300)
    lines = [ln.strip() for ln in out.splitlines()]
    assert rc == 0, out
    assert "PASS test_zz_deliberate::test_a_passes" in lines
    assert "FAIL test_zz_deliberate::test_b_fails: AssertionError: deliberately failing: [1]" in lines
    assert "FAIL test_zz_deliberate::test_c_raises: KeyError: no such key" in lines
    assert "SKIP test_zz_deliberate::test_d_skips: not on this runtime" in lines
    assert "PASS test_zz_deliberate::test_e_passes_after_the_failures" in lines
    assert lines[-1] == "2 passed, 2 failed, 1 skipped", out
    # each failure came with its traceback, naming the line that failed
    assert out.count("Traceback (most recent call last)") == 2, out
    assert 'line 11, in test_b_fails' in out and 'line 15, in test_c_raises' in out, out
