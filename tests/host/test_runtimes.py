"""The device suite on real MicroPython and CircuitPython: the unix port (heap capped to the rp2040 profile), the
32-bit wasm port, the emulated Cortex-M3 board at the rp2040 heap (the package as armv6m .mpy, and as source),
the emulated Cortex-M0 at the rp2040 heap (armv6m .mpy on an Armv6-M core: a Thumb-2 instruction faults there), the
single-precision Cortex-M7 at the rp2350 heap (armv7emsp .mpy on a core with the DSP extension and a float32 FPU:
the RP2350's stand-in), the emulated Xtensa lx106 at the esp32 heap (xtensa .mpy, call0, no FPU, unaligned
32-bit accesses fault: the ESP32s' stand-in) and real CircuitPython (its limits emulated on the unix port where the
binary is absent); the emulated M55 runs the DSP files (test_dsp_kernels). One test per runtime and file, each file
in a fresh interpreter; a failure on any runtime fails this run. Every file runs on CPython, unix, wasm, the M0, the
Xtensa and CircuitPython; the other emulated cores run the files that are theirs to test (runs_on). A runtime that cannot run
here is skipped with the reason, which the closing summary repeats."""
import json

import pytest

from kvedge_host.boards import runtimes

RUNTIMES = ("unix", "wasm", "m3", "m3-py", "m0", "m7", "xt", "circuitpython")
FILES = runtimes.test_files()
# Every file runs on CPython, the unix and wasm ports, CircuitPython, the Cortex-M0 (the RP2040's stand-in: Thumb-1)
# and the Xtensa lx106 (the ESP32s' stand-in, at the esp32 profile's heap, the smallest of a profile; the files that
# cannot fit it on a larger image: runtimes.LARGER_HEAP). The slowest cases run lean on a board (_support.ON_BOARD).
# A file takes up to a minute or two on an emulated core and tools/test has two cores, so the other emulated cores
# run what is theirs to test:
# - the Cortex-M3 and M7 (Thumb-2: the asm kernels; the M7's DSP kernels and float32 FPU): every file but the
#   cache's own bookkeeping (LOGIC_FILES: positions, tiers, pools, streams, their fuzzers and soak), which runs
#   the same bytecode on every Arm core and no code of the core's own;
# - m3-py (the package as source, compiled on the board): SOURCE_FILES, which import every module of the package
#   (tests/host/test_import_graph.py checks it) and run a model of each pass, a tier and a pool.
LOGIC_FILES = ("test_cache.py", "test_evict.py", "test_cache_refusals.py", "test_tier_durable.py",
               "test_tier_cache_refusals.py", "test_fuzz_cache.py", "test_fuzz_h2o.py", "test_fuzz_plandoc.py",
               "test_fuzz_pool.py", "test_fuzz_stream.py", "test_fuzz_tiered.py", "test_paged.py", "test_soak.py",
               "test_stream.py", "test_tier_spill.py", "test_tier_store.py")
SOURCE_FILES = ("test_budget.py", "test_clock.py", "test_compat.py", "test_evict.py", "test_pass_int.py",
                "test_kernel_select.py", "test_model_generate.py", "test_model_run.py", "test_model_tiered.py",
                "test_paged.py", "test_plandoc_model.py", "test_stream.py", "test_telemetry.py", "test_tier_spill.py",
                "test_pass_ulab.py", "test_w4model.py", "test_decode_interface.py",
                "test_intkernels.py", "test_w4kinds.py", "test_w4convert.py", "test_qkernels_dsp.py", "test_session.py",
                "test_pool_model.py", "test_chat.py")


def runs_on(runtime, name):
    """Whether tools/test runs device file `name` on `runtime` (tools/mprun.py runs any file anywhere)."""
    if runtime in ("m3", "m7"):
        return name not in LOGIC_FILES
    if runtime == "m3-py":
        return name in SOURCE_FILES
    return True


PARAMS = [(r, f) for r in RUNTIMES for f in FILES if runs_on(r, f)]
PROPERTY = "kvedge_device"  # read by tests/conftest.py for the per-runtime summary


@pytest.fixture(scope="session")
def runners():
    """One runner per runtime and test process: the emulated board's qemu is started once and soft-reset
    before each file."""
    made = {}
    yield made
    for r in made.values():
        r.close()


@pytest.mark.parametrize("runtime,name", PARAMS)
def test_device_file_on(runtime, name, runners, request):
    board = runtimes.default_board(runtime)  # rp2040's heap; the M7 stands for the rp2350, the lx106 the esp32
    note = runtimes.describe(runtime, board)
    here = sum(runs_on(runtime, f) for f in FILES)
    if here < len(FILES):
        note += "; %d of %d files here (tests/host/test_runtimes.py says which), all: tools/mprun.py --runtime %s" % (
            here, len(FILES), runtime)
    why = runtimes.missing(runtime, board)
    larger = runtimes.larger_heap(runtime, name)  # a file that cannot fit the board's heap, and why
    if larger and not why and runtime in runtimes.M3:  # its larger-heap image must be here too
        from kvedge_host.boards import m3board
        why = m3board.missing(board, larger[0], runtimes.layout_of(runtime))
    if why:
        request.node.user_properties.append((PROPERTY, json.dumps({"runtime": runtime, "missing": why})))
        pytest.skip("%s: %s" % (runtime, why))
    if runtime not in runners:
        runners[runtime] = runtimes.Files(runtime, board)
    rc, out = runners[runtime].run(name)
    res = runtimes.parse(out, rc, name, {"passed": 0, "failed": 0, "skipped": 0, "lines": []})
    request.node.user_properties.append((PROPERTY, json.dumps(
        {"runtime": runtime, "passed": res["passed"], "failed": res["failed"], "skipped": res["skipped"],
         "skips": [ln.split(": ", 1)[1] if ": " in ln else ln for ln in res["lines"] if ln.startswith("SKIP ")],
         "note": note if runtime in ("circuitpython", "m3", "m3-py", "m0", "m7", "xt") else "",
         "larger": ["%s on the %s-byte image: %s" % (name, format(larger[0], ","), larger[1])] if larger else []})))
    detail = "\n".join(res["lines"][-80:])
    assert res["failed"] == 0, "%s %s: %d failed\n%s" % (runtime, name, res["failed"], detail)
    assert res["passed"] + res["skipped"] > 0, "%s %s: no test ran\n%s" % (runtime, name, detail)
