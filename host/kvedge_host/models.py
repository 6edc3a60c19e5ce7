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

from . import validate
from .validate import InputError


class ModelError(InputError):
    pass


# Bounds of a model's shape, checked before anything is built per layer or per token (kvedge.budget.LIMITS
# where it has one; the others are far past any model that exists).
MAX_LAYERS = budget.LIMITS["layers"]
MAX_HEADS = budget.LIMITS["heads"]
MAX_HEAD_DIM = budget.LIMITS["head_dim"]
MAX_DIM = 1 << 20
MAX_HIDDEN = 1 << 22
MAX_VOCAB = 1 << 24
MAX_CONTEXT = budget.LIMITS["tokens"]


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
    context_key: str = "context length"  # what the source calls its context (for "give --context")

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


def _whole(path, key, value, lo, hi):
    try:
        return validate.whole(path, key, value, lo, hi)
    except InputError as e:
        raise ModelError(str(e))


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
    """(the key the config uses, its value): `key` or one of its aliases; null counts as absent."""
    for k in (key,) + _ALIASES.get(key, ()):
        if cfg.get(k) is not None:
            return k, cfg[k]
    return key, default


def _field(path, cfg, key, lo, hi, default=None, required=True):
    """A whole-number field in lo..hi, named as the config names it; absent: `default`, or an error."""
    used, v = _get(cfg, key)
    if v is None:
        if required:
            raise ModelError("%s: missing %s" % (path, key))
        return default
    return _whole(path, used, v, lo, hi)


def _flag(path, cfg, key, default):
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ModelError("%s: %s is %s, expected true or false" % (path, key, validate.show(v)))
    return v


def _hf_windows(path, cfg, layers, mtype):
    """Per-layer sliding windows of a transformers config (0 = global layer); `layers` is already bounded."""
    if not _flag(path, cfg, "use_sliding_window", True):
        return [], "no sliding window"
    key = "sliding_window" if cfg.get("sliding_window") is not None else "sliding_window_size"  # old Gemma-2
    window = cfg.get(key)
    if window is None or (window == 0 and not isinstance(window, bool)):
        return [], "no sliding window"
    window = _whole(path, key, window, 1, MAX_CONTEXT)
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise ModelError("%s: layer_types is %s, expected a list of one entry per layer (%d)"
                             % (path, validate.show(types), layers))
        for t in types:
            if not isinstance(t, str):
                raise ModelError("%s: layer_types holds %s, expected names such as \"sliding_attention\""
                                 % (path, validate.show(t)))
        return [window if t == "sliding_attention" else 0 for t in types], "layer_types"
    if mtype.startswith("qwen") and cfg.get("max_window_layers") is not None:
        # Qwen2/Qwen3 with use_sliding_window true: layers from max_window_layers on use the window
        first = _whole(path, "max_window_layers", cfg["max_window_layers"], 0, MAX_LAYERS)
        return [window if i >= first else 0 for i in range(layers)], "max_window_layers %d" % first
    pattern = _PATTERNS.get(mtype)
    for key in ("sliding_window_pattern", "_sliding_window_pattern"):
        if cfg.get(key) is not None:
            pattern = _whole(path, key, cfg[key], 1, MAX_LAYERS)
            break
    if pattern:
        return ([window if (i + 1) % pattern else 0 for i in range(layers)],
                "every %d%s layer global" % (pattern, {2: "nd", 3: "rd"}.get(pattern, "th")))
    return [window] * layers, "every layer"  # Mistral, Phi-3: one window for all layers


def _hf_name(outer, cfg, mtype, path):
    """The model's name as the config gives it (_name_or_path, the outer one first for a multimodal wrapper,
    then model_type), else the file's own name without .json: never the folder's, which is often just
    "configs" or a download cache's hash."""
    for c in (outer, cfg):
        given = c.get("_name_or_path")
        if isinstance(given, str) and given.strip():
            return given.strip()
    if mtype.strip():
        return mtype.strip()
    base = os.path.basename(path)
    if base.lower().endswith(".json"):
        base = base[:-5]
    return base or "model"


