"""A Hugging Face Llama folder: config.json (LlamaForCausalLM), model.safetensors or shards listed by
model.safetensors.index.json, and tokenizer.json or tokenizer.model beside them.

transformers' Llama applies RoPE with rotate_half (the pairs are (i, i + head_dim/2)); llama2.c and the device
rotate (2i, 2i+1): q_proj and k_proj rows are permuted back (kvedge_host.readers.source.to_interleaved)."""
import json
import os

import numpy as np

from .. import validate
from ..models import ModelError, from_hf_config
from ..validate import InputError
from .source import RMS_EPS, ROPE_THETA, Source, model_config, to_interleaved

ARCHITECTURES = ("LlamaForCausalLM",)
_LAYER = "model.layers.%d."
NAMES = {"embedding": "model.embed_tokens.weight", "rms_final": "model.norm.weight", "wcls": "lm_head.weight",
         "rms_att": _LAYER + "input_layernorm.weight", "rms_ffn": _LAYER + "post_attention_layernorm.weight",
         "wq": _LAYER + "self_attn.q_proj.weight", "wk": _LAYER + "self_attn.k_proj.weight",
         "wv": _LAYER + "self_attn.v_proj.weight", "wo": _LAYER + "self_attn.o_proj.weight",
         "w1": _LAYER + "mlp.gate_proj.weight", "w2": _LAYER + "mlp.down_proj.weight",
         "w3": _LAYER + "mlp.up_proj.weight"}
DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}  # BF16: the high half of an f32


def _load_json(path):
    try:
        return validate.load_json(path)
    except InputError as e:
        raise ModelError(str(e))


