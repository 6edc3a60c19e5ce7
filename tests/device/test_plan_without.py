# A plan's "without" (kvedge.model.plandoc: the board-side parts it leaves out, the prompt's encoder and the stats
# stream) read by the device: what the runner is told (runplan.doc_args), and every bad field refused naming it
# before anything is allocated; a run told to take its prompt as ids refuses bad ids, and a text prompt it has no
# encoder for, before anything is allocated.
from _plankit import cache as _cache, copy as _copy, plan as _plan, refused as _refused
from kvedge.model.plandoc import ENCODER, LEAN, STATS, encodes, streams_stats, without
from kvedge.model.runplan import doc_args


def _doc(w=None):
    d = _plan("keep", _cache(40), {"kind": "ring"})
    if w is not None:
        d["without"] = w
    return d


def test_without_says_what_the_runner_loads():
    assert LEAN == (ENCODER, STATS)  # the order the planner drops them in
    for w, enc, st in (([], True, True), ([ENCODER], False, True), ([ENCODER, STATS], False, False),
                       ([STATS], True, False), (None, True, True)):
        d = _doc(w)
        assert without(d) == (w or []) and encodes(d) == enc and streams_stats(d) == st, (w, enc, st)
        a = doc_args(d)
        assert a.get("encode", True) == enc, (w, a)
    # a plan made with --no-stats before "without" existed says so in its runtime
    d = _doc()
    d["runtime"] = {"source": "measured", "stats": False}
    assert not streams_stats(d) and encodes(d)


def test_bad_without_fields_are_refused_naming_the_field():
    for bad, field, said in (("encoder", "without", "a list of encoder, stats"),
                             ({"encoder": True}, "without", "a list of encoder, stats"),
                             (["gpu"], "without[0]", "one of encoder, stats"),
                             ([ENCODER, 3], "without[1]", "one of encoder, stats"),
                             ([STATS, STATS], "without[1]", "named once"),
                             ([ENCODER, None], "without[1]", "one of encoder, stats")):
        msg = _refused(_doc(bad), field)
        assert said in msg, (bad, msg)
    d = _doc([STATS])
    d["runtime"] = {"source": "measured", "stats": True}
    assert "runtime.stats" in _refused(d, "without")
    d = _copy(_doc([ENCODER, STATS]))
    without(d)  # taken


def _main_refuses(field, **kw):
    from kvedge.model import run
    try:
        run.main("/nonexistent/model.bin", "/nonexistent/tok.bin", steps=2, **kw)
    except ValueError as e:
        assert str(e).startswith(field), (field, str(e))
        return str(e)
    raise AssertionError("run.main took %r" % (kw,))


def test_bad_ids_and_a_prompt_without_an_encoder_are_refused_before_anything_is_read():
    # the model path does not exist: a refusal must come before the run opens it
    assert "1..65536" in _main_refuses("ids", ids=[])
    assert "integers >= 0" in _main_refuses("ids", ids=[1, -1])
    assert "integers >= 0" in _main_refuses("ids", ids=[1, True])
    assert "integers >= 0" in _main_refuses("ids", ids=[1, 2.0])
    assert "a list" in _main_refuses("ids", ids="1 2")
    assert "one or the other" in _main_refuses("ids", ids=[1, 5], prompt="Once")
    assert "no encoder" in _main_refuses("prompt", prompt="Once", encode=False)
