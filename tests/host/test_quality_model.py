"""A quality table says which model it was measured on, and a plan that ranks by it warns when it plans another
(issue 24 item 5): `kvedge eval --json` records the model's name and shape; `kvedge plan --quality FILE` prints one
warning line (and the JSON document's notes carry it) when the table's shape is not the planned model's, or when
the table does not say. The shipped stories260K table is stories260K's."""
import json

from _boardkit import kvedge

WARN = "warning: the quality table "


def _plan(*args):
    p = kvedge("plan", "--board", "rp2040", "--weights-dtype", "i8", "--json", *args)
    assert p.returncode in (0, 1), p.stderr[-1500:]
    return [n for n in json.loads(p.stdout)["notes"] if n.startswith(WARN)]


def test_eval_records_the_model_and_a_plan_of_another_model_warns(tmp_path):
    from kvedge_host.boards.tinyckpt import write
    model, _ = write(str(tmp_path / "tiny"))
    table = str(tmp_path / "q.json")
    e = kvedge("eval", "--model", model, "--json", "--samples", "1", "--tokens", "24", "--window", "8", "--texts",
               "sampled")
    assert e.returncode == 0, e.stderr[-1500:]
    with open(table, "w") as f:
        f.write(e.stdout)
    doc = json.loads(e.stdout)
    # kvedge.model.tiny's default shape: 2 layers, 4 heads, 2 KV heads, head_dim 16 / 4, 352 tokens, dim 16, hidden 40
    assert doc["model"] == "tiny.bin" and doc["shape"] == [2, 4, 2, 4, 352, 16, 40], (doc["model"], doc["shape"])
    assert _plan("--model", model, "--quality", table) == []  # its own model: no warning
    other = _plan("--preset", "stories260k", "--quality", table)
    assert len(other) == 1 and "measured on tiny.bin" in other[0] and "2, 4, 2, 4, 352, 16, 40" in other[0], other
    p = kvedge("plan", "--board", "rp2040", "--weights-dtype", "i8", "--preset", "stories260k", "--quality", table)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(WARN)]
    assert len(lines) == 1, p.stdout[-2000:]  # printed once, where a user reads the plan


def test_the_shipped_table_is_stories260ks_and_a_bare_table_says_nothing_of_its_model(tmp_path):
    from kvedge_host.plan.planquality import DEFAULT_QUALITY
    assert _plan("--preset", "stories260k", "--quality", DEFAULT_QUALITY) == []
    w = _plan("--preset", "stories15m", "--quality", DEFAULT_QUALITY)
    assert len(w) == 1 and "measured on stories260K" in w[0], w
    bare = str(tmp_path / "bare.json")
    with open(bare, "w") as f:
        json.dump([{"strategy": "f32", "kl": 0.0}, {"strategy": "i8", "kl": 0.01}], f)
    w = _plan("--preset", "stories260k", "--quality", bare)
    assert len(w) == 1 and "does not say which model" in w[0], w