class HFSource(Source):
    def __init__(self, path):
        folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
        cpath = os.path.join(folder, "config.json")
        Source.__init__(self, folder)
        if not os.path.exists(cpath):
            raise ModelError("%s: a folder without config.json" % folder)
        cfg = _load_json(cpath)
        if not isinstance(cfg, dict):
            raise ModelError("%s: expected a JSON object" % cpath)
        arch = cfg.get("architectures")
        if not isinstance(arch, list) or not arch or not all(isinstance(a, str) for a in arch):
            raise ModelError("%s: architectures is %s, expected a list such as [\"LlamaForCausalLM\"]"
                             % (cpath, validate.show(arch)))
        if arch[0] not in ARCHITECTURES:
            raise ModelError("%s: architecture %s is not supported (the device runs %s)"
                             % (cpath, arch[0], ", ".join(ARCHITECTURES)))
        self._refuse(cpath, cfg)
        spec = from_hf_config(cfg, cpath)
        if spec.head_dim * spec.heads != spec.dim:
            raise ModelError("%s: head_dim %d x %d heads != hidden_size %d: the device needs head_dim = hidden_size "
                             "/ heads" % (cpath, spec.head_dim, spec.heads, spec.dim))
        if not spec.context:
            raise ModelError("%s: missing max_position_embeddings" % cpath)
        self.cfg = model_config(cpath, spec.dim, spec.hidden_dim, spec.layers, spec.heads, spec.kv_heads,
                                spec.vocab, spec.context, spec.shared_classifier)
        eps = cfg.get("rms_norm_eps", RMS_EPS)
        if eps != RMS_EPS:
            self.notes.append("rms_norm_eps %g: the device's RMSNorm uses 1e-05" % eps)
        self.kind = "Hugging Face %s folder" % arch[0]
        self._files = self._weight_files(folder)
        self._open = {}
        for n in ("tokenizer.json", "tokenizer.model"):
            if os.path.exists(os.path.join(folder, n)):
                self.tokenizer_path = os.path.join(folder, n)
                break

    @staticmethod
    def _refuse(cpath, cfg):
        """What the device's Llama does not compute: another RoPE base or scaling, biases, another activation."""
        theta = cfg.get("rope_theta", ROPE_THETA)
        if not isinstance(theta, (int, float)) or isinstance(theta, bool) or float(theta) != ROPE_THETA:
            raise ModelError("%s: rope_theta %s is not supported (the device's RoPE uses 10000)"
                             % (cpath, validate.show(theta)))
        if cfg.get("rope_scaling") is not None:
            raise ModelError("%s: rope_scaling %s is not supported" % (cpath, validate.show(cfg["rope_scaling"])))
        prf = cfg.get("partial_rotary_factor", 1.0)
        if prf != 1.0:
            raise ModelError("%s: partial_rotary_factor %s is not supported (the device rotates the whole head)"
                             % (cpath, validate.show(prf)))
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ModelError("%s: hidden_act %s is not supported (SwiGLU with silu only)" % (cpath, validate.show(act)))
        for k in ("attention_bias", "mlp_bias"):
            if cfg.get(k):
                raise ModelError("%s: %s is not supported (the device's matrices have no bias)" % (cpath, k))

    def _weight_files(self, folder):
        """tensor name -> file: the index's weight_map for sharded checkpoints, else model.safetensors."""
        index = os.path.join(folder, "model.safetensors.index.json")
        single = os.path.join(folder, "model.safetensors")
        if os.path.exists(index):
            doc = _load_json(index)
            wmap = doc.get("weight_map") if isinstance(doc, dict) else None
            if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
                raise ModelError("%s: expected a weight_map of tensor names to shard files" % index)
            out = {}
            for name, fname in wmap.items():
                if os.path.basename(fname) != fname:
                    raise ModelError("%s: shard %s is not a file beside the index" % (index, validate.show(fname)))
                out[name] = os.path.join(folder, fname)
            return out
        if not os.path.exists(single):
            raise ModelError("%s: no model.safetensors or model.safetensors.index.json" % folder)
        return None  # every name in the one file

    def _handle(self, name):
        """(the safetensors file holding name, its open handle), or ModelError when the tensor is missing."""
        from safetensors import SafetensorError, safe_open
        fpath = os.path.join(self.path, "model.safetensors") if self._files is None else self._files.get(name)
        if fpath is None:
            raise ModelError("%s: missing tensor %s (not in model.safetensors.index.json)" % (self.path, name))
        if fpath not in self._open:
            if not os.path.exists(fpath):
                raise ModelError("%s: no such shard (it holds %s)" % (fpath, name))
            try:
                self._open[fpath] = safe_open(fpath, framework="numpy")
            except (SafetensorError, OSError, ValueError) as e:
                raise ModelError("%s: truncated or malformed safetensors (%s)" % (fpath, str(e).splitlines()[0]))
        h = self._open[fpath]
        if name not in h.keys():
            raise ModelError("%s: missing tensor %s" % (fpath, name))
        return fpath, h

    def _name(self, name, layer):
        return NAMES[name] % layer if layer is not None else NAMES[name]

    def _check(self, name, layer):
        key = self._name(name, layer)
        fpath, h = self._handle(key)
        sl = h.get_slice(key)
        dt, shape = sl.get_dtype(), tuple(sl.get_shape())
        if dt not in DTYPES:
            raise ModelError("%s: tensor %s has type %s (supported: %s)" % (fpath, key, dt, ", ".join(DTYPES)))
        if shape != self.shape(name):
            raise ModelError("%s: tensor %s has shape %s, expected %s" % (fpath, key, list(shape),
                                                                         list(self.shape(name))))

    def _tensor(self, name, layer):
        key = self._name(name, layer)
        self._check(name, layer)
        fpath, h = self._handle(key)
        if h.get_slice(key).get_dtype() == "BF16":
            a = _bf16(fpath, key)
        else:
            a = h.get_tensor(key)
        a = np.asarray(a, dtype=np.float32)
        if name == "wq":
            a = to_interleaved(a, self.cfg.n_heads)
        elif name == "wk":
            a = to_interleaved(a, self.cfg.n_kv_heads)
        return a


def _bf16(fpath, key):
    """A BF16 tensor as float32 (numpy has no bfloat16): its bytes from the safetensors header's offsets (the
    file was opened by safetensors first, which checked the header and that the data covers the file)."""
    with open(fpath, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
        lo, hi = head[key]["data_offsets"]
        f.seek(8 + n + lo)
        raw = np.frombuffer(f.read(hi - lo), dtype="<u2")
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(head[key]["shape"])
