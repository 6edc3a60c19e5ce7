"""Small random Llamas written by the project itself in the layouts users bring: a Hugging Face folder
(safetensors, single or sharded), a GGUF file (gguf's writer, llama.cpp's q/k order and quantizations) and
llama2.c export.py's version 1/2 files; and an independent numpy forward pass of the Hugging Face layout
(transformers' LlamaForCausalLM: rotate_half RoPE), which shares no code with kvedge_host.readers."""
import json
import os
import struct

import numpy as np

SHAPE = dict(dim=32, hidden=64, layers=2, heads=4, kv_heads=2, vocab=96, seq=64)


def config(tied=False, **shape):
    s = dict(SHAPE, **shape)
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": s["dim"],
            "intermediate_size": s["hidden"], "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
            "num_key_value_heads": s["kv_heads"], "vocab_size": s["vocab"], "max_position_embeddings": s["seq"],
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": tied,
            "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}


def tensors(cfg, seed=0):
    """Hugging Face tensor names -> float32 arrays, seeded; lm_head only when not tied."""
    rng = np.random.default_rng(seed)
    d, h, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd = d // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    V = cfg["vocab_size"]

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)
    t = {"model.embed_tokens.weight": rng.standard_normal((V, d)).astype(np.float32),
         "model.norm.weight": norm(d)}
    for l in range(L):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = norm(d)
        t[p + "post_attention_layernorm.weight"] = norm(d)
        t[p + "self_attn.q_proj.weight"] = 2 * mat(d, d)
        t[p + "self_attn.k_proj.weight"] = 2 * mat(kv, d)
        t[p + "self_attn.v_proj.weight"] = mat(kv, d)
        t[p + "self_attn.o_proj.weight"] = mat(d, d)
        t[p + "mlp.gate_proj.weight"] = mat(h, d)
        t[p + "mlp.up_proj.weight"] = mat(h, d)
        t[p + "mlp.down_proj.weight"] = mat(d, h)
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = mat(V, d) * 4
    return t


# ---- the reference: transformers' Llama in numpy, float64 ----

