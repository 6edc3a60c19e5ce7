"""A pool plan is true (issue 45 item 2: the pool's accounting in the plan): `kvedge plan --sessions 3
--shared-prompt 16` for stories260K on the rp2040 records a pool whose blocks and bytes are the formulas written out
here, whose byte rows sum to its total, and whose conversations, run by the board's runner (kvedge.model.runpool:
the prompt fed once, three forks each sampling with its own seed), give each the tokens of a separate single-session
run of the plain runner with a cache of its own (the independent reference): on CPython, on the unix port (its heap
peak within the run's account and the plan's total) and once on the emulated Cortex-M3 at the rp2040's
heap (the board's peak within the plan's total). Bad flag values: one line, exit 2."""
import json
import os
import subprocess
import sys

import pytest

from kvedge.model.checkpoint import convert_to_i8
from kvedge_host.boards import footprint, planrun, runtimes
from kvedge_host.paths import DEVICE, SHARED_MODELS
from kvedge_host.plan import planner

STORIES = os.path.join(SHARED_MODELS, "stories260K.bin")
TOK512 = os.path.join(SHARED_MODELS, "tok512.bin")
have_stories = pytest.mark.skipif(not os.path.exists(STORIES), reason="../shared/models/stories260K.bin is absent")
M3_WHY = footprint.missing("rp2040")
PROMPT = "Once upon a time, there was a little girl named Lily."  # 16 ids with BOS: the shared prompt, whole
POOL = {"sessions": 3, "block": 16, "shared_prompt": 16}
TEMPERATURE, SEED = 0.8, 7


def _plan():
    spec, context, tgt = planner.inputs(STORIES, board="rp2040", weights_dtype="i8")
    p = planner.plan(spec, context, tgt, kv_dtype="i8", weights_dtype="i8", align=0, tiered=False, model=STORIES,
                     tokenizer=TOK512, quality=False, pool=dict(POOL))
    assert p.document is not None, p.result["notes"]
    return p.document


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    if not os.path.exists(STORIES):
        pytest.skip("../shared/models/stories260K.bin is absent")
    weights = str(tmp_path_factory.mktemp("pool") / "model.i8.bin")
    convert_to_i8(STORIES, weights)
    return _plan(), weights


ROW = {"f32": 4 * 8, "f16": 2 * 8, "i8": 8 + 2}  # an unpadded row of head_dim 8: floats, halves, codes + f16 scale


