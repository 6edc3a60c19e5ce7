"""The main job end to end on a virtual rp2040 (the unix port, --sim host; the emulated Cortex-M3 on every profile
is tests/host/test_demo_boards.py): plan, deploy, generate on the board, monitor, summary."""
import csv
import os
import re

import pytest

from kvedge_host.paths import SHARED_MODELS

from _boardkit import kvedge

STORIES = os.path.join(SHARED_MODELS, "stories260K.bin")


def _summary(out):
    m = re.search(r"tokens \(prompt \+ generated\)\s*│\s*(\d+) \((\d+) generated[;)]", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def test_demo_with_a_model_it_writes_itself(tmp_path):
    p = kvedge("demo", "--sim", "host", "--tiny", "--plain", "--steps", "40", "--workdir", tmp_path, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr
    assert "a small random llama2.c model written here (--tiny)" in p.stdout
    assert _summary(p.stdout)[1] == 40
    with open(tmp_path / "stats.csv") as f:
        seqs = [int(r["seq"]) for r in csv.DictReader(f)]
    assert seqs and seqs == list(range(1, len(seqs) + 1))  # every stats line arrived, once


@pytest.mark.skipif(not os.path.exists(STORIES), reason="../shared/models/stories260K.bin is absent")
def test_demo_generates_the_known_story_on_an_rp2040_heap(tmp_path):
    p = kvedge("demo", "--sim", "host", "--plain", "--steps", "120", "--workdir", tmp_path, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr
    assert "Once upon a time, there was a little girl named Lily. She loved to play outside in the park." in p.stdout
    assert "heap 215,040 bytes" in p.stdout
    # the runner's own account fits the board's heap, and the cache it chose evicted to stay inside it
    rounds = re.findall(r"= ([\d,]+) bytes for a 215,040-byte heap", p.stdout)
    assert rounds and int(rounds[-1].replace(",", "")) <= 215040
    assert re.search(r"evictions\s*│\s*[1-9]", p.stdout)
    # what was planned is what the board built (a tiered plan ran as a sinks cache: the runner call has no tier),
    # and the planning command echoed is the one run (the cache dtype included)
    assert "as planned" in p.stdout and "NOT AS PLANNED" not in p.stdout, p.stdout[-2000:]
    assert "--kv-dtype i8 --align 0 --no-tiered --workspace" in p.stdout
    # a healthy run of a cache that evicts ends with no alert (it said "cache at 100.0% of its 36800 bytes")
    assert re.search(r"│ alerts\s*│\s*none\s*│", p.stdout), p.stdout[-2000:]


def test_a_heap_the_unix_port_cannot_load_the_runner_in_is_one_line(tmp_path):
    # esp32's 102,400 bytes on the unix port (the fallback without ../shared's emulated Cortex-M3): the runner's
    # 64-bit code alone does not fit; refused in one line that says where it runs, not mpremote's raw MemoryError
    p = kvedge("demo", "--sim", "host", "--board", "esp32", "--tiny", "--plain", "--steps", "6", "--workdir",
               tmp_path, timeout=600)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "the esp32 profile's 102,400-byte heap cannot load the runner's code" in lines[0], \
        p.stderr
    assert "mpremote failed" not in p.stderr and "board built" not in p.stdout


def test_a_circuitpython_profile_without_its_interpreter_is_one_line(tmp_path):
    # the CircuitPython profile's virtual board is CircuitPython: without it the demo is refused before it starts
    # (it used to say "the MicroPython unix port instead", then fail on the missing CircuitPython binary)
    from kvedge_host.boards import runtimes
    if runtimes.circuitpython_bin() is not None:
        pytest.skip("CircuitPython is here: the demo runs on it (test_demo_boards)")
    p = kvedge("demo", "--board", "rp2040-circuitpython", "--tiny", "--plain", "--steps", "6", "--workdir", tmp_path)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr
    assert p.stderr.strip().splitlines() == [
        "kvedge demo: error: the rp2040-circuitpython demo runs on CircuitPython: no interpreter in "
        "../shared/runtimes/circuitpython-unix32 (a board of your own: kvedge deploy --drive, docs/boards.md)"]
    assert "unix port" not in p.stdout


def test_a_run_shorter_than_its_steps_says_why():
    # --steps 700 on stories260K stopped at 368 without a word: the model's end of text, or a keep-all cache full
    from kvedge_host.plan.runaccount import stopped_early
    window = {"kind": "window", "cache": {"max_tokens": 92, "window": 92}}
    keep = {"kind": "keep", "cache": {"max_tokens": 128}}
    assert stopped_early({"tokens": 256}, window, 256) is None
    assert stopped_early({"tokens": 368}, window, 700) == \
        "--steps 700: stopped at 368, where the model ended its text (BOS)"
    assert stopped_early({"tokens": 128}, keep, 700) == "--steps 700: stopped at 128, the cache is full (128 tokens)"


@pytest.mark.parametrize("board, extra", [("rp2040", {}), ("esp32s3", {"kind": "h2o"})])
def test_the_account_table_rows_add_up_to_the_plan_and_the_heap(board, extra):
    # the demo's account: named rows whose sum is shown; the parts are the plan's own fields, summed here
    from kvedge_host.plan import planner
    from kvedge_host.plan.runaccount import account_rows
    spec, context, tgt = planner.inputs(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples",
                                                     "stories260K.json"), board=board, weights_dtype="i8")
    doc = planner.plan(spec, context, tgt, kv_dtype="i8", weights_dtype="i8", align=0, tiered=False,
                       **extra).document
    board_says = {"plan_total": doc["total_bytes"] - 100, "heap_top": doc["total_bytes"] - 2000}
    rows = {name: n for name, n, _ in account_rows(board_says, doc)}
    parts = ["weights in RAM", "KV cache", "activations", "runtime and workspace"] + (
        ["H2O scores"] if doc["h2o_score_bytes"] else [])
    assert sum(rows[p] for p in parts) == rows["= plan total"] == doc["total_bytes"]
    assert rows["= plan total"] + rows["+ headroom"] == rows["= heap"] == doc["heap_bytes"]
    assert rows["board's measured peak"] == doc["total_bytes"] - 2000
    assert ("H2O scores" in rows) == (doc["kind"] == "h2o")
