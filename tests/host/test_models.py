"""Model readers: HF config.json, GGUF metadata, llama2.c headers, presets; KV sizes pinned to llama.cpp's figures
and to hand-computed bytes (every byte figure through kvedge.budget)."""
import json
import os

import pytest

from kvedge import budget
from kvedge_host import models
from kvedge_host.plan.account import account, target
from kvedge_host.paths import model_file

import _modelfiles as mf

MiB = 1 << 20
STORIES = model_file("stories260K.bin")


def kv(spec, context, dtype="f16", align=0, batch=1, detail=False):
    return budget.kv_bytes_layers(spec.windows(), spec.kv_heads, spec.head_dim, context, dtype, align, batch,
                                  detail=detail)


def hf(tmp_path, cfg, name="config.json"):
    return models.load(mf.write_json(tmp_path, name, cfg))


# ---- llama.cpp's printed sizes (llama_kv_cache_init: "KV self size = ... MiB, K (f16): ... MiB, V (f16): ...") ----

def test_tinyllama_f16_2048_is_llama_cpp_44_mib(tmp_path):
    s = hf(tmp_path, mf.TINYLLAMA)
    assert (s.layers, s.heads, s.kv_heads, s.head_dim) == (22, 32, 4, 64)
    d = kv(s, 2048, detail=True)
    assert d["total"] == 46137344 == 44 * MiB
    assert d["k"] == d["v"] == 22 * MiB


def test_tinyllama_q8_0_and_q4_0_match_llama_cpp_blocks(tmp_path):
    s = hf(tmp_path, mf.TINYLLAMA)
    # q8_0: 64 values = 2 blocks x 34 bytes per row; 22 layers x 4 heads x 2048 tokens: K 11.69 MiB + V 11.69 MiB
    d = kv(s, 2048, "q8_0", detail=True)
    assert d["k"] == d["v"] == 22 * 4 * 2048 * 68 == 12255232
    assert round(d["total"] / MiB, 2) == 23.38
    # q4_0: 2 blocks x 18 bytes: K 6.19 MiB + V 6.19 MiB
    assert kv(s, 2048, "q4_0") == 2 * 22 * 4 * 2048 * 36 == 12976128


def test_llama2_7b_f16_512_is_256_mib_and_full_context_2_gib(tmp_path):
    s = hf(tmp_path, mf.LLAMA2_7B)
    assert s.kv_heads == 32 and s.attention == "MHA"
    assert kv(s, 512) == 268435456 == 256 * MiB
    assert kv(s, 4096) == 2048 * MiB


def test_explicit_head_dim_qwen3(tmp_path):
    s = hf(tmp_path, mf.QWEN3_06B)
    assert s.head_dim == 128 and s.dim // s.heads == 64  # explicit head_dim wins over hidden / heads
    assert s.windows() == [0] * 28  # sliding_window null, use_sliding_window false
    # 28 layers x 8 KV heads x 128 x 2 bytes x (K, V) = 114,688 bytes per token; llama.cpp: 4480 MiB at 40960
    assert kv(s, 40960) == 2 * 28 * 8 * 128 * 2 * 40960 == 4480 * MiB


def test_gqa_and_mha_default(tmp_path):
    s = hf(tmp_path, mf.GPT2)  # GPT-2 names, no num_key_value_heads: MHA
    assert (s.layers, s.heads, s.kv_heads, s.head_dim, s.context) == (12, 12, 12, 64, 1024)
    assert "MHA" in " ".join(s.notes)
    assert kv(s, 1024) == 2 * 12 * 12 * 64 * 2 * 1024 == 36 * MiB
    t = hf(tmp_path, mf.TINYLLAMA)
    assert t.attention.startswith("GQA (8 query heads")


def test_mqa_hand_computed(tmp_path):
    cfg = dict(mf.LLAMA2_7B, num_key_value_heads=1, num_attention_heads=64, hidden_size=4096)
    s = hf(tmp_path, cfg)
    assert s.attention == "MQA" and s.head_dim == 64
    assert kv(s, 2048) == 2 * 32 * 1 * 64 * 2 * 2048 == 16777216


