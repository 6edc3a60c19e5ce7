"""`kvedge convert` on GGUF llama files the project writes with gguf's writer (llama.cpp's interleaved q/k order,
written by tests/host/_hfmodels.py's own copy of its permutation; F32, F16, Q8_0, Q4_0, Q5_1 tensors), run by the
device's runner against the numpy forward pass of the Hugging Face layout (rotate_half) on the weights as the
file stores them (quantized and dequantized by gguf.quants, then back to Hugging Face's order).

Tolerances: the f32 file 1e-4 absolute against that reference (the device computes in f32). What the
quantization itself costs, the reference on the stored weights against the float one (measured on these
two models, stated, not a target): F16 0.2 %, Q8_0 4.5 %, Q5_1 17.5 %, Q4_0 51.5 % of the largest logit. The int8 file of a Q8_0 or F32 source: within 8 % of
the largest logit."""
import os

import numpy as np
import pytest

import _hfmodels as hm
from kvedge_host.cli import main as cli

STEPS = 24


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def model(request, tmp_path_factory):
    return hm.seeded(request, tmp_path_factory, {False: 22, True: 21}, "gguf")


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0", "Q4_0", "Q5_1"])
def test_gguf_f32_file_matches_the_reference_of_what_it_stores(model, qtype):
    cfg, t, tmp = model
    src = hm.write_gguf(str(tmp / ("m_%s.gguf" % qtype)), t, cfg, qtype)
    stored = hm.as_stored_gguf(t, cfg, qtype)
    toks, ref = hm.reference_greedy(stored, cfg, STEPS)
    got, logits = hm.device_run(hm.convert(src, str(tmp / ("m_%s.f32.bin" % qtype))), STEPS, toks)
    assert got == toks
    assert np.abs(logits - ref).max() < 1e-4


@pytest.mark.parametrize("qtype", ["F32", "Q8_0"])
def test_gguf_int8_file_within_its_tolerance(model, qtype):
    cfg, t, tmp = model
    src = hm.write_gguf(str(tmp / ("i_%s.gguf" % qtype)), t, cfg, qtype)
    toks, ref = hm.reference_greedy(hm.as_stored_gguf(t, cfg, qtype), cfg, STEPS)
    _, logits = hm.device_run(hm.convert(src, str(tmp / ("i_%s.i8.bin" % qtype)), "i8"), STEPS, toks)
    assert np.abs(logits - ref).max() < 0.08 * np.abs(ref).max()


def test_gguf_on_the_unix_port(model):
    from kvedge_host.boards import runtimes
    if runtimes.missing("unix"):
        pytest.skip(runtimes.missing("unix"))
    cfg, t, tmp = model
    src = hm.write_gguf(str(tmp / "u.gguf"), t, cfg, "Q4_0")
    toks, ref = hm.reference_greedy(hm.as_stored_gguf(t, cfg, "Q4_0"), cfg, STEPS)
    got, logits = hm.device_run_on("unix", hm.convert(src, str(tmp / "u.f32.bin")), STEPS, toks)
    assert got == toks
    assert np.abs(logits - ref).max() < 1e-4


# ---- hostile files ----


def test_truncated_gguf(model, tmp_path, capsys):
    cfg, t, _ = model
    src = hm.write_gguf(str(tmp_path / "t.gguf"), t, cfg, "Q8_0")
    raw = open(src, "rb").read()
    for cut in (len(raw) - 7, len(raw) // 2, 200, 30, 10):
        p = tmp_path / ("cut%d.gguf" % cut)
        p.write_bytes(raw[:cut])
        hm.refused(capsys, str(p), str(tmp_path / "o.bin"), str(p), "truncated or malformed GGUF")


def test_unknown_architecture_shape_and_missing(model, tmp_path, capsys):
    cfg, t, _ = model
    p = hm.write_gguf(str(tmp_path / "a.gguf"), t, cfg, arch="qwen2")
    hm.refused(capsys, p, str(tmp_path / "o.bin"), p, "architecture qwen2 is not supported")
    bad = dict(t)
    bad["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"][:, :16].copy()
    p = hm.write_gguf(str(tmp_path / "s.gguf"), bad, cfg)
    hm.refused(capsys, p, str(tmp_path / "o.bin"), "blk.0.ffn_up.weight has shape [64, 16], expected [64, 32]")
    p = hm.write_gguf(str(tmp_path / "m.gguf"), t, cfg, drop=("blk.1.attn_v.weight",))
    hm.refused(capsys, p, str(tmp_path / "o.bin"), "missing tensor blk.1.attn_v.weight")


def test_unsupported_tensor_type_and_rope(model, tmp_path, capsys):
    import gguf
    cfg, t, _ = model
    p = str(tmp_path / "i8.gguf")
    w = gguf.GGUFWriter(p, "llama")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(64)
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(10000.0)
    for name, a in hm.meta_tensors(t, cfg).items():
        w.add_tensor(name, (a * 10).astype(np.int8) if name == "blk.0.attn_q.weight" else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    hm.refused(capsys, p, str(tmp_path / "o.bin"), "blk.0.attn_q.weight has type I8 (supported: F32, F16")
    c2 = dict(cfg, rope_theta=1e6)
    p = hm.write_gguf(str(tmp_path / "r.gguf"), t, c2)
    hm.refused(capsys, p, str(tmp_path / "o.bin"), "freq_base 1000000.0 is not supported")


def test_gguf_on_the_emulated_cortex_m3(tmp_path):
    """A Q4_0 GGUF's f32 file on the 32-bit board (float32 arithmetic), the package as .mpy, 2 MiB image."""
    from kvedge_host.boards import m3board
    why = m3board.missing("rp2040", 2097152)
    if why:
        pytest.skip(why)
    cfg = hm.config()
    t = hm.tensors(cfg, seed=22)
    src = hm.write_gguf(str(tmp_path / "q.gguf"), t, cfg, "Q4_0")
    os.makedirs(tmp_path / "out")
    toks, ref = hm.reference_greedy(hm.as_stored_gguf(t, cfg, "Q4_0"), cfg, STEPS)
    got, logits = hm.device_run_on("m3", hm.convert(src, str(tmp_path / "out" / "q.f32.bin")), STEPS, toks,
                                   heap=2097152)
    assert got == toks
    assert np.abs(logits - ref).max() < 1e-4
