"""The planner fits what it can before it says no: with the full runtime first, then without the board's prompt
encoder (the host encodes the prompt, the board is given token ids), then without the stats stream too.

The heaps are found here, not written down: on a profile built from the esp32's measured footprint at a heap the
test chooses (kvedge plan --heap), the least heap that holds a plan with each runtime is searched for, and the
planner is asked just above and just below each threshold. A plan without the encoder then runs on the emulated
Xtensa lx106 (where ../shared has it) with the prompt encoded on the host and gives the text the same plan gives
with the board's encoder; the host's ids are checked against a plain-Python llama2.c encoder written here."""
import json
import os
import re
import struct

import pytest

from kvedge.model.plandoc import ENCODER, STATS
from kvedge.model.pieces import FileTokenizer
from kvedge_host import cli, profiles
from kvedge_host.plan import account, planner
from kvedge_host.paths import SHARED_MODELS

STORIES = os.path.join(SHARED_MODELS, "stories260K.bin")
TOK512 = os.path.join(SHARED_MODELS, "tok512.bin")
PROMPT = "Once upon a time, there was a little dog"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The project's own tiny model and tokenizer (no ../shared needed)."""
    from kvedge_host.boards.tinyckpt import write
    return write(str(tmp_path_factory.mktemp("lean") / "tiny"))


def _plan(model, tok, heap, **kw):
    spec, context, tgt = planner.inputs(model, board="esp32", heap=heap, weights_dtype="i8")
    return planner.plan(spec, context, tgt, kv_dtype="i8", weights_dtype="i8", align=0, tiered=False, model=model,
                        tokenizer=tok, quality=False, **kw)


def _fits(model, tok, heap, **kw):
    try:
        return _plan(model, tok, heap, **kw).chosen is not None
    except planner.NothingFits:
        return False


def _least_heap(model, tok, **kw):
    """The least heap (bytes) at which a plan with this runtime fits: fits() grows with the heap."""
    lo, hi = 1024, 1 << 20
    assert not _fits(model, tok, lo, **kw) and _fits(model, tok, hi, **kw)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _fits(model, tok, mid, **kw):
            hi = mid
        else:
            lo = mid
    return hi


def test_the_planner_drops_the_encoder_first_and_the_stats_stream_only_when_still_short(tiny):
    model, tok = tiny
    fp = profiles.load("esp32")["footprint"]
    full = _least_heap(model, tok, lean=False)
    no_enc = _least_heap(model, tok, lean=False, encoder=False)
    bare = _least_heap(model, tok, lean=False, encoder=False, stats=False)
    assert bare < no_enc < full, (bare, no_enc, full)
    # each gap is the part's measured bytes, in heap bytes (the usable heap is the heap less the GC's tables)
    vocab = planner.inputs(model)[0].vocab
    enc = fp["encode_bytes"] + FileTokenizer.nbytes(tok, vocab, True) - FileTokenizer.nbytes(tok, vocab, False)
    scale = fp["heap_usable"] / fp["heap_image"]
    assert abs((full - no_enc) * scale - enc) <= 4, (full - no_enc, enc)
    assert abs((no_enc - bare) * scale - fp["telemetry_bytes"]) <= 4, (no_enc - bare, fp["telemetry_bytes"])

    p = _plan(model, tok, full)  # a plan that fits with both keeps both
    assert p.document["without"] == [] and "lean" not in p.result and p.document["runtime"]["encode_bytes"] > 0
    assert p.document["runtime"]["stats"]
    p = _plan(model, tok, full - 1)  # one byte short: the encoder goes, the stats stream stays
    assert p.document["without"] == [ENCODER] and p.document["runtime"]["stats"], p.document["without"]
    assert p.document["runtime"]["encode_bytes"] == 0 and p.result["lean"]["saved_bytes"] == {ENCODER: enc}
    assert p.result["notes"][0].startswith("left out to fit: the board's prompt encoder"), p.result["notes"][0]
    p = _plan(model, tok, no_enc)
    assert p.document["without"] == [ENCODER]
    p = _plan(model, tok, no_enc - 1)  # still short without the encoder: the stats stream goes too
    assert p.document["without"] == [ENCODER, STATS] and not p.document["runtime"]["stats"]
    assert p.result["lean"]["saved_bytes"] == {ENCODER: enc, STATS: fp["telemetry_bytes"]}
    assert "without the prompt's encoder still nothing does" in p.result["lean"]["why"]
    assert _plan(model, tok, bare).document["without"] == [ENCODER, STATS]
    assert not _fits(model, tok, bare - 1)  # and below that nothing fits at all
    # no prompt: no encoder to drop, the stats stream is the one part left out
    p = _plan(model, tok, no_enc - 1, prompt=False)
    assert p.chosen is not None and p.document["without"] == [STATS]