def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def _rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def reference_logits(t, cfg, tokens):
    """Logits at every position of `tokens` (teacher-forced), the Hugging Face layout as transformers
    computes it: RoPE with rotate_half and cos/sin of the halves concatenated, GQA by repeat_kv."""
    g = {k: v.astype(np.float64) for k, v in t.items()}
    d, L, H, KVH = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
                    cfg["num_key_value_heads"])
    hd, eps = d // H, cfg["rms_norm_eps"]
    inv = 1.0 / (cfg["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    wcls = g["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else g["lm_head.weight"]
    ks = [[] for _ in range(L)]
    vs = [[] for _ in range(L)]
    out = []
    for pos, tok in enumerate(tokens):
        x = g["model.embed_tokens.weight"][tok].copy()
        ang = pos * inv
        cos = np.concatenate([np.cos(ang), np.cos(ang)])
        sin = np.concatenate([np.sin(ang), np.sin(ang)])
        for l in range(L):
            p = "model.layers.%d." % l
            hx = _rms(x, g[p + "input_layernorm.weight"], eps)
            q = (g[p + "self_attn.q_proj.weight"] @ hx).reshape(H, hd)
            k = (g[p + "self_attn.k_proj.weight"] @ hx).reshape(KVH, hd)
            v = (g[p + "self_attn.v_proj.weight"] @ hx).reshape(KVH, hd)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            ks[l].append(k)
            vs[l].append(v)
            K = np.repeat(np.stack(ks[l]), H // KVH, axis=1)  # [pos, H, hd]
            Vv = np.repeat(np.stack(vs[l]), H // KVH, axis=1)
            s = np.einsum("hd,phd->hp", q, K) / np.sqrt(hd)
            a = np.exp(s - s.max(axis=1, keepdims=True))
            a /= a.sum(axis=1, keepdims=True)
            o = np.einsum("hp,phd->hd", a, Vv).reshape(d)
            x = x + g[p + "self_attn.o_proj.weight"] @ o
            hx = _rms(x, g[p + "post_attention_layernorm.weight"], eps)
            gate = g[p + "mlp.gate_proj.weight"] @ hx
            x = x + g[p + "mlp.down_proj.weight"] @ (gate / (1 + np.exp(-gate)) * (g[p + "mlp.up_proj.weight"] @ hx))
        out.append(wcls @ _rms(x, g["model.norm.weight"], eps))
    return np.array(out)


def reference_greedy(t, cfg, steps, first=1):
    """Greedy tokens from `first`: [first, t1, ..., t_steps-1] and the logits at each position."""
    toks = [first]
    for _ in range(steps - 1):
        toks.append(int(np.argmax(reference_logits(t, cfg, toks)[-1])))
    return toks, reference_logits(t, cfg, toks)


# ---- writers ----

def write_hf(folder, t, cfg, shards=1, dtype=np.float32):
    """config.json and model.safetensors (or `shards` files and model.safetensors.index.json)."""
    from safetensors.numpy import save_file
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    names = sorted(t)
    if shards == 1:
        save_file({k: t[k].astype(dtype) for k in names}, os.path.join(folder, "model.safetensors"))
        return folder
    wmap = {}
    for i in range(shards):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = names[i::shards]
        save_file({k: t[k].astype(dtype) for k in part}, os.path.join(folder, fname))
        wmap.update({k: fname for k in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f)
    return folder


def hf_to_meta(w, heads):
    """llama.cpp's LlamaModel.permute (convert_hf_to_gguf.py), written here: rotate_half rows to interleaved."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def meta_tensors(t, cfg):
    """(llama.cpp / llama2.c name, array) in Meta's interleaved q/k order."""
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out = {"token_embd.weight": t["model.embed_tokens.weight"], "output_norm.weight": t["model.norm.weight"]}
    if "lm_head.weight" in t:
        out["output.weight"] = t["lm_head.weight"]
    for l in range(cfg["num_hidden_layers"]):
        for hf, gg in GGUF_NAMES.items():
            w = t["model.layers.%d.%s.weight" % (l, hf)]
            if hf == "self_attn.q_proj":
                w = hf_to_meta(w, H)
            elif hf == "self_attn.k_proj":
                w = hf_to_meta(w, KVH)
            out["blk.%d.%s.weight" % (l, gg)] = w
    return out


def write_gguf(path, t, cfg, qtype="F32", arch="llama", vocab=None, drop=()):
    """A GGUF file through gguf's writer; 2-D tensors stored as qtype (F32, F16, Q8_0, Q4_0, ...), norms f32;
    the GGUF names in `drop` left out."""
    import gguf
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    if vocab is not None:
        vocab(w)
    q = gguf.GGMLQuantizationType[qtype]
    for name, a in meta_tensors(t, cfg).items():
        if name in drop:
            continue
        if a.ndim == 1 or qtype == "F32":
            w.add_tensor(name, a.astype(np.float32))
        elif qtype == "F16":
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, q), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_ak42(path, t, cfg, version, group=32):
    """llama2.c export.py's version 1 (f32) or 2 (int8 Q8_0, `group` values a scale) file, written here from
    its documented layout. Returns the tensors as the file holds them (v2: dequantized) in HF names' meaning."""
    m = meta_tensors(t, cfg)
    L = cfg["num_hidden_layers"]
    shared = cfg["tie_word_embeddings"]
    head = struct.pack("<Ii7iB", 0x616B3432, version, cfg["hidden_size"], cfg["intermediate_size"], L,
                       cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"],
                       cfg["max_position_embeddings"], int(shared))
    if version == 2:
        head += struct.pack("<i", group)
    norms = ([m["blk.%d.attn_norm.weight" % l] for l in range(L)] + [m["blk.%d.ffn_norm.weight" % l] for l in range(L)]
             + [m["output_norm.weight"]])
    mats = [m["token_embd.weight"]]
    for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_down", "ffn_up"):
        mats += [m["blk.%d.%s.weight" % (l, n)] for l in range(L)]
    if not shared:
        mats.append(m["output.weight"])
    with open(path, "wb") as f:
        f.write(head + bytes(256 - len(head)))
        for a in norms:
            f.write(a.astype("<f4").tobytes())
        for a in mats:
            if version == 1:
                f.write(a.astype("<f4").tobytes())
                continue
            g = a.reshape(-1, group).astype(np.float32)
            s = np.abs(g).max(axis=1) / 127.0
            codes = np.round(g / s[:, None]).astype(np.int8)
            f.write(codes.tobytes())
            f.write(s.astype("<f4").tobytes())
    return path


def bf16_round(a):
    """float32 -> the nearest bfloat16 (ties to even), as float32, and its 16-bit patterns."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32), bits


def write_bf16_safetensors(path, t):
    """A BF16 safetensors file written from the format's description (8-byte header length, JSON header,
    data): numpy has no bfloat16 for safetensors.numpy to save."""
    head, blobs, at = {}, [], 0
    for k in sorted(t):
        raw = bf16_round(t[k])[1].tobytes()
        head[k] = {"dtype": "BF16", "shape": list(t[k].shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def meta_to_hf(w, heads):
    """The inverse of hf_to_meta."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def as_stored_gguf(t, cfg, qtype):
    """The HF tensors as a GGUF file of qtype holds them: each 2-D tensor quantized and dequantized by gguf's
    quants (in llama.cpp's q/k order, then back to Hugging Face's), for the reference of quantized files."""
    import gguf
    if qtype == "F32":
        return dict(t)
    q = gguf.GGMLQuantizationType[qtype]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out = {}
    for k, a in t.items():
        if a.ndim == 1:
            out[k] = a
            continue
        heads = H if "q_proj" in k else KVH if "k_proj" in k else None
        m = hf_to_meta(a, heads) if heads else a
        if qtype == "F16":
            m = m.astype(np.float16).astype(np.float32)
        else:
            m = gguf.quants.dequantize(gguf.quants.quantize(m, q), q).astype(np.float32)
        out[k] = meta_to_hf(m, heads) if heads else m
    return out


# ---- the device's runner on a converted file ----

def device_run(path, steps, tokens):
    """On CPython: (greedy tokens from BOS, logits teacher-forced on `tokens`) of kvedge.model.llama.Llama."""
    from kvedge.model.llama import Llama
    m = Llama(path, kv={"align": 0})
    got = [1]
    for _ in range(steps - 1):
        got.append(int(np.argmax(list(m.forward(got[-1])))))
    m.close()
    m = Llama(path, kv={"align": 0})
    logits = np.array([list(m.forward(x)) for x in tokens])
    m.close()
    return got, logits


_UNIX = """from kvedge.model.llama import Llama
m = Llama(%r, kv={'align': 0})
got = [1]
for i in range(%d):
    l = m.forward(got[-1])
    b = 0
    for j in range(len(l)):
        if l[j] > l[b]:
            b = j
    got.append(b)
print('G ' + ' '.join(str(t) for t in got))
m.close()
m = Llama(%r, kv={'align': 0})
for t in %r:
    print('L ' + ' '.join(repr(v) for v in m.forward(t)))
"""


def device_run_on(runtime, path, steps, tokens, heap=4 << 20):
    """The same run on a MicroPython runtime (kvedge_host.boards.runtimes.run_code)."""
    from kvedge_host.boards import runtimes
    from kvedge_host.paths import DEVICE
    rc, out = runtimes.run_code(runtime, _UNIX % (path, steps - 1, path, list(tokens)), heap,
                                [DEVICE, os.path.dirname(path)])
    assert rc == 0, out[-2000:]
    lines = out.splitlines()
    got = [int(x) for x in [ln for ln in lines if ln.startswith("G ")][0][2:].split()]
    logits = np.array([[float(v) for v in ln[2:].split()] for ln in lines if ln.startswith("L ")])
    return got, logits


# ---- the command ----

def convert(src, out, dtype="f32", *extra):
    """`kvedge convert SRC -o OUT --weights-dtype DTYPE --force`, which must succeed; returns OUT."""
    from kvedge_host.cli import main as cli
    assert cli(["convert", src, "-o", out, "--weights-dtype", dtype, "--force"] + list(extra)) == 0
    return out


def refused(capsys, src, out, *mentions):
    """`kvedge convert SRC -o OUT` refuses in one line holding every mention, exit 2, and writes nothing."""
    from kvedge_host.cli import main as cli
    assert cli(["convert", src, "-o", out]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvedge convert: error: "), lines
    for m in mentions:
        assert m in lines[0], lines[0]
    assert not os.path.exists(out) and not os.path.exists(out + ".part")
    return lines[0]


def seeded(request, tmp_path_factory, seeds, name):
    """The test modules' fixture: (config, tensors, folder) of a tied (param True) or untied random Llama."""
    cfg = config(tied=request.param)
    return cfg, tensors(cfg, seed=seeds[request.param]), tmp_path_factory.mktemp(name)
