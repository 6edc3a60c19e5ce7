# The forward pass on a small checkpoint the test writes itself (seeded, same bytes on every runtime),
# compared with an independent plain-Python forward; int8 weights, streaming, budget refusal, heap use.
import gc
from array import array

from _support import need, raises
from _model_support import RefAttention, PlainForward, tiny_checkpoints, tmp_path, skip
from kvedge import compat
from kvedge.errors import BudgetError
from kvedge.model import checkpoint, header
from kvedge.model.llama import Llama, plan, cache_config, object_bytes

_PATHS = {}


def _files():
    need("fs")
    if not _PATHS:
        # compile the kernels (from .py on the unix port: a large transient) while the heap is in one piece:
        # writing the checkpoints below leaves it fragmented into blocks of a few KB
        from kvedge import kernels
        kernels.get()
        # small enough for a 215 KB heap: GQA 4 heads on 2 KV heads, a 48-token vocabulary
        tiny_checkpoints(_PATHS, "kvedge_tiny")
    return _PATHS


def _model(which="f32", **kw):
    kv = kw.pop("kv", {"align": 0, "max_tokens": 16})
    return Llama(_files()[which], kv=kv, attention=RefAttention, **kw)


def _close(a, b, tol):
    worst = 0.0
    for i in range(len(b)):
        d = abs(a[i] - b[i]) / (1.0 + abs(b[i]))
        if d > worst:
            worst = d
    assert worst < tol, worst


def test_f32_logits_match_plain_reference():
    m = _model()
    ref = PlainForward(_files()["f32"])
    for tok in (1, 40, 30, 7, 7, 29):
        _close(m.forward(tok), ref.forward(tok), 1e-4)
    assert m.cache.n_seen == 6
    m.close()
    ref.f.close()


def test_int8_weights_close_to_f32_and_streaming_is_identical():
    a = _model("f32")
    b = _model("i8")
    c = _model("i8", stream=True)
    assert b.wdtype == "i8" and c.w.stream
    for tok in (1, 40, 30, 7):
        la = list(a.forward(tok))
        lb = list(b.forward(tok))
        lc = list(c.forward(tok))
        assert lb == lc  # the same int8 kernels on the same codes: bit-identical
        _close(lb, la, 0.25)  # a random tiny model is harsher on int8 than a trained one
    for m in (a, b, c):
        m.close()


def test_f32_streaming_matches_in_ram():
    a = _model("f32")
    b = _model("f32", stream=True)
    for tok in (1, 30, 5):
        assert list(a.forward(tok)) == list(b.forward(tok))
    a.close()
    b.close()


def test_streamed_int8_weights_hold_one_norm_and_one_chunk():
    # weights left on flash keep in RAM one f32 norm vector, one row buffer and that chunk's per-row scales, shared
    # by every matrix: their lengths are kvedge.budget's streaming formula (kept per matrix, the scales would cost
    # 4 bytes a row: 14 KB for stories260K, more than the rest together; all the norms, 2.8 KB)
    from kvedge import budget
    from kvedge.model import sizes as msizes
    cfg, wd = header.read_config(_files()["i8"])
    w = checkpoint.Weights(_files()["i8"], stream=True)
    widest, narrowest = max(cfg.dim, cfg.hidden_dim), min(cfg.dim, cfg.hidden_dim)
    assert len(w.scratch) == msizes.STREAM_ROWS * widest
    assert len(w.scales) == len(w.scratch) // narrowest
    assert len(w.nbuf) == cfg.dim and all(isinstance(o, int) for o in w.rms_att + w.rms_ffn + [w.rms_final])
    assert header.resident_bytes(cfg, wd, stream=True) == 4 * len(w.nbuf) + len(w.scratch) + 4 * len(w.scales)
    # each norm read when applied is the file's: the same values as the weights held in RAM
    held = checkpoint.Weights(_files()["i8"])
    for l in range(cfg.n_layers):
        assert list(w.norm(w.rms_att[l])) == list(held.rms_att[l])
        assert list(w.norm(w.rms_ffn[l])) == list(held.rms_ffn[l])
    assert list(w.norm(w.rms_final)) == list(held.rms_final) and held.norm(held.rms_final) is held.rms_final
    held.close()
    matrices = [w.embedding] + [m for name, _, _ in cfg.matrices() for m in getattr(w, name)]
    assert all(not hasattr(m, "scales") and not hasattr(m, "codes") for m in matrices)
    w.close()


