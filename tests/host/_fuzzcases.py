"""The CLI fuzzer's cases: real files written here and mutated, each with the outcome it must have.

Expected outcomes come from small independent statements of what each format means (written here, not taken
from kvedge): which config values are valid, which llama2.c file length a header implies, how a tokenizer
file is laid out, and the byte figures a valid input must produce (KV bytes from 2 x kv_heads x head_dim x
bytes x tokens per layer, weights from the Llama parameter count, int8 files dequantized with numpy)."""
import json
import math
import os
import random
import struct

import numpy as np

import _modelfiles as mf
from _clifuzz import EITHER, ERROR, OK, Case

DELETE = object()
NAN = float("nan")
VALUES = [DELETE, 0, -1, 1e30, 10 ** 30, "x", None, [], {}, True, NAN, 1.5]

PHI3_MINI = {  # microsoft/Phi-3-mini-4k-instruct: one 2047-token window in every layer
    "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096,
    "sliding_window": 2047, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "rope_theta": 10000.0,
    "architectures": ["Phi3ForCausalLM"], "bos_token_id": 1,
}
GEMMA3_4B = {  # google/gemma-3-4b-pt: a multimodal wrapper whose text_config lists what differs from defaults
    "model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
    "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
                    "num_hidden_layers": 34, "sliding_window": 1024},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152},
}
HF_CONFIGS = {"llama": mf.TINYLLAMA, "llama2-7b": mf.LLAMA2_7B, "mistral": mf.MISTRAL_7B_V01,
              "gemma2": mf.GEMMA2_2B, "gemma3": mf.GEMMA3_1B, "gemma3-4b": GEMMA3_4B, "qwen2": mf.QWEN2_05B,
              "qwen3": mf.QWEN3_06B, "gpt2": mf.GPT2, "phi3": PHI3_MINI}
# keys a config may carry that these examples do not: each is also added with every mutated value
EXTRA_KEYS = ("head_dim", "num_key_value_heads", "sliding_window", "layer_types", "use_sliding_window",
              "sliding_window_pattern", "max_window_layers", "kv_lora_rank", "tie_word_embeddings", "torch_dtype",
              "text_config", "_name_or_path")


def mutate(cfg, key, value):
    c = dict(cfg)
    if value is DELETE:
        c.pop(key, None)
    else:
        c[key] = value
    return c


def show_value(v):
    return "deleted" if v is DELETE else json.dumps(v) if not isinstance(v, float) or v == v else "NaN"


# ---- what a Hugging Face config means (transformers' conventions, restated) ----

class Bad(Exception):
    """The config is invalid; .key is the word the error must name."""

    def __init__(self, key):
        Exception.__init__(self, key)
        self.key = key


ALIASES = {"num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
           "num_attention_heads": ("n_head", "num_heads", "n_heads"),
           "hidden_size": ("n_embd", "d_model", "dim"),
           "intermediate_size": ("n_inner", "ffn_dim", "hidden_dim"),
           "max_position_embeddings": ("n_positions", "n_ctx", "seq_length", "max_seq_len")}
DEFAULTS = {"gemma3_text": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                            "vocab_size": 262208, "max_position_embeddings": 131072, "sliding_window": 4096,
                            "sliding_window_pattern": 6, "tie_word_embeddings": True},
            "gemma2": {"head_dim": 256, "sliding_window": 4096, "tie_word_embeddings": True},
            "gemma": {"head_dim": 256, "tie_word_embeddings": True}}
GLOBAL_EVERY = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6, "cohere2": 4}
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}


def _is_int(v):
    return type(v) is int


def _int(cfg, key, lo, hi, required=True):
    for k in (key,) + ALIASES.get(key, ()):
        v = cfg.get(k)
        if v is not None:
            if not _is_int(v) or not lo <= v <= hi:
                raise Bad(k)
            return v
    if required:
        raise Bad(key)
    return None


def hf_expect(cfg):
    """{layers, kv_heads, head_dim, context, kv_f16_bytes, weights_bytes} of a valid config, or Bad(key)."""
    if not isinstance(cfg, dict):
        raise Bad("JSON object")
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    mt = cfg.get("model_type")
    if mt is None:
        mt = ""
    if not isinstance(mt, str):
        raise Bad("model_type")
    c = dict(DEFAULTS.get(mt, {}))
    c.update(cfg)
    if c.get("kv_lora_rank") is not None and c.get("kv_lora_rank") != 0:
        raise Bad("kv_lora_rank")
    L = _int(c, "num_hidden_layers", 1, 4096)
    H = _int(c, "num_attention_heads", 1, 16384)
    D = _int(c, "hidden_size", 1, 1 << 20)
    KV = _int(c, "num_key_value_heads", 1, 16384, False) or H
    if KV > H or H % KV:
        raise Bad("heads")
    HD = _int(c, "head_dim", 1, 65536, False)
    if HD is None:
        if D % H:
            raise Bad("hidden_size")
        HD = D // H
    FF = _int(c, "intermediate_size", 1, 1 << 22, False) or 4 * D
    V = _int(c, "vocab_size", 1, 1 << 24)
    C = _int(c, "max_position_embeddings", 1, 1 << 26, False)
    dkey = "torch_dtype" if c.get("torch_dtype") is not None else "dtype"
    dt = c.get(dkey)
    dt = "float32" if dt is None else dt
    if not isinstance(dt, str) or dt not in DTYPE_BYTES:
        raise Bad(dkey)
    tie = c.get("tie_word_embeddings")
    if tie is not None and not isinstance(tie, bool):
        raise Bad("tie_word_embeddings")
    windows = _hf_windows(c, L, mt)
    if not C:
        raise Bad("context")  # budget without --context: the model must say its context
    per_layer = [min(w, C) if w else C for w in windows]
    kv = sum(2 * KV * HD * 2 * t for t in per_layer)
    matrices = V * D * (1 if tie else 2) + L * (2 * D * H * HD + 2 * D * KV * HD + 3 * D * FF)
    weights = DTYPE_BYTES[dt] * matrices + 4 * (2 * L * D + D)
    return {"layers": L, "kv_heads": KV, "head_dim": HD, "context": C, "kv_cache_bytes": kv,
            "weights_bytes": weights}