def test_kvedge_plan_says_what_it_left_out_and_why(tiny, tmp_path, capsys):
    model, tok = tiny
    full = _least_heap(model, tok, lean=False)
    out = str(tmp_path / "plan.json")
    code = cli.main(["plan", "--model", model, "--tokenizer", tok, "--board", "esp32", "--heap", str(full - 1),
                     "--weights-dtype", "i8", "--kv-dtype", "i8", "--align", "0", "--no-tiered", "--out", out])
    text = " ".join(capsys.readouterr().out.split())
    assert code == 0, text
    m = re.search(r"note: left out to fit: the board's prompt encoder \([^)]*\), ([\d,]+) bytes; why: with the full "
                  r"runtime nothing fits", text)
    assert m and int(m.group(1).replace(",", "")) > 0, text
    with open(out) as f:
        doc = json.load(f)
    assert doc["without"] == [ENCODER]
    # --no-encoder asks for the same plan at a heap where the encoder would fit
    code = cli.main(["plan", "--model", model, "--tokenizer", tok, "--board", "esp32", "--heap", str(full),
                     "--weights-dtype", "i8", "--kv-dtype", "i8", "--align", "0", "--no-tiered", "--no-encoder",
                     "--out", out])
    capsys.readouterr()
    with open(out) as f:
        assert code == 0 and json.load(f)["without"] == [ENCODER]


def _ref_encode(path, text):
    """llama2.c's encode() written plainly: the vocabulary read from the file, a leading space, each UTF-8 character
    its piece (else its bytes as <0xXX>, ids 3 + byte), then the best-scoring merge while one exists; BOS first."""
    with open(path, "rb") as f:
        data = f.read()
    pos, pieces, scores = 4, [], []
    while pos < len(data):
        score, n = struct.unpack_from("<fi", data, pos)
        pieces.append(data[pos + 8:pos + 8 + n])
        scores.append(score)
        pos += 8 + n
    ids_of = {p: i for i, p in enumerate(pieces)}
    ids = []
    for ch in " " + text:
        b = ch.encode("utf-8")
        ids += [ids_of[b]] if b in ids_of else [3 + x for x in b]
    while True:
        best = None
        for i in range(len(ids) - 1):
            j = ids_of.get(pieces[ids[i]] + pieces[ids[i + 1]])
            if j is not None and (best is None or scores[j] > scores[best[1]]):
                best = (i, j)
        if best is None:
            return [1] + ids
        ids[best[0]:best[0] + 2] = [best[1]]


def _xt_why(board, heap):
    from kvedge_host.boards import m3board
    why = m3board.standing_in(board, heap)
    if why:
        return "the Xtensa lx106 stand-in: %s" % why
    return m3board.missing(board, heap, m3board.layout_for(board, heap))


