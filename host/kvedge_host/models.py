"""One internal model description (ModelSpec) read from several sources: a Hugging Face config.json, GGUF metadata,
a llama2.c .bin checkpoint header, or a built-in preset.

Only the model's shape is read here; every byte figure comes from kvedge.budget. A problem with a file raises
ModelError (a ValueError) whose one-line message names the file and the problem."""
import json
import os
import struct
from dataclasses import dataclass, field
from typing import List, Optional

from kvedge import budget


class ModelError(ValueError):
    pass


@dataclass
class ModelSpec:
    name: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    dim: int
    hidden_dim: int
    vocab: int
    context: int  # trained context; 0 = the source does not say (the user must give --context)
    shared_classifier: bool = True
    # per layer: sliding window size, or 0 for a global (full-context) layer; empty = all global
    layer_windows: List[int] = field(default_factory=list)
    weights_dtype: str = "f32"  # storage of the source's weights, as one of budget.WEIGHT_DTYPES
    weights_file_bytes: Optional[int] = None  # exact tensor bytes when the source holds the weights (GGUF)
    source: str = ""
    notes: List[str] = field(default_factory=list)

    def windows(self):
        return self.layer_windows or [0] * self.layers

    @property
    def attention(self):
        if self.kv_heads == self.heads:
            return "MHA"
        if self.kv_heads == 1:
            return "MQA"
        return "GQA (%d query heads per KV head)" % (self.heads // self.kv_heads)

    def window_summary(self):
        w = self.windows()
        local = [x for x in w if x]
        if not local:
            return "none (every layer global)"
        if len(local) == len(w):
            return "%d tokens in every layer" % local[0] if len(set(local)) == 1 else "per layer"
        return "%d of %d layers local (window %s), the rest global" % (
            len(local), len(w), "/".join(str(x) for x in sorted(set(local))))


def _positive(path, key, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError("%s: %s must be an integer, got %r" % (path, key, value))
    if value <= 0:
        raise ModelError("%s: %s must be positive, got %d" % (path, key, value))
    return value


def _check_shape(path, spec):
    for key in ("layers", "heads", "kv_heads", "head_dim", "dim", "hidden_dim"):
        _positive(path, key, getattr(spec, key))
    if spec.vocab < 0 or spec.context < 0:
        raise ModelError("%s: vocab and context must not be negative" % path)
    if spec.kv_heads > spec.heads or spec.heads % spec.kv_heads:
        raise ModelError("%s: %d attention heads are not a multiple of %d KV heads"
                         % (path, spec.heads, spec.kv_heads))
    if spec.layer_windows and len(spec.layer_windows) != spec.layers:
        raise ModelError("%s: %d per-layer windows for %d layers" % (path, len(spec.layer_windows), spec.layers))
    for key, top in (("layers", "layers"), ("heads", "heads"), ("kv_heads", "kv_heads"), ("head_dim", "head_dim")):
        try:
            budget.check_int(top, getattr(spec, key))
        except ValueError as e:
            raise ModelError("%s: %s" % (path, e))
    return spec


# ---- Hugging Face config.json ----

# Other names configs use for the same fields (GPT-2 style, T5/OPT style).
_ALIASES = {
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
    "num_attention_heads": ("n_head", "num_heads", "n_heads"),
    "hidden_size": ("n_embd", "d_model", "dim"),
    "intermediate_size": ("n_inner", "ffn_dim", "hidden_dim"),
    "max_position_embeddings": ("n_positions", "n_ctx", "seq_length", "max_seq_len"),
}

# Defaults transformers applies when a config.json omits a key (configuration_<model>.py). Gemma-3's multimodal
# configs (gemma-3-4b and up) carry a `text_config` that lists only what differs from Gemma3TextConfig.
_MODEL_DEFAULTS = {
    "gemma3_text": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
                    "max_position_embeddings": 131072, "sliding_window": 4096, "sliding_window_pattern": 6,
                    "tie_word_embeddings": True},
    "gemma2": {"head_dim": 256, "sliding_window": 4096, "tie_word_embeddings": True},
    "gemma": {"head_dim": 256, "tie_word_embeddings": True},
}

# Every Nth layer is global, the others use the sliding window (transformers' layer_types defaults).
_PATTERNS = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6, "cohere2": 4}

