"""A small llama2.c-format model and tokenizer written from a seed, for tests and demos without a real model.

The writer is the device package's (kvedge.model.tiny, pure Python, same bytes on every runtime); this module
only puts the two files in a folder. The weights are random: the text it generates is not language."""
import os

from kvedge.model import tiny


def write(folder, seed=1, name="tiny", **shape):
    """Write NAME.bin and tok512.bin (the tokenizer name `kvedge generate` looks for beside a model) into
    folder; shape overrides kvedge.model.tiny.DEFAULT. Returns (model path, tokenizer path)."""
    os.makedirs(folder, exist_ok=True)
    model = os.path.join(folder, name + ".bin")
    tok = os.path.join(folder, "tok512.bin")
    s = tiny.write_checkpoint(model, seed=seed, **shape)
    tiny.write_tokenizer(tok, s["vocab_size"])
    return model, tok


def preset_shape(name):
    """kvedge.model.tiny's shape fields for a preset of kvedge_host.models (e.g. stories15m: dim 288, hidden 768,
    6 layers, 6 heads, 32,000 tokens, 256 positions). ModelError for an unknown preset or one whose layers are
    not all global (the runner's cache has one context for every layer)."""
    from ..models import ModelError, preset
    spec = preset(name)
    if any(spec.windows()):
        raise ModelError("preset %s: layers with their own sliding window: not a llama2.c model" % name)
    if spec.head_dim * spec.heads != spec.dim:
        raise ModelError("preset %s: head_dim %d x %d heads is not dim %d: not a llama2.c model"
                         % (name, spec.head_dim, spec.heads, spec.dim))
    return {"dim": spec.dim, "hidden_dim": spec.hidden_dim, "n_layers": spec.layers, "n_heads": spec.heads,
            "n_kv_heads": spec.kv_heads, "vocab_size": spec.vocab, "seq_len": spec.context}