def test_budget_refused_before_allocating():
    cfg, wd = header.read_config(_files()["f32"])
    ccfg = cache_config(cfg, {"align": 0, "max_tokens": 16})
    p = plan(cfg, wd, ccfg, workspace=1000)
    assert p["total"] == p["weights"] + p["kv"] + p["activations"] + p["workspace"]
    assert p["workspace"] == 1000 + object_bytes(cfg, ccfg)
    # a 32-bit board's objects are about half a 64-bit port's; the host plans a board with word=4
    assert object_bytes(cfg, ccfg, 32, 4) < object_bytes(cfg, ccfg, 32, 8)
    assert plan(cfg, wd, ccfg, workspace=1000, word=4)["total"] == p["total"] - object_bytes(cfg, ccfg) + \
        object_bytes(cfg, ccfg, 32, 4)
    # the same check without building anything: what a caller runs before allocating other things first
    from kvedge.model.llama import check
    e = raises(BudgetError, check, _files()["f32"], {"align": 0, "max_tokens": 16}, p["total"] - 1, 1000)
    assert e.need == p["total"]
    assert check(_files()["f32"], {"align": 0, "max_tokens": 16}, p["total"], 1000)[3] == p
    before = compat.mem_alloc()
    e = raises(BudgetError, _model, budget=p["total"] - 1, workspace=1000)
    assert e.need == p["total"] and e.budget == p["total"] - 1
    if before >= 0:
        gc.collect()
        assert compat.mem_alloc() - before < 4096  # nothing large was allocated
    m = _model(budget=p["total"], workspace=1000)  # exactly enough is enough
    m.close()
    raises(ValueError, cache_config, cfg, {"layers": 3})


def test_heap_of_the_run_stays_within_plan():
    need("mem_alloc")
    import sys
    if sys.platform == "webassembly":
        skip("the wasm port's gc.mem_alloc() does not settle after gc.collect()")
    f = _files()
    gc.collect()
    before = compat.mem_alloc()
    m = _model(workspace=0)
    for tok in (1, 40, 30):
        m.forward(tok)
    gc.collect()
    used = compat.mem_alloc() - before
    # the plan covers weights, the arena, buffers and the Python objects around them
    assert used <= m.plan["total"], (used, m.plan)
    m.close()
    del f


def test_window_cache_runs_past_its_slots():
    m = _model(kv={"align": 0, "max_tokens": 8, "window": 4, "sinks": 1})
    for i in range(12):
        m.forward(1 + i)
    assert m.cache.n_seen == 12 and m.cache.n_cached == 5
    m.close()


def test_bad_checkpoints_and_tokens_are_refused_precisely():
    f = _files()
    bad = tmp_path("kvedge_tiny_bad.bin")
    with open(f["f32"], "rb") as src:
        head = src.read(4000)
    with open(bad, "wb") as out:
        out.write(head)  # a truncated file: the header promises more
    e = raises(header.CheckpointError, Llama, bad, {"align": 0, "max_tokens": 4}, None, 0, False, 32,
               RefAttention)
    assert "the header needs" in str(e)
    with open(bad, "wb") as out:
        out.write(b"KVW8" + b"\x07\x00\x00\x00" + head[:28])
    e = raises(header.CheckpointError, header.read_config, bad)
    assert "version 7" in str(e)
    raises(header.CheckpointError, checkpoint.convert_to_i8, f["i8"], bad)
    del head, e
    gc.collect()  # the refusals' garbage gone before the model's buffers are allocated (a 215 KB heap)
    m = _model()
    m.forward(1)
    raises(ValueError, m.forward, 48)  # outside the 48-token vocabulary
    raises(ValueError, m.forward, -1)
    assert m.cache.n_seen == 1  # nothing happened
    m.close()
