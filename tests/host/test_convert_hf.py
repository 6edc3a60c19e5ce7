"""`kvedge convert` on Hugging Face Llama folders the project writes itself (random weights, GQA, head_dim 8,
safetensors single, sharded, f16 and bf16; tied and untied embeddings), run by the device's runner and compared
with tests/host/_hfmodels.py's numpy forward pass of the Hugging Face layout (rotate_half RoPE), which shares no
code with the converter.

Tolerances: the f32 file against the reference on the weights as stored (f16/bf16 rounded): 1e-4 absolute
(logits up to ~20; measured 2.7e-6 on these models, worst 4.4e-6 in trial runs). The int8 file (per-row int8
rows of those weights): within 8 % of the largest reference logit (measured 2.8 %, worst 5.7 % in trial runs,
an f16 source), teacher-forced on the reference's tokens; greedy tokens from BOS equal on these seeded models
(24 tokens)."""
import json
import os

import numpy as np
import pytest

import _hfmodels as hm
from kvedge_host.cli import main as cli

STEPS = 24


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def model(request, tmp_path_factory):
    return hm.seeded(request, tmp_path_factory, {False: 12, True: 11}, "hf")


@pytest.mark.parametrize("layout", ["single", "sharded", "f16", "bf16"])
def test_hf_folder_f32_file_matches_the_hf_reference(model, layout):
    cfg, t, tmp = model
    folder = str(tmp / layout)
    stored = dict(t)
    if layout == "bf16":
        os.makedirs(folder, exist_ok=True)
        json.dump(dict(cfg, torch_dtype="bfloat16"), open(os.path.join(folder, "config.json"), "w"))
        hm.write_bf16_safetensors(os.path.join(folder, "model.safetensors"), t)
        stored = {k: hm.bf16_round(v)[0] for k, v in t.items()}
    else:
        hm.write_hf(folder, t, cfg, shards=3 if layout == "sharded" else 1,
                    dtype=np.float16 if layout == "f16" else np.float32)
        if layout == "f16":
            stored = {k: v.astype(np.float16).astype(np.float32) for k, v in t.items()}
    toks, ref = hm.reference_greedy(stored, cfg, STEPS)
    out = hm.convert(folder, str(tmp / (layout + ".f32.bin")), "f32")
    got, logits = hm.device_run(out, STEPS, toks)
    assert got == toks
    assert np.abs(logits - ref).max() < 1e-4


def test_hf_folder_int8_file_within_its_tolerance(model):
    cfg, t, tmp = model
    folder = hm.write_hf(str(tmp / "i8src"), t, cfg)
    toks, ref = hm.reference_greedy(t, cfg, STEPS)
    got, logits = hm.device_run(hm.convert(folder, str(tmp / "m.i8.bin"), "i8"), STEPS, toks)
    assert got == toks
    assert np.abs(logits - ref).max() < 0.08 * np.abs(ref).max()


def test_without_the_rope_permutation_the_device_would_be_wrong(model):
    # the check above can fail: a folder whose q/k rows are already interleaved (no permutation needed) is
    # a different model for the reference, and the device's logits are far from it
    cfg, t, tmp = model
    bad = dict(t)
    for k in t:
        if "q_proj" in k:
            bad[k] = hm.hf_to_meta(t[k], cfg["num_attention_heads"])
        if "k_proj" in k:
            bad[k] = hm.hf_to_meta(t[k], cfg["num_key_value_heads"])
    folder = hm.write_hf(str(tmp / "perm"), bad, cfg)
    toks, ref = hm.reference_greedy(t, cfg, STEPS)
    _, logits = hm.device_run(hm.convert(folder, str(tmp / "perm.f32.bin"), "f32"), STEPS, toks)
    assert np.abs(logits - ref).max() > 0.05


