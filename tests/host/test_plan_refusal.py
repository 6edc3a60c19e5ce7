"""Hostile plan files through the three commands that take one (`kvedge generate --plan`, `kvedge deploy --config`,
`kvedge demo --plan`): a real `kvedge plan --out` document, one field made bad by construction (hypothesis
draws which and how: a wrong type, a list where an object belongs, NaN/inf, a huge or negative int, an unknown
string, a missing key), must be refused by each command with exit 2 and one line that names the file and the
field, before anything runs, in bounded time (the CLI fuzzer's harness: per-case time and memory limits). The
same document unchanged runs (exit 0), so the refusals are the field's doing. And a plan that cannot run with
the model file given (the int8 plan with the f32 checkpoint) is refused before anything is deployed."""
import copy
import json
import os

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from _clifuzz import run_inprocess
from kvedge.model.checkpoint import convert_to_i8
from kvedge_host.boards.tinyckpt import write

NAN, INF = float("nan"), float("inf")
DEL = "<deleted>"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("planrefusal"))
    f32, tok = write(d)
    model = os.path.join(d, "m.i8.bin")
    convert_to_i8(f32, model)
    plan = os.path.join(d, "plan.json")
    r = run_inprocess(["plan", "--model", model, "--board", "rp2040", "--weights-dtype", "i8", "--kv-dtype", "i8",
                       "--align", "0", "--no-tiered", "--out", plan])
    assert r.rc == 0, r.err
    r = run_inprocess(["plan", "--model", model, "--board", "rp2040", "--weights-dtype", "i8", "--kv-dtype", "i8",
                       "--align", "0", "--json"])
    docs = [c for c in json.loads(r.out)["configurations"] if c["kind"] == "tiered"]
    base = json.load(open(plan))
    return {"dir": d, "f32": f32, "model": model, "tok": tok, "plan": plan, "doc": base,
            "tier": docs[0]["tier"] if docs else None}


def commands(f, path):
    port = os.path.join(f["dir"], "no-such-port")
    return [["generate", "--model", f["model"], "--tokenizer", f["tok"], "--plan", path, "--steps", "3"],
            ["deploy", "--port", port, "--board", "rp2040", "--config", path],
            ["demo", "--board", "rp2040", "--plan", path, "--steps", "3"]]


def refused(cmd, path, field):
    r = run_inprocess(cmd)
    assert r.exc is None, (cmd, r.exc)
    assert "Traceback" not in r.err
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert r.rc == 2 and len(lines) == 1, (cmd, r.rc, r.err)
    line = lines[0]
    assert line.startswith("kvedge %s: error: %s: " % (cmd[0], path)), line
    assert field in line, (field, line)
    assert r.seconds < 5, (cmd, r.seconds)


def test_the_plan_unchanged_runs(files):
    r = run_inprocess(commands(files, files["plan"])[0])
    assert r.rc == 0, r.err


# (path in the document, values it must refuse, the field the line names); None in a path = the doc itself
TABLE = [
    (("format",), ["kvedge-plan/99", 1, None, ["kvedge-plan/1"], DEL], "format"),
    (("kind",), ["spaceship", "", 7, ["keep"], {"kind": "keep"}, DEL], "kind"),
    (("cache",), [[1, 2], "i8", 3, None, DEL], "cache"),
    (("cache", "max_tokens"), [0, -5, 10 ** 12, 12.5, "64", True], "cache"),
    (("cache", "dtype"), ["q9", 8, ["i8"]], "cache"),
    (("cache", "align"), [3, -64], "cache"),
    (("weights",), [[], "flash", None, DEL], "weights"),
    (("weights", "place"), ["sd card", 0, DEL], "weights.place"),
    (("heap_bytes",), [1e13, 10 ** 13, -1, "215040", None, DEL], "heap_bytes"),
    (("total_bytes",), [-1, 1.5, DEL, 10 ** 9], "total_bytes"),
    (("workspace_bytes",), [-1, [], DEL], "workspace_bytes"),
    (("budget_bytes",), [-1, "x", 10 ** 9], "budget_bytes"),
    (("policy",), [[], "ring", 3], "policy"),
    (("policy", "kind"), ["lru", 0], "policy.kind"),
    (("forward",), ["warp", 1, ["int"]], "forward"),
    (("kernels",), ["gpu", 0], "kernels"),
    (("tokens_per_s",), [-1, "fast"], "tokens_per_s"),
    (("context",), [0, -1, 10 ** 12, 2], "context"),
]
TIER = [  # on the tiered configuration of the same board
    (("tier", "cold_blocks"), [10 ** 12, 0, -1, 2.0, DEL], "tier.cold_blocks"),
    (("tier", "block"), [-16, 0, 10 ** 6, "16", DEL], "tier.block"),
    (("tier", "cold_dtype"), ["q9", 4, DEL], "tier.cold_dtype"),
    (("tier", "at_cap"), ["explode", 1], "tier.at_cap"),
    (("tier", "cold_align"), [-1, 0.5], "tier.cold_align"),
    (("tier",), [[], None, "tiered"], "tier"),
]


