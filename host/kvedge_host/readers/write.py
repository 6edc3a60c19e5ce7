"""The device's weight files from a Source: llama2.c's f32 file (v0, what kvedge.model.checkpoint reads), and
from it kvedge's int8 file through the device's own converter (kvedge.model.convert: one rule for the int8
rows, whoever writes them). One tensor is held at a time."""
import numpy as np

from . import ROPE_THETA


def write_f32(src, out):
    """llama2.c's v0 file of src into out (a path); returns its length in bytes."""
    cfg = src.cfg
    with open(out, "wb") as f:
        f.write(cfg.header())
        for name, layer in src.names():
            if name == "wcls":  # after the two legacy RoPE tables
                _rope_tables(f, cfg)
            src.tensor(name, layer).astype("<f4").tofile(f)
            if name == "rms_final" and cfg.shared_classifier:
                _rope_tables(f, cfg)
        return f.tell()


def _rope_tables(f, cfg):
    """llama2.c's legacy freq_cis_real and freq_cis_imag (seq_len x head_dim/2 each): no reader uses them (run.c
    and the device skip them), written as llama2.c's export wrote them."""
    hd = cfg.head_dim
    freqs = 1.0 / (ROPE_THETA ** (np.arange(0, hd, 2)[: hd // 2].astype(np.float32) / hd))
    ang = np.outer(np.arange(cfg.seq_len, dtype=np.float32), freqs)
    np.cos(ang).astype("<f4").tofile(f)
    np.sin(ang).astype("<f4").tofile(f)


def write_i8(src, out, tmp):
    """kvedge's int8 file of src into out, through llama2.c's f32 file at tmp (removed by the caller)."""
    from kvedge.model.checkpoint import convert_to_i8
    write_f32(src, tmp)
    return convert_to_i8(tmp, out)[1]