_TORCH_DTYPES = {"float32": "f32", "float": "f32", "float16": "f16", "half": "f16", "bfloat16": "f16"}


def _get(cfg, key, default=None):
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    for alt in _ALIASES.get(key, ()):
        if alt in cfg and cfg[alt] is not None:
            return cfg[alt]
    return default


def _need(path, cfg, key):
    v = _get(cfg, key)
    if v is None:
        raise ModelError("%s: missing %s" % (path, key))
    return _positive(path, key, v)


def _hf_windows(path, cfg, layers):
    """Per-layer sliding windows of a transformers config (0 = global layer)."""
    window = cfg.get("sliding_window")
    if window is None:
        window = cfg.get("sliding_window_size")  # older Gemma-2 configs
    if cfg.get("use_sliding_window") is False or not window:
        return [], "no sliding window"
    _positive(path, "sliding_window", window)
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise ModelError("%s: layer_types must list one entry per layer (%d)" % (path, layers))
        return [window if t == "sliding_attention" else 0 for t in types], "layer_types"
    mtype = cfg.get("model_type", "")
    if mtype.startswith("qwen") and "max_window_layers" in cfg:
        # Qwen2/Qwen3 with use_sliding_window true: layers from max_window_layers on use the window
        first = cfg["max_window_layers"]
        return [window if i >= first else 0 for i in range(layers)], "max_window_layers %d" % first
    pattern = cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern") or _PATTERNS.get(mtype)
    if pattern:
        _positive(path, "sliding_window_pattern", pattern)
        return ([window if (i + 1) % pattern else 0 for i in range(layers)],
                "every %d%s layer global" % (pattern, {2: "nd", 3: "rd"}.get(pattern, "th")))
    return [window] * layers, "every layer"  # Mistral, Phi-3: one window for all layers


def from_hf_config(cfg, path="config.json", name=None):
    """ModelSpec from a parsed transformers config dict."""
    if not isinstance(cfg, dict):
        raise ModelError("%s: expected a JSON object, got %s" % (path, type(cfg).__name__))
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]  # multimodal wrapper (Gemma-3 4B+, Llava): the text model holds the cache
    defaults = _MODEL_DEFAULTS.get(cfg.get("model_type", ""), {})
    used = sorted(k for k in defaults if k not in cfg)
    cfg = dict(defaults, **cfg)
    notes = []
    if used:
        notes.append("transformers defaults for %s: %s" % (cfg.get("model_type"), ", ".join(used)))
    if cfg.get("kv_lora_rank"):
        raise ModelError("%s: multi-head latent attention (kv_lora_rank) is not supported" % path)
    layers = _need(path, cfg, "num_hidden_layers")
    heads = _need(path, cfg, "num_attention_heads")
    dim = _need(path, cfg, "hidden_size")
    kv_heads = _get(cfg, "num_key_value_heads")
    if kv_heads is None:
        kv_heads = heads
        notes.append("num_key_value_heads absent: MHA")
    _positive(path, "num_key_value_heads", kv_heads)
    head_dim = _get(cfg, "head_dim")
    if head_dim is None:
        if dim % heads:
            raise ModelError("%s: hidden_size %d is not a multiple of %d heads and head_dim is absent"
                             % (path, dim, heads))
        head_dim = dim // heads
    _positive(path, "head_dim", head_dim)
    hidden = _get(cfg, "intermediate_size")
    if hidden is None:
        hidden = 4 * dim
        notes.append("intermediate_size absent: 4 x hidden_size")
    _positive(path, "intermediate_size", hidden)
    vocab = _need(path, cfg, "vocab_size")
    context = _get(cfg, "max_position_embeddings", 0)
    if context:
        _positive(path, "max_position_embeddings", context)
    tdtype = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    if tdtype not in _TORCH_DTYPES:
        raise ModelError("%s: unknown torch_dtype %r" % (path, tdtype))
    windows, how = _hf_windows(path, cfg, layers)
    if windows and any(windows):
        notes.append("sliding window: " + how)
    else:
        windows = []
    spec = ModelSpec(name or cfg.get("_name_or_path") or os.path.basename(os.path.dirname(os.path.abspath(path)))
                     or "model", layers, heads, kv_heads, head_dim, dim, hidden, vocab, context,
                     shared_classifier=bool(cfg.get("tie_word_embeddings", False)), layer_windows=windows,
                     weights_dtype=_TORCH_DTYPES[tdtype], source="Hugging Face config %s" % path, notes=notes)
    return _check_shape(path, spec)