def from_hf_config(cfg, path="config.json", name=None):
    """ModelSpec from a parsed transformers config dict. Every field is checked (type and range) before it is
    used; a bad one raises ModelError naming the file, the key as the config spells it, and its value."""
    if not isinstance(cfg, dict):
        raise ModelError("%s: expected a JSON object, got %s" % (path, validate.show(cfg)))
    outer = cfg
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]  # multimodal wrapper (Gemma-3 4B+, Llava): the text model holds the cache
    mtype = cfg.get("model_type")
    if mtype is None:
        mtype = ""
    elif not isinstance(mtype, str):
        raise ModelError("%s: model_type is %s, expected a name such as \"llama\"" % (path, validate.show(mtype)))
    defaults = _MODEL_DEFAULTS.get(mtype, {})
    used = sorted(k for k in defaults if k not in cfg)
    cfg = dict(defaults, **cfg)
    notes = []
    if used:
        notes.append("transformers defaults for %s: %s" % (mtype, ", ".join(used)))
    mla = cfg.get("kv_lora_rank")
    if mla is not None and mla != 0:
        raise ModelError("%s: multi-head latent attention (kv_lora_rank) is not supported" % path)
    layers = _field(path, cfg, "num_hidden_layers", 1, MAX_LAYERS)
    heads = _field(path, cfg, "num_attention_heads", 1, MAX_HEADS)
    dim = _field(path, cfg, "hidden_size", 1, MAX_DIM)
    kv_heads = _field(path, cfg, "num_key_value_heads", 1, MAX_HEADS, required=False)
    if kv_heads is None:
        kv_heads = heads
        notes.append("num_key_value_heads absent: MHA")
    if kv_heads > heads or heads % kv_heads:
        raise ModelError("%s: %d attention heads are not a multiple of %d KV heads" % (path, heads, kv_heads))
    head_dim = _field(path, cfg, "head_dim", 1, MAX_HEAD_DIM, required=False)
    if head_dim is None:
        if dim % heads:
            raise ModelError("%s: hidden_size %d is not a multiple of %d heads and head_dim is absent"
                             % (path, dim, heads))
        head_dim = dim // heads
    hidden = _field(path, cfg, "intermediate_size", 1, MAX_HIDDEN, required=False)
    if hidden is None:
        hidden = 4 * dim
        notes.append("intermediate_size absent: 4 x hidden_size")
    vocab = _field(path, cfg, "vocab_size", 1, MAX_VOCAB)
    ctx_key, _ = _get(cfg, "max_position_embeddings")
    context = _field(path, cfg, "max_position_embeddings", 1, MAX_CONTEXT, 0, required=False)
    dkey = "torch_dtype" if cfg.get("torch_dtype") is not None else "dtype"
    tdtype = cfg.get(dkey)
    if tdtype is None:
        tdtype = "float32"
    if not isinstance(tdtype, str) or tdtype not in _TORCH_DTYPES:
        raise ModelError("%s: unknown %s %s (expected one of %s)" % (
            path, dkey, validate.show(tdtype) if not isinstance(tdtype, str) else repr(tdtype),
            ", ".join(sorted(_TORCH_DTYPES))))
    shared = _flag(path, cfg, "tie_word_embeddings", False)
    windows, how = _hf_windows(path, cfg, layers, mtype)
    if windows and any(windows):
        notes.append("sliding window: " + how)
    else:
        windows = []
    spec = ModelSpec(name or _hf_name(outer, cfg, mtype, path), layers, heads, kv_heads, head_dim, dim, hidden, vocab, context,
                     shared_classifier=shared, layer_windows=windows,
                     weights_dtype=_TORCH_DTYPES[tdtype], source="Hugging Face config %s" % path, notes=notes,
                     context_key=ctx_key)
    return spec


def read_hf_config(path):
    try:
        cfg = validate.load_json(path)
    except InputError as e:
        raise ModelError(str(e))
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


def _per_layer(path, key, v, lo, hi):
    """GGUF head counts may be per-layer arrays: accept them when every attention layer agrees (0 = a layer
    without attention)."""
    if isinstance(v, list):
        for x in v:
            _whole(path, key, x, 0, hi)
        vals = set(x for x in v if x)
        if len(vals) != 1:
            raise ModelError("%s: %s differs between layers (%s): not supported" % (
                path, key, ", ".join(str(x) for x in sorted(vals)[:8]) or "all 0"))
        v = vals.pop()
    return _whole(path, key, v, lo, hi)