@pytest.mark.skipif(not os.path.exists(STORIES), reason="../shared/models/stories260K.bin is absent")
def test_a_plan_without_the_encoder_runs_on_the_board_with_the_prompt_encoded_on_the_host(tmp_path, capsys):
    from kvedge.model.checkpoint import convert_to_i8
    from kvedge.model.runplan import prompt_args
    from kvedge_host.boards import planrun
    heap = profiles.load("esp32s3")["heap_bytes"]
    why = _xt_why("esp32s3", heap)
    if why:
        pytest.skip(why)
    # the host's ids: the same encoder the board runs (CPython runs the device package), checked against llama2.c's
    # algorithm written out above
    ref = _ref_encode(TOK512, PROMPT)
    assert prompt_args({"without": [ENCODER]}, PROMPT, TOK512, 512) == {"prompt": "", "ids": ref}
    assert prompt_args({"without": []}, PROMPT, TOK512, 512) == {"prompt": PROMPT}
    weights = str(tmp_path / "model.i8.bin")
    convert_to_i8(STORIES, weights)
    spec, context, tgt = planner.inputs(STORIES, board="esp32s3", weights_dtype="i8")
    args = dict(kv_dtype="i8", weights_dtype="i8", align=0, tiered=False, model=STORIES, tokenizer=TOK512,
                quality=False, lean=False)
    with_enc = planner.plan(spec, context, tgt, **args).document
    own = planner.plan(spec, context, tgt, encoder=False, **args).document
    assert with_enc["without"] == [] and own["without"] == [ENCODER]
    assert own["tokens_kept"] >= with_enc["tokens_kept"] and own["total_bytes"] <= own["heap_bytes"]
    # the same plan without the encoder: its cache, pass and kernels, its total less the encoder's measured bytes
    # and the tokenizer's sorted ids (what the planner's own plan without it counts less)
    rt = with_enc["runtime"]
    saved = rt["encode_bytes"] + rt["tokenizer_bytes"] - own["runtime"]["tokenizer_bytes"]
    assert own["runtime"]["encode_bytes"] == 0 and saved > rt["encode_bytes"] > 0
    lean = json.loads(json.dumps(with_enc))
    lean["without"] = [ENCODER]
    lean["runtime"].update(encode_bytes=0, tokenizer_bytes=own["runtime"]["tokenizer_bytes"])
    for k in ("total_bytes", "workspace_bytes"):
        lean[k] -= saved
    lean["headroom_bytes"] += saved
    steps = len(ref) + 12
    assert min(with_enc["tokens_kept"], lean["tokens_kept"]) >= steps
    texts = []
    for doc in (with_enc, lean):
        kw = planrun.runner_args(doc, steps, 0, PROMPT, model=weights, tokenizer=TOK512)
        assert ("ids" in kw) == (doc is lean) and kw.get("ids", ref) == ref
        s, out = planrun.run_on_m3("esp32s3", doc, weights, TOK512, steps, prompt=PROMPT)
        assert s is not None, out[-3000:]
        assert s["plan_total"] == doc["total_bytes"] and s["heap_top"] <= doc["total_bytes"], (s, doc["total_bytes"])
        assert s["tokens"] == steps, s
        texts.append(out[:out.index("#KVEDGE")].strip())
    assert texts[0].startswith(PROMPT) and len(texts[0]) > len(PROMPT) + 10, texts[0]
    assert texts[1] == texts[0], texts


def _lean_doc(tmp_path, without):
    from kvedge_host.boards.tinyckpt import write
    model, tok = write(str(tmp_path / "tiny"))
    doc = _plan(model, tok, 1 << 20, lean=False, encoder=ENCODER not in without, stats=STATS not in without).document
    assert doc["without"] == without
    path = str(tmp_path / "plan.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def test_deploy_leaves_off_the_modules_of_the_parts_a_plan_leaves_out(tmp_path):
    from kvedge_host.boards.deploy import deployment
    for without, gone in (([], set()), ([ENCODER], {"kvedge/model/bpe.py"}),
                          ([ENCODER, STATS], {"kvedge/model/bpe.py", "kvedge/telemetry.py"})):
        path = _lean_doc(tmp_path, without)
        sent = {remote for _, remote in deployment("esp32", str(tmp_path), config=path)}
        every = {remote for _, remote in deployment("esp32", str(tmp_path))}
        assert every - sent == gone and "kvedge_plan.json" in sent, (without, every - sent)


def test_kvedge_monitor_says_a_plan_has_no_stats_stream(tmp_path, capsys):
    from kvedge_host.boards.monitor import Monitor
    path = _lean_doc(tmp_path, [ENCODER, STATS])
    port = str(tmp_path / "no-port-yet")
    assert cli.main(["monitor", "--port", port, "--wait", "--plan", path]) == 0
    out = capsys.readouterr().out
    assert "plan.json: the plan has no stats stream (without: encoder, stats)" in out, out
    # without --plan: a run that ends before any stats line ends the watch, said (no sample to wait for)
    notes = []
    m = Monitor(on_note=notes.append)
    m.line("Once upon a time")
    assert not m.no_stream
    m.line('#KVEDGE {"tokens":6}')
    assert m.no_stream and "without a stats stream" in notes[-1], notes
