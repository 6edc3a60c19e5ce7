"""`kvedge check`: seeded attention cases on CPython, the unix port and the wasm port agree with numpy, and a
wrong GQA head mapping in the reference is caught (trap 1, docs/architecture.md)."""
import json
import os
import subprocess
import sys

import numpy as np

from kvedge_host.cli import cmd_check
from kvedge_host.ref import numref
from kvedge_host.paths import ROOT


def _kvedge(*args):
    p = subprocess.run([sys.executable, "-m", "kvedge_host.cli", "check"] + list(args), cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT + "/host", ROOT + "/device"])))
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_check_passes_on_every_runtime():
    rc, out, err = _kvedge("--runtime", "all", "--json")
    rows = json.loads(out)
    bad = [r for r in rows if not r["ok"]]
    assert rc == 0 and not bad, (rc, bad, err[-2000:])
    seen = {(r["runtime"], r["path"]) for r in rows}
    for rt in ("cpython", "unix", "wasm"):
        assert (rt, "float") in seen and (rt, "int plain") in seen, seen
    assert ("unix", "int viper") in seen and ("unix", "int native") in seen
    # every dtype and GQA ratio 1, 2, 4, 8 and MQA is covered
    assert {r["dtype"] for r in rows} == {"f32", "f16", "i8", "i4", "i2"}
    names = {r["case"] for r in rows}
    for part in ("mha-", "gqa2-", "gqa4-", "gqa8-", "mqa-"):
        assert any(n.startswith(part) for n in names), part
    # the tiered cache (hot ring + cold blocks read back from flash): f32 exact, i4/i8 cold on both paths
    tiered = [r for r in rows if r["case"].startswith("tiered-")]
    for rt in ("cpython", "unix", "wasm"):
        got = {("-".join(r["case"].rsplit("-", 2)[1:]), r["path"]) for r in tiered if r["runtime"] == rt}
        assert {("f32-f32", "float"), ("f32-i4", "float"), ("i8-i4", "int plain"), ("i8-i8", "int plain")} <= got
    assert max(r["rel_err"] for r in tiered if r["case"].endswith("f32-f32")) <= 1e-5


def test_check_tiered_cases_on_circuitpython():
    """`kvedge check --runtime circuitpython`: the tiered cases (and the rest) on real CircuitPython (its unix
    emulation on the MicroPython unix port where the binary is absent)."""
    from kvedge_host.boards import runtimes
    try:
        runtimes.micropython_bin()
    except runtimes.RuntimeMissing as e:
        import pytest
        pytest.skip(str(e))
    cases = [c for c in cmd_check.standard_cases(1) if c["name"].startswith("tiered-")]
    rows = cmd_check.check_runtime("circuitpython", cases)
    assert rows and not [r for r in rows if not r["ok"]], rows
    got = {("-".join(r["case"].rsplit("-", 2)[1:]), r["path"]) for r in rows}
    assert {("f32-f32", "float"), ("f32-i4", "float"), ("i8-i4", "int plain"), ("i8-i8", "int plain")} <= got
    assert max(r["rel_err"] for r in rows if r["case"].endswith("f32-f32")) <= 1e-5


def test_wrong_head_mapping_fails_the_check():
    rc, out, err = _kvedge("--runtime", "cpython", "--wrong-mapping", "--only", "gqa4")
    assert rc == 1, (rc, out[-2000:], err[-2000:])
    assert "FAIL" in out
    # the comparison itself: a correct output against a wrong-mapping reference fails, against the right one passes
    c = [c for c in cmd_check.standard_cases(1) if c["name"].startswith("gqa8-") and c["dtype"] == "f32"][0]
    rec = [r for r in cmd_check.parse_output(*cmd_check.run_script("cpython", cmd_check.device_script([c])))
           if r.get("path") == "float"][0]
    assert cmd_check.compare(c, rec, cmd_check.reference(c))["ok"]
    wrong = cmd_check.compare(c, rec, cmd_check.reference(c, wrong_mapping=True))
    assert not wrong["ok"] and wrong["rel_err"] > 0.05, wrong