def _hf_windows(c, L, mt):
    use = c.get("use_sliding_window")
    if use is not None and not isinstance(use, bool):
        raise Bad("use_sliding_window")
    if use is False:
        return [0] * L
    key = "sliding_window" if c.get("sliding_window") is not None else "sliding_window_size"
    w = c.get(key)
    if w is None or (not isinstance(w, bool) and isinstance(w, (int, float)) and w == 0):
        return [0] * L
    if not _is_int(w) or not 1 <= w <= 1 << 26:
        raise Bad(key)
    types = c.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != L or not all(isinstance(t, str) for t in types):
            raise Bad("layer_types")
        return [w if t == "sliding_attention" else 0 for t in types]
    if mt.startswith("qwen") and c.get("max_window_layers") is not None:
        m = c["max_window_layers"]
        if not _is_int(m) or not 0 <= m <= 4096:
            raise Bad("max_window_layers")
        return [w if i >= m else 0 for i in range(L)]
    every = GLOBAL_EVERY.get(mt)
    for key in ("sliding_window_pattern", "_sliding_window_pattern"):
        if c.get(key) is not None:
            every = c[key]
            if not _is_int(every) or not 1 <= every <= 4096:
                raise Bad(key)
            break
    if every:
        return [0 if (i + 1) % every == 0 else w for i in range(L)]
    return [w] * L


def budget_check(expected):
    def check(out):
        r = json.loads(out)
        for k, v in expected.items():
            if r[k] != v:
                return "%s is %r, expected %r" % (k, r[k], v)
        return None
    return check


def hf_cases(tmp):
    """Every key of every config (and keys they could carry) deleted or set to each hostile value."""
    cases = []
    n = 0
    for name, base in HF_CONFIGS.items():
        keys = list(base) + [k for k in EXTRA_KEYS if k not in base]
        for key in keys:
            for value in VALUES:
                if value is DELETE and key not in base:
                    continue
                cfg = mutate(base, key, value)
                n += 1
                path = os.path.join(tmp, "hf%05d_%s.json" % (n, name))
                with open(path, "w") as f:
                    json.dump(cfg, f)  # NaN is written as the NaN literal Python's json reads back
                group = "hf-config %s %s=%s" % (name, key, show_value(value))
                try:
                    exp = hf_expect(cfg)
                except Bad as e:
                    cases.append(Case(group, ["budget", "--model", path, "--json"], ERROR, [path, e.key]))
                    continue
                cases.append(Case(group, ["budget", "--model", path, "--json"], OK, check=budget_check(exp)))
                if n % 7 == 0:  # the planning loop on a sample of the valid mutations: half of them with every
                    # kernel kind the board measured (auto), half with one (a quarter of the search: the same loop)
                    kinds = [] if n % 14 == 0 else ["--kernels", "viper"]
                    cases.append(Case(group, ["plan", "--model", path, "--json", "--board", "esp32s3-psram8"] + kinds,
                                      OK, check=plan_check(exp), ok_codes=(0, 1)))
    return cases


def plan_check(exp):
    def check(out):
        r = json.loads(out)
        for c in r["configurations"]:
            if not c["fits"] or c["total_bytes"] > r["heap_bytes"]:
                return "a configuration listed as feasible does not fit: %s" % c["strategy"]
            if c["cache"]["layers"] != exp["layers"] or c["cache"]["kv_heads"] != exp["kv_heads"]:
                return "a configuration has the wrong shape: %s" % c["cache"]
        return None
    return check


# ---- llama2.c checkpoints and kvedge int8 files ----

FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")
HEADER_VALUES = (0, 1, -1, 2, 3, 4, 7, 2 ** 31 - 1, -2 ** 31, 4097, 65537, 2 ** 24 + 1)