def test_mistral_window_in_every_layer(tmp_path):
    s = hf(tmp_path, mf.MISTRAL_7B_V01)
    assert s.windows() == [4096] * 32
    # 32 layers x 8 KV heads x 128 x 2 x 2 = 131,072 bytes per token, at most 4096 tokens per layer
    assert kv(s, 2048) == 131072 * 2048
    assert kv(s, 32768) == kv(s, 4096) == 512 * MiB
    v02 = hf(tmp_path, dict(mf.MISTRAL_7B_V01, sliding_window=None), "v02.json")
    assert v02.windows() == [0] * 32 and kv(v02, 32768) == 4096 * MiB


def test_gemma2_alternating_local_global(tmp_path):
    s = hf(tmp_path, mf.GEMMA2_2B)
    assert s.head_dim == 256 and s.dim == 2304
    assert s.windows()[:4] == [4096, 0, 4096, 0] and s.windows().count(0) == 13
    # per layer per token 2 x 4 x 256 x 2 = 4096 bytes; 13 global layers x 8192 + 13 local layers x 4096
    assert kv(s, 8192) == 13 * 4096 * 8192 + 13 * 4096 * 4096 == 654311424


def test_gemma3_every_sixth_layer_global(tmp_path):
    s = hf(tmp_path, mf.GEMMA3_1B)
    assert [i for i, w in enumerate(s.windows()) if w == 0] == [5, 11, 17, 23]
    # MQA, head_dim 256: 1024 bytes per layer per token; 4 global x 32768 + 22 local x 512
    assert kv(s, 32768) == 4 * 1024 * 32768 + 22 * 1024 * 512 == 145752064
    lt = dict(mf.GEMMA3_1B, layer_types=["full_attention"] * 20 + ["sliding_attention"] * 6)
    assert hf(tmp_path, lt, "lt.json").windows() == [0] * 20 + [512] * 6


def test_gemma3_multimodal_text_config_uses_transformers_defaults(tmp_path):
    cfg = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
                                                    "intermediate_size": 10240, "num_hidden_layers": 34,
                                                    "sliding_window": 1024}}
    s = hf(tmp_path, cfg)
    assert (s.layers, s.heads, s.kv_heads, s.head_dim) == (34, 8, 4, 256)
    assert s.windows().count(0) == 5  # layers 5, 11, 17, 23, 29
    assert any("transformers defaults" in n for n in s.notes)