def _pool_by_hand(T, dtype, N=3, B=16, P=16, layers=5, kv_heads=4):
    """The pool's figures from its definition (docs/pool.md): the prompt's blocks once, then each conversation's
    blocks past the prompt's whole ones; a block holds B rows (ROW) of K and V per layer and KV head; the bookkeeping
    is a table of T/B entries and 5 ints a handle, the slot list of one attention step, 2 bytes a handle and 4 a
    block."""
    blocks = -(-P // B) + N * (T // B - P // B)
    handles = N + 1
    arena = blocks * 2 * layers * kv_heads * B * ROW[dtype]
    meta = 4 * (handles * (T // B) + 5 * handles + (T // B) * B) + 2 * handles + 4 * blocks
    return blocks, handles, arena, meta


@have_stories
def test_the_plan_records_the_pool_and_its_bytes_are_the_formulas(planned):
    doc, _ = planned
    p = doc["pool"]
    T = p["tokens"]
    assert T % 16 == 0 and 16 < T <= 512 and doc["tokens_kept"] == T == doc["context"]
    dt = doc["cache"]["dtype"]
    assert doc["cache"]["align"] == 0  # the planner offers unpadded rows beside padded ones: these fit
    blocks, handles, arena, meta = _pool_by_hand(T, dt)
    assert (p["sessions"], p["block"], p["shared_prompt"]) == (3, 16, 16)
    assert (p["blocks"], p["handles"], p["arena_bytes"], p["meta_bytes"]) == (blocks, handles, arena, meta)
    assert doc["kv_bytes"] == arena and doc["cache"]["max_tokens"] == blocks * 16 and doc["kind"] == "keep"
    # the byte rows sum to the total: weights held, the pool's arena and bookkeeping, activations, the runtime
    # (its objects counted there)
    assert doc["total_bytes"] == (doc["weights"]["heap_bytes"] + doc["kv_bytes"] + p["meta_bytes"] +
                                  doc["activation_bytes"] + doc["workspace_bytes"])
    assert p["objects_bytes"] > 0 and doc["total_bytes"] <= doc["heap_bytes"]
    assert doc["without"] == ["stats"] and doc["prefill"] == 1  # a pool's run has no stats stream, no chunks
    # the longest context per session: one more block each does not fit the plan's limit
    rt = doc["runtime"]
    limit = rt["usable_heap"] - rt["margin_bytes"]
    more = _pool_by_hand(T + 16, dt)
    grow = (more[2] - arena) + (more[3] - meta) + 3 * 2 * 16  # arena, bookkeeping, the sampled ids' arrays
    assert doc["total_bytes"] + grow > limit or more[2] > rt["largest_block_bytes"] - rt["margin_bytes"]


def _split(out):
    """(the prompt's text, [each conversation's text], the summary) of a pool run's output."""
    text, _, tail = out.partition("\n#KVEDGE ")
    parts = text.split("\n[")
    conv = []
    for i, part in enumerate(parts[1:], 1):
        head = "%d] " % i
        assert part.startswith(head), part
        conv.append(part[len(head):])
    return parts[0], conv, json.loads(tail.splitlines()[0])


def _printed(fn, *args, **kw):
    """What a device runner writes (pieces to stdout.buffer, its summary with print()), as text."""
    import io
    buf = io.BytesIO()
    real, wrap = sys.stdout, io.TextIOWrapper(buf, encoding="utf-8")
    sys.stdout = wrap
    try:
        fn(*args, **kw)
        wrap.flush()
    finally:
        sys.stdout = real
    text = buf.getvalue().decode("utf-8")
    wrap.detach()
    return text


def _reference(weights, args, T):
    """Each conversation alone: the plain runner, a cache of its own (T slots), the conversation's seed."""
    from kvedge.model import run
    return [_printed(run.main, weights, TOK512, prompt=PROMPT, steps=T, temperature=TEMPERATURE, seed=SEED + k,
                     kv={"dtype": args["kv"]["dtype"], "align": 0, "max_tokens": T}, forward=args["forward"],
                     int_attention=args["int_attention"], stream=args["stream"]).partition("\n#KVEDGE ")[0]
            for k in range(POOL["sessions"])]


@pytest.fixture(scope="module")
def cpython_run(planned):
    from kvedge.model import runpool
    from kvedge.model.runplan import plan_args, run_args
    doc, weights = planned
    args = plan_args(doc, weights, TOK512)
    kw = run_args(args)
    return args, kw, _printed(runpool.main, weights, TOK512, prompt=PROMPT, steps=doc["pool"]["tokens"],
                              temperature=TEMPERATURE, seed=SEED, **kw)


@have_stories
def test_the_plans_conversations_on_cpython_are_each_a_separate_run(planned, cpython_run):
    doc, weights = planned
    args, _, out = cpython_run
    T = doc["pool"]["tokens"]
    head, conv, s = _split(out)
    assert s["sessions"] == 3 and s["kind"] == "pool" and s["reclaims"] == 0
    # every conversation ran to the plan's context: the pool then holds the plan's blocks, all of them
    assert s["per_session"] == [T - 16 + 1] * 3 and s["blocks_held"] == s["blocks_total"] == doc["pool"]["blocks"]
    ref = _reference(weights, args, T)
    assert len(set(ref)) == 3  # three seeds, three stories
    assert [head + c for c in conv] == ref
    assert head == PROMPT


@have_stories
def test_a_run_the_plans_pool_does_not_hold_is_refused_before_it_starts(planned):
    from kvedge.model import runpool
    from kvedge.model.runplan import plan_args, run_args
    doc, weights = planned
    kw = run_args(plan_args(doc, weights, TOK512))
    T = doc["pool"]["tokens"]
    for prompt, steps, word in (("Once upon a time", T, "prompt"),  # 5 ids: each fork copies the prompt's block
                                (PROMPT, T + 1, "steps"), (PROMPT, 16, "steps"),
                                (PROMPT + " She liked red.", T, "prompt")):  # longer than the shared prompt
        with pytest.raises(ValueError) as e:
            runpool.main(weights, TOK512, prompt=prompt, steps=steps, **kw)
        assert str(e.value).startswith(word), str(e.value)


@have_stories
def test_the_plans_conversations_on_the_unix_port_match_and_hold_the_plan(planned, cpython_run):
    why = runtimes.missing("unix")
    if why:
        pytest.skip("unix port: %s" % why)
    doc, weights = planned
    _, kw, out = cpython_run
    kw = dict(kw, peak=True)
    code = "from kvedge.model import runpool\nrunpool.main(%r, %r, prompt=%r, steps=%d, temperature=%r, seed=%d, " \
           "**%r)\n" % (weights, TOK512, PROMPT, doc["pool"]["tokens"], TEMPERATURE, SEED, kw)
    rc, got = runtimes.run_code("unix", code, 8 << 20, [DEVICE, os.path.dirname(weights), SHARED_MODELS])
    assert rc == 0, got[-3000:]
    head, conv, s = _split(got)
    assert (head, conv) == _split(out)[:2]
    # the 64-bit port's own account differs from the board's by its kernels (viper here: a plain plan's run
    # differs alike); its peak is within both
    assert 0 < s["heap_peak"] <= min(s["plan_total"], doc["total_bytes"]), (s, doc["total_bytes"])


@pytest.mark.skipif(M3_WHY is not None, reason="emulated Cortex-M3: %s" % M3_WHY)
@have_stories
def test_the_plans_conversations_on_the_emulated_rp2040_hold_its_total(planned, cpython_run):
    doc, weights = planned
    s, out = planrun.run_on_m3("rp2040", doc, weights, TOK512, doc["pool"]["tokens"], prompt=PROMPT,
                               temperature=TEMPERATURE, seed=SEED)
    assert s is not None, out[-3000:]
    assert s["plan_total"] == doc["total_bytes"], (s["plan_total"], doc["total_bytes"])
    assert s["heap_top"] <= doc["total_bytes"], (s["heap_top"], doc["total_bytes"])
    assert s["kernels"] == doc["runtime"]["kernels"] and s["forward"] == doc["forward"]
    print("emulated rp2040: heap_top %d of the plan's %d bytes" % (s["heap_top"], doc["total_bytes"]))
    head, conv, _ = _split(out[out.index(PROMPT[:10]):].replace("\r\n", "\n"))  # the serial line's ends
    # the reference on the same board: each conversation alone, the plain runner with a cache of its own (the
    # board's float pass rounds as the board does, not as CPython: its texts are compared with its own)
    from kvedge.config import CacheConfig
    T = doc["pool"]["tokens"]
    one = json.loads(json.dumps(doc))
    del one["pool"]
    one["cache"]["max_tokens"] = T
    one["kv_bytes"] = CacheConfig.from_dict(one["cache"]).nbytes()
    one["context"] = T
    for k in range(POOL["sessions"]):
        r, ref = planrun.run_on_m3("rp2040", one, weights, TOK512, T, prompt=PROMPT, temperature=TEMPERATURE,
                                   seed=SEED + k)
        assert r is not None and r["kind"] == "keep", ref[-3000:]
        assert head + conv[k] == ref[ref.index(PROMPT[:10]):ref.index("#KVEDGE")].replace("\r\n", "\n").rstrip(
            "\n"), (k, conv[k], ref)


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(DEVICE, "..", "host"), DEVICE]))
    return subprocess.run([sys.executable, "-m", "kvedge_host.cli"] + list(args), capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.parametrize("flags,said", [
    (("--sessions", "0"), "--sessions must be positive"),
    (("--sessions", "2", "--block", "24"), "--block 24: does not divide the context 512"),
    (("--sessions", "2", "--shared-prompt", "600"), "--shared-prompt 600: longer than --context 512"),
    (("--sessions", "2", "--shared-prompt", "512"), "--shared-prompt 512: leaves the sessions no token"),
    (("--shared-prompt", "16"), "--shared-prompt needs --sessions"),
    (("--sessions", "2", "--kv-dtype", "i4"), "a pool plans f32, f16 or i8 blocks"),
])
def test_bad_pool_flags_print_one_line_and_exit_2(flags, said):
    r = _cli("plan", "--preset", "stories260K", "--board", "rp2040", *flags)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in r.stderr, lines


def test_a_board_whose_footprint_has_no_pool_figure_says_so():
    # the pool's code is counted from the board's measured footprint (footprint.pool_KIND): where it was not
    # measured no pool plan is made, and the one line says how to measure it
    from kvedge_host import profiles
    names = [n for n in profiles.names() if (profiles.load(n).get("footprint") or {}) and
             not any(k.startswith("pool_") for k in profiles.load(n)["footprint"])]
    if not names:
        pytest.skip("every profile's footprint has the pool's figure")
    r = _cli("plan", "--preset", "stories260K", "--board", names[0], "--sessions", "2")
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.strip() == ("nothing fits %s as a pool: its footprint has no measured figure for the pool's code "
                                "(kvedge.paged, kvedge.pooled, kvedge.model.runpool): kvedge footprint --board %s "
                                "--write" % (names[0], names[0])), r.stdout