_GGUF_MIN_KV = 8 + 4 + 1  # key length, value type, at least one byte of value (an empty key is not allowed)
_GGUF_MIN_TENSOR = 8 + 1 + 4 + 8 + 4 + 8  # name length, name, n_dims, one dim, type, offset


def _gguf_counts(path, head, size):
    """Version and the two counts of a GGUF header, checked against the file's size before the reader loops
    over them (a flipped bit there would otherwise ask for 2**60 entries)."""
    if len(head) < 24:
        raise ModelError("%s: truncated or malformed GGUF (header %d of 24 bytes)" % (path, len(head)))
    version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:24])
    if version not in (2, 3):
        raise ModelError("%s: GGUF version %d (this reader knows versions 2 and 3)" % (path, version))
    if n_kv * _GGUF_MIN_KV + n_tensors * _GGUF_MIN_TENSOR > size - 24:
        raise ModelError("%s: truncated or malformed GGUF (the header promises %s tensors and %s keys, the file "
                         "has %s bytes)" % (path, validate.show(n_tensors), validate.show(n_kv), format(size, ",")))


def read_gguf(path):
    """ModelSpec from GGUF metadata; the weights are the file's tensors, counted exactly."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
        size = os.path.getsize(path)
    except OSError as e:
        raise ModelError("%s: cannot read: %s" % (path, e.strerror or e))
    if head[:4] != b"GGUF":
        raise ModelError("%s: not a GGUF file (magic %r)" % (path, head[:4]))
    _gguf_counts(path, head, size)
    try:
        from gguf import GGUFReader
        reader = GGUFReader(path, "r")
        arch_field = reader.fields.get("general.architecture")
        arch = _gguf_value(arch_field) if arch_field is not None else None
        # decode only the keys used here: a tokenizer's arrays hold 10^5 entries
        meta = {k: _gguf_value(f) for k, f in reader.fields.items()
                if k.startswith("general.") or (isinstance(arch, str) and arch and k.startswith(arch + "."))}
        toks = reader.fields.get("tokenizer.ggml.tokens")
        n_tokens = len(toks.data) if toks is not None else None
        tensors = [(t.name, int(t.n_bytes), [int(x) for x in t.shape]) for t in reader.tensors]
        data_end = max([int(t.data_offset) + int(t.n_bytes) for t in reader.tensors] or [0])
    except ModelError:
        raise
    except Exception as e:  # the gguf package raises many types on a short or damaged file
        raise ModelError("%s: truncated or malformed GGUF (%s: %s)" % (
            path, type(e).__name__, (str(e).splitlines() or [""])[0][:200]))
    if not isinstance(arch, str) or not arch:
        raise ModelError("%s: missing general.architecture" % path)
    weights_bytes = sum(b for _, b, _ in tensors)
    if data_end > size:
        raise ModelError("%s: truncated or malformed GGUF (its tensors end at byte %s of a %s-byte file)"
                         % (path, format(data_end, ","), format(size, ",")))

    def key(name, default=None, required=False):
        k = "%s.%s" % (arch, name)
        if k in meta:
            return meta[k]
        if required:
            raise ModelError("%s: missing %s" % (path, k))
        return default

    def whole(name, v, lo, hi):
        return _whole(path, "%s.%s" % (arch, name), v, lo, hi)

    notes = []
    layers = whole("block_count", key("block_count", required=True), 1, MAX_LAYERS)
    heads = _per_layer(path, arch + ".attention.head_count", key("attention.head_count", required=True), 1,
                       MAX_HEADS)
    dim = whole("embedding_length", key("embedding_length", required=True), 1, MAX_DIM)
    kv_heads = key("attention.head_count_kv")
    if kv_heads is None:
        kv_heads = heads
        notes.append("head_count_kv absent: MHA")
    kv_heads = _per_layer(path, arch + ".attention.head_count_kv", kv_heads, 1, MAX_HEADS)
    if kv_heads > heads or heads % kv_heads:
        raise ModelError("%s: %d attention heads are not a multiple of %d KV heads" % (path, heads, kv_heads))
    k_len = key("attention.key_length")
    if k_len is None:
        if dim % heads:
            raise ModelError("%s: embedding_length %d is not a multiple of %d heads and key_length is absent"
                             % (path, dim, heads))
        k_len = dim // heads
    k_len = whole("attention.key_length", k_len, 1, MAX_HEAD_DIM)
    v_len = whole("attention.value_length", key("attention.value_length", k_len), 1, MAX_HEAD_DIM)
    if v_len != k_len:
        raise ModelError("%s: key_length %d != value_length %d: not supported" % (path, k_len, v_len))
    hidden = key("feed_forward_length")
    if isinstance(hidden, list):
        hidden = max([whole("feed_forward_length", x, 0, MAX_HIDDEN) for x in hidden] or [None])
    if hidden is None:
        hidden = 4 * dim
        notes.append("feed_forward_length absent: 4 x embedding_length")
    hidden = whole("feed_forward_length", hidden, 1, MAX_HIDDEN)
    context = key("context_length")
    if context is None:
        context = 0
        notes.append("context_length absent: give --context")
    else:
        context = whole("context_length", context, 1, MAX_CONTEXT)
    vocab = key("vocab_size")
    if vocab is None:
        emb = [s for n, _, s in tensors if n == "token_embd.weight"]
        vocab = n_tokens if n_tokens else (emb[0][-1] if emb and len(emb[0]) > 1 else 0)
        vocab = _whole(path, "the vocabulary size (token_embd.weight)", vocab, 0, MAX_VOCAB)
    else:
        vocab = whole("vocab_size", vocab, 1, MAX_VOCAB)
    windows = []
    swa = key("attention.sliding_window")
    if swa is not None and not (swa == 0 and not isinstance(swa, bool)):
        swa = whole("attention.sliding_window", swa, 1, MAX_CONTEXT)
        pat = key("attention.sliding_window_pattern")
        if isinstance(pat, list):  # one flag per layer: true = sliding
            if len(pat) != layers:
                raise ModelError("%s: sliding_window_pattern has %d entries for %d layers" % (path, len(pat), layers))
            for p in pat:
                if not isinstance(p, (bool, int)) or p not in (0, 1):
                    raise ModelError("%s: %s.attention.sliding_window_pattern holds %s, expected true or false"
                                     % (path, arch, validate.show(p)))
            windows = [swa if p else 0 for p in pat]
        else:
            n = _PATTERNS.get(arch)  # llama.cpp: gemma2 every 2nd, gemma3 every 6th layer global
            if pat is not None:
                n = whole("attention.sliding_window_pattern", pat, 1, MAX_LAYERS)
            windows = [swa if not n or (i + 1) % n else 0 for i in range(layers)]
        notes.append("sliding window %d" % swa)
    names = set(n for n, _, _ in tensors)
    given = meta.get("general.name")
    spec = ModelSpec(given if isinstance(given, str) and given else os.path.basename(path), layers, heads,
                     kv_heads, k_len, dim, hidden, vocab, context, shared_classifier="output.weight" not in names,
                     layer_windows=windows, weights_dtype="f16", weights_file_bytes=weights_bytes,
                     source="GGUF %s (%s, %d tensors)" % (path, arch, len(tensors)), notes=notes,
                     context_key=arch + ".context_length")
    return spec


# ---- llama2.c .bin ----

def read_llama2c(path):
    """Header of a llama2.c .bin checkpoint (seven little-endian int32, then float32 weights) or of a
    `kvedge convert` int8 file, read and checked by the device's own reader (kvedge.model.checkpoint): the
    fields' ranges, and the file's size against the size the header implies, exactly."""
    from kvedge.model.header import CheckpointError, read_config
    try:
        cfg, dtype = read_config(path)
    except OSError as e:
        raise ModelError("%s: cannot read: %s" % (path, e.strerror or e))
    except CheckpointError as e:
        raise ModelError(str(e))
    size = os.path.getsize(path)
    kind = "llama2.c checkpoint" if dtype == "f32" else "kvedge int8 checkpoint"
    return ModelSpec(os.path.basename(path), cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.dim,
                     cfg.hidden_dim, cfg.vocab_size, cfg.seq_len, shared_classifier=cfg.shared_classifier,
                     weights_dtype=dtype, source="%s %s (%d bytes)" % (kind, path, size), context_key="seq_len")


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