def test_numref_against_a_loop_reference():
    rng = np.random.default_rng(3)
    H, KVH, D, T = 8, 2, 8, 11
    q, K, V = rng.normal(size=(H, D)), rng.normal(size=(T, KVH, D)), rng.normal(size=(T, KVH, D))
    out = numref.attention(q, K, V, H, KVH)
    for h in range(H):
        kv = h // (H // KVH)
        s = np.array([q[h] @ K[t, kv] for t in range(T)]) / np.sqrt(D)
        w = np.exp(s - s.max())
        assert np.allclose(out[h], (w / w.sum()) @ V[:, kv], rtol=1e-12, atol=1e-12)
    assert list(numref.gqa_mapping(8, 2)) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert list(numref.live_positions(10, 4, 2)) == [0, 1, 6, 7, 8, 9]
    assert list(numref.live_positions(3, 4, 2)) == [0, 1, 2]
    assert list(numref.live_positions(5)) == [0, 1, 2, 3, 4]
    # a tiered cache, against a step-by-step model: the ring sends its oldest block to flash when a position
    # finds its slot taken, flash keeps the newest C blocks
    for n, W, S, B, C in ((30, 8, 2, 4, 3), (10, 8, 2, 4, 3), (11, 8, 2, 4, 3), (200, 16, 0, 8, 5), (57, 12, 4, 4, 9)):
        ring, cold = [], []
        for p in range(n):
            if p >= S and len(ring) == W:
                cold.append(ring[:B])
                ring = ring[B:]
                cold = cold[-C:]
            if p >= S:
                ring.append(p)
        want = list(range(min(S, n))) + [x for b in cold for x in b] + ring
        assert list(numref.tiered_live_positions(n, W, S, B, C)) == want, (n, W, S, B, C)


def test_device_errors_and_crashes_are_failures():
    rows = cmd_check.parse_output(1, '{"case":"x","error":"ValueError: boom"}\nTraceback...')
    assert rows[0]["error"] == "ValueError: boom"
    assert "before finishing" in rows[-1]["error"]


def test_check_on_a_virtual_board_through_mpremote(tmp_path):
    # --port: the device script runs on a board (here `kvedge sim`'s unix-port board) through mpremote
    from kvedge_host.boards.sim import VirtualBoard
    vb = VirtualBoard("unix", fs=str(tmp_path / "fs"))
    vb.start()
    try:
        p = subprocess.run([sys.executable, "-m", "kvedge_host.cli", "deploy", "--port", vb.port, "--board", "unix",
                            "-q"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT + "/host", ROOT + "/device"])))
        assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
        rc, out, err = _kvedge("--port", vb.port, "--only", "gqa8", "--json")
        rows = json.loads(out)
        assert rc == 0 and rows and all(r["ok"] for r in rows), (rc, out[-2000:], err[-2000:])
        assert {r["path"] for r in rows} >= {"float", "int viper", "int native", "int plain"}
    finally:
        vb.stop()


def test_check_model_case_logits_match_numpy(tmp_path, capsys):
    # the model case on a model the test writes: device forward pass vs kvedge_host.ref.llama_ref at every position
    from kvedge_host import cli
    from kvedge_host.cli import cmd_check
    from kvedge_host.boards import tinyckpt
    model, _ = tinyckpt.write(str(tmp_path))
    for rt in ("cpython", "unix"):
        rows = cmd_check.check_model(rt, model, 24, "f32")
        assert len(rows) == 1 and rows[0]["ok"], rows
        assert rows[0]["max_abs_err"] <= 1e-4
    # the comparison can fail: a second model's logits are not the first's
    other, _ = tinyckpt.write(str(tmp_path / "other"), seed=2)
    ref_rows = cmd_check.check_model("cpython", model, 8, "f32")
    assert ref_rows[0]["ok"]
    import numpy as np
    from kvedge_host.ref import llama_ref
    toks = cmd_check.model_tokens(llama_ref.RefModel(model).cfg.vocab_size, 8, 1)
    a = np.array([llama_ref.RefModel(model).forward(t) for t in toks][:1])
    b = np.array([llama_ref.RefModel(other).forward(t) for t in toks][:1])
    assert np.abs(a - b).max() > 1e-2
    assert cli.main(["check", "--only", "gqa4-h8kv2-d64-w32s8-f32", "--model", model, "--positions", "16"]) == 0
    assert "model:tiny.bin x16 positions" in capsys.readouterr().out
