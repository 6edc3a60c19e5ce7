"""Readers of the model files users have, for `kvedge convert`: a Hugging Face Llama folder (config.json and
safetensors, single or sharded), a GGUF file of the llama architecture, and llama2.c checkpoints (v0 and
export.py's "ak42" versions 1 and 2). Each gives a Source (kvedge_host.readers.source): the model's llama2.c header (the device's
kvedge.model.header.ModelConfig) and its tensors in llama2.c's order and layout (q and k rows in the
interleaved RoPE order the device rotates), checked before anything is written; kvedge_host.readers.write puts
them in the device's files. Tokenizers: kvedge_host.readers.vocab.

A problem with a source raises kvedge_host.models.ModelError (one line naming the file and the problem)."""
import os

from ..models import ModelError


def open_source(path):
    """The Source a path names: a folder with config.json (Hugging Face), a .gguf file, or a llama2.c .bin."""
    from . import hf, ggufsrc, llama2c
    if os.path.isdir(path) or os.path.basename(path) == "config.json":
        return hf.HFSource(path)
    if not os.path.exists(path):
        raise ModelError("%s: no such file or folder" % path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return ggufsrc.GGUFSource(path)
    if path.lower().endswith(".safetensors"):
        raise ModelError("%s: a safetensors file alone has no config: give the folder holding config.json" % path)
    return llama2c.open_llama2c(path)
