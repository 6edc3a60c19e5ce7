"""One internal model description (ModelSpec) read from several sources."""
import os
import struct
from dataclasses import dataclass, field
from typing import Optional, List


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
    context: int
    shared_classifier: bool = True
    # per layer: sliding window size, or 0 for a global (full-context) layer
    layer_windows: List[int] = field(default_factory=list)
    weights_dtype: str = "f32"
    source: str = ""

    def windows(self):
        return self.layer_windows or [0] * self.layers


PRESETS = {
    "stories260k": dict(
        spec=ModelSpec("stories260K", 5, 8, 4, 8, 64, 172, 512, 512, source="llama2.c tinyllamas stories260K "
                       "(header: dim 64, hidden 172, 5 layers, 8 heads, 4 KV heads, vocab 512, seq 512)")),
}


def preset(name):
    if name not in PRESETS:
        raise ModelError("unknown preset %r (known: %s)" % (name, ", ".join(sorted(PRESETS))))
    return PRESETS[name]["spec"]


def read_llama2c(path):
    """Header of a llama2.c .bin checkpoint: seven little-endian int32."""
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
    if dim % heads or heads % kv_heads:
        raise ModelError("%s: llama2.c header has dim %d, %d heads, %d KV heads: not divisible"
                         % (path, dim, heads, kv_heads))
    return ModelSpec(os.path.basename(path), layers, heads, kv_heads, dim // heads, dim, hidden, vocab, seq,
                     shared_classifier=shared, source="llama2.c checkpoint %s (%d bytes)" % (path, size))


def load(path=None, preset_name=None):
    if preset_name:
        return preset(preset_name)
    if path.endswith(".bin"):
        return read_llama2c(path)
    raise ModelError("%s: unknown model file type (expected .bin, config.json or .gguf)" % path)