def read_hf_config(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError("%s: cannot read: %s" % (path, getattr(e, "strerror", None) or e))
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise ModelError("%s: not valid JSON: %s" % (path, e))
    return from_hf_config(cfg, path)


# ---- GGUF ----

def _gguf_value(field_):
    """A scalar, string or list from a gguf ReaderField."""
    from gguf import GGUFValueType
    vt = field_.types[0] if field_.types else None
    if vt == GGUFValueType.STRING:
        return bytes(field_.parts[field_.data[0]]).decode("utf-8", "replace")
    if vt == GGUFValueType.ARRAY:
        sub = field_.types[1] if len(field_.types) > 1 else None
        if sub == GGUFValueType.STRING:
            return [bytes(field_.parts[i]).decode("utf-8", "replace") for i in field_.data]
        return [field_.parts[i].tolist()[0] for i in field_.data]
    return field_.parts[field_.data[0]].tolist()[0]


def _per_layer(path, key, v):
    """GGUF head counts may be per-layer arrays: accept them when every attention layer agrees."""
    if isinstance(v, list):
        vals = set(x for x in v if x)
        if len(vals) != 1:
            raise ModelError("%s: %s differs between layers (%s): not supported" % (path, key, sorted(vals)))
        return vals.pop()
    return v


def read_gguf(path):
    """ModelSpec from GGUF metadata; the weights are the file's tensors, counted exactly."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelError("%s: cannot read: %s" % (path, e.strerror or e))
    if magic != b"GGUF":
        raise ModelError("%s: not a GGUF file (magic %r)" % (path, magic))
    try:
        from gguf import GGUFReader
        reader = GGUFReader(path, "r")
        arch_field = reader.fields.get("general.architecture")
        arch = _gguf_value(arch_field) if arch_field is not None else None
        # decode only the keys used here: a tokenizer's arrays hold 10^5 entries
        meta = {k: _gguf_value(f) for k, f in reader.fields.items()
                if k.startswith("general.") or (arch and k.startswith(arch + "."))}
        toks = reader.fields.get("tokenizer.ggml.tokens")
        n_tokens = len(toks.data) if toks is not None else None
        tensors = [(t.name, int(t.n_bytes), [int(x) for x in t.shape]) for t in reader.tensors]
    except ModelError:
        raise
    except Exception as e:  # the gguf package raises many types on a short or damaged file
        raise ModelError("%s: truncated or malformed GGUF (%s: %s)" % (path, type(e).__name__, e))
    if not isinstance(arch, str) or not arch:
        raise ModelError("%s: missing general.architecture" % path)

    def key(name, default=None, required=False):
        k = "%s.%s" % (arch, name)
        if k in meta:
            return meta[k]
        if required:
            raise ModelError("%s: missing %s" % (path, k))
        return default

    notes = []
    layers = _positive(path, arch + ".block_count", key("block_count", required=True))
    heads = _positive(path, arch + ".attention.head_count",
                      _per_layer(path, "head_count", key("attention.head_count", required=True)))
    dim = _positive(path, arch + ".embedding_length", key("embedding_length", required=True))
    kv_heads = key("attention.head_count_kv")
    if kv_heads is None:
        kv_heads = heads
        notes.append("head_count_kv absent: MHA")
    kv_heads = _positive(path, arch + ".attention.head_count_kv", _per_layer(path, "head_count_kv", kv_heads))
    k_len = key("attention.key_length")
    if k_len is None:
        if dim % heads:
            raise ModelError("%s: embedding_length %d is not a multiple of %d heads and key_length is absent"
                             % (path, dim, heads))
        k_len = dim // heads
    _positive(path, arch + ".attention.key_length", k_len)
    v_len = _positive(path, arch + ".attention.value_length", key("attention.value_length", k_len))
    if v_len != k_len:
        raise ModelError("%s: key_length %d != value_length %d: not supported" % (path, k_len, v_len))
    hidden = key("feed_forward_length")
    if isinstance(hidden, list):
        hidden = max(hidden)
    if hidden is None:
        hidden = 4 * dim
        notes.append("feed_forward_length absent: 4 x embedding_length")
    _positive(path, arch + ".feed_forward_length", hidden)
    context = key("context_length", 0)
    if context:
        _positive(path, arch + ".context_length", context)
    else:
        notes.append("context_length absent: give --context")
    vocab = key("vocab_size")
    if vocab is None:
        emb = [s for n, _, s in tensors if n == "token_embd.weight"]
        vocab = n_tokens if n_tokens else (emb[0][-1] if emb and len(emb[0]) > 1 else 0)
    windows = []
    swa = key("attention.sliding_window")
    if swa:
        _positive(path, arch + ".attention.sliding_window", swa)
        pat = key("attention.sliding_window_pattern")
        if isinstance(pat, list):  # one flag per layer: true = sliding
            if len(pat) != layers:
                raise ModelError("%s: sliding_window_pattern has %d entries for %d layers" % (path, len(pat), layers))
            windows = [swa if p else 0 for p in pat]
        else:
            n = pat or _PATTERNS.get(arch)  # llama.cpp: gemma2 every 2nd, gemma3 every 6th layer global
            windows = [swa if not n or (i + 1) % n else 0 for i in range(layers)]
        notes.append("sliding window %d" % swa)
    names = set(n for n, _, _ in tensors)
    spec = ModelSpec(meta.get("general.name") or os.path.basename(path), layers, heads, kv_heads, k_len, dim,
                     hidden, vocab, context, shared_classifier="output.weight" not in names, layer_windows=windows,
                     weights_dtype="f16", weights_file_bytes=sum(b for _, b, _ in tensors),
                     source="GGUF %s (%s, %d tensors)" % (path, arch, len(tensors)), notes=notes)
    return _check_shape(path, spec)


# ---- llama2.c .bin ----

def read_llama2c(path):
    """Header of a llama2.c .bin checkpoint: seven little-endian int32, then float32 weights."""
    try:
        with open(path, "rb") as f:
            head = f.read(28)
        size = os.path.getsize(path)
    except OSError as e:
        raise ModelError("%s: cannot read: %s" % (path, e.strerror or e))
    if len(head) < 28:
        raise ModelError("%s: truncated llama2.c header (%d of 28 bytes)" % (path, len(head)))
    dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", head)
    shared = vocab > 0
    vocab = abs(vocab)
    for k, v in (("dim", dim), ("hidden_dim", hidden), ("n_layers", layers), ("n_heads", heads),
                 ("n_kv_heads", kv_heads), ("vocab_size", vocab), ("seq_len", seq)):
        if v <= 0:
            raise ModelError("%s: llama2.c header field %s is %d (must be positive)" % (path, k, v))
    for k, v in (("n_layers", layers), ("n_heads", heads), ("n_kv_heads", kv_heads), ("dim", dim),
                 ("hidden_dim", hidden), ("vocab_size", vocab), ("seq_len", seq)):
        if v > (1 << 26):
            raise ModelError("%s: llama2.c header field %s is %d: absurd (not a llama2.c checkpoint?)" % (path, k, v))
    if dim % heads or heads % kv_heads:
        raise ModelError("%s: llama2.c header has dim %d, %d heads, %d KV heads: not divisible"
                         % (path, dim, heads, kv_heads))
    # the float32 weights that must follow (see ../shared/models/README.md): the matrices and norms, the two
    # legacy RoPE tables, and the classifier when it is not shared
    p = budget.llama_params(dim, hidden, layers, heads, kv_heads, vocab, shared)
    floats = p["embedding"] + p["matrices"] + p["norms"] + p["classifier"] + seq * (dim // heads)
    if size < 28 + 4 * floats:
        raise ModelError("%s: truncated llama2.c checkpoint: %d bytes, the header promises %d"
                         % (path, size, 28 + 4 * floats))
    return ModelSpec(os.path.basename(path), layers, heads, kv_heads, dim // heads, dim, hidden, vocab, seq,
                     shared_classifier=shared, source="llama2.c checkpoint %s (%d bytes)" % (path, size))


# ---- built-in presets: small models people put on edge devices ----

PRESETS = {
    "stories260k": {
        "source": "llama2.c tinyllamas stories260K: header of ../shared/models/stories260K.bin "
                  "(github.com/karpathy/llama2.c, huggingface.co/karpathy/tinyllamas/tree/main/stories260K)",
        "config": {"num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4, "hidden_size": 64,
                   "intermediate_size": 172, "vocab_size": 512, "max_position_embeddings": 512,
                   "tie_word_embeddings": True, "torch_dtype": "float32"}},
    "stories15m": {
        "source": "llama2.c README model table (dim 288, 6 layers, 6 heads, context 256; hidden 768 from "
                  "llama2.c's multiple_of rule), github.com/karpathy/llama2.c",
        "config": {"num_hidden_layers": 6, "num_attention_heads": 6, "hidden_size": 288, "intermediate_size": 768,
                   "vocab_size": 32000, "max_position_embeddings": 256, "tie_word_embeddings": True,
                   "torch_dtype": "float32"}},
    "stories110m": {
        "source": "llama2.c README model table (dim 768, 12 layers, 12 heads, context 1024, hidden 2048), "
                  "github.com/karpathy/llama2.c",
        "config": {"num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768,
                   "intermediate_size": 2048, "vocab_size": 32000, "max_position_embeddings": 1024,
                   "tie_word_embeddings": True, "torch_dtype": "float32"}},
    "smollm2-135m": {
        "source": "huggingface.co/HuggingFaceTB/SmolLM2-135M/blob/main/config.json",
        "config": {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
                   "intermediate_size": 1536, "vocab_size": 49152, "max_position_embeddings": 8192,
                   "tie_word_embeddings": True, "torch_dtype": "bfloat16"}},
    "qwen2.5-0.5b": {
        "source": "huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json (use_sliding_window false)",
        "config": {"model_type": "qwen2", "num_hidden_layers": 24, "num_attention_heads": 14,
                   "num_key_value_heads": 2, "hidden_size": 896, "intermediate_size": 4864, "vocab_size": 151936,
                   "max_position_embeddings": 32768, "sliding_window": 32768, "use_sliding_window": False,
                   "max_window_layers": 24, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}},
    "tinyllama-1.1b": {
        "source": "huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0/blob/main/config.json",
        "config": {"num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
                   "hidden_size": 2048, "intermediate_size": 5632, "vocab_size": 32000,
                   "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}},
    "llama2-7b": {
        "source": "huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json",
        "config": {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                   "hidden_size": 4096, "intermediate_size": 11008, "vocab_size": 32000,
                   "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "float16"}},
}


def preset(name):
    key = name.lower()
    if key not in PRESETS:
        raise ModelError("unknown preset %r (known: %s)" % (name, ", ".join(sorted(PRESETS))))
    p = PRESETS[key]
    spec = from_hf_config(p["config"], "preset " + key, name=key)
    spec.source = "preset %s: %s" % (key, p["source"])
    return spec


def load(path=None, preset_name=None):
    """A ModelSpec from --preset NAME or --model PATH (.bin, .gguf, config.json or a folder holding one)."""
    if preset_name:
        return preset(preset_name)
    if not path:
        raise ModelError("give --model PATH or --preset NAME")
    if os.path.isdir(path):
        cand = os.path.join(path, "config.json")
        if not os.path.exists(cand):
            raise ModelError("%s: a folder without config.json" % path)
        path = cand
    low = path.lower()
    if low.endswith(".gguf"):
        return read_gguf(path)
    if low.endswith(".json"):
        return read_hf_config(path)
    if low.endswith(".bin"):
        return read_llama2c(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelError("%s: cannot read: %s" % (path, e.strerror or e))
    if magic == b"GGUF":
        return read_gguf(path)
    raise ModelError("%s: unknown model file type (expected .bin, config.json or .gguf)" % path)