def llama2c_size(h):
    """File length llama2.c's run.c maps for header h (dict): header, embedding, per layer two norms and
    seven matrices, the final norm, two RoPE tables of seq_len * head_dim / 2, the classifier when
    vocab_size < 0. None when the header is not one run.c could use (non-positive fields, dim not a
    multiple of n_heads, n_heads not a multiple of n_kv_heads, odd head_dim, vocab below 3)."""
    d, hid, L, H, KV, V, S = (h[k] for k in FIELDS)
    if min(d, hid, L, H, KV, S) <= 0 or abs(V) < 3:
        return None
    if d > 65536 or hid > 65536 or L > 4096 or H > 16384 or KV > 16384 or abs(V) > 1 << 24 or S > 1 << 24:
        return None
    if d % H or H % KV or (d // H) % 2:
        return None
    hd = d // H
    kvd = KV * hd
    n = abs(V) * d + L * (2 * d + 2 * d * d + 2 * kvd * d + 3 * hid * d) + d + S * hd
    if V < 0:
        n += abs(V) * d
    return 28 + 4 * n


def i8_size(h):
    d, hid, L, H, KV, V, S = (h[k] for k in FIELDS)
    kvd = KV * (d // H)

    def m(r, c):
        return 4 * r + (r * c + 3) // 4 * 4
    n = 36 + m(abs(V), d) + L * (8 * d + 2 * m(d, d) + 2 * m(kvd, d) + 2 * m(hid, d) + m(d, hid)) + 4 * d
    return n + (m(abs(V), d) if V < 0 else 0)


def header_of(raw, off=0):
    return dict(zip(FIELDS, struct.unpack_from("<7i", raw, off)))


def llama2c_budget(h, dtype="f32"):
    """Figures `kvedge budget --kv-dtype f32 --align 0 --json` must print for header h."""
    d, hid, L, H, KV, V, S = (h[k] for k in FIELDS)
    hd = d // H
    p = abs(V) * d * (1 if V > 0 else 2) + L * (2 * d * d + 2 * d * KV * hd + 3 * d * hid)
    rows = L * (2 * d + 2 * KV * hd + 2 * hid + d) + abs(V) * (1 if V > 0 else 2)
    norms = 2 * L * d + d
    w = 4 * p + 4 * norms if dtype == "f32" else p + 4 * rows + 4 * norms
    return {"layers": L, "kv_heads": KV, "head_dim": hd, "context": S, "kv_cache_bytes": 2 * L * KV * hd * 4 * S,
            "weights_bytes": w}


def convert_check(src, dst):
    """The int8 file: its length from the header, and every matrix row within half a step of the f32 row."""
    def check(out):
        a = open(src, "rb").read()
        b = open(dst, "rb").read()
        h = header_of(a)
        if len(b) != i8_size(h) or b[:4] != b"KVW8" or b[8:36] != a[:28]:
            return "int8 file of %d bytes, expected %d with the same header" % (len(b), i8_size(h))
        f = np.frombuffer(a, "<f4", offset=28)
        d = h["dim"]
        V = abs(h["vocab_size"])
        s = np.frombuffer(b, "<f4", count=V, offset=36)
        codes = np.frombuffer(b, np.int8, count=V * d, offset=36 + 4 * V).reshape(V, d)
        emb = f[:V * d].reshape(V, d)
        err = np.abs(codes * s[:, None].astype(np.float64) - emb).max(axis=1)
        if not (err <= s * 0.5 + 1e-6 + np.abs(emb).max(axis=1) * 1e-6).all():
            return "embedding rows dequantize %g away from the f32 rows" % err.max()
        return None
    return check


class Ckpt:
    """The base checkpoints: tiny llama2.c models (shared and unshared classifier), their int8 files and
    the tokenizer, all written by kvedge.model.tiny (a seeded writer; the fuzzer only needs real bytes)."""

    def __init__(self, tmp):
        from kvedge.model import tiny
        from kvedge.model.checkpoint import convert_to_i8
        self.tmp = tmp
        self.f32 = os.path.join(tmp, "base.bin")
        tiny.write_checkpoint(self.f32, seed=3)
        self.unshared = os.path.join(tmp, "base_unshared.bin")
        tiny.write_checkpoint(self.unshared, seed=4, shared=False, n_kv_heads=4)
        self.i8 = os.path.join(tmp, "base.i8.bin")
        convert_to_i8(self.f32, self.i8)
        self.tok = os.path.join(tmp, "tok512.bin")
        tiny.write_tokenizer(self.tok, 352)


def _write(tmp, name, data):
    p = os.path.join(tmp, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def _model_cmds(path, tok, tmp, tag, expect, size_ok, h=None, dtype="f32"):
    """Every command that reads a checkpoint, on one (mutated) file."""
    out = []
    mentions = [path]
    if expect == ERROR:
        out.append(Case(tag, ["budget", "--model", path, "--json"], ERROR, mentions))
        out.append(Case(tag, ["plan", "--model", path, "--json"], ERROR, mentions))
        out.append(Case(tag, ["convert", path, "-o", path + ".o", "--force"], ERROR, mentions))
        out.append(Case(tag, ["eval", "--model", path, "--tokens", "4"], ERROR, mentions))
        out.append(Case(tag, ["generate", "--model", path, "--tokenizer", tok, "--steps", "3"], ERROR, mentions))
        out.append(Case(tag, ["check", "--model", path, "--only", "nothing-matches"], ERROR, mentions))
        out.append(Case(tag, ["demo", "--model", path, "--tokenizer", tok], ERROR, mentions))
        return out
    chk = budget_check(llama2c_budget(h, dtype))
    out.append(Case(tag, ["budget", "--model", path, "--json", "--kv-dtype", "f32", "--heap", str(1 << 30)],
                    expect, [path], check=chk))
    out.append(Case(tag, ["plan", "--model", path, "--json"], expect, [path], ok_codes=(0, 1)))
    if dtype == "f32":
        out.append(Case(tag, ["convert", path, "-o", path + ".i8", "--force"], expect, [path],
                        check=convert_check(path, path + ".i8")))
    return out


def checkpoint_cases(ck, rng):
    cases = []
    tmp = ck.tmp
    bases = ((ck.f32, "f32", 0), (ck.unshared, "f32", 0), (ck.i8, "i8", 8))
    for bi, (base, dtype, off) in enumerate(bases):
        raw = open(base, "rb").read()
        h0 = header_of(raw, off)
        # every header field set to values at and past every bound
        for fi, field in enumerate(FIELDS):
            vals = sorted(set(HEADER_VALUES + (h0[field] + 2, h0[field] * 2, -h0[field])))
            for v in vals:
                if v == h0[field] or not -2 ** 31 <= v < 2 ** 31:
                    continue
                h = dict(h0, **{field: v})
                data = bytearray(raw)
                struct.pack_into("<7i", data, off, *(h[k] for k in FIELDS))
                p = _write(tmp, "hdr%d_%s_%d.bin" % (bi, field, v), data)
                size = llama2c_size(h)
                if size is not None and dtype == "i8":
                    size = i8_size(h)
                ok = size == len(data)
                cases += _model_cmds(p, ck.tok, tmp, "%s header %s=%d" % (dtype, field, v), OK if ok else ERROR,
                                     ok, h, dtype)
        # truncated and extended: llama2.c writes nothing after the last tensor (F7)
        n = len(raw)
        for cut in sorted(set([0, 1, 3, 4, 8, 27, 28, 29, 35, 36, 100, n // 2, n - 4, n - 1])):
            p = _write(tmp, "cut%d_%d.bin" % (bi, cut), raw[:cut])
            cases += _model_cmds(p, ck.tok, tmp, "%s truncated to %d of %d bytes" % (dtype, cut, n), ERROR, False)
        for extra in (1, 3, 4, 64, n):
            p = _write(tmp, "ext%d_%d.bin" % (bi, extra), raw + bytes(extra))
            cases += _model_cmds(p, ck.tok, tmp, "%s with %d bytes appended" % (dtype, extra), ERROR, False)
        # one bit flipped: in the header (judged by the header it then holds) or in the weights
        for k in range(24):
            data = bytearray(raw)
            pos = rng.randrange(off, off + 28) if k < 12 else rng.randrange(off + 28, n)
            data[pos] ^= 1 << rng.randrange(8)
            p = _write(tmp, "flip%d_%d.bin" % (bi, k), data)
            h = header_of(data, off)
            size = llama2c_size(h)
            if size is not None and dtype == "i8":
                size = i8_size(h)
            tag = "%s bit flip at byte %d" % (dtype, pos)
            if size != len(data):
                cases += _model_cmds(p, ck.tok, tmp, tag, ERROR, False)
            else:
                # the same shape: the figures hold; a flipped weight may be NaN/inf (convert must then refuse)
                cases += _model_cmds(p, ck.tok, tmp, tag, EITHER, True, h, dtype)
        # int8 version field
        if dtype == "i8":
            for v in (0, 2, -1, 2 ** 31 - 1):
                data = bytearray(raw)
                struct.pack_into("<i", data, 4, v)
                p = _write(tmp, "ver_%d.bin" % v, data)
                cases += _model_cmds(p, ck.tok, tmp, "int8 version %d" % v, ERROR, False)
    return cases


def model_run_cases(ck):
    """Commands that run the model, on the valid files: a few real successes checked against what they
    must print (eval's full-cache row is its own reference: KL 0 and top-1 agreement 1)."""
    def eval_check(out):
        r = json.loads(out)
        row = r["quality"]["rows"][0]
        if row["name"] != "f32" or row["kl"] != 0.0 or row["top1"] != 1.0:
            return "eval's f32 row is not the reference: %s" % row
        return None

    def gen_check(out):
        return None if out.strip() else "no text generated"
    tok = ck.tok
    return [
        Case("run valid f32", ["eval", "--model", ck.f32, "--tokens", "6", "--only", "i8", "--json"], OK,
             check=eval_check, heavy=True),
        Case("run valid f32", ["generate", "--model", ck.f32, "--tokenizer", tok, "--steps", "6", "--prompt", "the"],
             OK, check=gen_check, heavy=True),
        Case("run valid i8", ["generate", "--model", ck.i8, "--tokenizer", tok, "--steps", "6", "--kv-dtype", "i8"],
             OK, check=gen_check, heavy=True),
        Case("run valid unshared", ["generate", "--model", ck.unshared, "--tokenizer", tok, "--steps", "5",
                                    "--temperature", "0.9", "--seed", "7"], OK, check=gen_check, heavy=True),
        Case("run prompt bytes", ["generate", "--model", ck.f32, "--tokenizer", tok, "--steps", "5",
                                  "--prompt", "\udcff\udcfe caf\u00e9"], OK, check=gen_check, heavy=True),
        Case("run prompt lone surrogate", ["generate", "--model", ck.f32, "--tokenizer", tok, "--prompt",
                                           "a\ud800b"], ERROR, ["--prompt", "surrogate"]),
    ]


# ---- tokenizers ----

def tokenizer_valid(data, vocab):
    """llama2.c's tokenizer file: int32 max_token_length, then vocab entries of f32 score, int32 length >= 0
    and that many bytes. Trailing bytes are not read."""
    at = 4
    if len(data) < 4:
        return False
    for _ in range(vocab):
        if at + 8 > len(data):
            return False
        n = struct.unpack_from("<i", data, at + 4)[0]
        if n < 0 or at + 8 + n > len(data):
            return False
        at += 8 + n
    return True


def tokenizer_cases(ck, rng):
    raw = open(ck.tok, "rb").read()
    cases = []
    variants = []
    for cut in (0, 2, 4, 8, 11, 12, 100, len(raw) // 2, len(raw) - 1):
        variants.append(("truncated to %d" % cut, raw[:cut]))
    variants.append(("with bytes appended", raw + b"\x00" * 9))
    # length field of an early and a late entry: negative, huge, zero
    offs = [4]
    at = 4
    for _ in range(351):
        at += 8 + struct.unpack_from("<i", raw, at + 4)[0]
        offs.append(at)
    for which in (0, 5, 300, 351):
        for v in (-1, -2 ** 31, 2 ** 31 - 1, 10 ** 6, 0, 7):
            d = bytearray(raw)
            struct.pack_into("<i", d, offs[which] + 4, v)
            variants.append(("entry %d length %d" % (which, v), bytes(d)))
        for sc in (NAN, float("inf"), -1e38):
            d = bytearray(raw)
            struct.pack_into("<f", d, offs[which], sc)
            variants.append(("entry %d score %r" % (which, sc), bytes(d)))
    for k in range(10):
        d = bytearray(raw)
        pos = rng.randrange(len(d))
        d[pos] ^= 1 << rng.randrange(8)
        variants.append(("bit flip at %d" % pos, bytes(d)))
    for i, (what, data) in enumerate(variants):
        p = _write(ck.tmp, "tok_%d.bin" % i, data)
        if tokenizer_valid(data, 352):
            cases.append(Case("tokenizer " + what, ["generate", "--model", ck.f32, "--tokenizer", p, "--steps", "3",
                                                    "--prompt", "hi"], OK, heavy=True))
        else:
            cases.append(Case("tokenizer " + what, ["generate", "--model", ck.f32, "--tokenizer", p, "--steps", "3"],
                              ERROR, [p]))
            cases.append(Case("tokenizer " + what, ["demo", "--model", ck.f32, "--tokenizer", p], ERROR, [p]))
    return cases


# ---- GGUF ----

GGUF_BASES = {
    "llama": ("llama", {"block_count": 22, "attention.head_count": 32, "attention.head_count_kv": 4,
                        "embedding_length": 2048, "feed_forward_length": 5632, "context_length": 2048}),
    "gemma2": ("gemma2", {"block_count": 26, "attention.head_count": 8, "attention.head_count_kv": 4,
                          "embedding_length": 2304, "feed_forward_length": 9216, "context_length": 8192,
                          "attention.key_length": 256, "attention.value_length": 256,
                          "attention.sliding_window": 4096}),
    "mha": ("llama", {"block_count": 4, "attention.head_count": 8, "embedding_length": 512, "context_length": 1024,
                      "vocab_size": 1000}),
}
GGUF_KEYS = ("block_count", "attention.head_count", "attention.head_count_kv", "embedding_length",
             "feed_forward_length", "context_length", "attention.key_length", "attention.value_length",
             "attention.sliding_window", "attention.sliding_window_pattern", "vocab_size")
GGUF_VALUES = [DELETE, ("u32", 0), ("i32", -1), ("u64", 2 ** 40), ("u64", 2 ** 64 - 1), ("f32", 1.5),
               ("f32", NAN), ("bool", True), ("str", "x"), ("arr", [1, 2]), ("arr", [0, 0]), ("u32", 7)]
GGUF_TENSOR_BYTES = 32 * 16 * 2 + 16 * 4  # token_embd (f16 32x16) + output_norm (f32 16)


def write_gguf(path, arch, meta):
    import gguf
    w = gguf.GGUFWriter(path, arch)
    w.add_name("fuzz-" + arch)
    for k, tv in meta.items():
        key = "%s.%s" % (arch, k)
        t, v = tv if isinstance(tv, tuple) else ("u32", tv)
        if t == "u32":
            w.add_uint32(key, v)
        elif t == "i32":
            w.add_int32(key, v)
        elif t == "u64":
            w.add_uint64(key, v)
        elif t == "f32":
            w.add_float32(key, v)
        elif t == "bool":
            w.add_bool(key, v)
        elif t == "str":
            w.add_string(key, v)
        else:
            w.add_array(key, v)
    w.add_tensor("token_embd.weight", np.zeros((32, 16), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.zeros(16, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _g(meta, key, lo, hi, required=False, per_layer=False):
    if key not in meta:
        if required:
            raise Bad(key)
        return None
    t, v = meta[key] if isinstance(meta[key], tuple) else ("u32", meta[key])
    if t == "arr" and per_layer:
        if not all(_is_int(x) and 0 <= x <= hi for x in v):
            raise Bad(key)
        nz = set(x for x in v if x)
        if len(nz) != 1:
            raise Bad(key)
        v = nz.pop()
    elif t == "arr" and key == "feed_forward_length":
        if not all(_is_int(x) and 0 <= x <= hi for x in v):
            raise Bad(key)
        v = max(v)
    elif t in ("bool", "str", "f32", "arr"):
        raise Bad(key)
    if not lo <= v <= hi:
        raise Bad(key)
    return v


def gguf_expect(arch, meta):
    """(layers, kv_heads, head_dim, context, windows) of GGUF metadata, or Bad(key) (llama.cpp's meaning)."""
    L = _g(meta, "block_count", 1, 4096, True)
    H = _g(meta, "attention.head_count", 1, 16384, True, per_layer=True)
    D = _g(meta, "embedding_length", 1, 1 << 20, True)
    KV = _g(meta, "attention.head_count_kv", 1, 16384, per_layer=True) or H
    if KV > H or H % KV:
        raise Bad("heads")
    HD = _g(meta, "attention.key_length", 1, 65536)
    if HD is None:
        if D % H:
            raise Bad("embedding_length")
        HD = D // H
    VL = _g(meta, "attention.value_length", 1, 65536)
    if VL is not None and VL != HD:
        raise Bad("value_length")
    _g(meta, "feed_forward_length", 1, 1 << 22)
    C = _g(meta, "context_length", 1, 1 << 26)
    _g(meta, "vocab_size", 1, 1 << 24)
    windows = [0] * L
    if "attention.sliding_window" in meta:
        t, w = meta["attention.sliding_window"] if isinstance(meta["attention.sliding_window"], tuple) \
            else ("u32", meta["attention.sliding_window"])
        if not (t in ("u32", "i32", "u64") and w == 0):
            w = _g(meta, "attention.sliding_window", 1, 1 << 26)
            pat = meta.get("attention.sliding_window_pattern")
            every = GLOBAL_EVERY.get(arch)
            if pat is not None:
                t, p = pat if isinstance(pat, tuple) else ("u32", pat)
                if t == "arr":
                    if len(p) != L:
                        raise Bad("sliding_window_pattern")
                    if not all(x in (0, 1) and not isinstance(x, float) for x in p):
                        raise Bad("sliding_window_pattern")
                    return L, KV, HD, C, [w if x else 0 for x in p]
                every = _g(meta, "attention.sliding_window_pattern", 1, 4096)
            windows = [w if not every or (i + 1) % every else 0 for i in range(L)]
    if not C:
        raise Bad("context")
    return L, KV, HD, C, windows


def gguf_cases(tmp, rng):
    cases = []
    n = 0
    for name, (arch, base) in GGUF_BASES.items():
        for key in GGUF_KEYS:
            for value in GGUF_VALUES:
                if value is DELETE and key not in base:
                    continue
                meta = dict(base)
                if value is DELETE:
                    del meta[key]
                else:
                    meta[key] = value
                if "attention.sliding_window_pattern" in meta and meta["attention.sliding_window_pattern"] == \
                        ("arr", [0, 0]) and key == "attention.sliding_window_pattern":
                    pass
                n += 1
                path = os.path.join(tmp, "g%04d_%s.gguf" % (n, name))
                try:
                    write_gguf(path, arch, meta)
                except Exception:  # the gguf writer refuses some values itself (e.g. a u64 out of range)
                    continue
                tag = "gguf %s %s=%s" % (name, key, "deleted" if value is DELETE else value)
                try:
                    L, KV, HD, C, windows = gguf_expect(arch, meta)
                except Bad as e:
                    cases.append(Case(tag, ["budget", "--model", path, "--json"], ERROR, [path, e.key]))
                    continue
                kv = sum(2 * KV * HD * 2 * (min(w, C) if w else C) for w in windows)
                exp = {"layers": L, "kv_heads": KV, "head_dim": HD, "context": C, "kv_cache_bytes": kv,
                       "weights_bytes": GGUF_TENSOR_BYTES}
                cases.append(Case(tag, ["budget", "--model", path, "--json"], OK, check=budget_check(exp)))
    # truncated and bit-flipped copies of the first base
    base = os.path.join(tmp, "gbase.gguf")
    write_gguf(base, "llama", GGUF_BASES["llama"][1])
    raw = open(base, "rb").read()
    for cut in sorted(set([0, 3, 4, 8, 16, 23, 24, 40, 100, len(raw) // 3, len(raw) // 2, len(raw) - 10,
                           len(raw) - 1])):
        p = _write(tmp, "gcut%d.gguf" % cut, raw[:cut])
        cases.append(Case("gguf truncated to %d of %d" % (cut, len(raw)), ["budget", "--model", p, "--json"],
                          ERROR, [p]))
    for k in range(60):
        d = bytearray(raw)
        pos = rng.randrange(0, min(len(d), 600)) if k < 50 else rng.randrange(len(d))
        d[pos] ^= 1 << rng.randrange(8)
        p = _write(tmp, "gflip%d.gguf" % k, d)
        cases.append(Case("gguf bit flip at byte %d" % pos, ["budget", "--model", p, "--json"], EITHER, [p],
                          check=_self_consistent))
    for k in (2, 10):  # every count field set absurdly high
        d = bytearray(raw)
        struct.pack_into("<Q", d, 8 if k == 2 else 16, 2 ** 60)
        p = _write(tmp, "gcount%d.gguf" % k, d)
        cases.append(Case("gguf count 2**60", ["budget", "--model", p, "--json"], ERROR, [p]))
    return cases


def _self_consistent(out):
    """A flipped GGUF that still reads: its KV figure must follow from the shape it reports."""
    r = json.loads(out)
    ctx = r["context"]
    per_layer = r["layer_windows"] or [0] * r["layers"]
    kv = sum(2 * r["kv_heads"] * r["head_dim"] * 2 * (min(w, ctx) if w else ctx) for w in per_layer)
    return None if kv == r["kv_cache_bytes"] else "kv_cache_bytes %d, the shape says %d" % (r["kv_cache_bytes"], kv)


# ---- hostile JSON, for every command that reads JSON ----

def hostile_json(tmp):
    """(label, path, valid JSON object?) of JSON texts built to break parsers."""
    texts = [
        ("deep arrays 100000", "[" * 100000 + "]" * 100000, False),
        ("deep objects 100000", '{"a":' * 100000 + "1" + "}" * 100000, False),
        ("deep mixed 5000", '{"num_hidden_layers":' + '[{"x":' * 2500 + "1" + "}]" * 2500 + "}", False),
        ("depth 65", '{"a":' * 65 + "1" + "}" * 65, False),
        ("depth 64", '{"a":' * 64 + "1" + "}" * 64, True),
        ("unclosed 10000", "[" * 10000, False),
        ("brackets in strings", json.dumps({"s": "[" * 100000, "num_hidden_layers": "{{{{"}), True),
        ("1e999", '{"num_hidden_layers": 1e999}', True),
        ("-1e999", '{"num_hidden_layers": -1e999, "kl": -1e999}', True),
        ("5000 digits", '{"num_hidden_layers": ' + "9" * 5000 + "}", False),
        ("NaN literal", '{"num_hidden_layers": NaN, "vocab_size": Infinity}', True),
        ("empty", "", False),
        ("null", "null", False),
        ("list", "[]", False),
        ("string", '"x"', False),
        ("number", "12", False),
        ("BOM", "\ufeff{}", False),
        ("duplicate keys", '{"num_hidden_layers": 2, "num_hidden_layers": 1e30}', True),
        ("huge string", json.dumps({"model_type": "x" * 1000000}), True),
        ("many keys", json.dumps({"k%d" % i: i for i in range(100000)}), True),
        ("control chars", '{"a": "\x00\x01"}', False),
    ]
    out = []
    for i, (label, text, obj) in enumerate(texts):
        p = os.path.join(tmp, "hostile%d.json" % i)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        out.append((label, p, obj))
    for label, data in (("utf-16", "{}".encode("utf-16")), ("invalid utf-8", b'{"a": "\xff\xfe"}'),
                        ("17 MB", b" " * (17 << 20) + b"{}")):
        p = _write(tmp, "hostile_%s.json" % label.replace(" ", "_"), data)
        out.append((label, p, False))
    return out


def json_cases(tmp):
    cases = []
    port = os.path.join(tmp, "no-such-port")
    for label, p, obj in hostile_json(tmp):
        tag = "hostile JSON " + label
        cases.append(Case(tag, ["budget", "--model", p], ERROR, [p]))
        cases.append(Case(tag, ["plan", "--preset", "stories260k", "--quality", p], ERROR, [p]))
        cases.append(Case(tag, ["deploy", "--port", port, "--config", p], ERROR, [p]))  # the plan is checked first
    return cases


# ---- --quality tables (kvedge eval --json) ----

def quality_table():
    rows = [{"name": "f32", "ppl": 5.1, "kl": 0.0, "top1": 1.0, "config": {"dtype": "f32"}},
            {"name": "i8", "ppl": 5.12, "kl": 0.004, "top1": 0.97, "config": {"dtype": "i8"}},
            {"name": "i4 KIVI (g32)", "ppl": 5.3, "kl": 0.05, "top1": 0.9, "config": {"dtype": "i4"}},
            {"name": "sinks 4 + window 124", "ppl": 6.0, "kl": 0.2, "top1": 0.8,
             "config": {"dtype": "f32", "window": 124, "sinks": 4}}]
    return {"model": "stories260K.bin", "quality": {"tokens": 512, "seed": 42, "rows": rows}}


METRIC_VALUES = [NAN, -1, -1e-9, "x", None, [], {}, True, 1e30, 10 ** 30, 10 ** 400, 0, 0.5, 1, 2,
                 float("inf")]
METRIC_RANGE = {"kl": (0.0, None), "ppl": (1.0, None), "top1": (0.0, 1.0)}


def _metric_ok(key, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        f = float(v)
    except OverflowError:
        return False
    lo, hi = METRIC_RANGE[key]
    return math.isfinite(f) and f >= lo and (hi is None or f <= hi)


def quality_cases(tmp):
    cases = []
    n = 0
    for ri in range(4):
        for key in ("kl", "ppl", "top1"):
            for v in METRIC_VALUES:
                doc = quality_table()
                doc["quality"]["rows"][ri][key] = v
                n += 1
                p = os.path.join(tmp, "q%03d.json" % n)
                with open(p, "w") as f:
                    json.dump(doc, f)
                tag = "quality row %d %s=%s" % (ri, key, show_value(v))
                argv = ["plan", "--preset", "stories260k", "--heap", "700000", "--weights-dtype", "i8", "--quality", p, "--json"]
                if _metric_ok(key, v):
                    cases.append(Case(tag, argv, OK, ok_codes=(0, 1), check=_ranked_by_measure))
                else:
                    cases.append(Case(tag, argv, ERROR, [p, key]))
        for field, v in (("name", 0), ("name", []), ("name", None), ("name", ["x"]), ("config", {"window": "x"}),
                         ("config", {"window": 10 ** 30}), ("config", {"window": 8, "sinks": -1})):
            doc = quality_table()
            doc["quality"]["rows"][ri][field] = v
            n += 1
            p = os.path.join(tmp, "q%03d.json" % n)
            with open(p, "w") as f:
                json.dump(doc, f)
            cases.append(Case("quality row %d %s=%s" % (ri, field, json.dumps(v)),
                              ["plan", "--preset", "stories260k", "--heap", "700000", "--weights-dtype", "i8", "--quality", p, "--json"],
                              ERROR, [p]))
    return cases


def _ranked_by_measure(out):
    r = json.loads(out)
    costs = []
    for c in r["configurations"]:
        q = c.get("quality")
        if q and not q.get("uncertain") and "kl" in q["metrics"]:
            costs.append(float("%.2g" % q["metrics"]["kl"]))
        else:
            break
    return None if costs == sorted(costs) else "measured rows out of order: %s" % costs


# ---- board profiles ----

BOARD_VALUES = [DELETE, 0, -1, 1e30, 10 ** 30, "x", None, [], {}, True, NAN, 1.5, 2 ** 41]


def board_expect(p, base, key):
    """(heap_bytes, workspace_bytes) of a valid board profile, or Bad(key). A profile cites a source for each
    figure (kvedge_host.profiles): a cited figure changed, or deleted, no longer matches its citation."""
    def size(k, lo, optional):
        v = p.get(k)
        if v is None and optional:
            return None
        if not _is_int(v) or not lo <= v <= 1 << 40:
            raise Bad(k)
        return v
    for k in ("heap_bytes", "mpy_march", "fast_memory"):
        if k not in p:
            raise Bad(k)
    if p.get("runtime", "micropython") not in ("micropython", "circuitpython"):
        raise Bad("runtime")
    if p.get("float", "single") not in ("single", "double", "single30"):
        raise Bad("float")
    heap = size("heap_bytes", 1, False)
    for k in ("workspace_bytes", "flash_bytes", "flash_fs_bytes", "sram_bytes"):
        size(k, 0, True)
    for k, optional in (("fast_memory", False), ("slow_memory", True)):
        m = p.get(k)
        if m is None and optional:
            continue
        if not isinstance(m, dict):
            raise Bad(k)
        if "bytes" in m and (not _is_int(m["bytes"]) or not 1 <= m["bytes"] <= 1 << 40):
            raise Bad(k)
        if m.get("kind") is not None and not isinstance(m["kind"], str):
            raise Bad(k)
    if not isinstance(p["mpy_march"], str) or not p["mpy_march"].isalnum() or p["mpy_march"] != \
            p["mpy_march"].lower() or not p["mpy_march"].isascii():
        raise Bad("mpy_march")
    v = p.get("notes")
    if v is not None and (not isinstance(v, list) or not all(isinstance(x, str) for x in v)):
        raise Bad("notes")
    for k in ("name", "title", "chip"):
        if p.get(k) is not None and not isinstance(p[k], str):
            raise Bad(k)
    srcs = p.get("sources", [])
    if not isinstance(srcs, list):
        raise Bad("sources")
    cited = set(s["figure"].split(".")[0] for s in srcs)
    if key in cited and (key not in p or p[key] != base[key] or type(p[key]) is not type(base[key])):
        raise Bad(key)
    return heap, p.get("workspace_bytes") or 0


def board_cases(tmp, boards_dir):
    """Profiles written into a boards folder of their own (the test points kvedge_host.profiles at it)."""
    base = json.load(open(os.path.join(boards_dir, "esp32-psram.json")))
    keys = list(base) + ["flash_fs_bytes"]
    cases = []
    n = 0
    for key in keys:
        for v in BOARD_VALUES:
            if v is DELETE and key not in base:
                continue
            prof = mutate(base, key, v)
            n += 1
            name = "fz%03d" % n
            with open(os.path.join(tmp, name + ".json"), "w") as f:
                json.dump(prof, f)
            tag = "board profile %s=%s" % (key, show_value(v))
            path = os.path.join(tmp, name + ".json")
            try:
                heap, ws = board_expect(prof, base, key)
            except Bad as e:
                cases.append(Case(tag, ["budget", "--preset", "stories260k", "--board", name], ERROR, [path, e.key]))
                continue
            cases.append(Case(tag, ["budget", "--preset", "stories260k", "--board", name, "--json"], OK,
                              check=budget_check({"heap_bytes": heap, "workspace_bytes": ws})))
    for name in ("../esp32", "/etc/passwd", ".", "a/b", "x" * 300):
        cases.append(Case("board name %r" % name[:20], ["budget", "--preset", "stories260k", "--board", name],
                          ERROR, ["unknown board"]))
    return cases


# ---- absurd flag values, for every command ----

ABSURD = ["0", "-1", "-5", "1e30", "1" + "0" * 30, "nan", "inf", "-inf", "abc", "", "0x10", "1.5", "9" * 40]


def _int_in(lo, hi):
    def ok(s):
        try:
            v = int(s)
        except ValueError:
            return False
        return lo <= v <= hi
    return ok


def _real_in(lo, hi=None, lo_open=False):
    def ok(s):
        try:
            v = float(s)
        except ValueError:
            return False
        return math.isfinite(v) and (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)
    return ok


def _never(s):
    return False


NAME_BAD = ["", "abc", "../x", "x" * 300, "0", "nan", "-1"]


def flag_cases(ck, tmp):
    """Every flag of every command with absurd values. Numbers: ABSURD (a value the flag accepts is run only
    where a success is cheap and harmless: budget, plan); names: NAME_BAD; paths: values that must be refused
    (nothing is ever started, written or waited for)."""
    m, tok = ck.f32, ck.tok
    port = os.path.join(tmp, "no-such-port")
    folder = os.path.join(tmp, "a-folder")
    os.makedirs(folder, exist_ok=True)
    afile = _write(tmp, "a-file.txt", b"x")
    path_bad = ["", "/nonexistent-dir/x.png", folder]
    T = 1 << 26
    num, name = "num", "name"
    spec = [
        ("budget", ["--model", m, "--json"], [("--context", _int_in(1, T)), ("--heap", _int_in(1, 1 << 40)),
                                             ("--workspace", _int_in(0, 1 << 40)), ("--batch", _int_in(1, 1 << 16)),
                                             ("--align", lambda s: s in ("0", "1")), ("--kv-dtype", name),
                                             ("--weights-dtype", name), ("--board", name), ("--plot", path_bad),
                                             ("--residual", _never)]),  # --kv-dtype f16: no residual at all
        ("plan", ["--model", m, "--json"], [("--context", _int_in(1, T)), ("--heap", _int_in(1, 1 << 40)),
                                           ("--batch", _int_in(1, 1 << 16)), ("--pick", _int_in(1, 1 << 20)),
                                           ("--top", _int_in(1, 1 << 20)), ("--align", lambda s: s in ("0", "1")),
                                           ("--weights-in", name), ("--kv-dtype", name), ("--out", path_bad),
                                           ("--quality", path_bad)]),
        ("eval", ["--model", m], [("--tokens", lambda s: s == "0" or _int_in(2, 64)(s)), ("--seed", _int_in(1, T)),
                                  ("--samples", _int_in(1, 256)), ("--window", _int_in(1, 64)),
                                  ("--sinks", _int_in(0, 3)), ("--align", lambda s: s in ("0", "1")),
                                  ("--contexts", _int_in(1, 64))]),
        ("generate", ["--model", m, "--tokenizer", tok], [
            ("--steps", _int_in(1, T)), ("--temperature", _real_in(0.0)), ("--seed", _int_in(1, 2 ** 64 - 1)),
            ("--max-tokens", _int_in(0, 256)), ("--window", _int_in(0, 256)), ("--sinks", _int_in(0, 256)),
            ("--prefix", _int_in(0, 64)), ("--h2o", _int_in(0, 256)), ("--stats-ms", _int_in(0, 86400000)),
            ("--align", lambda s: s in ("0", "1")), ("--heap", lambda s: s == "0" or _int_in(16384, 1 << 30)(s)),
            ("--kv-dtype", name), ("--kernels", name), ("--runtime", name), ("--board", name)]),
        ("check", ["--model", m], [("--cases", _int_in(0, 10000)), ("--seed", _int_in(0, 1 << 30)),
                                   ("--positions", _int_in(1, 64)), ("--kv-dtype", name), ("--runtime", name)]),
        ("sim", [], [("--heap", _int_in(16384, 1 << 30)), ("--board", name), ("--fs", ["", afile]),
                     ("--link", ["", "/nonexistent-dir/x", folder, afile])]),
        ("monitor", ["--port", port], [("--baud", _int_in(1, 10 ** 7)), ("--alert-pct", _real_in(0, 100, True)),
                                       ("--duration", _real_in(0, 1e9, True)), ("--samples", _int_in(1, 1 << 62)),
                                       ("--csv", path_bad), ("--plot", path_bad)]),
        ("test", ["--sim", "rp2040"], [("--timeout", _real_in(0, 7 * 86400, True)), ("--board", name)]),
        ("test", ["--port", port], [("--timeout", _real_in(0, 7 * 86400, True))]),
        ("deploy", ["--port", port], [("--board", name), ("--march", name), ("--config", path_bad),
                                      ("--extra", path_bad)]),
        ("demo", ["--model", m, "--tokenizer", tok], [("--steps", _int_in(1, T)), ("--temperature", _real_in(0.0)),
                                                      ("--seed", _int_in(1, 2 ** 64 - 1)),
                                                      ("--stats-ms", _int_in(0, 86400000)),
                                                      ("--timeout", _real_in(0, 7 * 86400, True)),
                                                      ("--board", name),
                                                      ("--workdir", ["", afile, "/nonexistent-dir/x"])]),
        ("convert", [m, "--force"], [("-o", path_bad)]),
    ]
    cases = []
    for cmd, base, flags in spec:
        for flag, kind in flags:
            if isinstance(kind, list):
                values, valid = kind, _never
            elif kind == name:
                values, valid = NAME_BAD, _never
            else:
                values, valid = ABSURD, kind
            for v in values:
                tag = "flag %s %s %r" % (cmd, flag, v[:20])
                if valid(v):
                    if cmd in ("budget", "plan"):
                        cases.append(Case(tag, [cmd] + base + [flag, v], OK, ok_codes=(0, 1)))
                    continue
                mention = flag if kind is valid and not isinstance(kind, list) and kind != name else v
                if flag == "--march":
                    mention = flag
                cases.append(Case(tag, [cmd] + base + [flag, v], ERROR, [mention]))
    return cases
