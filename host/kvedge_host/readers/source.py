"""What every reader shares: Source (a model to convert, its tensors in llama2.c's order and shapes, checked),
model_config (the device's ModelConfig, errors naming the file), to_interleaved (Hugging Face's RoPE row order to
llama2.c's) and the device's fixed rules a source must match. The readers (hf, ggufsrc, llama2c) import it;
kvedge_host.readers.open_source picks one of them."""
import numpy as np

from ..models import ModelError

# the device's fixed rules a source must match (kvedge/model/pass_float.py: RMSNorm eps 1e-5, RoPE base 10000)
ROPE_THETA = 10000.0
RMS_EPS = 1e-5


class Source:
    """One model to convert. cfg: kvedge ModelConfig; kind: what the file is; notes: what the user should know;
    tokenizer_path: the tokenizer found beside the weights (or None). tensor(name, layer) returns a float32
    numpy array of the llama2.c shape: names embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
    rms_final, wcls (only when not shared)."""
    kind = ""
    tokenizer_path = None

    def __init__(self, path):
        self.path = path
        self.notes = []

    def shape(self, name):
        c = self.cfg
        d, h, kv, v = c.dim, c.hidden_dim, c.kv_dim, c.vocab_size
        return {"embedding": (v, d), "wcls": (v, d), "rms_att": (d,), "rms_ffn": (d,), "rms_final": (d,),
                "wq": (d, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, d), "w1": (h, d), "w2": (d, h),
                "w3": (h, d)}[name]

    def names(self):
        """(name, layer) of every tensor in llama2.c's file order (layer None for the unlayered ones)."""
        L = range(self.cfg.n_layers)
        out = [("embedding", None)] + [("rms_att", l) for l in L]
        for n in ("wq", "wk", "wv", "wo"):
            out += [(n, l) for l in L]
        out += [("rms_ffn", l) for l in L]
        for n in ("w1", "w2", "w3"):
            out += [(n, l) for l in L]
        out.append(("rms_final", None))
        if not self.cfg.shared_classifier:
            out.append(("wcls", None))
        return out

    def check(self):
        """Every tensor present with its llama2.c shape and a supported type, from the file's tables only (no
        data read): raises ModelError before anything is written."""
        for name, layer in self.names():
            self._check(name, layer)

    def tensor(self, name, layer=None):
        a = np.asarray(self._tensor(name, layer), dtype=np.float32)
        want = self.shape(name)
        if a.shape != want:
            raise ModelError("%s: %s has shape %s, expected %s" % (self.path, self.label(name, layer),
                                                                   list(a.shape), list(want)))
        if not np.isfinite(a).all():
            raise ModelError("%s: %s holds NaN or infinity" % (self.path, self.label(name, layer)))
        return a

    def label(self, name, layer):
        return name if layer is None else "%s of layer %d" % (name, layer)


def model_config(path, dim, hidden, layers, heads, kv_heads, vocab, context, shared):
    """The device's ModelConfig (its checks: ranges, dim a multiple of heads, even head_dim), errors naming
    the file."""
    from kvedge.model.header import CheckpointError, ModelConfig
    try:
        return ModelConfig(dim, hidden, layers, heads, kv_heads, vocab if shared else -vocab, context)
    except CheckpointError as e:
        raise ModelError("%s: %s" % (path, e.args[0]))


def to_interleaved(w, heads):
    """Rows of a q or k projection from Hugging Face's rotate_half order (per head: the first halves of the
    pairs, then the second halves) to the interleaved order (2i, 2i+1) llama2.c's RoPE rotates: the inverse of
    the permutation transformers' convert_llama_weights_to_hf.py applies."""
    rows, cols = w.shape
    hd = rows // heads
    return w.reshape(heads, 2, hd // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)
