# A plan document against the model file it is run with (kvedge.model.runplan.plan_args with a model and a
# tokenizer): a plan for another shape, another weights dtype or a pass the file cannot take, or one that counted
# less tokenizer than the run keeps, is refused naming the field. In a file of its own: with the plan fuzzing's
# modules already compiled, the unix port's 215 KB heap has no room left for a model file.
import gc  # the modules plan_args with a model file imports, compiled first, largest first, while the heap is in
from kvedge.model import pass_int  # noqa: F401,E402 (one piece; a 215 KB unix-port heap fragments otherwise)
gc.collect()
from kvedge.model import llama, checkpoint, tiny, tokenizer  # noqa: F401,E402
gc.collect()
from kvedge import kernels  # noqa: E402
kernels.get()  # the kernels plan_args selects (to tell the attention path), compiled before the model's files
gc.collect()
from _plankit import HEAP, cache as _cache, copy as _copy, plan as _plan, refused as _refused
from kvedge.model.runplan import plan_args
from _model_support import tmp_path


def test_a_plan_for_another_model_file_is_refused():
    from _support import need
    need("fs")
    f32 = tmp_path("kvedge_plandoc.bin")
    tiny.write_checkpoint(f32, seed=3)  # 2 layers, 4 heads on 2 KV heads, head_dim 4
    i8 = tmp_path("kvedge_plandoc_i8.bin")
    gc.collect()
    checkpoint.convert_to_i8(f32, i8)
    tok = tmp_path("kvedge_plandoc_tok.bin")
    tiny.write_tokenizer(tok)
    doc = _plan("keep", dict(_cache(40), layers=2, heads=4, kv_heads=2, head_dim=4), {"kind": "ring"}, place="heap")
    a = plan_args(doc, i8, tok, HEAP)  # the plan is for this file: taken
    assert a["kv"]["max_tokens"] == 40 and a["workspace"] < doc["total_bytes"]
    assert "the model file holds f32" in _refused(doc, "weights.dtype", model=f32, tok=tok)
    other = _copy(doc)
    other["cache"]["layers"] = 5
    assert "the plan is for 5, the model file has 2" in _refused(other, "cache.layers", model=i8, tok=tok)
    other = _copy(doc)
    other["cache"]["dtype"] = "f32"
    other["forward"] = "int"
    _refused(other, "forward", model=i8, tok=tok)
    # a plan from the board's measured footprint must have counted this run's tokenizer: 2 bytes an offset
    # (V + 1 of them, the file is under 64 KB), 2 a sorted id once a prompt is encoded (V), 512 for the object
    need = 2 * (352 + 1) + 2 * 352 + 512
    other = _copy(doc)
    other["runtime"] = {"source": "measured", "prompt": True, "tokenizer_bytes": 0}
    assert "counted 0 bytes for the tokenizer, this run's keeps %d" % need in _refused(
        other, "runtime.tokenizer_bytes", model=i8, tok=tok)
    other["runtime"]["tokenizer_bytes"] = need - 1
    _refused(other, "runtime.tokenizer_bytes", model=i8, tok=tok)
    other["runtime"]["tokenizer_bytes"] = need
    plan_args(other, i8, tok, HEAP)
    other["runtime"] = {"source": "measured", "prompt": False, "tokenizer_bytes": need - 2 * 352}
    plan_args(other, i8, tok, HEAP)  # no prompt counted: no sorted ids
    for v in (-1, 1.5, "0", [], 1 << 40):
        other["runtime"]["tokenizer_bytes"] = v
        _refused(other, "runtime.tokenizer_bytes")