def _set(doc, path, v):
    d = doc
    for k in path[:-1]:
        d = d[k]
    if v == DEL and isinstance(v, str):
        del d[path[-1]]
    else:
        d[path[-1]] = v


def _leaves(x, path=()):
    """Paths of every number in the document."""
    if isinstance(x, dict):
        for k in x:
            yield from _leaves(x[k], path + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, path + (i,))
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield path


def _write(files, doc, name):
    p = os.path.join(files["dir"], name)
    with open(p, "w") as f:
        json.dump(doc, f)  # NaN and Infinity as Python's json writes (and reads) them
    return p


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.sampled_from(TABLE), pick=st.integers(0, 100), cmd=st.integers(0, 2))
@example(row=TABLE[0], pick=0, cmd=0)  # "format": "kvedge-plan/99"
@example(row=TABLE[1], pick=0, cmd=0)  # "kind": "spaceship"
@example(row=TABLE[2], pick=0, cmd=2)  # cache a list
@example(row=TABLE[8], pick=0, cmd=0)  # heap_bytes: 1e13
@example(row=TABLE[8], pick=0, cmd=1)
def test_a_bad_field_is_refused_naming_file_and_field(files, row, pick, cmd):
    path, values, field = row
    doc = copy.deepcopy(files["doc"])
    assume(len(path) == 1 or isinstance(doc.get(path[0]), dict))  # e.g. policy.kind where the plan has one
    _set(doc, path, values[pick % len(values)])
    p = _write(files, doc, "bad.json")
    refused(commands(files, p)[cmd], p, field)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), bad=st.sampled_from([NAN, INF, -INF]), cmd=st.integers(0, 2))
def test_nan_or_inf_anywhere_is_refused_naming_the_field(files, data, bad, cmd):
    doc = copy.deepcopy(files["doc"])
    path = data.draw(st.sampled_from(sorted(_leaves(doc), key=repr)))
    _set(doc, path, bad)
    p = _write(files, doc, "nan.json")
    field = "plan" + "".join(("[%d]" % k) if isinstance(k, int) else "." + k for k in path)
    refused(commands(files, p)[cmd], p, field)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=st.sampled_from(TIER), pick=st.integers(0, 100), cmd=st.integers(0, 2))
@example(row=TIER[0], pick=0, cmd=0)  # tiered cold_blocks: 10**12
@example(row=TIER[1], pick=0, cmd=1)  # block: -16
@example(row=TIER[2], pick=0, cmd=2)  # cold_dtype: "q9"
def test_a_bad_tier_field_is_refused(files, row, pick, cmd):
    if files["tier"] is None:
        pytest.skip("no tiered configuration fits this board")
    doc = tiered_doc(files)
    path, values, field = row
    _set(doc, path, values[pick % len(values)])
    p = _write(files, doc, "badtier.json")
    refused(commands(files, p)[cmd], p, field)


def tiered_doc(files):
    """The board's tiered configuration as its --out document would carry it."""
    r = run_inprocess(["plan", "--model", files["model"], "--board", "rp2040", "--weights-dtype", "i8",
                       "--kv-dtype", "i8", "--align", "0", "--json"])
    c = [c for c in json.loads(r.out)["configurations"] if c["kind"] == "tiered"][0]
    doc = copy.deepcopy(files["doc"])
    for k in ("strategy", "kind", "cache", "kv_bytes", "budget_bytes", "policy", "tier", "h2o_score_bytes",
              "activation_bytes", "workspace_bytes", "total_bytes", "heap_bytes", "tokens_kept", "context", "prefill"):
        doc[k] = c[k]
    return doc


def test_the_tiered_document_itself_is_accepted(files):
    if files["tier"] is None:
        pytest.skip("no tiered configuration fits this board")
    from kvedge.model import plandoc
    doc = tiered_doc(files)
    plandoc.check(doc)  # what the fuzz above mutates is a valid plan


def test_a_plan_for_int8_weights_with_the_f32_file_is_refused_before_deploying(files):
    port = os.path.join(files["dir"], "no-such-port-either")
    open(port, "w").close()  # exists: the command gets past its port check, and must stop at the plan
    for cmd in (["generate", "--model", files["f32"], "--tokenizer", files["tok"], "--plan", files["plan"],
                 "--steps", "3"],
                ["generate", "--port", port, "--model", files["f32"], "--tokenizer", files["tok"], "--plan",
                 files["plan"], "--steps", "3"]):
        refused(cmd, files["plan"], "weights.dtype")


def test_a_plan_for_more_heap_than_the_board_has_is_refused(files):
    doc = copy.deepcopy(files["doc"])
    doc["heap_bytes"] = 215041  # the rp2040 profile's heap is 215,040 bytes
    p = _write(files, doc, "bigheap.json")
    cmds = commands(files, p)
    cmds[0] += ["--board", "rp2040"]
    for cmd in cmds:
        refused(cmd, p, "heap_bytes: the plan is for a 215041-byte heap, this runtime has 215040")