@pytest.mark.parametrize("dtype", ["f32", "i8"])
def test_hf_folder_on_the_unix_port(model, dtype):
    from kvedge_host.boards import runtimes
    if runtimes.missing("unix"):
        pytest.skip(runtimes.missing("unix"))
    cfg, t, tmp = model
    folder = hm.write_hf(str(tmp / ("unix" + dtype)), t, cfg, shards=2)
    toks, ref = hm.reference_greedy(t, cfg, STEPS)
    got, logits = hm.device_run_on("unix", hm.convert(folder, str(tmp / ("u.%s.bin" % dtype)), dtype), STEPS, toks)
    assert got == toks
    assert np.abs(logits - ref).max() < (1e-4 if dtype == "f32" else 0.08 * np.abs(ref).max())


# ---- hostile folders: one line naming the file, exit 2, nothing written ----


@pytest.fixture()
def folder(tmp_path):
    cfg = hm.config()
    t = hm.tensors(cfg, seed=3)
    return hm.write_hf(str(tmp_path / "m"), t, cfg), cfg, t, tmp_path


def test_unknown_architecture_and_unsupported_config(folder, capsys):
    f, cfg, t, tmp = folder
    for change, words in (({"architectures": ["GPT2LMHeadModel"]}, "architecture GPT2LMHeadModel is not supported"),
                          ({"architectures": "llama"}, "architectures is"),
                          ({"rope_theta": 500000.0}, "rope_theta 500000.0 is not supported"),
                          ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
                          ({"hidden_act": "gelu"}, "hidden_act"),
                          ({"partial_rotary_factor": 0.5}, "partial_rotary_factor 0.5"),
                          ({"attention_bias": True}, "attention_bias"),
                          ({"head_dim": 16}, "head_dim 16"),
                          ({"num_key_value_heads": 3}, "not a multiple of 3 KV heads")):
        json.dump(dict(cfg, **change), open(os.path.join(f, "config.json"), "w"))
        hm.refused(capsys, f, str(tmp / "o.bin"), "config.json", words)


def test_truncated_safetensors(folder, capsys):
    f, cfg, t, tmp = folder
    p = os.path.join(f, "model.safetensors")
    raw = open(p, "rb").read()
    for cut in (len(raw) - 5, 100, 6):
        open(p, "wb").write(raw[:cut])
        hm.refused(capsys, f, str(tmp / "o.bin"), "model.safetensors", "truncated or malformed safetensors")


def test_wrong_shape_missing_tensor_and_type(folder, capsys):
    from safetensors.numpy import save_file
    f, cfg, t, tmp = folder
    p = os.path.join(f, "model.safetensors")
    bad = dict(t)
    bad["model.layers.1.self_attn.k_proj.weight"] = t["model.layers.1.self_attn.k_proj.weight"][:8]
    save_file(bad, p)
    hm.refused(capsys, f, str(tmp / "o.bin"), "model.layers.1.self_attn.k_proj.weight has shape [8, 32], "
                                            "expected [16, 32]")
    bad = dict(t)
    del bad["lm_head.weight"]  # untied: the classifier is needed
    save_file(bad, p)
    hm.refused(capsys, f, str(tmp / "o.bin"), "missing tensor lm_head.weight")
    bad = dict(t)
    bad["model.norm.weight"] = t["model.norm.weight"].astype(np.int32)
    save_file(bad, p)
    hm.refused(capsys, f, str(tmp / "o.bin"), "model.norm.weight has type I32")
    bad = dict(t)
    bad["model.norm.weight"] = t["model.norm.weight"].copy()
    bad["model.norm.weight"][3] = np.nan
    save_file(bad, p)
    hm.refused(capsys, f, str(tmp / "o.bin"), "rms_final holds NaN")


def test_sharded_index_problems(folder, capsys):
    f, cfg, t, tmp = folder
    g = hm.write_hf(str(tmp / "sh"), t, cfg, shards=2)
    idx = os.path.join(g, "model.safetensors.index.json")
    doc = json.load(open(idx))
    os.unlink(os.path.join(g, "model-00002-of-00002.safetensors"))
    hm.refused(capsys, g, str(tmp / "o.bin"), "model-00002-of-00002.safetensors: no such shard")
    hm.write_hf(g, t, cfg, shards=2)
    del doc["weight_map"]["model.norm.weight"]
    json.dump(doc, open(idx, "w"))
    hm.refused(capsys, g, str(tmp / "o.bin"), "missing tensor model.norm.weight")
    doc["weight_map"] = ["x"]
    json.dump(doc, open(idx, "w"))
    hm.refused(capsys, g, str(tmp / "o.bin"), "weight_map")


