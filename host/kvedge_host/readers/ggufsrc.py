"""A GGUF file of the llama architecture, read with the `gguf` package.

llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel) permutes q and k from Hugging Face's rotate_half
order back to the interleaved pairs its RoPE (and llama2.c's) rotates, so GGUF rows are already in the device's
order: no permutation here. Quantized tensors are dequantized by gguf.quants."""
import numpy as np

from .. import models
from ..models import ModelError
from .source import ROPE_THETA, RMS_EPS, Source, model_config

_LAYER = "blk.%d."
NAMES = {"embedding": "token_embd.weight", "rms_final": "output_norm.weight", "wcls": "output.weight",
         "rms_att": _LAYER + "attn_norm.weight", "rms_ffn": _LAYER + "ffn_norm.weight",
         "wq": _LAYER + "attn_q.weight", "wk": _LAYER + "attn_k.weight", "wv": _LAYER + "attn_v.weight",
         "wo": _LAYER + "attn_output.weight", "w1": _LAYER + "ffn_gate.weight", "w2": _LAYER + "ffn_down.weight",
         "w3": _LAYER + "ffn_up.weight"}
TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")


class GGUFSource(Source):
    def __init__(self, path):
        Source.__init__(self, path)
        spec = models.read_gguf(path)  # header, counts and tensor extents checked there
        from gguf import GGUFReader
        reader = GGUFReader(path, "r")
        arch = models._gguf_value(reader.fields["general.architecture"])
        if arch != "llama":
            raise ModelError("%s: architecture %s is not supported (the device runs llama)" % (path, arch))

        def meta(key, default=None):
            f = reader.fields.get(key)
            return models._gguf_value(f) if f is not None else default
        theta = meta("llama.rope.freq_base", ROPE_THETA)
        if float(theta) != ROPE_THETA:
            raise ModelError("%s: llama.rope.freq_base %s is not supported (the device's RoPE uses 10000)"
                             % (path, theta))
        for k in ("llama.rope.scaling.type", "llama.rope.scaling.factor"):
            v = meta(k)
            if v not in (None, "none", 1.0, 0.0):
                raise ModelError("%s: %s %s is not supported" % (path, k, v))
        rdim = meta("llama.rope.dimension_count", spec.head_dim)
        if rdim != spec.head_dim:
            raise ModelError("%s: llama.rope.dimension_count %s: the device rotates the whole head (%d)"
                             % (path, rdim, spec.head_dim))
        if spec.head_dim * spec.heads != spec.dim:
            raise ModelError("%s: key_length %d x %d heads != embedding_length %d: not supported"
                             % (path, spec.head_dim, spec.heads, spec.dim))
        if not spec.context:
            raise ModelError("%s: missing llama.context_length" % path)
        self.cfg = model_config(path, spec.dim, spec.hidden_dim, spec.layers, spec.heads, spec.kv_heads,
                                spec.vocab, spec.context, spec.shared_classifier)
        eps = meta("llama.attention.layer_norm_rms_epsilon", RMS_EPS)
        if abs(eps - RMS_EPS) > 1e-9:
            self.notes.append("layer_norm_rms_epsilon %g: the device's RMSNorm uses 1e-05" % eps)
        self._tensors = {t.name: t for t in reader.tensors}
        self._reader = reader
        self.kind = "GGUF llama file"
        if reader.fields.get("tokenizer.ggml.tokens") is not None:
            self.tokenizer_path = path

    def _name(self, name, layer):
        return NAMES[name] % layer if layer is not None else NAMES[name]

    def _check(self, name, layer):
        key = self._name(name, layer)
        t = self._tensors.get(key)
        if t is None:
            raise ModelError("%s: missing tensor %s" % (self.path, key))
        if t.tensor_type.name not in TYPES:
            raise ModelError("%s: tensor %s has type %s (supported: %s)" % (self.path, key, t.tensor_type.name,
                                                                           ", ".join(TYPES)))
        shape = tuple(int(x) for x in reversed(list(t.shape)))  # ggml lists the fastest dimension first
        if shape != self.shape(name):
            raise ModelError("%s: tensor %s has shape %s, expected %s" % (self.path, key, list(shape),
                                                                         list(self.shape(name))))
        return t

    def _tensor(self, name, layer):
        t = self._check(name, layer)
        from gguf.quants import dequantize
        a = dequantize(np.asarray(t.data), t.tensor_type)
        return np.asarray(a, dtype=np.float32).reshape(self.shape(name))