def test_qwen2_sliding_window_off_and_on(tmp_path):
    assert hf(tmp_path, mf.QWEN2_05B).windows() == [0] * 24
    on = dict(mf.QWEN2_05B, use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    assert hf(tmp_path, on, "on.json").windows() == [0] * 20 + [4096] * 4


def test_quantized_types_hand_computed(tmp_path):
    s = hf(tmp_path, mf.TINYLLAMA)
    # i8: 64 code bytes + one 2-byte f16 scale per row
    assert kv(s, 100, "i8") == 2 * 22 * 4 * 100 * (64 + 2) == 1161600
    # i4 KIVI at 64 tokens: codes 2*22*4*64*32, value scale+zero 22*4*64*4, key scale+zero per channel per group
    # 22*4*2*64*4, sliding f32 residual R = 32: R + G - 1 = 63 rows, 2*22*4*63*256
    assert kv(s, 64, "i4") == 360448 + 22528 + 45056 + 2838528 == 3266560
    # align 64 pads i4's 32-byte rows to 64
    assert kv(s, 64, "i4", align=64) == 3266560 + 360448


def test_hf_weights_and_context(tmp_path):
    s = hf(tmp_path, mf.TINYLLAMA)
    assert s.weights_dtype == "f16" and s.context == 2048 and not s.shared_classifier
    r = account(s, 2048, "f16", target(heap=1 << 32), align=0)
    p = budget.llama_params(2048, 5632, 22, 32, 4, 32000, False, 64)
    assert r["weights_bytes"] == budget.weights_bytes(p, "f16") == 2200281088
    assert r["kv_cache_bytes"] == 46137344 and r["kv_bytes_per_token"] == 22528


# ---- GGUF ----

def test_gguf_tinyllama_metadata(tmp_path):
    p = mf.write_gguf(str(tmp_path / "tl.gguf"))
    s = models.load(p)
    assert (s.layers, s.heads, s.kv_heads, s.head_dim, s.context, s.hidden_dim) == (22, 32, 4, 64, 2048, 5632)
    assert kv(s, 2048) == 44 * MiB
    assert s.weights_file_bytes == 32 * 16 * 2 + 16 * 4  # the file's tensors, exactly
    assert s.shared_classifier  # no output.weight tensor
    assert s.vocab == 32  # no vocab_size key: from token_embd.weight


def test_gguf_fallbacks_and_explicit_key_length(tmp_path):
    s = models.load(mf.write_gguf(str(tmp_path / "mha.gguf"), kv_heads=None, ff=None, ctx=None))
    assert s.kv_heads == 32 and s.hidden_dim == 4 * 2048 and s.context == 0
    assert any("head_count_kv absent" in n for n in s.notes)
    g = models.load(mf.write_gguf(str(tmp_path / "g.gguf"), arch="gemma2", layers=26, heads=8, kv_heads=4,
                                  dim=2304, key_length=256, window=4096, ctx=8192))
    assert g.head_dim == 256 and g.windows()[:2] == [4096, 0]
    assert kv(g, 8192) == 654311424


def test_gguf_sliding_window_pattern_array_and_every_layer(tmp_path):
    pat = [True, True, False, True]
    s = models.load(mf.write_gguf(str(tmp_path / "p.gguf"), layers=4, window=128, pattern=pat))
    assert s.windows() == [128, 128, 0, 128]
    m = models.load(mf.write_gguf(str(tmp_path / "m.gguf"), arch="llama", layers=4, window=256))
    assert m.windows() == [256] * 4


def _err(fn, *a):
    with pytest.raises(models.ModelError) as e:
        fn(*a)
    return str(e.value)


def test_gguf_bad_files(tmp_path):
    p = mf.write_gguf(str(tmp_path / "ok.gguf"))
    data = open(p, "rb").read()
    for cut in (8, 60, len(data) // 2, len(data) - 10):
        t = tmp_path / ("cut%d.gguf" % cut)
        t.write_bytes(data[:cut])
        msg = _err(models.load, str(t))
        assert str(t) in msg and "truncated or malformed GGUF" in msg, msg
    (tmp_path / "no.gguf").write_bytes(b"NOPE" + bytes(40))
    assert "not a GGUF file" in _err(models.load, str(tmp_path / "no.gguf"))
    miss = mf.write_gguf(str(tmp_path / "miss.gguf"), skip=("block_count",))
    assert _err(models.load, miss) == miss + ": missing llama.block_count"
    zero = mf.write_gguf(str(tmp_path / "zero.gguf"), kv_heads=0)
    assert "llama.attention.head_count_kv is 0, expected a whole number 1..16384" in _err(models.load, zero)
    odd = mf.write_gguf(str(tmp_path / "odd.gguf"), kv_heads=5)
    assert "not a multiple of 5 KV heads" in _err(models.load, odd)


# ---- llama2.c ----

def test_llama2c_written_checkpoint(tmp_path):
    p = mf.write_llama2c(str(tmp_path / "s.bin"))
    s = models.load(p)
    assert (s.layers, s.heads, s.kv_heads, s.head_dim, s.context, s.vocab) == (5, 8, 4, 8, 512, 512)
    assert kv(s, 512, "f32") == 655360


@pytest.mark.skipif(not os.path.exists(STORIES), reason="needs ../shared/models/stories260K.bin")
def test_llama2c_real_stories260k():
    s = models.load(STORIES)
    assert (s.dim, s.hidden_dim, s.layers, s.heads, s.kv_heads, s.vocab, s.context) == (64, 172, 5, 8, 4, 512, 512)
    assert s.shared_classifier


def test_llama2c_bad_files(tmp_path):
    short = tmp_path / "short.bin"
    short.write_bytes(b"\x01\x00")
    assert "truncated header: 2 of 28 bytes" in _err(models.load, str(short))
    cut = mf.write_llama2c(str(tmp_path / "cut.bin"), cut=100)
    msg = _err(models.load, cut)
    assert msg == "%s: 1056440 bytes, the header needs 1056540" % cut
    neg = mf.write_llama2c(str(tmp_path / "neg.bin"), layers=0)
    assert "header field n_layers is 0, expected 1..4096" in _err(models.load, neg)
    assert "cannot read" in _err(models.load, str(tmp_path / "absent.bin"))


# ---- HF bad input ----

def test_hf_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    msg = _err(models.load, str(bad))
    assert msg.startswith(str(bad) + ": not valid JSON")
    cfg = dict(mf.TINYLLAMA)
    del cfg["num_attention_heads"]
    p = mf.write_json(tmp_path, "miss.json", cfg)
    assert _err(models.load, p) == p + ": missing num_attention_heads"
    p = mf.write_json(tmp_path, "zero.json", dict(mf.TINYLLAMA, num_hidden_layers=0))
    assert _err(models.load, p) == p + ": num_hidden_layers is 0, expected a whole number 1..4096"
    p = mf.write_json(tmp_path, "neg.json", dict(mf.TINYLLAMA, num_key_value_heads=-4))
    assert "num_key_value_heads is -4, expected a whole number 1..16384" in _err(models.load, p)
    p = mf.write_json(tmp_path, "gqa.json", dict(mf.TINYLLAMA, num_key_value_heads=5))
    assert "32 attention heads are not a multiple of 5 KV heads" in _err(models.load, p)
    p = mf.write_json(tmp_path, "dt.json", dict(mf.TINYLLAMA, torch_dtype="float8"))
    assert "unknown torch_dtype 'float8'" in _err(models.load, p)
    p = mf.write_json(tmp_path, "list.json", [1, 2])
    assert "expected a JSON object" in _err(models.load, p)
    p = mf.write_json(tmp_path, "lt.json", dict(mf.GEMMA3_1B, layer_types=["full_attention"]))
    assert "layer_types is a list of 1 item, expected a list of one entry per layer (26)" in _err(models.load, p)
    os.mkdir(str(tmp_path / "empty"))
    assert "a folder without config.json" in _err(models.load, str(tmp_path / "empty"))
    (tmp_path / "x.safetensors").write_bytes(b"abcd")
    assert "unknown model file type" in _err(models.load, str(tmp_path / "x.safetensors"))


def test_folder_with_config_json(tmp_path):
    mf.write_json(tmp_path, "config.json", mf.TINYLLAMA)
    assert models.load(str(tmp_path)).layers == 22


def test_presets_load_and_cite_sources():
    for name in models.PRESETS:
        s = models.preset(name)
        assert s.layers > 0 and "preset " + name in s.source
        assert "huggingface.co" in s.source or "llama2.c" in s.source
    assert kv(models.preset("tinyllama-1.1b"), 2048) == 44 * MiB
    assert kv(models.preset("llama2-7b"), 512) == 256 * MiB
    assert kv(models.preset("stories260k"), 512, "f32") == 655360
    assert "unknown preset 'gpt5'" in _err(models.preset, "gpt5")
    json.dumps(models.PRESETS)  # plain data


def test_gguf_vocab_from_tokenizer_tokens(tmp_path):
    import gguf
    import numpy as np
    p = str(tmp_path / "tok.gguf")
    w = gguf.GGUFWriter(p, "llama")
    w.add_block_count(2)
    w.add_head_count(4)
    w.add_embedding_length(64)
    w.add_context_length(128)
    w.add_token_list(["<unk>", "<s>", "</s>", "a", "b"])
    w.add_tensor("token_embd.weight", np.zeros((5, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    s = models.load(p)
    assert s.vocab == 5 and s.kv_heads == 4 and s.head_dim == 16 and s.weights_file_bytes == 5 * 64 * 4