def test_no_weights_and_no_tokenizer(folder, capsys):
    f, cfg, t, tmp = folder
    out = str(tmp / "w.i8.bin")
    assert cli(["convert", f, "-o", out]) == 0
    printed = capsys.readouterr().out
    assert "no tokenizer with %s: weights only" % f in printed and os.path.exists(out)
    os.unlink(os.path.join(f, "model.safetensors"))
    hm.refused(capsys, f, str(tmp / "o.bin"), "no model.safetensors")


def test_the_model_page_commands_run(tmp_path, capfdbinary):
    """docs/model.md's "Bring your own model" block, run on files written here in the names it uses: a Hugging
    Face folder with a sentencepiece tokenizer (400 tokens), a Q8_0 GGUF and an export.py version 2 file."""
    import re
    import shlex
    import sentencepiece as spm
    from kvedge_host.paths import ROOT
    text = open(os.path.join(ROOT, "docs", "model.md")).read()
    block = re.search(r"## Bring your own model.*?```sh\n(.*?)```", text, re.S).group(1)
    cmds = [ln for ln in block.splitlines() if ln.startswith("kvedge ")]
    assert len(cmds) == 4
    cfg = hm.config(vocab=400)
    t = hm.tensors(cfg, seed=8)
    folder = hm.write_hf(str(tmp_path / "path" / "to" / "my-llama"), t, cfg)
    corpus = [open(p).read() for p in sorted(__import__("glob").glob(os.path.join(ROOT, "tests", "corpus", "*.txt")))]
    spm.SentencePieceTrainer.train(sentence_iterator=iter("\n".join(corpus).splitlines()),
                                   model_prefix=os.path.join(folder, "tokenizer"), model_type="bpe", vocab_size=400,
                                   byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    hm.write_gguf(str(tmp_path / "my-llama.Q8_0.gguf"), t, cfg, "Q8_0")
    hm.write_ak42(str(tmp_path / "stories15M_q80.bin"), t, cfg, 2)
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        for cmd in cmds:
            assert cli(shlex.split(cmd)[1:]) == 0, cmd
    finally:
        os.chdir(here)
    out = capfdbinary.readouterr().out.decode("utf-8", "replace")  # random weights: any bytes
    assert "tokenizer: path/to/my-llama/tokenizer.model (sentencepiece model, 400 tokens)" in out
    assert "no tokenizer with my-llama.Q8_0.gguf: weights only" in out
    assert out.count(" -> ") >= 4 and "Once upon a time" in out


@pytest.mark.parametrize("dtype", ["f32", "i8"])
def test_hf_folder_on_the_emulated_cortex_m3(tmp_path, dtype):
    """The 32-bit board (float32 arithmetic, 31-bit small ints): the package as .mpy on the emulated Cortex-M3's
    2 MiB image; measured worst 1.2e-5 for the f32 file (tolerance 1e-4, as on CPython)."""
    from kvedge_host.boards import m3board
    why = m3board.missing("rp2040", 2097152)
    if why:
        pytest.skip(why)
    cfg = hm.config()
    t = hm.tensors(cfg, seed=12)
    folder = hm.write_hf(str(tmp_path / "src"), t, cfg)
    os.makedirs(tmp_path / "out")
    out = hm.convert(folder, str(tmp_path / "out" / ("m.%s.bin" % dtype)), dtype)
    toks, ref = hm.reference_greedy(t, cfg, STEPS)
    got, logits = hm.device_run_on("m3", out, STEPS, toks, heap=2097152)
    assert got == toks
    assert np.abs(logits - ref).max() < (1e-4 if dtype == "f32" else 0.08 * np.abs(ref).max())
