"""K and V in formats of their own (issue 45 item 5) on the host: `kvedge eval` measures the split formats the planner
offers (planquality.SPLITS), each row's config builds the cache it names and its arena is the formula's; a quality
table reads them as full caches named K/V with their residual; the planner offers them where they fit and, ranked by
the shipped stories260K table, chooses one over every shared format on a heap where it fits."""
import json

from kvedge.kvsplit import from_dict
from kvedge_host.plan import planquality
from kvedge_host.plan.planquality import SPLITS, split_name

from _boardkit import kvedge
from test_plan import plan as _json  # kvedge plan --json


def test_eval_measures_every_split_format(tmp_path):
    from kvedge_host.boards.tinyckpt import write
    model, _ = write(str(tmp_path / "tiny"))
    e = kvedge("eval", "--model", model, "--json", "--samples", "1", "--tokens", "24", "--window", "8", "--texts",
               "sampled", "--only", "k i8", "--only", "k i4", "--only", "k f16")
    assert e.returncode == 0, e.stderr[-1500:]
    rows = json.loads(e.stdout)["quality"]["rows"]
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {"f32"} | {split_name(*s) for s in SPLITS}, sorted(by_name)
    for k, v, per_channel in SPLITS:
        r = by_name[split_name(k, v, per_channel)]
        cfg = from_dict(r["config"])  # the config a device builds from the row
        assert (cfg.k_dtype, cfg.v_dtype, cfg.residual > 0) == (k, v, per_channel), r["config"]
        assert r["config"]["dtype"] == "%s/%s" % (k, v)
        assert r["arena_bytes"] == cfg.nbytes()  # the arena the row ran on is its formula's
        assert r["kl"] >= 0 and r["ppl"] >= 1 and 0 <= r["top1"] <= 1
    table = tmp_path / "q.json"
    table.write_text(e.stdout)
    q = {r["label"]: r for r in planquality.load_quality(str(table))}
    for k, v, per_channel in SPLITS:
        row = q[split_name(k, v, per_channel)]
        assert row["kind"] == "keep" and row["dtype"] == "%s/%s" % (k, v), row
        assert row["residual"] == (32 if per_channel else 0), row


def _split_rows():
    return {r["label"]: r for r in planquality.load_quality(planquality.DEFAULT_QUALITY)
            if planquality.is_split(r["dtype"])}


def test_the_shipped_table_has_every_split_format():
    rows = _split_rows()
    assert set(rows) == {split_name(*s) for s in SPLITS}, sorted(rows)
    assert all("kl" in r["metrics"] and "ppl" in r["metrics"] for r in rows.values())


def test_a_split_format_is_chosen_where_it_fits_and_measures_best(capsys):
    # on a flat heap (no measured runtime: the float pass, which reads split caches) that fits the best-measured
    # split format's full cache but not f32's, f16's or any better-measured shared one, the plan chooses the split
    base = ["--preset", "stories260k", "--weights-dtype", "i8", "--align", "0", "--no-tiered", "--kind", "keep",
            "--objective", "quality"]
    wide = _json(capsys, *(base + ["--heap", "4000000", "--top", "99"]))
    keep = {c["strategy"]: c for c in wide["configurations"]}
    splits = [c for c in keep.values() if "/" in c["cache"]["dtype"]]
    assert {c["strategy"].rsplit(",", 1)[0] for c in splits} == {split_name(*s) for s in SPLITS}
    for c in splits:
        assert c["forward"] == "float" and c["quality"] and c["quality"]["label"] in _split_rows()
        assert c["kv_bytes"] == from_dict(c["cache"]).nbytes()
    cost = planquality.quality_cost
    best = min(splits, key=lambda c: (cost(c["quality"]), c["total_bytes"]))
    # the heap: the best split's total; every shared keep-all that measures better must need more
    better_shared = [c for c in keep.values() if "/" not in c["cache"]["dtype"] and c["quality"]
                     and cost(c["quality"]) <= cost(best["quality"])]
    assert better_shared and all(c["total_bytes"] > best["total_bytes"] for c in better_shared), (
        best["strategy"], [(c["strategy"], c["total_bytes"]) for c in better_shared])
    r = _json(capsys, *(base + ["--heap", str(best["total_bytes"])]))
    chosen = r["configurations"][0]
    assert chosen["strategy"] == best["strategy"], [c["strategy"] for c in r["configurations"]]
    assert chosen["cache"]["k_dtype"] != chosen["cache"]["v_dtype"] or chosen["cache"]["residual"]


def test_no_split_is_offered_on_the_integer_pass(capsys):
    # the integer pass reads i8 caches only (kvedge.model.pass_int refuses a split when built): a board whose
    # measured runtime is that pass's, with room to keep all 512 tokens in PSRAM, is offered no split
    r = _json(capsys, "--preset", "stories260k", "--board", "rp2350-psram8", "--weights-dtype", "i8", "--kind", "keep",
              "--top", "99")
    assert r["configurations"] and r["runtime"]["forward"] == "int"
    assert all("/" not in c["cache"]["dtype"] and c["forward"] == "int" for c in r["configurations"]), [
        (c["strategy"], c["forward"]) for c in r["configurations"]]
