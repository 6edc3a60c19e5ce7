"""A small llama2.c-format model and tokenizer written from a seed, for tests and demos without a real model.

The writer is the device package's (kvedge.model.tiny, pure Python, same bytes on every runtime); this module
only puts the two files in a folder. The weights are random: the text it generates is not language."""
import os

from kvedge.model import tiny


def write(folder, seed=1, **shape):
    """Write tiny.bin and tok512.bin (the tokenizer name `kvedge generate` looks for beside a model) into
    folder; shape overrides kvedge.model.tiny.DEFAULT. Returns (model path, tokenizer path)."""
    os.makedirs(folder, exist_ok=True)
    model = os.path.join(folder, "tiny.bin")
    tok = os.path.join(folder, "tok512.bin")
    s = tiny.write_checkpoint(model, seed=seed, **shape)
    tiny.write_tokenizer(tok, s["vocab_size"])
    return model, tok
