"""Small model files written by the tests themselves (no network): HF config.json, GGUF, llama2.c .bin."""
import json
import os
import struct

TINYLLAMA = {  # huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0 config.json (the fields that matter)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
    "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
    "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
LLAMA2_7B = {  # huggingface.co/meta-llama/Llama-2-7b-hf config.json
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
    "tie_word_embeddings": False, "torch_dtype": "float16",
}
MISTRAL_7B_V01 = {  # mistralai/Mistral-7B-v0.1: one 4096-token window in every layer
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
    "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
GEMMA2_2B = {  # google/gemma-2-2b: head_dim 256 != 2304 / 8, every other layer local (window 4096)
    "model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
    "max_position_embeddings": 8192, "sliding_window": 4096, "tie_word_embeddings": True,
    "torch_dtype": "float32",
}
GEMMA3_1B = {  # google/gemma-3-1b-pt: MQA, head_dim 256, window 512, every 6th layer global
    "model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
    "max_position_embeddings": 32768, "sliding_window": 512, "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16",
}
QWEN2_05B = {  # Qwen/Qwen2-0.5B: sliding_window given but use_sliding_window false: no window
    "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 131072,
    "max_window_layers": 24, "sliding_window": 131072, "use_sliding_window": False, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
QWEN3_06B = {  # Qwen/Qwen3-0.6B: explicit head_dim 128 while 1024 / 16 = 64
    "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
    "max_position_embeddings": 40960, "max_window_layers": 28, "sliding_window": None,
    "use_sliding_window": False, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
}
GPT2 = {  # openai-community/gpt2: GPT-2 key names, no num_key_value_heads (MHA)
    "model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "n_ctx": 1024,
    "vocab_size": 50257,
}


def write_json(tmp_path, name, obj):
    p = os.path.join(str(tmp_path), name)
    with open(p, "w") as f:
        json.dump(obj, f)
    return p


def write_llama2c(path, dim=64, hidden=172, layers=5, heads=8, kv_heads=4, vocab=512, seq=512, cut=0):
    """A llama2.c checkpoint of zeros with exactly the size its header promises (minus `cut` bytes)."""
    head_dim = dim // heads
    kv_dim = kv_heads * head_dim
    floats = (abs(vocab) * dim + layers * (2 * dim + dim * dim + 2 * kv_dim * dim + dim * dim + 3 * dim * hidden)
              + dim + seq * head_dim + (abs(vocab) * dim if vocab < 0 else 0))
    data = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq) + bytes(4 * floats)
    with open(path, "wb") as f:
        f.write(data[:len(data) - cut] if cut else data)
    return path


def write_gguf(path, arch="llama", layers=22, heads=32, kv_heads=4, dim=2048, ff=5632, ctx=2048, key_length=None,
               window=None, pattern=None, extra=None, skip=()):
    import numpy as np
    import gguf
    w = gguf.GGUFWriter(path, arch)
    w.add_name("test-" + arch)
    if "block_count" not in skip:
        w.add_block_count(layers)
    if "head_count" not in skip:
        w.add_head_count(heads)
    if kv_heads is not None:
        w.add_head_count_kv(kv_heads)
    if "embedding_length" not in skip:
        w.add_embedding_length(dim)
    if ff is not None:
        w.add_feed_forward_length(ff)
    if ctx is not None:
        w.add_context_length(ctx)
    if key_length is not None:
        w.add_key_length(key_length)
        w.add_value_length(key_length)
    if window is not None:
        w.add_sliding_window(window)
    if pattern is not None:
        w.add_array("%s.attention.sliding_window_pattern" % arch, pattern)
    for k, v in (extra or {}).items():
        w.add_uint32(k, v)
    w.add_tensor("token_embd.weight", np.zeros((32, 16), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.zeros(16, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def standin_fetch_cache(base):
    """A clone without ../shared: a `kvedge fetch` cache under `base` holding a tok512.bin stand-in (512 one-byte
    pieces; the planner's count depends only on the vocabulary and the file's size class, as
    kvedge.model.pieces.FileTokenizer.nbytes says), so plans count a tokenizer as with the real one, not the
    largest one reserved when none is known (tests/host/test_plan_tokenizer.py tests that). Returns `base`, or None
    when ../shared/models holds the real tokenizer."""
    import os
    from kvedge_host import paths
    if os.path.exists(os.path.join(paths.SHARED, "models", "tok512.bin")):
        return None
    models = os.path.join(str(base), "kvedge", "models")
    tok = os.path.join(models, "tok512.bin")
    if not os.path.exists(tok):
        os.makedirs(models, exist_ok=True)
        with open(tok + ".part", "wb") as f:
            f.write(struct.pack("<i", 1) + b"".join(struct.pack("<fi", 0.0, 1) + bytes([i % 256])
                                                    for i in range(512)))
        os.replace(tok + ".part", tok)
    return str(base)
